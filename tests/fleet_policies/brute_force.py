"""The exact check of the omniscient DP on tiny markets: the cheapest deadline-meeting run
over every per-tick action sequence the simulator accepts (idle, on-demand, or an
available zone at each tick), replayed through the simulator itself."""

from __future__ import annotations

import itertools

import numpy as np

from fleet.policies.base import IDLE, ON_DEMAND, JobSpec
from fleet.policies.scripted import ScriptedPolicy
from fleet.simulation.engine import PolicyError, simulate
from fleet.simulation.market import Market


def cheapest_scripted_cost(m: Market, spec: JobSpec, n_ticks: int) -> float:
    """$ of the cheapest plan of ``n_ticks`` ticks that meets the deadline (inf if none);
    ``(2 + zones) ** n_ticks`` simulations, so keep markets tiny."""
    locs = [IDLE, ON_DEMAND] + list(range(m.n_zones))
    best = np.inf
    for plan in itertools.product(locs, repeat=n_ticks):
        if any(z >= 0 and not m.available[z, k] for k, z in enumerate(plan)):
            continue
        try:
            r = simulate(ScriptedPolicy(plan, 0), m, spec, 0, observe="oracle")
        except PolicyError:
            continue
        if r.deadline_met:
            best = min(best, r.cost)
    return best
