"""Every consumer of the trace collection gets the same folder checks (``check_trace_set``,
run by ``load_trace_dir``): ``spotfleet stats / market load / forecast``, the pipeline's
``MarketConfig`` (the Dagster assets and the planner read its traces), the local fleet's
``--market traces``, and ``Market.from_dir`` (fleet-sim).

Before the checks moved into ``load_trace_dir`` only ``Market.from_dir`` refused these
folders: ``spotfleet stats`` printed 0.000 availability for a folder with no zone ever up
(exit 0) and ``spotfleet forecast`` forecast P(up) = 1.00 for it.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest

from assets.fleet_adapter import market_traces
from fleet.market.config import MarketConfig
from fleet.market.traces import TraceFormatError, check_trace_set, load_trace, load_trace_dir
from fleet.simulation.market import Market
from pipelines.cli import main

INFO = {"price": 18.98, "on_demand_price": 88.49, "machine_type": "a3-highgpu-8g"}


def _file(path, data, gap=195, **meta):
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {"prices": [18.98] * len(data)} if "price_info" in meta else {}
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap, **meta}, "data": data, **extra}))
    return path


def _never_up(tmp_path):
    d = tmp_path / "never-up"
    for z in ("us-east-1a", "us-east-2a"):
        _file(d / f"{z}_v100_1.json", [0] * 40)
    return d, "no zone is ever available (every count is 0", str(d)


def _too_few_nodes(tmp_path):
    d = tmp_path / "4-node" / "aws-x"  # the folder says 4 nodes; no file ever holds 4
    _file(d / "us-east-1a_v100_1.json", [0, 1, 2, 3] * 10)
    _file(d / "us-east-2a_v100_1.json", [0, 1, 2, 2] * 10)
    return d, "no zone ever has 4 instance(s) available", "to at most 3"


def _mixed_gaps(tmp_path):
    d = tmp_path / "mixed-gaps"
    _file(d / "us-east-1a_v100_1.json", [1, 0] * 20, gap=195)
    _file(d / "us-east-2a_v100_1.json", [1, 0] * 20, gap=32)
    return d, "different gap_seconds [32.0, 195.0]", "us-east-2a_v100_1.json"


def _duplicate(tmp_path):
    d = tmp_path / "dup"
    for name in ("us-central1-a_h100_16.json", "us-central1-a_h100_8.json"):  # same machine
        _file(d / name, [0, 1] * 20, gap=600, zone="us-central1-a", price_info=INFO)
    return d, "appears twice", "us-central1-a_h100_8.json"


def _mixed_nodes(tmp_path):
    d = tmp_path / "nodes"
    _file(d / "us-east-1a_v100_1.json", [2, 1] * 20, nodes=2)
    _file(d / "us-east-2a_v100_1.json", [4, 1] * 20, nodes=4)
    return d, "different node counts [2, 4]", "us-east-2a_v100_1.json"


CASES = {"never up": _never_up, "too few nodes": _too_few_nodes, "mixed gaps": _mixed_gaps,
         "duplicate entry": _duplicate, "mixed node counts": _mixed_nodes}


@pytest.mark.parametrize("case", CASES)
def test_load_trace_dir_refuses_naming_the_folder_or_file_and_the_fix(tmp_path, case):
    d, needle, where = CASES[case](tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused: no per-file warning comes out first
        with pytest.raises(TraceFormatError) as exc:
            load_trace_dir(d)
    assert needle in str(exc.value) and where in str(exc.value)
    assert str(d) in str(exc.value)
    with pytest.raises(TraceFormatError, match=re.escape(needle)):
        Market.from_dir(d)  # fleet-sim's path: the same check, the same message


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["market", "load"],
                                     ["forecast", "--samples", "50"]])
@pytest.mark.parametrize("case", CASES)
def test_cli_commands_exit_2_with_one_error_line(tmp_path, capsys, command, case):
    d, needle, where = CASES[case](tmp_path)
    rc = main([*command, str(d)])
    cap = capsys.readouterr()
    name = command[0]
    assert rc == 2, (command, case, cap.out)
    assert cap.err.startswith(f"spotfleet {name}: error: ") and needle in cap.err and where in cap.err
    assert "Traceback" not in cap.err and "warning" not in cap.err
    assert cap.out == ""  # no table of zeros, no forecast


@pytest.mark.parametrize("case", ["never up", "mixed gaps", "mixed node counts"])
def test_pipeline_market_config_refuses_for_the_assets(tmp_path, case):
    d, needle, where = CASES[case](tmp_path)
    cfg = {"kind": "traces", "trace_dir": str(d), "hours": 1.0}
    for part in ("history", "all"):
        with pytest.raises(TraceFormatError) as exc:
            market_traces(cfg, part)  # what the Dagster assets call
        assert needle in str(exc.value) and where in str(exc.value)
        with pytest.raises(TraceFormatError):
            MarketConfig(**cfg).traces(part)


@pytest.mark.parametrize("case", ["never up", "duplicate entry", "mixed node counts"])
def test_local_fleet_refuses_before_starting_anything(tmp_path, capsys, case):
    d, needle, where = CASES[case](tmp_path)
    work = tmp_path / "work"
    rc = main(["local-fleet", "run", "--market", "traces", "--traces-dir", str(d),
               "--workdir", str(work)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("spotfleet local-fleet: error: ") and needle in err
    assert where in err and "Traceback" not in err
    assert not (work / "fleet").exists() and not (work / "checkpoints").exists()


def test_local_fleet_checks_the_zones_it_replays(tmp_path, capsys):
    # the folder has a zone up, but --zones 1 replays only the never-up first zone
    d = tmp_path / "first-down"
    _file(d / "us-east-1a_v100_1.json", [0] * 40)
    _file(d / "us-east-2a_v100_1.json", [1, 0] * 20)
    rc = main(["local-fleet", "run", "--market", "traces", "--traces-dir", str(d),
               "--zones", "1", "--workdir", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert rc == 2 and "(its first 1 zone(s), --zones 1)" in err
    assert "no zone is ever available" in err


def test_one_zone_never_up_still_loads_with_its_warning(tmp_path, capsys):
    d = tmp_path / "one-down"
    _file(d / "us-east-1a_v100_1.json", [0] * 40)
    _file(d / "us-east-2a_v100_1.json", [1, 0] * 20)
    with pytest.warns(UserWarning, match="zone us-east-1a never has 1 instance"):
        assert len(load_trace_dir(d)) == 2
    assert main(["stats", str(d)]) == 0
    cap = capsys.readouterr()
    assert "spotfleet stats: warning: " in cap.err and "us-east-2a" in cap.out


def test_instance_types_filter_runs_before_the_checks(tmp_path):
    # two instance types of different node counts in one folder: one type is one market
    d = tmp_path / "types"
    _file(d / "us-east-1a_v100_1.json", [1, 0] * 20, nodes=1)
    _file(d / "us-east-1a_v100_8.json", [2, 0] * 20, nodes=2)
    with pytest.raises(TraceFormatError, match="different node counts"):
        load_trace_dir(d)
    only = load_trace_dir(d, instance_types=["v100_8"])
    assert [t.instance_type for t in only] == ["v100_8"] and only[0].nodes == 2
    assert Market.from_dir(d, instance_types=["v100_1"]).zones == ("us-east-1a",)
    with pytest.raises(ValueError, match=r"has instance type \['a100'\]"):
        load_trace_dir(d, instance_types=["a100"])


def test_in_memory_traces_get_the_structural_checks_not_the_up_check(tmp_path):
    with pytest.warns(UserWarning, match="never has 1 instance"):
        t = load_trace(_file(tmp_path / "us-east-1a_v100_1.json", [0] * 10))
    check_trace_set([t], require_up=False)  # an all-down market made in memory is allowed
    with pytest.raises(TraceFormatError, match="no zone is ever available"):
        check_trace_set([t], "here")
    with pytest.raises(TraceFormatError, match="appears twice"):
        Market.from_traces([t, t])


@pytest.mark.parametrize("folder", ["spot-traces/availability/1-node/aws-02-15-2023",
                                    "spot-traces/preemption/1-node/aws-04-22-2023",
                                    "gcp-h100-2025"])
def test_every_real_folder_still_loads_for_every_consumer(shared_data, folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traces = load_trace_dir(shared_data / folder)
        hist = MarketConfig(kind="traces", trace_dir=str(shared_data / folder)).traces()
    assert len(traces) == len(hist) == len(list((shared_data / folder).glob("*.json")))
    assert all(t.up().any() for t in traces)
