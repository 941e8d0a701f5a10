"""Training simulator: hand-worked timelines, accounting identities, the real policy."""

from __future__ import annotations

import dataclasses

import pytest

from checkpointing.training_sim import PolicySpec, Range, SimConfig, simulate_run
from checkpointing.training_sim.thesis import preset

TINY = SimConfig(
    total_steps=30,
    step_seconds=Range(1.0, 1.0),
    ckpt_seconds=Range(2.0, 2.0),
    backup_seconds=Range(5.0, 5.0),
    alloc_seconds=Range(10.0, 10.0),
    prep_seconds=Range(20.0, 20.0),
    grace_seconds=30.0,
    spot_price_per_hour=3600.0,  # $1 per second: cost == total seconds
)


def test_no_preemption_timeline() -> None:
    r = simulate_run(TINY, PolicySpec("static", every=10), mttp_seconds=None, seed=0)
    # alloc 10 + prep 20 + 30 steps + 3 saves x 2 s
    assert (r.total_seconds, r.compute_seconds, r.save_seconds, r.preemptions) == (66, 30, 6, 0)
    assert r.cost_dollars == pytest.approx(66)


def test_kill_after_backup_keeps_the_checkpoint() -> None:
    # VM up at t=10, killed at 48.5: save at step 10 ends at 42, its backup at 47 < 48.5.
    r = simulate_run(
        TINY, PolicySpec("static", every=10), mttp_seconds=1e4, seed=0, lifetimes_seconds=[38.5]
    )
    assert r.recompute_seconds == pytest.approx(6.5)  # steps 11-16 and half of step 17
    assert r.compute_seconds == pytest.approx(16.5 + 20)
    assert (r.save_seconds, r.alloc_seconds, r.prep_seconds) == (6, 20, 40)
    assert r.total_seconds == pytest.approx(102.5)


def test_kill_before_backup_finishes_loses_the_checkpoint() -> None:
    # Killed at 46, the step-10 backup would finish at 47: back to step 0.
    r = simulate_run(
        TINY, PolicySpec("static", every=10), mttp_seconds=1e4, seed=0, lifetimes_seconds=[36.0]
    )
    assert r.recompute_seconds == pytest.approx(14.0)
    assert r.total_seconds == pytest.approx(112.0)


def test_adaptive_policy_takes_an_emergency_save_on_notice() -> None:
    # Bootstrap insurance save at step 10 measures delta=2, beta=5: 1+2+5 < 30, so no more
    # insurance saves. Kill at 90, notice at 60 = end of step 28: emergency save (2+5 s),
    # VM released at 67, replacement ready at 97, steps 29-30 -> done at 99, nothing lost.
    r = simulate_run(
        TINY, PolicySpec("adaptive"), mttp_seconds=1e4, seed=0, lifetimes_seconds=[80.0]
    )
    assert r.emergency_saves == 1 and r.failed_emergency_saves == 0
    assert r.recompute_seconds == 0
    assert (r.save_seconds, r.alloc_seconds, r.prep_seconds) == (9, 20, 40)
    assert r.total_seconds == pytest.approx(99.0)


def test_async_saver_stalls_only_for_the_copy() -> None:
    cfg = dataclasses.replace(TINY, async_saver=True, stall_seconds=Range(0.5, 0.5))
    r = simulate_run(cfg, PolicySpec("static", every=10), mttp_seconds=None, seed=0)
    assert r.save_seconds == pytest.approx(1.5)
    # the background part (1.5 s of dump + 5 s backup) > 10 steps? no: saves never wait
    fast = dataclasses.replace(cfg, backup_seconds=Range(20.0, 20.0))
    r2 = simulate_run(fast, PolicySpec("static", every=10), mttp_seconds=None, seed=0)
    # persist of save 1 (1.5 + 20 s) outlasts the next 10 steps: save 2 waits 11.5 + 0.5 s
    assert r2.save_seconds == pytest.approx(0.5 + 12.0 + 12.0)


@pytest.mark.parametrize("table", ["6.2", "6.3"])
def test_bulk_policy_feeding_equals_per_step_decisions(table: str) -> None:
    cfg, policies = preset(table)
    cfg = dataclasses.replace(cfg, total_steps=20_000)
    for seed in range(2):
        bulk = simulate_run(cfg, policies[0], mttp_seconds=3600, seed=seed)
        each = simulate_run(cfg, policies[0], mttp_seconds=3600, seed=seed, exhaustive=True)
        for field in dataclasses.fields(bulk):
            assert getattr(bulk, field.name) == pytest.approx(getattr(each, field.name))


def test_accounting_identities_hold_on_random_runs() -> None:
    cfg, policies = preset("6.3")
    cfg = dataclasses.replace(cfg, total_steps=5_000)
    for policy in policies:
        for seed in range(3):
            r = simulate_run(cfg, policy, mttp_seconds=1800, seed=seed)
            parts = r.compute_seconds + r.save_seconds + r.alloc_seconds + r.prep_seconds
            assert r.total_seconds == pytest.approx(parts)
            assert 0 <= r.recompute_seconds <= r.compute_seconds
            useful = r.compute_seconds - r.recompute_seconds
            assert useful == pytest.approx(5_000 * 19.75, rel=0.01)
            if policy.kind == "on-demand":
                assert r.preemptions == 0 and r.recompute_seconds == 0


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ValueError, match="ckpt_seconds"):
        dataclasses.replace(TINY, ckpt_seconds=Range(3.0, 1.0))
    with pytest.raises(ValueError, match="total_steps"):
        dataclasses.replace(TINY, total_steps=0)
    with pytest.raises(ValueError, match="every"):
        PolicySpec("static")
    with pytest.raises(ValueError, match="policy"):
        PolicySpec.parse("sometimes")


def test_thrashing_job_is_reported_not_looped_forever() -> None:
    with pytest.raises(ValueError, match="thrashes"):
        simulate_run(
            TINY, PolicySpec("static", every=10), mttp_seconds=5.0, seed=0, max_preemptions=500
        )


def test_insurance_always_protects_against_unannounced_kills() -> None:
    # GPT-117M preset, but 1 kill in 10 comes without notice. Algorithm 1 ("auto") took
    # no insurance saves (the emergency save fits), so those kills lose hours of work.
    cfg, _ = preset("6.2")
    cfg = dataclasses.replace(cfg, total_steps=30_000, notice_probability=0.9)
    mean = {}
    for mode in ("auto", "always"):
        runs = [
            simulate_run(
                cfg,
                PolicySpec("adaptive", every=10_000, insurance=mode),
                mttp_seconds=10_800,
                seed=s,
            )
            for s in range(8)
        ]
        mean[mode] = sum(r.recompute_seconds for r in runs) / len(runs)
    assert mean["always"] * 5 < mean["auto"]
    with pytest.raises(ValueError, match="notice_probability"):
        dataclasses.replace(cfg, notice_probability=1.5)
