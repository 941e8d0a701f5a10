"""Decision fidelity: the policy ``fleet-sim`` measures vs the same policy running live.

One policy, one market window, run twice:

(a) live: the pipeline's ``train_<stage>`` asset on the local emulated fleet through
    Dagster (node runner -> provider -> PolicyDriver -> the registered policy), after a
    warm-up run that puts measured R and checkpoint time into the statistics DB;
(b) ``fleet-sim``: ``fleet.simulation.simulate`` of the same registered policy on the
    same market (the replayed traces), from the market second the live attempt started
    at (inside a tick: ``start_offset_hours`` shortens the first tick), with the job the live run measured (work, R, checkpoint time, notice, deadline, prices).

Prints the decision sequences side by side (market time, zone, spot / on-demand) and:
  live cost / simulated cost                  (goal 0.98-1.02)
  live completion time / simulated            (same deadline job)
  training insurance interval / plan interval (goal 0.95-1.05): the tau the training
      process computed from the exported MTTP / R and its measured delta, vs the
      interval the fleet plan computed from the DB statistics for that zone.

    nice -n 10 .venv/bin/python benchmarks/bench_decision_fidelity.py [--policy spotfleet]

Machine note: wall clock compresses the market (``--wall-per-hour`` wall seconds per
market hour); process start and teardown are real wall time and therefore count as
restart time in market seconds (x 3600 / wall-per-hour).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DECISION = re.compile(r"^fleet policy (\S+) \((\S+)\): (\S+) at market second ([\d.]+)"
                      r"(?: \(replay second ([\d.]+)\))?")
INTERVAL = re.compile(r"^\[(\S+)\] insurance interval tau ([\d.e+-]+) s")
INTERVAL_DETAIL = re.compile(r"MTTP ([\d.e+-]+) s, R ([\d.e+-]+) s, delta ([\d.e+-]+) s")
PROGRESS = re.compile(r"^\[(\S+)\] step (\d+)/(\d+) \(([\d.]+) s/step")


def _pipeline(args, name: str) -> dict:
    return {
        "name": name, "provider": "local", "deadline_hours": args.deadline_hours,
        "checkpoint_uri": f"checkpoints/{name}", "on_demand_fallback": True,
        "market": {"seed": args.seed, "hours": args.history_hours, "future_hours": 48,
                   "wall_seconds_per_market_hour": args.wall_per_hour, "cloud": "signal",
                   "grace_seconds": args.grace},
        "stages": [{"name": "train", "script": "examples/train_example.py", "policy": args.policy,
                    "args": ["--steps", str(args.steps), "--size", args.size, "--step-sleep",
                             str(args.step_sleep), "--periodic-every", "0", "--progress-every", "10"],
                    "work_hours": args.work_hours,
                    "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
    }


def _run_job(cfg, var: Path):
    from dagster import AssetKey, DagsterInstance

    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    stats = StatsDB(var_dir=str(var))
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        t0 = time.time()
        result = defs.resolve_job_def(pipeline_job_name(cfg.name)).execute_in_process(
            instance=instance, raise_on_error=False)
        wall = time.time() - t0
        logs = [e.user_message or "" for e in instance.all_logs(result.run_id)]
        plan = result.asset_value(AssetKey([cfg.name, "fleet_plan"]))["train"] if result.success else None
    return result, logs, plan, stats, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="spotfleet")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--step-sleep", type=float, default=0.06)
    ap.add_argument("--wall-per-hour", type=float, default=30.0, help="wall seconds per market hour")
    ap.add_argument("--grace", type=float, default=3.0, help="notice window, wall seconds")
    ap.add_argument("--history-hours", type=float, default=240.0)
    ap.add_argument("--work-hours", type=float, default=1.0, help="planned work (market hours)")
    ap.add_argument("--deadline-hours", type=float, default=3.0)
    ap.add_argument("--size", default="tiny",
                    help="example model size (tiny: sleep-dominated steps; small: compute-bound, "
                         "so its speed follows the machine's load)")
    ap.add_argument("--var", type=Path, default=None)
    args = ap.parse_args()

    from fleet.contract import mean_restart_seconds, measured_checkpoint_seconds, session_cost_usd
    from fleet.market.config import MarketConfig
    from fleet.policies.base import IDLE, ON_DEMAND, JobSpec
    from fleet.policies.registry import get_policy
    from fleet.simulation.engine import simulate
    from fleet.simulation.market import Market
    from infra.db.models import CheckpointRecord, NodeSessionRecord, StageAttempt
    from infra.db.recorder import read_table
    from pipelines.config import parse_pipelines

    var = args.var or Path(tempfile.mkdtemp(prefix="bench-fidelity-"))
    [cfg] = parse_pipelines({"pipelines": [_pipeline(args, "fidelity")]})
    factor = 3600.0 / args.wall_per_hour  # market seconds per wall second
    print(f"policy {args.policy}; market seed {args.seed}, {args.history_hours:g} h history; "
          f"1 market hour = {args.wall_per_hour:g} wall s; {args.steps} steps x {args.step_sleep} s; "
          f"deadline {args.deadline_hours:g} h; var {var}", flush=True)

    # warm-up: puts measured restart latency and checkpoint time into the DB
    res0, _, _, stats, w0 = _run_job(cfg, var)
    print(f"warm-up run: success={res0.success} ({w0:.0f} s wall)", flush=True)
    res, logs, plan, stats, w1 = _run_job(cfg, var)
    print(f"measured run: success={res.success} ({w1:.0f} s wall)", flush=True)
    if not res.success:
        print("\n".join(m for m in logs if m)[-3000:])
        return 1
    eng = stats.engine()
    attempts = read_table(eng, StageAttempt, cfg.name)
    ids = set(attempts[attempts["run_id"] == res.run_id]["id"])
    sessions = read_table(eng, NodeSessionRecord, cfg.name)
    sessions = sessions[sessions["attempt_id"].isin(ids)].sort_values("launched_at")
    ckpts = read_table(eng, CheckpointRecord, cfg.name)
    ckpts = ckpts[ckpts["run_id"] == res.run_id]

    decisions = [m.groups() for m in (DECISION.match(x) for x in logs) if m]
    taus = [(m.group(1), float(m.group(2))) for m in (INTERVAL.match(x) for x in logs) if m]
    steps = [float(m.group(4)) for m in (PROGRESS.match(x) for x in logs) if m]
    # ---- what the live run measured (market seconds: the DB holds them, docs/database.md "Units")
    restart_s = mean_restart_seconds(zip(sessions["launched_at"], sessions["ready_at"], strict=True))
    ckpt_s = measured_checkpoint_seconds(zip(ckpts["kind"], ckpts["stall_seconds"], strict=True)) or 0.05 * factor
    step_s = statistics.mean(steps) if steps else args.step_sleep
    work_h = args.steps * step_s * factor / 3600.0
    replay0 = float(decisions[0][4]) - float(decisions[0][3])
    live_cost = float(sum(session_cost_usd(p, a, e) for p, a, e in zip(
        sessions["price_per_hour"], sessions["launched_at"], sessions["ended_at"], strict=True)))
    live_done_h = ((sessions["ended_at"].max() - sessions["launched_at"].min())
                   + float(decisions[0][3])) / 3600.0

    # ---- the same policy in fleet-sim, same market window and job
    market = Market.from_traces(MarketConfig.model_validate(cfg.market.model_dump()).traces("all"))
    # the live attempt starts between two tick boundaries: the simulated run starts at the
    # same market second (first tick shortened), the replayed ticks stay where they are
    start_tick = int(replay0 // market.gap_seconds)
    offset_h = (replay0 - start_tick * market.gap_seconds) / 3600.0
    deadline_h = cfg.deadline_hours  # one stage: the whole deadline
    spec = JobSpec(work_hours=work_h, deadline_hours=max(deadline_h, work_h),
                   restart_hours=restart_s / 3600.0, checkpoint_hours=ckpt_s / 3600.0,
                   notice_seconds=args.grace * factor, on_demand_price=cfg.market.on_demand_price_per_hour,
                   spot_price=cfg.market.spot_price_per_hour)
    timeline: list[tuple[int, int]] = []
    sim = simulate(get_policy(args.policy), market, spec, start_tick, timeline,
                   start_offset_hours=offset_h)

    def name(loc: int) -> str:
        return "idle" if loc == IDLE else "on-demand" if loc == ON_DEMAND else market.zones[loc]

    sim_seq, last = [], None
    for tick, loc in timeline:
        if loc != last:
            sim_seq.append((max(0.0, (tick - start_tick) * market.gap_hours - offset_h), name(loc)))
            last = loc
    live_seq, last = [], None
    for _pol, _cls, target, t, _r in decisions:
        if target != last:
            live_seq.append((float(t) / 3600.0, target))
            last = target
    print(f"\njob: W {work_h:.3f} h, R {restart_s:.0f} s, C {ckpt_s:.1f} s, notice "
          f"{args.grace * factor:.0f} s, D {deadline_h:g} h; window starts at market second "
          f"{replay0:.0f} = replay tick {start_tick} + {offset_h * 3600:.0f} s (both runs start there)")
    print(f"\n{'fleet-sim (h, location)':<38} | live through Dagster (h, decision)")
    for i in range(max(len(sim_seq), len(live_seq))):
        a = f"{sim_seq[i][0]:7.3f}  {sim_seq[i][1]}" if i < len(sim_seq) else ""
        b = f"{live_seq[i][0]:7.3f}  {live_seq[i][1]}" if i < len(live_seq) else ""
        print(f"{a:<38} | {b}")
    print(f"\nsim:  cost ${sim.cost:.3f}, completion {sim.completion_hours:.3f} h, "
          f"{sim.preemptions} preemptions, {sim.launches} launches")
    print(f"live: cost ${live_cost:.3f}, completion {live_done_h:.3f} h, "
          f"{int((sessions['end_reason'] == 'preempted').sum())} preemptions, "
          f"{sessions['node_id'].nunique()} node sessions")
    print(f"\nlive cost / simulated cost             {live_cost / sim.cost:.3f}   (goal 0.98-1.02)")
    print(f"live completion / simulated completion {live_done_h / sim.completion_hours:.3f}")
    if taus and plan is not None:
        zone_of = dict(zip(sessions["node_id"], sessions["zone"], strict=False))
        lines = [x for x in logs if INTERVAL.match(x)]
        # first: before the attempt observed anything; last: after its own refinements
        for label, line in (("first", lines[0]), ("last", lines[-1])):
            node, tau_wall = INTERVAL.match(line).group(1), float(INTERVAL.match(line).group(2))
            zone = zone_of.get(node, sessions["zone"].iloc[-1])
            plan_tau = plan.insurance_interval_seconds(zone)
            choice = next((z for z in plan.zones if z.zone == zone), None)
            if not plan_tau or choice is None:
                print(f"training tau ({label}) measured in {zone}, which the plan did not score")
                continue
            print(f"training tau / plan interval, {label:<5} ({zone})  {tau_wall * factor / plan_tau:.3f}"
                  f"   (goal 0.95-1.05): tau {tau_wall * factor:.0f} market s vs plan {plan_tau:.0f} s")
            m = INTERVAL_DETAIL.search(line)
            if m:
                mt, rt = float(m.group(1)) * factor, float(m.group(2)) * factor
                dt = (tau_wall * factor) ** 2 / (2.0 * (mt + rt))  # the policy's mean delta
                mp, rp = 3600.0 / choice.rate_per_hour, plan.restart_hours * 3600
                cp = plan.checkpoint_hours * 3600
                print(f"    training: delta {dt:.2f} s, MTTP {mt:.0f} s, R {rt:.0f} s | plan from the DB: "
                      f"C {cp:.2f} s, MTTP {mp:.0f} s, R {rp:.0f} s -> sqrt(delta/C) {(dt / cp) ** 0.5:.3f} "
                      f"x sqrt((MTTP+R)/plan's) {((mt + rt) / (mp + rp)) ** 0.5:.3f}")
    else:
        print("no insurance interval reported by the training process")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
