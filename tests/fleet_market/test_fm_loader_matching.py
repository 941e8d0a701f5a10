"""The loader matches what it reads to what it means: a price series to its (zone,
instance type), a file to the trace file name, a tick to whole seconds. Malformed inputs are
built in ``tmp_path``; the real folders are read from ``../shared/data`` by path.

Each case was found by an audit of ``spotfleet fleet-sim`` (2026-11-28): before the fix a
price series of another instance type was used for a zone's trace (matched by zone alone),
a price file among the traces was reported as a trace without ``gap_seconds``, deeply
nested JSON gave a ``RecursionError`` traceback, and a 195.5 s tick was read and failed
after the run's header without naming a file.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from fleet.market.traces import (
    TraceFormatError,
    attach_spot_prices,
    load_trace,
    load_trace_dir,
)
from fleet.simulation.market import Market

V100 = "spot-traces/availability/1-node/aws-02-15-2023"
V100_PRICES = "spot-prices/aws-v100-02-15-2023.json"


def _file(path, data, gap=195, **meta):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap, **meta}, "data": list(data)}))
    return path


def _folder(d, names=("us-east-1a_v100_1", "us-east-2a_v100_1"), data=(1, 1, 0, 1) * 50):
    for n in names:
        _file(d / f"{n}.json", data)
    return d


def _prices(path, series):
    path.write_text(json.dumps(series))
    return path


def test_a_series_of_another_instance_type_is_refused_not_used(tmp_path):
    d = _folder(tmp_path / "t")
    p = _prices(tmp_path / "p.json", {f"{z}_a100_8": [9.0] * 200
                                      for z in ("us-east-1a", "us-east-2a")})
    with pytest.raises(TraceFormatError) as exc:
        Market.from_dir(d, prices=p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: no price series for 2 (zone, instance) of the traces")
    assert "'us-east-1a_v100_1', 'us-east-2a_v100_1'" in msg
    assert "us-east-1a_a100_8" in msg and "another machine's prices" in msg
    assert "<zone>_<instance>" in msg
    with pytest.raises(TraceFormatError) as plan_exc:  # plan --prices: the same rule
        attach_spot_prices(load_trace_dir(d), p)
    assert str(plan_exc.value) == msg


def test_two_instance_types_in_one_zone_get_their_own_series(tmp_path):
    d = _folder(tmp_path / "t", names=("us-east-1a_v100_1", "us-east-1a_v100_8",
                                       "us-east-2a_v100_1"))
    one = {"us-east-1a_v100_1": [1.0] * 200, "us-east-2a_v100_1": [0.9] * 200}
    with pytest.raises(TraceFormatError, match=r"no price series for 1 \(zone, instance\) of "
                                               r"the traces: \['us-east-1a_v100_8'\]"):
        Market.from_dir(d, prices=_prices(tmp_path / "one.json", one))
    both = _prices(tmp_path / "both.json", {**one, "us-east-1a_v100_8": [8.0] * 200})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = Market.from_dir(d, prices=both)
    by_zone = dict(zip(m.zones, m.spot_price[:, 0], strict=True))
    assert by_zone == {"us-east-1a/v100_1": 1.0, "us-east-1a/v100_8": 8.0, "us-east-2a": 0.9}
    traces = attach_spot_prices(load_trace_dir(d), both)
    assert [float(t.spot_prices[0]) for t in traces] == [1.0, 8.0, 0.9]


def _nomad(path, zone):
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {"price": 18.0, "on_demand_price": 80.0, "machine_type": "a3-highgpu-8g"}
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600, "zone": zone,
                                             "price_info": info}, "data": [0, 1, 0, 0] * 30}))


@pytest.mark.parametrize("label", ["h100_16", "a3-highgpu-8g"])
def test_a_series_may_name_the_file_label_or_the_machine_type(tmp_path, label):
    """A SkyNomad file's instance type is its machine type (a3-highgpu-8g), its file label
    h100_16: a price file may use either (the reason the zone-only match existed)."""
    d = tmp_path / "h"
    for z in ("us-central1-a", "us-east4-a"):
        _nomad(d / f"{z}_h100_16.json", z)
    p = _prices(tmp_path / "p.json", {f"{z}_{label}": [7.0] * 120
                                      for z in ("us-central1-a", "us-east4-a")})
    assert (Market.from_dir(d, prices=p).spot_price == 7.0).all()
    assert all((t.spot_prices == 7.0).all() for t in attach_spot_prices(load_trace_dir(d), p))


def test_the_real_v100_price_file_still_matches_every_zone(shared_data):
    m = Market.from_dir(shared_data / V100, prices=shared_data / V100_PRICES)
    raw = json.loads((shared_data / V100_PRICES).read_text())
    for z, row in zip(m.zones, m.spot_price, strict=True):
        np.testing.assert_array_equal(row, raw[f"{z}_v100_1"])


def test_a_price_file_among_the_traces_is_refused_by_its_name(tmp_path):
    d = _folder(tmp_path / "t")
    stray = _prices(d / "aws-v100-02-15-2023.json", {"us-east-1a_v100_1": [1.0] * 200})
    with pytest.raises(TraceFormatError) as exc:
        load_trace_dir(d)
    msg = str(exc.value)
    assert msg.startswith(f"{stray}: not a trace file name (expected <zone>_<instance>.json")
    assert "move it out of the folder" in msg and "--prices" in msg
    assert "gap_seconds" not in msg  # its content is not read as a broken trace


@pytest.mark.parametrize("where", ["trace", "prices"])
def test_deeply_nested_json_is_an_error_naming_the_file(tmp_path, where):
    d = _folder(tmp_path / "t")
    deep = "[" * 200_000
    if where == "trace":
        bad = d / "us-east-1a_v100_1.json"
        bad.write_text(deep)
        with pytest.raises(TraceFormatError, match="nested too deeply") as exc:
            Market.from_dir(d)
    else:
        bad = tmp_path / "p.json"
        bad.write_text(deep)
        with pytest.raises(TraceFormatError, match="nested too deeply") as exc:
            Market.from_dir(d, prices=bad)
    assert str(exc.value).startswith(f"{bad}: ")


@pytest.mark.parametrize("gap", [195.5, 0.5, 32.25])
def test_a_fractional_tick_is_refused_at_load_time(tmp_path, gap):
    bad = _file(tmp_path / "t" / "us-east-1a_v100_1.json", [1, 0] * 50, gap=gap)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(bad)
    assert str(exc.value).startswith(f"{bad}: metadata.gap_seconds = {gap!r}")
    assert "whole number of seconds" in str(exc.value)
    # whole seconds written as a float (save_trace writes 195.0) are read
    ok = _file(tmp_path / "u" / "us-east-1a_v100_1.json", [1, 0] * 50, gap=195.0)
    assert load_trace(ok).gap_seconds == 195.0


def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(x.message) for x in w]


def test_counts_above_n_in_an_n_node_folder_warn_once_per_file(tmp_path):
    d = tmp_path / "4-node" / "aws-x"
    _file(d / "us-east-1a_v100_1.json", [4, 9, 3, 4] * 25)
    _file(d / "us-east-2a_v100_1.json", [4, 2, 3, 4] * 25)
    traces, msgs = _caught(lambda: load_trace_dir(d))
    above = [m for m in msgs if "in a 4-node folder" in m]
    assert len(above) == 1 and above[0].startswith(f"{d / 'us-east-1a_v100_1.json'}: counts "
                                                   "reach 9 in a 4-node folder")
    assert [t.nodes for t in traces] == [4, 4]  # still read: available when count >= 4
    # --nodes given: counts above it are what a smaller job expects, no warning
    _, msgs = _caught(lambda: load_trace_dir(d, nodes=2))
    assert not [m for m in msgs if "4-node folder" in m]


def test_metadata_nodes_overriding_the_folder_warns(tmp_path):
    d = tmp_path / "4-node" / "aws-x"
    for z in ("us-east-1a", "us-east-2a"):
        _file(d / f"{z}_v100_1.json", [4, 2, 3, 4] * 25, nodes=2)
    traces, msgs = _caught(lambda: load_trace_dir(d))
    over = [m for m in msgs if "overrides the folder's 4-node" in m]
    assert len(over) == 2 and "metadata.nodes = 2" in over[0] and "--nodes 4" in over[0]
    assert [t.nodes for t in traces] == [2, 2]  # metadata.nodes still decides
    same = tmp_path / "b" / "4-node" / "aws-y"
    _file(same / "us-east-1a_v100_1.json", [4, 2, 3, 4] * 25, nodes=4)
    _, msgs = _caught(lambda: load_trace_dir(same))
    assert msgs == []


def test_the_real_folders_give_none_of_these_warnings(shared_data):
    for folder in (V100, "spot-traces/preemption/1-node/aws-04-22-2023", "gcp-h100-2025"):
        _, msgs = _caught(lambda f=folder: load_trace_dir(shared_data / f))
        assert not [m for m in msgs if "node" in m], folder


def test_files_that_start_at_different_times_warn(tmp_path):
    """Every file of a folder is read from its first tick as the same moment: files whose
    metadata.start_time differ by a tick or more are misaligned, and the loader says so
    (outside audit, session 16: a GCP file shifted by two days was aligned silently)."""
    d = tmp_path / "gcp-x"
    d.mkdir()
    info = {"price": 18.98, "on_demand_price": 88.49, "machine_type": "a3-highgpu-8g"}
    for zone, start in (("us-central1-a", "2025-10-04T00:10:00+00:00"),
                        ("us-east4-a", "2025-10-06T00:10:00+00:00")):
        (d / f"{zone}_h100_16.json").write_text(json.dumps({
            "metadata": {"gap_seconds": 600, "start_time": start, "zone": zone, "price_info": info},
            "data": [0, 1] * 20, "prices": [18.98] * 40}))
    _, msgs = _caught(lambda: load_trace_dir(d))
    late = [m for m in msgs if "start at different times" in m]
    assert len(late) == 1 and "48.00 h apart" in late[0] and "us-east4-a_h100_16.json" in late[0]


def test_the_real_gcp_folder_starts_together(shared_data):
    _, msgs = _caught(lambda: load_trace_dir(shared_data / "gcp-h100-2025"))
    assert not [m for m in msgs if "start at different times" in m]
