"""GDE forecasters, metrics, real-trace loaders and workload scaling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fleet.scheduling.gde import (
    DemandSeries,
    Forecast,
    LastWeekPeak,
    OrgLinear,
    SeasonalNaive,
    forecast_metrics,
    load_hourly_demand,
    moving_average,
    windows,
)
from fleet.scheduling.traces import (
    SynthConfig,
    load_alibaba_v2023,
    offered_load,
    scale_spot,
    synth_v2026,
)


def weekly_series(n_weeks=6, noise=0.0, seed=0):
    t = np.arange(n_weeks * 168)
    rng = np.random.default_rng(seed)
    a = 100 + 40 * np.sin(2 * np.pi * t / 24) + 20 * ((t // 24) % 7 < 5) + noise * rng.normal(size=len(t))
    b = 50 + 10 * np.cos(2 * np.pi * t / 24) + noise * rng.normal(size=len(t))
    return DemandSeries(np.stack([a, b]), np.array([[0, 0], [1, 0]]))


def test_moving_average_is_reflection_padded_and_keeps_length():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    tr = moving_average(x, 3)
    assert tr.shape == x.shape
    # reflect padding: [2,1,2,3,4,5,4] -> means of 3: [5/3, 2, 3, 4, 13/3]
    assert torch.allclose(tr, torch.tensor([[5 / 3, 2.0, 3.0, 4.0, 13 / 3]]))


def test_windows_use_only_the_past():
    s = DemandSeries(np.arange(10.0)[None, :], np.zeros((1, 1), dtype=int))
    x, y, *_ = windows(s, 3, 2, np.array([5]))
    assert list(x[0]) == [2.0, 3.0, 4.0] and list(y[0]) == [5.0, 6.0]


def test_baselines_hand_cases():
    s = DemandSeries(np.arange(400.0)[None, :], np.zeros((1, 1), dtype=int))
    lw = LastWeekPeak(168, 4).predict(s, np.array([200]))
    assert np.all(lw.mu == 199.0) and np.all(lw.sigma == 0)
    sn = SeasonalNaive(168, 4).predict(s, np.array([200]))
    assert list(sn.mu[0]) == [32.0, 33.0, 34.0, 35.0]


def test_metrics_hand_case():
    y = np.array([[10.0, 20.0]])
    fc = Forecast(np.array([[12.0, 16.0]]), np.array([[1.0, 1.0]]))
    m = forecast_metrics(y, fc)
    assert m["MAE"] == pytest.approx(3.0) and m["MSE"] == pytest.approx(10.0)
    assert m["RMSE"] == pytest.approx(np.sqrt(10.0))
    assert m["MAPE"] == pytest.approx(100 * (0.2 + 0.2) / 2)
    # 0.9-quantiles 13.28 and 17.28: y <= q holds for 1 of 2 -> |0.5 - 0.9|
    assert m["0.9-MAQE"] == pytest.approx(0.4)


def test_orglinear_learns_periodic_demand_and_calibrated_spread():
    s = weekly_series(noise=3.0)
    T = s.values.shape[1]
    train, test = np.arange(168, int(T * 0.7) - 24), np.arange(int(T * 0.7), T - 24)
    f = OrgLinear(168, 24, epochs=30, seed=0).fit(s, train)
    fc = f.predict(s, test)
    _, y, *_ = windows(s, 168, 24, test)
    m = forecast_metrics(y, fc)
    naive = forecast_metrics(y, LastWeekPeak(168, 24).predict(s, test))
    assert m["MAE"] < 0.5 * naive["MAE"]
    assert m["MAE"] < 15.0  # daily amplitude 40 GPUs, weekday step 20, noise sd 3
    assert m["0.9-MAQE"] < 0.1 and np.all(fc.sigma > 0)


def test_real_hourly_series_loads(shared_data):
    s = load_hourly_demand(shared_data)
    assert s.values.shape[0] == 1 and s.values.shape[1] > 4000  # ~184 days of hours
    assert s.values.min() >= 0


def test_v2023_loader_classes_and_scaling(shared_data):
    tr = load_alibaba_v2023(shared_data)
    assert tr.n_jobs > 6000 and 0.3 < (~tr.is_hp).mean() < 0.5  # BE pods are spot
    assert tr.slots_per_gpu == 10 and tr.g.min() >= 1
    load = offered_load(tr.submit, tr.duration, tr.g, float(tr.node_total.sum()))
    assert 0.4 < load < 0.9
    hi = scale_spot(tr, 4.0)
    assert (~hi.is_hp).sum() == 4 * (~tr.is_hp).sum() and hi.is_hp.sum() == tr.is_hp.sum()
    assert np.all(np.diff(hi.submit) >= 0)


def test_v2026_synthetic_matches_published_aggregates(shared_data):
    tr = synth_v2026(shared_data, SynthConfig(days=7, job_fraction=0.5))
    assert tr.capacity_gpus == 10412 and len(tr.node_total) == 4278
    # A10 nodes have one GPU: no A10 pod asks for more
    a10 = tr.pool_names.index("A10")
    assert tr.g[tr.pool == a10].max() == 1
    assert tr.w.max() > 8 and np.mean(tr.w > 1) == pytest.approx(0.10, abs=0.05)
    # spot share follows the real daily mix of days 31-37 (~14-45% spot)
    assert 0.05 < (~tr.is_hp).mean() < 0.5
    # arrivals follow the real hourly counts (half of them here)
    assert tr.n_jobs == pytest.approx(0.5 * 16000, rel=0.35)
