"""SkyNomad's settings as JobSpecs, their window tiling and the market padding
(fleet/simulation/skynomad_settings.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.policies.baselines import builtin_policy_factories
from fleet.simulation import skynomad_settings as sn
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market


def test_job_fixes_the_deadline_and_scales_the_work() -> None:
    spec = sn.skynomad_job(51.8333, 1.5)
    assert spec.deadline_hours == pytest.approx(51.8333)
    assert spec.work_hours == pytest.approx(51.8333 / 1.5)
    assert spec.restart_hours == pytest.approx(0.2)
    assert spec.checkpoint_hours == 0.0 and spec.notice_saves  # a preemption loses nothing
    assert spec.probe_seconds == 0.0 and spec.transfer_seconds == 0.0
    assert spec.checkpoint_gb * spec.egress_usd_per_gb == pytest.approx(1.0)  # 50 GB x 0.02
    with pytest.raises(ValueError):
        sn.skynomad_job(10.0, 0.9)


def test_deadlines_are_whole_ticks_of_their_windows() -> None:
    assert sn.deadline_hours_of(sn.H100_DEADLINE_TICKS, 600.0) == pytest.approx(51.8333, abs=1e-4)
    assert sn.deadline_hours_of(sn.V100_DEADLINE_TICKS, 195.0) == pytest.approx(59.9083, abs=1e-4)


def test_tiled_windows_match_their_published_starts() -> None:
    d = sn.deadline_hours_of(sn.V100_DEADLINE_TICKS, 195.0)
    starts = sn.tiled_window_starts(d, 195.0, sn.V100_WINDOWS)
    assert starts == [w * 1106 for w in sn.V100_WINDOWS]
    # research/data/v100.csv: env_start_hours 179.725, ..., 838.717
    hours = [s * 195.0 / 3600.0 for s in starts]
    assert hours[0] == pytest.approx(179.725) and hours[-1] == pytest.approx(838.7167, abs=1e-3)
    with pytest.raises(ValueError):
        sn.tiled_window_starts(0.0, 195.0, (1,))


def test_published_ratio_is_a_ratio_of_means() -> None:
    p = sn.PUBLISHED_V100_USD
    assert sn.published_ratio(p["optimal"], p["skynomad"]) == pytest.approx(1.117, abs=5e-4)
    assert sn.published_ratio(p["optimal"], p["up_s"]) == pytest.approx(1.258, abs=5e-4)
    opt, sky, _ = sn.PUBLISHED_H100_USD[1.5]
    assert sn.published_ratio(opt, sky) == pytest.approx(1.061, abs=5e-4)


def test_padding_adds_unavailable_ticks_and_keeps_prices() -> None:
    avail = np.array([[True, False, True], [True, True, True]])
    prices = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = Market(zones=("us-east-1a", "us-west-2a"), gap_seconds=600.0, available=avail,
               spot_price=prices, on_demand_price=np.array([9.0, 9.0]))
    p = sn.pad_unavailable(m, 2)
    assert p.n_ticks == 5 and not p.available[:, 3:].any()
    assert (p.available[:, :3] == avail).all()
    assert p.spot_price[:, 3:].tolist() == [[3.0, 3.0], [6.0, 6.0]]
    assert sn.pad_unavailable(m, 0) is m
    with pytest.raises(ValueError):
        sn.pad_unavailable(m, -1)


def test_a_job_that_meets_its_deadline_never_reaches_the_padding() -> None:
    n = 40
    m = Market(zones=("us-east-1a",), gap_seconds=600.0, available=np.ones((1, n), dtype=bool))
    spec = sn.skynomad_job(deadline_hours=5.0, ratio=1.5)
    run = simulate(builtin_policy_factories()["spotfleet"](), sn.pad_unavailable(m, 60), spec, 5)
    assert run.deadline_met and run.completion_hours <= 5.0
    assert 5 + run.completion_hours * 6 <= n  # finished inside the real ticks
