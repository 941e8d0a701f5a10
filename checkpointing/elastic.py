"""Elastic data-parallel training through preemptions (the training side of issue 11).

A stage of K nodes runs one worker per node under PyTorch's elastic agent
(``torchrun`` / ``torch.distributed.elastic``, c10d rendezvous, ``--nnodes=MIN:MAX``;
``checkpointing.elastic_run`` is the per-node launcher). Every worker holds the full,
bit-identical replica of the model and optimizer state. ``ElasticSession`` is the loop
API; ``docs/elastic.md`` shows how membership changes flow.

    el = ElasticSession.from_env(model=model, optimizer=opt, scheduler=sched,
                                 total_steps=total, periodic_every=100)
    start = el.start()                       # join the group; state from a peer / handoff /
    for step in range(start, total):         # checkpoint (only when no node survived)
        x, y = global_batch(step)            # the SAME global batch at any world size
        part = el.shard(len(x))              # this rank's rows of it
        opt.zero_grad()
        loss = loss_fn(model(x[part]), y[part])          # mean over the local rows
        loss.backward()
        if not el.sync_gradients(part_size, len(x)):     # all-reduce (+ membership flags)
            break                            # a peer vanished mid-step: step not applied
        opt.step(); sched.step()
        el.end_step(loss=float(loss))
        if el.should_stop():                 # leave (notice) or membership change
            break
    sys.exit(el.finish())                    # 0 done, 75 left after a notice, 76 re-form

Membership changes, all at step boundaries:

* **Shrink without restore.** A notice (signal or metadata endpoint, the node's
  ``PreemptionGuard``) sets this rank's *leave* flag, which travels in the same
  all-reduce as the gradients. After that step every rank knows who leaves; a second
  tiny all-reduce agrees on the final set (a notice that arrived meanwhile counts).
  Leavers exit 75 and stop their agent; survivors write their state to a
  ``HandoffFile`` in ``/dev/shm`` and exit 76 (``EXIT_REFORM``). The elastic agent
  restarts the worker, the c10d rendezvous re-forms the group at the smaller size,
  and the new workers resume from the handed-off state at the same step: no object
  store read, no lost step.
* **Grow.** A node joining the rendezvous makes every agent stop its workers with
  ``SIGUSR1`` (not SIGTERM, which is the preemption notice); the workers agree at the
  next step boundary, hand off and exit 76. In the new group the newcomer gets the state
  by ``broadcast`` from a survivor.
* **All nodes lost.** When every rank is leaving, rank 0 writes one emergency
  checkpoint (the only writer; all checkpoints of a multi-node stage come from rank 0).
  The relaunched group finds no handoff anywhere; its rank 0 restores the latest
  complete checkpoint and broadcasts it.

The global batch is the same at every world size: rank r of W takes a contiguous,
balanced slice of it, and ``sync_gradients`` weights each rank's mean-loss gradient by
its share, so the update is the gradient of the mean loss over the whole global batch.
Only the float summation order differs between world sizes.

Without torch elastic's environment (no ``WORLD_SIZE``), the session runs as a single
process (world size 1, no process group): the reference run and single-node stages.
All times are seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from checkpointing.elastic_state import DEFAULT_HANDOFF_ROOT, HandoffFile, broadcast_state
from checkpointing.events import EventLog
from checkpointing.guard import PreemptionGuard
from checkpointing.manifest import newest_committed_step
from checkpointing.policy import SaveKind
from checkpointing.runtime_env import (
    ENV_CHECKPOINT_SECONDS,
    ENV_GRACE_SECONDS,
    ENV_MTTP_SECONDS,
    ENV_NODE_ID,
    ENV_RESTART_SECONDS,
    ENV_STATS_FILE,
    ENV_ZONE,
    EXIT_COMPLETED,
    EXIT_PREEMPTED,
    checkpoint_uri_from_env,
    env_float,
    loss_units_from_env,
)
from checkpointing.saver import restore_preferring_spill
from checkpointing.spill import newer_spill, open_spill
from checkpointing.stores.base import CheckpointStore, StoreError, open_store
from checkpointing.torch_state import TrainingState, state_sha256

log = logging.getLogger("checkpointing.elastic")

#: worker exit code: the membership changes, the state is handed off; the agent restarts it
EXIT_REFORM = 76
#: the signal the spotfleet elastic agent sends its workers to re-form (grow)
REFORM_SIGNAL = signal.SIGUSR1
#: where handoff files live (tmpfs); overridable for tests
ENV_HANDOFF_DIR = "SPOTFLEET_HANDOFF_DIR"
#: collective / process-group timeout, seconds
ENV_DIST_TIMEOUT = "SPOTFLEET_DIST_TIMEOUT_SECONDS"
#: "1": membership / handoff / exit events carry the sha256 of model + optimizer (tests;
#: hashing the whole state costs a pass over it)
ENV_DIGESTS = "SPOTFLEET_ELASTIC_DIGESTS"


_reform_pending = False


def _on_reform_signal(signum: int, frame: Any) -> None:
    global _reform_pending
    _reform_pending = True


def install_reform_handler() -> None:
    """Make ``REFORM_SIGNAL`` set a flag instead of killing the process.

    The launcher calls this first thing in every forked worker (the default action of
    SIGUSR1 is to terminate: a worker stopped before its session started would die in
    the middle of setting up the group and hang its peers until they time out)."""
    signal.signal(REFORM_SIGNAL, _on_reform_signal)


def reform_requested() -> bool:
    """True once this process was asked to re-form (the flag survives until exit)."""
    return _reform_pending


@dataclass(frozen=True)
class ElasticEnv:
    """What torch elastic tells a worker (``RANK``, ``WORLD_SIZE``, ... variables)."""

    rank: int
    world_size: int
    local_rank: int
    group_rank: int
    restart_count: int
    run_id: str

    @classmethod
    def from_env(cls) -> ElasticEnv | None:
        """None when the process was not started by torch elastic / torchrun."""
        if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
            return None
        try:
            return cls(rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                       local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                       group_rank=int(os.environ.get("GROUP_RANK", os.environ["RANK"])),
                       restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                       run_id=os.environ.get("TORCHELASTIC_RUN_ID", "local"))
        except ValueError as exc:
            raise ValueError(f"malformed torch elastic environment (RANK/WORLD_SIZE/...): {exc}; "
                             "launch with checkpointing.elastic_run or torchrun") from exc


def wait_until_listening(host: str | None, port: str | int | None, timeout: float,
                         every: float = 0.01) -> bool:
    """Wait until ``host:port`` accepts a TCP connection (probe: connect, close); returns
    whether it did within ``timeout`` seconds.

    A re-formed group's rank 0 worker hosts the group's bootstrap TCPStore (torch elastic's
    ``MASTER_ADDR:MASTER_PORT``, one per rendezvous round). A rank that connects before it
    listens is refused and torch's TCPStore client retries with an exponential backoff:
    measured here 0.12-0.43 s lost after the server came up, paid by every re-formation.
    Probing every 10 ms first lets the client connect at its first try."""
    if not host or not port:
        return False
    end = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() >= end:
                return False
            time.sleep(every)


def shard_bounds(count: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, stop) of rank's contiguous, balanced share of ``count`` rows."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of size {world_size}")
    base, extra = divmod(count, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class ElasticSession:
    """Elastic data-parallel loop helper; see the module docstring.

    store: checkpoint store or URI (rank 0 writes periodic / emergency / final saves).
    total_steps: steps of the whole stage (the loop ends there).
    periodic_every: rank 0 saves every N steps (None: only emergency and final saves).
    progress_every: rank 0 reports a ``progress`` event every N steps.
    guard: this node's ``PreemptionGuard`` (``from_env`` arms one), or None.
    backend: "gloo" (CPU) or "nccl"; default: nccl when CUDA is available.
    handoff_root: directory of handoff files (default ``/dev/shm/spotfleet-elastic``).
    timeout_seconds: process-group / collective timeout.
    grace_seconds, mttp_seconds, restart_seconds, stats_file, ckpt_seconds: rank 0's policy
        inputs (s), as ``TrainingSession``'s; ``mttp_seconds`` is ONE failure unit's MTTP.
    loss_units: the independent failure units (zones) the group spans, n >= 1: rank 0's
        insurance interval insures against losing all n at once (a shrink restores
        nothing), ``tau = sqrt(2 delta (M_group + R))`` with ``M_group =
        intervals.group_loss_mttp_seconds(mttp, R, n)``; the stats file's ``loss_units``
        updates it (docs/elastic.md "Insurance against losing the whole group").
    """

    def __init__(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any | None = None, store: CheckpointStore | str,
                 total_steps: int, periodic_every: int | None = None, progress_every: int = 10,
                 keep_periodic: int = 3, events: EventLog | None = None,
                 guard: PreemptionGuard | None = None, backend: str | None = None,
                 handoff_root: str | None = None, node_id: str | None = None,
                 timeout_seconds: float = 60.0, grace_seconds: float = 30.0,
                 mttp_seconds: float | None = None, restart_seconds: float | None = None,
                 stats_file: str | None = None, ckpt_seconds: float | None = None,
                 loss_units: int = 1):
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.store = open_store(store) if isinstance(store, str) else store
        self.total_steps = int(total_steps)
        self.periodic_every = periodic_every
        self.progress_every = progress_every
        self.keep_periodic = keep_periodic
        self.events = events or EventLog()
        self.guard = guard
        self.env = ElasticEnv.from_env()
        self.distributed = self.env is not None
        self.rank = self.env.rank if self.env else 0
        self.world_size = self.env.world_size if self.env else 1
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        self.device = torch.device("cuda", self.env.local_rank if self.env else 0) \
            if backend == "nccl" else torch.device("cpu")
        self.node_id = node_id or os.environ.get(ENV_NODE_ID) or f"rank{self.rank}"
        run_id = self.env.run_id if self.env else "single"
        self.handoff = HandoffFile(run_id, self.node_id, handoff_root or
                                   os.environ.get(ENV_HANDOFF_DIR) or DEFAULT_HANDOFF_ROOT)
        self.timeout_seconds = timeout_seconds
        self._session_kwargs = dict(grace_seconds=grace_seconds, mttp_seconds=mttp_seconds,
                                    restart_seconds=restart_seconds, stats_file=stats_file,
                                    ckpt_seconds=ckpt_seconds, loss_units=loss_units)
        self.state = TrainingState(model=model, optimizer=optimizer, scheduler=scheduler, rng=False)
        self.session = None  # rank 0's TrainingSession (saves, progress, policy)
        self.step = 0
        self.state_from: str | None = None
        self._change: str | None = None  # None | "leave" | "reform"
        self._change_reason = ""
        self._leavers = 0
        self._agent_signalled_at: float | None = None
        self._step_t0: float | None = None
        self._formed_at: float | None = None
        self._lost_at: float | None = None
        self._pending_membership: dict[str, Any] | None = None
        #: (the store's newest checkpoint,) when rank 0 restored from the spill area
        self._spilled_over: tuple[Any] | None = None
        #: rank 0: this node's spill area held a checkpoint newer than the store's newest
        self._spill_ahead = False
        self._finished = False
        self.exit_code: int | None = None
        #: sha256 of the final model + optimizer state (set when the stage completes)
        self.final_sha256: str | None = None

    @classmethod
    def from_env(cls, **kwargs: Any) -> ElasticSession:
        """Store, events, guard, grace, MTTP, R, checkpoint-time prior, failure units and
        stats file from ``SPOTFLEET_*``."""
        if "store" not in kwargs:
            kwargs["store"] = checkpoint_uri_from_env()
        kwargs.setdefault("events", EventLog.from_env())
        for key, var, low in (("grace_seconds", ENV_GRACE_SECONDS, {"greater_than": 0}),
                              ("mttp_seconds", ENV_MTTP_SECONDS, {"greater_than": 0}),
                              ("restart_seconds", ENV_RESTART_SECONDS, {"at_least": 0}),
                              ("ckpt_seconds", ENV_CHECKPOINT_SECONDS, {"at_least": 0}),
                              ("timeout_seconds", ENV_DIST_TIMEOUT, {"greater_than": 0})):
            value = env_float(var, **low)
            if value is not None:
                kwargs.setdefault(key, value)
        if os.environ.get(ENV_STATS_FILE):
            kwargs.setdefault("stats_file", os.environ[ENV_STATS_FILE])
        units = loss_units_from_env()
        if units is not None:
            kwargs.setdefault("loss_units", units)
        if "guard" not in kwargs:
            kwargs["guard"] = PreemptionGuard.from_env()
        return cls(**kwargs)

    # -- joining ----------------------------------------------------------------------------
    def start(self) -> int:
        """Join the group and sync the state; returns the step to continue from.

        The group resumes from the NEWEST state any member holds, never an older one: the
        highest-step handoff of any rank (a survivor; broadcast to all), unless the latest
        complete checkpoint is newer (rank 0 lists the store's names on every formation,
        and reads it only then: a member that missed rounds holds an older handoff than
        what another group checkpointed since) or no rank has a handoff; then rank 0
        restores it (broadcast); else the initial weights of rank 0 (broadcast). Ties go
        to the handoff (no object-store read).
        """
        install_reform_handler()
        if self.guard is not None and not self.guard.armed:
            self.guard.start()
        t0 = time.time()
        if self.distributed:
            import torch.distributed as dist

            if not dist.is_initialized():
                if self.rank != 0:
                    wait_until_listening(os.environ.get("MASTER_ADDR"),
                                         os.environ.get("MASTER_PORT"), self.timeout_seconds)
                dist.init_process_group(self.backend, init_method="env://", rank=self.rank,
                                        world_size=self.world_size,
                                        timeout=timedelta(seconds=self.timeout_seconds))
        t_pg = time.time()
        mine = self.handoff.read()
        # rank 0 lists the checkpoint store (names only, no read): a member that missed
        # rounds holds an older hand-off than a checkpoint another group committed since
        ckpt_step = self._newest_checkpoint_step() if self.rank == 0 else None
        info = {"step": mine.step if mine else -1, "lost_at": mine.written_at if mine else None,
                "ckpt_step": ckpt_step}
        infos = self._all_gather(info)
        best = max(range(len(infos)), key=lambda r: (infos[r]["step"], -r))
        handoff_step = infos[best]["step"]
        newest_ckpt = infos[0].get("ckpt_step")
        restored = None
        from_ckpt = False
        if handoff_step < 0 or (newest_ckpt is not None and newest_ckpt > handoff_step):
            # no member has a hand-off, or a complete checkpoint is newer than all of them
            if self.rank == 0:
                restored = self._restore_newer_than(handoff_step)
            flags = self._all_gather({"restored": restored is not None})
            from_ckpt = bool(flags[0]["restored"])
        if from_ckpt:
            src = 0
            self.state_from = "checkpoint"
            if self.rank == 0:
                self.state.apply(restored.value)
        elif handoff_step >= 0:
            src = best
            self.state_from = "handoff" if self.rank == src else "peer"
            if self.rank == src:
                self.state.apply(mine.state)
            # the pause of the state resumed: from its earliest hand-off (an older file
            # of a member that missed rounds, or kept while it trained, is not it)
            lost = [i["lost_at"] for i in infos
                    if i["lost_at"] is not None and i["step"] == handoff_step]
            self._lost_at = min(lost) if lost else None
        else:
            src = 0
            self.state_from = "fresh"
        if self.distributed and self.world_size > 1:
            state = broadcast_state(self.state.capture() if self.rank == src else None, src,
                                    self.device)
            if self.rank != src:
                self.state.apply(state)
        self.step = self.state.step
        t_state = time.time()
        if self.rank == 0:
            self._open_session(restored)
        self._formed_at = time.time()
        # a hand-off of the state the group resumed is NOT discarded here: it stays until
        # this node writes a newer one (finish) or the stage completes. A worker killed
        # before its next hand-off (the agent's reform timeout, a crash) would otherwise
        # take the only persisted copy of this node's state with it, and the next group
        # resume from an older one. An older one is superseded (the holder of the resumed
        # state keeps its own copy; a newer checkpoint is in the store).
        if mine is not None and mine.step < self.step:
            self.handoff.discard()
        self.events.emit("start", node_id=self.node_id, zone=os.environ.get(ENV_ZONE),
                         resumed_from_step=self.step if self.step else None)
        self._pending_membership = {
            "step": self.step, "rank": self.rank, "world_size": self.world_size,
            "state_from": self.state_from, "src_rank": src,
            "restart_count": self.env.restart_count if self.env else 0,
            "sync_seconds": round(self._formed_at - t0, 6), "lost_at": self._lost_at,
            # where sync_seconds went: process group init, state exchange, rank 0's session
            "sync_parts": {"init_process_group": round(t_pg - t0, 4),
                           "state": round(t_state - t_pg, 4),
                           "open_session": round(self._formed_at - t_state, 4)},
            **self._digest()}
        log.info("rank %d/%d: state from %s (rank %d) at step %d", self.rank, self.world_size,
                 self.state_from, src, self.step)
        return self.step

    def _open_session(self, restored: Any) -> None:
        from checkpointing.session import TrainingSession

        self.session = TrainingSession(
            store=self.store, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
            periodic_every=self.periodic_every, total_steps=self.total_steps,
            keep_periodic=self.keep_periodic, events=self.events, guard=None,
            progress_every=self.progress_every, rng=False, **self._session_kwargs)
        self.session.state.step = self.step
        self.session._restore_checked = True  # this group restored (or handed over) its state
        self.session.policy.on_restore(self.step)
        self.session.report_interval()  # the insurance interval this group starts with
        if restored is not None:
            self.session.saver.last_committed = restored.info
            if self._spilled_over is not None and self.session.saver.spill_store is not None:
                # restored from the spill area: the store does not hold it yet; upload it
                self.session.saver.last_committed = self._spilled_over[0]
                self.session.saver.start_promotion(restored.info)
            self.events.emit("restore", step=self.step, location=restored.info.location,
                             fell_back=restored.fell_back, reason=restored.reason)
        elif self._spill_ahead:
            self._promote_spill()

    def _promote_spill(self) -> None:
        """Rank 0 resumed from a hand-off (or a peer) while this node's spill area holds a
        checkpoint newer than the store's newest: upload it now (in the background, as
        after a restore from the spill). The worker that restored it started that upload,
        but a re-formation right after (a node joining) ended that worker and its upload
        thread with it; before, nothing started it again and the checkpoint stayed on this
        machine only (``tests/elastic/test_elastic_resume_source.py``)."""
        saver = self.session.saver
        if saver.spill_store is None:
            return
        try:
            spilled, _ = newer_spill(self.store, saver.spill_store)
        except (StoreError, OSError) as exc:
            log.warning("could not compare the spill area with the store (%s); the spilled "
                        "checkpoint is uploaded by a later group", exc)
            return
        if spilled is not None:
            log.info("uploading the spilled checkpoint of step %d to %s", spilled.step,
                     self.store.location)
            saver.start_promotion(spilled)

    def _newest_checkpoint_step(self) -> int | None:
        """Step of the newest committed checkpoint (one listing of the store and one of
        this node's spill area), None if none or the store cannot be listed now (then the
        members' hand-offs are used as they are)."""
        self._spill_ahead = False
        try:
            newest = newest_committed_step(self.store)
        except (StoreError, OSError) as exc:
            log.warning("could not list the checkpoints (%s); using the members' hand-offs", exc)
            return None
        spill = open_spill(self.store)
        if spill is not None:
            try:
                spilled = newest_committed_step(spill)
            except (StoreError, OSError):
                spilled = None
            if spilled is not None and (newest is None or spilled > newest):
                self._spill_ahead = True
                return spilled
        return newest

    def _restore_newer_than(self, handoff_step: int) -> Any:
        """Rank 0: the latest complete checkpoint if it is newer than ``handoff_step``
        (-1: no member has a hand-off), else None. Without a hand-off a store failure
        propagates (there is nothing else to resume from); with one, the hand-off is used."""
        try:
            restored = self._restore_with_spill()
        except (StoreError, OSError) as exc:
            if handoff_step < 0:
                raise
            log.warning("could not read the newer checkpoint (%s); using the hand-off of "
                        "step %d", exc, handoff_step)
            return None
        if restored is not None and restored.info.step <= handoff_step:
            return None  # it fell back past the hand-off: the hand-off is the newest state
        return restored

    def _restore_with_spill(self) -> Any:
        """The latest complete checkpoint: this node's spill area's when it is newer than
        the store's (an emergency or final checkpoint the store could not take; the
        session uploads it, as ``TrainingSession.restore`` does), else the store's."""
        outcome, primary_newest, spilled = restore_preferring_spill(self.store, open_spill(self.store))
        self._spilled_over = (primary_newest,) if spilled else None
        return outcome

    def _digest(self) -> dict[str, str]:
        if os.environ.get(ENV_DIGESTS) != "1":
            return {}
        return {"state_sha256": state_sha256(self.model, self.optimizer)}

    def _all_gather(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.distributed or self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    # -- the step ---------------------------------------------------------------------------
    def shard(self, count: int) -> slice:
        """This rank's rows of a global batch of ``count`` rows."""
        start, stop = shard_bounds(count, self.rank, self.world_size)
        if self._step_t0 is None:
            self._step_t0 = time.perf_counter()
        return slice(start, stop)

    def sync_gradients(self, local_count: int, global_count: int) -> bool:
        """All-reduce the gradients (weighted by ``local_count / global_count``) together
        with this rank's leave / re-form flags.

        Returns False when a peer vanished during the collective: the step must not be
        applied (the loop breaks; ``finish`` hands the state off for the next group).
        """
        if self._step_t0 is None:
            self._step_t0 = time.perf_counter()
        params = [p for p in self.model.parameters() if p.requires_grad]
        weight = local_count / global_count
        leave = 1.0 if self.guard is not None and self.guard.notice is not None else 0.0
        reform = 1.0 if reform_requested() else 0.0
        if not self.distributed or self.world_size == 1:
            if weight != 1.0:
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(weight)
            self._note_flags(leave, reform)
            return True
        import torch.distributed as dist

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] +
                         [torch.tensor([leave, reform], dtype=grads[0].dtype, device=grads[0].device)])
        if weight != 1.0:
            flat[:-2].mul_(weight)
        try:
            dist.all_reduce(flat)
        except RuntimeError as exc:  # gloo/NCCL: a peer's connection closed mid-collective
            log.warning("rank %d: all-reduce at step %d failed (%s); re-forming without this step",
                        self.rank, self.step, exc)
            self._change, self._change_reason = "reform", "peer_lost"
            return False
        offset = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            chunk = flat[offset:offset + n].view_as(g)
            if p.grad is None:
                p.grad = chunk.clone()
            else:
                p.grad.copy_(chunk)
            offset += n
        self._note_flags(float(flat[-2]), float(flat[-1]))
        return True

    def _note_flags(self, leavers: float, reforms: float) -> None:
        if leavers > 0:
            self._change, self._change_reason = "pending", "peer_leaving"
            self._leavers = int(round(leavers))
        elif reforms > 0:
            self._change, self._change_reason = "reform", "peer_joining"

    def end_step(self, loss: float | None = None) -> None:
        """After the optimizer step: count it, let rank 0 save, settle a membership change."""
        seconds = time.perf_counter() - self._step_t0 if self._step_t0 is not None else 0.0
        self._step_t0 = None
        self.step += 1
        self.state.step = self.step
        if self.session is not None:
            self.session.end_step(seconds, loss=loss)
        if self._pending_membership is not None:  # the first step of this group is done
            data = self._pending_membership
            self._pending_membership = None
            now = time.time()
            data["first_step_at"] = now
            if data.get("lost_at") is not None:
                data["pause_seconds"] = round(now - data["lost_at"], 6)
            self.events.emit("membership", **data)
        if self._change == "pending":
            self._settle_leave()

    def _settle_leave(self) -> None:
        """Agree on who leaves (a notice that arrived since the flags were sent counts)."""
        leaving = self.guard is not None and self.guard.notice is not None
        if self.distributed and self.world_size > 1:
            import torch.distributed as dist

            t = torch.tensor([1.0 if leaving else 0.0], device=self.device)
            try:
                dist.all_reduce(t)
                self._leavers = int(round(float(t[0])))
            except RuntimeError:
                self._leavers = max(self._leavers, 1)
        else:
            self._leavers = 1 if leaving else 0
        self._change = "leave" if leaving else "reform"
        if leaving and self._leavers >= self.world_size and self.rank == 0:
            self._emergency_save()
        elif leaving:
            # tell the agent now (it leaves the rendezvous at once), not after the
            # bookkeeping: the survivors' next round opens only when every member of the
            # old one has left. Rank 0 of an all-lost group tells it after its emergency
            # save, which the agent's shutdown timeout must not cut short.
            self._stop_agent(wait=False)

    def _emergency_save(self) -> None:
        if self.session is None:
            return
        # with this node's notice deadline, as a single process: the saver awaits the store
        # until just before it, else writes the checkpoint to the local spill area (store
        # down or too slow). Rank 0's session has no guard of its own (leaving is agreed
        # by the group), so it borrows this one for the save.
        self.session.guard = self.guard
        try:
            result = self.session.save(SaveKind.EMERGENCY, block=True)
        finally:
            self.session.guard = None
        if result is not None and not result.ok:
            log.error("emergency save of step %d failed: %s", self.step, result.error)

    def should_stop(self) -> bool:
        """True when this worker must end the loop: it leaves, or the group re-forms."""
        if self._change == "pending":
            self._settle_leave()
        return self._change in ("leave", "reform") or self.step >= self.total_steps

    # -- the end ----------------------------------------------------------------------------
    def finish(self, **exit_data: Any) -> int:
        """End this worker: 0 completed, 75 left after a notice, 76 (``EXIT_REFORM``)
        handed off for the next group. Emits ``exit`` / ``handoff`` events."""
        if self._finished:
            return self.exit_code if self.exit_code is not None else EXIT_COMPLETED
        self._finished = True
        if self._change == "leave":
            if self.session is not None:
                self.session.saver.close(wait=True)
            self.events.emit("exit", reason="preempted", step=self.step, world_size=self.world_size,
                             leavers=self._leavers, **self._digest(), **exit_data)
            self.exit_code = EXIT_PREEMPTED
            self._stop_agent()
        elif self._change == "reform" or self.step < self.total_steps:
            reason = self._change_reason or "stopped"
            if self.session is not None:
                self.session.saver.close(wait=True)
            self.handoff.write(self.state.capture(), self.step)
            self.events.emit("handoff", step=self.step, reason=reason, leavers=self._leavers,
                             world_size=self.world_size, **self._digest())
            self.exit_code = EXIT_REFORM
        else:
            digest = self.final_sha256 = state_sha256(self.model, self.optimizer)
            if self.session is not None:
                # the final state stays in /dev/shm until the final checkpoint is committed:
                # a rank 0 killed during that save is restarted by its agent and resumes from
                # it (then saves again), instead of the previous checkpoint (steps retrained,
                # at a smaller world size: the other ranks have completed and left)
                self.handoff.write(self.state.capture(), self.step)
                self.exit_code = self.session.finish(state_sha256=digest, world_size=self.world_size,
                                                     **exit_data)
            else:
                self.events.emit("exit", reason="completed", step=self.step, state_sha256=digest,
                                 world_size=self.world_size, **exit_data)
                self.exit_code = EXIT_COMPLETED
            self.handoff.discard()
        if self.guard is not None:
            self.guard.stop()
        self._destroy()
        return self.exit_code

    def _stop_agent(self, wait: bool = True) -> None:
        """Leaving: make this node's elastic agent exit too (else it would restart us).

        The agent handles SIGTERM as "this node goes away": it leaves the rendezvous
        and stops, without closing the rendezvous for the others. With a signal notice
        it already has it. Signalled once; ``wait``: give the agent 0.2 s to take the
        signal before it sees this worker exit (else it would restart it)."""
        if not self.distributed:
            return
        parent = os.getppid()
        if self._agent_signalled_at is None and parent > 1:
            self._agent_signalled_at = time.monotonic()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(parent, signal.SIGTERM)
        if wait and self._agent_signalled_at is not None:
            time.sleep(max(0.0, 0.2 - (time.monotonic() - self._agent_signalled_at)))

    def _destroy(self) -> None:
        if not self.distributed:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            with contextlib.suppress(RuntimeError):
                dist.destroy_process_group()
