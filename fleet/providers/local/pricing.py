"""Prices for emulated nodes ($/h): spot per zone, on-demand per region.

``FlatPrices`` is the fallback (defaults: the p3.2xlarge figures used with the public
traces, 3.06 $/h on-demand, 0.918 $/h spot). ``PriceBookPrices`` wraps the market's
``fleet.market.prices.PriceBook`` (SkyPilot catalog prices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class PriceSource(Protocol):
    def price_per_hour(self, zone: str, region: str, spot: bool) -> float:
        """$/h of one node: the zone's spot price, or the region's on-demand price."""
        ...


@dataclass(frozen=True)
class FlatPrices:
    """One spot and one on-demand price ($/h), optionally overridden per zone / region."""

    spot: float = 0.918
    on_demand: float = 3.06
    spot_by_zone: dict[str, float] = field(default_factory=dict)
    on_demand_by_region: dict[str, float] = field(default_factory=dict)

    def price_per_hour(self, zone: str, region: str, spot: bool) -> float:
        if spot:
            return float(self.spot_by_zone.get(zone, self.spot))
        return float(self.on_demand_by_region.get(region, self.on_demand))


@dataclass
class PriceBookPrices:
    """Adapter for ``fleet.market.prices.PriceBook`` for one instance type."""

    book: Any
    instance_type: str
    fallback: FlatPrices = field(default_factory=FlatPrices)

    def price_per_hour(self, zone: str, region: str, spot: bool) -> float:
        for name, args in ((("spot_price", (self.instance_type, zone)) if spot else
                            ("on_demand_price", (self.instance_type, region))),):
            fn = getattr(self.book, name, None)
            if fn is not None:
                try:
                    value = fn(*args)
                except (KeyError, ValueError, LookupError):
                    value = None
                if value is not None:
                    return float(value)
        return self.fallback.price_per_hour(zone, region, spot)
