"""AdaptivePolicy (thesis Algorithm 1) on hand-worked cases."""

from __future__ import annotations

import math

import pytest

from checkpointing.intervals import thesis_optimum_seconds
from checkpointing.policy import CKPT_PRIOR_WEIGHT, AdaptivePolicy, SaveKind


def _run_steps(policy: AdaptivePolicy, first: int, last: int, seconds: float) -> list[tuple]:
    """Steps first..last of `seconds` each; returns (step, kind) of every save taken."""
    saves = []
    for step in range(first, last + 1):
        policy.record_step(step, seconds)
        d = policy.decide(step, notice=False)
        if d.kind is not None:
            saves.append((step, d.kind))
    return saves


def test_heavy_job_bootstraps_then_saves_every_tau() -> None:
    # GPT-1.3B-like (thesis Table 6.3): T_step 19.75 s, delta 19.5 s, beta 121 s, R 465 s.
    p = AdaptivePolicy(mttp_seconds=10_800, restart_seconds=465, grace_seconds=30)
    assert p.tau_seconds is None and p.next_insurance_step == 10  # bootstrap
    assert _run_steps(p, 1, 10, 19.75) == [(10, SaveKind.INSURANCE)]
    p.record_save(SaveKind.INSURANCE, 10, stall_seconds=19.5, persist_seconds=121.0)
    tau = math.sqrt(2 * 19.5 * (10_800 + 465))
    assert p.tau_seconds == pytest.approx(tau)  # 662.8 s
    assert not p.emergency_feasible  # 19.75 + 19.5 + 121 >= 30
    assert p.next_insurance_step == 10 + 33  # floor(662.8 / 19.75) = 33
    assert _run_steps(p, 11, 42, 19.75) == []
    p.record_step(43, 19.75)
    d = p.decide(43, notice=False)
    assert d.kind is SaveKind.INSURANCE and "tau=663s -> every 33 steps" in d.reason
    assert p.decide(43, notice=False).kind is None  # asked once; rescheduled to 76
    assert p.next_insurance_step == 76
    # A notice that cannot be honoured leaves the insurance schedule in charge.
    p.record_save(SaveKind.INSURANCE, 43, 19.5, 121.0)
    n = p.decide(50, notice=True)
    assert n.kind is None and not n.emergency_feasible and "infeasible" in n.reason


def test_light_job_relies_on_emergency_saves_in_auto_mode() -> None:
    # GPT-117M-like (Table 6.2): 4.6 + 2.55 + 21.5 = 28.65 s < 30 s grace.
    p = AdaptivePolicy(mttp_seconds=10_800, restart_seconds=295, grace_seconds=30)
    _run_steps(p, 1, 10, 4.6)
    p.record_save(SaveKind.INSURANCE, 10, 2.55, 21.5)
    assert p.emergency_feasible
    assert p.next_insurance_step is None  # Algorithm 1: no insurance while emergency fits
    assert _run_steps(p, 11, 500, 4.6) == []
    d = p.decide(501, notice=True)
    assert d.kind is SaveKind.EMERGENCY and d.emergency_feasible
    p.record_save(SaveKind.EMERGENCY, 501, 2.55, 21.5)
    assert p.decide(501, notice=True).kind is None  # only once per notice
    # With a deadline, the test becomes delta + beta < seconds_left.
    q = AdaptivePolicy(mttp_seconds=10_800, ckpt_seconds=2.55, persist_seconds=21.5)
    q.record_step(1, 4.6)
    assert q.decide(1, notice=True, seconds_left=25.0).kind is SaveKind.EMERGENCY
    assert q.decide(1, notice=True, seconds_left=23.0).kind is None


def test_always_mode_keeps_insurance_and_off_mode_has_none() -> None:
    a = AdaptivePolicy(mttp_seconds=10_800, restart_seconds=295, insurance="always")
    _run_steps(a, 1, 10, 4.6)
    a.record_save(SaveKind.INSURANCE, 10, 2.55, 21.5)
    interval = int(math.sqrt(2 * 2.55 * (10_800 + 295)) // 4.6)
    assert interval == 51
    assert a.next_insurance_step == 10 + 51
    off = AdaptivePolicy(mttp_seconds=10_800, insurance="off")
    assert off.next_insurance_step is None
    assert _run_steps(off, 1, 100, 1.0) == []


def test_periodic_saves_more_often_than_tau_suppress_insurance() -> None:
    p = AdaptivePolicy(periodic_every=20, mttp_seconds=10_800, restart_seconds=465)
    saves = []
    for step in range(1, 201):
        p.record_step(step, 19.75)
        d = p.decide(step, notice=False)
        if d.kind is not None:
            saves.append((step, d.kind))
            p.record_save(d.kind, step, 19.5, 121.0)
    assert saves[0] == (10, SaveKind.INSURANCE)  # bootstrap
    assert all(kind is SaveKind.PERIODIC for _, kind in saves[1:])
    assert [s for s, _ in saves[1:]] == list(range(20, 201, 20))


def test_new_estimates_recompute_tau_and_schedule() -> None:
    p = AdaptivePolicy(mttp_seconds=10_800, ckpt_seconds=19.5, persist_seconds=121.0)
    p.record_steps(100, 1975.0)
    assert p.next_insurance_step == 32  # tau = sqrt(2*19.5*10800) = 649 s -> 32 steps
    assert p.update_estimates(mttp_seconds=10_800) is False
    assert p.update_estimates(mttp_seconds=3_600, restart_seconds=465) is True
    assert p.tau_seconds == pytest.approx(math.sqrt(2 * 19.5 * 4065))
    assert p.next_insurance_step == 0 + int(math.sqrt(2 * 19.5 * 4065) // 19.75)  # 20
    p.on_restore(500)
    assert p.next_insurance_step == 520


def test_notice_before_any_measurement_is_best_effort() -> None:
    p = AdaptivePolicy(mttp_seconds=3600)
    p.record_step(1, 1.0)
    d = p.decide(1, notice=True)
    assert d.kind is SaveKind.EMERGENCY and not d.emergency_feasible


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"periodic_every": 0}, "periodic_every"),
        ({"insurance": "sometimes"}, "insurance"),
        ({"mttp_seconds": -5}, "mttp_seconds"),
        ({"grace_seconds": math.nan}, "grace_seconds"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        AdaptivePolicy(**kwargs)


def test_async_saver_result_arriving_later_is_not_asked_twice() -> None:
    # The session records a save when the async saver reports it, a few steps later.
    p = AdaptivePolicy(
        mttp_seconds=10_800, restart_seconds=465, ckpt_seconds=19.5, persist_seconds=121.0
    )
    kinds = []
    for step in range(1, 80):
        p.record_step(step, 19.75)
        d = p.decide(step, notice=False)
        if d.kind is not None:
            kinds.append(step)
        if step == 40:  # the step-33 save's result drains now
            p.record_save(SaveKind.INSURANCE, 33, 19.5, 121.0)
    assert kinds == [33, 66]
    # one emergency answer per notice even before the save is recorded
    assert p.decide(80, notice=True, seconds_left=1000).kind is SaveKind.EMERGENCY
    assert p.decide(81, notice=True, seconds_left=980).kind is None


def test_plan_checkpoint_time_is_the_delta_prior_first_interval_is_the_plans() -> None:
    # The plan exports C = 2.06 s, MTTP = 42249 s, R = 2605 s; the process saves in 1.2 s.
    c, m, r = 2.06, 42_249.0, 2_605.0
    p = AdaptivePolicy(mttp_seconds=m, restart_seconds=r, ckpt_seconds=c, insurance="always")
    plan_tau = thesis_optimum_seconds(c, m, r)
    assert p.tau_seconds == pytest.approx(plan_tau)  # before any save: the plan's interval
    assert p.ckpt_prior_weight == CKPT_PRIOR_WEIGHT == 10.0
    saves = _run_steps(p, 1, 500, 1.0)  # no bootstrap save: the first one is tau in
    first = int(plan_tau // 1.0)
    assert saves == [(first, SaveKind.INSURANCE)]
    p.record_save(SaveKind.INSURANCE, first, stall_seconds=1.2, persist_seconds=3.0)
    assert p.measured_saves == 1
    assert p.ckpt_seconds == pytest.approx((10 * c + 1.2) / 11)
    assert 0.95 < p.tau_seconds / plan_tau < 1.0  # one save moves tau a little, toward 1.2 s
    for i in range(1, 200):
        p.record_save(SaveKind.INSURANCE, first + i, 1.2, 3.0)
    assert p.ckpt_seconds == pytest.approx((10 * c + 200 * 1.2) / 210)
    assert p.tau_seconds == pytest.approx(thesis_optimum_seconds(1.2, m, r), rel=0.03)


def test_delta_prior_weight_is_configurable_and_checked() -> None:
    p = AdaptivePolicy(mttp_seconds=3600, ckpt_seconds=4.0, ckpt_prior_weight=1)
    p.record_save(SaveKind.INSURANCE, 5, 2.0, 1.0)
    assert p.ckpt_seconds == pytest.approx(3.0)  # weight 1: the prior is one save
    with pytest.raises(ValueError, match="ckpt_prior_weight"):
        AdaptivePolicy(mttp_seconds=3600, ckpt_seconds=4.0, ckpt_prior_weight=0)
