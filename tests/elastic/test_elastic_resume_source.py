"""Where a re-formed group's state comes from (``ElasticSession.start``): the newest state
any member holds -- the highest step among the members' hand-offs, or the latest complete
checkpoint when it is newer -- never an older one.

A member that missed rounds (the rendezvous closed a round without it, as happens on a
loaded machine) still holds the hand-off of the last group it was in, while other groups
trained on and rank 0 committed checkpoints. Before the fix a group whose members held
only such old hand-offs resumed from them and redid the steps since, although the store
held a newer complete checkpoint.

Deterministic: states are "the example model after k plain steps", compared by sha256;
no load, no timing. The multi-rank cases run real processes in a gloo group.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from resume_worker import plain_objects

from checkpointing.elastic import ElasticSession
from checkpointing.elastic_state import HandoffFile
from checkpointing.events import EventLog
from checkpointing.torch_state import TrainingState, state_sha256

WORKER = Path(__file__).with_name("resume_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _sha(steps: int) -> str:
    model, opt, _ = plain_objects(steps)
    return state_sha256(model, opt)


def _checkpoint_at(store: Path, steps: int) -> str:
    """Commit a complete checkpoint of the state after ``steps`` steps: a single-process
    session trains them and rank 0 (the only rank) writes its final save. Returns its
    sha256 (the single-process session is the plain loop bit for bit)."""
    model, opt, sched = plain_objects(0)  # (puts examples/ on sys.path)
    from train_example import batch_for_step

    el = ElasticSession(model=model, optimizer=opt, scheduler=sched, store=str(store),
                        total_steps=steps, handoff_root=str(store.parent / "writer-shm"),
                        node_id="writer")
    assert el.start() == 0
    for step in range(steps):
        x, y = batch_for_step("mlp", 1, step, 8)
        opt.zero_grad()
        part = el.shard(len(x))
        torch.nn.functional.mse_loss(model(x[part]), y[part]).backward()
        assert el.sync_gradients(len(y[part]), len(y))
        opt.step()
        sched.step()
        el.end_step(loss=0.0)
    assert el.should_stop() and el.finish() == 0
    assert el.final_sha256 == _sha(steps)
    return el.final_sha256


def _handoff(root: Path, node: str, steps: int, run_id: str = "single") -> None:
    m, o, s = plain_objects(steps)
    HandoffFile(run_id, node, root).write(
        TrainingState(model=m, optimizer=o, scheduler=s, rng=False, step=steps).capture(), steps)


def _single(tmp_path: Path, store: Path) -> tuple[ElasticSession, list]:
    model, opt, sched = plain_objects(0, seed=7)
    events: list = []
    log = EventLog()
    log.emit = lambda kind, **data: events.append((kind, data))  # type: ignore[method-assign]
    el = ElasticSession(model=model, optimizer=opt, scheduler=sched, store=str(store),
                        total_steps=20, handoff_root=str(tmp_path / "shm"), node_id="n0",
                        events=log)
    return el, events


@pytest.fixture
def no_elastic_env(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(var, raising=False)


def test_a_complete_checkpoint_newer_than_the_hand_off_wins(tmp_path, no_elastic_env):
    store = tmp_path / "ck"
    want = _checkpoint_at(store, 8)
    _handoff(tmp_path / "shm", "n0", 3)  # this node missed the rounds that reached step 8
    el, events = _single(tmp_path, store)
    assert el.start() == 8  # before the fix: 3, from the old hand-off (5 steps redone)
    assert el.state_from == "checkpoint"
    assert state_sha256(el.model, el.optimizer) == want
    assert [d["step"] for k, d in events if k == "restore"] == [8]
    assert HandoffFile("single", "n0", tmp_path / "shm").read() is None  # superseded


@pytest.mark.parametrize("handoff_step", [8, 11])
def test_a_hand_off_as_new_as_the_checkpoint_or_newer_is_used_without_a_restore(
        tmp_path, no_elastic_env, handoff_step):
    store = tmp_path / "ck"
    _checkpoint_at(store, 8)
    _handoff(tmp_path / "shm", "n0", handoff_step)
    el, events = _single(tmp_path, store)
    assert el.start() == handoff_step and el.state_from == "handoff"
    assert state_sha256(el.model, el.optimizer) == _sha(handoff_step)
    assert not [k for k, _ in events if k == "restore"]  # the object store was not read


def test_a_worker_killed_after_its_group_formed_leaves_its_state_for_the_next_group(
        tmp_path, no_elastic_env):
    """torch elastic kills a worker that does not stop within the agent's reform timeout
    (10 s: a loaded machine, a peer stuck in its start-up). Before the fix the hand-off
    was deleted as soon as the group had formed, so the killed worker took the node's
    only persisted copy with it and the next group resumed from an older checkpoint."""
    store = tmp_path / "ck"
    _checkpoint_at(store, 3)
    _handoff(tmp_path / "shm", "n0", 5)
    first, _ = _single(tmp_path, store)
    assert first.start() == 5 and first.state_from == "handoff"
    # ... SIGKILLed here: no finish(), no new hand-off
    again, events = _single(tmp_path, store)
    assert again.start() == 5 and again.state_from == "handoff"  # before the fix: 3
    assert state_sha256(again.model, again.optimizer) == _sha(5)
    assert not [k for k, _ in events if k == "restore"]


def test_a_spilled_checkpoint_is_uploaded_by_a_group_that_resumes_from_a_hand_off(
        tmp_path, no_elastic_env, monkeypatch):
    """The all-lost group's emergency checkpoint went to the local spill area (store down);
    the relaunched group's rank 0 restored it and started its upload, then a node joined
    at once and the re-formation ended that worker, and the upload with it (seen in
    tests/faults/test_fault_elastic_all_lost_store_down.py: the group formed at 1 node,
    grew to 2 one step later, and step 83 never reached the store). Before the fix the
    grown group resumed from the hand-off and nothing uploaded the spilled checkpoint:
    it stayed on this machine only. Now rank 0 uploads it when it opens its session."""
    from checkpointing.manifest import list_checkpoints
    from checkpointing.stores.base import open_store

    store, spill = tmp_path / "ck", tmp_path / "spill"
    _checkpoint_at(store, 3)
    spilled_sha = _checkpoint_at(spill, 5)  # the emergency checkpoint the store missed
    monkeypatch.setenv("SPOTFLEET_SPILL_DIR", str(spill))
    _handoff(tmp_path / "shm", "n0", 6)  # the 1-node group trained a step and handed off
    el, events = _single(tmp_path, store)
    assert el.start() == 6 and el.state_from == "handoff"
    promotion = el.session.saver.promotion
    assert promotion is not None, "the spilled checkpoint was not uploaded"  # before: None
    assert promotion.done.wait(60) and promotion.ok, promotion.error
    assert [c.step for c in list_checkpoints(open_store(str(store)))] == [3, 5]
    assert not list_checkpoints(open_store(str(spill)))  # uploaded and verified: removed
    assert not [k for k, _ in events if k == "restore"]  # resumed from the hand-off
    from checkpointing.saver import restore_state

    model, opt, _ = plain_objects(0)
    TrainingState(model=model, optimizer=opt, rng=False).apply(restore_state(open_store(str(store))).value)
    assert state_sha256(model, opt) == spilled_sha  # the very state, now in the store
    # a group whose spill holds nothing newer than the store starts no upload
    again, _ = _single(tmp_path, store)
    assert again.start() == 6 and again.session.saver.promotion is None


def test_the_hand_off_is_replaced_by_the_next_one_and_removed_when_the_stage_completes(
        tmp_path, no_elastic_env):
    store = tmp_path / "ck"
    _handoff(tmp_path / "shm", "n0", 2)
    el, _ = _single(tmp_path, store)
    assert el.start() == 2
    slot = HandoffFile("single", "n0", tmp_path / "shm")
    assert slot.read().step == 2  # kept while the group trains
    el._change = "reform"  # the group re-forms after this step (as the flags would say)
    el.step = el.state.step = 4
    assert el.finish() == 76
    assert slot.read().step == 4  # replaced by the newer hand-off
    done, _ = _single(tmp_path, store)
    done.total_steps = 4
    assert done.start() == 4 and done.should_stop() and done.finish() == 0
    assert slot.read() is None  # the stage is complete: nothing left in /dev/shm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group(tmp_path: Path, store: Path, handoffs: list[int]) -> list[dict]:
    """Run ``len(handoffs)`` ranks of one re-formed group (real processes, gloo); rank r
    holds a hand-off of step ``handoffs[r]`` (-1: none). Returns each rank's report."""
    port = _free_port()
    procs = []
    for rank, step in enumerate(handoffs):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
        env.update(RANK=str(rank), WORLD_SIZE=str(len(handoffs)), LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   TORCHELASTIC_RUN_ID=f"resume-{port}", PYTHONPATH=str(ROOT),
                   SPOTFLEET_EVENTS_FILE=str(tmp_path / f"events-{rank}.jsonl"))
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), str(step), str(store), str(tmp_path / "shm"),
             f"node{rank}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return sorted(out, key=lambda r: r["rank"])


@pytest.mark.slow
def test_members_with_different_hand_offs_all_start_from_the_newest_state(tmp_path):
    store = tmp_path / "ck"
    _checkpoint_at(store, 6)
    # rank 1 holds the newest state (step 9); rank 0 an older hand-off, rank 2 none (grown)
    got = _group(tmp_path, store, [4, 9, -1])
    assert [r["start"] for r in got] == [9, 9, 9]
    assert [r["state_from"] for r in got] == ["peer", "handoff", "peer"]
    assert {r["sha"] for r in got} == {_sha(9)}
    # the members only held older hand-offs than the checkpoint another group committed:
    # all start from the checkpoint (before the fix: from rank 0's step 4)
    store2 = tmp_path / "ck2"
    _checkpoint_at(store2, 6)
    got = _group(tmp_path, store2, [4, -1, 2])
    assert [r["start"] for r in got] == [6, 6, 6]
    assert [r["state_from"] for r in got] == ["checkpoint"] * 3
    assert {r["sha"] for r in got} == {_sha(6)}
