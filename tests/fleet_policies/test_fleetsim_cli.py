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
    assert "spotfleet / omniscient bound:" in out and "(mean cost / mean bound)" in out
    # against the cheapest other policy, per start and per block (3 starts 15 days apart:
    # 3 blocks, too few for a block interval)
    assert "spotfleet / failover (the cheapest other policy but on-demand):" in out
    assert "per start; 3 blocks: too few per block" in out
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


def _sweep(costs: dict[str, list[float]], omni: list[float], starts: list[int]):
    from fleet.policies.base import JobSpec
    from fleet.simulation.engine import RunResult
    from fleet.simulation.sweep import SweepResult

    spec = JobSpec(work_hours=2.0, deadline_hours=4.0)
    res = SweepResult(spec=spec, starts=starts, omniscient=omni)
    for name, cs in costs.items():
        res.runs[name] = [RunResult(policy=name, start_tick=s, cost=c, spot_cost=c, on_demand_cost=0.0,
                                    spot_hours=2.0, on_demand_hours=0.0, completion_hours=3.0,
                                    deadline_met=True, preemptions=0, launches=1,
                                    lost_work_hours=0.0, checkpoint_hours=0.0, restart_hours=0.0)
                          for s, c in zip(starts, cs, strict=True)]
    return res


def test_summary_ratio_is_mean_cost_over_mean_bound():
    """The table's $/omniscient is the ratio of means, as the docs' tables: (1 + 3) / (1 +
    1.5) = 1.6, not the mean of per-start ratios (1 + 2) / 2 = 1.5."""
    from fleet.simulation.sweep import summarize

    rows = summarize(_sweep({"spotfleet": [1.0, 3.0]}, [1.0, 1.5], [0, 100]))
    assert rows[0].policy == "spotfleet" and rows[0].cost_vs_omniscient == 1.6


def test_best_baseline_line_names_the_cheapest_other_policy_and_counts_blocks():
    from pipelines.commands.fleet_sim import best_baseline_line

    costs = {"on_demand": [1.0] * 12, "failover": [12.0] * 12, "greedy_1zone": [10.0] * 12,
             "spotfleet": [9.0] * 12}
    # 12 starts 10 ticks (1 h) apart with a 4 h deadline: blocks of 4 starts -> 3 blocks
    line = best_baseline_line(_sweep(costs, [8.0] * 12, list(range(0, 120, 10))), 0.1)
    assert line.startswith("spotfleet / greedy_1zone (the cheapest other policy but on-demand): "
                           "0.900 [0.900, 0.900] per start; 3 blocks: too few per block")
    # 30 starts 5 h apart: every start its own block, an interval over 30 blocks
    costs = {"failover": [12.0] * 30, "spotfleet": [9.0] * 30}
    line = best_baseline_line(_sweep(costs, [8.0] * 30, list(range(0, 1500, 50))), 0.1)
    assert "0.750 [0.750, 0.750] per start; [0.750, 0.750] (30) per block" in line
    assert best_baseline_line(_sweep({"failover": [1.0]}, [1.0], [0]), 0.1) == ""
    assert best_baseline_line(_sweep({"on_demand": [1.0], "spotfleet": [1.0]}, [1.0], [0]), 0.1) == ""


def test_table_without_the_bound_prints_a_dash_not_nan():
    # `fleet-sim --no-omniscient` printed `nan` in the $/omniscient column
    from fleet.simulation.sweep import format_table, summarize

    rows = summarize(_sweep({"failover": [2.0, 3.0], "spotfleet": [1.0, 3.0]}, [], [0, 100]))
    for markdown in (False, True):
        table = format_table(rows, markdown=markdown)
        assert "nan" not in table
        cells = table.splitlines()[-1].replace("|", " ").split()
        assert cells[0] == "spotfleet" and cells[4] == "-"
