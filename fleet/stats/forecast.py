"""Probabilistic forecast of spot availability and preemptions per zone.

Model: an *alternating renewal* (semi-Markov up/down) process per zone, fitted
non-parametrically. Each zone alternates up-runs (capacity held) and down-runs (no
capacity). Run lengths are heavy-tailed in the real traces (coefficient of variation
1.5-2.6 for up-runs, so the hazard *decreases* with age), which a memoryless Markov
chain cannot express. The forecast therefore conditions on the current state *and its
age*:

1. the remaining time of the current run is drawn from the empirical run-length
   distribution of that state conditioned on exceeding the current age
   (``D - a | D > a``; when fewer than ``MIN_TAIL_RUNS`` observed runs are that long, an
   exponential tail with the mean of the longest fifth of the runs, at least the age);
2. later runs are drawn from the empirical up / down run-length distributions;
3. ``n_samples`` Monte-Carlo paths over the next ``H`` hours give the predictive
   distribution of the available fraction, the number of preemptions, and P(up) at
   every hour, from which mean and p10/p50/p90 are read.

The default ``semi_markov_hod`` measures up-runs in *operational time*: held time
weighted by the zone's hour-of-day hazard profile (``hour_profile``: 3-hour pooled,
shrunk toward the zone's mean rate), so a forecast made before the zone's busy hours
expects more preemptions (time-rescaling of a modulated renewal process).

Zones with fewer than ``min_runs`` observed runs of a state borrow the runs of all
zones (pooling, the empirical-Bayes step); ``semi_markov`` (no profile) and ``markov``
(exponential run lengths with the same means) are kept as ablations.

Recorded node sessions (``evidence``: the spot preemptions and held market hours this
fleet's own sessions saw in a zone, ``SessionEvidence``) update the zone's up-run law
with a conjugate Gamma-Poisson step: the trace-fitted law implies a preemption rate per
held hour ``lambda0 = 1 / mean(up-run)``; it is the mean of a Gamma prior worth
``prior_held_hours`` held hours (``SESSION_PRIOR_HELD_HOURS``, 24 h), so with ``n``
preemptions in ``T`` held hours of sessions the posterior mean is
``lambda1 = (lambda0 * prior_held_hours + n) / (prior_held_hours + T)`` and every up-run of
the law (clock or operational hours) is divided by ``lambda1 / lambda0`` (a time-rescaling:
the hour-of-day profile and the shape of the run-length law are kept, the rate becomes
``lambda1``). Zones without sessions are not touched, and their paths are drawn exactly as
without any evidence (``forecast_zones``).

Evaluation (``evaluate_forecasts``): fit on the first ``train_fraction`` of the time all
traces cover, forecast from many origins in the held-back rest, score with CRPS (available fraction
over the horizon), Brier (up at the end of the horizon) and pinball loss (p10/p50/p90),
against persistence, the historical mean and climatology.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from fleet.market.traces import Trace, cut_to_common_length
from fleet.stats.preemption import instance_type_for, runs, trace_instance_type

QUANTILES = (0.1, 0.5, 0.9)
#: strength of the trace-fitted rate in the session update, in held (market) hours: the
#: trace's law counts as one day of held time. The trace is the market's history (for real
#: traces another period than the fleet's runs), the sessions are the fleet's own recent
#: evidence, so a day of held sessions weighs as much as the whole trace rather than a
#: share of its weeks; one day also spans the hour-of-day profile's whole cycle.
SESSION_PRIOR_HELD_HOURS = 24.0
#: fewer runs than this longer than the current age: exponential tail instead of the
#: empirical residual (3, 10, 25, 50 compared on a validation split inside the training
#: part of the real traces; 25 best on the 9-zone set)
MIN_TAIL_RUNS = 25


@dataclass(frozen=True)
class ZoneForecast:
    """Forecast for one zone over ``horizon_hours`` from ``now_tick`` (hours, counts)."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    accelerator: str
    now_tick: int
    horizon_hours: float
    state_up: bool
    age_hours: float
    availability_mean: float
    availability_p10: float
    availability_p50: float
    availability_p90: float
    preemptions_mean: float
    preemptions_p10: float
    preemptions_p50: float
    preemptions_p90: float
    rate_per_held_hour: float
    p_up_at_end: float
    p_up_hourly: tuple[float, ...]
    model: str = "semi_markov"
    #: the session update (``SessionEvidence``), all None / 0 for a zone without sessions:
    #: spot preemptions and held market hours of the recorded sessions, the up-run law's
    #: rate per held hour before (``1 / mean up-run``, the prior mean) and after the
    #: Gamma-Poisson update, the prior's strength in held hours and the forecast's mean
    #: preemptions over the horizon without the update
    session_preemptions: int = 0
    session_held_hours: float = 0.0
    up_rate_prior: float | None = None
    up_rate_posterior: float | None = None
    prior_held_hours: float | None = None
    preemptions_mean_without_sessions: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["p_up_hourly"] = list(self.p_up_hourly)
        return d


@dataclass(frozen=True)
class RunModel:
    """Empirical run lengths (clock hours) of one zone.

    ``kind``: ``"semi_markov"`` (empirical runs), ``"markov"`` (exponential runs with the
    same means) or ``"semi_markov_hod"``: up-runs measured in *operational* hours
    (``up_op``: clock time weighted by the zone's hour-of-day hazard ``profile``, 24
    values by UTC hour with held-time-weighted mean 1), so the preemption hazard follows
    the time of day; down-runs stay in clock hours.
    """

    up: np.ndarray
    down: np.ndarray
    kind: str = "semi_markov"
    profile: np.ndarray | None = None
    up_op: np.ndarray | None = None

    @property
    def availability(self) -> float:
        mu, md = float(np.mean(self.up)), float(np.mean(self.down))
        return mu / (mu + md)

    @property
    def up_rate(self) -> float:
        """Preemptions per held hour the up-run law implies: 1 / the mean up-run (in
        operational hours for ``semi_markov_hod``, whose profile has mean 1 per held hour)."""
        sample = self.up_op if self.kind == "semi_markov_hod" and self.up_op is not None else self.up
        return 1.0 / float(np.mean(sample))

    def with_up_rate(self, rate: float) -> RunModel:
        """The same model with every up-run divided by ``rate / up_rate``: a time-rescaling
        that keeps the run-length law's shape (and the hour-of-day profile) and makes the
        implied rate per held hour ``rate``."""
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive number of preemptions per held hour, got {rate}")
        k = rate / self.up_rate
        return RunModel(up=self.up / k, down=self.down, kind=self.kind, profile=self.profile,
                        up_op=None if self.up_op is None else self.up_op / k)


@dataclass(frozen=True)
class SessionEvidence:
    """What the fleet's recorded spot sessions saw in one zone: ``preemptions`` ended by
    the market in ``held_hours`` of held time (market hours, the traces' clock)."""

    preemptions: int
    held_hours: float


def posterior_up_rate(prior_rate: float, evidence: SessionEvidence,
                      prior_held_hours: float = SESSION_PRIOR_HELD_HOURS) -> float:
    """Gamma-Poisson posterior mean of the preemption rate per held hour: the prior
    Gamma(shape ``prior_rate * prior_held_hours``, rate ``prior_held_hours``) updated by
    ``evidence.preemptions`` Poisson events in ``evidence.held_hours`` of exposure."""
    if not prior_held_hours > 0:
        raise ValueError(f"prior_held_hours must be > 0 hours, got {prior_held_hours}")
    if evidence.held_hours < 0 or evidence.preemptions < 0:
        raise ValueError(f"session evidence must be non-negative, got {evidence}")
    return (prior_rate * prior_held_hours + evidence.preemptions) / (prior_held_hours + evidence.held_hours)


def _run_lengths(up: np.ndarray, gap_h: float) -> tuple[np.ndarray, np.ndarray]:
    _, lengths, values = runs(up)
    lengths = lengths * gap_h
    # drop the first run (left-censored) and keep the last (lower bound, still informative)
    if lengths.size > 2:
        lengths, values = lengths[1:], values[1:]
    return lengths[values], lengths[~values]


def hour_profile(up: np.ndarray, gap_h: float, start_hour_utc: float = 0.0,
                 shrink_hours: float = 1.0) -> np.ndarray:
    """Preemption hazard multiplier by UTC hour (24 values, held-time-weighted mean 1).

    Counts and held hours are pooled over a 3-hour circular window and shrunk toward the
    zone's overall rate with a Gamma prior worth ``shrink_hours`` held hours
    (empirical Bayes: ``(n_h + s * rate) / (held_h + s)``).
    """
    up = np.asarray(up, bool)
    n = up.size
    hrs = ((start_hour_utc + np.arange(n) * gap_h) % 24).astype(int)
    held = np.bincount(hrs, weights=up.astype(float), minlength=24) * gap_h
    pre = np.zeros(n, dtype=bool)
    pre[1:] = up[:-1] & ~up[1:]
    idx = np.flatnonzero(pre) - 1
    npre = np.bincount(hrs[idx], minlength=24).astype(float) if idx.size else np.zeros(24)
    if held.sum() <= 0 or npre.sum() == 0:
        return np.ones(24)
    rate = npre.sum() / held.sum()
    k = sum(np.roll(npre, d) for d in (-1, 0, 1))
    hk = sum(np.roll(held, d) for d in (-1, 0, 1))
    r = (k + shrink_hours * rate) / (hk + shrink_hours)
    return r / (np.sum(r * held) / held.sum())


def _operational(up: np.ndarray, gap_h: float, profile: np.ndarray,
                 start_hour_utc: float) -> np.ndarray:
    """Cumulative operational hours at each tick boundary (length n + 1)."""
    hrs = ((start_hour_utc + np.arange(up.size) * gap_h) % 24).astype(int)
    return np.r_[0.0, np.cumsum(profile[hrs] * gap_h)]


def fit_models(histories: Sequence[np.ndarray], gap_hours: Sequence[float], min_runs: int = 8,
               kind: str = "semi_markov", start_hours_utc: Sequence[float] | None = None
               ) -> list[RunModel]:
    """Fit one ``RunModel`` per zone from boolean up-histories; pool sparse zones.

    ``start_hours_utc``: UTC hour of tick 0 of each history (default 0), used by
    ``kind="semi_markov_hod"`` only.
    """
    if kind not in ("semi_markov", "markov", "semi_markov_hod"):
        raise ValueError(f"kind must be semi_markov, markov or semi_markov_hod, got {kind!r}")
    hists = [np.asarray(h, bool) for h in histories]
    starts = list(start_hours_utc) if start_hours_utc is not None else [0.0] * len(hists)
    per = [_run_lengths(h, g) for h, g in zip(hists, gap_hours, strict=True)]
    profiles: list[np.ndarray | None] = [None] * len(hists)
    per_op: list[np.ndarray] = [np.zeros(0)] * len(hists)
    if kind == "semi_markov_hod":
        for i, (h, g) in enumerate(zip(hists, gap_hours, strict=True)):
            profiles[i] = hour_profile(h, g, starts[i])
            st, ln, val = runs(h)
            c = _operational(h, g, profiles[i], starts[i])
            op = c[st + ln] - c[st]
            if op.size > 2:
                op, val = op[1:], val[1:]
            per_op[i] = op[val]
    pool_up = np.concatenate([p[0] for p in per]) if per else np.zeros(0)
    pool_dn = np.concatenate([p[1] for p in per]) if per else np.zeros(0)
    pool_op = np.concatenate(per_op) if per_op else np.zeros(0)
    if pool_up.size == 0:
        pool_up = np.array([24.0])
    if pool_dn.size == 0:
        pool_dn = np.array([0.5])
    if pool_op.size == 0:
        pool_op = pool_up
    out = []
    for i, (u, d) in enumerate(per):
        uo = per_op[i]
        if u.size < min_runs:
            u = np.concatenate([u, pool_up])
            uo = np.concatenate([uo, pool_op])
        if d.size < min_runs:
            d = np.concatenate([d, pool_dn])
        out.append(RunModel(up=u, down=d, kind=kind, profile=profiles[i],
                            up_op=uo if kind == "semi_markov_hod" else None))
    return out


def operational_age(up: np.ndarray, gap_h: float, profile: np.ndarray | None,
                    start_hour_utc: float = 0.0) -> float:
    """Age of the current run in operational hours (clock hours when no profile)."""
    up = np.asarray(up, bool)
    s, age = current_state(up, gap_h)
    if profile is None or not s:
        return age
    k = int(round(age / gap_h))
    c = _operational(up[-k:] if k else up[:0], gap_h, profile,
                     start_hour_utc + (up.size - k) * gap_h)
    return float(c[-1])


def current_state(up: np.ndarray, gap_h: float) -> tuple[bool, float]:
    """(state of the last tick, how long it has lasted in hours)."""
    up = np.asarray(up, bool)
    if up.size == 0:
        return True, 0.0
    s = bool(up[-1])
    change = np.flatnonzero(up != s)
    start = change[-1] + 1 if change.size else 0
    return s, (up.size - start) * gap_h


def _draw(rng: np.random.Generator, sample: np.ndarray, n: int, kind: str) -> np.ndarray:
    if kind == "markov":
        return rng.exponential(float(np.mean(sample)), n)
    return rng.choice(sample, n)


def _draw_residual(rng: np.random.Generator, sample: np.ndarray, age: float, n: int,
                   kind: str) -> np.ndarray:
    if kind == "markov":
        return rng.exponential(float(np.mean(sample)), n)
    longer = sample[sample > age]
    if longer.size >= MIN_TAIL_RUNS:
        return rng.choice(longer, n) - age
    top = np.sort(sample)[-max(3, sample.size // 5):]
    return rng.exponential(max(float(np.mean(top)), age, 1e-3), n)


def simulate_paths(model: RunModel, state_up: bool, age_hours: float, horizon_hours: float,
                   n_samples: int, rng: np.random.Generator, hourly_points: int = 0,
                   clock_hour_utc: float = 0.0) -> dict[str, np.ndarray]:
    """Monte-Carlo paths: available fraction, preemptions, state at the end, P(up) hourly.

    For ``semi_markov_hod`` models ``age_hours`` of an up-run is in operational hours
    (``operational_age``) and ``clock_hour_utc`` is the UTC hour of the forecast origin.
    """
    n, H = n_samples, horizon_hours
    hod = model.kind == "semi_markov_hod" and model.profile is not None
    up_sample = model.up_op if hod and model.up_op is not None else model.up
    kind = "semi_markov" if hod else model.kind
    if hod:  # operational clock over the horizon (0.05 h steps)
        dt = min(0.05, H / 20)
        grid = np.arange(0.0, H + dt, dt)
        prof = model.profile[((clock_hour_utc + grid[:-1]) % 24).astype(int)]
        cum = np.r_[0.0, np.cumsum(prof * dt)]

    def up_end(t: np.ndarray, d: np.ndarray) -> np.ndarray:
        if not hod:
            return t + d
        target = np.interp(t, grid, cum) + d
        end = np.interp(target, cum, grid)
        return np.where(target > cum[-1], H + 1.0, end)

    t = np.zeros(n)
    s = np.full(n, state_up)
    up_time = np.zeros(n)
    npre = np.zeros(n)
    first = _draw_residual(rng, up_sample if state_up else model.down, age_hours, n, kind)
    end_t = up_end(t, first) if state_up else t + first
    marks = np.arange(1, hourly_points + 1, dtype=float)
    up_at = np.zeros((n, marks.size), dtype=bool)
    active = np.ones(n, dtype=bool)
    for _ in range(100000):
        end = np.minimum(end_t, H)
        seg_up = s & active
        up_time += np.where(seg_up, end - t, 0.0)
        if marks.size:
            inside = (marks[None, :] > t[:, None]) & (marks[None, :] <= end[:, None])
            up_at |= inside & seg_up[:, None]
        crossed = active & (end_t < H)
        npre += crossed & s
        t = np.where(active, end_t, t)
        s = np.where(crossed, ~s, s)
        active = crossed
        if not active.any():
            break
        k = int(active.sum())
        ta = t[active]
        new_up = up_end(ta, _draw(rng, up_sample, k, kind))
        new_dn = ta + _draw(rng, model.down, k, kind)
        end_t = end_t.copy()
        end_t[active] = np.where(s[active], new_up, new_dn)
    return {"availability": up_time / H, "preemptions": npre, "up_at_end": s.astype(float),
            "p_up_hourly": up_at.mean(axis=0) if marks.size else np.zeros(0)}


def _forecast_one(trace: Trace, model: RunModel, now_tick: int, horizon_hours: float,
                  n_samples: int, rng: np.random.Generator,
                  start_hour_utc: float = 0.0) -> ZoneForecast:
    gap_h = trace.gap_seconds / 3600.0
    hist = trace.up()[:now_tick]
    st, age = current_state(hist, gap_h)
    sim = simulate_paths(model, st, operational_age(hist, gap_h, model.profile, start_hour_utc),
                         horizon_hours, n_samples, rng,
                         hourly_points=int(math.floor(horizon_hours)),
                         clock_hour_utc=(start_hour_utc + now_tick * gap_h) % 24)
    a, p = sim["availability"], sim["preemptions"]
    aq = np.quantile(a, QUANTILES)
    pq = np.quantile(p, QUANTILES)
    held = float(a.mean()) * horizon_hours
    return ZoneForecast(
        cloud=trace.cloud, region=trace.region, zone=trace.zone,
        instance_type=instance_type_for(trace.accelerator), accelerator=trace.accelerator,
        now_tick=now_tick, horizon_hours=horizon_hours, state_up=bool(st), age_hours=float(age),
        availability_mean=float(a.mean()), availability_p10=float(aq[0]),
        availability_p50=float(aq[1]), availability_p90=float(aq[2]),
        preemptions_mean=float(p.mean()), preemptions_p10=float(pq[0]),
        preemptions_p50=float(pq[1]), preemptions_p90=float(pq[2]),
        rate_per_held_hour=float(p.mean()) / held if held > 0 else 0.0,
        p_up_at_end=float(sim["up_at_end"].mean()),
        p_up_hourly=tuple(float(x) for x in sim["p_up_hourly"]), model=model.kind)


def trace_key(trace: Trace) -> tuple[str, str, str, str]:
    """(cloud, region, zone, instance type) of a trace: the ``ZoneStats.key`` of its
    statistics (``trace_instance_type``), which ``forecast_zones``' evidence is keyed by."""
    return (trace.cloud, trace.region, trace.zone, trace_instance_type(trace))


def forecast_zones(traces: Sequence[Trace], now_tick: int | None, horizon_hours: float,
                   n_samples: int = 1000, seed: int = 0, kind: str = "semi_markov_hod",
                   start_hour_utc: float = 0.0,
                   evidence: Mapping[tuple[str, str, str, str], SessionEvidence] | None = None,
                   prior_held_hours: float = SESSION_PRIOR_HELD_HOURS) -> list[ZoneForecast]:
    """Forecast every trace's zone for ``horizon_hours`` after tick ``now_tick``.

    Only ticks ``< now_tick`` are used (fit and current state); ``None`` = the end of
    the time every trace covers: traces of different lengths are cut to the shortest
    (``cut_to_common_length``, one warning naming the files and lengths), so that every
    zone is forecast from the same moment, not each from its own last tick. Traces may
    have different gaps; ``now_tick`` counts each trace's ticks. ``start_hour_utc`` is the
    UTC hour of tick 0 (for the hour-of-day profile).

    ``evidence``: recorded sessions per ``trace_key`` (the module docstring's Gamma-Poisson
    update, prior worth ``prior_held_hours`` held hours); a zone whose evidence has no held
    hours is not updated. The caller is responsible for the evidence being older than
    ``now_tick`` (the pipeline forecasts from the end of the history, after the runs that
    recorded the sessions). Every zone's trace-only paths are drawn from the one stream of
    ``seed`` as without evidence, so zones without sessions are forecast bit for bit as
    before; an updated zone's paths then come from a stream of its own ``(seed, index)``.
    """
    if horizon_hours <= 0:
        raise ValueError(f"horizon_hours must be positive, got {horizon_hours}")
    if not traces:
        raise ValueError("forecast_zones needs at least one trace")
    if now_tick is None:
        traces = cut_to_common_length(traces)
    ticks = [t.n_ticks if now_tick is None else int(now_tick) for t in traces]
    for t, k in zip(traces, ticks, strict=True):
        if not 1 <= k <= t.n_ticks:
            raise ValueError(f"now_tick={k} is outside trace {t.zone} (1..{t.n_ticks} ticks)")
    models = fit_models([t.up()[:k] for t, k in zip(traces, ticks, strict=True)],
                        [t.gap_seconds / 3600.0 for t in traces], kind=kind,
                        start_hours_utc=[start_hour_utc] * len(traces))
    rng = np.random.default_rng(seed)
    out = []
    for i, (t, m, k) in enumerate(zip(traces, models, ticks, strict=True)):
        fc = _forecast_one(t, m, k, horizon_hours, n_samples, rng, start_hour_utc)
        ev = (evidence or {}).get(trace_key(t))
        if ev is not None and ev.held_hours > 0:
            post = posterior_up_rate(m.up_rate, ev, prior_held_hours)
            upd = _forecast_one(t, m.with_up_rate(post), k, horizon_hours, n_samples,
                                np.random.default_rng([seed, i]), start_hour_utc)
            fc = replace(upd, session_preemptions=int(ev.preemptions),
                         session_held_hours=float(ev.held_hours), up_rate_prior=m.up_rate,
                         up_rate_posterior=post, prior_held_hours=float(prior_held_hours),
                         preemptions_mean_without_sessions=fc.preemptions_mean)
        out.append(fc)
    return out


# --------------------------------------------------------------------------- scoring


def crps_samples(samples: np.ndarray, y: float) -> float:
    """CRPS of an ensemble for outcome ``y``: E|X - y| - 0.5 E|X - X'| (sorted form)."""
    x = np.sort(np.asarray(samples, dtype=float))
    m = x.size
    if m == 1:
        return float(abs(x[0] - y))
    e1 = np.mean(np.abs(x - y))
    i = np.arange(1, m + 1)
    e2 = 2.0 * np.sum((2 * i - m - 1) * x) / (m * m)
    return float(e1 - 0.5 * e2)


def pinball(q_pred: Sequence[float], y: float, qs: Sequence[float] = QUANTILES) -> float:
    """Mean pinball (quantile) loss over the quantile levels ``qs``."""
    loss = 0.0
    for q, p in zip(qs, q_pred, strict=True):
        d = y - p
        loss += max(q * d, (q - 1) * d)
    return loss / len(qs)


def evaluate_forecasts(traces: Sequence[Trace], horizon_hours: float = 6.0,
                       train_fraction: float = 0.7, step_hours: float = 2.0,
                       n_samples: int = 300, seed: int = 0):
    """Score models vs baselines on the held-back tail of each trace.

    Every model is fitted on the ticks before one common time, ``train_fraction`` of the
    time all traces cover (the same as each trace's own ``train_fraction`` when they have
    one length); each trace is scored from there to its own end.

    Trace-only: it scores the trace-fitted law and takes no recorded sessions
    (``forecast_zones``' ``evidence``). A session has a unix time, not a tick of the
    trace's timeline, so none could be placed before the split; sessions from the
    held-back part would be its future.

    Returns a ``pandas.DataFrame`` with one row per (zone, model): ``crps`` (available
    fraction over the horizon), ``brier`` (up at the end of the horizon), ``pinball``
    (p10/p50/p90 of the available fraction), ``n`` origins. Lower is better. Models:
    ``semi_markov_hod`` (the default forecast), ``semi_markov``, ``markov``, baselines ``persistence`` (the current state lasts),
    ``historical_mean`` (training availability), ``climatology`` (empirical
    distribution of horizon-window availability in training).
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    # one split TIME for every trace (train_fraction of the time all of them cover): sparse
    # zones pool every zone's training runs (fit_models), so a longer trace split at 70 % of
    # its own length lent a shorter one runs from after that one's forecast origins
    cut_s = min(t.n_ticks * t.gap_seconds for t in traces) * train_fraction
    splits = [int(cut_s / t.gap_seconds + 1e-9) for t in traces]
    hist = [t.up()[:k] for t, k in zip(traces, splits, strict=True)]
    gaps = [t.gap_seconds / 3600.0 for t in traces]
    models = {kind: fit_models(hist, gaps, kind=kind)
              for kind in ("semi_markov_hod", "semi_markov", "markov")}
    for zi, (t, k) in enumerate(zip(traces, splits, strict=True)):
        gap_h = gaps[zi]
        h_ticks = int(round(horizon_hours / gap_h))
        step = max(1, int(round(step_hours / gap_h)))
        up = t.up()
        train = up[:k]
        p_hist = float(train.mean())
        # climatology: availability of every horizon window in training
        c = np.r_[0, np.cumsum(train.astype(float))]
        win = (c[h_ticks:] - c[:-h_ticks]) / h_ticks if train.size > h_ticks else np.array([p_hist])
        clim = win[:: max(1, h_ticks // 4)]
        scores: dict[str, list[tuple[float, float, float]]] = {}
        for origin in range(k, t.n_ticks - h_ticks, step):
            y_frac = float(up[origin:origin + h_ticks].mean())
            y_end = float(up[origin + h_ticks - 1])
            st, age = current_state(up[:origin], gap_h)
            for kind, ms in models.items():
                m = ms[zi]
                sim = simulate_paths(m, st, operational_age(up[:origin], gap_h, m.profile),
                                     horizon_hours, n_samples, rng,
                                     clock_hour_utc=(origin * gap_h) % 24)
                a = sim["availability"]
                scores.setdefault(kind, []).append((
                    crps_samples(a, y_frac), (float(sim["up_at_end"].mean()) - y_end) ** 2,
                    pinball(np.quantile(a, QUANTILES), y_frac)))
            sv = 1.0 if st else 0.0
            scores.setdefault("persistence", []).append(
                (abs(sv - y_frac), (sv - y_end) ** 2, pinball([sv] * 3, y_frac)))
            scores.setdefault("historical_mean", []).append(
                (abs(p_hist - y_frac), (p_hist - y_end) ** 2, pinball([p_hist] * 3, y_frac)))
            scores.setdefault("climatology", []).append(
                (crps_samples(clim, y_frac), (p_hist - y_end) ** 2,
                 pinball(np.quantile(clim, QUANTILES), y_frac)))
        for name, vals in scores.items():
            v = np.asarray(vals)
            rows.append({"zone": t.zone, "model": name, "crps": float(v[:, 0].mean()),
                         "brier": float(v[:, 1].mean()), "pinball": float(v[:, 2].mean()),
                         "n": int(v.shape[0])})
    return pd.DataFrame(rows)
