"""`spotfleet market | stats | forecast | plan` end to end, and session-measured R in plans."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleet.market.prices import PriceBook
from fleet.market.traces import Trace
from fleet.planning.planner import StageRequest, plan_stage
from fleet.providers.base import NodeSession
from fleet.stats.preemption import merge_session_latency, session_stats, zone_stats
from pipelines.cli import main

PREEMPT = "spot-traces/preemption/1-node/aws-04-22-2023"


def test_cli_synth_load_stats_forecast_plan(tmp_path, capsys):
    out = tmp_path / "market"
    assert main(["market", "synth", "--zones", "3", "--hours", "72", "--seed", "2",
                 "--out", str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["us-east-1c_V100_1.json", "us-east-1f_V100_1.json", "us-west-2b_V100_1.json"]
    assert main(["market", "load", str(out)]) == 0
    assert "3 valid trace(s)" in capsys.readouterr().out

    png = tmp_path / "stats.png"
    assert main(["stats", str(out), "--plot", str(png)]) == 0
    assert "MTTP CI: 90%" in capsys.readouterr().out and png.stat().st_size > 10_000
    assert main(["stats", str(out), "--json", "--correlation"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert {z["zone"] for z in st["zones"]} == {"us-east-1c", "us-east-1f", "us-west-2b"}
    assert set(st["correlation"]) == {"us-east-1c", "us-east-1f", "us-west-2b"}

    assert main(["forecast", str(out), "--horizon", "3", "--samples", "200",
                 "--plot", str(tmp_path / "fc.png")]) == 0
    assert "P(up@H)" in capsys.readouterr().out and (tmp_path / "fc.png").is_file()
    assert main(["forecast", str(out), "--horizon", "3", "--samples", "200", "--json"]) == 0
    fc = json.loads(capsys.readouterr().out)
    assert len(fc) == 3 and all(0 <= f["availability_mean"] <= 1 for f in fc)

    assert main(["plan", str(out), "--work", "8", "--deadline", "12", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["stage"] == "stage" and plan["num_nodes"] == 1
    assert plan["expected_cost"] <= plan["on_demand_cost"]
    assert plan["reasons"]


def test_cli_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "us-east-1a_v100_1.json").write_text('{"data": [1, 0]}')
    assert main(["stats", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "gap_seconds" in err and "us-east-1a_v100_1.json" in err
    assert main(["plan", "--work", "10", "--deadline", "5"]) == 2
    assert "extend the deadline" in capsys.readouterr().err


def test_cli_compare_and_forecast_evaluate(shared_data, tmp_path, capsys):
    d = shared_data / PREEMPT
    png = tmp_path / "cmp.png"
    assert main(["market", "compare", str(d), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "availability_real" in text and "same region" in text
    assert png.stat().st_size > 10_000
    assert main(["forecast", str(d), "--evaluate", "--horizon", "6"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[2].split()[0] == "semi_markov_hod"  # best CRPS first


def test_session_latency_flows_into_the_plan():
    up = np.resize(np.r_[np.ones(60), np.zeros(6)], 3000).astype(np.int32)
    tr = zone_stats([Trace("us-west-2b", "V100", 1, 600.0, up)])

    def sess(i, ready_after_s):
        return NodeSession(node_id=f"n{i}", stage="s", attempt=1, provider="local", cloud="aws",
                           region="us-west-2", zone="us-west-2b", instance_type="p3.2xlarge",
                           spot=True, price_per_hour=0.918, launched_at=1000.0 * i,
                           ready_at=1000.0 * i + ready_after_s, ended_at=1000.0 * i + 900,
                           end_reason="preempted")

    ss = session_stats([sess(1, 1800.0), sess(2, 1800.0)])
    merged = merge_session_latency(tr + ss)
    assert len(merged) == 1 and merged[0].source == "trace"
    assert merged[0].restart_latency_s == pytest.approx(1800.0)
    req = StageRequest(work_hours=10, restart_hours=0.05)
    fast = plan_stage(req, tr, None, PriceBook.default())
    slow = plan_stage(req, tr + ss, None, PriceBook.default())
    assert slow.zones[0].restart_hours == pytest.approx(0.5)
    assert fast.zones[0].restart_hours == pytest.approx(0.05)
    assert slow.zones[0].c_eff > fast.zones[0].c_eff


@pytest.mark.parametrize(("argv", "needle"), [
    # before: MemoryError traceback (1e9 h), "cannot convert float NaN to integer" (no flag
    # named), and "MTTP CI: 500%" / "0%" printed with exit 0
    (["forecast", "{d}", "--horizon", "1e9"], "--horizon must be at most 8760 h"),
    (["forecast", "{d}", "--horizon", "nan"], "--horizon must be > 0"),
    (["plan", "{d}", "--work", "4", "--horizon", "-1"], "--horizon must be > 0"),
    (["stats", "{d}", "--level", "5"], "--level must be < 1 (a confidence level"),
    (["stats", "{d}", "--level", "0"], "--level must be > 0"),
])
def test_cli_horizon_and_level_out_of_range_are_refused(tmp_path, capsys, argv, needle):
    out = tmp_path / "market"
    assert main(["market", "synth", "--zones", "2", "--hours", "48", "--out", str(out)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([a.format(d=out) for a in argv])
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_market_synth_never_writes_files_the_loader_refuses(tmp_path, capsys):
    # before: --hours 0.01 (or --gap 100000 for 24 h) wrote 1-tick files, then printed
    # "next: spotfleet stats <out>", which refused them; --gap 0 printed a pydantic dump
    out = tmp_path / "m"
    assert main(["market", "synth", "--zones", "2", "--hours", "0.01", "--out", str(out)]) == 2
    assert "a trace needs at least 2" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit) as exc:
        main(["market", "synth", "--zones", "2", "--gap", "100000", "--out", str(out)])
    assert exc.value.code == 2 and "--gap must be at most 86400" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["market", "synth", "--zones", "2", "--gap", "0", "--out", str(out)])
    assert "--gap must be > 0" in capsys.readouterr().err and not out.exists()
    assert main(["market", "synth", "--zones", "2", "--hours", "0.06", "--out", str(out)]) == 0
    assert main(["market", "load", str(out)]) == 0  # the shortest market it writes loads


@pytest.mark.parametrize("gap", ["7.5", "0.5"])
def test_market_synth_refuses_a_fractional_tick_the_loader_would_refuse(tmp_path, capsys, gap):
    """Until 2026-11-28 ``--gap 7.5`` wrote files that ``fleet-sim``, ``stats`` and ``market
    load`` then refused ("a tick must be a whole number of seconds"); a config file's
    ``gap_seconds`` likewise. Now nothing is written and the flag (or file) is named."""
    out = tmp_path / "m"
    assert main(["market", "synth", "--zones", "2", "--gap", gap, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--gap {gap}: a tick must be a whole number of seconds" in err and not out.exists()
    cfg = tmp_path / "cfg.json"
    from fleet.market.synthetic import default_market_config

    cfg.write_text(default_market_config(2, gap_seconds=float(gap)).model_dump_json())
    assert main(["market", "synth", "--config", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--config {cfg}: gap_seconds = {gap}" in err and not out.exists()
    assert main(["market", "synth", "--zones", "2", "--gap", "7", "--hours", "1",
                 "--out", str(out)]) == 0
    assert main(["market", "load", str(out)]) == 0  # a whole-second tick loads


@pytest.mark.parametrize(("text", "needle"), [
    ("[1, 2]", "must be a mapping of SyntheticMarketConfig fields (zones, gap_seconds, ...), "
               "got list"),
    ('{"bogus": 1}', "invalid field(s): zones: Field required; bogus: Extra inputs"),
    ("zones: [\n  - {zone: us-east-1a", "cannot read it (while parsing"),
])
def test_market_synth_bad_config_file_is_one_error_line_naming_it(tmp_path, capsys, text, needle):
    """Until 2026-11-28 a config holding a list ended in a ``TypeError`` traceback and a bad
    field in a multi-line pydantic dump."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    assert main(["market", "synth", "--config", str(cfg), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spotfleet market: error: --config {cfg}: ") and needle in err
    assert err.count("\n") == 1 and not (tmp_path / "m").exists()


def test_market_synth_nodes_and_hours_out_of_range_are_refused(tmp_path, capsys):
    """``--nodes 0`` was a pydantic dump; ``--hours 1e7`` ran for hours (64 s per 1e5 h)."""
    for argv, needle in ((["--nodes", "0"], "--nodes must be > 0"),
                         (["--hours", "1e7"], "--hours must be at most 8760 h")):
        with pytest.raises(SystemExit) as exc:
            main(["market", "synth", *argv, "--out", str(tmp_path / "m")])
        assert exc.value.code == 2 and needle in capsys.readouterr().err
