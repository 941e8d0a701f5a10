"""Issue 11 must-show (b): the elastic stage from a pipeline YAML
(``pipelines/examples/elastic.yaml``) through the Dagster assets, ``nodes: 4``, on the
local fleet, with an injected preemption of one node.

The train asset launches the node runner through Dagster Pipes; the local provider hands
the 4-node stage to the elastic controller. The preempted node's workers leave, the
survivors re-form at world size 3 from their in-memory state, and a replacement joins.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance

from pipelines.config import parse_pipelines
from pipelines.definitions import build_definitions, pipeline_job_name
from pipelines.resources import FleetResource, StatsDB

pytestmark = pytest.mark.slow

PIPELINE_YAML = Path(__file__).resolve().parents[2] / "pipelines" / "examples" / "elastic.yaml"


def test_four_node_stage_from_yaml_through_dagster(tmp_path):
    [cfg] = parse_pipelines(yaml.safe_load(PIPELINE_YAML.read_text(encoding="utf-8")))
    assert cfg.stages[0].resources.nodes == 4
    var = tmp_path / "var"
    stats = StatsDB(url="", var_dir=str(var))
    defs = build_definitions([cfg], include_gfs=False,
                             resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(var))})
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(pipeline_job_name(cfg.name)).execute_in_process(
            instance=instance, raise_on_error=False)
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert result.success, "\n".join(m for m in logs if m)[-4000:]
    text = "\n".join(m for m in logs if m)
    assert "fault injection: preemption notice" in text
    # rank 0 insures against losing the whole group (both zones at once), live in the run log
    assert "insurance interval tau" in text and "zones at once" in text, text[-4000:]

    from infra.db.models import NodeSessionRecord, StageAttempt
    from infra.db.recorder import read_table

    eng = stats.engine()
    sessions = read_table(eng, NodeSessionRecord, "elastic")
    attempts = read_table(eng, StageAttempt, "elastic")
    assert len(attempts) == 1  # the preemption was survived inside the attempt
    assert (attempts["status"] == "completed").all()
    reasons = sessions["end_reason"].value_counts().to_dict()
    assert reasons.get("preempted", 0) >= 1 and reasons.get("completed", 0) == 4, reasons
    assert sessions["zone"].isin(["us-east-1f", "us-west-2b"]).all()
    # both zones used at once: the 4 nodes are spread 2 + 2
    first4 = sessions.sort_values("launched_at").head(4)
    assert first4["zone"].value_counts().to_dict() == {"us-east-1f": 2, "us-west-2b": 2}

    # the cost report side: one membership row per group, the shrink and the grow taxed
    from infra.db.models import MembershipChange

    changes = read_table(eng, MembershipChange, "elastic").sort_values("formed_at")
    kinds = changes["kind"].tolist()
    assert kinds[0] == "form" and "shrink" in kinds and "grow" in kinds and "restore" not in kinds, kinds
    taxed = changes[changes["kind"] != "form"]
    assert (taxed["node_seconds"] > 0).all() and (taxed["dollars"] > 0).all(), taxed
    total = float(taxed["dollars"].sum())
    reports = sorted(var.rglob("cost_report.md"))
    assert reports, "the job wrote no cost report"
    md = reports[0].read_text(encoding="utf-8")
    assert "### Elastic stages: node-hours per node" in md
    assert f"**${total:,.4f}** over {len(taxed)} change(s)" in md
    # the same pauses are the `membership` category of the cost split, not `useful`
    from infra.db.models import CostLine

    lines = read_table(eng, CostLine, "elastic")
    assert lines.loc[lines["category"] == "membership", "dollars"].sum() == pytest.approx(total, rel=1e-9)
    assert "| membership (elastic stages: nodes paused by a shrink / grow) |" in md
