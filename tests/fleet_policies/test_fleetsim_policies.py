"""Online policies see only the past, and spotfleet's policy meets every deadline while
costing less than every other online policy (reduced start set of the Must-show sweep)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleet.policies.base import JobSpec
from fleet.simulation.engine import simulate
from fleet.simulation.market import Market
from fleet.simulation.sweep import make_policies, run_sweep, start_ticks, summarize

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"


@pytest.fixture(scope="module")
def real_market(shared_data):
    return Market.from_dir(shared_data / AVAIL)


def _decisions(pol, m, spec, start):
    tl: list[tuple[int, int]] = []
    simulate(pol, m, spec, start, timeline=tl)
    return tl


@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_decisions_do_not_depend_on_the_future(real_market, notice):
    spec = JobSpec(24.0, 36.0, notice_seconds=notice)
    start = start_ticks(real_market, spec, 5)[2]
    rng = np.random.default_rng(7)
    for cut_hours in (3.0, 11.0, 20.0):
        cut = start + int(cut_hours / real_market.gap_hours)
        shuffled = real_market.available.copy()
        future = shuffled[:, cut + 1:]
        shuffled[:, cut + 1:] = future[:, rng.permutation(future.shape[1])]
        other = Market(zones=real_market.zones, gap_seconds=real_market.gap_seconds,
                       available=shuffled)
        for pol_a, pol_b in zip(make_policies(), make_policies(), strict=True):
            a = [d for d in _decisions(pol_a, real_market, spec, start) if d[0] <= cut]
            b = [d for d in _decisions(pol_b, other, spec, start) if d[0] <= cut]
            assert a == b, f"{pol_a.name} changed a decision before tick {cut}"


SHAPES = [(24.0, 36.0), (48.0, 72.0), (12.0, 14.0)]


@pytest.mark.slow
@pytest.mark.parametrize("notice", [0.0, 120.0])
@pytest.mark.parametrize("work,deadline", SHAPES)
def test_spotfleet_meets_every_deadline_and_is_cheapest_online(real_market, work, deadline,
                                                               notice):
    spec = JobSpec(work, deadline, restart_hours=0.1, checkpoint_hours=1 / 60,
                   notice_seconds=notice)
    # every 4th of the documented 100 evaluation starts (none used for tuning)
    starts = start_ticks(real_market, spec, 100)[::4]
    res = run_sweep(real_market, spec, make_policies(), starts, with_omniscient=False)
    rows = {r.policy: r for r in summarize(res)}
    ours = rows.pop("spotfleet")
    assert ours.deadline_met_rate == 1.0
    for name, row in rows.items():
        assert ours.mean_cost < row.mean_cost, (name, ours.mean_cost, row.mean_cost)


DOC = Path(__file__).resolve().parents[2] / "docs" / "fleet-policies.md"


def _doc_table(title: str) -> dict[str, float]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"#### {title}\n", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| ")]
    return {r[1].strip(): float(r[2]) for r in rows if r[1].strip() != "policy"}


@pytest.mark.slow
@pytest.mark.parametrize("notice", [0.0, 120.0])
def test_published_12h_14h_table_is_reproduced(real_market, notice):
    spec = JobSpec(12.0, 14.0, restart_hours=0.1, checkpoint_hours=1 / 60, notice_seconds=notice)
    res = run_sweep(real_market, spec, make_policies(), start_ticks(real_market, spec, 100))
    got = {r.policy: round(r.mean_cost, 2) for r in summarize(res)}
    assert got == _doc_table(f"W=12 h, D=14 h, notice {notice:g} s")
