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


def test_fleet_sim_reads_the_gcp_h100_folder_with_prices_and_migration(shared_data, capsys):
    rc = main(["fleet-sim", "--traces", str(shared_data / "gcp-h100-2025"), "--work-hours", "4",
               "--deadline-hours", "6", "--starts", "2", "--warmup-hours", "12",
               "--checkpoint-gb", "100", "--policies", "failover,spotfleet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "13 zones" in out and "8 regions" in out and "per-tick spot prices" in out
    assert "spotfleet / omniscient bound:" in out


def test_fleet_sim_multi_node_folder_needs_the_node_count(tmp_path, capsys):
    import json

    d = tmp_path / "4-node" / "aws-x"
    d.mkdir(parents=True)
    for zone, vals in (("us-east-1f", [4, 3] * 400), ("us-west-2c", [4, 4] * 400)):
        (d / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600},
                                                            "data": vals}))
    rc = main(["fleet-sim", "--traces", str(d), "--work-hours", "2", "--deadline-hours", "4",
               "--starts", "2", "--warmup-hours", "10", "--policies", "failover"])
    out = capsys.readouterr().out
    assert rc == 0 and "4 node(s)" in out


def test_fleet_sim_observe_modes(shared_data, capsys):
    args = ["fleet-sim", "--traces", str(shared_data / AVAIL), "--work-hours", "6",
            "--deadline-hours", "9", "--starts", "3", "--policies", "on_demand,failover",
            "--no-omniscient"]
    costs = {}
    for mode in ("probe", "oracle"):
        assert main([*args, "--observe", mode]) == 0
        out = capsys.readouterr().out.splitlines()
        costs[mode] = {n: float(next(ln for ln in out if ln.startswith(n + " ")).split()[1])
                       for n in ("on_demand", "failover")}
    assert costs["probe"]["on_demand"] == costs["oracle"]["on_demand"]  # needs no market view
    assert costs["probe"]["failover"] < costs["probe"]["on_demand"]
