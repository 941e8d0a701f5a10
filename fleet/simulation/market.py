"""A multi-zone spot market as one boolean matrix, built from availability traces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleet.market.traces import Trace, load_trace_dir


@dataclass(frozen=True)
class Market:
    """Spot availability of several zones on a common tick grid.

    ``available[z, i]`` is True when a spot instance could be held in zone ``z`` during
    tick ``i`` (``gap_seconds`` long). ``changed[z, i]`` marks ticks whose availability
    differs from the previous tick; ``any_changed[i]`` is its OR over zones.
    """

    zones: tuple[str, ...]
    gap_seconds: float
    available: np.ndarray
    changed: np.ndarray = field(init=False, repr=False)
    any_changed: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        avail = np.ascontiguousarray(self.available, dtype=bool)
        if avail.ndim != 2 or avail.shape[0] != len(self.zones) or avail.shape[1] < 2:
            raise ValueError(
                f"Market.available must have shape (zones={len(self.zones)}, ticks>=2), "
                f"got {avail.shape}")
        if not self.gap_seconds > 0:
            raise ValueError(f"Market.gap_seconds must be > 0, got {self.gap_seconds!r}")
        changed = np.zeros_like(avail)
        changed[:, 1:] = avail[:, 1:] != avail[:, :-1]
        object.__setattr__(self, "available", avail)
        object.__setattr__(self, "changed", changed)
        object.__setattr__(self, "any_changed", changed.any(axis=0))

    @property
    def n_zones(self) -> int:
        return len(self.zones)

    @property
    def n_ticks(self) -> int:
        return int(self.available.shape[1])

    @property
    def gap_hours(self) -> float:
        return self.gap_seconds / 3600.0

    @property
    def duration_hours(self) -> float:
        return self.n_ticks * self.gap_hours

    @classmethod
    def from_traces(cls, traces: Sequence[Trace]) -> Market:
        """Stack 1-node traces of one gap; longer ones are cut to the shortest."""
        if not traces:
            raise ValueError("Market.from_traces needs at least one trace")
        gaps = {t.gap_seconds for t in traces}
        if len(gaps) != 1:
            raise ValueError(
                f"traces have different gap_seconds {sorted(gaps)}; load one collection "
                "(one directory of the spot-traces data) at a time")
        zones = tuple(t.zone for t in traces)
        if len(set(zones)) != len(zones):
            raise ValueError(f"duplicate zones in traces: {zones}; pass one trace per zone")
        n = min(t.n_ticks for t in traces)
        avail = np.stack([t.up()[:n] for t in traces])
        return cls(zones=zones, gap_seconds=float(gaps.pop()), available=avail)

    @classmethod
    def from_dir(cls, directory: str | Path, zones: Sequence[str] | None = None) -> Market:
        """Load every trace in ``directory`` (optionally only ``zones``, in that order)."""
        traces = load_trace_dir(directory)
        if zones:
            by_zone = {t.zone: t for t in traces}
            missing = [z for z in zones if z not in by_zone]
            if missing:
                raise ValueError(f"zones {missing} not in {directory}; it has {sorted(by_zone)}")
            traces = [by_zone[z] for z in zones]
        return cls.from_traces(traces)
