"""The three evaluation families of docs/fleet-policies.md, swept with bootstrap intervals.

Families (``FAMILIES``):

* ``v100`` — the 9-zone AWS p3.2xlarge availability traces (aws-02-15-2023, 3 regions,
  195 s ticks) with the real per-tick spot prices (spot-prices/aws-v100-02-15-2023.json),
  on-demand 3.06 $/h; W = 12 h; checkpoint 25 GB (AWS egress 0.02 $/GB: 0.50 $ and
  60 s per cross-region move); 168 h of history before the first start.
* ``h100`` — the 13 GCP H100 zones in 8 regions (gcp-h100-2025, 600 s ticks, 4.8 days),
  the files' spot and per-region on-demand prices (a3-highgpu-8g); W = 8 h (the window
  is short); checkpoint 100 GB (GCP egress 0.05 $/GB: 5.00 $ and 180 s per move); 12 h of
  history before the first start.
* ``volatile`` — synthetic (:func:`fleet.market.regimes.volatile_config`): 9 zones in 3
  regions, all zones down together 24-54 % of the time, region and market outages, multi-day
  droughts, price spikes, cheap-flaky vs expensive-reliable zones; W = 12 h; checkpoint
  25 GB on AWS rates; report seeds 10-14 (20 starts each), 168 h of history each.

Held-out families (never tuned on; each run once after the policy version it checks was
committed): ``volatile_holdout`` / ``available_holdout`` (seeds 40-44),
``volatile_holdout50`` / ``available_holdout50`` (seeds 50-54), and, first looked at in
session 5 with spotfleet v5:

* ``v100_apr`` — the 4-zone AWS p3.2xlarge preemption traces (aws-04-22-2023:
  us-east-1c, us-east-1f, us-west-2b, us-west-2c; 2 regions; 32 s ticks; 19,961 ticks =
  7.4 days). The data has no per-tick prices for this window: flat spot 0.918 $/h and
  on-demand 3.06 $/h (the data README's figures); W = 12 h; checkpoint 25 GB on AWS
  rates (0.50 $ and 60 s per cross-region move); 48 h of history before the first start
  (168 h would leave no room for a 36 h deadline in 177 h; with 48 h, 100 starts fit
  at every D/W, overlapping in time).
* ``volatile_holdout60`` / ``available_holdout60`` — synthetic, seeds 60-64.

Held out in session 6 (a regime shift, issue 10):

* ``shift_holdout70`` — synthetic :func:`fleet.market.regimes.shift_market` with
  :func:`fleet.market.regimes.shift_config`, seeds 70-74, 12 days each, the regime changing
  at ``SHIFT_HOURS`` = 171 h: the 168 h of history before every start are calm and mostly
  available (cheap zones ~90 % up, up-runs ~10 h), and from 171 h on the cheap zones flap
  (0.5 h up-runs, ~25 % up) while each region's 1.6x dearer reliable zone stays up (~90 %).
  W = 12 h; checkpoint 25 GB on AWS rates (as ``volatile``). The family's
  ``last_start_hours`` = 177 h puts the 20 starts per seed in [168, 177) h, i.e. within
  [shift - 0.25 W, shift + 0.5 W): every job's history is (nearly all) calm and its run
  crosses the shift or starts just after it. Same starts at every D/W (the market is long
  enough for the 36 h deadline of D/W 3 after 177 h).

Held out in session 6, seventh round (fresh seeds, run once after the tuning-set verdict;
the tuning set then gained a regime shift on seeds 80-84, ``benchmarks/fleet_tuning_set.py``):
``volatile_holdout90`` / ``available_holdout90`` / ``shift_holdout90`` — seeds 90-94;
``volatile_holdout100`` / ``available_holdout100`` / ``shift_holdout100`` — seeds 100-104
(tenth round).

``volatile_holdout110`` / ``available_holdout110`` / ``shift_holdout110`` — seeds 110-114
(session 7; defined for the eleventh round, whose candidate failed the tuning set; first run
in session 8 for the thirteenth round, ``zone_model="changepoint"``).
``volatile_holdout120`` / ``available_holdout120`` / ``shift_holdout120`` — seeds 120-124
(session 8; fresh data for the fourteenth round, run once for it).
``volatile_holdout130`` / ``available_holdout130`` / ``shift_holdout130`` — seeds 130-134
(session 8; fresh data for the fifteenth round, run once for it).
``volatile_holdout140`` / ``available_holdout140`` / ``shift_holdout140`` — seeds 140-144
(session 9; fresh data for the sixteenth round, run once for it).
``volatile_holdout150`` / ``available_holdout150`` / ``shift_holdout150`` — seeds 150-154
(session 10; fresh data for the seventeenth round, run once for it).
``volatile_holdout160`` / ``available_holdout160`` / ``shift_holdout160`` — seeds 160-164
(session 10; fresh data for the eighteenth round, run once for it).
``volatile_holdout170`` / ``available_holdout170`` / ``shift_holdout170`` — seeds 170-174
(session 11; fresh data for the nineteenth round, run once for it).
``volatile_holdout180`` / ``available_holdout180`` / ``shift_holdout180`` — seeds 180-184
(session 12; fresh data for the twenty-first round, run once for it).
``volatile_holdout190`` / ``available_holdout190`` / ``shift_holdout190`` — seeds 190-194
(session 12; fresh data for the twenty-second round, run once for it).
``volatile_holdout200`` / ``available_holdout200`` / ``shift_holdout200`` — seeds 200-204
(session 13; fresh data for the twenty-third round, run once for it).
``reliable_break_holdout300`` — seeds 300-304, :func:`fleet.market.regimes.reliable_break_config`:
the opposite shift (each region's reliable zone flaps after ``SHIFT_HOURS``, the cheap zones
stay calm); session 13, run once on v8 and the baselines as a robustness probe.
``volatile_holdout210`` / ``available_holdout210`` / ``shift_holdout210`` — seeds 210-214,
``reliable_break_holdout310`` — seeds 310-314, and ``all_break_holdout410`` — seeds 410-414,
:func:`fleet.market.regimes.all_break_config` (every zone flaps after ``SHIFT_HOURS``):
session 14, run once to measure v8 on data nobody had looked at; no candidate was chosen on them.
``volatile_holdout230`` / ``available_holdout230`` / ``shift_holdout230`` — seeds 230-234
(session 15; fresh data for the twenty-fourth round, run once for it). The job-shape families
(``JOB_SHAPES``: ``v100_short`` ... ``volatile_heavy220``, seeds 220-224) were run once on v8.
``volatile_holdout240`` / ``available_holdout240`` / ``shift_holdout240`` — seeds 240-244, and
``volatile_long240`` (the long job shape on 20-day volatile markets of the same seeds): session 16;
fresh data for the twenty-fifth round, run once for it.
``volatile_holdout250`` / ``available_holdout250`` / ``shift_holdout250`` /
``reliable_break_holdout250`` / ``all_break_holdout250`` — seeds 250-254, and ``volatile_short250``
(the 2 h job on the volatile markets of the same seeds): session 17, run once to measure v10 on
every regime on data nobody had looked at; no candidate was chosen on them.
``volatile_holdout260`` / ``available_holdout260`` / ``shift_holdout260`` /
``reliable_break_holdout260`` / ``all_break_holdout260`` — seeds 260-264: session 19, fresh data
for clause 3 of the candidate ``launch_guard="restart_cost"``, defined before any run on them
(docs/fleet-policies-tuning-log.md, the session-19 pre-registration), run once for it.
``volatile_holdout270`` / ``available_holdout270`` / ``shift_holdout270`` /
``reliable_break_holdout270`` / ``all_break_holdout270`` — seeds 270-274, and ``volatile_short270``
(the 2 h job on the volatile markets of the same seeds): session 20, defined before any run on
them to measure v11 (adopted that session) out of sample, with v10 beside it; run once, no
candidate is chosen on them.

Every cell: D/W in ``RATIOS``, notice 0 or 120 s, the same start times for every policy,
the exact omniscient bound per start (notice-independent), ``mean cost / mean bound``
with a paired bootstrap interval over starts (and, in the goal tables, over blocks of
overlapping runs, :func:`start_blocks`), deadline-met share, and the ratio of the
project's policy to the best baseline of the cell (paired bootstrap interval).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fleet.contract import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_RESTART_SECONDS
from fleet.market.config import DEFAULT_ON_DEMAND_PRICE, DEFAULT_SPOT_PRICE
from fleet.policies.base import JobSpec
from fleet.simulation.engine import RunResult, horizon_ticks, simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import omniscient_bound

RATIOS = (1.05, 1.2, 1.5, 2.0, 3.0)
NOTICES = (0.0, 120.0)
OURS = "spotfleet"
CANDIDATE_PREFIX = "candidate:"
"""Column names of ``--candidate`` spotfleet variants (bench_fleet_sim.py): never a
baseline, labelled as candidates in the goal tables."""


@dataclass(frozen=True)
class Family:
    """One market family: markets with their start times, and the job template."""

    name: str
    title: str
    work_hours: float
    checkpoint_gb: float
    warmup_hours: float
    load: Callable[[Path, int], list[tuple[Market, list[int] | None]]]
    spot_price: float = DEFAULT_SPOT_PRICE
    on_demand_price: float = DEFAULT_ON_DEMAND_PRICE
    last_start_hours: float | None = None  # starts in [warmup_hours, this) (default: as late as fits)
    restart_seconds: float = DEFAULT_RESTART_SECONDS  # changeover per (re)launch (s)
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS  # training stall per save (s)

    def starts(self, market: Market, spec: JobSpec, n: int) -> list[int]:
        """The ``n`` start ticks of ``market`` for ``spec`` (:func:`spread_starts`)."""
        return spread_starts(market, spec, n, self.warmup_hours, last_start_hours=self.last_start_hours)

    def spec(self, ratio: float, notice: float) -> JobSpec:
        return JobSpec(work_hours=self.work_hours, deadline_hours=round(self.work_hours * ratio, 6),
                       restart_hours=self.restart_seconds / 3600.0,
                       checkpoint_hours=self.checkpoint_seconds / 3600.0, notice_seconds=notice,
                       checkpoint_gb=self.checkpoint_gb, spot_price=self.spot_price,
                       on_demand_price=self.on_demand_price)


def spread_starts(market: Market, spec: JobSpec, n: int, warmup_hours: float,
                  offset: float = 0.0, last_start_hours: float | None = None) -> list[int]:
    """``n`` start ticks evenly spread after the warm-up (may overlap in time), up to the
    last tick that leaves room for the run, or before ``last_start_hours`` when given."""
    g = market.gap_hours
    first = int(math.ceil(warmup_hours / g))
    last = market.n_ticks - horizon_ticks(spec, g) - 1
    if last <= first:
        raise ValueError(f"market of {market.duration_hours:.0f} h too short for {warmup_hours} h "
                         f"of history and a {spec.deadline_hours:g} h deadline")
    if last_start_hours is not None:
        want = int(math.ceil(last_start_hours / g))
        if want <= first or want > last:
            raise ValueError(f"last_start_hours={last_start_hours:g} must lie after the "
                             f"{warmup_hours:g} h warm-up and leave room for a "
                             f"{spec.deadline_hours:g} h deadline (at most {last * g:g} h here)")
        last = want
    step = (last - first) / n
    return [int(first + (k + offset) * step) for k in range(n)]


def _v100(data: Path, n: int) -> list[tuple[Market, list[int] | None]]:
    m = Market.from_dir(data / "spot-traces/availability/1-node/aws-02-15-2023",
                        prices=data / "spot-prices/aws-v100-02-15-2023.json")
    return [(m.with_on_demand_prices(DEFAULT_ON_DEMAND_PRICE), None)]


V100_APR_DIR = "spot-traces/preemption/1-node/aws-04-22-2023"
"""The held-out real trace folder (relative to the shared data folder)."""


def _v100_apr(data: Path, n: int) -> list[tuple[Market, list[int] | None]]:
    m = Market.from_dir(data / V100_APR_DIR)
    return [(m.with_on_demand_prices(DEFAULT_ON_DEMAND_PRICE), None)]


def _h100(data: Path, n: int) -> list[tuple[Market, list[int] | None]]:
    return [(Market.from_dir(data / "gcp-h100-2025"), None)]


def _holdout(config: str, seeds: range, days: float = 12.0
             ) -> Callable[[Path, int], list[tuple[Market, list[int] | None]]]:
    """Loader of the ``days``-long (12) synthetic markets of ``fleet.market.regimes.<config>``
    for ``seeds``."""
    def load(data: Path, n: int) -> list[tuple[Market, list[int] | None]]:
        from fleet.market import regimes

        cfg = getattr(regimes, config)(hours=24.0 * days)
        return [(regimes.regime_market(cfg, seed), None) for seed in seeds]

    return load


SHIFT_HOURS = 171.0
"""When ``shift_holdout70``'s regime changes: 168 h of history + 0.25 W (W = 12 h)."""
SHIFT_LAST_START_HOURS = SHIFT_HOURS + 0.5 * 12.0
"""The shift families' starts end here: no job starts more than 0.5 W into the new regime."""


def _shift(seeds: range, config: str = "shift_config") -> Callable[[Path, int], list[tuple[Market, list[int] | None]]]:
    """Loader of the 12-day regime-shift markets (:func:`fleet.market.regimes.shift_config`,
    or the ``config`` function of :mod:`fleet.market.regimes` named, shift at
    ``SHIFT_HOURS``) for ``seeds``."""
    def load(data: Path, n: int) -> list[tuple[Market, list[int] | None]]:
        from fleet.market import regimes

        before, after = getattr(regimes, config)()
        return [(regimes.shift_market(before, after, seed, SHIFT_HOURS), None) for seed in seeds]

    return load


def _shift_family(name: str, what: str, seeds: range, config: str = "shift_config") -> dict[str, Family]:
    """``{name: family}`` of a regime-shift family (:func:`_shift` of ``config`` on ``seeds``;
    ``what`` the title before the seeds), its starts around the shift."""
    title = f"{what} (seeds {seeds.start}-{seeds.stop - 1})"
    return {name: _synthetic(name, title, _shift(seeds, config), last_start_hours=SHIFT_LAST_START_HOURS)}


def _synthetic(name: str, title: str, load: Callable[[Path, int], list[tuple[Market, list[int] | None]]],
               **kw) -> Family:
    """A synthetic family: W = 12 h, 25 GB checkpoints, 168 h of history, spot 1.0 $/h and
    on-demand 3.4 $/h reference prices (the regimes' own prices are what runs)."""
    return Family(name, title, 12.0, 25.0, 168.0, load, spot_price=1.0, on_demand_price=3.4, **kw)


def _held_out_pair(suffix: str, seeds: range) -> dict[str, Family]:
    """``volatile_holdout<suffix>`` and ``available_holdout<suffix>`` on ``seeds``."""
    span = f"seeds {seeds.start}-{seeds.stop - 1}"
    return {f"volatile_holdout{suffix}": _synthetic(
                f"volatile_holdout{suffix}", f"held-out synthetic volatile ({span})",
                _holdout("volatile_config", seeds)),
            f"available_holdout{suffix}": _synthetic(
                f"available_holdout{suffix}", f"held-out synthetic mostly-available ({span})",
                _holdout("available_config", seeds))}


FAMILIES: dict[str, Family] = {
    "v100": Family("v100", "9-zone AWS V100, real per-tick prices", 12.0, 25.0, 168.0, _v100),
    "h100": Family("h100", "13-zone GCP H100 (8 regions), file prices", 8.0, 100.0, 12.0, _h100,
                   spot_price=18.0, on_demand_price=85.0),
    "volatile": _synthetic("volatile", "synthetic volatile (9 zones, 3 regions)",
                           _holdout("volatile_config", range(10, 15))),
    # held out: seeds never looked at while the policy was written
    # (20-24 held out v1 at 8ec51fd, 30-34 v2 at 61e4473, 40-44 v3)
    **_held_out_pair("", range(40, 45)),
    # v4 (never seen before v4 was committed)
    **_held_out_pair("50", range(50, 55)),
    # session 5 (spotfleet v5): a real trace and seeds nobody had looked at
    "v100_apr": Family("v100_apr", "held-out 4-zone AWS V100, Apr 2023 (2 regions, 32 s ticks, "
                       "flat prices)", 12.0, 25.0, 48.0, _v100_apr),
    **_held_out_pair("60", range(60, 65)),
    # session 6: a regime shift (calm history, flaky cheap zones during the job)
    "shift_holdout70": _synthetic("shift_holdout70", "held-out regime shift: calm history, cheap "
                                  "zones flaky from 171 h (seeds 70-74)", _shift(range(70, 75)),
                                  last_start_hours=SHIFT_LAST_START_HOURS),
    # session 6, seventh round: fresh seeds for the one-shot check of a rule chosen on the
    # tuning set (which then included the regime shift on seeds 80-84)
    **_held_out_pair("90", range(90, 95)),
    "shift_holdout90": _synthetic("shift_holdout90", "held-out regime shift (seeds 90-94)",
                                  _shift(range(90, 95)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 6, tenth round: fresh seeds for the one-shot check of own_runs=switch_emp
    **_held_out_pair("100", range(100, 105)),
    "shift_holdout100": _synthetic("shift_holdout100", "held-out regime shift (seeds 100-104)",
                                   _shift(range(100, 105)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 7, eleventh round: fresh seeds for the one-shot check of stats_rule=online
    **_held_out_pair("110", range(110, 115)),
    "shift_holdout110": _synthetic("shift_holdout110", "held-out regime shift (seeds 110-114)",
                                   _shift(range(110, 115)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 8: fresh seeds for a round designed after seeds 110-114 were seen (thirteenth round)
    **_held_out_pair("120", range(120, 125)),
    "shift_holdout120": _synthetic("shift_holdout120", "held-out regime shift (seeds 120-124)",
                                   _shift(range(120, 125)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 8: fresh seeds for the fifteenth round (seeds 120-124 were seen by then)
    **_held_out_pair("130", range(130, 135)),
    "shift_holdout130": _synthetic("shift_holdout130", "held-out regime shift (seeds 130-134)",
                                   _shift(range(130, 135)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 9: fresh seeds for the sixteenth round (seeds 130-134 were seen by then)
    **_held_out_pair("140", range(140, 145)),
    "shift_holdout140": _synthetic("shift_holdout140", "held-out regime shift (seeds 140-144)",
                                   _shift(range(140, 145)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 10: fresh seeds for the seventeenth round (seeds 140-144 were seen by then)
    **_held_out_pair("150", range(150, 155)),
    "shift_holdout150": _synthetic("shift_holdout150", "held-out regime shift (seeds 150-154)",
                                   _shift(range(150, 155)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 10: fresh seeds for the eighteenth round (seeds 150-154 were seen by then)
    **_held_out_pair("160", range(160, 165)),
    "shift_holdout160": _synthetic("shift_holdout160", "held-out regime shift (seeds 160-164)",
                                   _shift(range(160, 165)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 11: fresh seeds for the nineteenth round (seeds 160-164 were seen by then)
    **_held_out_pair("170", range(170, 175)),
    "shift_holdout170": _synthetic("shift_holdout170", "held-out regime shift (seeds 170-174)",
                                   _shift(range(170, 175)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 12: fresh seeds for the twenty-first round (seeds 170-174 were seen by then)
    **_held_out_pair("180", range(180, 185)),
    "shift_holdout180": _synthetic("shift_holdout180", "held-out regime shift (seeds 180-184)",
                                   _shift(range(180, 185)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 12: fresh seeds for the twenty-second round (seeds 180-184 were seen by then)
    **_held_out_pair("190", range(190, 195)),
    "shift_holdout190": _synthetic("shift_holdout190", "held-out regime shift (seeds 190-194)",
                                   _shift(range(190, 195)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 13: fresh seeds for the twenty-third round (seeds 190-194 were seen by then)
    **_held_out_pair("200", range(200, 205)),
    "shift_holdout200": _synthetic("shift_holdout200", "held-out regime shift (seeds 200-204)",
                                   _shift(range(200, 205)), last_start_hours=SHIFT_LAST_START_HOURS),
    # session 13: the opposite shift, run once as a robustness probe of v8 (no round tunes on it)
    "reliable_break_holdout300": _synthetic(
        "reliable_break_holdout300", "held-out shift that breaks each region's most reliable zone "
        "(seeds 300-304)", _shift(range(300, 305), "reliable_break_config"),
        last_start_hours=SHIFT_LAST_START_HOURS),
    # session 14: fresh seeds, run once to measure v8 (adopted on seeds 200-204) on data it
    # never saw; no candidate was chosen on them
    **_held_out_pair("210", range(210, 215)),
    "shift_holdout210": _synthetic("shift_holdout210", "held-out regime shift (seeds 210-214)",
                                   _shift(range(210, 215)), last_start_hours=SHIFT_LAST_START_HOURS),
    **_shift_family("reliable_break_holdout310", "held-out shift that breaks each region's most "
                    "reliable zone", range(310, 315), "reliable_break_config"),
    **_shift_family("all_break_holdout410", "held-out shift that breaks every zone", range(410, 415),
                    "all_break_config"),
    # session 15: fresh seeds for the twenty-fourth round (launch_guard="restart"), run once
    **_held_out_pair("230", range(230, 235)),
    **_shift_family("shift_holdout230", "held-out regime shift", range(230, 235)),
    # session 16: fresh seeds for the twenty-fifth round (od_exit="bridge"), run once
    **_held_out_pair("240", range(240, 245)),
    **_shift_family("shift_holdout240", "held-out regime shift", range(240, 245)),
    # session 17: v10 out of sample, every regime on fresh seeds, run once (no candidate)
    **_held_out_pair("250", range(250, 255)),
    **_shift_family("shift_holdout250", "held-out regime shift", range(250, 255)),
    **_shift_family("reliable_break_holdout250", "held-out shift that breaks each region's most "
                    "reliable zone", range(250, 255), "reliable_break_config"),
    **_shift_family("all_break_holdout250", "held-out shift that breaks every zone", range(250, 255),
                    "all_break_config"),
    # session 19: fresh seeds for clause 3 of launch_guard="restart_cost", run once
    **_held_out_pair("260", range(260, 265)),
    **_shift_family("shift_holdout260", "held-out regime shift", range(260, 265)),
    **_shift_family("reliable_break_holdout260", "held-out shift that breaks each region's most "
                    "reliable zone", range(260, 265), "reliable_break_config"),
    **_shift_family("all_break_holdout260", "held-out shift that breaks every zone", range(260, 265),
                    "all_break_config"),
    # session 20: v11 out of sample, every regime on fresh seeds, run once (no candidate)
    **_held_out_pair("270", range(270, 275)),
    **_shift_family("shift_holdout270", "held-out regime shift", range(270, 275)),
    **_shift_family("reliable_break_holdout270", "held-out shift that breaks each region's most "
                    "reliable zone", range(270, 275), "reliable_break_config"),
    **_shift_family("all_break_holdout270", "held-out shift that breaks every zone", range(270, 275),
                    "all_break_config"),
}


JOB_SHAPES: dict[str, dict[str, float]] = {
    "short": {"work_hours": 2.0},
    "long": {"work_hours": 48.0},
    "heavy": {"restart_seconds": 1200.0, "checkpoint_seconds": 180.0, "checkpoint_gb": 200.0},
}
"""Job shapes other than the one every family was tuned and reported on (W = 12 h, 8 h on
H100; restart 6 min; checkpoint stall 60 s; 25 / 100 GB). ``short``: W = 2 h (at D/W 1.05 the
slack is one restart). ``long``: W = 48 h (24 h on H100, whose window is 116 h). ``heavy``: a
20-minute restart, a 3-minute checkpoint stall (a 120 s notice no longer fits an emergency
save) and a 200 GB checkpoint (4 $ per cross-region move on AWS rates, 10 $ on GCP's).
Session 15: the shaped families below were defined before any policy ran on them, and run
once on v8 (docs/fleet-policies-held-out.md, *Job shapes nobody tuned on*)."""
H100_LONG_WORK_HOURS = 24.0
"""W of ``h100_long``: 48 h at D/W 3 would not fit the 116 h H100 window."""
SHAPE_SEEDS = range(220, 225)
"""Fresh synthetic seeds of the shaped volatile families (never run before session 15)."""


def _shaped(base: Family, shape: str, name: str, load: Callable | None = None) -> Family:
    """``base`` with the job of :data:`JOB_SHAPES` ``[shape]`` (and ``load`` if given)."""
    fields = dict(JOB_SHAPES[shape])
    if shape == "long" and base.name == "h100":
        fields["work_hours"] = H100_LONG_WORK_HOURS
    what = ", ".join(f"{k} {v:g}" for k, v in fields.items())
    return replace(base, name=name, title=f"{base.title}; job shape {shape} ({what})",
                   load=load or base.load, **fields)


def _shape_families() -> dict[str, Family]:
    out: dict[str, Family] = {}
    span = f"seeds {SHAPE_SEEDS.start}-{SHAPE_SEEDS.stop - 1}"
    volatile = _synthetic("volatile", f"held-out synthetic volatile ({span})",
                          _holdout("volatile_config", SHAPE_SEEDS))
    for shape in JOB_SHAPES:
        for base in (FAMILIES["v100"], FAMILIES["h100"]):
            out[f"{base.name}_{shape}"] = _shaped(base, shape, f"{base.name}_{shape}")
        # a 48 h job at D/W 3 needs 168 h of history + 144 h: 20-day markets
        days = 20.0 if shape == "long" else 12.0
        name = f"volatile_{shape}{SHAPE_SEEDS.start}"
        out[name] = _shaped(volatile, shape, name, _holdout("volatile_config", SHAPE_SEEDS, days))
    return out


FAMILIES.update(_shape_families())
FAMILIES["volatile_short250"] = _shaped(
    _synthetic("volatile", "held-out synthetic volatile (seeds 250-254)", _holdout("volatile_config", range(250, 255))),
    "short", "volatile_short250")
FAMILIES["volatile_short270"] = _shaped(
    _synthetic("volatile", "held-out synthetic volatile (seeds 270-274)", _holdout("volatile_config", range(270, 275))),
    "short", "volatile_short270")
FAMILIES["volatile_long240"] = _shaped(
    _synthetic("volatile", "held-out synthetic volatile (seeds 240-244)", _holdout("volatile_config", range(240, 245))),
    "long", "volatile_long240", _holdout("volatile_config", range(240, 245), 20.0))


@dataclass
class Cell:
    """All runs of one (family, ratio, notice)."""

    family: str
    ratio: float
    notice: float
    omniscient: np.ndarray
    costs: dict[str, np.ndarray] = field(default_factory=dict)
    met: dict[str, np.ndarray] = field(default_factory=dict)
    sim_hours: float = 0.0
    migrations: dict[str, float] = field(default_factory=dict)
    coarsened: int = 0  # omniscient bounds of the cell on a coarser grid (not exact)
    blocks: np.ndarray | None = None  # per start: its block of overlapping runs (start_blocks)


def start_blocks(plan: Sequence[Sequence[int]], gap_hours: Sequence[float],
                 span_hours: float) -> np.ndarray:
    """Block id of every start of ``plan`` (start ticks per market, in time order; the
    ``gap_hours`` of each market): a market's starts are cut into consecutive blocks
    whose first and last start lie less than ``span_hours`` apart (the deadline: runs
    that share market hours share their outages, prices and history, so they are not
    independent draws). Blocks never span two markets."""
    out: list[int] = []
    b = -1
    for ss, g in zip(plan, gap_hours, strict=True):
        first = None
        for s in ss:
            if first is None or (s - first) * g >= span_hours:
                b += 1
                first = s
            out.append(b)
    return np.asarray(out, dtype=int)


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95, blocks: np.ndarray | None = None) -> tuple[float, float, float]:
    """``mean(num) / mean(den)`` and its paired percentile bootstrap interval: starts
    resampled one by one, or with ``blocks`` (an id per start, :func:`start_blocks`)
    whole blocks resampled (a cluster bootstrap: the interval for starts that are not
    independent; with few blocks it is coarse and can be narrower than the truth)."""
    rng = np.random.default_rng(seed)
    a = (1 - level) / 2
    point = float(num.mean() / den.mean())
    if blocks is None:
        k = num.size
        idx = rng.integers(0, k, size=(n_boot, k))
        boots = num[idx].mean(axis=1) / den[idx].mean(axis=1)
    else:
        ids, inv = np.unique(np.asarray(blocks), return_inverse=True)
        sn, sd = np.bincount(inv, weights=num), np.bincount(inv, weights=den)
        idx = rng.integers(0, ids.size, size=(n_boot, ids.size))
        boots = sn[idx].sum(axis=1) / sd[idx].sum(axis=1)
    return point, float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a))


def run_family(family: Family, data: Path, policies: dict[str, Callable], starts: int = 100,
               ratios: Sequence[float] = RATIOS, notices: Sequence[float] = NOTICES,
               progress: Callable[[str], None] | None = None) -> list[Cell]:
    """Every (ratio, notice) cell of ``family`` for ``policies`` (name -> factory)."""
    markets = family.load(data, starts)
    per_market = max(1, math.ceil(starts / len(markets)))
    cells = []
    for ratio in ratios:
        base = family.spec(ratio, 0.0)
        plan = [(m, family.starts(m, base, per_market)) for m, _ in markets]
        blocks = start_blocks([ss for _, ss in plan], [m.gap_hours for m, _ in plan],
                              base.deadline_hours)
        t0 = time.perf_counter()
        bounds = [omniscient_bound(m, base, s) for m, ss in plan for s in ss]
        omni = np.array([b.cost for b in bounds])
        coarse = sum(not b.exact for b in bounds)
        if progress:
            grid = "all exact" if not coarse else f"{coarse} coarsened, not exact"
            progress(f"{family.name} D/W={ratio:g}: omniscient x{omni.size} ({grid}; "
                     f"{time.perf_counter() - t0:.1f} s)")
        for notice in notices:
            spec = family.spec(ratio, notice)
            cell = Cell(family.name, ratio, notice, omni, coarsened=coarse, blocks=blocks)
            t1 = time.perf_counter()
            for name, factory in policies.items():
                runs: list[RunResult] = [simulate(factory(), m, spec, s) for m, ss in plan for s in ss]
                cell.costs[name] = np.array([r.cost for r in runs])
                cell.met[name] = np.array([r.deadline_met for r in runs])
                cell.migrations[name] = float(np.mean([r.migrations for r in runs]))
                cell.sim_hours += sum(r.completion_hours for r in runs if math.isfinite(r.completion_hours))
            cells.append(cell)
            if progress:
                ours = cell.costs.get(OURS)
                msg = f" spotfleet {ours.mean() / omni.mean():.3f}x" if ours is not None else ""
                progress(f"  notice {notice:g} s: {len(policies)} policies x {omni.size} starts"
                         f"{msg} ({time.perf_counter() - t1:.1f} s)")
    return cells


def half_cells(cells: Sequence[Cell], second: bool) -> list[Cell]:
    """The cells restricted to the first (or second) half of their starts. Starts are in
    time order per market, so for the one-market real families (v100, h100) this is the
    first / second half of the trace window (the tuning discipline of
    docs/fleet-policies.md tunes on first halves only)."""
    out = []
    for c in cells:
        k = c.omniscient.size
        sl = slice(k // 2, k) if second else slice(0, k // 2)
        h = Cell(c.family + (" 2nd half" if second else " 1st half"), c.ratio, c.notice,
                 c.omniscient[sl])
        h.costs = {n: v[sl] for n, v in c.costs.items()}
        h.met = {n: v[sl] for n, v in c.met.items()}
        h.migrations = dict(c.migrations)
        h.coarsened = c.coarsened
        h.blocks = None if c.blocks is None else c.blocks[sl]
        out.append(h)
    return out


def is_candidate(name: str) -> bool:
    """Whether column ``name`` is a ``--candidate`` spotfleet variant."""
    return name.startswith(CANDIDATE_PREFIX)


def candidate_factories(specs: Sequence[str]) -> dict[str, Callable]:
    """``NAME:field=value[,field=value...]`` -> {``candidate:NAME``: factory of a
    ``SpotfleetPolicy`` with those ``SpotfleetParams`` (the rest at their defaults)}.
    Values are converted to the field's type (bool: 1/true/yes; float; else str)."""
    from fleet.policies.spotfleet import SpotfleetParams, SpotfleetPolicy

    out: dict[str, Callable] = {}
    for text in specs:
        name, sep, rest = text.partition(":")
        if not sep or not name or not rest:
            raise ValueError(f"candidate {text!r}: expected NAME:field=value[,field=value...]")
        try:
            params = SpotfleetParams.from_assignments(rest.split(","))
        except ValueError as e:
            raise ValueError(f"candidate {text!r}: {e}") from None
        col = CANDIDATE_PREFIX + name
        if col in out:
            raise ValueError(f"candidate {name!r} given twice")
        out[col] = lambda params=params: SpotfleetPolicy(params)
    return out


def select_policies(factories: dict[str, Callable], names: str,
                    candidates: dict[str, Callable]) -> dict[str, Callable]:
    """The sweep's policies: ``factories`` limited to the comma-separated ``names`` (all when
    empty), plus the ``candidates`` columns. A ``ValueError`` names what cannot run: an unknown
    policy (with the known ones), or a candidate without ``spotfleet`` to compare it with."""
    want = [n for n in names.split(",") if n]
    unknown = [n for n in want if n not in factories]
    if unknown:
        raise ValueError(f"--policies: unknown {', '.join(unknown)}; known: {', '.join(factories)}")
    out = {k: v for k, v in factories.items() if not want or k in want}
    if candidates and OURS not in out:
        raise ValueError(f"--candidate compares with {OURS}: add it to --policies")
    out.update(candidates)
    return out


def has_baseline(policies: Sequence[str]) -> bool:
    """Whether a goal table (spotfleet against the best baseline) can be made from these
    policy columns: at least one that is not spotfleet, a candidate or on-demand."""
    return any(n not in (OURS, "on_demand") and not is_candidate(n) for n in policies)


def best_baseline(cell: Cell) -> str:
    """The cheapest baseline (not the project's policy, not a ``--candidate`` variant, not
    on-demand) of the cell."""
    cands = [n for n in cell.costs if n not in (OURS, "on_demand") and not is_candidate(n)]
    return min(cands, key=lambda n: cell.costs[n].mean())


MIN_BLOCKS = 5
"""Fewest blocks for which a block interval is printed: with ``k`` blocks the bootstrap has
``C(2k - 1, k)`` distinct resamples (10 at k = 3, 1 at k = 1), too few to be an interval."""


def block_ci(blocks: np.ndarray | None, num: np.ndarray, den: np.ndarray) -> str:
    """``[lo, hi] (k)``: the cluster-bootstrap interval of ``mean(num) / mean(den)`` over
    ``blocks`` (:func:`start_blocks`) and the number of blocks; ``k blocks: too few`` under
    :data:`MIN_BLOCKS`; ``-`` without blocks."""
    if blocks is None:
        return "-"
    k = np.unique(blocks).size
    if k < MIN_BLOCKS:
        return f"{k} block{'s' if k > 1 else ''}: too few"
    _, lo, hi = bootstrap_ratio(num, den, blocks=blocks)
    return f"[{lo:.3f}, {hi:.3f}] ({k})"


def candidate_table(cells: Sequence[Cell], name: str) -> str:
    """Markdown: a ``--candidate`` column against the project's policy, start by start
    (paired bootstrap interval of candidate / spotfleet), per cell; and the interval with
    overlapping runs resampled together (:func:`start_blocks`)."""
    lines = ["| family | D/W | notice s | spotfleet x bound | candidate x bound | candidate / spotfleet [95 % CI] "
             "| same, blocks of overlapping runs [95 % CI] (blocks) |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        r, lo, hi = bootstrap_ratio(c.costs[name], c.costs[OURS])
        om = c.omniscient.mean()
        lines.append(f"| {c.family} | {c.ratio:g} | {c.notice:g} | {c.costs[OURS].mean() / om:.3f} | "
                     f"{c.costs[name].mean() / om:.3f} | {r:.4f} [{lo:.4f}, {hi:.4f}]"
                     f" | {block_ci(c.blocks, c.costs[name], c.costs[OURS])} |")
    return "\n".join(lines)


def family_table(cells: Sequence[Cell], notice: float) -> str:
    """Markdown: one row per policy, one column per D/W: mean cost / omniscient [95 % CI]
    and deadline-met share."""
    cs = [c for c in cells if c.notice == notice]
    names = list(cs[0].costs)
    head = "| policy | " + " | ".join(f"D/W={c.ratio:g}" for c in cs) + " |"
    lines = [head, "|---|" + "---|" * len(cs)]
    for n in names:
        row = []
        for c in cs:
            r, lo, hi = bootstrap_ratio(c.costs[n], c.omniscient)
            row.append(f"{r:.3f} [{lo:.3f}, {hi:.3f}] {c.met[n].mean():.0%}")
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    lines.append("| omniscient $ (mean) | " + " | ".join(f"{c.omniscient.mean():.2f}" for c in cs) + " |")
    return "\n".join(lines)


def goal_table(cells: Sequence[Cell], policy: str = OURS) -> str:
    """Markdown: ``policy`` (spotfleet, or a ``candidate:NAME`` column, labelled so) /
    best baseline of each cell, paired bootstrap interval over starts, and over blocks of
    overlapping runs (:func:`start_blocks`; the honest interval where starts share market
    hours)."""
    label = policy if not is_candidate(policy) else f"{policy} (not a baseline)"
    lines = [f"| family | D/W | notice s | best baseline | {label} / best [95 % CI] | "
             f"same, blocks of overlapping runs [95 % CI] (blocks) | "
             f"{label} / omniscient | deadlines met |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if policy not in c.costs:
            continue
        b = best_baseline(c)
        r, lo, hi = bootstrap_ratio(c.costs[policy], c.costs[b])
        o = c.costs[policy].mean() / c.omniscient.mean()
        lines.append(f"| {c.family} | {c.ratio:g} | {c.notice:g} | {b} | {r:.3f} [{lo:.3f}, {hi:.3f}]"
                     f" | {block_ci(c.blocks, c.costs[policy], c.costs[b])} "
                     f"| {o:.3f} | {c.met[policy].mean():.0%} |")
    return "\n".join(lines)
