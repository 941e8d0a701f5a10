"""The simulator settings behind SkyNomad's published cost ratios, as our JobSpecs.

SkyNomad (NSDI'27, public artifact ``andylizf/skynomad-artifact``, tag ``nsdi27-ae``)
reports 1.04-1.07x its offline optimum on GCP H100 zones and 1.117x (UP with eager
failover 1.258x) on AWS V100 zones with real prices. Those figures come from its own
simulator with its own settings; this module writes those settings down (facts only,
each with its source file in the artifact; docs/fleet-policies.md, *Comparing with
SkyNomad's published figures*, has the table) and turns them into
:class:`~fleet.policies.base.JobSpec` objects for our simulator.

Their job convention differs from ours: the **deadline is fixed** (a whole number of
ticks, the length of their trace windows minus one tick) and the work is
``deadline / ratio``; we fix the work and scale the deadline. Their windows tile the
trace: window ``w`` starts at tick ``w x ceil(deadline / gap)``.

What their model does, in our terms (``skynomad_job``):

* restart 0.2 h on every launch, on-demand included;
* no work lost at a preemption (progress is kept to the tick boundary) and no periodic
  checkpoints: checkpoint time 0 with a usable notice;
* a failed launch costs neither time nor money: ``probe_seconds = 0``;
* a 50 GB checkpoint; moving it to another region costs egress $ only (the transfer
  time overlaps the restart by default): ``transfer_seconds = 0``; egress 0.02 $/GB
  (their per-pair table gives 0.01 for us-east-1 <-> us-east-2 and falls back to 0.02
  for every GCP pair; we have one flat rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fleet.policies.base import JobSpec
from fleet.simulation.market import Market

RESTART_HOURS = 0.2
"""Restart overhead per launch (h): ``DEFAULT_RESTART_OVERHEAD`` in
scripts_multi/benchmark_components/scenario_config.py."""

CHECKPOINT_GB = 50.0
"""Checkpoint size (GB): ``DEFAULT_CHECKPOINT_SIZE`` (H100 sweeps) and configs/v100.py."""

EGRESS_USD_PER_GB = 0.02
"""Inter-region egress ($/GB): sky_spot/migration_model.py's AWS S3 table; GCP region
names are not in it and take its 0.02 fallback (us-east-1 <-> us-east-2: 0.01)."""

H100_DEADLINE_TICKS = 311
"""H100 deadline in 600 s ticks: 51.83 h (research/data/deadline_sensitivity.csv)."""

V100_DEADLINE_TICKS = 1106
"""V100 deadline in 195 s ticks: 59.91 h (research/data/v100.csv)."""

H100_RATIOS = (1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0)
"""D/W of the deadline-sensitivity figure (configs/deadline_sensitivity.py, 1.0 left out:
every policy is forced onto on-demand there)."""

H100_GLOBAL_DIVERSE = ("us-central1-a", "us-west1-a", "europe-west1-c", "europe-west3-c",
                       "asia-southeast1-b", "asia-south2-b")
"""``GLOBAL_DIVERSE_SCENARIO`` (scenario_config.py): the H100 deadline-sensitivity zones."""

V100_CROSS_AREA = ("us-east-1c", "us-east-2b", "us-west-2a")
"""configs/v100.py: the three zones of the V100 figure (one per region), D/W 1.5."""

V100_WINDOWS = (3, 5, 7, 8, 14)
"""configs/v100.py ``full_trace_windows``: the five windows of the V100 figure."""

PUBLISHED_V100_USD = {"optimal": 37.373310, "skynomad": 41.731244, "up_s": 47.017838}
"""Mean $ over the five V100 windows (paper_figs/values/traces_comparison_v100.values.csv)."""

PUBLISHED_H100_USD = {1.05: (840.149903, 881.649178, 1187.644137),
                      1.1: (792.837148, 837.157063, 1128.765611),
                      1.15: (754.950867, 800.182689, 1073.540952),
                      1.2: (720.676963, 766.157968, 1024.082719),
                      1.3: (661.994851, 707.037845, 936.089739),
                      1.5: (571.381698, 606.376237, 795.005767),
                      2.0: (426.173004, 443.517672, 568.980297)}
"""D/W -> (Optimal, SkyNomad, UP(S)) mean $ over 6 windows, Global Diverse zones
(paper_figs/values/deadline_sensitivity.values.csv)."""

H100_WINDOWS_IN_OUR_DATA = (0, 1)
"""Their H100 windows inside our 116 h (the first 116 h of their 352 h trace): windows
2-5 start at 103.7 h and end after it."""

PUBLISHED_H100_WINDOW_USD = {(1.05, 0): (809.637840, 812.048736, 809.637840),
                             (1.05, 1): (890.502501, 967.710404, 2816.868770),
                             (1.5, 0): (567.019093, 569.429989, 567.019093),
                             (1.5, 1): (572.471200, 635.448142, 1779.868720)}
"""(D/W, window) -> (Optimal, SkyNomad, UP(S)) $ of one window, Global Diverse zones
(research/data/deadline_sensitivity.csv)."""


def skynomad_job(deadline_hours: float, ratio: float, notice_seconds: float = 120.0,
                 restart_hours: float = RESTART_HOURS, checkpoint_gb: float = CHECKPOINT_GB,
                 egress_usd_per_gb: float = EGRESS_USD_PER_GB) -> JobSpec:
    """A job under SkyNomad's simulator settings: fixed ``deadline_hours`` (h), work
    ``deadline_hours / ratio`` (h), restart ``restart_hours`` (h), no checkpoint time (a
    preemption loses nothing given the notice), failed launches free, egress
    ``checkpoint_gb x egress_usd_per_gb`` $ and no transfer time per cross-region move."""
    if not ratio >= 1.0:
        raise ValueError(f"ratio (D/W) must be >= 1, got {ratio!r}")
    return JobSpec(work_hours=deadline_hours / ratio, deadline_hours=deadline_hours,
                   restart_hours=restart_hours, checkpoint_hours=0.0,
                   notice_seconds=notice_seconds, checkpoint_gb=checkpoint_gb,
                   egress_usd_per_gb=egress_usd_per_gb, transfer_seconds=0.0,
                   probe_seconds=0.0)


def deadline_hours_of(ticks: int, gap_seconds: float) -> float:
    """A deadline of ``ticks`` whole ticks of ``gap_seconds`` s, in hours."""
    return ticks * gap_seconds / 3600.0


def tiled_window_starts(deadline_hours: float, gap_seconds: float,
                        windows: Sequence[int]) -> list[int]:
    """Start ticks of SkyNomad's sequential windows: window ``w`` starts at
    ``w x ceil(deadline / gap)`` ticks (their benchmark driver's full-trace tiling)."""
    if gap_seconds <= 0 or deadline_hours <= 0:
        raise ValueError("deadline_hours and gap_seconds must be > 0")
    span = int(math.ceil(deadline_hours * 3600.0 / gap_seconds - 1e-9))
    return [int(w) * span for w in windows]


def published_ratio(optimal_usd: float, policy_usd: float) -> float:
    """Their reported ratio: mean cost over the windows / the optimum's mean (a ratio of
    means, like our cells)."""
    if optimal_usd <= 0:
        raise ValueError("optimal_usd must be > 0")
    return policy_usd / optimal_usd


def pad_unavailable(market: Market, extra_ticks: int) -> Market:
    """``market`` followed by ``extra_ticks`` ticks in which no zone has spot capacity
    (spot prices repeat the last tick's). Our engine wants room for a run past its
    deadline (deadline + work + 1 h); SkyNomad's 51.8 h H100 deadlines leave the 116 h
    window almost no start times otherwise. A run that meets its deadline at a start
    with ``start + deadline`` inside the real ticks never reaches the padding."""
    if extra_ticks < 0:
        raise ValueError(f"extra_ticks must be >= 0, got {extra_ticks!r}")
    if extra_ticks == 0:
        return market
    avail = np.concatenate([market.available,
                            np.zeros((market.n_zones, extra_ticks), dtype=bool)], axis=1)
    sp = None
    if market.spot_price is not None:
        sp = np.concatenate([market.spot_price,
                             np.repeat(market.spot_price[:, -1:], extra_ticks, axis=1)], axis=1)
    return Market(zones=market.zones, gap_seconds=market.gap_seconds, available=avail,
                  regions=market.regions, clouds=market.clouds,
                  instance_types=market.instance_types, nodes=market.nodes, spot_price=sp,
                  on_demand_price=market.on_demand_price)
