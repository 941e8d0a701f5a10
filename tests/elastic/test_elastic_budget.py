"""The budget stop on the elastic (multi-node) path of the local fleet: a relaunch after
every node was lost that would spend past ``StageSpec.budget_left_usd`` is not made (the
same ``relaunch_budget_error`` as the single-node path); replacements for a group that
still trains are held back. Placement only: no node process is started."""

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
    run.injector = SimpleNamespace(up_zones=lambda now: ZONES)  # every zone has capacity
    workdir = run._workdir()
    return run, workdir, seen


def _place(run, workdir, first, alive):
    return run._place(4 - len(alive), ZONES, 2, time.time(), workdir, first=first, alive=alive)


def test_a_relaunch_after_every_node_was_lost_is_stopped_by_the_budget(tmp_path):
    run, workdir, _ = _run(tmp_path, budget_left_usd=1e-7)
    assert _place(run, workdir, first=True, alive=[]) == 4  # the launch: the asset's check
    run._nodes.clear()
    with pytest.raises(AttemptFailed, match=rf"(?s){BUDGET_STOP}.*NOT relaunched.*Raise budget_usd"):
        _place(run, workdir, first=False, alive=[])
    assert run._nodes == []  # nothing launched


def test_replacements_are_held_back_while_survivors_train(tmp_path, caplog):
    run, workdir, _ = _run(tmp_path, budget_left_usd=1e-7)
    _place(run, workdir, first=True, alive=[])
    survivors = run._nodes[:2]
    run._nodes[:] = survivors
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
    _place(run, workdir, first=True, alive=[])
    survivors = run._nodes[:2]
    run._nodes[:] = survivors
    assert _place(run, workdir, first=False, alive=survivors) == 2
    run._nodes.clear()
    assert _place(run, workdir, first=False, alive=[]) == 4
    assert run.budget_hold is None
