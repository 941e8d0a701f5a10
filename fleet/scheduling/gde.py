"""GPU Demand Estimator (GFS §3.2): the OrgLinear probabilistic forecaster, baselines,
and forecast metrics.

Series are hourly GPU demand (GPUs). A *series* belongs to one organization and carries
business attributes (organization id, GPU model/pool id). All models map a lookback
window of ``lookback`` hours to the next ``horizon`` hours.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.stats import norm
from torch import nn


# --------------------------------------------------------------------------- data
@dataclass
class DemandSeries:
    """Hourly demand of several series: ``values`` [S, T] (GPUs), attributes per series
    ``attrs`` [S, A] (ints), ``start_hour``/``start_weekday`` of index 0, holiday flags [T]."""

    values: np.ndarray
    attrs: np.ndarray
    start_hour: int = 0
    start_weekday: int = 0
    holidays: np.ndarray | None = None
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = np.atleast_2d(np.asarray(self.values, dtype=float))
        self.attrs = np.atleast_2d(np.asarray(self.attrs, dtype=np.int64))
        if self.attrs.shape[0] != self.values.shape[0]:
            raise ValueError("attrs needs one row per series")
        if self.holidays is None:
            self.holidays = np.zeros(self.values.shape[1], dtype=np.int64)

    def time_features(self) -> np.ndarray:
        """[T, 3]: hour of day, weekday, holiday flag."""
        t = np.arange(self.values.shape[1])
        hour = (self.start_hour + t) % 24
        wday = (self.start_weekday + (self.start_hour + t) // 24) % 7
        return np.stack([hour, wday, self.holidays.astype(np.int64)], axis=1)


def windows(series: DemandSeries, lookback: int, horizon: int, origins: np.ndarray, pad: str = "reflect"):
    """Stack samples at forecast origins (first forecast hour index). History before index
    0 is reflection-padded (``pad="reflect"``, which reads hours 1..lookback: future data
    for early origins) or zero-padded (``pad="zeros"``: causal, for a simulated cluster that
    starts empty) so early origins still get a full window."""
    v = series.values
    if pad == "zeros":
        left = np.zeros((v.shape[0], lookback))
    elif pad == "reflect":
        left = v[:, lookback:0:-1] if v.shape[1] > lookback else np.repeat(v[:, :1], lookback, 1)
    else:
        raise ValueError(f"unknown pad {pad!r}; use 'reflect' or 'zeros'")
    pad = np.concatenate([left, v], axis=1)
    tf = series.time_features()
    xs, ys, ss, ts, valid = [], [], [], [], []
    T = v.shape[1]
    for o in origins:
        hist = pad[:, o: o + lookback]  # pad index o+lookback == original index o
        fut = np.full((v.shape[0], horizon), np.nan)
        end = min(T, o + horizon)
        fut[:, : end - o] = v[:, o:end]
        xs.append(hist)
        ys.append(fut)
        ss.append(np.arange(v.shape[0]))
        ts.append(np.repeat(tf[min(o, T - 1)][None, :], v.shape[0], 0))
        valid.append(np.full(v.shape[0], end - o == horizon))
    return (np.concatenate(xs), np.concatenate(ys), np.concatenate(ss), np.concatenate(ts),
            np.concatenate(valid))


# --------------------------------------------------------------------------- models
def moving_average(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """Trend by a moving average over the last axis with reflection padding (Eq. 1)."""
    k = kernel if kernel % 2 == 1 else kernel + 1
    pad = min(k // 2, x.shape[-1] - 1)
    xp = nn.functional.pad(x.unsqueeze(1), (pad, pad), mode="reflect")
    return nn.functional.avg_pool1d(xp, 2 * pad + 1, stride=1).squeeze(1)


class OrgLinearNet(nn.Module):
    """Eq. 1-7: MA decomposition; temporal embeddings (hour, weekday, holiday); business
    attribute embeddings mixed by self-attention; two linear heads for the cyclical and
    trend parts; a softplus volatility head."""

    def __init__(self, lookback: int, horizon: int, attr_cardinalities: list[int],
                 emb_dim: int = 8, kernel: int = 25) -> None:
        super().__init__()
        self.kernel = kernel
        self.hour = nn.Embedding(24, emb_dim)
        self.wday = nn.Embedding(7, emb_dim)
        self.hol = nn.Embedding(2, emb_dim)
        self.attrs = nn.ModuleList(nn.Embedding(c, emb_dim) for c in attr_cardinalities)
        self.attn = nn.MultiheadAttention(emb_dim, num_heads=1, batch_first=True)
        ctx = 3 * emb_dim + emb_dim
        self.cyc = nn.Linear(lookback + ctx, horizon)
        self.trend = nn.Linear(lookback + ctx, horizon)
        self.vol = nn.Linear(lookback + ctx, horizon)

    def forward(self, x, attrs, tfeat):
        trend = moving_average(x, self.kernel)
        cyc = x - trend
        c_t = torch.cat([self.hour(tfeat[:, 0]), self.wday(tfeat[:, 1]), self.hol(tfeat[:, 2])], -1)
        tokens = torch.stack([emb(attrs[:, i]) for i, emb in enumerate(self.attrs)], 1)
        c_o = self.attn(tokens, tokens, tokens, need_weights=False)[0].mean(1)
        ctx = torch.cat([c_o, c_t], -1)
        mu = self.cyc(torch.cat([cyc, ctx], -1)) + self.trend(torch.cat([trend, ctx], -1))
        sigma = nn.functional.softplus(self.vol(torch.cat([x, ctx], -1))) + 1e-2
        return mu, sigma


class DLinearNet(nn.Module):
    """DLinear-like point model: MA decomposition, two linear heads, no context."""

    def __init__(self, lookback: int, horizon: int, kernel: int = 25) -> None:
        super().__init__()
        self.kernel = kernel
        self.cyc = nn.Linear(lookback, horizon)
        self.trend = nn.Linear(lookback, horizon)

    def forward(self, x, attrs, tfeat):
        trend = moving_average(x, self.kernel)
        return self.cyc(x - trend) + self.trend(trend), None


@dataclass
class Forecast:
    """Per-sample Gaussian forecast: ``mu`` and ``sigma`` [N, H] in GPUs (sigma 0 = point)."""

    mu: np.ndarray
    sigma: np.ndarray
    train_s: float = 0.0

    def quantile(self, p: float) -> np.ndarray:
        return self.mu + norm.ppf(p) * self.sigma


class Forecaster:
    """Common interface: ``fit(series, train_origins)`` then ``predict(series, origins)``."""

    name = "base"
    lookback = 168
    horizon = 24
    pad = "reflect"  # history before hour 0 (see windows())

    def fit(self, series: DemandSeries, origins: np.ndarray) -> Forecaster:
        return self

    def predict(self, series: DemandSeries, origins: np.ndarray) -> Forecast:  # pragma: no cover
        raise NotImplementedError


class LastWeekPeak(Forecaster):
    """GFS-e: every future hour = the series' peak over the previous week (point)."""

    name = "last-week peak"

    def __init__(self, lookback: int = 168, horizon: int = 24) -> None:
        self.lookback, self.horizon = lookback, horizon

    def predict(self, series, origins):
        x, *_ = windows(series, self.lookback, self.horizon, origins, self.pad)
        mu = np.repeat(x.max(1, keepdims=True), self.horizon, 1)
        return Forecast(mu, np.zeros_like(mu))


class SeasonalNaive(Forecaster):
    """Next H hours = the same hours ``season`` hours earlier (point)."""

    name = "seasonal naive"

    def __init__(self, season: int = 168, horizon: int = 24) -> None:
        self.lookback, self.horizon, self.season = season, horizon, season

    def predict(self, series, origins):
        x, *_ = windows(series, self.lookback, self.horizon, origins)
        idx = (np.arange(self.horizon) % self.season) + (self.lookback - self.season)
        mu = x[:, idx]
        return Forecast(mu, np.zeros_like(mu))


class _TorchForecaster(Forecaster):
    def __init__(self, lookback: int = 168, horizon: int = 24, epochs: int = 60, lr: float = 5e-3,
                 batch: int = 256, seed: int = 0, kernel: int = 25) -> None:
        self.lookback, self.horizon, self.epochs, self.lr = lookback, horizon, epochs, lr
        self.batch, self.seed, self.kernel = batch, seed, kernel
        self.net: nn.Module | None = None
        self.train_s = 0.0

    def _build(self, series: DemandSeries) -> nn.Module:  # pragma: no cover
        raise NotImplementedError

    def _loss(self, mu, sigma, y):  # pragma: no cover
        raise NotImplementedError

    def fit(self, series, origins, epochs: int | None = None, warm_start: bool = False,
            max_steps: int | None = None):
        """Train on the windows at ``origins`` (only those whose targets lie in the series).
        ``warm_start``: continue from the current weights and scale (a cheap daily refit)
        instead of a fresh network; ``epochs`` overrides ``self.epochs`` for this call;
        ``max_steps`` caps the optimizer steps (random batches) of this call."""
        t0 = time.perf_counter()
        torch.manual_seed(self.seed)
        seen = np.maximum(series.values[:, : max(int(origins.max()), 1)].max(1), 1.0)
        if warm_start and self.net is not None:
            # grow the per-series scale with the demand seen so far: a scale frozen at the
            # first day's peak left the inputs far above 1 as multi-day jobs piled up (v2026:
            # the bound sat 1,177 GPUs above the demand instead of 206)
            self.scale = np.maximum(self.scale, seen)
        else:
            self.scale = seen
        x, y, s, tf, ok = windows(series, self.lookback, self.horizon, origins, self.pad)
        x, y, s, tf = x[ok], y[ok], s[ok], tf[ok]
        sc = self.scale[s][:, None]
        X = torch.tensor(x / sc, dtype=torch.float32)
        Y = torch.tensor(y / sc, dtype=torch.float32)
        A = torch.tensor(series.attrs[s], dtype=torch.long)
        TF = torch.tensor(tf, dtype=torch.long)
        if not (warm_start and self.net is not None):
            self.net = self._build(series)
            self._opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        opt = self._opt
        g = torch.Generator().manual_seed(self.seed + int(origins.max()))
        steps = 0
        for _ in range(self.epochs if epochs is None else epochs):
            perm = torch.randperm(len(X), generator=g)
            for i in range(0, len(X), self.batch):
                if max_steps is not None and steps >= max_steps:
                    break
                steps += 1
                b = perm[i: i + self.batch]
                mu, sigma = self.net(X[b], A[b], TF[b])
                loss = self._loss(mu, sigma, Y[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
        self.train_s += time.perf_counter() - t0
        return self

    def predict(self, series, origins):
        if self.net is None:
            raise RuntimeError(f"{self.name}: call fit() before predict()")
        x, _, s, tf, _ = windows(series, self.lookback, self.horizon, origins, self.pad)
        sc = self.scale[s][:, None]
        with torch.no_grad():
            mu, sigma = self.net(torch.tensor(x / sc, dtype=torch.float32),
                                 torch.tensor(series.attrs[s], dtype=torch.long),
                                 torch.tensor(tf, dtype=torch.long))
        mu = mu.numpy() * sc
        sig = np.zeros_like(mu) if sigma is None else sigma.numpy() * sc
        return Forecast(mu, sig, self.train_s)


class OrgLinear(_TorchForecaster):
    """The GFS forecaster, trained with the Gaussian negative log-likelihood (Eq. 8).

    Each sample's NLL is weighted by its (detached) predicted standard deviation
    (beta-NLL with beta = 0.5): with the plain NLL the mean head fits badly because
    samples with small sigma dominate the gradient (see docs/gfs.md)."""

    nll_beta = 0.5

    name = "OrgLinear"

    def _build(self, series):
        cards = [int(series.attrs[:, i].max()) + 1 for i in range(series.attrs.shape[1])]
        return OrgLinearNet(self.lookback, self.horizon, cards, kernel=self.kernel)

    def _loss(self, mu, sigma, y):
        nll = torch.log(sigma) + 0.5 * ((y - mu) / sigma) ** 2 + 0.5 * np.log(2 * np.pi)
        return (nll * sigma.detach() ** (2 * self.nll_beta)).mean()


class DLinear(_TorchForecaster):
    """DLinear-like point baseline trained with MSE."""

    name = "DLinear"

    def _build(self, series):
        return DLinearNet(self.lookback, self.horizon, kernel=self.kernel)

    def _loss(self, mu, sigma, y):
        return nn.functional.mse_loss(mu, y)


# --------------------------------------------------------------------------- metrics
def forecast_metrics(y: np.ndarray, fc: Forecast, quantiles=(0.9, 0.95)) -> dict[str, float]:
    """MAE, MSE, RMSE (GPUs), MAPE (% over hours with y > 0), and for each p:
    p-MAQE = |share of hours with y <= predicted p-quantile - p| (quantile calibration
    error) and p-QL = mean pinball loss at p divided by mean(y)."""
    ok = ~np.isnan(y)
    yy, mu = y[ok], fc.mu[ok]
    err = mu - yy
    pos = yy > 0
    out = {
        "MAE": float(np.mean(np.abs(err))),
        "MSE": float(np.mean(err**2)),
        "RMSE": float(np.sqrt(np.mean(err**2))),
        "MAPE": float(100 * np.mean(np.abs(err[pos]) / yy[pos])) if pos.any() else float("nan"),
    }
    for p in quantiles:
        q = fc.quantile(p)[ok]
        out[f"{p}-MAQE"] = float(abs(np.mean(yy <= q) - p))
        diff = yy - q
        out[f"{p}-QL"] = float(np.mean(np.maximum(p * diff, (p - 1) * diff)) / max(np.mean(np.abs(yy)), 1e-9))
    out["train_s"] = float(fc.train_s)
    return out


def make_forecaster(name: str, lookback: int = 168, horizon: int = 24, **kw) -> Forecaster:
    """``name`` in {"orglinear", "dlinear", "seasonal_naive", "lastweek_peak"}."""
    if name == "orglinear":
        return OrgLinear(lookback, horizon, **kw)
    if name == "dlinear":
        return DLinear(lookback, horizon, **kw)
    if name == "seasonal_naive":
        return SeasonalNaive(min(168, lookback), horizon)
    if name == "lastweek_peak":
        return LastWeekPeak(lookback, horizon)
    raise ValueError(f"unknown forecaster {name!r}; use orglinear, dlinear, seasonal_naive or lastweek_peak")


def evaluate_forecasters(series: DemandSeries, names=("orglinear", "dlinear", "seasonal_naive", "lastweek_peak"),
                         lookback: int = 168, horizon: int = 24, train_frac: float = 0.7,
                         epochs: int = 60, progress=None) -> dict[str, dict[str, float]]:
    """Chronological split: fit on origins in the first ``train_frac`` of hours (targets
    inside it), test on every origin of the rest. Returns metrics per forecaster.
    ``progress``: optional callable(str) told when each forecaster starts and ends."""
    T = series.values.shape[1]
    split = int(T * train_frac)
    train = np.arange(lookback, split - horizon + 1)
    test = np.arange(split, T - horizon + 1)
    out = {}
    for name in names:
        kw = {"epochs": epochs} if name in ("orglinear", "dlinear") else {}
        t0 = time.perf_counter()
        if progress is not None:
            progress(f"  {name}: fitting on {len(train)} origins ...")
        f = make_forecaster(name, lookback, horizon, **kw).fit(series, train)
        fc = f.predict(series, test)
        _, y, *_ = windows(series, lookback, horizon, test)
        out[f.name] = forecast_metrics(y, fc)
        if progress is not None:
            progress(f"  {name}: done in {time.perf_counter() - t0:.1f}s (MAE {out[f.name]['MAE']:.1f})")
    return out


def load_hourly_demand(data_dir, column: str = "gpu_demand", skip_hours: int = 24) -> DemandSeries:
    """The real v2026 hourly series (aggregates/hourly_summary.csv) as one series.

    Hour 0 holds jobs already running at trace start, so the first ``skip_hours`` are
    dropped; missing hours are filled with 0. The trace gives no calendar date, so hour
    0 is taken as 00:00 on a Monday and no holidays are marked (documented)."""
    from pathlib import Path

    import pandas as pd

    path = Path(data_dir) / "alibaba-spot-gpu-v2026" / "aggregates" / "hourly_summary.csv"
    if not path.exists():
        raise FileNotFoundError(f"hourly demand series not found at {path}; pass --data-dir pointing at shared/data")
    df = pd.read_csv(path)
    if column not in df.columns:
        raise ValueError(f"column {column!r} not in {path.name}; choose from {list(df.columns[1:])}")
    full = np.zeros(int(df.submit_hour.max()) + 1)
    full[df.submit_hour.to_numpy(int)] = df[column].to_numpy(float)
    return DemandSeries(full[skip_hours:][None, :], np.zeros((1, 2), dtype=np.int64),
                        start_hour=skip_hours % 24, start_weekday=(skip_hours // 24) % 7,
                        names=[column])
