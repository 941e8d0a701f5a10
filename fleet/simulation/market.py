"""A multi-zone spot market: availability matrix, per-tick spot prices, regions.

Built from the public trace collections (:mod:`fleet.market.traces`) or synthetic
regimes (:mod:`fleet.market.regimes`). A market entry is keyed by (cloud, region, zone,
instance type, nodes needed); several instance types may share a zone.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleet.market.traces import (
    Trace,
    check_price_file_covers,
    check_trace_set,
    cut_to_common_length,
    load_trace_dir,
    price_file_rows,
    read_price_file,
    trace_price_labels,
    zone_region,
)

MarketKey = tuple[str, str, str, str, int]
"""(cloud, region, zone, instance type, nodes needed)."""


@dataclass(frozen=True)
class Market:
    """Spot availability of several zones on a common tick grid, with prices.

    ``available[z, i]`` is True when the job's instances could be held in zone ``z``
    during tick ``i`` (``gap_seconds`` long). ``spot_price[z, i]`` ($/h) and
    ``on_demand_price[z]`` ($/h, on-demand in that zone's region) are per **instance**, and
    ``None`` when the data has no prices: the job's flat :class:`~fleet.policies.base.JobSpec`
    prices (per instance too) apply then. A job needs ``nodes`` instances and pays for all
    of them: :meth:`prices_for` gives its $/h, which the simulator bills, the policies see
    and the omniscient bound prices. ``regions[z]`` is the zone's region and ``cloud`` its cloud (moving a
    checkpoint between regions costs egress, see :mod:`fleet.market.regions`).
    ``changed[z, i]`` marks ticks whose availability differs from the previous tick.
    """

    zones: tuple[str, ...]
    gap_seconds: float
    available: np.ndarray
    regions: tuple[str, ...] = ()
    clouds: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    nodes: int = 1
    spot_price: np.ndarray | None = None
    on_demand_price: np.ndarray | None = None
    changed: np.ndarray = field(init=False, repr=False)
    any_changed: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        avail = np.ascontiguousarray(self.available, dtype=bool)
        nz = len(self.zones)
        if avail.ndim != 2 or avail.shape[0] != nz or avail.shape[1] < 2:
            raise ValueError(
                f"Market.available must have shape (zones={nz}, ticks>=2), got {avail.shape}")
        if not self.gap_seconds > 0:
            raise ValueError(f"Market.gap_seconds must be > 0, got {self.gap_seconds!r}")
        regions = self.regions or tuple(zone_region(z.split("/")[0]) for z in self.zones)
        clouds = self.clouds or tuple("aws" for _ in self.zones)
        itypes = self.instance_types or tuple("" for _ in self.zones)
        for name, vals in (("regions", regions), ("clouds", clouds), ("instance_types", itypes)):
            if len(vals) != nz:
                raise ValueError(f"Market.{name} needs one entry per zone ({nz}), got {len(vals)}")
        if self.spot_price is not None:
            sp = np.ascontiguousarray(self.spot_price, dtype=float)
            if sp.shape != avail.shape:
                raise ValueError(f"Market.spot_price must have shape {avail.shape} (zones x "
                                 f"ticks, as available), got {sp.shape}")
            if not np.all(sp > 0):  # NaN too; the message said "of shape (9, 1440), got (9, 1440)"
                z, i = (int(x) for x in np.argwhere(~(sp > 0))[0])
                raise ValueError(f"Market.spot_price must be positive $/h in every tick: zone "
                                 f"{self.zones[z]} tick {i} is {float(sp[z, i])!r}")
            object.__setattr__(self, "spot_price", sp)
        if self.on_demand_price is not None:
            od = np.ascontiguousarray(self.on_demand_price, dtype=float)
            if od.shape != (nz,) or not np.all(od > 0):
                raise ValueError(f"Market.on_demand_price must be positive $/h, one per zone ({nz}), "
                                 f"got {od.tolist() if od.size <= 8 else od.shape}")
            object.__setattr__(self, "on_demand_price", od)
        changed = np.zeros_like(avail)
        changed[:, 1:] = avail[:, 1:] != avail[:, :-1]
        object.__setattr__(self, "available", avail)
        object.__setattr__(self, "regions", tuple(regions))
        object.__setattr__(self, "clouds", tuple(clouds))
        object.__setattr__(self, "instance_types", tuple(itypes))
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

    @property
    def region_names(self) -> tuple[str, ...]:
        """Distinct regions, in first-appearance order."""
        return tuple(dict.fromkeys(self.regions))

    @property
    def region_index(self) -> np.ndarray:
        """Index into :attr:`region_names` of every zone's region."""
        names = self.region_names
        return np.array([names.index(r) for r in self.regions], dtype=np.int64)

    @property
    def keys(self) -> tuple[MarketKey, ...]:
        return tuple((c, r, z.split("/")[0], it, self.nodes)
                     for c, r, z, it in zip(self.clouds, self.regions, self.zones,
                                            self.instance_types, strict=True))

    def prices_for(self, spot_price: float, on_demand_price: float) -> tuple[np.ndarray, np.ndarray]:
        """What the job pays: (spot $/h per zone and tick, on-demand $/h per zone) for its
        ``nodes`` instances, i.e. ``nodes`` x the per-instance prices (the market's, or the
        flat fallbacks ``spot_price`` / ``on_demand_price`` $/h per instance where it has
        none). A checkpoint's egress is paid once per move, whatever ``nodes``."""
        sp = self.spot_price if self.spot_price is not None else np.full(
            self.available.shape, float(spot_price))
        od = self.on_demand_price if self.on_demand_price is not None else np.full(
            self.n_zones, float(on_demand_price))
        if self.nodes != 1:
            sp, od = sp * self.nodes, od * self.nodes
        return sp, od

    def subset(self, zones: Sequence[str]) -> Market:
        """The market restricted to ``zones`` (in that order)."""
        missing = [z for z in zones if z not in self.zones]
        if missing:
            raise ValueError(f"zones {missing} not in the market; it has {list(self.zones)}")
        idx = [self.zones.index(z) for z in zones]
        return Market(
            zones=tuple(zones), gap_seconds=self.gap_seconds, available=self.available[idx],
            regions=tuple(self.regions[i] for i in idx), clouds=tuple(self.clouds[i] for i in idx),
            instance_types=tuple(self.instance_types[i] for i in idx), nodes=self.nodes,
            spot_price=None if self.spot_price is None else self.spot_price[idx],
            on_demand_price=None if self.on_demand_price is None else self.on_demand_price[idx])

    def window(self, first: int, last: int) -> Market:
        """Ticks ``first .. last-1`` only."""
        return Market(
            zones=self.zones, gap_seconds=self.gap_seconds,
            available=self.available[:, first:last], regions=self.regions, clouds=self.clouds,
            instance_types=self.instance_types, nodes=self.nodes,
            spot_price=None if self.spot_price is None else self.spot_price[:, first:last],
            on_demand_price=self.on_demand_price)

    def refined(self, factor: int) -> Market:
        """The same market on a ``factor`` x finer tick: every tick split into ``factor``
        ticks with its availability and spot price, so every zone is up for the same hours
        at the same prices; a policy decides ``factor`` x as often. For checking how much a
        result depends on the trace's tick length (benchmarks/fleet_tick_sensitivity.py):
        the collection's ticks run from 32 s to 600 s."""
        if int(factor) != factor or factor < 1:
            raise ValueError(f"factor={factor!r}: a whole number >= 1 (ticks per original tick)")
        k = int(factor)
        return Market(
            zones=self.zones, gap_seconds=self.gap_seconds / k,
            available=np.repeat(self.available, k, axis=1), regions=self.regions,
            clouds=self.clouds, instance_types=self.instance_types, nodes=self.nodes,
            spot_price=None if self.spot_price is None else np.repeat(self.spot_price, k, axis=1),
            on_demand_price=self.on_demand_price)

    def with_spot_prices(self, path: str | Path,
                         series_ticks: Sequence[int] | None = None,
                         labels: Sequence[Sequence[str]] | None = None) -> Market:
        """Attach per-tick spot prices from a ``spot-prices/*.json`` file
        (``{"<zone>_<instance>": [$/h per tick, ...]}``, aligned with the traces).

        Each series must hold exactly one finite positive price per tick of its zone's
        trace: ``series_ticks[z]`` ticks (default: the market's ``n_ticks``; ``from_dir``
        passes each file's own length, as a folder's files may differ in length). A
        longer or shorter series is refused, not cut: it was made for another window or
        tick length.

        A series is matched on zone and instance type (``price_file_rows``): the key
        ``<zone>_<label>`` for one of ``labels[z]`` (default: the zone's instance type;
        ``from_dir`` passes each file's label too, ``trace_price_labels``); a (zone,
        instance) without one is refused, never priced by another instance type's series."""
        raw = read_price_file(path)
        lengths = list(series_ticks) if series_ticks is not None else [self.n_ticks] * self.n_zones
        if len(lengths) != self.n_zones or min(lengths) < self.n_ticks:
            raise ValueError(f"series_ticks needs one length >= {self.n_ticks} per zone "
                             f"({self.n_zones}), got {lengths}")
        check_price_file_covers(raw, self.zones, Path(path))
        names = [tuple(x) for x in labels] if labels is not None else [
            (it,) for it in self.instance_types]
        if len(names) != self.n_zones:
            raise ValueError(f"labels needs one entry per zone ({self.n_zones}), got {len(names)}")
        rows = [arr[: self.n_ticks] for arr in price_file_rows(
            raw, list(zip(self.zones, names, lengths, strict=True)), Path(path))]
        return Market(zones=self.zones, gap_seconds=self.gap_seconds, available=self.available,
                      regions=self.regions, clouds=self.clouds,
                      instance_types=self.instance_types, nodes=self.nodes,
                      spot_price=np.stack(rows), on_demand_price=self.on_demand_price)

    def with_on_demand_prices(self, prices: float | Sequence[float]) -> Market:
        """Set on-demand $/h (one value for every zone, or one per zone)."""
        od = np.broadcast_to(np.asarray(prices, dtype=float), (self.n_zones,)).copy()
        return Market(zones=self.zones, gap_seconds=self.gap_seconds, available=self.available,
                      regions=self.regions, clouds=self.clouds,
                      instance_types=self.instance_types, nodes=self.nodes,
                      spot_price=self.spot_price, on_demand_price=od)

    @classmethod
    def from_traces(cls, traces: Sequence[Trace]) -> Market:
        """Stack traces of one gap; longer ones are cut to the shortest, with one warning
        naming the files and their lengths (``cut_to_common_length``, the rule the local
        fleet and the forecast follow too).

        The traces pass ``check_trace_set`` (one gap, one entry each, one node count;
        ``TraceFormatError`` otherwise), as a loaded folder does. Several instance types
        in one zone are separate market entries, named ``zone/instance``. Prices are attached when every trace carries them.
        """
        if not traces:
            raise ValueError("Market.from_traces needs at least one trace")
        check_trace_set(traces, require_up=False)
        traces = cut_to_common_length(traces, stacklevel=2)
        _warn_partial(traces)
        zone_count: dict[str, int] = {}
        for t in traces:
            zone_count[t.zone] = zone_count.get(t.zone, 0) + 1
        names = tuple(t.zone if zone_count[t.zone] == 1 else f"{t.zone}/{t.instance_type or t.accelerator}"
                      for t in traces)
        avail = np.stack([t.up() for t in traces])
        sp = None
        if all(t.spot_prices is not None for t in traces):
            sp = np.stack([np.asarray(t.spot_prices) for t in traces])
        od = None
        if all(t.on_demand_price is not None for t in traces):
            od = np.array([t.on_demand_price for t in traces], dtype=float)
        return cls(zones=names, gap_seconds=float(traces[0].gap_seconds), available=avail,
                   regions=tuple(t.region for t in traces), clouds=tuple(t.cloud for t in traces),
                   instance_types=tuple(t.instance_type or t.accelerator for t in traces),
                   nodes=traces[0].nodes, spot_price=sp, on_demand_price=od)

    @classmethod
    def from_dir(cls, directory: str | Path, zones: Sequence[str] | None = None,
                 nodes: int | None = None, prices: str | Path | None = None,
                 instance_types: Sequence[str] | None = None,
                 inverted: bool | None = None) -> Market:
        """Load every trace in ``directory`` (optionally only ``zones``, in that order;
        only ``instance_types``), needing ``nodes`` instances (default: the folder's
        ``N-node``, else 1); ``prices``: a per-tick spot price file to attach;
        ``inverted``: force the 0/1 convention (default: per file, see ``load_trace``).

        The folder passes ``load_trace_dir``'s checks (``check_trace_set``), the same for
        every consumer of the collection: ``TraceFormatError`` for files of different
        ticks, one entry in two files, different node counts, or no zone ever having the
        nodes needed (the job could only run on-demand, which is a wrong ``nodes`` far
        more often than a market worth simulating)."""
        traces = load_trace_dir(directory, nodes=nodes, inverted=inverted,
                                instance_types=instance_types)
        with warnings.catch_warnings():
            if prices is not None:  # the price file replaces whatever prices the files carry
                warnings.filterwarnings("ignore", message=r"only \d+ of \d+ traces carry per-tick")
            m = cls.from_traces(traces)
        lengths = dict(zip(m.zones, (t.n_ticks for t in traces), strict=True))
        labels = dict(zip(m.zones, (trace_price_labels(t) for t in traces), strict=True))
        if zones:
            m = m.subset(list(zones))
        if prices is not None:
            m = m.with_spot_prices(prices, series_ticks=[lengths[z] for z in m.zones],
                                   labels=[labels[z] for z in m.zones])
        return m


def _warn_partial(traces: Sequence[Trace]) -> None:
    """Warn (naming the files) when only some traces carry prices (the flat job prices
    then apply everywhere). Files of different lengths: ``cut_to_common_length``."""
    for what, has in (("per-tick spot prices", [t.spot_prices is not None for t in traces]),
                      ("an on-demand price", [t.on_demand_price is not None for t in traces])):
        if any(has) and not all(has):
            with_ = [t.source or t.zone for t, h in zip(traces, has, strict=True) if h]
            without = [t.source or t.zone for t, h in zip(traces, has, strict=True) if not h]
            warnings.warn(
                f"only {len(with_)} of {len(traces)} traces carry {what} (e.g. {with_[0]}; "
                f"missing in {without[:3]}): they are ignored and the job's flat price "
                "(--spot-price / --on-demand-price) applies to every zone; give every file "
                "its prices (or pass --prices with a series per zone) to use them",
                stacklevel=3)
