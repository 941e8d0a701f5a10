"""The few-lines training-loop API (in the spirit of the thesis' Listing 5.1).

    session = TrainingSession.from_env(model=model, optimizer=opt, scheduler=sched,
                                       periodic_every=100)
    start = session.restore()            # 0 when nothing was saved; restores RNG + data position
    for step in range(start, total):
        with session.step() as st:       # times the step; afterwards asks the policy and
            loss = train_one_step(step)  # takes periodic / insurance / emergency saves
            st.loss = float(loss)
        if session.should_stop():        # a notice came and the emergency save is done
            break                        # (or impossible)
    sys.exit(session.finish())           # 0 when complete, 75 (EXIT_PREEMPTED) after a notice

Explicit control: pass ``auto_save=False`` and call ``if session.should_save():
session.save(session.should_save())`` yourself after each step.

The session wires together the ``PreemptionGuard`` (notices), the ``AdaptivePolicy``
(thesis Algorithm 1: when to save), the ``AsyncSaver`` (snapshot + background persist)
and a ``TrainingState`` (which objects to save). MTTP and restart cost R come from the
arguments, the environment (``SPOTFLEET_MTTP_SECONDS``, ``SPOTFLEET_RESTART_SECONDS``)
or ``SPOTFLEET_STATS_FILE`` (re-read when its mtime changes); R is
``DEFAULT_RESTART_SECONDS`` (360 s) when none of them gives it. The plan's checkpoint
time (``SPOTFLEET_CHECKPOINT_SECONDS``) is the policy's prior for delta (``ckpt_seconds``,
weighted as ``ckpt_prior_weight`` saves), so the first insurance interval is the plan's.
All times are seconds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from checkpointing.events import EventLog
from checkpointing.guard import PreemptionGuard
from checkpointing.identity import ENV_JOB_ID, JobIdentity, check_job
from checkpointing.intervals import group_loss_mttp_seconds
from checkpointing.lease import DEFAULT_TTL_SECONDS, ENV_LEASE_TTL, PrefixLease
from checkpointing.manifest import CheckpointInfo, list_checkpoints, read_blob
from checkpointing.outcome import (
    DEFAULT_FINAL_SAVE_TIMEOUT_SECONDS,
    ENV_FINAL_SAVE_TIMEOUT_SECONDS,
    ENV_SAVE_WAIT_SECONDS,
    EXIT_FINAL_SAVE_FAILED,
    LEASE_RELEASE_SECONDS,
    exit_when_stuck,
    final_save_failed_message,
    saved_state,
    wait_for_promotion,
)
from checkpointing.policy import CKPT_PRIOR_WEIGHT, AdaptivePolicy, Decision, SaveKind
from checkpointing.redact import install as install_redaction
from checkpointing.runtime_env import (
    DEFAULT_RESTART_SECONDS,
    ENV_CHECKPOINT_PRIOR_WEIGHT,
    ENV_CHECKPOINT_SECONDS,
    ENV_GRACE_SECONDS,
    ENV_MTTP_SECONDS,
    ENV_RESTART_SECONDS,
    ENV_STATS_FILE,
    ENV_ZONE,
    EXIT_COMPLETED,
    EXIT_PREEMPTED,
    MAX_ENV_SECONDS,
    checkpoint_uri_from_env,
    env_float,
)
from checkpointing.saver import (
    DEADLINE_MARGIN_SECONDS,
    DEFAULT_SHARD_BYTES,
    DEFAULT_WAIT_LIMIT_SECONDS,
    SPILL_FIXED_SECONDS,
    STATE_BLOB,
    AsyncSaver,
    SaveResult,
    restore_preferring_spill,
    restore_state,
)
from checkpointing.snapshot import loads_header
from checkpointing.spill import open_spill
from checkpointing.stores.base import CheckpointStore, open_store
from checkpointing.torch_state import Stateful, TrainingState, structure_change

log = logging.getLogger("checkpointing.session")

#: how often (seconds) the statistics file's mtime is checked
STATS_POLL_SECONDS = 1.0
#: the longest finish()/fail() wait for the lease release (seconds)
LEASE_RELEASE_WAIT_SECONDS = LEASE_RELEASE_SECONDS


@dataclass
class StepHandle:
    """Yielded by ``session.step()``; set ``loss`` to have it reported in progress events."""

    step: int
    loss: float | None = None


def read_stats_file(path: str | os.PathLike[str]) -> tuple[float | None, float | None]:
    """(mttp_seconds, restart_seconds) from a statistics JSON file; ValueError naming the fix."""
    fields = read_stats_fields(path)
    return fields["mttp_seconds"], fields["restart_seconds"]


def read_stats_fields(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``mttp_seconds`` and ``restart_seconds`` (s, or None) and ``loss_units`` (int >= 1,
    or None; elastic stages: docs/elastic.md) from a statistics JSON file; ValueError
    naming the fix."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ENV_STATS_FILE}={path}: not valid JSON ({exc}); expected "
                         '{"mttp_seconds": 3600, "restart_seconds": 120}') from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{ENV_STATS_FILE}={path}: expected a JSON object with mttp_seconds/restart_seconds")
    out: list[float | None] = []
    for key in ("mttp_seconds", "restart_seconds"):
        value = raw.get(key)
        if value is None:
            out.append(None)
            continue
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{ENV_STATS_FILE}={path}: {key}={value!r} must be a number of seconds >= 0")
        out.append(float(value))
    units = raw.get("loss_units")
    if units is not None and (isinstance(units, bool) or not isinstance(units, int) or units < 1):
        raise ValueError(f"{ENV_STATS_FILE}={path}: loss_units={units!r} must be an integer >= 1")
    return {"mttp_seconds": out[0], "restart_seconds": out[1], "loss_units": units}


class RestoreNotCalled(RuntimeError):
    """The loop started at step 0 without ``restore()`` over this job's committed checkpoints."""


class TrainingSession:
    """Preemption-tolerant training loop helper. See the module docstring for usage.

    store: a ``CheckpointStore`` or a URI (``/dir``, ``file:///dir``, ``s3://b/p``).
    model / optimizer / scheduler / stateful: the objects saved and restored.
    periodic_every: user periodic save every N steps (None: none).
    total_steps: reported in progress events.
    keep_periodic / keep_insurance: retention (see ``checkpointing.manifest``).
    grace_seconds, mttp_seconds, restart_seconds: policy inputs in seconds (restart_seconds
        None: ``DEFAULT_RESTART_SECONDS``, unless the stats file gives R).
    ckpt_seconds: prior for the checkpoint stall delta (s), e.g. the plan's C; weighted as
        ``ckpt_prior_weight`` saves in the policy's mean of delta (no bootstrap save).
    stats_file: JSON file with mttp_seconds/restart_seconds (and loss_units), re-read on change.
    loss_units: the independent failure units (zones) of an elastic group, n >= 1 (rank 0
        of an elastic stage; ``SPOTFLEET_LOSS_UNITS``): ``mttp_seconds`` is then one
        unit's MTTP, and the policy insures against losing all n at once, MTTP
        ``intervals.group_loss_mttp_seconds(mttp, R, n)`` (docs/elastic.md). 1: the
        single-node meaning (the policy's MTTP is ``mttp_seconds``).
    guard: a ``PreemptionGuard`` (started here if not armed), or None for no notices.
    progress_every: emit a ``progress`` event every N steps.
    auto_save: take the policy's saves automatically after each step (default True).
    job_id: the job (lineage) these checkpoints belong to; retries and relaunches of one
        run share it (default ``SPOTFLEET_JOB_ID``, else derived from the fingerprint).
    job_config: JSON-able values that must match for a resume to be correct (seed, data
        spec, ...); fingerprinted with the model/optimizer structure (checkpointing.identity).
    lease / lease_ttl_seconds: hold a lease on the checkpoint prefix (checkpointing.lease)
        so that no other job writes it; renewed every ttl/3 seconds.
    """

    def __init__(self, *, store: CheckpointStore | str, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, scheduler: Any | None = None,
                 stateful: dict[str, Stateful] | None = None, periodic_every: int | None = None,
                 total_steps: int | None = None, keep_periodic: int = 3, keep_insurance: int = 2,
                 grace_seconds: float = 30.0, mttp_seconds: float | None = None,
                 restart_seconds: float | None = None,
                 stats_file: str | os.PathLike[str] | None = None,
                 ckpt_seconds: float | None = None,
                 ckpt_prior_weight: float = CKPT_PRIOR_WEIGHT,
                 insurance: str = "auto", guard: PreemptionGuard | None = None,
                 events: EventLog | None = None, progress_every: int = 50,
                 auto_save: bool = True, policy: AdaptivePolicy | None = None,
                 shard_bytes: int = DEFAULT_SHARD_BYTES, rng: bool = True,
                 save_on_finish: bool = True, job_id: str | None = None,
                 job_config: dict[str, Any] | None = None, lease: bool = True,
                 lease_ttl_seconds: float = DEFAULT_TTL_SECONDS, loss_units: int = 1):
        if periodic_every is not None and periodic_every < 1:
            raise ValueError(f"periodic_every must be >= 1 steps (or None), got {periodic_every}")
        if progress_every < 1:
            raise ValueError(f"progress_every must be >= 1 steps, got {progress_every}")
        if keep_periodic < 1:
            raise ValueError(f"keep_periodic must be >= 1 (periodic checkpoints to keep), got "
                             f"{keep_periodic!r}; pass e.g. keep_periodic=3")
        if lease and not (0 < lease_ttl_seconds <= MAX_ENV_SECONDS):  # also refuses nan
            raise ValueError(f"lease_ttl_seconds must be a finite number of seconds > 0, got "
                             f"{lease_ttl_seconds!r} (from the environment: {ENV_LEASE_TTL}, "
                             "default 60)")
        install_redaction()  # no credential reaches a log line or traceback of this process
        self.store = open_store(store) if isinstance(store, str) else store
        self.events = events or EventLog()
        self.job_id = job_id
        self.job_config = dict(job_config or {})
        self.use_lease = lease
        self.lease_ttl_seconds = float(lease_ttl_seconds)
        #: this process's job identity, set by ``claim_prefix`` (restore or first save)
        self.identity: JobIdentity | None = None
        self.lease: PrefixLease | None = None
        self.state = TrainingState(model=model, optimizer=optimizer, scheduler=scheduler,
                                   stateful=dict(stateful or {}), rng=rng)
        self.total_steps = total_steps
        self.progress_every = progress_every
        self.auto_save = auto_save
        self.save_on_finish = save_on_finish
        if restart_seconds is None:
            restart_seconds = DEFAULT_RESTART_SECONDS
        if isinstance(loss_units, bool) or not isinstance(loss_units, int) or loss_units < 1:
            raise ValueError(f"loss_units must be an integer >= 1 (independent failure units of an "
                             f"elastic group; 1 for a single node), got {loss_units!r}")
        #: MTTP (s) as told: one unit's (one node's, single-node) mean time to preemption
        self.mttp_seconds = mttp_seconds
        self.restart_seconds = restart_seconds
        self.loss_units = loss_units
        group_mttp = self.insured_mttp_seconds
        self.policy = policy or AdaptivePolicy(periodic_every=periodic_every, grace_seconds=grace_seconds,
                                               mttp_seconds=None if group_mttp == math.inf else group_mttp,
                                               restart_seconds=restart_seconds,
                                               insurance=insurance, ckpt_seconds=ckpt_seconds,
                                               ckpt_prior_weight=ckpt_prior_weight)
        self.saver = AsyncSaver(self.store, events=self.events, keep_periodic=keep_periodic,
                                keep_insurance=keep_insurance, shard_bytes=shard_bytes,
                                wait_limit_seconds=env_float(ENV_SAVE_WAIT_SECONDS,
                                                             DEFAULT_WAIT_LIMIT_SECONDS,
                                                             greater_than=0, example="10"),
                                spill_store=open_spill(self.store))
        #: the longest ``finish()`` waits for the final checkpoint (seconds)
        self.final_save_timeout_seconds = env_float(ENV_FINAL_SAVE_TIMEOUT_SECONDS,
                                                    DEFAULT_FINAL_SAVE_TIMEOUT_SECONDS,
                                                    greater_than=0, example="300")
        self.guard = guard
        if guard is not None and not guard.armed:
            guard.start()
        self.stats_file = Path(stats_file) if stats_file else None
        self._stats_mtime: float | None = None
        self._stats_checked = 0.0
        self._started = False
        self._notice_reported = False
        self._stop = False
        self._pending: SaveKind | None = None
        self._last_decision: Decision | None = None
        self._step_times: deque[float] = deque(maxlen=max(progress_every, 10))
        self._last_loss: float | None = None
        self._last_tau: float | None = None
        self._delta: float | None = None
        self._finished = False
        #: restore() was called (or the first step checked that nothing needed restoring)
        self._restore_checked = False
        self.exit_code: int | None = None
        self._refresh_stats(force=True)

    # -- construction from the fleet's environment -------------------------------------
    @classmethod
    def from_env(cls, **kwargs: Any) -> TrainingSession:
        """Fill store, events, guard, grace, MTTP, R, checkpoint-time prior and stats file
        from ``SPOTFLEET_*``.

        Explicit keyword arguments win over the environment.
        """
        if "store" not in kwargs:
            kwargs["store"] = checkpoint_uri_from_env()
        kwargs.setdefault("events", EventLog.from_env())
        if os.environ.get(ENV_JOB_ID):
            kwargs.setdefault("job_id", os.environ[ENV_JOB_ID])
        ttl = env_float(ENV_LEASE_TTL, greater_than=0, example="60")
        if ttl is not None:
            kwargs.setdefault("lease_ttl_seconds", ttl)
        grace = env_float(ENV_GRACE_SECONDS, greater_than=0, example="30")
        if grace is not None:
            kwargs.setdefault("grace_seconds", grace)
        mttp = env_float(ENV_MTTP_SECONDS, greater_than=0)
        if mttp is not None:
            kwargs.setdefault("mttp_seconds", mttp)
        restart = env_float(ENV_RESTART_SECONDS, at_least=0, example="360")
        if restart is not None:
            kwargs.setdefault("restart_seconds", restart)
        ckpt = env_float(ENV_CHECKPOINT_SECONDS, at_least=0, example="5")
        if ckpt is not None and ckpt > 0:
            kwargs.setdefault("ckpt_seconds", ckpt)
        weight = env_float(ENV_CHECKPOINT_PRIOR_WEIGHT, greater_than=0, at_most=None,
                           unit="pseudo-saves", example="10")
        if weight is not None:
            kwargs.setdefault("ckpt_prior_weight", weight)
        stats = os.environ.get(ENV_STATS_FILE)
        if stats:
            kwargs.setdefault("stats_file", stats)
        if "guard" not in kwargs:
            kwargs["guard"] = PreemptionGuard.from_env()
        return cls(**kwargs)

    # -- what the loop reads -------------------------------------------------------------
    @property
    def insured_mttp_seconds(self) -> float | None:
        """The MTTP (s) the policy's tau insures against: ``mttp_seconds`` for one unit,
        the mean time to losing all ``loss_units`` units at once for an elastic group
        (``intervals.group_loss_mttp_seconds`` with R = ``restart_seconds``; ``math.inf``
        when the group cannot be lost at once). None without an MTTP."""
        if self.mttp_seconds is None or self.loss_units == 1:
            return self.mttp_seconds  # (the policy checks it, as before)
        return group_loss_mttp_seconds(self.mttp_seconds, self.restart_seconds, self.loss_units)

    @property
    def step_count(self) -> int:
        """Completed steps (the next step to run)."""
        return self.state.step

    @property
    def extras(self) -> dict[str, Any]:
        """Small user values saved with every checkpoint and restored by ``restore``."""
        return self.state.extras

    @property
    def data_position(self) -> Any:
        """What locates the next batch; defaults to the step when never set."""
        return self.state.step if self.state.data_position is None else self.state.data_position

    @data_position.setter
    def data_position(self, value: Any) -> None:
        self.state.data_position = value

    def checkpoints(self) -> list[CheckpointInfo]:
        """Committed checkpoints in the store, oldest first."""
        return list_checkpoints(self.store)

    # -- job identity and lease -----------------------------------------------------------
    def claim_prefix(self) -> JobIdentity:
        """Check that the prefix's checkpoints belong to this job and take its lease.

        Idempotent; ``restore`` (or the first save) calls it. Raises
        ``checkpointing.identity.JobConflict`` when the checkpoints belong to another job
        or configuration, ``checkpointing.lease.LeaseHeld`` when another job's live lease
        holds the prefix; both messages name the two jobs and the fix.
        """
        if self.identity is not None:
            return self.identity
        st = self.state
        ident = JobIdentity.create(job_id=self.job_id, model=st.model, optimizer=st.optimizer,
                                   scheduler=st.scheduler, config=self.job_config)
        lease = None
        if self.use_lease:  # a RUNNING other job is reported first (read-only check)
            lease = PrefixLease(self.store, ident.job_id, ttl_seconds=self.lease_ttl_seconds,
                                node_id=self.events.node_id)
            lease.check_available()
        spill = self.saver.spill_store  # a spilled checkpoint would be restored too
        check_job(ident, list_checkpoints(self.store) + (list_checkpoints(spill) if spill else []),
                  self.store.location, explain=self._structure_change)
        if lease is not None:
            lease.acquire()
            lease.start_heartbeat()
            self.lease = lease
            self.saver.lease = lease
        self.saver.job_meta = ident.to_meta()
        self.identity = ident
        return ident

    def _structure_change(self, info: CheckpointInfo) -> dict[str, str]:
        """Which model / optimizer fields differ between checkpoint ``info`` (its state
        header: names, shapes, dtypes, hyperparameters; no tensor data is read) and this
        process's objects, for ``JobConflict``'s message."""
        header = None
        for store in (self.store, self.saver.spill_store):
            if store is not None and info.location.startswith(store.location):
                header = read_blob(store, info, STATE_BLOB)
                break
        if header is None:
            return {}
        skeleton, specs, _ = loads_header(header)
        return structure_change(skeleton, specs, self.state)

    def _release_lease(self) -> None:
        """Release the prefix lease, waiting at most ``LEASE_RELEASE_WAIT_SECONDS``: on a
        frozen store the put would block exit for the whole S3 request bound, and an
        unreleased lease simply expires."""
        if self.lease is not None:
            releaser = threading.Thread(target=self.lease.release, name="ckpt-lease-release",
                                        daemon=True)
            releaser.start()
            releaser.join(LEASE_RELEASE_WAIT_SECONDS)

    def _check_lease(self) -> None:
        if self.lease is not None and self.lease.lost and not self._stop:
            log.error("stopping training: %s", self.lease.lost)
            self._stop = True
            self._pending = None

    # -- restore -------------------------------------------------------------------------
    def restore(self) -> int:
        """Load the latest complete checkpoint (falling back on corruption); return its step.

        Returns 0 (and leaves every object untouched) when nothing was saved yet.
        """
        self._restore_checked = True
        self.claim_prefix()
        outcome, primary_newest, from_spill = self._restore_outcome()
        if outcome is not None and outcome.skipped:
            self.saver.discard.update(outcome.skipped)  # corrupt: deleted before the next save
        resumed: int | None = None
        if outcome is not None:
            step = self.state.apply(outcome.value)
            resumed = step
            self.policy.on_restore(step)
            self.saver.last_committed = outcome.info
            if from_spill:  # the store does not hold it yet: upload it in the background
                self.saver.last_committed = primary_newest
                self.saver.start_promotion(outcome.info)
            self.events.emit("restore", step=step, location=outcome.info.location,
                             fell_back=outcome.fell_back, reason=outcome.reason)
            if outcome.fell_back:
                log.warning("restored step %d from %s after falling back: %s", step,
                            outcome.info.location, outcome.reason)
            else:
                log.info("restored step %d from %s", step, outcome.info.location)
        self._emit_start(resumed)
        return self.state.step

    def _restore_outcome(self) -> tuple[Any, CheckpointInfo | None, bool]:
        """(outcome, the store's newest checkpoint, loaded from the local spill area?):
        :func:`checkpointing.saver.restore_preferring_spill`."""
        return restore_preferring_spill(self.store, self.saver.spill_store)

    def _noticed(self) -> bool:
        return self.guard is not None and self.guard.notice is not None

    def _check_restore_called(self) -> None:
        """The loop's first step without ``restore()``: refuse to train from step 0 over
        checkpoints this job already committed (the run would silently start over, and its
        final checkpoint would not be the prefix's newest, so a next stage or restart loads
        the old one). ``ElasticSession`` sets ``_restore_checked`` (it restores itself)."""
        if self._restore_checked or self.state.step != 0 or self.saver.last_committed is not None:
            return
        self._restore_checked = True
        self.claim_prefix()  # another job's checkpoints: JobConflict, as from restore()
        saved = [c for c in list_checkpoints(self.store) if c.step > 0]
        if saved:
            newest = max(saved, key=lambda c: c.step)
            raise RestoreNotCalled(
                f"the training loop started at step 0 without session.restore(), but "
                f"{self.store.location} already holds {len(saved)} checkpoint(s) of this job, the "
                f"newest at step {newest.step} ({newest.location}). Training on would start over "
                "from step 0, under that newer-step checkpoint, which a restart or the next stage "
                "would then load instead of this run's. Fix: call "
                "`start = session.restore()` before the loop and run `for step in range(start, "
                "total)`; to really start over, point SPOTFLEET_CHECKPOINT_URI (or store=) at a "
                "fresh location")

    def _emit_start(self, resumed: int | None) -> None:
        if self._started:
            return
        self._started = True
        self.events.emit("start", node_id=self.events.node_id, zone=os.environ.get(ENV_ZONE),
                         resumed_from_step=resumed)
        self._emit_interval_if_changed()

    # -- the step -----------------------------------------------------------------------
    @contextmanager
    def step(self) -> Iterator[StepHandle]:
        """Wrap one training step: time it; afterwards run the policy (and saves)."""
        if not self._started:
            self._check_restore_called()
            self._emit_start(None)
        handle = StepHandle(step=self.state.step)
        t0 = time.perf_counter()
        yield handle
        seconds = time.perf_counter() - t0
        self.end_step(seconds, loss=handle.loss)

    def end_step(self, seconds: float, loss: float | None = None) -> Decision:
        """After-step work for loops that cannot use ``with session.step()``.

        ``seconds`` is the step's duration. Returns the policy's decision.
        """
        if not self._started:
            self._check_restore_called()
            self._emit_start(None)
        self.state.step += 1
        if self.total_steps is not None and self.state.step == self.total_steps + 1:
            log.warning("step %d is past total_steps=%d: does the loop start at 0 instead of at the "
                        "step session.restore() returned (start = session.restore(); for step in "
                        "range(start, total))? The session counts from the restored step",
                        self.state.step, self.total_steps)
        step = self.state.step
        self.policy.record_step(step, seconds)
        self._step_times.append(seconds)
        if loss is not None:
            self._last_loss = float(loss)
        self._refresh_stats()
        self._drain_results()
        notice = self.guard.notice if self.guard is not None else None
        seconds_left = self.guard.seconds_left() if notice is not None else None
        if notice is not None and not self._notice_reported:
            self._notice_reported = True
            self.events.emit("notice", source=notice.source, deadline_unix=self.guard.deadline,
                             step=step)
            log.warning("preemption notice from %s at step %d: %.1f s left", notice.source, step,
                        seconds_left if seconds_left is not None else float("nan"))
        decision = self.policy.decide(step, notice is not None, seconds_left)
        self._last_decision = decision
        self._pending = decision.kind
        if notice is not None:
            self._handle_notice(decision, seconds_left)
        elif decision.kind is not None and self.auto_save:
            self.save(decision.kind)
        if step % self.progress_every == 0:
            self._emit_progress()
        self._check_lease()
        return decision

    def _handle_notice(self, decision: Decision, seconds_left: float | None) -> None:
        if decision.kind == SaveKind.EMERGENCY:
            if self.auto_save:
                self.save(SaveKind.EMERGENCY)
        elif decision.kind is not None and self.saver.in_flight is None:
            # emergency judged infeasible, but Algorithm 1 still schedules a periodic /
            # insurance save at this step: take it best-effort, awaited up to the deadline
            self.save(decision.kind, _notice=True)
        elif self.auto_save and self._spill_fits(seconds_left):
            # too slow for the store in this window, but the local spill area is not
            log.warning("emergency save at step %d: %s; writing it to local disk first (%s)",
                        self.state.step, decision.reason, self.saver.spill_store.location)
            self.save(SaveKind.EMERGENCY)
        else:
            left = f"{seconds_left:.1f} s left" if seconds_left is not None else "no deadline"
            reason = (f"no emergency save at step {self.state.step}: {decision.reason} ({left}); "
                      "the latest committed checkpoint will be used on restart")
            log.error(reason)
            self.events.emit("save_failed", step=self.state.step, kind="emergency", reason=reason)
            self._pending = None
            if self.saver.in_flight is not None:  # let the save already running finish in time
                timeout = None
                if self.guard is not None and self.guard.seconds_left() is not None:
                    timeout = max(0.0, self.guard.seconds_left() - 0.5)
                self.saver.wait(timeout=timeout)
        self._stop = True

    def _spill_fits(self, seconds_left: float | None) -> bool:
        """Would the snapshot plus a local-disk write fit in what is left of the window?"""
        if self.saver.spill_store is None or seconds_left is None or self.guard is None:
            return False
        return (self._delta or 0.0) + SPILL_FIXED_SECONDS + DEADLINE_MARGIN_SECONDS < seconds_left

    def should_save(self) -> SaveKind | None:
        """The save the policy asked for after the last step and that was not taken yet."""
        return self._pending

    def should_stop(self) -> bool:
        """True once a notice arrived and its emergency save is done (or impossible)."""
        return self._stop and self._pending != SaveKind.EMERGENCY

    def save(self, kind: SaveKind | str = SaveKind.PERIODIC, *, block: bool = False,
             _notice: bool = False, _timeout: float | None = None) -> SaveResult | None:
        """Checkpoint now (``kind``: periodic, insurance or emergency).

        Emergency saves wait until committed or until just before the notice deadline.
        A save of a step that is already committed is skipped. No wait is unbounded: a
        save in flight is waited for at most ``saver.wait_limit_seconds`` (a notice ends
        that wait at once), a blocking save at most that long too (``finish``: at most
        ``final_save_timeout_seconds``).
        """
        kind = SaveKind(getattr(kind, "value", kind))
        self._pending = None
        if self.identity is None:
            self.claim_prefix()
        step = self.state.step
        in_flight = self.saver.in_flight
        if in_flight is not None and in_flight[0] == step:
            log.debug("step %d is already being saved; %s save not repeated", step, kind.value)
            urgent = kind == SaveKind.EMERGENCY or _notice
            if block or urgent:
                deadline = self.guard.deadline if urgent and self.guard is not None else None
                if deadline is not None:  # the saver awaits it (or spills) before the deadline
                    return self.saver.save(self.state.capture, step, SaveKind.EMERGENCY.value,
                                           deadline=deadline)
                return self.saver.wait(_timeout, interrupt=self._noticed)
            return None
        last = self.saver.last_committed
        if in_flight is None and last is not None and last.step == step:
            log.debug("step %d is already committed; %s save skipped", step, kind.value)
            return None
        urgent = kind == SaveKind.EMERGENCY or _notice
        deadline = self.guard.deadline if urgent and self.guard is not None else None
        self.saver.progress_meta = {"total_steps": self.total_steps,
                                    "mean_step_seconds": self.mean_step_seconds()}
        result = self.saver.save(self.state.capture, step, kind.value,
                                 block=block or urgent, deadline=deadline,
                                 interrupt=None if urgent else self._noticed, timeout=_timeout)
        if result is not None:
            self._drain_results()
            if urgent and result.ok and self.guard is not None:
                self.guard.acknowledge()
        return result

    # -- estimates, results, events -------------------------------------------------------
    def _refresh_stats(self, force: bool = False) -> None:
        if self.stats_file is None:
            return
        now = time.monotonic()
        if not force and now - self._stats_checked < STATS_POLL_SECONDS:
            return
        self._stats_checked = now
        try:
            mtime = self.stats_file.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime == self._stats_mtime:
            return
        self._stats_mtime = mtime
        try:
            fields = read_stats_fields(self.stats_file)
        except (ValueError, OSError) as exc:
            log.warning("ignoring statistics file: %s", exc)
            return
        mttp, restart, units = fields["mttp_seconds"], fields["restart_seconds"], fields["loss_units"]
        if mttp is not None:
            self.mttp_seconds = mttp
        if restart is not None:
            self.restart_seconds = restart
        if units is not None:
            self.loss_units = units
        # a group's MTTP depends on R and n too: hand the policy the recomputed one
        insured = self.insured_mttp_seconds if mttp is not None or self.loss_units > 1 else None
        if self.policy.update_estimates(mttp_seconds=insured, restart_seconds=restart):
            self._emit_interval_if_changed()

    def _drain_results(self) -> None:
        changed = False
        for result in self.saver.poll_results():
            if not result.ok:
                continue
            self._delta = result.stall_seconds
            self.policy.record_save(SaveKind(result.kind), result.step, result.stall_seconds,
                                    result.persist_seconds)
            changed = True
        if changed:
            self._emit_interval_if_changed()

    def mean_step_seconds(self) -> float | None:
        return sum(self._step_times) / len(self._step_times) if self._step_times else None

    def report_interval(self) -> None:
        """Emit the ``interval`` event of the tau in force now, unless that tau was already
        reported (``ElasticSession`` calls it when rank 0 opens its session: its own
        ``start`` event replaces this session's)."""
        self._emit_interval_if_changed()

    def _emit_interval_if_changed(self) -> None:
        tau = self.policy.tau_seconds
        if tau is None or tau == self._last_tau:
            return
        self._last_tau = tau
        mean = self.mean_step_seconds()
        tau_steps = max(1, round(tau / mean)) if mean else None
        # delta_seconds: the delta tau was computed from (the prior-weighted mean)
        # mttp_seconds: the MTTP tau insures against (an elastic group's: losing all
        # loss_units units at once); node_mttp_seconds: one unit's, as told
        self.events.emit("interval", tau_seconds=tau, tau_steps=tau_steps,
                         mttp_seconds=self.insured_mttp_seconds,
                         node_mttp_seconds=self.mttp_seconds, loss_units=self.loss_units,
                         restart_seconds=self.restart_seconds,
                         delta_seconds=self.policy.ckpt_seconds,
                         delta_prior_seconds=self.policy.ckpt_prior_seconds,
                         measured_saves=self.policy.measured_saves)

    def _emit_progress(self) -> None:
        self.events.emit("progress", step=self.state.step, total_steps=self.total_steps,
                         mean_step_seconds=self.mean_step_seconds(), loss=self._last_loss)

    # -- the end ---------------------------------------------------------------------------
    def finish(self, **exit_data: Any) -> int:
        """Wait for the in-flight save, save the final state (when completed), emit ``exit``.

        Returns the process exit code: 0 when complete and the final checkpoint is
        committed, ``EXIT_FINAL_SAVE_FAILED`` (74) when complete but the final checkpoint
        is not committed (the error says what is saved and what to do), and
        ``EXIT_PREEMPTED`` (75) after a notice (the log says what was saved before the
        deadline). Extra keyword arguments go into the ``exit`` event's data, with
        ``saved_step`` / ``saved_location`` (and ``spilled_*`` for a local spill).
        """
        if self._finished:
            return self.exit_code if self.exit_code is not None else EXIT_COMPLETED
        self._finished = True
        preempted = self._stop
        final: SaveResult | None = None
        if not preempted and self.save_on_finish:
            final = self.save(SaveKind.PERIODIC, block=True, _timeout=self.final_save_timeout_seconds)
            if self._noticed() and saved_state(self.saver, self.state.step).saved_step != self.state.step:
                final = self._final_save_noticed()
                preempted = saved_state(self.saver, self.state.step).saved_step != self.state.step
                if preempted:
                    wait_for_promotion(self.saver, self.guard.deadline)
        elif not preempted:
            self.saver.wait(self.final_save_timeout_seconds)
        else:
            wait_for_promotion(self.saver, self.guard.deadline if self.guard is not None else None)
        self._drain_results()
        saved = saved_state(self.saver, self.state.step)
        error = (final.error if final is not None and final.error else None) \
            or self.saver.store_trouble
        if not preempted and self.save_on_finish and saved.saved_step != self.state.step:
            saved = self._spill_final_state(saved, error)
        self.saver.close(wait=not preempted)
        reason = "preempted" if preempted else "completed"
        self.exit_code = EXIT_PREEMPTED if preempted else EXIT_COMPLETED
        if preempted:
            log.warning("stopped after a preemption notice at step %d; %s", self.state.step,
                        saved.describe())
        elif self.save_on_finish and saved.saved_step != self.state.step:
            message = final_save_failed_message(saved, self.total_steps, error)
            log.error("%s", message)
            reason, self.exit_code = "final_save_failed", EXIT_FINAL_SAVE_FAILED
            exit_data = {"error": message, **exit_data}
        self.events.emit("exit", reason=reason, step=self.state.step, **saved.event_data(),
                         **exit_data)
        exit_when_stuck(self.saver, self.exit_code)
        self._release_lease()
        if self.guard is not None:
            self.guard.stop()
        return self.exit_code

    def _final_save_noticed(self) -> SaveResult | None:
        """A preemption notice came while ``finish`` waited for the final checkpoint: the
        wait ends, and the final state is saved as the emergency checkpoint, awaited (or
        spilled to local disk) only until the notice deadline. When it commits to the
        store, the run is complete; otherwise ``finish`` reports it as preempted (75)."""
        notice = self.guard.notice if self.guard is not None else None
        if notice is not None and not self._notice_reported:
            self._notice_reported = True
            self.events.emit("notice", source=notice.source, deadline_unix=self.guard.deadline,
                             step=self.state.step)
        seconds_left = self.guard.seconds_left() if self.guard is not None else None
        log.warning("preemption notice during the final save of step %d (%.1f s left): saving "
                    "it as the emergency checkpoint before the deadline", self.state.step,
                    seconds_left if seconds_left is not None else float("nan"))
        self._stop = True
        return self.save(SaveKind.EMERGENCY)

    def _spill_final_state(self, saved: Any, error: str | None) -> Any:
        """The store could not take the final checkpoint: keep the final state on local disk
        (the spill area) so that a re-run on this machine loses nothing; it is uploaded
        by that re-run (or now, if the store answers). Returns the updated summary."""
        spill = self.saver.spill_store
        last = self.saver.last_spilled
        if spill is None or (last is not None and last.step == self.state.step):
            return saved
        self.saver.store_trouble = self.saver.store_trouble or error or "the final save failed"
        self.saver.save(self.state.capture, self.state.step, SaveKind.EMERGENCY.value,
                        deadline=time.time() + self.saver.wait_limit_seconds)
        return saved_state(self.saver, self.state.step)

    def fail(self, error: BaseException) -> None:
        """Report an exception that ends training (``exit`` with reason ``error``)."""
        if self._finished:
            return
        self._finished = True
        self.exit_code = 1
        self.saver.close(wait=True)
        self.events.emit("exit", reason="error", step=self.state.step,
                         error=f"{type(error).__name__}: {error}")
        self._release_lease()
        if self.guard is not None:
            self.guard.stop()

    def __enter__(self) -> TrainingSession:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            self.fail(exc)  # no-op when finish() already ran (e.g. sys.exit(session.finish()))
        elif not self._finished:
            self.finish()


def save_training_state(store: CheckpointStore | str, *, step: int, kind: SaveKind | str = SaveKind.PERIODIC,
                        model: torch.nn.Module | None = None,
                        optimizer: torch.optim.Optimizer | None = None, scheduler: Any | None = None,
                        stateful: dict[str, Stateful] | None = None,
                        extras: dict[str, Any] | None = None, data_position: Any = None,
                        keep_periodic: int = 3, events: EventLog | None = None) -> CheckpointInfo:
    """Save the given torch objects (and the RNG states) as one committed checkpoint, now.

    One call, no session: for scripts that checkpoint outside a training loop (e.g. the
    end of a stage). Blocks until committed; raises ``RuntimeError`` if the save failed.
    """
    store = open_store(store) if isinstance(store, str) else store
    state = TrainingState(model=model, optimizer=optimizer, scheduler=scheduler,
                          stateful=dict(stateful or {}), step=step, data_position=data_position,
                          extras=dict(extras or {}))
    saver = AsyncSaver(store, events=events, keep_periodic=keep_periodic)
    try:
        result = saver.save(state.capture, step, SaveKind(getattr(kind, "value", kind)).value, block=True)
    finally:
        saver.close()
    if result is None or not result.ok or result.info is None:
        raise RuntimeError(f"checkpoint of step {step} to {store.location} failed: "
                           f"{result.error if result else 'no result'}")
    return result.info


def load_training_state(store: CheckpointStore | str, *, model: torch.nn.Module | None = None,
                        optimizer: torch.optim.Optimizer | None = None, scheduler: Any | None = None,
                        stateful: dict[str, Stateful] | None = None,
                        rng: bool | None = None) -> TrainingState | None:
    """Load the latest complete checkpoint into the given objects (falling back on
    corruption). Returns the ``TrainingState`` (``.step``, ``.extras``,
    ``.data_position``), or None when the store holds no loadable checkpoint.

    Pass only ``model=`` to initialise a new stage from another stage's weights
    (optimizer and scheduler state in the checkpoint are then ignored, and so are its
    RNG states: the new stage keeps its own seed). ``rng``: restore the global RNGs as
    they were at the save; default (None): only when resuming, i.e. when an optimizer,
    scheduler or ``stateful`` object is passed too. (Until 2026-11-28 the default was
    True, so a weights-only load replaced the new stage's seeded RNG with the old
    stage's, silently: user audit, session 20.)
    """
    store = open_store(store) if isinstance(store, str) else store
    outcome = restore_state(store)
    if outcome is None:
        return None
    if rng is None:
        rng = optimizer is not None or scheduler is not None or bool(stateful)
    state = TrainingState(model=model, optimizer=optimizer, scheduler=scheduler,
                          stateful=dict(stateful or {}), rng=rng)
    state.apply(outcome.value)
    return state
