"""`local-fleet run --market traces` on a folder whose files carry prices (SkyNomad
gcp-h100-2025 format) bills the files' prices per launch tick, in the files' cloud.

Before 2026-11-27 it billed the V100 fallback (p3.2xlarge, 0.918 $/h) in GCP zones and
said "notices as aws".
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from nomad_traces import write_nomad_trace

from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.market.traces import load_trace_dir
from fleet.providers.local import LocalFleetConfig
from pipelines.cli import main

GAP = 600  # s
HOUR = 3600 // GAP  # ticks per hour


def _nomad(d, zone, replay_price):
    """120 h; prices 30 $/h before hour 48, ``replay_price`` in hours 48-72 (where the
    replay runs), 40 $/h after (the last 24 h, what a book of recent means would hold);
    always up from hour 24 (inverted 0/1: 0 = available)."""
    n = 120 * HOUR
    data = np.resize([0] * 20 + [1] * 4, 24 * HOUR).tolist() + [0] * (n - 24 * HOUR)
    prices = [30.0] * (48 * HOUR) + [replay_price] * (24 * HOUR) + [40.0] * (48 * HOUR)
    write_nomad_trace(d, zone, data, prices, 40.0, 82.5, GAP)


@pytest.fixture
def h100_dir(tmp_path):
    d = tmp_path / "gcp-h100"
    _nomad(d, "us-central1-a", 21.0)
    _nomad(d, "us-east4-a", 17.0)
    return d


def test_config_bills_the_files_per_tick(h100_dir):
    sched = CapacitySchedule(load_trace_dir(h100_dir), offset_seconds=48 * 3600.0)
    cfg = LocalFleetConfig(schedule=sched, time_scale=TimeScale(2.0)).with_file_prices()
    assert cfg.instance_type == "a3-highgpu-8g"
    # the tick of the launch (trace time 1 h after the replay start = hour 49)
    assert cfg.price_per_hour(cfg.instance_type, "us-east4-a", "us-east4", True, 3600.0) == 17.0
    assert cfg.price_per_hour(cfg.instance_type, "us-east4-a", "us-east4", True, 30 * 3600.0) == 40.0
    assert cfg.price_per_hour(cfg.instance_type, "us-east4-a", "us-east4", False, 3600.0) == 82.5
    # without a trace time: the book's mean of the files' last 24 h
    assert cfg.price_per_hour(cfg.instance_type, "us-east4-a", "us-east4", True) == 40.0
    # files without prices: the config as it was (V100 fallback)
    plain = LocalFleetConfig(schedule=CapacitySchedule.rotating(["us-east-1a", "us-east-1b"]))
    assert plain.with_file_prices() is plain


def test_cli_run_bills_the_files_prices_in_their_cloud(h100_dir, tmp_path, capsys):
    rc = main(["local-fleet", "run", "--market", "traces", "--traces-dir", str(h100_dir),
               "--zones", "2", "--steps", "10", "--start-hour", "48", "--no-verify",
               "--quiet-progress", "--workdir", str(tmp_path / "w")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "notices as gcp" in out and "notices as aws" not in out
    assert ("billing a3-highgpu-8g: spot of 2 zone(s) = mean of the last 24 h of each trace file's "
            "per-tick prices; on-demand of 2 zone(s) = the trace files' price_info.on_demand_price; "
            "other prices: the built-in table") in out
    launched = [float(x) for x in re.findall(r"launch \(spot, ([\d.]+) \$/h\)", out)]
    assert launched and set(launched) <= {21.0, 17.0}, out  # the replay's ticks, not 40 or 0.918
    rows = [ln.split() for ln in out.splitlines() if re.match(r"s\d+-n\d+ ", ln)]
    assert rows and all(float(r[3]) in (21.0, 17.0) for r in rows), rows  # sessions' $/h
    assert "on-demand for the same time" in out
    assert "(spot, 0.918 $/h)" not in out
