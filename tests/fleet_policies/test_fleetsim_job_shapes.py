"""The job-shape families (session 15): the job each one hands the policies, and markets that fit it."""

from __future__ import annotations

import pytest

from fleet.simulation.families import FAMILIES, JOB_SHAPES, SHAPE_SEEDS


def test_each_shape_changes_only_the_job_it_names():
    for shape, fields in JOB_SHAPES.items():
        for base in ("v100", "h100"):
            fam, ref = FAMILIES[f"{base}_{shape}"], FAMILIES[base]
            assert fam.load is ref.load and fam.warmup_hours == ref.warmup_hours
            for key in ("work_hours", "restart_seconds", "checkpoint_seconds", "checkpoint_gb"):
                want = fields.get(key, getattr(ref, key))
                if shape == "long" and base == "h100" and key == "work_hours":
                    want = 24.0  # the 116 h window holds no 144 h deadline
                assert getattr(fam, key) == want, (shape, base, key)


def test_heavy_job_spec_has_no_usable_notice_and_short_job_one_restart_of_slack():
    heavy = FAMILIES["v100_heavy"].spec(1.5, 120.0)
    assert heavy.restart_hours == pytest.approx(1200 / 3600) and heavy.checkpoint_hours == pytest.approx(180 / 3600)
    assert not heavy.notice_saves  # 120 s < the 3-minute save: the notice cannot save
    assert FAMILIES["v100"].spec(1.5, 120.0).notice_saves
    short = FAMILIES["h100_short"].spec(1.05, 0.0)
    assert short.deadline_hours - short.work_hours == pytest.approx(short.restart_hours)


def test_long_volatile_markets_hold_the_history_and_a_d_w_3_deadline():
    fam = FAMILIES[f"volatile_long{SHAPE_SEEDS.start}"]
    markets = fam.load(None, 100)  # synthetic: no data folder needed
    assert len(markets) == len(SHAPE_SEEDS)
    spec = fam.spec(3.0, 0.0)
    for market, _ in markets:
        starts = fam.starts(market, spec, 20)
        assert len(starts) == 20 and min(starts) * market.gap_hours >= fam.warmup_hours - 1e-9
        assert market.n_ticks * market.gap_hours >= fam.warmup_hours + spec.deadline_hours
