"""Young, Daly and the thesis objective (Eq. 4.1-4.5) on hand-worked numbers."""

from __future__ import annotations

import math

import pytest

from checkpointing import intervals as iv


def test_young_and_daly_hand_worked() -> None:
    # delta = 50 s, M = 10000 s: sqrt(2*50*10000) = 1000 s.
    assert iv.young_interval_seconds(50, 10_000) == pytest.approx(1000.0)
    assert iv.daly_first_order_seconds(50, 10_000) == pytest.approx(950.0)
    # x = delta/(2M) = 0.0025: 1000 * (1 + 0.05/3 + 0.0025/9) - 50
    want = 1000 * (1 + math.sqrt(0.0025) / 3 + 0.0025 / 9) - 50
    assert iv.daly_higher_order_seconds(50, 10_000) == pytest.approx(want)
    assert want == pytest.approx(966.9444, abs=1e-3)
    # delta >= 2M: checkpoint every M.
    assert iv.daly_higher_order_seconds(300, 100) == 100


def test_thesis_eq_4_5_matches_published_static_intervals() -> None:
    # Tables 6.2/6.3: delta = 2.55 s, T_step = 4.6 s, R = 295 s -> "per-51";
    # delta = 19.5 s, T_step = 19.75 s, R = 465 s -> "per-33" (MTTP = 10800 s).
    assert int(iv.thesis_optimum_seconds(2.55, 10_800, 295) // 4.6) == 51
    assert int(iv.thesis_optimum_seconds(19.5, 10_800, 465) // 19.75) == 33


def test_exact_optimum_minimises_the_objective() -> None:
    kw = dict(process_seconds=1e6, ckpt_seconds=120.0, mttp_seconds=3600.0, restart_seconds=300.0)
    t_exact = iv.thesis_exact_optimum_seconds(120.0, 3600.0, 300.0)
    best = iv.thesis_expected_latency_seconds(t_exact, **kw)
    for f in (0.95, 0.999, 1.001, 1.05):
        assert iv.thesis_expected_latency_seconds(t_exact * f, **kw) > best
    # Eq. 4.5 drops delta^2 under the root: slightly shorter, nearly as good.
    t_45 = iv.thesis_optimum_seconds(120.0, 3600.0, 300.0)
    assert t_45 < t_exact
    assert iv.thesis_expected_latency_seconds(t_45, **kw) / best - 1 < 1e-3


def test_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="mttp_seconds"):
        iv.young_interval_seconds(10, 0)
    with pytest.raises(ValueError, match="restart_seconds"):
        iv.thesis_optimum_seconds(10, 100, -1)


def test_prior_weighted_mean_starts_at_the_prior_and_follows_the_measurements() -> None:
    f = iv.prior_weighted_mean_seconds
    assert f(2.0, 10, 0.0, 0) == 2.0  # nothing measured: the prior itself
    assert f(2.0, 10, 1.0, 1) == pytest.approx(21.0 / 11)  # one save moves it by (x - m)/(n0+1)
    assert f(2.0, 10, 10.0, 10) == pytest.approx(1.5)  # n = n0: half-way to the measured mean
    assert abs(f(2.0, 10, 1000.0, 1000) - 1.0) < 0.01  # many saves: the measured mean
    assert f(None, 10, 3.0, 2) == 1.5 and f(None, 10, 0.0, 0) is None  # no prior: running mean
    # one outlier three times the prior moves delta by 2/11 = 18 %, tau (sqrt) by < 9 %
    assert math.sqrt(f(1.0, 10, 3.0, 1)) < 1.09


def test_prior_weighted_mean_rejects_bad_input_by_name() -> None:
    with pytest.raises(ValueError, match="prior_weight"):
        iv.prior_weighted_mean_seconds(1.0, 0, 0.0, 0)
    with pytest.raises(ValueError, match="prior_seconds"):
        iv.prior_weighted_mean_seconds(-1.0, 10, 0.0, 0)
    with pytest.raises(ValueError, match="observed_count"):
        iv.prior_weighted_mean_seconds(1.0, 10, 0.0, -1)
