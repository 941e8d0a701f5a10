"""``spotfleet fleet-sim`` end to end on the real traces (a few starts)."""

from __future__ import annotations

from pipelines.cli import main

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"


def test_fleet_sim_prints_progress_table_ratio_and_plot(shared_data, tmp_path, capsys):
    out_png = tmp_path / "sweep.png"
    rc = main(["fleet-sim", "--traces", str(shared_data / AVAIL), "--work-hours", "12",
               "--deadline-hours", "14", "--starts", "3", "--notice-seconds", "120",
               "--policies", "on_demand,failover,spotfleet", "--plot", str(out_png)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "3 starts x 3 policies" in out
    for name in ("omniscient", "on_demand", "failover", "spotfleet"):
        assert f"  {name}" in out  # one progress line per policy
    assert "$/omniscient" in out and "deadlines met" in out
    assert "spotfleet / omniscient bound:" in out
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fleet_sim_unknown_policy_names_the_choices(shared_data, capsys):
    rc = main(["fleet-sim", "--traces", str(shared_data / AVAIL), "--starts", "2",
               "--policies", "spotfleet,magic"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown policies ['magic']" in err and "uniform_progress_multi" in err


def test_fleet_sim_missing_trace_dir_is_a_clear_error(tmp_path, capsys):
    rc = main(["fleet-sim", "--traces", str(tmp_path / "nope"), "--starts", "2"])
    assert rc == 2
    assert "not a directory of trace files" in capsys.readouterr().err
