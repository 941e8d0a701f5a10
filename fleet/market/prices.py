"""Spot and on-demand prices ($/h) per instance type and zone / region.

Sources, in the order a lookup tries them:

1. ``overrides`` (from config): exact ``(instance_type, zone)`` / ``(instance_type,
   region)`` entries first, then instance-type-wide ones (key ``"*"``).
2. SkyPilot's catalog, read through the SkyPilot library (``sky.catalog``): per-zone
   spot prices and per-region on-demand prices, loaded by ``PriceBook.from_skypilot``
   (offline with ``fleet.market.catalog.offline_catalog``).
   Trace files that carry prices (SkyNomad ``gcp-h100-2025``: per-tick ``prices`` and
   ``metadata.price_info``), added by ``PriceBook.with_traces``, fill the same two tables
   and replace the catalog's entry for the same (type, zone / region): spot = the mean of
   each file's per-tick prices over the last ``TRACE_PRICE_WINDOW_HOURS`` before the
   traces' end (the planner's "now"), on-demand = ``price_info.on_demand_price``.
3. ``FALLBACK_PRICES``: a small table for instance types the catalog subset lacks,
   notably p3.2xlarge (1x V100) of the public spot traces: 3.06 $/h on-demand and
   0.918 $/h spot (30 % of on-demand, the 2023 level used with those traces).

A lookup that finds nothing raises ``KeyError`` naming the instance type, the place
and how to add a price.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from fleet.market.traces import Trace

#: instance type -> (on-demand $/h, spot $/h), the same in every region and zone
FALLBACK_PRICES: dict[str, tuple[float, float]] = {
    "p3.2xlarge": (3.06, 0.918),
}

#: accelerator (lower case) -> 1-accelerator instance type, for accelerators the
#: catalog subset lacks
FALLBACK_INSTANCE_TYPES: dict[str, str] = {"v100": "p3.2xlarge"}

#: hours of a file's per-tick spot prices (the last ones, up to the traces' end) whose mean
#: is the spot price ``PriceBook.with_traces`` plans with
TRACE_PRICE_WINDOW_HOURS = 24.0


class PriceOverrides(BaseModel):
    """Prices from config, $/h. Keys: instance type -> {zone or region or "*": price}."""

    model_config = ConfigDict(extra="forbid")

    spot: dict[str, dict[str, float]] = Field(default_factory=dict)
    on_demand: dict[str, dict[str, float]] = Field(default_factory=dict)

    def model_post_init(self, __context: object) -> None:
        for kind, table in (("spot", self.spot), ("on_demand", self.on_demand)):
            for itype, places in table.items():
                for place, price in places.items():
                    if not price > 0:
                        raise ValueError(f"prices.{kind}.{itype}.{place} = {price}: a price must "
                                         "be a positive number of $/h")


def _region_of(zone: str) -> str:
    return zone[:-1] if zone and zone[-1].isalpha() else zone


@dataclass
class PriceBook:
    """Price lookups in $/h. Build with ``PriceBook.from_skypilot`` or ``PriceBook.default``."""

    spot: dict[tuple[str, str], float] = field(default_factory=dict)  # (type, zone)
    on_demand: dict[tuple[str, str], float] = field(default_factory=dict)  # (type, region)
    accelerators: dict[str, list[str]] = field(default_factory=dict)  # acc -> types
    overrides: PriceOverrides = field(default_factory=PriceOverrides)
    fallback: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(FALLBACK_PRICES))
    source: str = "fallback"

    # ------------------------------------------------------------------ lookups
    def spot_price(self, instance_type: str, zone: str) -> float:
        """Spot price of ``instance_type`` in ``zone`` ($/h)."""
        o = self.overrides.spot.get(instance_type, {})
        for key in (zone, _region_of(zone), "*"):
            if key in o:
                return float(o[key])
        if (instance_type, zone) in self.spot:
            return self.spot[(instance_type, zone)]
        region = _region_of(zone)
        in_region = [p for (t, z), p in self.spot.items() if t == instance_type
                     and _region_of(z) == region]
        if in_region:  # zone not listed in the catalog: cheapest quote of its region
            return min(in_region)
        if instance_type in self.fallback:
            return float(self.fallback[instance_type][1])
        raise KeyError(f"no spot price for {instance_type} in {zone}: add it under "
                       f"prices.spot.{instance_type}.{zone} (or '*') in the config, or use a "
                       "catalog that lists it")

    def on_demand_price(self, instance_type: str, region: str) -> float:
        """On-demand price of ``instance_type`` in ``region`` ($/h); a zone is accepted too."""
        o = self.overrides.on_demand.get(instance_type, {})
        reg = region if (instance_type, region) in self.on_demand or region in o else _region_of(region)
        for key in (region, reg, "*"):
            if key in o:
                return float(o[key])
        if (instance_type, reg) in self.on_demand:
            return self.on_demand[(instance_type, reg)]
        if instance_type in self.fallback:
            return float(self.fallback[instance_type][0])
        raise KeyError(f"no on-demand price for {instance_type} in {region}: add it under "
                       f"prices.on_demand.{instance_type}.{region} (or '*') in the config")

    def instance_types_for(self, accelerator: str, count: int = 1) -> list[str]:
        """Instance types offering ``accelerator`` (catalog first, then the fallback table)."""
        types = list(self.accelerators.get(f"{accelerator.upper()}:{count}", []))
        # types of priced trace files: the files name the machine, not its accelerator count
        types += [t for t in self.accelerators.get(f"{accelerator.upper()}:*", []) if t not in types]
        fb = FALLBACK_INSTANCE_TYPES.get(accelerator.lower())
        if count == 1 and fb and fb not in types:
            types.append(fb)
        return types

    def zones_for(self, instance_type: str) -> list[str]:
        """Zones with a spot quote for ``instance_type`` in the catalog."""
        return sorted(z for (t, z) in self.spot if t == instance_type)

    def with_overrides(self, overrides: PriceOverrides | Mapping) -> PriceBook:
        ov = overrides if isinstance(overrides, PriceOverrides) else PriceOverrides(**overrides)
        return PriceBook(self.spot, self.on_demand, self.accelerators, ov, self.fallback,
                         self.source)

    def with_traces(self, traces: Iterable[Trace],
                    window_hours: float = TRACE_PRICE_WINDOW_HOURS, *,
                    spot_source: str = "each trace file's per-tick prices") -> PriceBook:
        """This book plus the prices the trace files carry (``Trace.spot_prices`` and
        ``Trace.on_demand_price``, as ``load_trace`` read them: the fleet simulator's
        prices), which replace the book's entry for the same key. Spot per zone: the mean of
        the last ``window_hours`` of the file's per-tick prices (the traces end at the
        planning "now"); on-demand per region: ``price_info.on_demand_price`` (the lowest
        when zones of a region differ). Keys use ``trace_instance_type`` (the file's
        machine type, e.g. a3-highgpu-8g), as the zone statistics do, and the trace's
        accelerator maps to it at any count (``<ACC>:*``). Config overrides still win.
        Traces without prices leave the book as it is (``source`` unchanged).
        ``spot_source``: where the per-tick spot prices came from, for ``source`` (a price
        file attached with ``attach_spot_prices``, as ``plan --prices`` does). ``source``
        names the origin of each kind of price: the spot part, the on-demand part, then the
        book's own source for the rest (until 2026-11-27 it began "trace files (...)" even
        when the spot prices came from a ``--prices`` file and on-demand from the table)."""
        import math

        from fleet.stats.preemption import trace_instance_type

        spot, ond = dict(self.spot), dict(self.on_demand)
        accs = {k: list(v) for k, v in self.accelerators.items()}
        n_spot = n_od = 0
        for t in traces:
            itype = trace_instance_type(t)
            if t.spot_prices is not None and len(t.spot_prices):
                n = max(1, math.ceil(window_hours * 3600.0 / t.gap_seconds - 1e-9))
                spot[(itype, t.zone)] = float(t.spot_prices[-n:].mean())
                n_spot += 1
            if t.on_demand_price is not None:
                key = (itype, t.region)
                od = float(t.on_demand_price)
                ond[key] = min(od, ond[key]) if key in ond and key not in self.on_demand else od
                n_od += 1
            if t.spot_prices is not None or t.on_demand_price is not None:
                k = f"{t.accelerator.upper()}:*"
                if itype not in accs.setdefault(k, []):
                    accs[k].append(itype)
        if not (n_spot or n_od):
            return self
        parts = []
        if n_spot:
            parts.append(f"spot of {n_spot} zone(s) = mean of the last {window_hours:g} h of "
                         f"{spot_source}")
        if n_od:
            parts.append(f"on-demand of {n_od} zone(s) = the trace files' "
                         "price_info.on_demand_price")
        rest = ("other prices" if n_spot and n_od else
                "on-demand and other prices" if n_spot else "spot and other prices")
        source = f"{'; '.join(parts)}; {rest}: {self.source}"
        return PriceBook(spot, ond, accs, self.overrides, self.fallback, source)

    def describe(self) -> str:
        """``source`` in words, for a plan's "prices:" line."""
        table = ", ".join(f"{t} spot {sp:g} / on-demand {od:g} $/h"
                          for t, (od, sp) in self.fallback.items())
        return self.source.replace("fallback", f"the built-in table ({table})")

    def to_dict(self) -> dict:
        return {"source": self.source,
                "spot": [{"instance_type": t, "zone": z, "price": p}
                         for (t, z), p in sorted(self.spot.items())],
                "on_demand": [{"instance_type": t, "region": r, "price": p}
                              for (t, r), p in sorted(self.on_demand.items())],
                "fallback": {k: {"on_demand": v[0], "spot": v[1]} for k, v in self.fallback.items()},
                "overrides": self.overrides.model_dump()}

    # ------------------------------------------------------------------ builders
    @classmethod
    def default(cls, overrides: PriceOverrides | Mapping | None = None) -> PriceBook:
        """Only the fallback table (+ overrides): no SkyPilot needed."""
        book = cls(source="fallback")
        return book.with_overrides(overrides) if overrides else book

    @classmethod
    def from_skypilot(cls, catalog_source: str | Path | None = None,
                      home_dir: str | Path | None = None, cloud: str = "aws",
                      accelerators: Iterable[str] | None = None,
                      overrides: PriceOverrides | Mapping | None = None) -> PriceBook:
        """Read every GPU instance type's prices through ``sky.catalog``.

        With ``catalog_source`` (a ``catalogs/v8`` folder) the catalog is installed
        under ``home_dir`` (a temporary directory if None) and read offline; without
        it SkyPilot's configured catalog is used (which may download).
        """
        import tempfile

        with contextlib.ExitStack() as stack:
            if catalog_source is not None:
                from fleet.market.catalog import offline_catalog

                if home_dir is None:
                    home_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="sky-home-"))
                stack.enter_context(offline_catalog(home_dir, catalog_source, enable_clouds=None))
            book = cls._read_catalog(cloud, accelerators)
        book.source = f"skypilot:{catalog_source or 'default'}"
        return book.with_overrides(overrides) if overrides else book

    @classmethod
    def _read_catalog(cls, cloud: str, accelerators: Iterable[str] | None) -> PriceBook:
        import sky.catalog as cat

        listing = cat.list_accelerators(gpus_only=True, clouds=cloud, all_regions=True,
                                        require_price=True)
        wanted = {a.upper() for a in accelerators} if accelerators else None
        spot: dict[tuple[str, str], float] = {}
        ond: dict[tuple[str, str], float] = {}
        accs: dict[str, list[str]] = {}
        types: set[str] = set()
        for acc, infos in listing.items():
            if wanted is not None and acc.upper() not in wanted:
                continue
            for info in infos:
                if not info.instance_type:
                    continue
                key = f"{acc.upper()}:{int(info.accelerator_count)}"
                if info.instance_type not in accs.setdefault(key, []):
                    accs[key].append(info.instance_type)
                types.add(info.instance_type)
        # GCP attaches the GPU to a host VM: the catalog prices the two apart (the host row
        # of a2-highgpu-1g has no GPU in its price), so a zone's price is host + GPU, and a
        # zone where the GPU is not offered has none. Until 2026-11-28 a GCP book held the
        # host's price alone.
        attached = {} if cloud.lower() != "gcp" else {
            t: (k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1])) for k, ts in accs.items() for t in ts}

        def gpu_cost(itype: str, use_spot: bool, region: str, zone: str | None) -> float:
            if itype not in attached:
                return 0.0
            acc, n = attached[itype]
            return float(cat.get_accelerator_hourly_cost(acc, n, use_spot=use_spot, region=region,
                                                         zone=zone, clouds=cloud))

        for itype in sorted(types):
            for region in cat.get_region_zones_for_instance_type(itype, use_spot=True,
                                                                 clouds=cloud):
                od = float(cat.get_hourly_cost(itype, use_spot=False, region=region.name, zone=None,
                                               clouds=cloud)) + gpu_cost(itype, False, region.name, None)
                if od == od:  # NaN: the GPU is not offered in this region
                    ond[(itype, region.name)] = od
                for zone in region.zones or []:
                    sp = float(cat.get_hourly_cost(itype, use_spot=True, region=region.name,
                                                   zone=zone.name, clouds=cloud)) \
                        + gpu_cost(itype, True, region.name, zone.name)
                    if sp == sp:
                        spot[(itype, zone.name)] = sp
        return cls(spot=spot, on_demand=ond, accelerators=accs)

    @classmethod
    def merged(cls, books: Sequence[PriceBook]) -> PriceBook:
        """One book holding every entry of ``books`` (per-cloud catalog books: instance
        types and zones do not overlap across clouds; on a clash the first book wins).
        Overrides and the fallback table are the first book's; ``source`` joins theirs."""
        if not books:
            return cls.default()
        first = books[0]
        spot: dict[tuple[str, str], float] = {}
        ond: dict[tuple[str, str], float] = {}
        accs: dict[str, list[str]] = {}
        for b in books:
            for k, v in b.spot.items():
                spot.setdefault(k, v)
            for k, v in b.on_demand.items():
                ond.setdefault(k, v)
            for k, ts in b.accelerators.items():
                accs.setdefault(k, [])
                accs[k] += [t for t in ts if t not in accs[k]]
        source = "; ".join(dict.fromkeys(b.source for b in books))
        return cls(spot, ond, accs, first.overrides, first.fallback, source)
