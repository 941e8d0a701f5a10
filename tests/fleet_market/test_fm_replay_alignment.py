"""The local fleet and the forecast read multi-instance and uneven folders truthfully.

Found and confirmed before the fix (each test below failed on 040f071):

* a folder with several instance types in one zone (the public aws-10-26-2022 folder has
  k80_1, k80_8, v100_1 and v100_8 in the same zones; not in ../shared, so built here) made
  ``spotfleet local-fleet run --market traces`` stop on ``two traces for zone
  'us-east-1a'; pass one trace per zone`` with no way to pass one: the command had no
  instance type filter, and the message named neither the types nor a fix;
* files of different lengths: ``spotfleet forecast`` (and ``plan``) forecast each zone from
  its own last tick (zones misaligned in time) and the local fleet wrapped each zone at its
  own length, both silently (``Market`` cuts to the shortest and warns);
* ``MarketConfig.traces("history")`` cut to ``hours`` after the folder check, so a short
  window with every zone down went through to the statistics and forecasts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import warnings

import numpy as np
import pytest

from assets.fleet_adapter import market_traces
from fleet.emulation.injector import CapacitySchedule
from fleet.market.config import MarketConfig
from fleet.market.traces import load_trace, load_trace_dir
from fleet.simulation.market import Market
from fleet.stats.forecast import forecast_zones
from pipelines.cli import main
from pipelines.commands import local_fleet


def _file(path, data, gap=195, **meta):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap, **meta}, "data": data}))
    return path


def _mixed(tmp_path):
    """aws-10-26-2022's shape: two instance types in each zone."""
    d = tmp_path / "aws-mixed"
    for z in ("us-east-1a", "us-west-2b"):
        _file(d / f"{z}_k80_1.json", [1, 0] * 20)
        _file(d / f"{z}_v100_1.json", [1, 1, 0, 0] * 10)
    return d


def _uneven(tmp_path):
    d = tmp_path / "uneven"
    _file(d / "us-east-1a_v100_1.json", [1] * 6 + [0] * 4)  # 10 ticks
    _file(d / "us-east-2a_v100_1.json", [0, 1] * 3)  # 6 ticks
    return d


def _args(d, **kw):
    base = dict(zones=3, market="traces", traces_dir=d, start_hour=0.0, instance_types="")
    return argparse.Namespace(**{**base, **kw})


# -- 1. several instance types in one zone --------------------------------------------------

def test_local_fleet_mixed_folder_names_the_flag_and_the_choices(tmp_path, capsys):
    d = _mixed(tmp_path)
    work = tmp_path / "work"
    rc = main(["local-fleet", "run", "--market", "traces", "--traces-dir", str(d),
               "--workdir", str(work)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("spotfleet local-fleet: error: ")
    assert "--instance-types" in err and "['k80_1', 'v100_1']" in err and "us-east-1a" in err
    assert "Traceback" not in err and not (work / "fleet").exists()


def test_local_fleet_instance_types_keeps_one_type_per_zone(tmp_path):
    d = _mixed(tmp_path)
    s = local_fleet._schedule(_args(d, instance_types="v100_1"))
    assert s.zones == ["us-east-1a", "us-west-2b"]
    assert {t.instance_type for t in s.traces.values()} == {"v100_1"}
    assert [bool(x) for x in s.traces["us-east-1a"].up()[:4]] == [True, True, False, False]
    # --instance-types v100 (the accelerator) keeps one type here too; k80 the other
    assert local_fleet._schedule(_args(d, instance_types="k80")).traces[
        "us-west-2b"].instance_type == "k80_1"
    with pytest.raises(ValueError, match=r"has instance type \['a100'\]"):
        local_fleet._schedule(_args(d, instance_types="a100"))


def test_capacity_schedule_refuses_two_types_in_one_zone_naming_them(tmp_path):
    d = _mixed(tmp_path)
    with pytest.raises(ValueError) as exc:
        CapacitySchedule(load_trace_dir(d))
    msg = str(exc.value)
    assert "us-east-1a" in msg and "k80_1" in msg and "v100_1" in msg
    assert "--instance-types" in msg and "instance_types" in msg


def test_pipeline_market_instance_types_filter(tmp_path):
    d = _mixed(tmp_path)
    cfg = MarketConfig(kind="traces", trace_dir=str(d), hours=1.0, instance_types=["v100_1"])
    assert {t.instance_type for t in cfg.traces("all")} == {"v100_1"}
    assert CapacitySchedule(cfg.traces("all")).zones == ["us-east-1a", "us-west-2b"]
    with pytest.raises(ValueError, match="instance_types"):  # without it: the named refusal
        CapacitySchedule(MarketConfig(kind="traces", trace_dir=str(d)).traces("all"))


# -- 2. files of different lengths -----------------------------------------------------------

def test_forecast_starts_every_zone_at_the_common_end_with_one_warning(tmp_path):
    traces = load_trace_dir(_uneven(tmp_path))
    with pytest.warns(UserWarning, match="differ in length") as rec:
        fcs = forecast_zones(traces, None, 1.0, n_samples=20)
    assert [f.now_tick for f in fcs] == [6, 6]
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "us-east-1a_v100_1.json" in msg and "10 ticks" in msg
    assert "us-east-2a_v100_1.json" in msg and "6 ticks" in msg
    # an explicit --now-tick is one moment for every zone already: no cut, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [f.now_tick for f in forecast_zones(traces, 4, 1.0, n_samples=20)] == [4, 4]


def test_forecast_cli_warns_and_aligns(tmp_path, capsys):
    d = _uneven(tmp_path)
    assert main(["forecast", str(d), "--json", "--samples", "20", "--horizon", "1"]) == 0
    cap = capsys.readouterr()
    assert [f["now_tick"] for f in json.loads(cap.out)] == [6, 6]
    assert cap.err.count("spotfleet forecast: warning: traces differ in length") == 1


def test_capacity_schedule_wraps_every_zone_at_the_common_length(tmp_path):
    traces = load_trace_dir(_uneven(tmp_path))
    with pytest.warns(UserWarning, match="differ in length") as rec:
        s = CapacitySchedule(traces)
    assert len(rec) == 1 and "us-east-1a_v100_1.json" in str(rec[0].message)
    assert {t.n_ticks for t in s.traces.values()} == {6}
    # tick 6 is tick 0 again for both zones (was: us-east-1a's own tick 6, down)
    assert s.is_up("us-east-1a", 6 * 195.0) and not s.is_up("us-east-2a", 6 * 195.0)
    assert s.is_up("us-east-1a", 0.0) == s.is_up("us-east-1a", 6 * 195.0)


def test_local_fleet_traces_are_cut_with_the_warning(tmp_path):
    with pytest.warns(UserWarning, match="cut to the shortest"):
        s = local_fleet._schedule(_args(_uneven(tmp_path)))
    assert {t.n_ticks for t in s.traces.values()} == {6}


def test_market_uses_the_same_rule_and_message(tmp_path):
    traces = load_trace_dir(_uneven(tmp_path))
    with pytest.warns(UserWarning, match="differ in length") as rec:
        m = Market.from_traces(traces)
    msg = str(rec[0].message)
    assert m.n_ticks == 6 and "cut to the shortest" in msg
    assert "us-east-1a_v100_1.json" in msg and "us-east-2a_v100_1.json" in msg


def test_cut_to_common_length_cuts_prices_and_keeps_even_sets(tmp_path):
    a = load_trace(_file(tmp_path / "us-east-1a_v100_1.json", [1, 0] * 5))
    b = load_trace(_file(tmp_path / "us-east-2a_v100_1.json", [1, 0] * 3))
    from fleet.market.traces import cut_to_common_length  # the shared rule (Market's)

    a = dataclasses.replace(a, spot_prices=np.arange(1.0, 11.0))
    with pytest.warns(UserWarning, match="differ in length"):
        out = cut_to_common_length([a, b])
    assert [t.n_ticks for t in out] == [6, 6] and out[0].spot_prices.tolist() == [1, 2, 3, 4, 5, 6]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = cut_to_common_length([b, b])
    assert [t.n_ticks for t in same] == [6, 6]


# -- 3. a history window with no zone up -----------------------------------------------------

def _late(tmp_path):
    d = tmp_path / "late"
    for z in ("us-east-1a", "us-east-2a"):  # capacity only from tick 20 (1.08 h of 195 s)
        _file(d / f"{z}_v100_1.json", [0] * 20 + [1, 0] * 20)
    return d


def test_history_window_with_no_zone_up_is_refused_naming_the_window(tmp_path):
    d = _late(tmp_path)
    cfg = {"kind": "traces", "trace_dir": str(d), "hours": 0.5}
    for call in (lambda: MarketConfig(**cfg).traces("history"), lambda: market_traces(cfg)):
        with pytest.raises(ValueError) as exc:
            call()
        msg = str(exc.value)
        assert "first 0.5 h" in msg and str(d) in msg and "hours" in msg
        assert "1.14" in msg  # the first up tick ends at 21 x 195 s = 1.14 h: the fix
    ok = MarketConfig(**{**cfg, "hours": 1.2}).traces("history")
    assert any(t.up().any() for t in ok)
    assert len(MarketConfig(**cfg).traces("all")) == 2  # the replay's whole market is fine
