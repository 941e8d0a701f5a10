"""Spot availability traces of the public collections, loaded into one ``Trace`` each.

Formats read (see ../shared/data/README.md):

* **spot-traces** (SkyPilot, NSDI'24)::

      {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}

  ``data[i]`` = spot instances obtainable (1-node folders: 0/1) or held (``N-node``
  folders: 0..N) in tick ``i`` of ``G`` seconds. File name ``<zone>_<instance>.json``
  where ``<zone>`` is an AWS (``us-east-1a``) or GCP (``us-central1-c``) zone and
  ``<instance>`` is whatever label the collection used (``v100_1``, ``v100_8``,
  ``intel_64``, ``c3-88``): the trailing number is part of the instance label (GPUs or
  vCPUs per instance), NOT a node count.
* **SkyNomad GCP H100** (``gcp-h100-2025``): the same shape plus
  ``metadata.price_info`` (spot and on-demand $/h, machine type, region) and a top-level
  ``prices`` list (spot $/h per tick). Its ``data`` is **inverted**: 1 = preempted /
  unavailable, 0 = available. Recognised by ``metadata.price_info`` (some spot-traces
  files also carry a ``prices`` list; they are NOT inverted). ``metadata.inverted``
  (true/false) states the convention explicitly; a file with SkyNomad metadata
  (``zone`` / ``start_time``) but neither ``price_info`` nor ``inverted`` is refused,
  because its 0/1 could mean either.

A market is keyed by (cloud, region, zone, instance type, nodes needed): a zone is up in
a tick when the count is >= the nodes the job needs (``nodes``: argument, else
``metadata.nodes``, else the ``N-node`` folder the file is in, else 1). Anything the
loader cannot interpret raises :class:`TraceFormatError` naming the file and the fix (the
file name is checked first, so a price file among the traces is named as such; a tick must be
whole seconds; a price series is matched on zone and instance type);
a zone that never has the nodes needed, counts above an ``N-node`` folder's N and a
``metadata.nodes`` overriding that N are reported with a warning, never silently. A
folder is checked as one market by :func:`check_trace_set` in :func:`load_trace_dir`, the
one path every consumer takes (different ``gap_seconds``, one entry in two files, different
node counts, no zone ever up: refused).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

#: zone name patterns: AWS ``us-east-1a`` / ``us-gov-west-1a``; GCP ``us-central1-c``
_AWS_ZONE = re.compile(r"^[a-z]{2}(?:-gov)?-[a-z]+-\d+[a-z]$")
_GCP_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
_NODES_DIR = re.compile(r"^(\d+)-node$")


class InvertedOverrideWarning(UserWarning):
    """A file read with the caller's ``inverted`` (``--inverted yes/no``) against its own
    convention (``metadata.inverted``, or ``price_info``: a SkyNomad file, 1 = unavailable)."""

    def __init__(self, path: str | Path, inverted: bool, says: str):
        self.path, self.inverted, self.says = Path(path), inverted, says
        super().__init__(
            f"{path}: read with inverted={inverted} (--inverted {'yes' if inverted else 'no'}) "
            f"against its own {says}: every tick's availability is flipped if the file is "
            "right; leave --inverted at auto to read each file by its own convention")


class TraceFormatError(ValueError):
    """A trace file is malformed; the message names the file, the field and the fix."""


#: the longest tick read (one day): spot capacity changes within minutes to hours (the
#: collection's ticks are 32, 195 and 600 s); a longer one is a unit slip (milliseconds)
MAX_GAP_SECONDS = 86400.0
#: the largest instance count read (int32, the array the counts are kept in)
MAX_COUNT = 2**31 - 1


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_finite(x: int | float) -> bool:
    """``math.isfinite`` that is False (not ``OverflowError``) for an integer too large for
    a float, as JSON can hold (``1e400`` written out as digits)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def price_series(values: object, n_ticks: int, where: str) -> np.ndarray:
    """Validate a list of spot prices ($/h), one per tick, and return it as floats.

    ``where`` names the file and series for the message. Refuses (``TraceFormatError``)
    anything but a list of exactly ``n_ticks`` finite positive numbers: strings, null,
    NaN, infinity, zero or negative prices, and a list of another length (a price file
    made for another folder, another tick length or another window).
    """
    if not isinstance(values, list):
        raise TraceFormatError(f"{where}: must be a list of spot $/h, one per tick "
                               f"({n_ticks} ticks), got {type(values).__name__}")
    if len(values) != n_ticks:
        raise TraceFormatError(
            f"{where}: {len(values)} prices for {n_ticks} ticks; a price series must be "
            "aligned tick for tick with its trace (same window, same gap_seconds): use the "
            "price file made for this folder")
    for i, x in enumerate(values):
        if not _is_number(x) or not _is_finite(x) or x <= 0:
            raise TraceFormatError(f"{where}: price [{i}] = {x!r}; every tick needs a finite "
                                   "positive number of $/h (no strings, null, NaN, 0 or < 0)")
    return np.asarray(values, dtype=float)


def read_price_file(path: str | Path) -> dict:
    """A per-tick spot price file (``spot-prices/*.json``: ``{"<zone>_<instance>": [$/h per
    tick, ...]}``, aligned tick for tick with a trace folder), read but not yet matched to
    traces (``price_file_series``). ``TraceFormatError`` naming the file when it cannot be
    read or is not such a mapping."""
    p = Path(path)
    try:
        # a leading BOM is harmless, as in a trace file (until 2026-11-28 a price file saved
        # with one was refused: "Unexpected UTF-8 BOM (decode using utf-8-sig)")
        raw = json.loads(p.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceFormatError(f"{p}: cannot read the price file ({exc})") from exc
    except RecursionError:
        raise TraceFormatError(f"{p}: cannot read the price file (its JSON is nested too deeply "
                               "to be a price file); it must map '<zone>_<instance>' to a list "
                               "of $/h per tick") from None
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{p}: must map '<zone>_<instance>' to a list of $/h per tick")
    return raw


def check_price_file_covers(raw: dict, zones: Sequence[str], path: str | Path) -> None:
    """Refuse a price file (``read_price_file``) that has a series for none of ``zones``
    (``zone`` or ``zone/instance``): it was made for another folder."""
    if not any(k.split("_", 1)[0] == z.split("/")[0] for k in raw for z in zones):
        raise TraceFormatError(
            f"{path}: the price file covers none of the market's zones {list(zones)[:6]} "
            f"(its series: {sorted(raw)[:6]}); it was made for another folder: pass the "
            "price file of this folder, or none (the files' own prices, else the default spot "
            "price: fleet-sim's --spot-price, plan's price table)")


def price_file_series(raw: dict, zone: str, instance: str | Sequence[str], n_ticks: int,
                      path: str | Path) -> np.ndarray:
    """The series of ``zone``'s trace of ``instance`` in a price file: the key
    ``<zone>_<instance>``; ``instance`` may be several labels of the one trace (its file
    label, e.g. ``h100_16``, and its instance type, e.g. ``a3-highgpu-8g``), any of which
    names it. Exactly ``n_ticks`` finite positive prices (``price_series``).
    ``TraceFormatError`` otherwise (``price_file_rows``)."""
    return price_file_rows(raw, [(zone, instance, n_ticks)], path)[0]


def price_file_rows(raw: dict, entries: Sequence[tuple[str, str | Sequence[str], int]],
                    path: str | Path) -> list[np.ndarray]:
    """One price series per (zone, instance label(s), ticks) of ``entries`` from a price
    file (``read_price_file``), matched on zone AND instance type: the key
    ``<zone>_<label>`` for one of the entry's labels. A series of another instance type in
    the same zone (``us-east-1a_a100_8`` for a ``v100_1`` trace) is another machine's price
    and is never used for it: every missing (zone, instance) is named in one
    ``TraceFormatError`` with the fix."""
    rows: list[np.ndarray] = []
    missing: list[str] = []
    for zone, labels, n in entries:
        zone = zone.split("/")[0]
        labels = [labels] if isinstance(labels, str) else list(dict.fromkeys(labels))
        keys = [f"{zone}_{lab}" for lab in labels if f"{zone}_{lab}" in raw]
        if len(keys) > 1 and len({json.dumps(raw[k]) for k in keys}) > 1:
            raise TraceFormatError(
                f"{path}: two different series name one trace ({' and '.join(keys)}, the "
                "file label and the instance type of one file); keep one of them")
        if not keys:
            missing.append(" or ".join(f"{zone}_{lab}" for lab in labels))
            continue
        rows.append(price_series(raw[keys[0]], n, f"{path}: series {keys[0]}"))
    if missing:
        zones = {m.split("_", 1)[0] for m in missing}
        other = sorted(k for k in raw if k.split("_", 1)[0] in zones)
        also = (f"; it has series of other instance types for those zones ({other[:6]}), which "
                "are another machine's prices and are not used" if other else "")
        raise TraceFormatError(
            f"{path}: no price series for {len(missing)} (zone, instance) of the traces: "
            f"{missing[:8]}{' ...' if len(missing) > 8 else ''}{also}; a series is matched on "
            "zone and instance type: add one named <zone>_<instance> for each (as in "
            "spot-prices/aws-v100-02-15-2023.json: us-east-1a_v100_1), pass the price file "
            "made for this folder, or keep only the covered instance types (--instance-types)")
    return rows


def trace_price_labels(t: Trace) -> tuple[str, ...]:
    """The labels that name ``t`` in a price file key ``<zone>_<label>``: its file label
    (``v100_1``, ``h100_16``; from ``<zone>_<label>.json``) and its instance type (the file
    label, or ``price_info.machine_type``: ``a3-highgpu-8g``)."""
    labels = [t.instance_type or t.accelerator]
    src = Path(t.source)
    if src.suffix == ".json" and "_" in src.stem:
        labels.insert(0, src.stem.partition("_")[2])
    return tuple(dict.fromkeys(labels))


def zone_cloud(zone: str) -> str | None:
    """``"aws"`` / ``"gcp"`` from the shape of a zone name, ``None`` when unknown."""
    if _AWS_ZONE.match(zone):
        return "aws"
    if _GCP_ZONE.match(zone):
        return "gcp"
    return None


def zone_region(zone: str) -> str:
    """Region of a zone: GCP ``us-central1-c`` -> ``us-central1``; AWS ``us-east-1a`` ->
    ``us-east-1``; anything else: the name without a trailing letter."""
    if _GCP_ZONE.match(zone):
        return zone.rsplit("-", 1)[0]
    return zone[:-1] if zone and zone[-1].isalpha() else zone


@dataclass(frozen=True)
class Trace:
    """Availability of one (zone, instance type, node count) over time.

    ``available[i]`` is the number of instances obtainable (or held) in tick ``i``; a
    tick lasts ``gap_seconds`` seconds. ``count`` is the number of instances the job
    needs: the zone is up in a tick when ``available >= count``. ``spot_prices`` ($/h per
    tick, same length as ``available``) and ``on_demand_price`` ($/h) are set when the
    file carries them; ``accelerators_per_instance`` when its ``price_info`` itemizes the
    machine's GPUs (SkyNomad ``components``: label ``gpu``, quantity 8 for a3-highgpu-8g).
    """

    zone: str
    accelerator: str
    count: int
    gap_seconds: float
    available: np.ndarray  # int array, shape (n_ticks,)
    cloud: str = "aws"
    source: str = ""
    instance_type: str = ""
    spot_prices: np.ndarray | None = None
    on_demand_price: float | None = None
    accelerators_per_instance: int | None = None
    start_time: str | None = None  # metadata.start_time (ISO 8601) where the file has one

    @property
    def region(self) -> str:
        return zone_region(self.zone)

    @property
    def nodes(self) -> int:
        return max(self.count, 1)

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        """Market key: (cloud, region, zone, instance type, nodes needed)."""
        return (self.cloud, self.region, self.zone, self.instance_type or self.accelerator,
                self.nodes)

    @property
    def n_ticks(self) -> int:
        return int(self.available.shape[0])

    @property
    def duration_hours(self) -> float:
        return self.n_ticks * self.gap_seconds / 3600.0

    def up(self) -> np.ndarray:
        """Boolean array: at least ``count`` instances available in the tick."""
        return self.available >= max(self.count, 1)


def _parse_name(p: Path) -> tuple[str, str]:
    """(zone, instance label) from ``<zone>_<instance>.json``."""
    zone, sep, label = p.stem.partition("_")
    if not sep or not label or zone_cloud(zone) is None:
        raise TraceFormatError(
            f"{p}: not a trace file name (expected <zone>_<instance>.json with an AWS "
            "(us-east-1a) or GCP (us-central1-c) zone first, e.g. us-east-1a_v100_1.json or "
            "us-central1-c_c3-88.json): rename the file if it is a trace; otherwise move it "
            "out of the folder (a per-tick spot price file is passed with --prices)")
    return zone, label


def _is_trace_name(p: Path) -> bool:
    """Whether the file is named like a trace (``<zone>_<instance>.json``)."""
    try:
        _parse_name(p)
    except TraceFormatError:
        return False
    return True


def _folder_nodes(p: Path) -> int | None:
    for part in reversed(p.resolve().parent.parts):
        m = _NODES_DIR.match(part)
        if m:
            return int(m.group(1))
    return None


def load_trace(path: str | Path, cloud: str | None = None, nodes: int | None = None,
               inverted: bool | None = None) -> Trace:
    """Load and validate one trace file; raise ``TraceFormatError`` naming the problem.

    ``nodes``: instances the job needs (default: ``metadata.nodes``, the ``N-node``
    folder, or 1). ``inverted``: ``data`` holds 1 for *unavailable* (default: detected,
    True for the SkyNomad GCP H100 files). ``cloud``: default from the zone name.
    """
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"{p}: no such trace file; check the path")
    zone, label = _parse_name(p)  # the name first: a price file or config is not a bad trace
    try:
        raw = json.loads(p.read_text(encoding="utf-8-sig"))  # a leading BOM is harmless
    except FileNotFoundError:
        raise TraceFormatError(f"{p}: no such trace file; check the path") from None
    except RecursionError:
        raise TraceFormatError(f"{p}: not a trace (its JSON is nested too deeply); a trace is "
                               "{\"metadata\": {\"gap_seconds\": G}, \"data\": [counts]}") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise TraceFormatError(f"{p}: cannot read the file ({exc}); it must be UTF-8 JSON") from exc
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{p}: not valid JSON ({exc}); the file may be truncated") from exc
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{p}: top level must be an object with 'metadata' and 'data'")
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or "gap_seconds" not in meta:
        raise TraceFormatError(f"{p}: missing metadata.gap_seconds; add e.g. {{\"metadata\": {{\"gap_seconds\": 195}}}}")
    gap = meta["gap_seconds"]
    if not _is_number(gap) or not _is_finite(gap) or gap <= 0:
        raise TraceFormatError(f"{p}: metadata.gap_seconds must be a positive number of seconds, got {gap!r}")
    if gap != math.floor(gap):
        raise TraceFormatError(
            f"{p}: metadata.gap_seconds = {gap!r}; a tick must be a whole number of seconds "
            "(the simulator's and the omniscient bound's time grid; the collection's ticks are "
            "32, 195 and 600 s): write whole seconds, e.g. resample the trace to a whole-second "
            "tick")
    if gap > MAX_GAP_SECONDS:
        raise TraceFormatError(
            f"{p}: metadata.gap_seconds = {gap:g} s ({gap / 86400:.3g} days per tick); a spot "
            f"trace ticks every few seconds to minutes (the collection: 32, 195, 600 s) and at "
            f"most {MAX_GAP_SECONDS:g} s (one day) is read: check the unit (seconds, not "
            "milliseconds)")
    data = raw.get("data")
    if not isinstance(data, list) or not data:
        raise TraceFormatError(f"{p}: 'data' must be a non-empty list of instance counts per tick")
    for i, v in enumerate(data):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TraceFormatError(f"{p}: data[{i}] = {v!r}; every tick must be a non-negative integer count")
        if v > MAX_COUNT:
            raise TraceFormatError(f"{p}: data[{i}] = {v}; an instance count must be at most "
                                   f"{MAX_COUNT} (the file may be corrupt)")
    if "zone" in meta and meta["zone"] != zone:
        raise TraceFormatError(f"{p}: metadata.zone {meta['zone']!r} does not match the file name's "
                               f"zone {zone!r}; rename the file or fix the metadata")
    if len(data) < 2:
        raise TraceFormatError(f"{p}: 'data' has {len(data)} tick; a trace needs at least 2 "
                               "ticks (the file may be truncated)")
    price_info = meta.get("price_info")
    if price_info is not None and not isinstance(price_info, dict):
        raise TraceFormatError(f"{p}: metadata.price_info must be an object with 'price' and "
                               f"'on_demand_price' ($/h), got {price_info!r}; fix it or remove it")
    nomad = isinstance(price_info, dict)  # SkyNomad files carry price_info (and invert)
    declared = meta.get("inverted")
    if declared is not None and not isinstance(declared, bool):
        raise TraceFormatError(f"{p}: metadata.inverted must be true (1 = unavailable) or false "
                               f"(counts, 1 = available), got {declared!r}")
    if inverted is None and declared is None and not nomad and (
            "start_time" in meta or "zone" in meta):
        raise TraceFormatError(
            f"{p}: metadata has SkyNomad fields ({', '.join(k for k in ('zone', 'start_time') if k in meta)}) "
            "but no price_info, so its 0/1 could be inverted (SkyNomad: 1 = unavailable) or "
            "counts (spot-traces: 1 = available); add \"inverted\": true or false to metadata "
            "(or restore metadata.price_info)")
    inv = inverted if inverted is not None else declared if declared is not None else nomad
    own = declared if declared is not None else (True if nomad else None)
    if inverted is not None and own is not None and inverted != own:
        says = (f"metadata.inverted = {str(declared).lower()}" if declared is not None
                else "metadata.price_info (a SkyNomad file: 1 = unavailable)")
        warnings.warn(InvertedOverrideWarning(p, inverted, says), stacklevel=2)
    counts = np.asarray(data, dtype=np.int32)
    if inv:
        if counts.max() > 1:
            raise TraceFormatError(
                f"{p}: inverted (SkyNomad) traces hold 0 = available / 1 = unavailable, but "
                f"data has a value {int(counts.max())}; for a count trace pass inverted=False "
                "(--inverted no) or set metadata.inverted to false")
        counts = (1 - counts).astype(np.int32)
    need = nodes if nodes is not None else meta.get("nodes", _folder_nodes(p) or 1)
    if not isinstance(need, int) or isinstance(need, bool) or need < 1:
        raise TraceFormatError(f"{p}: nodes needed must be a positive integer, got {need!r} "
                               "(metadata.nodes or the nodes argument)")
    if inv and need > 1:
        raise TraceFormatError(f"{p}: an inverted 0/1 trace says only whether one instance "
                               f"launched; it cannot tell whether {need} nodes were available")
    spot_prices = None
    od_price = None
    per_instance = None
    instance_type = label
    if nomad or "prices" in raw:
        prices = raw.get("prices")
        if prices is not None:
            if not isinstance(prices, list) or len(prices) != len(data):
                raise TraceFormatError(
                    f"{p}: 'prices' must list one positive spot $/h per tick ({len(data)} ticks)")
            spot_prices = price_series(prices, len(data), f"{p}: 'prices'")
        if isinstance(price_info, dict):
            try:
                sp = price_info["price"]
                od_price = price_info["on_demand_price"]
            except KeyError as exc:
                raise TraceFormatError(
                    f"{p}: metadata.price_info needs numeric 'price' and 'on_demand_price' "
                    f"($/h): {exc} is missing") from exc
            for name, v in (("price", sp), ("on_demand_price", od_price)):
                if not _is_number(v) or not _is_finite(v) or v <= 0:
                    raise TraceFormatError(
                        f"{p}: metadata.price_info.{name} = {v!r}; 'price' and "
                        "'on_demand_price' must be finite positive numbers ($/h)")
            sp, od_price = float(sp), float(od_price)
            if spot_prices is None:
                spot_prices = np.full(len(data), sp)
            instance_type = str(price_info.get("machine_type") or label)
            per_instance = _priced_gpus(price_info)
    cl = cloud or zone_cloud(zone) or "aws"
    accelerator = re.split(r"[_-]", label)[0]
    tr = Trace(zone=zone, accelerator=accelerator, count=int(need), gap_seconds=float(gap),
               available=counts, cloud=cl, source=str(p), instance_type=instance_type,
               spot_prices=spot_prices, on_demand_price=od_price,
               accelerators_per_instance=per_instance,
               start_time=str(meta["start_time"]) if meta.get("start_time") is not None else None)
    if (nodes is None and "nodes" not in meta and _folder_nodes(p) is None and not inv
            and int(counts.max()) > 1):
        warnings.warn(f"{p}: counts reach {int(counts.max())} but no node count was given (no "
                      "nodes argument / --nodes, no metadata.nodes, no N-node folder above the "
                      "file): a tick counts as available with >= 1 instance. If this is a "
                      "multi-node trace (values = instances held), pass --nodes N",
                      stacklevel=2)
    folder_n = _folder_nodes(p)
    if folder_n is not None and not inv and nodes is None:
        if "nodes" in meta and meta["nodes"] != folder_n:
            warnings.warn(f"{p}: metadata.nodes = {meta['nodes']} overrides the folder's "
                          f"{folder_n}-node: a tick counts as available with >= {need} "
                          f"instance(s), not {folder_n}; if the job needs {folder_n}, fix "
                          f"metadata.nodes or pass --nodes {folder_n}", stacklevel=2)
        if int(counts.max()) > folder_n:
            warnings.warn(f"{p}: counts reach {int(counts.max())} in a {folder_n}-node folder "
                          f"(values are the instances held, at most {folder_n}): a tick counts "
                          f"as available with >= {need}; the file may belong to another folder, "
                          "or the folder's N is wrong: check the file, or pass --nodes N for "
                          "the nodes the job needs", stacklevel=2)
    if not tr.up().any():
        if int(counts.max()) > 0:
            fix = "Lower nodes (--nodes) if the job needs fewer."
        elif inv:
            fix = ("Every tick is 1, read as unavailable (inverted 0/1); if the file's 1 means "
                   "available (spot-traces counts), pass --inverted no or set metadata.inverted "
                   "to false.")
        else:
            fix = ("Every count is 0; if the file's 0 means available and 1 unavailable "
                   "(SkyNomad's convention), pass --inverted yes or set metadata.inverted to "
                   "true.")
        warnings.warn(f"{p}: zone {zone} never has {need} instance(s) available in "
                      f"{tr.n_ticks} ticks (max count {int(counts.max())}); it will be "
                      f"treated as never available. {fix}", stacklevel=2)
    return tr


def _priced_gpus(price_info: dict) -> int | None:
    """The GPUs of the priced machine, from ``price_info.components`` (SkyNomad: the
    ``gpu`` component's ``quantity``, 8 for a3-highgpu-8g); None when the file does not
    itemize them (only what it says is used: no guess from the machine type's name)."""
    comps = price_info.get("components")
    if not isinstance(comps, list):
        return None
    qty = [c.get("quantity") for c in comps if isinstance(c, dict) and c.get("label") == "gpu"]
    if len(qty) != 1 or not _is_number(qty[0]) or not _is_finite(qty[0]) or qty[0] < 1 \
            or float(qty[0]) != int(qty[0]):
        return None
    return int(qty[0])


def check_trace_set(traces: Sequence[Trace], where: str | Path = "", *,
                    require_up: bool = True) -> None:
    """The checks a set of traces must pass to be read as one market, for every consumer.

    :func:`load_trace_dir` runs them on every folder (``spotfleet stats / market /
    forecast / fleet-sim``, the pipeline's ``MarketConfig``, the local fleet);
    ``Market.from_traces`` runs them (without ``require_up``) on traces made in memory.
    Raises :class:`TraceFormatError` (``where``: the folder, for the message) when

    * the files have different ``gap_seconds`` (two collections mixed in one folder);
    * one market entry (cloud, region, zone, instance, nodes) appears in two files;
    * the files need different node counts (``metadata.nodes``): one job needs one;
    * ``require_up``: no zone ever has the nodes needed. Every statistic would then be
      zero (or a forecast extrapolated from nothing) and a job could only run on-demand,
      which is a wrong node count far more often than a market worth reading.
    """
    if not traces:
        return
    at = f"{where}: " if str(where) else ""
    gaps = {t.gap_seconds for t in traces}
    if len(gaps) != 1:
        srcs = {t.gap_seconds: t.source or t.zone for t in traces}
        raise TraceFormatError(
            f"{at}traces have different gap_seconds {sorted(gaps)} (e.g. {srcs}); load one "
            "collection (one folder of the data) at a time")
    keys = [t.key for t in traces]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        files = [t.source or t.zone for t in traces if t.key == dup[0]]
        raise TraceFormatError(f"{at}the same market entry (cloud, region, zone, instance, "
                               f"nodes) appears twice: {dup} (files {files}); keep one file "
                               "per entry")
    nodes = {t.nodes for t in traces}
    if len(nodes) != 1:
        by = {n: next(t.source or t.zone for t in traces if t.nodes == n) for n in sorted(nodes)}
        raise TraceFormatError(
            f"{at}traces need different node counts {sorted(nodes)} (e.g. {by}, from "
            "metadata.nodes); one job needs one node count: give every file the same "
            "metadata.nodes, or pass nodes (--nodes N) to use N for every file")
    if require_up and not any(t.up().any() for t in traces):
        most = max(int(t.available.max()) for t in traces)
        if most >= 1:
            raise TraceFormatError(
                f"{at}no zone ever has {traces[0].nodes} instance(s) available (the largest "
                f"count in any file is {most}); the job could only run on-demand. Lower "
                f"nodes (--nodes) to at most {most}")
        raise TraceFormatError(f"{at}no zone is ever available (every count is 0; in "
                               "inverted SkyNomad files every value is 1); check the folder")


def _file_label(t: Trace) -> str:
    """The file name of a loaded trace (its zone for a trace made in memory)."""
    return Path(t.source).name if t.source.endswith(".json") else t.zone


def cut_to_common_length(traces: Sequence[Trace], where: str | Path = "",
                         stacklevel: int = 2) -> list[Trace]:
    """The traces cut to the time they all cover (the shortest one), with one warning.

    Every trace of a folder starts at the same moment (tick 0); when the files differ in
    length, the ticks after the shortest one's end exist for some zones only. A market,
    the local fleet's replay and the forecast's "now" (its default: the end) must read
    every zone over the same hours, so each trace keeps ``floor(shortest seconds /
    gap_seconds)`` ticks (its spot prices too) and one ``UserWarning`` names the files and
    their lengths. Traces of one length come back unchanged, with no warning. The rule of
    ``Market.from_traces``, the local fleet (``CapacitySchedule``) and ``forecast_zones``.
    """
    traces = list(traces)
    if not traces:
        return traces
    common_s = min(t.n_ticks * t.gap_seconds for t in traces)
    keep = [min(t.n_ticks, int(math.floor(common_s / t.gap_seconds + 1e-9))) for t in traces]
    if all(k == t.n_ticks for k, t in zip(keep, traces, strict=True)):
        return traces
    by_len: dict[int, list[str]] = {}
    for t in traces:
        by_len.setdefault(t.n_ticks, []).append(_file_label(t))
    listing = "; ".join(
        f"{n} ticks: {', '.join(names[:4])}{f' (+{len(names) - 4} more)' if len(names) > 4 else ''}"
        for n, names in sorted(by_len.items()))
    gaps = "/".join(f"{g:g}" for g in sorted({t.gap_seconds for t in traces}))
    short = min(traces, key=lambda t: t.n_ticks * t.gap_seconds)
    cut = [f"{_file_label(t)}: {t.n_ticks - k} ticks cut"
           for k, t in zip(keep, traces, strict=True) if k < t.n_ticks]
    at = f"{where}: " if str(where) else ""
    warnings.warn(
        f"{at}traces differ in length ({listing}; ticks of {gaps} s): every zone is cut to "
        f"the shortest, {_file_label(short)} ({short.duration_hours:.1f} h), so that all "
        f"zones cover the same hours; {len(cut)} zone(s) lose their later ticks "
        f"({', '.join(cut[:4])}{f' (+{len(cut) - 4} more)' if len(cut) > 4 else ''})",
        stacklevel=stacklevel + 1)
    return [t if k == t.n_ticks else replace(
        t, available=t.available[:k],
        spot_prices=None if t.spot_prices is None else t.spot_prices[:k])
        for k, t in zip(keep, traces, strict=True)]


def load_trace_dir(directory: str | Path, cloud: str | None = None, nodes: int | None = None,
                   inverted: bool | None = None,
                   instance_types: Sequence[str] | None = None) -> list[Trace]:
    """Load every ``*.json`` trace in a directory, sorted by file name (zone first).

    ``instance_types``: keep only traces of these instance types (the file's instance
    label or ``price_info.machine_type``, or its accelerator). The traces kept then pass
    :func:`check_trace_set` (one gap, one entry per file, one node count, some zone up);
    the per-file warnings are given only when the folder is not refused.
    """
    d = Path(directory)
    if d.is_file():
        raise TraceFormatError(f"{d}: is a file; pass the folder that holds it (one folder of "
                               "the collection = one market)")
    if not d.is_dir():
        raise TraceFormatError(f"{d}: not a directory of trace files")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = [load_trace(f, cloud=cloud, nodes=nodes, inverted=inverted)
                  for f in sorted(d.glob("*.json"))]
    if not traces:
        below = sorted({str(f.parent.relative_to(d)) for f in d.rglob("*.json")
                        if _is_trace_name(f)})  # not a folder of price files
        hint = (f"; its subfolders hold traces: pass one of {below[:8]}" if below
                else "; pass a folder of <zone>_<instance>.json files")
        raise TraceFormatError(f"{d}: no *.json trace files found{hint}")
    if instance_types:
        have = sorted({t.instance_type or t.accelerator for t in traces})
        traces = [t for t in traces if (t.instance_type or t.accelerator) in instance_types
                  or t.accelerator in instance_types]
        if not traces:
            raise ValueError(f"no trace in {d} has instance type {list(instance_types)}; "
                             f"it has {have}")
    check_trace_set(traces, d)
    overridden = [w.message for w in caught if isinstance(w.message, InvertedOverrideWarning)]
    for w in caught:  # the per-file warnings, now that the folder is not refused
        if not isinstance(w.message, InvertedOverrideWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if overridden:  # one line for the folder, not one per file
        first = overridden[0]
        warnings.warn(InvertedOverrideWarning(
            d, first.inverted, f"{first.says} in {len(overridden)} of {len(traces)} file(s), "
            f"e.g. {first.path.name}"), stacklevel=2)
    _warn_start_times(traces, d)
    other = sorted(f.name for f in d.iterdir() if f.is_file() and f.suffix != ".json"
                   and not f.name.startswith(".") and not f.name.lower().startswith("readme"))
    if other:
        warnings.warn(f"{d}: ignored {len(other)} file(s) that are not *.json: {other[:5]}; "
                      "only <zone>_<instance>.json files are read", stacklevel=2)
    return traces


def _warn_start_times(traces: Sequence[Trace], where: str | Path) -> None:
    """Warn when the files' ``metadata.start_time`` differ by a tick or more: every file of a
    folder is read from tick 0 as the same moment, so such files would be aligned tick for
    tick although they cover different times. Files without a start time are not compared;
    an unreadable one is named."""
    starts: dict[str, datetime] = {}
    for t in traces:
        if t.start_time is None:
            continue
        try:
            at = datetime.fromisoformat(t.start_time.replace("Z", "+00:00"))
        except ValueError:
            warnings.warn(f"{_file_label(t)}: metadata.start_time {t.start_time!r} is not an ISO "
                          "8601 time; the files are aligned from their first tick", stacklevel=3)
            continue
        starts[_file_label(t)] = at if at.tzinfo else at.replace(tzinfo=UTC)
    if len(starts) < 2:
        return
    first, last = min(starts, key=starts.get), max(starts, key=starts.get)
    spread = (starts[last] - starts[first]).total_seconds()
    if spread >= traces[0].gap_seconds:
        warnings.warn(
            f"{where}: the files start at different times ({first} {starts[first].isoformat()}, "
            f"{last} {starts[last].isoformat()}: {spread / 3600.0:.2f} h apart, metadata.start_time); "
            "every file is read from its first tick as the same moment, so they are misaligned "
            "by that much: load files of one window together", stacklevel=3)


def attach_spot_prices(traces: Sequence[Trace], path: str | Path) -> list[Trace]:
    """``traces`` with the per-tick spot prices of a price file (``spot-prices/*.json``)
    replacing whatever spot prices their files carry: what ``fleet-sim --prices`` bills
    (``Market.from_dir``), read by the same rules (``read_price_file``,
    ``check_price_file_covers``, ``price_file_rows``: one series per (zone, instance type),
    exactly as many ticks as its file). On-demand prices are left as they are."""
    raw = read_price_file(path)
    check_price_file_covers(raw, [t.zone for t in traces], Path(path))
    rows = price_file_rows(raw, [(t.zone, trace_price_labels(t), t.n_ticks) for t in traces],
                           Path(path))
    return [replace(t, spot_prices=r) for t, r in zip(traces, rows, strict=True)]


def trace_file_name(trace: Trace) -> str:
    """``<zone>_<instance>.json``, the public file name of a trace (``<zone>_<acc>_<count>``
    for traces made in memory)."""
    return f"{trace.zone}_{trace.instance_type or f'{trace.accelerator}_{trace.count}'}.json"


def save_trace(trace: Trace, directory: str | Path) -> Path:
    """Write a trace in the public JSON format (readable by ``load_trace``); return the path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    p = d / trace_file_name(trace)
    payload = {"metadata": {"gap_seconds": trace.gap_seconds, "nodes": trace.nodes},
               "data": [int(x) for x in trace.available]}
    p.write_text(json.dumps(payload), encoding="utf-8")
    return p
