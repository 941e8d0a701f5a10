"""SkyNomad-format trace files for tests (the ../shared/data/gcp-h100-2025 layout, built in
``tmp_path``): inverted 0/1 availability (1 = unavailable), per-tick spot prices and
``metadata.price_info``. Imported by tests of the loader's consumers (plan, local fleet)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def write_nomad_trace(d: Path, zone: str, data: Sequence[int], prices: Sequence[float],
                      price: float, on_demand_price: float, gap_seconds: int = 600) -> Path:
    """Write ``<d>/<zone>_h100_16.json`` (``data``: 1 = unavailable; ``prices``: $/h per
    tick; ``price`` / ``on_demand_price``: the ``price_info`` quotes, $/h)."""
    info = {"region": zone.rsplit("-", 1)[0], "machine_type": "a3-highgpu-8g", "currency": "USD",
            "price": price, "on_demand_price": on_demand_price}
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{zone}_h100_16.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap_seconds, "zone": zone,
                                             "price_info": info},
                                "data": list(data), "prices": list(prices)}))
    return path
