"""The mean time to losing a whole elastic group (``intervals.group_loss_mttp_seconds``):
its limits, and agreement with a Monte-Carlo of the process it models.

The process: n independent units, each up unit lost at rate 1/M, each lost unit replaced
after an exponential time of mean R (in parallel); the group is lost when all n are down
at once. The Monte-Carlo draws that continuous-time chain with a fixed seed (so the test
is deterministic) and N samples; its tolerance is 4 standard errors of the sample mean
(s / sqrt(N)), i.e. a 6e-5 chance of a false failure for a fresh seed, and each case
first checks that 4 standard errors resolve the mean to 5 % (else the test would be
vacuous). No timing enters anywhere.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from checkpointing.intervals import (
    equivalent_unit_mttp_seconds,
    group_loss_mttp_seconds,
    thesis_optimum_seconds,
)

Z = 4.0  # standard errors of tolerance


def _monte_carlo(mttps: list[float], restart: float, samples: int, seed: int) -> tuple[float, float]:
    """(mean, standard error) of the time (s) from all units up to all units down."""
    rng = random.Random(seed)
    lam = [1.0 / m for m in mttps]
    mu = 1.0 / restart
    times = []
    for _ in range(samples):
        up = [True] * len(mttps)
        t = 0.0
        while True:
            rates = [lam[i] if up[i] else mu for i in range(len(up))]
            total = sum(rates)
            t += rng.expovariate(total)
            x = rng.random() * total
            i = 0
            while x > rates[i] and i < len(rates) - 1:
                x -= rates[i]
                i += 1
            up[i] = not up[i]
            if not any(up):
                break
        times.append(t)
    return statistics.fmean(times), statistics.stdev(times) / math.sqrt(samples)


def test_one_unit_is_the_single_node_mttp() -> None:
    for m, r in ((3600.0, 360.0), (2.0, 0.0), (7.5, 1e6)):
        assert group_loss_mttp_seconds(m, r, 1) == m


def test_two_units_is_the_textbook_parallel_system_with_repair() -> None:
    lam, mu = 1 / 10.0, 1 / 2.0
    assert group_loss_mttp_seconds(10.0, 2.0, 2) == pytest.approx((3 * lam + mu) / (2 * lam ** 2))


def test_monotone_in_units_and_restart() -> None:
    by_n = [group_loss_mttp_seconds(100.0, 10.0, n) for n in range(1, 7)]
    assert all(a < b for a, b in zip(by_n, by_n[1:], strict=False)), by_n
    for n in (2, 3, 5):  # a slower replacement leaves more time to lose the rest
        by_r = [group_loss_mttp_seconds(100.0, r, n) for r in (0.1, 1.0, 10.0, 100.0, 1000.0)]
        assert all(a > b for a, b in zip(by_r, by_r[1:], strict=False)), (n, by_r)
        assert by_r[-1] > 100.0 / n  # never below the time to the first loss


def test_tends_to_the_rare_failure_form_and_to_never_lost() -> None:
    # lam << mu: mu^(n-1) / (n lam^n) = M^n / (n R^(n-1))
    for n in (2, 3, 4):
        m, r = 1e4, 1.0
        assert group_loss_mttp_seconds(m, r, n) == pytest.approx(m ** n / (n * r ** (n - 1)), rel=1e-3)
    assert group_loss_mttp_seconds(10.0, 0.0, 2) == math.inf  # instant replacement
    assert group_loss_mttp_seconds(1e200, 1e-200, 4) == math.inf  # overflow, not an error


@pytest.mark.parametrize("bad", [(0.0, 1.0, 2), (10.0, -1.0, 2), (10.0, 1.0, 0), (10.0, 1.0, 1.5),
                                 (math.nan, 1.0, 2), (10.0, 1.0, True)])
def test_bad_inputs_name_the_argument(bad) -> None:
    with pytest.raises(ValueError, match="unit_mttp_seconds|restart_seconds|units"):
        group_loss_mttp_seconds(*bad)


@pytest.mark.parametrize("mttp, restart, units, samples", [(1.0, 0.25, 2, 12000), (1.0, 1 / 3, 3, 8000)])
def test_agrees_with_a_monte_carlo_of_the_same_process(mttp, restart, units, samples) -> None:
    exact = group_loss_mttp_seconds(mttp, restart, units)
    mean, se = _monte_carlo([mttp] * units, restart, samples, seed=units)
    assert Z * se < 0.05 * exact, "too few samples to resolve the mean"
    assert abs(mean - exact) <= Z * se, (mean, se, exact)
    # ... and it resolves the difference from the rare-failure form (not exact at mu = 4 lam)
    if units == 2:
        rare = mttp ** 2 / (2 * restart)
        assert abs(mean - rare) > Z * se, (mean, rare)


def test_equivalent_unit_of_equal_units_is_that_unit() -> None:
    assert equivalent_unit_mttp_seconds([5.0, 5.0, 5.0], 1.0) == 5.0
    assert equivalent_unit_mttp_seconds([4.0, 9.0], 0.0) == pytest.approx(6.0)  # geometric mean
    assert 4.0 < equivalent_unit_mttp_seconds([4.0, 9.0], 1.0) < 9.0
    with pytest.raises(ValueError):
        equivalent_unit_mttp_seconds([], 1.0)


@pytest.mark.parametrize("mttps, restart", [([1.0, 3.0], 0.1), ([2.0, 5.0, 9.0], 0.5)])
def test_unequal_units_agree_with_a_monte_carlo_to_the_stated_approximation(mttps, restart) -> None:
    """Unequal zones are folded into one equivalent unit: not exact (docs/elastic.md gives
    the measured gap, <= 3 % in these cases); the tolerance is 5 % plus the sampling error."""
    model = group_loss_mttp_seconds(equivalent_unit_mttp_seconds(mttps, restart), restart, len(mttps))
    mean, se = _monte_carlo(mttps, restart, 6000, seed=7)
    assert abs(model - mean) <= 0.05 * mean + Z * se, (model, mean, se)


def test_the_insurance_interval_uses_the_group_mttp_with_the_projects_formula() -> None:
    """tau of a 2-zone group = the thesis / Young-Daly tau with M = the group's MTTP: with
    M = 1 h per zone and R = 6 min the group's MTTP is 6.5 h and tau 2.45x the
    single-node interval."""
    m, r, c = 3600.0, 360.0, 30.0
    group = group_loss_mttp_seconds(m, r, 2)
    assert group == pytest.approx(23400.0)  # (3 lam + mu) / (2 lam^2)
    ratio = thesis_optimum_seconds(c, group, r) / thesis_optimum_seconds(c, m, r)
    assert ratio == pytest.approx(math.sqrt((23400 + 360) / (3600 + 360)))
    assert ratio == pytest.approx(math.sqrt(6.0))
