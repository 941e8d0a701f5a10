"""The stage asset's `resumed_from_steps` covers the whole stage (user audit, session 20).

The demo's `train_pretrain` (attempt 1: a notice at step 150, resumed at 151, then the
node group lost; attempt 2 resumed at 300) showed `resumed_from_steps: 300`, the last
attempt's only, among metadata that the docs call the whole stage's, while `spotfleet main`
printed `resumed from steps [151, 300]`. Recorder + SQLite, no Dagster run.
"""

from __future__ import annotations

from assets.cost_assets import stage_metadata
from fleet.providers.base import NodeSession
from infra.db.recorder import record_attempt
from infra.db.session import make_engine, upgrade

T0 = 1_699_920_000.0


def _node(node: str, attempt: int, start: float, first: int, last: int, reason: str) -> NodeSession:
    return NodeSession(node_id=node, stage="pretrain", attempt=attempt, provider="local", cloud="local",
                       region="us-east-1", zone="us-east-1f", instance_type="p3.2xlarge", spot=True,
                       price_per_hour=0.918, launched_at=start, ready_at=start + 60.0,
                       ended_at=start + 900.0, end_reason=reason, first_step=first, last_step=last)


def test_resumed_from_steps_lists_every_attempt_s_resumes(tmp_path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    attempts = {1: [_node("p-a1-s0", 1, T0, 0, 151, "preempted"), _node("p-a1-s1", 1, T0 + 1000, 151, 350,
                                                                           "cancelled")],
                2: [_node("p-a2-s0", 2, T0 + 2000, 300, 500, "completed")]}
    for attempt, sessions in attempts.items():
        record_attempt(eng, run_id="run-1", pipeline="demo", stage="pretrain", attempt=attempt,
                       provider="local", status="completed" if attempt == 2 else "failed",
                       sessions=sessions, events=[], started_at=sessions[0].launched_at,
                       ended_at=sessions[-1].ended_at, start_step=sessions[0].first_step,
                       final_step=sessions[-1].last_step, total_steps=500,
                       on_demand_price=lambda _s: 3.06)
    meta = stage_metadata(eng, "demo", "pretrain", ["run-1"])
    assert meta["resumed_from_steps"].value == "151, 300"
    assert meta["attempts"].value == 2
