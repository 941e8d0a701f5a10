"""Terminating a run mid-stage, as the Dagster UI's "Terminate" does, then re-executing it.

Dagster terminates a run by interrupting its run worker (SIGINT; SIGTERM is mapped to the
same handler): here a thread sends SIGINT to this process while the training stage runs
on the local fleet (a real node runner and a real training process, real SQLite, a real
DagsterInstance). What must hold:

* the training process is gone (no process left with this test's checkpoint prefix);
* the attempt is recorded, failed, with a message saying it was terminated, and its node
  session is billed up to the stop (cancelled, not zero, not open-ended);
* Dagster does NOT retry the step (a retry launched new nodes after Terminate and the run
  went on to SUCCESS, the interrupted attempt never recorded);
* the latest checkpoint survives: a re-execution from failure resumes from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ENV_YAML = "SPOTFLEET_TEST_TERM_YAML"
ENV_VAR_DIR = "SPOTFLEET_TEST_TERM_VAR"
PIPELINE = {
    "name": "term", "provider": "local", "deadline_hours": 48, "checkpoint_uri": "checkpoints/term",
    "schedule_cron": None,
    "market": {"seed": 4, "wall_seconds_per_market_hour": 30, "cloud": "signal", "grace_seconds": 2},
    "stages": [{"name": "train", "script": "examples/train_example.py",
                "args": ["--steps", "300", "--seed", "1", "--size", "tiny", "--step-sleep", "0.03",
                         "--periodic-every", "40", "--progress-every", "5"],
                "work_hours": 1.0, "resources": {"zones": ["us-east-1f", "us-east-1c", "us-west-2b"]}}],
}


def define_term_job():
    """Reconstructable target: the training job of the YAML at $ENV_YAML."""
    from pipelines.config import load_pipelines
    from pipelines.definitions import build_definitions, pipeline_job_name
    from pipelines.resources import FleetResource, StatsDB

    var = os.environ[ENV_VAR_DIR]
    defs = build_definitions(load_pipelines(os.environ[ENV_YAML]), include_gfs=False,
                             resources={"stats_db": StatsDB(url="", var_dir=var),
                                        "fleet": FleetResource(var_dir=var)})
    return defs.resolve_job_def(pipeline_job_name("term"))


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment mentions ``marker`` (the training nodes carry the
    checkpoint prefix in SPOTFLEET_CHECKPOINT_URI)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes()
            state = (d / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != "Z":
            found.append(int(d.name))
    return found


def _terminate_after_checkpoint(ckpt_root: Path, step: int, sent: list[float]) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        if any(int(p.parent.name.split("-")[1]) >= step
               for p in ckpt_root.glob("*/*/ckpt-*/MANIFEST.json")):
            break
        time.sleep(0.1)
    else:
        return
    sent.append(time.time())
    os.kill(os.getpid(), signal.SIGINT)  # what Dagster's run termination delivers to the run worker


def test_terminate_mid_stage_stops_records_and_resumes(tmp_path, monkeypatch):
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable
    from dagster._core.definitions.reconstruct import ReconstructableJob

    from assets import cost_tables as ct
    from fleet.contract import session_cost_usd
    from infra.db.session import make_engine

    cfg, var = tmp_path / "term.yaml", tmp_path / "var"
    cfg.write_text(yaml.safe_dump({"pipelines": [PIPELINE]}, sort_keys=False))
    monkeypatch.setenv(ENV_YAML, str(cfg))
    monkeypatch.setenv(ENV_VAR_DIR, str(var))
    for k in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR", "SPOTFLEET_FORK_SERVER"):
        monkeypatch.delenv(k, raising=False)
    job = reconstructable(define_term_job)
    (tmp_path / "dagster_home").mkdir()
    sent: list[float] = []
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        t = threading.Thread(target=_terminate_after_checkpoint,
                             args=(var / "checkpoints" / "term", 40, sent), daemon=True)
        t.start()
        started = time.time()
        root = execute_job(job, instance=instance)
        wall = time.time() - started
        t.join(timeout=1)
        assert sent, "no checkpoint at step >= 40 appeared: the stage never got going"
        assert not root.success
        events = root.all_events
        assert not [e for e in events if e.event_type_value == "STEP_UP_FOR_RETRY"], \
            "the terminated step was retried (new nodes launched after Terminate)"
        [failure] = [e.event_specific_data.error.message for e in events
                     if e.event_type_value == "STEP_FAILURE"]
        assert "terminated: the node runner got SIGINT" in failure and "Re-execute" in failure
        # no training process of this test survives the run
        assert _processes_with(str(tmp_path)) == []

        eng = make_engine(f"sqlite:///{var / 'spotfleet.db'}")
        data = ct.load(eng, "term")
        [att] = data.attempts.to_dict("records")
        assert att["status"] == "failed" and att["error"].startswith("terminated:")
        # the market (seed 4, replayed on the wall clock) may preempt an earlier node of the
        # attempt before the Terminate: the Terminate stops the last one -- or, when it lands
        # while the fleet replaces a just-preempted node, there is no node to cancel and every
        # session ended preempted (seen once in session 20: 'preempted' == 'cancelled')
        rows = data.sessions.sort_values("launched_at").to_dict("records")
        cancelled = [r for r in rows if r["end_reason"] == "cancelled"]
        assert len(cancelled) <= 1 and (not cancelled or rows[-1] is cancelled[0]), rows
        assert all(r["end_reason"] == "preempted" for r in rows if r not in cancelled), rows
        for s in cancelled:
            # billed up to the stop: not zero, and no longer than the run lasted (market
            # seconds: 30 wall s per market hour -> x120)
            billed = s["ended_at"] - s["launched_at"]
            assert 0 < billed <= wall * 120
            assert session_cost_usd(s["price_per_hour"], s["launched_at"], s["ended_at"]) > 0
        kept = max(int(r["last_checkpoint_step"]) for r in rows)
        assert kept >= 40

        ReconstructableJob.get_definition.cache_clear()
        ReconstructableJob.get_repository_definition.cache_clear()
        options = ReexecutionOptions.from_failure(run_id=root.run_id, instance=instance)
        with execute_job(job, instance=instance, reexecution_options=options) as rerun:
            assert rerun.success
            rerun_id = rerun.run_id
    data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "term")
    mine = data.sessions[data.sessions["run_id"] == rerun_id].sort_values("launched_at")
    trained = mine[mine["first_step"].notna()]
    # the re-execution resumed from the checkpoint the terminated attempt left (or a later one
    # if the market preempted the re-execution's first node), never from step 0
    assert int(trained["first_step"].iloc[0]) == kept
    assert int(trained["last_step"].iloc[-1]) == 300


WORKER = """
import os, sys
os.environ[{env!r}] = sys.argv[2]
os.environ[{yaml_env!r}] = sys.argv[1]
sys.path.insert(0, {tests!r})
from dagster import DagsterInstance
from test_orch_terminate import define_term_job
with DagsterInstance.ephemeral() as instance:
    define_term_job().execute_in_process(instance=instance, raise_on_error=False)
"""


def test_a_run_worker_killed_outright_leaves_no_training_behind(tmp_path):
    """SIGKILL of the run worker (OOM, "Force termination", a lost pod): nothing can forward
    a signal. Before: the orphaned node runner trained on to the last step, unrecorded, its
    node billed all along. Now the runner sees its parent go and stops its stage."""
    import subprocess
    import sys

    cfg, var = tmp_path / "term.yaml", tmp_path / "var"
    cfg.write_text(yaml.safe_dump({"pipelines": [PIPELINE]}, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR",
                                                             "SPOTFLEET_FORK_SERVER")}
    code = WORKER.format(env=ENV_VAR_DIR, yaml_env=ENV_YAML, tests=str(Path(__file__).parent))
    worker = subprocess.Popen([sys.executable, "-c", code, str(cfg), str(var)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = var / "checkpoints" / "term"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(ckpts.glob("*/*/ckpt-*/MANIFEST.json")):
            assert worker.poll() is None, "the run ended before its first checkpoint"
            time.sleep(0.1)
        assert _processes_with(str(tmp_path)), "no training process was running"
    finally:
        worker.kill()
        worker.wait()
    deadline = time.time() + 120
    while time.time() < deadline and _processes_with(str(tmp_path)):
        time.sleep(0.2)
    assert _processes_with(str(tmp_path)) == []
    steps = [int(p.parent.name.split("-")[1]) for p in ckpts.glob("*/*/ckpt-*/MANIFEST.json")]
    assert max(steps) < 300, "the orphaned stage trained on to its last step"


# ------------------------------------------------- Terminate is a graceful stop (2026-11-28)

def _node_pids(marker: str) -> list[int]:
    """The training processes of this test (a node carries SPOTFLEET_NODE_ID)."""
    out = []
    for pid in _processes_with(marker):
        try:
            if b"SPOTFLEET_NODE_ID=" in Path(f"/proc/{pid}/environ").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def _uninterrupted_sha(tmp_path: Path) -> str:
    """state_sha256 of the stage's training run once, never interrupted."""
    import subprocess
    import sys

    from checkpointing.events import read_events

    repo = Path(__file__).resolve().parents[2]
    args = PIPELINE["stages"][0]["args"]
    ev = tmp_path / "ref-events.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTFLEET_")}
    env.update(SPOTFLEET_EVENTS_FILE=str(ev), SPOTFLEET_NODE_ID="ref")
    subprocess.run([sys.executable, str(repo / "examples" / "train_example.py"), *args,
                    "--checkpoint-uri", str(tmp_path / "ref")], env=env, check=True, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [e for e in read_events(ev) if e.kind == "exit"][-1].data["state_sha256"]


def _completed_sha(var: Path) -> str | None:
    from checkpointing.events import read_events

    for f in var.glob("**/events/*.jsonl"):
        for e in read_events(f):
            if e.kind == "exit" and e.data.get("reason") == "completed":
                return e.data.get("state_sha256")
    return None


def _setup(tmp_path, monkeypatch, market=None, **stage_extra):
    from dagster._core.definitions.reconstruct import ReconstructableJob

    # the job definition is cached per process: one built for an earlier test's YAML / var
    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()
    cfg, var = tmp_path / "term.yaml", tmp_path / "var"
    pipeline = {**PIPELINE, "market": {**PIPELINE["market"], **(market or {})},
                "stages": [{**PIPELINE["stages"][0], **stage_extra}]}
    cfg.write_text(yaml.safe_dump({"pipelines": [pipeline]}, sort_keys=False))
    monkeypatch.setenv(ENV_YAML, str(cfg))
    monkeypatch.setenv(ENV_VAR_DIR, str(var))
    for k in ("SPOTFLEET_DB_URL", "SPOTFLEET_VAR_DIR", "SPOTFLEET_FORK_SERVER"):
        monkeypatch.delenv(k, raising=False)
    (tmp_path / "dagster_home").mkdir()
    return var


def test_terminate_saves_the_step_reached_and_the_reexecution_loses_nothing(tmp_path, monkeypatch):
    """Terminate between two periodic checkpoints (40 and 80): the node gets the notice,
    saves the step it reached (the emergency checkpoint) and exits within the stage's grace
    ("auto": the market's 2 s notice window); the attempt records that step and says so;
    "Re-execute > From failure" resumes at exactly that step (0 steps lost) and ends
    bit-identical to an uninterrupted run. Before: the node was SIGKILLed at once, the
    session kept the last periodic checkpoint and the re-execution redid every step since."""
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable
    from dagster._core.definitions.reconstruct import ReconstructableJob

    from assets import cost_tables as ct
    from infra.db.session import make_engine

    var = _setup(tmp_path, monkeypatch)
    job = reconstructable(define_term_job)
    sent: list[float] = []

    def terminate_past_40() -> None:
        deadline = time.time() + 120
        ckpts = var / "checkpoints" / "term"
        while time.time() < deadline:
            if any(int(p.parent.name.split("-")[1]) >= 40 for p in ckpts.glob("*/*/ckpt-*/MANIFEST.json")):
                time.sleep(0.4)  # ~13 steps of 30 ms past the checkpoint
                sent.append(time.time())
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        t = threading.Thread(target=terminate_past_40, daemon=True)
        t.start()
        root = execute_job(job, instance=instance)
        t.join(timeout=1)
        assert sent, "no checkpoint at step >= 40 appeared"
        assert not root.success
        events = root.all_events
        assert not [e for e in events if e.event_type_value == "STEP_UP_FOR_RETRY"]
        [failure] = [e.event_specific_data.error.message for e in events
                     if e.event_type_value == "STEP_FAILURE"]
        assert _processes_with(str(tmp_path)) == []

        data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "term")
        # the market may have preempted an earlier node of the attempt: the Terminate hit the last
        s = data.sessions.sort_values("launched_at").to_dict("records")[-1]
        kept = int(s["last_checkpoint_step"])
        assert s["end_reason"] == "cancelled" and int(s["last_step"]) == kept and kept > 40, s
        assert f"saved an emergency checkpoint at step {kept}" in failure and "0 steps lost" in failure
        assert "terminated: the node runner got SIGINT" in failure and "Re-execute" in failure
        [att] = data.attempts.to_dict("records")
        assert att["status"] == "failed" and f"emergency checkpoint at step {kept}" in att["error"]

        ReconstructableJob.get_definition.cache_clear()
        ReconstructableJob.get_repository_definition.cache_clear()
        options = ReexecutionOptions.from_failure(run_id=root.run_id, instance=instance)
        with execute_job(job, instance=instance, reexecution_options=options) as rerun:
            assert rerun.success
            rerun_id = rerun.run_id
    data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "term")
    mine = data.sessions[data.sessions["run_id"] == rerun_id].sort_values("launched_at")
    trained = mine[mine["first_step"].notna()]
    assert int(trained["first_step"].iloc[0]) == kept  # resumed at the emergency save
    assert int(trained["last_step"].iloc[-1]) == 300
    assert _completed_sha(var) == _uninterrupted_sha(tmp_path)


def test_a_second_terminate_kills_at_once(tmp_path, monkeypatch):
    """A hung node (SIGSTOP) under a 120 s Terminate grace: the first Terminate asks it to
    save, a second one kills it at once -- the run ends in seconds, not after the grace --
    and the attempt is still recorded, saying the nodes were killed at once."""
    from dagster import DagsterInstance, execute_job, reconstructable

    from assets import cost_tables as ct
    from infra.db.session import make_engine

    var = _setup(tmp_path, monkeypatch, terminate_grace_seconds=120)
    job = reconstructable(define_term_job)
    sent: list[float] = []

    def stop_then_terminate_twice() -> None:
        deadline = time.time() + 120
        ckpts = var / "checkpoints" / "term"
        while time.time() < deadline and not list(ckpts.glob("*/*/ckpt-*/MANIFEST.json")):
            time.sleep(0.05)
        time.sleep(0.3)  # past the checkpoint's events
        for pid in _node_pids(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):  # a node the market just preempted
                os.kill(pid, signal.SIGSTOP)  # hung: it will never make its save
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(3.0)  # a human's second click (one within 1.5 s is the same Terminate)
        os.kill(os.getpid(), signal.SIGINT)  # the second Terminate

    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        t = threading.Thread(target=stop_then_terminate_twice, daemon=True)
        t.start()
        root = execute_job(job, instance=instance)
        ended = time.time()
        t.join(timeout=1)
        assert sent and not root.success
        assert ended - sent[0] < 60, "the second Terminate waited for the 120 s grace"
        [failure] = [e.event_specific_data.error.message for e in root.all_events
                     if e.event_type_value == "STEP_FAILURE"]
        assert "killed at once (a second Terminate)" in failure
        assert _processes_with(str(tmp_path)) == []
    data = ct.load(make_engine(f"sqlite:///{var / 'spotfleet.db'}"), "term")
    s = data.sessions.sort_values("launched_at").to_dict("records")[-1]
    assert s["end_reason"] == "cancelled" and s["ended_at"] > s["launched_at"]


# ------------------------------- a duplicated forward is not a second Terminate (review F6)

def _events(var: Path):
    from checkpointing.events import read_events

    out = []
    for f in var.glob("**/events/*.jsonl"):
        with contextlib.suppress(OSError, ValueError):
            out += read_events(f)
    return out


def test_a_duplicated_terminate_forward_does_not_cut_the_emergency_save(tmp_path, monkeypatch):
    """One Terminate whose SIGINT reaches the node runner twice, the second well after the
    first (the multiprocess executor's own forward of the interrupt, seconds later) while the
    node is in the middle of its emergency save (each blob put slowed to 2.5 s): the save is
    not cut, it commits, and the attempt says so. Until 2026-11-28 any second signal more
    than 1.5 s after the first killed the nodes at once: the save was lost and the
    re-execution redid every step since the last periodic checkpoint."""
    from dagster import DagsterInstance, execute_job, reconstructable

    from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY

    args = list(PIPELINE["stages"][0]["args"])
    args[args.index("--periodic-every") + 1] = "1000"  # no periodic save: the emergency one is alone
    # the node's notice window (30 s) holds a slow save: each blob put waits 2.5 s (the nodes
    # inherit the variable)
    var = _setup(tmp_path, monkeypatch, market={"grace_seconds": 30}, terminate_grace_seconds=120,
                 args=args)
    monkeypatch.setenv(ENV_DEBUG_PERSIST_DELAY, "2.5")
    job = reconstructable(define_term_job)
    sent: list[float] = []

    def terminate_then_forward_again() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not any(
                e.kind == "progress" and (e.data.get("step") or 0) >= 20 for e in _events(var)):
            time.sleep(0.05)
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGINT)  # the Terminate
        while time.time() < deadline and not any(  # the node is saving (a market preemption's is older)
                e.kind == "save_started" and e.data.get("kind") == "emergency" and e.time > sent[0]
                for e in _events(var)):
            time.sleep(0.05)
        time.sleep(max(0.0, sent[0] + 2.0 - time.time()))  # past the 1.5 s merge of one Ctrl-C
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGINT)  # the same Terminate, forwarded again

    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        t = threading.Thread(target=terminate_then_forward_again, daemon=True)
        t.start()
        root = execute_job(job, instance=instance)
        t.join(timeout=1)
        assert len(sent) == 2 and not root.success
        evs = _events(var)
        [started] = [e for e in evs if e.kind == "save_started" and e.data.get("kind") == "emergency"
                     and e.time > sent[0]]
        [failure] = [e.event_specific_data.error.message for e in root.all_events
                     if e.event_type_value == "STEP_FAILURE"]
        assert _processes_with(str(tmp_path)) == []
    committed = [e for e in evs if e.kind == "save_committed" and e.data.get("kind") == "emergency"
                 and e.time > sent[0]]
    assert committed and committed[0].time > sent[1], \
        f"the emergency save was cut by the second forward: {failure}"
    step = started.data["step"]
    assert list((var / "checkpoints" / "term").glob(f"*/*/ckpt-{step:012d}-emergency-*/MANIFEST.json"))
    assert f"saved an emergency checkpoint at step {step}" in failure, failure
    assert "killed at once" not in failure


def test_a_third_signal_kills_a_node_hung_inside_its_save(tmp_path, monkeypatch):
    """The node hangs inside its emergency save (SIGSTOPped after save_started) under a 120 s
    grace: the second signal spares it (it is saving: the rule cannot tell a duplicate from
    a user), so it is still there; a third kills it at once, and the attempt says so."""
    from dagster import DagsterInstance, execute_job, reconstructable

    from checkpointing.manifest import ENV_DEBUG_PERSIST_DELAY

    args = list(PIPELINE["stages"][0]["args"])
    args[args.index("--periodic-every") + 1] = "1000"
    var = _setup(tmp_path, monkeypatch, market={"grace_seconds": 30}, terminate_grace_seconds=120,
                 args=args)
    monkeypatch.setenv(ENV_DEBUG_PERSIST_DELAY, "2.5")
    job = reconstructable(define_term_job)
    sent: list[float] = []
    spared: list[int] = []

    def terminate_thrice() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not any(
                e.kind == "progress" and (e.data.get("step") or 0) >= 20 for e in _events(var)):
            time.sleep(0.05)
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGINT)
        while time.time() < deadline and not any(
                e.kind == "save_started" and e.data.get("kind") == "emergency" and e.time > sent[0]
                for e in _events(var)):
            time.sleep(0.05)
        for pid in _node_pids(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)  # hung inside its save
        time.sleep(max(0.0, sent[0] + 2.0 - time.time()))
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGINT)  # spares the saving node
        time.sleep(2.0)
        spared.extend(_node_pids(str(tmp_path)))
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGINT)  # kills it

    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster_home")) as instance:
        t = threading.Thread(target=terminate_thrice, daemon=True)
        t.start()
        root = execute_job(job, instance=instance)
        t.join(timeout=5)
        assert spared, "the second signal killed a node in the middle of its emergency save"
        assert len(sent) == 3 and not root.success
        [failure] = [e.event_specific_data.error.message for e in root.all_events
                     if e.event_type_value == "STEP_FAILURE"]
        assert "killed at once (a third signal: emergency saves under way included)" in failure, failure
        assert _processes_with(str(tmp_path)) == []
