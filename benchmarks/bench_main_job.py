"""Benchmark the main job: wall time of `spotfleet main` and where it goes.

Runs the README's main command (the example two-stage pipeline on the local fleet,
in-process Dagster, a fresh state folder) and, as the peer measured in the same run,
the same training stages run directly (`examples/train_example.py`, uninterrupted,
no orchestration, no preemptions). Prints:

- wall time of the main job, and its ratio to the bare training (the lower bound);
- the share of the main job spent with training processes alive (node sessions,
  including their start-up and restore), and the share outside them (Dagster steps,
  market / statistics / forecast / plan / cost assets, Pipes, the node runner, relaunch
  waits): the Dagster-versus-training split.

    python benchmarks/bench_main_job.py [--json out.json] [--keep DIR]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--keep", help="state folder to keep (default: a temporary one, removed)")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="spotfleet-bench-main-"))
    var = work / "var"
    spotfleet = str(Path(sys.executable).with_name("spotfleet"))
    print(f"[bench] running `spotfleet main --var-dir {var}` ...", flush=True)
    t0 = time.perf_counter()
    out = subprocess.run([spotfleet, "main", "--var-dir", str(var)], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        print(out.stdout[-4000:], out.stderr[-4000:], sep="\n")
        raise SystemExit(f"spotfleet main failed with code {out.returncode}")
    print(f"[bench] main job: {wall:.1f} s; running the bare training peer ...", flush=True)
    bare = bare_training(sys.executable, work)

    from infra.db.models import NodeSessionRecord, StageAttempt
    from infra.db.recorder import read_table
    from infra.db.session import make_engine

    eng = make_engine(f"sqlite:///{var / 'spotfleet.db'}")
    sessions = read_table(eng, NodeSessionRecord)
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
        "attempts": len(attempts), "cpus": os.cpu_count(),
    }
    print(f"main job wall          {wall:8.1f} s   (limit 600 s: {wall / 600:.2f} of it)")
    print(f"bare training (peer)   {bare:8.1f} s   -> main / bare = {wall / bare:.2f}x")
    print(f"training nodes alive   {node_alive:8.1f} s   ({100 * node_alive / wall:.0f} % of the wall time; "
          f"{len(sessions)} node sessions, {res['preemptions']} preemptions, {len(attempts)} attempts)")
    print(f"Dagster + orchestration{outside:8.1f} s   ({100 * outside / wall:.0f} %); "
          f"Dagster / training = {outside / node_alive:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
