"""The playbook's Output 18.6.2 and its exercises, reproduced from checkpointing.costmodel."""

from __future__ import annotations

import math

import pytest

from checkpointing import costmodel as cm

# Output 18.6.2 exactly as printed in the playbook (section 3).
PLAYBOOK_OUTPUT = """\
On-demand: $1.000 per useful node-hour (baseline)
 pre/hr  ckpt_int  eff_$/useful   wasted%   vs on-demand
   0.10     1.000         0.774      9.5%      spot WINS
   0.50     0.447         0.876     20.1%      spot WINS
   2.00     0.224         1.103     36.5%     spot LOSES
   8.00     0.112         1.833     61.8%     spot LOSES"""


def _format_like_playbook(rows: list[cm.CostRow]) -> str:
    lines = ["On-demand: $1.000 per useful node-hour (baseline)"]
    lines.append(
        f"{'pre/hr':>7} {'ckpt_int':>9} {'eff_$/useful':>13} {'wasted%':>9} {'vs on-demand':>14}"
    )
    for r in rows:
        verdict = "spot WINS" if r.spot_wins else "spot LOSES"
        lines.append(
            f"{r.rate_per_hour:>7.2f} {r.interval_hours:>9.3f} {r.eff_cost_per_useful_hour:>13.3f}"
            f" {r.wasted_fraction * 100:>8.1f}% {verdict:>14}"
        )
    return "\n".join(lines)


def test_output_18_6_2_table_reproduced_to_printed_precision() -> None:
    rows = cm.cost_table(
        on_demand_price=1.0, spot_price=0.7, ckpt_hours=0.05, rates_per_hour=[0.1, 0.5, 2.0, 8.0]
    )
    got = [line.split() for line in _format_like_playbook(rows).splitlines()]
    want = [line.split() for line in PLAYBOOK_OUTPUT.splitlines()]
    assert got == want


def test_break_even_line_reproduced_with_0p005_grid() -> None:
    lam = cm.break_even_rate_per_hour(on_demand_price=1.0, spot_price=0.7, ckpt_hours=0.05)
    assert lam == pytest.approx(1.245)
    assert f"{lam:.2f}" == "1.25"
    assert f"{60.0 / lam:.1f}" == "48.2"
    # A coarser 0.01 grid would print 1.24 / 48.4: the granularity matters.
    coarse = cm.break_even_rate_per_hour(
        on_demand_price=1.0, spot_price=0.7, ckpt_hours=0.05, step_per_hour=0.01
    )
    assert (f"{coarse:.2f}", f"{60 / coarse:.1f}") == ("1.24", "48.4")
    exact = cm.break_even_rate_per_hour(
        on_demand_price=1.0, spot_price=0.7, ckpt_hours=0.05, step_per_hour=None
    )
    assert (f"{exact:.2f}", f"{60 / exact:.1f}") == ("1.25", "48.2")
    assert exact == pytest.approx(1.2456747, rel=1e-6)


def test_break_even_at_true_optimum_has_closed_form() -> None:
    # At the optimum c_eff = c_sp (1 + 2C/T): break-even T = 2C/(rho-1), lambda = 2C/(T^2+2CT).
    c, rho = 0.05, 1.0 / 0.7
    t = 2 * c / (rho - 1)
    want = 2 * c / (t * t + 2 * c * t)
    got = cm.break_even_rate_per_hour(
        on_demand_price=1.0, spot_price=0.7, ckpt_hours=0.05, interval="optimal", step_per_hour=None
    )
    assert got == pytest.approx(want, rel=1e-9)
    assert got == pytest.approx(9 / 7, rel=1e-9)


def test_optimal_interval_minimises_effective_cost() -> None:
    for lam, r in [(0.1, 0.0), (2.0, 0.0), (0.5, 0.05), (2.0, 0.2)]:
        t_opt = cm.optimal_interval_hours(0.05, lam, r)
        best = cm.effective_cost_per_useful_hour(0.7, 0.05, t_opt, lam, r)
        for t in (t_opt * 0.9, t_opt * 0.99, t_opt * 1.01, t_opt * 1.1):
            assert cm.effective_cost_per_useful_hour(0.7, 0.05, t, lam, r) > best
        # closed form of the minimum: c_sp (1 + 2C/T) / (1 - lambda R)
        assert best == pytest.approx(0.7 * (1 + 0.1 / t_opt) / (1 - lam * r), rel=1e-12)


def test_restore_cost_exercise_numbers() -> None:
    # R shrinks the optimum interval and the break-even rate (values in docs/cost-model.md).
    t0 = cm.optimal_interval_hours(0.05, 1.0, 0.0)
    t1 = cm.optimal_interval_hours(0.05, 1.0, 0.05)
    t2 = cm.optimal_interval_hours(0.05, 1.0, 0.2)
    assert t0 > t1 > t2
    be = {
        r: cm.break_even_rate_per_hour(
            on_demand_price=1.0,
            spot_price=0.7,
            ckpt_hours=0.05,
            restart_hours=r,
            interval="optimal",
            step_per_hour=None,
        )
        for r in (0.0, 0.05, 0.2)
    }
    assert be[0.0] > be[0.05] > be[0.2]
    # cross-checked against a brute-force grid over T (scipy brentq on the grid minimum)
    assert be[0.05] == pytest.approx(0.92122, abs=1e-5)
    assert be[0.2] == pytest.approx(0.53364, abs=1e-5)
    assert (t0, t1, t2) == pytest.approx((0.27016, 0.26225, 0.23723), abs=1e-5)
    # self-consistency: W (1 - lambda (T/2 + R)) = H (1 + C/T)
    run = cm.spot_run(
        spot_price=0.7,
        ckpt_hours=0.05,
        interval_hours=0.3,
        rate_per_hour=1.0,
        restart_hours=0.2,
        useful_hours=100,
    )
    assert run.wall_clock_hours - run.redone_hours - run.restore_hours - run.ckpt_hours_total == (
        pytest.approx(100.0)
    )


def test_zone_exercise_mean_constant_variance_falls_with_zones() -> None:
    stats = {z: cm.zone_loss_stats(64, z, 0.1) for z in (1, 2, 4)}
    for s in stats.values():
        assert s.mean_lost_per_hour == pytest.approx(6.4)
    assert stats[1].variance_lost_per_hour == pytest.approx(64**2 * 0.1 * 0.9)
    assert stats[2].variance_lost_per_hour == pytest.approx(stats[1].variance_lost_per_hour / 2)
    assert stats[4].variance_lost_per_hour == pytest.approx(stats[1].variance_lost_per_hour / 4)
    assert stats[4].prob_lose_all_per_hour == pytest.approx(1e-4)


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(ValueError, match="ckpt_hours"):
        cm.young_interval_hours(-1, 1)
    with pytest.raises(ValueError, match="restart_hours"):
        cm.optimal_interval_hours(0.05, 10, 0.2)
    with pytest.raises(ValueError, match="zones"):
        cm.zone_loss_stats(10, 4, 0.1)
    assert cm.effective_cost_per_useful_hour(0.7, 0.05, 10, 1.0) == math.inf
