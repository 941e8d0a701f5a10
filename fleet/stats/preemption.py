"""Preemption statistics per (cloud, region, zone, instance type) from traces or sessions.

Everything here is a pure function of its inputs. Units: hours for durations and
rates (preemptions per hour of *held* time, i.e. time the instance was up), seconds
for restart latency R, fractions in [0, 1] for availability.

MTTP confidence interval: preemptions are modelled as a Poisson process over the held
time ``T`` (exponential times to preemption). With ``r`` preemptions observed in a
time-truncated observation (the last up-run is censored), the two-sided ``level``
interval for the rate is the classic chi-square one::

    lambda_low  = chi2.ppf(a/2,     2r)     / (2T)
    lambda_high = chi2.ppf(1 - a/2, 2r + 2) / (2T)      a = 1 - level

and the MTTP interval is its reciprocal (``1/lambda_high``, ``1/lambda_low``).
With ``r = 0`` the lower rate bound is 0 and the MTTP upper bound is infinite.

Hour-of-day: traces carry no wall-clock start, so tick 0 is taken as
``start_hour_utc`` (default 0.0 = midnight UTC of the trace's start date).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from fleet.contract import mean_restart_seconds
from fleet.market.traces import Trace, cut_to_common_length
from fleet.providers.base import NodeSession

DEFAULT_CI_LEVEL = 0.90
CI_METHOD = "exponential, time-truncated chi-square (2r, 2r+2 dof)"

#: Instance type of the public trace accelerators (1 accelerator per node).
TRACE_INSTANCE_TYPES = {"v100": "p3.2xlarge", "k80": "p2.xlarge", "t4": "g4dn.xlarge",
                        "a10g": "g5.xlarge", "l4": "g6.xlarge"}


def instance_type_for(accelerator: str) -> str:
    """Instance type a 1-node trace of ``accelerator`` was recorded on (or the name itself)."""
    return TRACE_INSTANCE_TYPES.get(accelerator.lower(), accelerator)


def trace_instance_type(trace: Trace) -> str:
    """The instance type a trace's statistics and prices are for: the machine type its
    file names when it carries prices (SkyNomad ``metadata.price_info.machine_type``, e.g.
    a3-highgpu-8g), else the type of its accelerator (``instance_type_for``). The planner's
    zone statistics and the price book built from the files (``PriceBook.with_traces``)
    both use it, so the two meet on one name."""
    if trace.on_demand_price is not None and trace.instance_type:
        return trace.instance_type
    return instance_type_for(trace.accelerator)


def priced_instance_type(traces: Iterable[Trace]) -> str | None:
    """The instance type a set of trace files prices (``trace_instance_type`` of the first
    file carrying prices, SkyNomad ``price_info`` or per-tick ``prices``), None when none
    does. The local fleet bills it (``LocalFleetConfig.with_file_prices``) and the pipeline
    config check holds stages to it (``pipelines.validation.local_market``): one rule."""
    for t in traces:
        if t.spot_prices is not None or t.on_demand_price is not None:
            return trace_instance_type(t)
    return None


@dataclass(frozen=True)
class ZoneStats:
    """Preemption statistics of one (cloud, region, zone, instance type).

    Durations in hours, ``restart_latency_s`` in seconds, rates per held hour.
    ``hour_rate[h]`` is the preemption rate while held during UTC hour ``h``;
    ``hour_availability[h]`` the fraction of time capacity was available in that hour.
    """

    cloud: str
    region: str
    zone: str
    instance_type: str
    accelerator: str
    count: int
    source: str  # "trace" or "sessions"
    observed_hours: float
    held_hours: float
    availability: float
    preemptions: int
    rate_per_hour: float
    rate_ci: tuple[float, float]
    mttp_hours: float
    mttp_ci: tuple[float, float]
    ci_level: float
    ci_method: str
    regain_mean_hours: float | None
    regain_p50_hours: float | None
    regain_p90_hours: float | None
    regain_samples: int
    restart_latency_s: float | None
    hour_rate: tuple[float, ...] = field(default_factory=tuple)
    hour_availability: tuple[float, ...] = field(default_factory=tuple)
    instances_lost: int = 0  # multi-node traces: every drop of the available count
    eviction_rate_eq15: float | None = None  # GFS Eq. 15 at the end of the data, per hour
    #: sessions only: held hours (market hours) and preemptions of the SPOT sessions, the
    #: exposure to the spot market's preemptions (an on-demand session cannot be preempted,
    #: its held hours would dilute the rate); what the forecast's session update uses
    spot_held_hours: float | None = None
    spot_preemptions: int | None = None
    #: sessions only: R (s) per stage, ``(stage, mean launch -> ready)`` pairs, sorted by
    #: stage; stages restore different models, so their R differs (``restart_latency_for``)
    restart_latency_by_stage: tuple[tuple[str, float], ...] = ()
    #: sessions only: preemptions a fault injection caused (``NodeSession.injected``); not in
    #: ``preemptions`` / ``spot_preemptions`` (the market's), their held time is in the hours
    injected_preemptions: int = 0

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.cloud, self.region, self.zone, self.instance_type)

    def restart_latency_for(self, stage: str | None) -> tuple[float | None, str]:
        """R (s) for ``stage`` in this zone and where it came from: ``"stage"`` (the mean
        over that stage's own sessions in the zone), else ``"zone"`` (the mean over all
        the zone's sessions, every stage: ``restart_latency_s``), else ``(None,
        "default")`` (nothing measured here: the planner's default R applies).

        Order: R is launch -> ready, i.e. allocation + boot in this zone + the stage's
        restore. The stage's own sessions in the zone measure all three; the zone's
        all-stage mean still measures the zone's allocation and boot, which is what makes
        one zone's R differ from another's and what the planner ranks zones by; the
        default measures neither."""
        own = dict(self.restart_latency_by_stage).get(stage) if stage is not None else None
        if own is not None:
            return own, "stage"
        if self.restart_latency_s is not None:
            return self.restart_latency_s, "zone"
        return None, "default"

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
            elif isinstance(v, tuple):
                d[k] = [None if isinstance(x, float) and not math.isfinite(x) else x for x in v]
        return d


# --------------------------------------------------------------------------- helpers


def rate_confidence_interval(events: int, exposure_hours: float,
                             level: float = DEFAULT_CI_LEVEL) -> tuple[float, float]:
    """Chi-square CI (per hour) for a Poisson rate from ``events`` in ``exposure_hours``.

    The chi-square quantile is ``chi2.ppf(p, 2k) = 2 * gammaincinv(k, p)``; for an integer
    ``k`` (an event count) :func:`gamma_inv_int` computes it exactly in pure Python (the
    statistics asset used to import ``scipy.special`` for it: ~0.5 s of the main job).
    """
    if exposure_hours <= 0:
        return (0.0, math.inf)
    a = 1.0 - level
    k = int(events)
    low = 0.0 if k == 0 else 2.0 * gamma_inv_int(k, a / 2) / (2 * exposure_hours)
    high = 2.0 * gamma_inv_int(k + 1, 1 - a / 2) / (2 * exposure_hours)
    return (low, high)


def _gamma_upper_int(k: int, x: float) -> float:
    """Regularized upper incomplete gamma Q(k, x) for an integer k >= 1: P(Poisson(x) < k)."""
    if x <= 0.0:
        return 1.0
    log_x = math.log(x)
    # terms exp(i ln x - x - ln i!), summed from the largest so nothing underflows early
    logs = [i * log_x - x - math.lgamma(i + 1) for i in range(k)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(v - top) for v in logs))


def gamma_inv_int(k: int, p: float) -> float:
    """``x`` with P(k, x) = p (regularized lower incomplete gamma), integer ``k`` >= 1.

    Equals ``scipy.special.gammaincinv(k, p)`` (to ~1e-12 relative); Newton steps on
    P(k, x) = 1 - Q(k, x) with the density x^(k-1) e^-x / (k-1)!, kept inside a bracket.
    """
    if k < 1:
        raise ValueError(f"k must be a positive integer (got {k})")
    if not 0.0 < p < 1.0:
        return 0.0 if p <= 0.0 else math.inf
    lo, hi = 0.0, max(1.0, 2.0 * k)
    while 1.0 - _gamma_upper_int(k, hi) < p:
        lo, hi = hi, 2.0 * hi
    x = 0.5 * (lo + hi)
    for _ in range(200):
        f = (1.0 - _gamma_upper_int(k, x)) - p
        if f < 0:
            lo = x
        else:
            hi = x
        dens = math.exp((k - 1) * math.log(x) - x - math.lgamma(k)) if x > 0 else 0.0
        step = f / dens if dens > 0 else math.inf
        nxt = x - step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - x) <= 1e-14 * max(1.0, x):
            return nxt
        x = nxt
    return x


def runs(up: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a boolean series into runs: (start index, length, value) arrays."""
    up = np.asarray(up, dtype=bool)
    if up.size == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e, np.zeros(0, dtype=bool)
    change = np.flatnonzero(up[1:] != up[:-1]) + 1
    starts = np.r_[0, change]
    lengths = np.diff(np.r_[starts, up.size])
    return starts, lengths, up[starts]


def preemption_ticks(trace: Trace) -> np.ndarray:
    """Tick indices ``i`` where the trace goes from up (tick i-1) to down (tick i)."""
    u = trace.up()
    return np.flatnonzero(u[:-1] & ~u[1:]) + 1


def _regain_durations_hours(up: np.ndarray, gap_s: float) -> np.ndarray:
    """Durations of complete down-runs (preceded by up and followed by up)."""
    starts, lengths, values = runs(up)
    keep = ~values
    if keep.size:
        keep[0] = False  # left-censored (we do not know when it went down)
        keep[-1] = False  # right-censored (still down at the end)
    return lengths[keep] * gap_s / 3600.0


def _quantile(x: np.ndarray, q: float) -> float | None:
    return float(np.quantile(x, q)) if x.size else None


def _hour_profiles(up: np.ndarray, gap_s: float, start_hour_utc: float
                   ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    n = up.size
    hours = ((start_hour_utc + np.arange(n) * gap_s / 3600.0) % 24).astype(int)
    pre = np.zeros(n, dtype=bool)
    pre[1:] = up[:-1] & ~up[1:]
    held = np.bincount(hours, weights=up.astype(float), minlength=24) * gap_s / 3600.0
    # a preemption in tick i ends the held time of tick i-1: attribute it to that hour
    pre_hours = hours[np.flatnonzero(pre) - 1] if pre.any() else np.zeros(0, dtype=int)
    npre = np.bincount(pre_hours, minlength=24).astype(float)
    ticks = np.bincount(hours, minlength=24).astype(float)
    rate = tuple(float(npre[h] / held[h]) if held[h] > 0 else 0.0 for h in range(24))
    avail = tuple(float(np.sum(up[hours == h]) / ticks[h]) if ticks[h] else 0.0
                  for h in range(24))
    return rate, avail


# --------------------------------------------------------------------------- from traces


def trace_stats(trace: Trace, level: float = DEFAULT_CI_LEVEL,
                start_hour_utc: float = 0.0) -> ZoneStats:
    """Statistics of one trace (one zone, one accelerator, one node count)."""
    up = trace.up()
    gap_h = trace.gap_seconds / 3600.0
    held = float(up.sum()) * gap_h
    npre = int(preemption_ticks(trace).size)
    rate = npre / held if held > 0 else math.inf
    rlo, rhi = rate_confidence_interval(npre, held, level)
    regain = _regain_durations_hours(up, trace.gap_seconds)
    hour_rate, hour_avail = _hour_profiles(up, trace.gap_seconds, start_hour_utc)
    return ZoneStats(
        cloud=trace.cloud, region=trace.region, zone=trace.zone,
        instance_type=trace_instance_type(trace), accelerator=trace.accelerator,
        count=trace.count, source="trace", observed_hours=trace.duration_hours,
        held_hours=held, availability=float(up.mean()) if up.size else 0.0,
        preemptions=npre, rate_per_hour=rate, rate_ci=(rlo, rhi),
        mttp_hours=held / npre if npre else math.inf,
        mttp_ci=(1.0 / rhi if rhi > 0 else math.inf, 1.0 / rlo if rlo > 0 else math.inf),
        ci_level=level, ci_method=CI_METHOD,
        regain_mean_hours=float(regain.mean()) if regain.size else None,
        regain_p50_hours=_quantile(regain, 0.5), regain_p90_hours=_quantile(regain, 0.9),
        regain_samples=int(regain.size), restart_latency_s=None,
        hour_rate=hour_rate, hour_availability=hour_avail,
        instances_lost=int(np.clip(-np.diff(trace.available.astype(np.int64)), 0, None).sum()),
        eviction_rate_eq15=float(weighted_eviction_rate_series(trace)[-1]),
    )


def zone_stats(traces: Iterable[Trace], level: float = DEFAULT_CI_LEVEL,
               start_hour_utc: float = 0.0) -> list[ZoneStats]:
    """One ``ZoneStats`` per trace, sorted by (cloud, zone, instance type)."""
    out = [trace_stats(t, level, start_hour_utc) for t in traces]
    return sorted(out, key=lambda s: (s.cloud, s.zone, s.instance_type, s.count))


# --------------------------------------------------------------------------- from sessions


def session_stats(sessions: Sequence[NodeSession], level: float = DEFAULT_CI_LEVEL,
                  now: float | None = None) -> list[ZoneStats]:
    """Statistics from recorded node sessions, grouped by (cloud, region, zone, type).

    Held time of a session = ``ended_at - (ready_at or launched_at)`` (``now`` for a
    running session). Restart latency R = mean of ``ready_at - launched_at``, over all
    sessions (``restart_latency_s``) and per stage (``restart_latency_by_stage``).
    ``spot_held_hours`` / ``spot_preemptions``: the same over the spot sessions only.
    Times are market seconds (the local fleet converts its compressed wall clock before
    its sessions leave the provider), so held hours are market hours, the trace's unit.
    Availability = held time / observed span (first launch to last end in that zone);
    it is a lower bound, because nobody asked for capacity when no session was open.
    Time to regain capacity = time from a preemption in a zone to the next launch
    that became ready in the same zone (only observed when the fleet came back there).
    A preemption is the market's only: a session ended by a fault injection
    (``NodeSession.injected``) counts its held time (exposure that saw no market
    preemption) but not its end, and is counted in ``injected_preemptions`` instead.
    """
    groups: dict[tuple[str, str, str, str], list[NodeSession]] = defaultdict(list)
    for s in sessions:
        groups[(s.cloud, s.region, s.zone, s.instance_type)].append(s)
    out: list[ZoneStats] = []
    for (cloud, region, zone, itype), ss in sorted(groups.items()):
        ss = sorted(ss, key=lambda s: s.launched_at)
        held_s = spot_held_s = 0.0
        ends: list[float] = []
        for s in ss:
            start = s.ready_at if s.ready_at is not None else s.launched_at
            end = s.ended_at if s.ended_at is not None else (now if now is not None else start)
            held_s += max(0.0, end - start)
            spot_held_s += max(0.0, end - start) if s.spot else 0.0
            ends.append(end)
        npre = sum(1 for s in ss if _market_preempted(s))
        by_stage: dict[str, list[NodeSession]] = defaultdict(list)
        for s in ss:
            by_stage[s.stage].append(s)
        r_stage = tuple((st, r) for st, g in sorted(by_stage.items())
                        if (r := mean_restart_seconds((s.launched_at, s.ready_at) for s in g)) is not None)
        pre_h = [s.ended_at / 3600.0 for s in ss if _market_preempted(s) and s.ended_at]
        regain: list[float] = []
        for i, s in enumerate(ss):
            if not _market_preempted(s) or s.ended_at is None:
                continue
            nxt = [t.ready_at for t in ss[i + 1:] if t.ready_at is not None
                   and t.launched_at >= s.ended_at]
            if nxt:
                regain.append((min(nxt) - s.ended_at) / 3600.0)
        span_s = max(ends) - ss[0].launched_at if ends else 0.0
        held = held_s / 3600.0
        rlo, rhi = rate_confidence_interval(npre, held, level)
        reg = np.asarray(regain)
        out.append(ZoneStats(
            cloud=cloud, region=region, zone=zone, instance_type=itype, accelerator="",
            count=1, source="sessions", observed_hours=span_s / 3600.0, held_hours=held,
            availability=min(1.0, held_s / span_s) if span_s > 0 else 0.0,
            preemptions=npre, rate_per_hour=npre / held if held > 0 else math.inf,
            rate_ci=(rlo, rhi), mttp_hours=held / npre if npre else math.inf,
            mttp_ci=(1.0 / rhi if rhi > 0 else math.inf, 1.0 / rlo if rlo > 0 else math.inf),
            ci_level=level, ci_method=CI_METHOD,
            regain_mean_hours=float(reg.mean()) if reg.size else None,
            regain_p50_hours=_quantile(reg, 0.5), regain_p90_hours=_quantile(reg, 0.9),
            regain_samples=int(reg.size),
            restart_latency_s=mean_restart_seconds((s.launched_at, s.ready_at) for s in ss),
            instances_lost=npre,
            eviction_rate_eq15=weighted_eviction_rate(pre_h, max(ends) / 3600.0) if ends else None,
            spot_held_hours=spot_held_s / 3600.0,
            spot_preemptions=sum(1 for s in ss if s.spot and _market_preempted(s)),
            restart_latency_by_stage=r_stage,
            injected_preemptions=sum(1 for s in ss if s.end_reason == "preempted" and s.injected),
        ))
    return out


def _market_preempted(s: NodeSession) -> bool:
    """Ended by the market's preemption (not by a fault injection)."""
    return s.end_reason == "preempted" and not s.injected


def merge_session_latency(stats: Sequence[ZoneStats]) -> list[ZoneStats]:
    """One ``ZoneStats`` per key: trace rows win, with ``restart_latency_s`` filled in
    from the session rows of the same (cloud, region, zone, instance type).

    Session rows without a trace row are kept as they are.
    """
    from dataclasses import replace

    by_key: dict[tuple[str, str, str, str], dict[str, ZoneStats]] = defaultdict(dict)
    for st in stats:
        by_key[st.key].setdefault(st.source, st)
    out = []
    for rows in by_key.values():
        tr, se = rows.get("trace"), rows.get("sessions")
        if tr is not None and se is not None and tr.restart_latency_s is None:
            out.append(replace(tr, restart_latency_s=se.restart_latency_s,
                               restart_latency_by_stage=se.restart_latency_by_stage))
        else:
            out.append(tr or se or next(iter(rows.values())))
    return out


# --------------------------------------------------------------------------- correlation


def _label(t: Trace, traces: Sequence[Trace]) -> str:
    same = [u for u in traces if u.zone == t.zone]
    return t.zone if len(same) == 1 else f"{t.zone}/{t.accelerator}x{t.count}"


def zone_correlation(traces: Sequence[Trace]):
    """Pairwise Pearson correlation of unavailability (1 = down) between traces.

    Traces are aligned from tick 0 and cut to the shortest one, with one warning naming
    the files and the ticks cut (``cut_to_common_length``, the loaders' rule); traces
    with different ``gap_seconds`` are resampled (nearest earlier tick) onto the
    coarsest gap.
    Returns a ``pandas.DataFrame`` indexed and labelled by zone. A constant series
    (never down) has no defined correlation: NaN off the diagonal.
    """
    import pandas as pd

    if not traces:
        raise ValueError("zone_correlation needs at least one trace")
    gap = max(t.gap_seconds for t in traces)
    horizon_s = min(t.n_ticks * t.gap_seconds for t in traces)  # the time all cover
    n = max(1, int(horizon_s // gap))
    # the same ticks as before the cut: tick n - 1 of the coarsest gap starts before the
    # shortest trace's end, so no index reaches past a cut trace's last tick
    traces = cut_to_common_length(traces, "zone correlation", stacklevel=2)
    cols = {}
    for t in traces:
        idx = np.minimum((np.arange(n) * gap // t.gap_seconds).astype(int), t.n_ticks - 1)
        cols[_label(t, traces)] = (~t.up()[idx]).astype(float)
    df = pd.DataFrame(cols)
    with np.errstate(invalid="ignore", divide="ignore"):
        return df.corr()


# --------------------------------------------------------------------------- GFS Eq. 15


def weighted_eviction_rate(event_times_hours: Sequence[float] | np.ndarray, now_hours: float,
                           gamma: float = 0.8, short_hours: float = 1.0,
                           long_hours: float = 24.0) -> float:
    """GFS (ASPLOS'26) Eq. 15: ``e = gamma * e_short + (1 - gamma) * e_long / T_long``.

    ``e_short`` and ``e_long`` count eviction events in the last ``short_hours`` and
    ``long_hours`` before ``now_hours`` (window ``(now - T, now]``). The paper uses
    ``T_short = 1 h`` so ``e_short`` is already a per-hour rate; to keep units right for
    other short windows we divide it by ``short_hours`` (identical at 1 h). Defaults
    are the paper's: gamma = 0.8, 1 h and 24 h. Result in evictions per hour.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if short_hours <= 0 or long_hours <= 0:
        raise ValueError("short_hours and long_hours must be positive")
    t = np.asarray(event_times_hours, dtype=float)
    e_short = np.count_nonzero((t > now_hours - short_hours) & (t <= now_hours))
    e_long = np.count_nonzero((t > now_hours - long_hours) & (t <= now_hours))
    return float(gamma * e_short / short_hours + (1.0 - gamma) * e_long / long_hours)


def weighted_eviction_rate_series(trace: Trace, gamma: float = 0.8, short_hours: float = 1.0,
                                  long_hours: float = 24.0) -> np.ndarray:
    """Eq. 15 evaluated at the end of every tick of a trace (array of evictions/hour)."""
    gap_h = trace.gap_seconds / 3600.0
    pre = np.zeros(trace.n_ticks, dtype=float)
    pre[preemption_ticks(trace)] = 1.0
    c = np.r_[0.0, np.cumsum(pre)]

    def window(hours: float) -> np.ndarray:
        k = max(1, int(round(hours / gap_h)))
        i = np.arange(1, trace.n_ticks + 1)
        return c[i] - c[np.maximum(i - k, 0)]

    return gamma * window(short_hours) / short_hours + (1 - gamma) * window(long_hours) / long_hours


def stats_rows(stats: Sequence[ZoneStats]) -> list[dict[str, object]]:
    """The analyst's view of the records (the ``preemption_stats`` asset's ``table``): one
    row per record with rate, MTTP and its confidence interval, availability, regain time
    and R. Nothing is shown as NaN or inf: a value that does not exist says why (MTTP with
    no preemption: ``none in <held> h``, its CI ``>= <low>``; R of a trace: ``not in
    traces``; regain never observed: ``not observed``). Until 2026-11-28 the table showed
    no CI and no regain time, MTTP ``inf`` and R ``nan`` (``tests/fleet_market/
    test_fm_stats_view.py``)."""
    def num(x: float | None) -> str | None:
        return f"{x:.4g}" if x is not None and math.isfinite(x) else None

    rows = []
    for s in stats:
        lo, hi = s.mttp_ci
        ci = (f"{num(lo)}-{num(hi)}" if math.isfinite(hi) else f">= {num(lo)}") if s.held_hours > 0 \
            else "no held time"
        rows.append({
            "source": s.source, "zone": s.zone, "instance_type": s.instance_type,
            "observed_hours": num(s.observed_hours), "held_hours": num(s.held_hours),
            "availability": num(s.availability), "preemptions": s.preemptions,
            "rate_per_hour": num(s.rate_per_hour) or "no held time",
            "mttp_hours": num(s.mttp_hours) or f"none in {num(s.held_hours)} h",
            f"mttp_ci{round(100 * s.ci_level):d}_hours": ci,
            "regain_mean_hours": num(s.regain_mean_hours) or "not observed",
            "restart_latency_s": num(s.restart_latency_s) or ("not in traces" if s.source == "trace"
                                                              else "not measured"),
            "injected_preemptions": s.injected_preemptions,
        })
    return rows


def format_stats_table(stats: Sequence[ZoneStats]) -> str:
    """A fixed-width text table of the main columns (for the CLI and docs)."""
    head = (f"{'zone':<14}{'type':<12}{'avail':>7}{'preempt':>8}{'rate/h':>8}"
            f"{'MTTP h':>8}{'MTTP CI h':>16}{'regain h':>9}{'p50':>6}{'p90':>7}{'R s':>7}")
    lines = [head, "-" * len(head)]
    for s in stats:
        ci = f"{s.mttp_ci[0]:.2f}-{s.mttp_ci[1]:.2f}" if math.isfinite(s.mttp_ci[1]) else \
            f"{s.mttp_ci[0]:.2f}-inf"

        def f(x: float | None, w: int, p: int = 2) -> str:
            return f"{x:>{w}.{p}f}" if x is not None and math.isfinite(x) else f"{'-':>{w}}"

        lines.append(f"{s.zone:<14}{s.instance_type:<12}{s.availability:>7.3f}{s.preemptions:>8d}"
                     f"{f(s.rate_per_hour, 8, 3)}{f(s.mttp_hours, 8)}{ci:>16}"
                     f"{f(s.regain_mean_hours, 9)}{f(s.regain_p50_hours, 6)}"
                     f"{f(s.regain_p90_hours, 7)}{f(s.restart_latency_s, 7, 0)}")
    return "\n".join(lines)
