"""Spot availability traces in the public SkyPilot spot-traces JSON format.

File format (one file per zone/accelerator/count)::

    {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}

``data[i]`` is the number of spot instances available (1-node traces: 0/1) during
tick ``i`` of ``G`` seconds. File name: ``<zone>_<accelerator>_<count>.json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_NAME_RE = re.compile(r"^(?P<zone>[a-z0-9-]+?)_(?P<accelerator>[A-Za-z0-9]+)_(?P<count>\d+)$")


class TraceFormatError(ValueError):
    """A trace file is malformed; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class Trace:
    """Availability of one (zone, accelerator, node count) over time.

    ``available[i]`` is the number of instances obtainable in tick ``i``; a tick lasts
    ``gap_seconds`` seconds. ``region`` is the zone without its trailing letter.
    """

    zone: str
    accelerator: str
    count: int
    gap_seconds: float
    available: np.ndarray  # int array, shape (n_ticks,)
    cloud: str = "aws"
    source: str = ""

    @property
    def region(self) -> str:
        return self.zone[:-1] if self.zone and self.zone[-1].isalpha() else self.zone

    @property
    def n_ticks(self) -> int:
        return int(self.available.shape[0])

    @property
    def duration_hours(self) -> float:
        return self.n_ticks * self.gap_seconds / 3600.0

    def up(self) -> np.ndarray:
        """Boolean array: at least ``count`` instances available in the tick."""
        return self.available >= max(self.count, 1)


def load_trace(path: str | Path, cloud: str = "aws") -> Trace:
    """Load and validate one trace file; raise ``TraceFormatError`` naming the problem."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceFormatError(f"{p}: no such trace file; check the path") from None
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{p}: not valid JSON ({exc}); the file may be truncated") from exc
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{p}: top level must be an object with 'metadata' and 'data'")
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or "gap_seconds" not in meta:
        raise TraceFormatError(f"{p}: missing metadata.gap_seconds; add e.g. {{\"metadata\": {{\"gap_seconds\": 195}}}}")
    gap = meta["gap_seconds"]
    if not isinstance(gap, (int, float)) or isinstance(gap, bool) or gap <= 0:
        raise TraceFormatError(f"{p}: metadata.gap_seconds must be a positive number of seconds, got {gap!r}")
    data = raw.get("data")
    if not isinstance(data, list) or not data:
        raise TraceFormatError(f"{p}: 'data' must be a non-empty list of instance counts per tick")
    for i, v in enumerate(data):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TraceFormatError(f"{p}: data[{i}] = {v!r}; every tick must be a non-negative integer count")
    m = _NAME_RE.match(p.stem)
    if m is None:
        raise TraceFormatError(f"{p}: file name must be <zone>_<accelerator>_<count>.json, e.g. us-east-1a_v100_1.json")
    return Trace(zone=m["zone"], accelerator=m["accelerator"], count=int(m["count"]),
                 gap_seconds=float(gap), available=np.asarray(data, dtype=np.int32),
                 cloud=cloud, source=str(p))


def load_trace_dir(directory: str | Path, cloud: str = "aws") -> list[Trace]:
    """Load every ``*.json`` trace in a directory, sorted by zone."""
    d = Path(directory)
    if not d.is_dir():
        raise TraceFormatError(f"{d}: not a directory of trace files")
    traces = [load_trace(f, cloud=cloud) for f in sorted(d.glob("*.json"))]
    if not traces:
        raise TraceFormatError(f"{d}: no *.json trace files found")
    return traces


def trace_file_name(trace: Trace) -> str:
    """``<zone>_<accelerator>_<count>.json``, the public file name of a trace."""
    return f"{trace.zone}_{trace.accelerator}_{trace.count}.json"


def save_trace(trace: Trace, directory: str | Path) -> Path:
    """Write a trace in the public JSON format (readable by ``load_trace``); return the path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    p = d / trace_file_name(trace)
    payload = {"metadata": {"gap_seconds": trace.gap_seconds},
               "data": [int(x) for x in trace.available]}
    p.write_text(json.dumps(payload), encoding="utf-8")
    return p
