"""The budget stop on the elastic (multi-node) path of the local fleet: the first launch or
a relaunch after every node was lost that would spend past ``StageSpec.budget_left_usd``
is not made (``attempt_budget_error``, the rule of every provider); replacements for a
group that still trains are held back. Placement only: no node process is started."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import pytest

from fleet.providers.base import BUDGET_STOP, AttemptFailed
from fleet.providers.local.elastic_drill import drill_run

ZONES = ["us-east-1a", "us-east-1b"]


def _run(tmp_path, budget_left_usd):
    seen = []
    run = drill_run(tmp_path / "w", tmp_path / "c", nodes=4, zones=ZONES, on_event=seen.append)
    run.spec = dataclasses.replace(run.spec, budget_left_usd=budget_left_usd)
    run.injector = SimpleNamespace(up_zones=lambda now: ZONES,  # every zone has capacity
                                   trace_time=lambda wall=None: 0.0)  # launch prices' tick
    workdir = run._workdir()
    return run, workdir, seen


def _place(run, workdir, first, alive):
    return run._place(4 - len(alive), ZONES, 2, time.time(), workdir, first=first, alive=alive)


def test_the_first_launch_and_a_relaunch_after_every_node_was_lost_are_stopped(tmp_path):
    run, workdir, _ = _run(tmp_path, budget_left_usd=1e-7)
    with pytest.raises(AttemptFailed, match=rf"(?s){BUDGET_STOP}.*its first launch.*NOT launched"):
        _place(run, workdir, first=True, alive=[])
    assert run._nodes == []  # nothing launched
    run.spec = dataclasses.replace(run.spec, budget_left_usd=1e6)
    assert _place(run, workdir, first=True, alive=[]) == 4
    run._nodes.clear()  # every node lost
    run.spec = dataclasses.replace(run.spec, budget_left_usd=1e-7)
    with pytest.raises(AttemptFailed, match=rf"(?s){BUDGET_STOP}.*NOT relaunched.*Raise budget_usd"):
        _place(run, workdir, first=False, alive=[])
    assert run._nodes == []


def test_the_spend_counts_the_alive_nodes_and_the_start_up_the_planned_ones(tmp_path):
    from fleet.contract import billed_usd

    run, workdir, _ = _run(tmp_path, budget_left_usd=1e6)
    _place(run, workdir, first=True, alive=[])
    survivors = run._nodes[:2]
    run._nodes[:] = survivors
    for n in survivors:  # launched an hour (market) ago
        n.launched_at -= 3600.0 / run.clock.factor
    ran = sum(n.price for n in survivors)  # one market hour each
    start_up = billed_usd(sum(n.price for n in survivors), run.spec.priors.restart_seconds)
    run.spec = dataclasses.replace(run.spec, budget_left_usd=ran + start_up * 0.99)
    assert _place(run, workdir, first=False, alive=survivors) == 0  # held back
    run.budget_hold = None
    run.spec = dataclasses.replace(run.spec, budget_left_usd=ran + start_up * 1.01 + 1e-3)
    assert _place(run, workdir, first=False, alive=survivors) == 2


def test_replacements_are_held_back_while_survivors_train(tmp_path, caplog):
    run, workdir, _ = _run(tmp_path, budget_left_usd=1e6)
    _place(run, workdir, first=True, alive=[])
    survivors = run._nodes[:2]
    run._nodes[:] = survivors
    run.spec = dataclasses.replace(run.spec, budget_left_usd=1e-7)
    with caplog.at_level("WARNING", logger="fleet.providers.local.multinode"):
        assert _place(run, workdir, first=False, alive=survivors) == 0
        assert _place(run, workdir, first=False, alive=survivors) == 0
    assert run._nodes == survivors  # no replacement launched
    holds = [r for r in caplog.records if BUDGET_STOP in r.getMessage()]
    assert len(holds) == 1 and "2 node(s) not launched" in holds[0].getMessage()
    assert BUDGET_STOP in run.budget_hold


@pytest.mark.parametrize("budget", [None, 1e6])
def test_within_the_budget_or_unenforced_the_nodes_are_replaced(tmp_path, budget):
    run, workdir, _ = _run(tmp_path, budget_left_usd=budget)
    assert _place(run, workdir, first=True, alive=[]) == 4
    survivors = run._nodes[:2]
    run._nodes[:] = survivors
    assert _place(run, workdir, first=False, alive=survivors) == 2
    run._nodes.clear()
    assert _place(run, workdir, first=False, alive=[]) == 4
    assert run.budget_hold is None
