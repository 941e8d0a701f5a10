"""Elastic recovery vs checkpoint-restore recovery, measured in the same run.

One 4-node elastic stage of ``examples/train_elastic.py`` over 2 emulated zones on the
local fleet (real processes, torch elastic agents, c10d rendezvous, gloo on 127.0.0.1):

1. zone A is reclaimed (2 nodes get the notice): the survivors re-form at world size 2
   (SHRINK, no checkpoint read);
2. zone A regains capacity: 2 replacements join and receive the state from a peer (GROW);
3. both zones are reclaimed at once: every node leaves, rank 0 writes the emergency
   checkpoint; the zones regain capacity right after the last node is gone and the
   controller relaunches 4 nodes, whose rank 0 restores the checkpoint (RELAUNCH + LOAD).

Figures (wall seconds, from the training events):

* recovery time of a change = from the node loss (the leaving nodes' ``exit`` event,
  i.e. the step boundary where they stopped contributing) to the next completed step of
  the group that carries on (its rank 0 ``membership`` event, ``first_step_at``);
* the ratio SHRINK / (RELAUNCH + LOAD) of the same run (issue 11's goal: <= 0.2);
* steps lost per reclaim = the leavers' last completed step minus the step the next
  group starts from.

    python benchmarks/bench_elastic.py [--steps 1500] [--step-sleep 0.03] [--json out.json]
        [--rdzv-poll-interval 1]   # torch's own 1 s rendezvous poll, for comparison
        [--keep]                   # keep the work folder (node logs, checkpoints)

The work folder (``$TMPDIR/bench-elastic-*``) is removed after a completed run; it is
kept, and its path printed, with ``--keep`` or when the run failed or was stopped (SIGTERM,
e.g. from ``timeout``, or Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.providers.local.elastic_drill import (  # noqa: E402
    EventWatch,
    drill_run,
    run_in_thread,
    train_args,
)
from fleet.providers.local.multinode import ElasticConfig  # noqa: E402

ZONE_A, ZONE_B = "us-east-1a", "us-east-1b"


def _leaves(w: EventWatch) -> list:
    return [e for e in w.of("exit") if e.data.get("reason") == "preempted"]


def _recovery(w: EventWatch, leavers: list, group: dict) -> dict:
    lost_at = max(e.time for e in leavers)
    last_step = max(int(e.data["step"]) for e in leavers)
    return {"recovery_seconds": round(group["first_step_at"] - lost_at, 3),
            "steps_lost": last_step - int(group["step"]), "world_size": group["world_size"],
            "state_from": group["state_from"], "at_step": int(group["step"]),
            "nodes_lost": len(leavers)}


#: torch's debug line when a compare-and-set write of the rendezvous key lost (CAS retry)
_CAS_LOST = "has a stale state and failed to sync its local changes"


def _cas_retries(logs: Path, windows: dict[str, tuple[float, float]]) -> dict | None:
    """Lost compare-and-set writes in the nodes' logs (only with SPOTFLEET_RDZV_DEBUG=1),
    in all and within each (start, end) wall-time window."""
    if not os.environ.get("SPOTFLEET_RDZV_DEBUG"):
        return None
    import re
    from datetime import datetime

    # torch's log prefix: "V1126 14:47:18.640000 <pid> <file>:<line>] <message>" (local time)
    stamp = re.compile(r"^[A-Z](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) ")
    year = datetime.now().year
    times = []
    for f in sorted(logs.glob("**/*.log")):
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            if _CAS_LOST in line:
                m = stamp.match(line)
                times.append(datetime(year, *map(int, m.groups())).timestamp() if m
                             else float("nan"))
    out = {"total": len(times)}
    out.update({k: sum(1 for t in times if lo <= t <= hi) for k, (lo, hi) in windows.items()})
    return out


def in_workdir(body: Callable[[Path], int], keep: bool = False) -> int:
    """Run ``body`` in a fresh ``bench-elastic-*`` temporary folder and return its exit code.

    The folder is removed when ``body`` returned 0 and ``keep`` is false; otherwise (``keep``,
    a non-zero code, an exception, ``SystemExit``: a timeout of the run, SIGTERM, Ctrl-C)
    it stays and its path goes to stderr.
    """
    tmp = Path(tempfile.mkdtemp(prefix="bench-elastic-"))
    code: int | None = None
    try:
        code = body(tmp)
        return code
    finally:
        if code == 0 and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            why = "--keep" if code == 0 else "the run failed or was stopped"
            print(f"bench_elastic: work folder kept ({why}): {tmp}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--step-sleep", type=float, default=0.03, help="seconds per step (GPU stand-in)")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--last-call-timeout", type=float, default=None,
                   help="rendezvous last call, s (default: ElasticConfig's)")
    p.add_argument("--rdzv-poll-interval", type=float, default=None,
                   help="a waiting agent's rendezvous poll, s (default: ElasticConfig's; 1 = "
                        "torch's own)")
    p.add_argument("--rdzv-join-skew", type=float, default=None,
                   help="upper bound of torch's random pre-join skew, s (default: "
                        "ElasticConfig's; 0.3 = torch's own)")
    p.add_argument("--keep", action="store_true",
                   help="keep the work folder (node logs, checkpoints) after a completed run")
    a = p.parse_args(argv)
    before = signal.signal(signal.SIGTERM, _terminated)  # e.g. `timeout`: unwind, name the folder
    try:
        return in_workdir(lambda tmp: measure(a, tmp), keep=a.keep)
    finally:
        signal.signal(signal.SIGTERM, before)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def measure(a: argparse.Namespace, tmp: Path) -> int:
    """The benchmark itself, with its work and checkpoint folders under ``tmp``."""
    w = EventWatch()
    elastic = ElasticConfig()
    if a.last_call_timeout is not None:
        elastic.last_call_timeout = a.last_call_timeout
    if a.rdzv_poll_interval is not None:
        elastic.rdzv_poll_interval = a.rdzv_poll_interval
    if a.rdzv_join_skew is not None:
        elastic.rdzv_join_skew = a.rdzv_join_skew
    run = drill_run(tmp / "work", tmp / "ckpt", nodes=4, zones=(ZONE_A, ZONE_B), on_event=w,
                    args=train_args(a.steps, step_sleep=a.step_sleep), digests=False,
                    elastic=elastic)
    t0 = time.time()
    thread, box = run_in_thread(run)
    out: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, no GPU, "
                            f"load {os.getloadavg()[0]:.1f} at start",
                 "steps": a.steps, "step_sleep": a.step_sleep,
                 "last_call_timeout": elastic.last_call_timeout,
                 "rdzv_poll_interval": elastic.rdzv_poll_interval,
                 "rdzv_join_skew": elastic.rdzv_join_skew, "workdir": str(tmp)}

    def need(ok: bool, what: str) -> None:
        if not ok:
            run.cancel()
            raise SystemExit(f"bench_elastic: {what} did not happen within {a.timeout:.0f} s; "
                             f"world sizes so far {w.world_sizes()}")

    need(w.wait(lambda e: 4 in w.world_sizes(), a.timeout), "a 4-node group")
    need(w.wait(lambda e: w.max_step() >= 60, a.timeout), "60 steps")
    # 1. shrink
    run.reclaim_zone(ZONE_A)
    need(w.wait(lambda e: len(w.groups()) >= 2 and w.groups()[-1]["world_size"] == 2, a.timeout),
         "the shrink to 2 nodes")
    shrink = _recovery(w, _leaves(w), w.groups()[-1])
    # 2. grow
    s = w.max_step()
    need(w.wait(lambda e: w.max_step() >= s + 20, a.timeout), "20 steps at world size 2")
    n_groups = len(w.groups())
    run.regain_zone(ZONE_A)
    need(w.wait(lambda e: len(w.groups()) > n_groups and w.groups()[-1]["world_size"] == 4,
                a.timeout), "the grow back to 4 nodes")
    g = w.groups()[-1]
    # a node that missed the round joins the next one: the grow then takes two (or more)
    # re-formations, and the running group pauses in each of them
    grown = w.groups()[n_groups:]
    grow = {"recovery_seconds": round(sum(gr.get("pause_seconds") or float("nan")
                                          for gr in grown), 3),
            "reformations": len(grown), "world_size": 4, "state_from": g["state_from"],
            "at_step": int(g["step"])}
    # 3. every node lost -> relaunch + checkpoint load
    s = w.max_step()
    need(w.wait(lambda e: w.max_step() >= s + 20, a.timeout), "20 steps at world size 4")
    before = len(_leaves(w))
    n_groups = len(w.groups())
    run.reclaim_zone(ZONE_A, ZONE_B)
    need(w.wait(lambda e: len(_leaves(w)) >= before + 4 and not run.alive_nodes(), a.timeout),
         "all 4 nodes leaving")
    run.regain_zone(ZONE_A, ZONE_B)
    need(w.wait(lambda e: len(w.groups()) > n_groups, a.timeout), "the relaunched group")
    relaunch = _recovery(w, _leaves(w)[before:], w.groups()[-1])
    thread.join(a.timeout)
    if "error" in box:
        raise box["error"]
    shrink_group = next(gr for gr in w.groups() if gr["world_size"] == 2)
    lost_at = max(e.time for e in _leaves(w)[:2])
    out["cas_retries"] = _cas_retries(tmp / "work", {
        "launch": (0.0, w.groups()[0]["first_step_at"]),
        "shrink": (lost_at - 1.0, shrink_group["first_step_at"]),
        "relaunch": (max(e.time for e in _leaves(w)[before:]), w.groups()[-1]["first_step_at"])})
    out.update({
        "shrink": shrink, "grow": grow, "relaunch_and_load": relaunch,
        "ratio_shrink_to_relaunch": round(shrink["recovery_seconds"] /
                                          relaunch["recovery_seconds"], 3),
        "restores_while_a_node_survived": sum(1 for gr in w.groups()[:n_groups]
                                              if gr["state_from"] == "checkpoint"),
        # what the relaunch's "allocation" is here: the local fleet's emulated VM
        # allocation + preparation, on a market clock running at wall speed (factor 1)
        "emulated_provisioning_seconds": run.cfg.allocation_seconds + run.cfg.preparation_seconds,
        "market_seconds_per_wall_second": run.cfg.time_scale.factor,
        "world_sizes": w.world_sizes(),
        "wall_seconds": round(time.time() - t0, 1),
        "completed": bool(box.get("result") and box["result"].completed),
    })
    print(f"machine: {out['machine']}")
    print(f"world sizes: {' -> '.join(map(str, out['world_sizes']))}")
    print(f"SHRINK  (zone of 2 nodes reclaimed): survivors' next step after "
          f"{shrink['recovery_seconds']:.2f} s, {shrink['steps_lost']} steps lost, state from "
          f"{shrink['state_from']}")
    split = f", in {grow['reformations']} re-formations" if grow["reformations"] > 1 else ""
    print(f"GROW    (2 nodes join):              group's next step after "
          f"{grow['recovery_seconds']:.2f} s (the pause of the running group{split}), state "
          f"from {grow['state_from']}")
    print(f"RELAUNCH + LOAD (all 4 lost):         next step after "
          f"{relaunch['recovery_seconds']:.2f} s, {relaunch['steps_lost']} steps lost, state from "
          f"{relaunch['state_from']}")
    print(f"ratio SHRINK / (RELAUNCH + LOAD) = {out['ratio_shrink_to_relaunch']:.3f} "
          f"(goal <= 0.2)")
    print(f"(the relaunch pays {out['emulated_provisioning_seconds']:.1f} s of emulated VM allocation + "
          f"preparation; a real spot VM takes minutes, which the shrink never pays)")
    if out["cas_retries"] is not None:
        print(f"compare-and-set retries (rendezvous debug log): {out['cas_retries']}")
    print(json.dumps(out))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0 if out["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
