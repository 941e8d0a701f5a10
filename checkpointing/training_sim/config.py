"""Inputs of the training simulator (thesis section 6.2.2). All durations in SECONDS,
prices in $/hour. Every latency is a half-open range [low, high) sampled uniformly each
time it occurs, as in the thesis."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["PolicySpec", "Range", "SimConfig"]


@dataclass(frozen=True)
class Range:
    """Uniform latency range [low, high) in seconds (low == high: a constant)."""

    low: float
    high: float

    @classmethod
    def of(cls, value: float | tuple[float, float] | Range, name: str = "range") -> Range:
        """Build from a number, a (low, high) pair or a Range; errors name ``name``."""
        if isinstance(value, Range):
            return value.validated(name)
        if isinstance(value, int | float):
            return cls(float(value), float(value)).validated(name)
        try:
            low, high = value
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must be a number or a (low, high) pair, got {value!r}"
            ) from None
        return cls(float(low), float(high)).validated(name)

    @classmethod
    def parse(cls, text: str, name: str) -> Range:
        """Parse ``"4.5,4.7"`` or ``"4.6"`` (seconds)."""
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            raise ValueError(
                f"{name} expects LOW,HIGH seconds like 4.5,4.7; got {text!r}"
            ) from None
        if len(nums) == 1:
            nums = nums * 2
        if len(nums) != 2:
            raise ValueError(f"{name} expects LOW,HIGH seconds like 4.5,4.7; got {text!r}")
        return cls(nums[0], nums[1]).validated(name)

    def validated(self, name: str) -> Range:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(f"{name} must be finite, got [{self.low}, {self.high})")
        if self.low < 0 or self.high < self.low:
            raise ValueError(
                f"{name} must satisfy 0 <= low <= high seconds, got [{self.low}, {self.high})"
            )
        return self

    @property
    def mean(self) -> float:
        return 0.5 * (self.low + self.high)

    def __str__(self) -> str:
        if self.low == self.high:
            return f"{self.low:g}"
        return f"[{self.low:g}, {self.high:g})"


@dataclass(frozen=True)
class PolicySpec:
    """A checkpointing policy to simulate.

    kind: ``static`` (save every ``every`` steps, ignores notices), ``adaptive``
    (``checkpointing.policy.AdaptivePolicy``, with ``every`` as its user periodic
    interval and ``insurance`` its mode) or ``on-demand`` (static every ``every`` steps
    on a VM that is never preempted, billed at the on-demand price).
    """

    kind: Literal["static", "adaptive", "on-demand"]
    every: int | None = None
    insurance: Literal["auto", "always", "off"] = "auto"
    label: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("static", "adaptive", "on-demand"):
            raise ValueError(
                f"policy kind must be static, adaptive or on-demand, got {self.kind!r}"
            )
        if self.kind in ("static", "on-demand") and (self.every is None or self.every <= 0):
            raise ValueError(f"a {self.kind} policy needs every=N > 0 steps, got {self.every!r}")
        if self.every is not None and self.every <= 0:
            raise ValueError(f"every must be a positive number of steps, got {self.every!r}")

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.kind == "adaptive":
            return "Adaptive" if self.insurance == "auto" else f"Adaptive ({self.insurance})"
        if self.kind == "on-demand":
            return f"On-demand (Per-{self.every})"
        return f"Per-{self.every}"

    @classmethod
    def parse(cls, text: str) -> PolicySpec:
        """``adaptive``, ``adaptive:always``, ``adaptive@10000``, ``static:51``/``51``, ``on-demand:10000``."""
        t = text.strip().lower()
        try:
            if t.startswith("adaptive"):
                rest = t[len("adaptive") :]
                every = None
                if "@" in rest:
                    rest, every_s = rest.split("@", 1)
                    every = int(every_s)
                mode = rest.lstrip(":") or "auto"
                return cls("adaptive", every=every, insurance=mode)  # type: ignore[arg-type]
            if t.startswith("on-demand"):
                return cls("on-demand", every=int(t.split(":", 1)[1]))
            if t.startswith("static:") or t.startswith("per-"):
                return cls("static", every=int(t.split(":" if ":" in t else "-", 1)[1]))
            return cls("static", every=int(t))
        except (ValueError, IndexError):
            raise ValueError(
                f"policy {text!r} not understood; use adaptive[:auto|always|off][@N], "
                "static:N (or just N) or on-demand:N"
            ) from None


@dataclass(frozen=True)
class SimConfig:
    """One training job on one VM type (thesis inputs (2)-(9)); seconds and $/hour.

    total_steps: training iterations to complete.
    step_seconds: per-step compute time.
    ckpt_seconds: checkpoint dump time delta (serialise + write locally); with the
        synchronous saver all of it stalls training.
    backup_seconds: beta, upload to durable storage, in the background; a checkpoint
        can be restored only once its backup finished. At most one backup in flight:
        a save due while the previous one is still persisting waits for it (the wait
        counts as save time).
    alloc_seconds / prep_seconds: VM allocation and preparation (init, data, restore).
    grace_seconds: notice lead time before the kill.
    async_saver: only ``stall_seconds`` of each save stalls training; the rest of the
        dump moves to the background together with the backup.
    notice_probability: fraction of preemptions that come with a notice (the rest kill
        without warning, e.g. a missed metadata poll); 1.0 in the thesis.
    """

    total_steps: int
    step_seconds: Range
    ckpt_seconds: Range
    backup_seconds: Range
    alloc_seconds: Range
    prep_seconds: Range
    grace_seconds: float = 30.0
    spot_price_per_hour: float = 2.3
    on_demand_price_per_hour: float = 6.2
    async_saver: bool = False
    stall_seconds: Range = field(default_factory=lambda: Range(0.0, 0.0))
    notice_probability: float = 1.0
    name: str = "job"

    def __post_init__(self) -> None:
        if not isinstance(self.total_steps, int) or self.total_steps <= 0:
            raise ValueError(f"total_steps must be a positive integer, got {self.total_steps!r}")
        for fname in (
            "step_seconds",
            "ckpt_seconds",
            "backup_seconds",
            "alloc_seconds",
            "prep_seconds",
            "stall_seconds",
        ):
            object.__setattr__(self, fname, Range.of(getattr(self, fname), fname))
        if self.step_seconds.high <= 0:
            raise ValueError("step_seconds must be > 0")
        for fname in ("grace_seconds", "spot_price_per_hour", "on_demand_price_per_hour"):
            v = getattr(self, fname)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{fname} must be a finite number >= 0, got {v!r}")
        p = self.notice_probability
        if not (isinstance(p, int | float) and 0.0 <= p <= 1.0):
            raise ValueError(f"notice_probability must be within [0, 1], got {p!r}")
        if self.async_saver and self.stall_seconds.high > self.ckpt_seconds.low:
            raise ValueError(
                "stall_seconds must not exceed ckpt_seconds in async mode (the stall is the "
                f"snapshot copy, part of the dump): stall {self.stall_seconds}, "
                f"ckpt {self.ckpt_seconds}"
            )
