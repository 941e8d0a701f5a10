"""The node runner: the Dagster Pipes side of a training stage.

Launched by the ``train_<stage>`` asset through ``PipesSubprocessClient`` (local fleet:
temp-file message channel; remote nodes: S3 context and message channel). It builds the
fleet provider, runs the stage attempt (the provider survives preemptions inside the
attempt) and relays every training and provider event back to Dagster as logs; at the
end it reports the stage result (sessions + events) as a custom message and, on
success, the asset materialization metadata.

It keeps ``checkpointing/`` free of Dagster: the training process only writes JSONL
events; this runner is the only piece that speaks Pipes. It imports nothing of
``assets/``: the provider registry and the wire format live in ``fleet/providers/``.

    python -m pipelines.node_runner   # extras come from the Pipes context
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from checkpointing.events import Event
from fleet.providers.base import AttemptFailed
from fleet.providers.registry import build_provider, preempt_node_now
from fleet.providers.terminate import SAME_TERMINATE_SECONDS as _SAME_TERMINATE_SECONDS
from fleet.providers.terminate import StopSaves
from fleet.providers.wire import event_to_dict, session_to_dict, spec_from_dict

PROGRESS_LOG_EVERY_SECONDS = 2.0
#: how a stage result's error starts when the run was terminated (SIGINT / SIGTERM)
TERMINATED_PREFIX = "terminated:"
#: how often the runner checks that its parent (the run worker / fork server) is alive
PARENT_POLL_SECONDS = 0.5
#: a second SIGINT / SIGTERM this soon after the first is the same Terminate (Ctrl-C on
#: ``spotfleet main`` reaches the runner's process group AND is forwarded by the Pipes
#: client), not a second one; a later one forces the stop, but never cuts an emergency save
#: under way (fleet/providers/terminate.py, ``StopSaves``)
SAME_TERMINATE_SECONDS = _SAME_TERMINATE_SECONDS


def _g(x: Any) -> str:
    """A duration for a log line: 6 significant digits (the raw float had 16), as given
    when it is not a number."""
    return f"{x:.6g}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def describe_event(e: Event) -> str | None:
    """One log line for an event (None: not worth a line)."""
    d = e.data
    node = e.node_id or "-"
    k = e.kind
    if k == "progress":
        return (f"[{node}] step {d.get('step')}/{d.get('total_steps')} "
                f"({d.get('mean_step_seconds', 0) or 0:.3f} s/step, loss {d.get('loss')})")
    if k == "launch":
        return (f"[{node}] launched in {d.get('zone')} ({'spot' if d.get('spot', True) else 'ON-DEMAND'}, "
                f"{d.get('price_per_hour')} $/h): {d.get('reason', '')}")
    if k == "notice_sent":
        return f"[{node}] preemption notice sent in {d.get('zone')} (grace {d.get('grace_seconds')} s)"
    if k == "notice":
        return f"[{node}] training process got the notice (source {d.get('source')})"
    if k == "save_committed":
        # the provider converted the stall to market seconds (fleet.providers.local.clock);
        # the interval line below is in the training process's own seconds: on the local
        # fleet one wall second is many market seconds, so the two lines say which
        return (f"[{node}] checkpoint committed: step {d.get('step')} ({d.get('kind')}), "
                f"stall {float(d.get('stall_seconds') or 0):.3f} s (market time)")
    if k == "save_failed":
        return f"[{node}] checkpoint FAILED at step {d.get('step')}: {d.get('reason')}"
    if k == "restore":
        return f"[{node}] resumed from step {d.get('step')} ({d.get('location')})"
    if k == "preempted":
        return (f"[{node}] PREEMPTED in {d.get('zone')} at step {d.get('last_step')} "
                f"(last checkpoint {d.get('last_checkpoint_step')})")
    if k == "failed" and d.get("origin") == "provider":
        why = f": {d['reason']}" if d.get("reason") else " without a preemption notice"
        ckpt = d.get("last_checkpoint_step")
        if ckpt is None and d.get("resumed_from_step"):  # committed none itself, resumed one
            last = f"no checkpoint committed by this node, it resumed from step {d['resumed_from_step']}"
        else:
            last = f"last checkpoint {ckpt}"
        return f"[{node}] FAILED in {d.get('zone')} (exit code {d.get('exit_code')}, {last}){why}"
    if k == "terminating":
        return (f"Terminate: {', '.join(d.get('nodes') or []) or 'no node'} asked to save now "
                f"(preemption notice); killed if still running after {_g(d.get('grace_seconds'))} s")
    if k == "cancelled" and d.get("nodes"):
        return "stage stopped: " + "; ".join(d["nodes"])
    if k == "relaunch":
        return f"relaunch {d.get('from_zone')} -> {d.get('to_zone')} ({d.get('reason', '')})"
    if k == "decision":
        where = f" (replay second {d['replay_seconds']})" if d.get("replay_seconds") is not None else ""
        return (f"fleet policy {d.get('policy')} ({d.get('policy_class')}): "
                f"{d.get('target')} at market second {d.get('market_seconds')}{where}")
    if k == "interval":
        units = d.get("loss_units")
        group = (f"; MTTP of losing all {units} zones at once, one zone's "
                 f"{_g(d.get('node_mttp_seconds'))} s" if isinstance(units, int) and units > 1 else "")
        return (f"[{node}] insurance interval tau {_g(d.get('tau_seconds'))} s (MTTP "
                f"{_g(d.get('mttp_seconds'))} s, R {_g(d.get('restart_seconds'))} s, delta "
                f"{_g(d.get('delta_seconds'))} s; the training process's clock{group})")
    if k == "moved":
        return f"fleet policy moves {d.get('from_zone')} -> {d.get('to_zone')}: {d.get('reason')}"
    if k in ("start", "save_started", "stats"):
        return None
    return f"[{node}] {k}: {d}"


def main() -> int:
    from dagster_pipes import PipesDefaultContextLoader, open_dagster_pipes

    loader = None
    writer = None
    if os.environ.get("SPOTFLEET_PIPES_CHANNEL") == "s3":
        import boto3
        from dagster_pipes import PipesS3ContextLoader, PipesS3MessageWriter

        client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
        loader = PipesS3ContextLoader(client=client)
        writer = PipesS3MessageWriter(client=client, interval=1.0)
    with open_dagster_pipes(context_loader=loader or PipesDefaultContextLoader(),
                            message_writer=writer) as pipes:
        extras = pipes.extras
        spec = spec_from_dict(extras["spec"])
        attempt = int(extras.get("attempt", 1))
        lose_at = extras.get("lose_attempt_at_step")
        provider = build_provider(extras.get("provider", "local"), extras.get("provider_options") or {})
        events: list[Event] = []
        lock = threading.Lock()
        last_progress_log = [0.0]
        lost = threading.Event()
        seen_progress: list[float] = []
        inject_at = sorted(int(x) for x in extras.get("inject_preemptions_at_steps") or [])

        on_demand_nodes: set[str] = set()

        def inject(node_id: str) -> None:
            if not preempt_node_now(provider, spec.name, node_id):
                pipes.log.warning(f"fault injection: could not preempt {node_id} (provider "
                                  f"{provider.name} has no preempt_now, or the node already ended)")

        saves = StopSaves()  # which nodes are saving: a forced stop waits for them

        def on_event(ev: Event) -> None:
            with lock:
                events.append(ev)
            saves.observe(ev.kind, ev.node_id, ev.data)
            if ev.kind == "launch" and ev.node_id and ev.data.get("spot") is False:
                on_demand_nodes.add(ev.node_id)  # fault injection never preempts on-demand nodes
            if ev.kind == "progress":
                step = ev.data.get("step")
                if isinstance(step, (int, float)) and not seen_progress:
                    seen_progress.append(step)  # thresholds already passed (resumed) are dropped
                    while inject_at and inject_at[0] <= step:
                        inject_at.pop(0)
                if inject_at and isinstance(step, (int, float)) and step >= inject_at[0] and ev.node_id \
                        and ev.node_id not in on_demand_nodes:
                    while inject_at and step >= inject_at[0]:
                        inject_at.pop(0)
                    pipes.log.warning(f"fault injection: preemption notice to {ev.node_id} at step {step}")
                    threading.Thread(target=inject, args=(ev.node_id,), daemon=True).start()
                if lose_at is not None and attempt == 1 and isinstance(step, (int, float)) \
                        and step >= int(lose_at) and not lost.is_set():
                    lost.set()
                    pipes.log.warning(f"fault injection: the whole node group of {spec.name} "
                                      f"is lost at step {step} (attempt {attempt})")
                    threading.Thread(target=provider.cancel, args=(spec.name,), daemon=True).start()
                now = time.monotonic()
                if now - last_progress_log[0] < PROGRESS_LOG_EVERY_SECONDS:
                    return
                last_progress_log[0] = now
            line = describe_event(ev)
            if line:
                pipes.log.info(line)

        # SIGINT: what Dagster's Pipes client forwards when the run is terminated (UI
        # "Terminate", SIGTERM/SIGINT to the run worker, Ctrl-C on `spotfleet main`);
        # SIGTERM: a process manager. Either stops the stage gracefully (provider.terminate:
        # each node gets a preemption notice, makes its emergency save and exits, killed
        # after the stage's terminate_grace_seconds), its sessions recorded up to the stop
        # and the result reported below (not retried). A second signal, or the run worker
        # gone, forces the stop (provider.cancel), under the rule of
        # fleet/providers/terminate.py: a signal within SAME_TERMINATE_SECONDS of the first
        # is the same Terminate; a later one kills the nodes at once when none is saving,
        # else once the emergency saves under way have ended (one Terminate forwarded
        # twice, seconds apart, must not cut the save it asked for; a user's second Ctrl-C
        # still kills a hung node at once); a third signal, SAME_TERMINATE_SECONDS after the
        # second, kills at once, a save under way included (one hung inside its save).
        terminated: list[str] = []
        force = threading.Event()
        hard = threading.Event()  # a signal after the force: kill now, saves under way included
        killed: list[str] = []  # how the force killed running nodes: "third" / "after saves" / "at once"
        run_done = threading.Event()

        def keep_cancelling() -> None:
            # the stage may not be registered with the provider yet (building the market):
            # ask until run_stage returns, so a signal that came early is not lost
            waited: list[str] = []
            while not run_done.is_set():
                busy = saves.saving(time.monotonic()) if force.is_set() and not hard.is_set() else []
                if force.is_set() and not busy:
                    if not killed and saves.running():
                        killed.append("third" if hard.is_set() else "after saves" if waited else "at once")
                    provider.cancel(spec.name)
                else:
                    if busy and not waited:
                        waited += busy
                        pipes.log.warning(f"stage {spec.name}: a second Terminate; {', '.join(busy)} "
                                          "is making its emergency save: killed when it ends")
                    provider.terminate(spec.name)
                run_done.wait(0.1)

        first_at: list[float] = []
        force_at: list[float] = []

        def on_term(signum, _frame):
            first = not terminated
            now = time.monotonic()
            terminated.append(f"got {signal.Signals(signum).name} (the run was terminated)")
            if first:
                first_at.append(now)
                saves.begin(now)
            elif force_at and now - force_at[0] >= SAME_TERMINATE_SECONDS:
                hard.set()  # a third: kill now, a save under way included
            elif not force_at and (not first_at or now - first_at[0] >= SAME_TERMINATE_SECONDS):
                force_at.append(now)
                force.set()  # a second Terminate: kill, sparing the saves under way
            if first:  # nothing here that takes a lock the interrupted frame may hold
                threading.Thread(target=keep_cancelling, daemon=True, name="cancel-stage").start()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)

        def watch_parent(parent: int) -> None:
            # the run worker killed outright (SIGKILL, OOM, "Force termination"): nobody
            # forwards a signal, and an orphaned runner trained on to the end, unrecorded
            # and billing its nodes; its parent changing (reparented) stops the stage too
            while not run_done.wait(PARENT_POLL_SECONDS):
                if os.getppid() != parent:
                    force.set()  # nobody is left to wait for a save to be reported
                    if not terminated:
                        terminated.append("lost its parent (the run worker was killed)")
                        keep_cancelling()
                    return

        threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True, name="parent").start()
        pipes.log.info(f"stage {spec.name} attempt {attempt}: provider {provider.name}, zones "
                       f"{list(spec.zones)}, {'spot' if spec.use_spot else 'on-demand'}, "
                       f"deadline {spec.deadline_seconds} s")
        error = None
        result = None
        try:
            if terminated:
                raise AttemptFailed(f"stage {spec.name!r} was cancelled before it launched")
            result = provider.run_stage(spec, attempt=attempt, on_event=on_event)
            if lost.is_set():
                raise AttemptFailed(f"the whole node group was lost at step >= {lose_at} (injected fault)")
        except AttemptFailed as exc:
            error = f"AttemptFailed: {exc}"
        except Exception as exc:  # reported to the asset, which fails the step
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        finally:
            run_done.set()
        if terminated and not (result is not None and result.completed and error is None):
            if killed and killed[0] == "third":
                how = ("its nodes were killed at once (a third signal: emergency saves under way "
                       "included)")
            elif killed and killed[0] == "after saves":
                how = ("its nodes were killed at a second Terminate, once the emergency saves under "
                       "way had ended")
            elif killed and len(terminated) > 1 and first_at:
                how = "its nodes were killed at once (a second Terminate)"
            else:
                how = "its nodes were stopped"
            error = (f"{TERMINATED_PREFIX} the node runner {terminated[0]}; "
                     f"{how} and billed up to the stop. {error or ''}").strip()
            pipes.log.warning(f"stage {spec.name} attempt {attempt}: {error}")
        sessions = list(result.sessions) if result is not None else list(provider.sessions())
        sessions = [s for s in sessions if s.stage == spec.name and s.attempt == attempt] or sessions
        with lock:
            evs = list(result.events) if result is not None and result.events else list(events)
        completed = bool(result is not None and result.completed and error is None)
        final_step = result.final_step if result is not None else max(
            (s.last_step for s in sessions if s.last_step is not None), default=None)
        pipes.report_custom_message({
            "type": "stage_result",
            "stage": spec.name,
            "attempt": attempt,
            "completed": completed,
            "final_step": final_step,
            "error": error,
            "terminated": terminated[0] if terminated else None,
            "info": _jsonable(result.info) if result is not None else {},
            "sessions": [session_to_dict(s) for s in sessions],
            "events": [event_to_dict(e) for e in evs],
        })
        if completed:
            pipes.report_asset_materialization(metadata={
                "final_step": final_step,
                "node_sessions": len(sessions),
                "preemptions": sum(1 for s in sessions if s.end_reason == "preempted"),
                "zones_used": ", ".join(dict.fromkeys(s.zone for s in sessions)),
            })
        else:
            pipes.log.error(f"stage {spec.name} attempt {attempt} did not finish: {error}")
    return 0


def _jsonable(obj: Any) -> Any:
    import json

    try:
        json.dumps(obj)
        return obj
    except TypeError:
        return json.loads(json.dumps(obj, default=str))


if __name__ == "__main__":
    code = main()
    # the Pipes channel is closed and flushed (open_dagster_pipes exited): skip the interpreter's
    # teardown of numpy/pandas/providers (~0.2-0.5 s on the stage's critical path, per attempt)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
