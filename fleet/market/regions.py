"""Regions and the cost of moving a job between them.

Zones belong to regions (``fleet.market.traces.zone_region``). Moving a job to a zone of
another region moves its checkpoint: ``checkpoint_gb x egress $/GB`` (billed by the
source cloud) plus the transfer time, which delays the launch there (and is billed on the
new instance, which waits for the checkpoint). Moving between zones of one region is
free (same-region object storage).

Defaults (documented in docs/fleet-policies.md; override per job in ``JobSpec``):

* egress between regions of one cloud, one flat rate per cloud (list prices, 2025):
  AWS 0.02 $/GB (inter-region data transfer, US), GCP 0.05 $/GB (between the
  8 regions of the H100 set, which span US, Europe and Asia: 0.02 within a continent,
  0.05-0.08 between continents);
* transfer bandwidth 5 Gbit/s, the transfer time rounded UP to whole minutes (so the
  omniscient DP keeps a coarse exact time quantum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EGRESS_USD_PER_GB: dict[str, float] = {"aws": 0.02, "gcp": 0.05, "azure": 0.02, "local": 0.0}
"""Inter-region egress $/GB per cloud."""

TRANSFER_GBIT_PER_S = 5.0
"""Default bandwidth for moving a checkpoint between regions (Gbit/s)."""


@dataclass(frozen=True)
class Migration:
    """Cost of moving the checkpoint to another region: dollars and seconds."""

    usd: float
    seconds: float

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0


def migration_for(cloud: str, checkpoint_gb: float, egress_usd_per_gb: float | None = None,
                  transfer_seconds: float | None = None,
                  bandwidth_gbit_per_s: float = TRANSFER_GBIT_PER_S) -> Migration:
    """The move's cost for a checkpoint of ``checkpoint_gb`` GB on ``cloud``.

    ``egress_usd_per_gb`` / ``transfer_seconds`` override the defaults. An unknown cloud
    without an explicit egress price is an error naming the fix.
    """
    if checkpoint_gb < 0:
        raise ValueError(f"checkpoint_gb must be >= 0, got {checkpoint_gb!r}")
    if egress_usd_per_gb is None:
        if cloud not in EGRESS_USD_PER_GB:
            raise ValueError(f"no default egress price for cloud {cloud!r}; set "
                             f"JobSpec.egress_usd_per_gb (known: {sorted(EGRESS_USD_PER_GB)})")
        egress_usd_per_gb = EGRESS_USD_PER_GB[cloud]
    if transfer_seconds is None:
        raw = checkpoint_gb * 8.0 / bandwidth_gbit_per_s
        transfer_seconds = 60.0 * math.ceil(raw / 60.0 - 1e-9) if raw > 0 else 0.0
    return Migration(usd=checkpoint_gb * egress_usd_per_gb, seconds=float(transfer_seconds))


def spec_migration(spec, cloud: str) -> Migration:
    """:func:`migration_for` with a ``JobSpec``'s checkpoint size and overrides."""
    return migration_for(cloud, spec.checkpoint_gb, spec.egress_usd_per_gb, spec.transfer_seconds)
