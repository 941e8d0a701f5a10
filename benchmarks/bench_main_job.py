"""Benchmark the main job: wall time of `spotfleet main` and where it goes.

Runs the README's main command (the example two-stage pipeline on the local fleet,
in-process Dagster, a fresh state folder) and, as the peer measured in the same run,
the same training stages run directly (`examples/train_example.py`, uninterrupted,
no orchestration, no preemptions). Prints:

- wall time of the main job, and its ratio to the bare training (the lower bound);
- the share of the main job spent with training processes alive (node sessions,
  including their start-up and restore), and the share outside them (Dagster steps,
  market / statistics / forecast / plan / cost assets, Pipes, the node runner, relaunch
  waits): the Dagster-versus-training split, printed as ``Dagster share``;
- where the time outside the nodes goes (process start-up to the run's start, the
  analysis steps before the first stage, node-runner starts, relaunch gaps, retry
  waits, the cost report and checks after training (one Dagster run since the checks
  are planned in ``<pipeline>__main``), the summary and exit after the run), from
  the run's Dagster event log and the node sessions in the statistics DB;
- inside the nodes: start-up (launch -> training loop ready: interpreter, imports,
  restore) vs training (ready -> end).

``--no-fork-server`` runs the main job with ``SPOTFLEET_FORK_SERVER=off`` (every node a
fresh ``python train.py``) for comparison.

    python benchmarks/bench_main_job.py [--json out.json] [--keep DIR] [--no-fork-server]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def bare_training(python: str, work: Path) -> float:
    """Wall seconds of the example's stages run back to back, directly, uninterrupted."""
    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    t0 = time.perf_counter()
    for stage in cfg.stages:
        ck = work / "bare" / stage.name
        argv = stage.argv(python)
        argv[1] = str(REPO / stage.script)
        subprocess.run([*argv, "--checkpoint-uri", str(ck)], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if not k.startswith("SPOTFLEET_")})
    return time.perf_counter() - t0


def _main_run(instance):
    """The training run of `spotfleet main` (``<pipeline>__main``: graph + checks; before
    the checks were folded into it, ``__train_all``), not a report run after a failure."""
    return next(r for r in instance.get_runs() if r.job_name.endswith(("__main", "__train_all")))


def _outside_breakdown(var: Path, sessions, attempts, t_start: float, t_end: float) -> dict[str, float]:
    """Where the wall time outside the node sessions went (seconds), from the Dagster event log."""
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(var / "dagster_home")) as instance:
        run = _main_run(instance)
        recs = [r for r in instance.all_logs(run.run_id) if r.is_dagster_event]
    kinds = {r.dagster_event.event_type_value: r.timestamp for r in recs}
    run_start = kinds.get("RUN_START", recs[0].timestamp)
    run_end = kinds.get("RUN_SUCCESS", kinds.get("RUN_FAILURE", recs[-1].timestamp))
    s = sessions.sort_values("launched_at")
    a = attempts.sort_values("started_at")
    out = {"before the run (start-up)": run_start - t_start,
           "analysis steps before stage 1": float(a["started_at"].min()) - run_start}
    runner = relaunch = retry = handoff = 0.0
    for _, att in a.iterrows():
        mine = s[s["attempt_id"] == att["id"]]
        if mine.empty:
            continue
        runner += float(mine["launched_at"].min()) - float(att["started_at"])
        gaps = mine["launched_at"].to_numpy()[1:] - mine["ended_at"].to_numpy()[:-1]
        relaunch += float(gaps.clip(min=0).sum())
    for prev, nxt in zip(a.iloc[:-1].itertuples(), a.iloc[1:].itertuples(), strict=True):
        last = float(s[s["attempt_id"] == prev.id]["ended_at"].max())  # node runner start: counted above
        if prev.stage == nxt.stage:
            retry += float(nxt.started_at) - last
        else:
            handoff += float(nxt.started_at) - last
    out["node-runner starts"] = runner
    out["relaunch gaps in attempts"] = relaunch
    out["retry waits (lost attempts)"] = retry
    out["stage hand-offs"] = handoff
    out["after training (report, checks)"] = run_end - float(s["ended_at"].max())
    out["after the run (summary, exit)"] = t_end - run_end
    return out


def _on_wall_clock(var: Path, sessions):
    """The DB holds market seconds (docs/database.md "Units"); this benchmark measures wall
    time, so map the local fleet's sessions back: wall = anchor + (market - anchor) / f,
    anchored at the Dagster run's start as the local provider does."""
    from dagster import DagsterInstance

    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines

    [cfg] = load_pipelines(EXAMPLE_PIPELINES)
    f = 3600.0 / cfg.market.wall_seconds_per_market_hour
    with DagsterInstance.from_config(str(var / "dagster_home")) as instance:
        run = _main_run(instance)
        anchor = instance.get_run_record_by_id(run.root_run_id or run.run_id).start_time
    out = sessions.copy()
    for col in ("launched_at", "ready_at", "ended_at", "notice_at"):
        out[col] = anchor + (out[col] - anchor) / f
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--keep", help="state folder to keep (default: a temporary one, removed)")
    ap.add_argument("--no-fork-server", action="store_true",
                    help="every node a fresh interpreter (SPOTFLEET_FORK_SERVER=off)")
    ap.add_argument("--no-peer", action="store_true", help="skip the bare-training peer run")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="spotfleet-bench-main-"))
    var = work / "var"
    spotfleet = str(Path(sys.executable).with_name("spotfleet"))
    print(f"[bench] running `spotfleet main --var-dir {var}` ...", flush=True)
    env = dict(os.environ)
    if args.no_fork_server:
        env["SPOTFLEET_FORK_SERVER"] = "off"
    t0_unix = time.time()
    t0 = time.perf_counter()
    out = subprocess.run([spotfleet, "main", "--var-dir", str(var)], cwd=REPO, capture_output=True, text=True,
                         env=env)
    wall = time.perf_counter() - t0
    t_end_unix = t0_unix + wall
    if out.returncode != 0:
        print(out.stdout[-4000:], out.stderr[-4000:], sep="\n")
        raise SystemExit(f"spotfleet main failed with code {out.returncode}")
    print(f"[bench] main job: {wall:.1f} s" + ("" if args.no_peer else "; running the bare training peer ..."),
          flush=True)
    bare = float("nan") if args.no_peer else bare_training(sys.executable, work)

    from infra.db.models import NodeSessionRecord, StageAttempt
    from infra.db.recorder import read_table
    from infra.db.session import make_engine

    eng = make_engine(f"sqlite:///{var / 'spotfleet.db'}")
    sessions = _on_wall_clock(var, read_table(eng, NodeSessionRecord))
    attempts = read_table(eng, StageAttempt)
    node_alive = _union_seconds(list(zip(sessions["launched_at"], sessions["ended_at"], strict=True)))
    attempt_span = _union_seconds(list(zip(attempts["started_at"], attempts["ended_at"], strict=True)))
    outside = wall - node_alive
    res = {
        "main_wall_s": wall, "bare_training_s": bare, "main_over_bare": wall / bare,
        "node_sessions_alive_s": node_alive, "outside_nodes_s": outside,
        "training_share": node_alive / wall, "dagster_share": outside / wall,
        "dagster_over_training": outside / node_alive,
        "stage_attempts_span_s": attempt_span,
        "node_sessions": len(sessions), "preemptions": int((sessions["end_reason"] == "preempted").sum()),
        "attempts": len(attempts), "cpus": os.cpu_count(), "fork_server": not args.no_fork_server,
        "load_average_1min": os.getloadavg()[0],
    }
    startup = sessions["ready_at"] - sessions["launched_at"]
    res["node_startup_s"] = float(startup.sum())
    res["node_training_s"] = float((sessions["ended_at"] - sessions["ready_at"]).sum())
    res["outside"] = _outside_breakdown(var, sessions, attempts, t0_unix, t_end_unix)
    res["dagster_share"] = outside / wall
    print(f"main job wall          {wall:8.1f} s   (limit 600 s: {wall / 600:.2f} of it)")
    print(f"bare training (peer)   {bare:8.1f} s   -> main / bare = {wall / bare:.2f}x")
    print(f"training nodes alive   {node_alive:8.1f} s   ({100 * node_alive / wall:.0f} % of the wall time; "
          f"{len(sessions)} node sessions, {res['preemptions']} preemptions, {len(attempts)} attempts)")
    print(f"  of which start-up    {res['node_startup_s']:8.1f} s   (launch -> training loop ready: interpreter, "
          f"imports, restore; {'fork server' if res['fork_server'] else 'fresh interpreters'})")
    print(f"  of which training    {res['node_training_s']:8.1f} s")
    print(f"Dagster + orchestration{outside:8.1f} s   ({100 * outside / wall:.0f} %); "
          f"Dagster / training = {outside / node_alive:.2f}")
    for k, v in res["outside"].items():
        print(f"  {k:<30}{v:7.1f} s")
    print(f"Dagster share          {100 * res['dagster_share']:7.1f} %  (time outside the training nodes / wall; "
          f"{res['cpus']} cpus, load average {res['load_average_1min']:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
