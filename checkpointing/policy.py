"""Adaptive checkpointing policy: thesis Algorithm 1 (Koo 2022, section 4.4).

Per training step the policy answers one question, "save now, and which kind?":

* **emergency** — a preemption notice arrived and finishing the step, dumping (delta)
  and persisting (beta) fit before the kill: ``T_step + delta + beta < T_grace``
  (or ``delta + beta < seconds_left`` when the caller knows the deadline);
* **periodic** — the user's own every-N-steps save (``step % periodic_every == 0``);
* **insurance** — a save every ``tau_opt = sqrt(2 delta (MTTP + R))`` seconds (thesis
  Eq. 4.5), converted to steps with the running mean step time:
  ``i_ins = i + floor(tau_opt / T_step)``, rescheduled from every completed save. In
  ``insurance="auto"`` (Algorithm 1) insurance saves happen only while an emergency
  save would NOT fit in the notice window; ``"always"`` keeps them on regardless (it
  protects against kills that come without notice); ``"off"`` disables them.

All durations are SECONDS. ``step`` is the number of completed training steps (the
global step after the step that just ended); ``decide`` is called at the END of a step.

delta prior: ``ckpt_seconds`` (the fleet plan's checkpoint time C from the statistics
DB, exported as ``SPOTFLEET_CHECKPOINT_SECONDS``) counts as ``ckpt_prior_weight`` (n0,
default ``CKPT_PRIOR_WEIGHT`` = 10) pseudo-saves in the running mean of delta:
``delta = (n0 C + sum stalls) / (n0 + saves)`` (``intervals.prior_weighted_mean_seconds``).
So the first interval is the plan's ``sqrt(2 C (MTTP + R))`` exactly, and later ones
move toward the measured delta (half-way after n0 saves). Why n0 = 10: one save is a
noisy sample (stalls of a few ms to seconds, tens of percent apart under load), the
prior is a mean over the same stage's saves; with n0 = 10 one save three times the prior
moves delta by 18 % and tau by under 9 %, while a prior that is plainly wrong (another
model size, another store) is half-corrected after 10 saves. docs/checkpointing.md.

First-save bootstrap: delta and beta are unknown until a save has been measured. Unless
a delta prior is given (``ckpt_seconds``), the policy takes its first insurance save
``bootstrap_steps`` steps (default 10) after ``start_step``: that measures delta and
beta early, which decides both tau and whether emergency saves fit. With a delta prior
there is no bootstrap save: tau is known, and while beta is unmeasured emergency saves
count as infeasible, so "auto" keeps insurance saves on (the safe side) until the first
insurance save measures beta. A notice before any measurement gets a best-effort
emergency save (``emergency_feasible=False``): there is nothing older in flight that it
could spoil.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from checkpointing.intervals import prior_weighted_mean_seconds, thesis_optimum_seconds

__all__ = ["CKPT_PRIOR_WEIGHT", "AdaptivePolicy", "Decision", "SaveKind"]

INSURANCE_MODES = ("auto", "always", "off")
#: weight n0 of a delta prior (``ckpt_seconds``) in pseudo-saves (module docstring)
CKPT_PRIOR_WEIGHT = 10.0


class SaveKind(str, enum.Enum):  # noqa: UP042 (interface B2 codes against)
    """Why a checkpoint is taken (also the retention class in the stores)."""

    PERIODIC = "periodic"
    INSURANCE = "insurance"
    EMERGENCY = "emergency"


@dataclass(frozen=True)
class Decision:
    """What to do at the end of a step.

    kind: the save to take now, or None for no save this step.
    reason: human-readable, e.g. "insurance: tau=812s -> every 41 steps".
    emergency_feasible: ``T_step + delta + beta < T_grace`` (or ``delta + beta <
        seconds_left`` when a deadline was passed to ``decide``).
    """

    kind: SaveKind | None
    reason: str
    emergency_feasible: bool


_NO_SAVE = "no save"


def _non_negative(name: str, value: float | None, *, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


class AdaptivePolicy:
    """Thesis Algorithm 1 with running estimates of T_step, delta and beta (seconds).

    Args:
        periodic_every: user periodic save every N steps (None: none).
        grace_seconds: notice window T_grace between notice and kill (s).
        mttp_seconds: mean time to preemption estimate (s); None disables insurance
            scheduling beyond the bootstrap save (no basis for tau).
        restart_seconds: restart cost R per preemption (s).
        insurance: "auto" (Algorithm 1), "always" or "off".
        ckpt_seconds: optional prior for delta (dump/stall time, s), e.g. the plan's C;
            counts as ``ckpt_prior_weight`` saves in the mean of delta; skips the bootstrap.
        persist_seconds: optional prior for beta (backup/persist time, s), one save's weight.
        ckpt_prior_weight: n0 > 0, the delta prior's weight in pseudo-saves.
        start_step: the step training (re)starts from; schedules count from it.
        bootstrap_steps: steps after ``start_step`` of the first, measuring, insurance save.
    """

    def __init__(
        self,
        *,
        periodic_every: int | None = None,
        grace_seconds: float = 30.0,
        mttp_seconds: float | None = None,
        restart_seconds: float = 0.0,
        insurance: str = "auto",
        ckpt_seconds: float | None = None,
        persist_seconds: float | None = None,
        start_step: int = 0,
        bootstrap_steps: int = 10,
        ckpt_prior_weight: float = CKPT_PRIOR_WEIGHT,
    ) -> None:
        if periodic_every is not None and (
            not isinstance(periodic_every, int) or periodic_every <= 0
        ):
            raise ValueError(
                f"periodic_every must be a positive number of steps or None, got {periodic_every!r}"
            )
        if insurance not in INSURANCE_MODES:
            raise ValueError(
                f"insurance must be one of {', '.join(INSURANCE_MODES)}, got {insurance!r}"
            )
        if not isinstance(bootstrap_steps, int) or bootstrap_steps <= 0:
            raise ValueError(f"bootstrap_steps must be a positive integer, got {bootstrap_steps!r}")
        if not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be an integer >= 0, got {start_step!r}")
        self.periodic_every = periodic_every
        self.grace_seconds = _non_negative("grace_seconds", grace_seconds, allow_none=False)
        self.insurance = insurance
        self.bootstrap_steps = bootstrap_steps
        self._mttp = _non_negative("mttp_seconds", mttp_seconds)
        if self._mttp == 0:
            raise ValueError("mttp_seconds must be > 0 (or None when unknown)")
        self._restart = _non_negative("restart_seconds", restart_seconds, allow_none=False)
        # running sums (seconds) -> means
        self._step_count = 0
        self._step_total = 0.0
        if not (isinstance(ckpt_prior_weight, int | float) and math.isfinite(ckpt_prior_weight)
                and ckpt_prior_weight > 0):
            raise ValueError("ckpt_prior_weight must be a positive number of pseudo-saves, "
                             f"got {ckpt_prior_weight!r}")
        self.ckpt_prior_weight = float(ckpt_prior_weight)
        self._delta_prior = _non_negative("ckpt_seconds", ckpt_seconds)
        prior_b = _non_negative("persist_seconds", persist_seconds)
        self._save_count = 0  # measured saves (the prior is kept apart, weighted n0)
        self._delta_total = 0.0
        self._beta_count = 1 if prior_b is not None else 0
        self._beta_total = prior_b or 0.0
        self._tau: float | None = None
        self._anchor = start_step
        self._next_ins: int | None = None
        self._needs_schedule = True
        self._emergency_taken = False
        self._recompute_tau()

    # ----------------------------------------------------------------- estimates
    @property
    def step_seconds(self) -> float | None:
        """Running mean step time T_step (s), None before the first step."""
        return self._step_total / self._step_count if self._step_count else None

    @property
    def ckpt_seconds(self) -> float | None:
        """Mean dump time delta (s) on the critical path: the measured stalls, with the
        prior (if any) weighted as ``ckpt_prior_weight`` saves; None until known."""
        return prior_weighted_mean_seconds(self._delta_prior, self.ckpt_prior_weight,
                                           self._delta_total, self._save_count)

    @property
    def ckpt_prior_seconds(self) -> float | None:
        """The delta prior (s) given as ``ckpt_seconds``, None without one."""
        return self._delta_prior

    @property
    def measured_saves(self) -> int:
        """Saves whose stall entered the mean of delta (the prior not counted)."""
        return self._save_count

    @property
    def persist_seconds(self) -> float | None:
        """Running mean backup/persist time beta (s), None until measured."""
        return self._beta_total / self._beta_count if self._beta_count else None

    @property
    def mttp_seconds(self) -> float | None:
        return self._mttp

    @property
    def restart_seconds(self) -> float:
        return self._restart

    @property
    def tau_seconds(self) -> float | None:
        """Insurance interval tau_opt = sqrt(2 delta (MTTP + R)) in seconds, or None."""
        return self._tau

    @property
    def emergency_feasible(self) -> bool:
        """Static Algorithm 1 test ``T_step + delta + beta < T_grace`` (False if unknown)."""
        t, d, b = self.step_seconds, self.ckpt_seconds, self.persist_seconds
        if t is None or d is None or b is None:
            return False
        return t + d + b < self.grace_seconds

    @property
    def insurance_active(self) -> bool:
        """Whether insurance saves are scheduled under the current mode and estimates."""
        if self.insurance == "off":
            return False
        if self.ckpt_seconds is None:
            return True  # bootstrap save
        if self._tau is None:
            return False
        return self.insurance == "always" or not self.emergency_feasible

    @property
    def next_insurance_step(self) -> int | None:
        """Step at whose end the next insurance save is due, None when none is scheduled."""
        if not self.insurance_active:
            return None
        self._ensure_schedule()
        return self._next_ins

    def insurance_interval_steps(self) -> int | None:
        """floor(tau / T_step), at least 1; None while tau or T_step is unknown."""
        t = self.step_seconds
        if self._tau is None or not t:
            return None
        return max(1, int(self._tau // t))

    def _recompute_tau(self) -> bool:
        old = self._tau
        d = self.ckpt_seconds
        if d is None or self._mttp is None or d <= 0:
            self._tau = None
        else:
            self._tau = thesis_optimum_seconds(d, self._mttp, self._restart)
        return old != self._tau

    def _ensure_schedule(self) -> None:
        if not self._needs_schedule:
            return
        if self.ckpt_seconds is None:
            self._next_ins = self._anchor + self.bootstrap_steps
            self._needs_schedule = False
            return
        k = self.insurance_interval_steps()
        if k is None:
            self._next_ins = None  # try again once T_step is known
            return
        self._next_ins = self._anchor + k
        self._needs_schedule = False

    def _reschedule(self, anchor: int | None = None) -> None:
        # The schedule is frozen now, with the current T_step (thesis: i_ins is computed
        # when the save completes); if T_step is still unknown it is computed lazily.
        if anchor is not None:
            self._anchor = anchor
        self._needs_schedule = True
        self._next_ins = None
        self._ensure_schedule()

    # ------------------------------------------------------------------ inputs
    def record_step(self, step: int, seconds: float) -> None:
        """Add one measured step time (s) to the running mean T_step."""
        s = _non_negative("seconds", seconds, allow_none=False)
        self._step_count += 1
        self._step_total += s

    def record_steps(self, count: int, total_seconds: float) -> None:
        """Add ``count`` steps taking ``total_seconds`` in all (bulk form for simulators)."""
        if count <= 0:
            return
        s = _non_negative("total_seconds", total_seconds, allow_none=False)
        self._step_count += count
        self._step_total += s

    def record_save(
        self, kind: SaveKind, step: int, stall_seconds: float, persist_seconds: float
    ) -> None:
        """A save at ``step`` completed: update delta (stall, s) and beta (persist, s).

        delta is the dump time on the critical path (stall + serialization for a
        synchronous saver, the snapshot copy for an asynchronous one); beta the
        backup/persist time after it. The next insurance save is rescheduled from
        ``step`` (so a periodic save more often than tau suppresses insurance saves).
        """
        d = _non_negative("stall_seconds", stall_seconds, allow_none=False)
        b = _non_negative("persist_seconds", persist_seconds, allow_none=False)
        self._save_count += 1
        self._delta_total += d
        self._beta_count += 1
        self._beta_total += b
        if SaveKind(kind) is SaveKind.EMERGENCY:
            self._emergency_taken = True
        self._recompute_tau()
        self._reschedule(anchor=step)

    def update_estimates(
        self, *, mttp_seconds: float | None = None, restart_seconds: float | None = None
    ) -> bool:
        """New MTTP and/or R estimates (s) from config, env or the fleet's stats file.

        ``mttp_seconds=math.inf``: nothing is expected to be lost any more (e.g. an elastic
        group with an on-demand member); insurance scheduling stops, as with no MTTP.
        Returns True when tau changed (the next insurance step is then recomputed from
        the last save's step).
        """
        if mttp_seconds == math.inf:
            self._mttp = None
        elif mttp_seconds is not None:
            m = _non_negative("mttp_seconds", mttp_seconds, allow_none=False)
            if m == 0:
                raise ValueError("mttp_seconds must be > 0")
            self._mttp = m
        if restart_seconds is not None:
            self._restart = _non_negative("restart_seconds", restart_seconds, allow_none=False)
        changed = self._recompute_tau()
        if changed:
            self._reschedule()
        return changed

    def on_restore(self, step: int) -> None:
        """Training resumed from a checkpoint at ``step`` (same policy object kept)."""
        self._emergency_taken = False
        self._reschedule(anchor=step)

    # ---------------------------------------------------------------- decision
    def decide(self, step: int, notice: bool, seconds_left: float | None = None) -> Decision:
        """Decide at the END of step ``step`` (completed steps) whether to save.

        A PERIODIC or INSURANCE answer reschedules the next insurance step from ``step``
        right away (``record_save`` reschedules again when the save's times are known);
        an EMERGENCY answer is given once per notice.

        Args:
            step: completed training steps so far.
            notice: a preemption notice is pending.
            seconds_left: seconds until the kill if known; then the emergency test is
                ``delta + beta < seconds_left`` (the step has already finished).
        """
        static_ok = self.emergency_feasible
        if notice:
            if self._emergency_taken:
                return Decision(None, "notice: emergency save already taken", static_ok)
            d, b = self.ckpt_seconds, self.persist_seconds
            if d is None or b is None:
                self._emergency_taken = True
                return Decision(
                    SaveKind.EMERGENCY,
                    "emergency (best effort): no save measured yet, feasibility unknown",
                    False,
                )
            need = d + b
            if seconds_left is not None:
                ok = need < seconds_left
                window = f"{seconds_left:.1f}s left"
            else:
                ok = static_ok
                need += self.step_seconds or 0.0
                window = f"grace {self.grace_seconds:g}s"
            if ok:
                self._emergency_taken = True
                return Decision(SaveKind.EMERGENCY, f"emergency: needs {need:.1f}s, {window}", True)
            notice_reason = f"notice: emergency infeasible (needs {need:.1f}s, {window}); "
        else:
            self._emergency_taken = False
            notice_reason = ""
            ok = static_ok

        if self.periodic_every is not None and step > 0 and step % self.periodic_every == 0:
            self._reschedule(anchor=step)  # Algorithm 1 (3): next i_ins counts from here
            return Decision(
                SaveKind.PERIODIC, f"{notice_reason}periodic: every {self.periodic_every} steps", ok
            )
        ins = self.next_insurance_step
        if ins is not None and step >= ins:
            if self.ckpt_seconds is None:
                why = f"insurance (bootstrap): first save at step {step} measures delta and beta"
            else:
                why = (
                    f"insurance: tau={self._tau:.0f}s -> every "
                    f"{self.insurance_interval_steps()} steps"
                )
            # Algorithm 1 (5): reschedule now, so an asynchronous saver whose result
            # (record_save) arrives a few steps later is not asked again meanwhile.
            self._reschedule(anchor=step)
            return Decision(SaveKind.INSURANCE, notice_reason + why, ok)
        return Decision(None, notice_reason + _NO_SAVE if notice_reason else _NO_SAVE, ok)
