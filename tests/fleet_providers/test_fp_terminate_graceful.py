"""An operator's Terminate is a graceful stop on the local fleet (fleet/providers/terminate.py).

``LocalFleetProvider.terminate(stage)`` gives each running node the notice a preemption
gives it (``PreemptionInjector.preempt_now``: the notice signal and/or its metadata
endpoint), waits up to the stage's ``terminate_grace_seconds`` for its emergency save, then
kills what is left. Before (2026-11-28) Terminate went through ``cancel``: SIGKILL at once,
every step since the last periodic checkpoint lost.

Real ``examples/train_example.py`` processes: a node terminated between two periodic
checkpoints saves the step it reached, the re-execution (attempt 2 on the same checkpoint
prefix) resumes at exactly that step, and the final weights are bit-identical to a run that
was never interrupted. A hung (SIGSTOPped) node is killed after the grace, and the error
says no save was made and which checkpoint a re-execution resumes from.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from checkpointing.events import read_events
from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.providers.base import AttemptFailed, StageSpec
from fleet.providers.local import LocalFleetConfig, LocalFleetProvider, is_provider_event
from fleet.providers.terminate import check_terminate_grace, terminate_grace_seconds
from pipelines.config import PipelineConfigError, parse_pipelines

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
ZONES = ["us-east-1a", "us-east-1b", "us-west-2a"]
PERIODIC = 40
TRAIN = ["--steps", "200", "--seed", "5", "--model", "mlp", "--size", "tiny",
         "--periodic-every", str(PERIODIC), "--progress-every", "1"]


# ------------------------------------------------------------------------ the grace rule

def test_grace_auto_is_the_notice_window_and_zero_kills_at_once():
    assert check_terminate_grace("auto") == "auto"
    assert terminate_grace_seconds("auto", 6.0) == 6.0
    assert terminate_grace_seconds(check_terminate_grace(45), 6.0) == 45.0
    assert terminate_grace_seconds(check_terminate_grace(0), 6.0) == 0.0


def test_the_grace_a_pipeline_stage_gets_per_provider():
    from fleet.providers.registry import terminate_grace_wall_seconds

    # "auto" on the local fleet: the market's notice window (grace_seconds, else the cloud's x 0.05)
    assert terminate_grace_wall_seconds("local", "auto", {"cloud": "signal", "grace_seconds": 2}) == 2.0
    assert terminate_grace_wall_seconds("local", "auto", {"cloud": "aws"}) == pytest.approx(6.0)
    assert terminate_grace_wall_seconds("local", 45.0, {"cloud": "aws"}) == 45.0
    # SkyPilot's terminate is its cancel: no grace of ours (docs/providers.md)
    assert terminate_grace_wall_seconds("skypilot", "auto", None) == 0.0


def _pipeline(**stage_extra):
    stage = {"name": "s", "script": "examples/train_example.py", **stage_extra}
    return {"pipelines": [{"name": "p", "checkpoint_uri": "file:///tmp/terminate19/ck", "stages": [stage]}]}


@pytest.mark.parametrize("bad", [-1, "later", float("inf"), True, 10_000])
def test_bad_terminate_grace_in_yaml_names_the_field_and_the_fix(bad):
    with pytest.raises(PipelineConfigError) as e:
        parse_pipelines(_pipeline(terminate_grace_seconds=bad), semantic=False)
    msg = str(e.value)
    assert "terminate_grace_seconds" in msg and "0 = kill at once" in msg and "'auto'" in msg


def test_yaml_terminate_grace_parses():
    [cfg] = parse_pipelines(_pipeline(), semantic=False)
    assert cfg.stages[0].terminate_grace_seconds == "auto"
    [cfg] = parse_pipelines(_pipeline(terminate_grace_seconds=90), semantic=False)
    assert cfg.stages[0].terminate_grace_seconds == 90.0


# --------------------------------------------------------------------------- real runs

def _start_uninterrupted(tmp: Path) -> tuple[subprocess.Popen, Path]:
    """The reference run (never interrupted), started in the background."""
    ev = tmp / "ref-events.jsonl"
    env = dict(os.environ, SPOTFLEET_EVENTS_FILE=str(ev), SPOTFLEET_NODE_ID="ref")
    for k in ("SPOTFLEET_STATS_FILE", "SPOTFLEET_NOTICE_SOURCES"):
        env.pop(k, None)
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), *TRAIN, "--checkpoint-uri", str(tmp / "ref")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, ev


def _uninterrupted_sha(proc: subprocess.Popen, ev: Path) -> str:
    assert proc.wait(timeout=180) == 0
    return [e for e in read_events(ev) if e.kind == "exit"][-1].data["state_sha256"]


def _cfg(tmp_path: Path, cloud: str) -> LocalFleetConfig:
    # capacity up the whole run (100 h up per zone): only the Terminate stops a node
    return LocalFleetConfig(
        schedule=CapacitySchedule(CapacitySchedule.rotating(ZONES, up_hours=100).traces.values(),
                                  offset_seconds=300.0),
        time_scale=TimeScale(1.0), cloud=cloud, grace_seconds=5.0, allocation_seconds=0.05,
        preparation_seconds=0.05, workdir=tmp_path / "w")


def _spec(tmp_path: Path, spot: bool, **kw) -> StageSpec:
    return StageSpec(name="t", command=[sys.executable, str(EXAMPLE), *TRAIN, "--step-sleep", "0.03"],
                     checkpoint_uri=str(tmp_path / "ckpt"), zones=tuple(ZONES), use_spot=spot,
                     policy="failover", **kw)


def _run(prov: LocalFleetProvider, spec: StageSpec, attempt: int, on_event) -> dict:
    out: dict = {}

    def go() -> None:
        try:
            out["result"] = prov.run_stage(spec, attempt=attempt, on_event=on_event)
        except AttemptFailed as exc:
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout=180)
    if t.is_alive():
        prov.cancel(spec.name)
        t.join(timeout=30)
        pytest.fail("the stage did not end")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cloud,spot", [("signal", False), ("aws", True)],
                         ids=["signal-on-demand", "aws-endpoint-spot"])
def test_terminate_between_checkpoints_saves_and_resumes_bit_identical(tmp_path, cloud, spot):
    """Terminate at a step between two periodic checkpoints (>= 50, the periodic ones are
    40 and 80): the node gets the notice (SIGTERM on the 'signal' cloud, its AWS metadata
    endpoint on 'aws'), commits an emergency checkpoint at the step it reached and exits;
    the session is recorded ``cancelled`` with that step; attempt 2 resumes there (0 steps
    lost) and ends bit-identical to an uninterrupted run. Before: SIGKILL at once, the
    session's last checkpoint 40, the resume lost every step after it."""
    ref = _start_uninterrupted(tmp_path)
    prov = LocalFleetProvider(_cfg(tmp_path, cloud))
    spec = _spec(tmp_path, spot)
    asked: list[tuple[int, float]] = []

    def on_event(ev) -> None:
        if ev.kind == "progress" and not asked and ev.data.get("step", 0) >= 50:
            asked.append((int(ev.data["step"]), time.time()))
            threading.Thread(target=prov.terminate, args=("t",), daemon=True).start()

    out = _run(prov, spec, 1, on_event)
    assert asked and "error" in out, out
    msg = str(out["error"])
    [s] = list(prov.sessions())
    assert s.end_reason == "cancelled"
    saved = s.last_checkpoint_step
    # the emergency save is the step the node reached, past the Terminate and short of the
    # next periodic checkpoint (80): not the periodic 40 the old kill left
    assert saved is not None and asked[0][0] <= saved < 2 * PERIODIC, (saved, asked)
    assert saved % PERIODIC != 0 and s.last_step == saved
    assert f"saved an emergency checkpoint at step {saved}" in msg and "0 steps lost" in msg
    assert "grace 5 s" in msg
    assert s.ended_at is not None and s.ended_at > s.launched_at  # billed up to the stop
    kinds = [e.kind for e in read_events(Path(tmp_path / "w" / "t" / "attempt-1" / "events" /
                                              f"{s.node_id}.jsonl"))]
    assert "notice" in kinds  # the same notice path as a preemption
    # stopped by itself well inside the grace (no kill)
    assert s.ended_at - s.launched_at > 0

    # re-execution: attempt 2 on the same checkpoint prefix resumes at exactly that step
    prov2 = LocalFleetProvider(_cfg(tmp_path, cloud))
    out2 = _run(prov2, spec, 2, None)
    assert "result" in out2, out2
    res = out2["result"]
    assert res.completed and res.final_step == 200
    first = res.sessions[0]
    assert first.first_step == saved  # 0 steps lost
    starts = [e for e in res.events if not is_provider_event(e) and e.kind == "start"]
    assert starts[0].data["resumed_from_step"] == saved
    assert res.info["state_sha256"] == _uninterrupted_sha(*ref)


@pytest.mark.slow
def test_terminate_of_a_hung_node_kills_it_after_the_grace_and_says_no_save(tmp_path):
    """SIGSTOP the training process right after its first committed checkpoint, then
    Terminate with a 2 s grace: the notice cannot be acted on, so the node is SIGKILLed
    when the grace ends (not before, not never); the error says no emergency save was
    made and that re-execution resumes from that checkpoint's step."""
    prov = LocalFleetProvider(_cfg(tmp_path, "signal"))
    spec = _spec(tmp_path, False, terminate_grace_seconds=2.0, stall_timeout_seconds=None)
    stopped: list[float] = []
    seen: list = []
    committed: list[int] = []

    def on_event(ev) -> None:
        seen.append(ev)
        if ev.kind == "save_committed" and not stopped:
            [node] = [n for n in prov._runs["t"]._nodes if n.node_id == ev.node_id]
            os.kill(node.proc.pid, signal.SIGSTOP)  # alive, silent: a deadlock
            stopped.append(time.time())
            committed.append(int(ev.data["step"]))
            threading.Thread(target=prov.terminate, args=("t",), daemon=True).start()

    started = time.time()
    out = _run(prov, spec, 1, on_event)
    took = time.time() - (stopped[0] if stopped else started)
    assert stopped and "error" in out, out
    msg = str(out["error"])
    [s] = list(prov.sessions())
    assert s.end_reason == "cancelled" and s.last_checkpoint_step == committed[0]
    assert "made no emergency save within the 2 s grace" in msg and "was killed" in msg
    assert f"re-execution resumes from step {committed[0]}" in msg
    assert 1.8 <= took < 15, took  # killed when the grace ended
    [term] = [e for e in seen if is_provider_event(e) and e.kind == "terminating"]
    assert term.data["grace_seconds"] == 2.0


@pytest.mark.slow
def test_grace_zero_kills_at_once_as_before(tmp_path):
    """``terminate_grace_seconds: 0``: Terminate kills at once (no notice, no save), as
    every Terminate did before."""
    prov = LocalFleetProvider(_cfg(tmp_path, "signal"))
    spec = _spec(tmp_path, False, terminate_grace_seconds=0)
    asked: list[int] = []

    def on_event(ev) -> None:
        if ev.kind == "progress" and not asked and ev.data.get("step", 0) >= 50:
            asked.append(int(ev.data["step"]))
            threading.Thread(target=prov.terminate, args=("t",), daemon=True).start()

    out = _run(prov, spec, 1, on_event)
    assert "error" in out
    [s] = list(prov.sessions())
    assert s.end_reason == "cancelled" and s.notice_at is None
    assert "grace" not in str(out["error"])
    events = read_events(tmp_path / "w" / "t" / "attempt-1" / "events" / f"{s.node_id}.jsonl")
    assert not [e for e in events if e.kind in ("notice", "save_started") and
                e.data.get("kind", "emergency") == "emergency"]


def test_terminate_after_the_last_step_still_completes(tmp_path):
    """A Terminate that lands after the node reported its last step (its ``exit`` event,
    ``completed``) does not turn the finished stage into a cancelled one."""
    standin = str(Path(__file__).parent / "standin_trainer.py")
    prov = LocalFleetProvider(_cfg(tmp_path, "signal"))
    spec = StageSpec(name="t", command=[sys.executable, standin, "--steps", "20", "--step-sleep", "0.01"],
                     checkpoint_uri=str(tmp_path / "ckpt"), use_spot=False)

    def on_event(ev) -> None:
        if ev.kind == "exit" and ev.data.get("reason") == "completed":
            prov.terminate("t")  # on the provider's thread: before it sees the process end

    out = _run(prov, spec, 1, on_event)
    assert "result" in out, out
    assert out["result"].completed and [s.end_reason for s in prov.sessions()] == ["completed"]


# ------------------------------------ when a second signal forces (review F6, 2026-11-28)

def test_stop_saves_spares_a_node_saving_or_about_to_and_nothing_else():
    """The rule the node runner applies to a second SIGINT / SIGTERM
    (fleet/providers/terminate.py): a forced kill waits for nodes that acknowledged the
    notice until their emergency save ends, and for a node that has not yet for
    SAME_TERMINATE_SECONDS + ACK_STEPS of its own steps; a hung or finished node is not spared."""
    from fleet.providers.terminate import ACK_STEPS, SAME_TERMINATE_SECONDS, StopSaves

    s = StopSaves()
    for n in ("a", "b", "c"):
        s.observe("start", n, {})
        s.observe("progress", n, {"step": 5, "mean_step_seconds": 1.0})
    s.observe("launch", "d", {})  # never started training: nothing to save
    s.begin(100.0)
    s.observe("notice", "a", {"step": 7})
    s.observe("save_started", "a", {"step": 7, "kind": "emergency"})
    s.observe("save_committed", "a", {"step": 5, "kind": "periodic"})  # an older save landing
    s.observe("exit", "c", {"reason": "completed"})
    window = SAME_TERMINATE_SECONDS + ACK_STEPS * 1.0
    assert s.saving(100.0 + window - 0.01) == ["a", "b"]  # b: not at its step boundary yet
    assert s.saving(100.0 + window + 0.01) == ["a"]  # b: hung (no acknowledgement in its steps)
    s.observe("save_committed", "a", {"step": 7, "kind": "emergency"})
    assert s.saving(1e9) == [] and s.running() == ["a", "b"]  # a: its save is over, it still runs
    s.observe("exit", "a", {"reason": "preempted"})
    s.observe("cancelled", "b", {})
    assert s.running() == []
    # a save that failed ends the wait too; events without a node are ignored
    t = StopSaves()
    t.observe("start", "x", {})
    t.observe("save_started", "x", {"kind": "emergency"})
    t.observe("cancelled", None, {"nodes": ["x"]})
    assert t.saving(0.0) == ["x"]
    t.observe("save_failed", "x", {"kind": "emergency", "reason": "deadline"})
    assert t.saving(0.0) == []


def test_stop_saves_spares_a_node_again_after_a_false_alarm():
    """A node that saved for a notice and trained on (a false alarm) is spared again when the
    Terminate's notice comes; until session 20 its first save's end left it unprotected for
    good, and a duplicated forward killed it mid-save (review finding)."""
    from fleet.providers.terminate import StopSaves

    s = StopSaves()
    s.observe("start", "a", {})
    s.observe("notice", "a", {"step": 3})
    s.observe("save_committed", "a", {"step": 3, "kind": "emergency"})
    s.observe("progress", "a", {"step": 9, "mean_step_seconds": 1.0})  # trained on
    s.begin(0.0)
    s.observe("notice", "a", {"step": 10})  # the Terminate's
    assert s.saving(1e9) == ["a"]
    s.observe("save_committed", "a", {"step": 10, "kind": "emergency"})
    assert s.saving(1e9) == [] and s.running() == ["a"]


def test_stop_saves_begin_takes_no_lock_the_interrupted_frame_may_hold():
    """The node runner calls ``begin`` from its signal handler, which runs on the main thread
    inside whatever it interrupted -- possibly ``observe`` holding the lock (the local provider
    relays events on the main thread). With a lock in ``begin`` that Terminate deadlocked the
    runner (review finding, session 20)."""
    import threading

    from fleet.providers.terminate import StopSaves

    s = StopSaves()
    done = threading.Event()

    def interrupted_inside_observe() -> None:
        with s._lock:  # the frame the signal interrupted
            s.begin(5.0)  # the handler, same thread
        done.set()

    threading.Thread(target=interrupted_inside_observe, daemon=True).start()
    assert done.wait(30), "begin() waited for a lock its own thread holds"
    assert s.stop_at == 5.0
