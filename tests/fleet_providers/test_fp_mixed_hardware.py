"""The local fleet refuses a trace folder whose zones carry different instance types.

One type per zone (k80_1 in us-east-1a, v100_1 in us-west-2b) passed the "several types
in one zone" refusal and was replayed as one fleet of mixed hardware: the job moved
between a K80 and a V100 machine as if they were the same. It is refused now, naming the
type of each zone and the filter, unless a filter keeps one type. The folder is built
here from small synthetic files in the collection's format.
"""

from __future__ import annotations

import argparse
import json

import pytest

from fleet.emulation.injector import CapacitySchedule
from fleet.market.config import MarketConfig
from fleet.market.traces import load_trace_dir
from pipelines.cli import main
from pipelines.commands import local_fleet


def _file(path, data, gap=195):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


def _mixed_zones(tmp_path):
    d = tmp_path / "aws-mixed-zones"
    _file(d / "us-east-1a_k80_1.json", [1, 0] * 20)
    _file(d / "us-east-1c_k80_1.json", [0, 1] * 20)
    _file(d / "us-west-2b_v100_1.json", [1, 1, 0, 0] * 10)
    return d


def test_capacity_schedule_refuses_a_different_type_per_zone_naming_them(tmp_path):
    traces = load_trace_dir(_mixed_zones(tmp_path))  # one trace per zone: the folder loads
    with pytest.raises(ValueError) as exc:
        CapacitySchedule(traces)
    msg = str(exc.value)
    assert "us-east-1a: k80_1" in msg and "us-east-1c: k80_1" in msg and "us-west-2b: v100_1" in msg
    assert "['k80_1', 'v100_1']" in msg and "mixed hardware" in msg
    assert "--instance-types TYPE" in msg and "instance_types: [TYPE]" in msg


def test_local_fleet_cli_stops_on_mixed_zones_with_the_fix(tmp_path, capsys):
    work = tmp_path / "work"
    rc = main(["local-fleet", "run", "--market", "traces", "--traces-dir",
               str(_mixed_zones(tmp_path)), "--workdir", str(work)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("spotfleet local-fleet: error: ")
    assert "us-west-2b: v100_1" in err and "--instance-types" in err
    assert "Traceback" not in err and not (work / "fleet").exists()


def test_a_filter_that_keeps_one_type_passes(tmp_path):
    d = _mixed_zones(tmp_path)
    args = argparse.Namespace(zones=3, market="traces", traces_dir=d, start_hour=0.0,
                              instance_types="k80_1")
    assert local_fleet._schedule(args).zones == ["us-east-1a", "us-east-1c"]
    cfg = MarketConfig(kind="traces", trace_dir=str(d), hours=1.0, instance_types=["v100_1"])
    assert CapacitySchedule(cfg.traces("all")).zones == ["us-west-2b"]
    with pytest.raises(ValueError, match="instance_types"):  # two types kept: still refused
        CapacitySchedule(MarketConfig(kind="traces", trace_dir=str(d),
                                      instance_types=["k80_1", "v100_1"]).traces("all"))
