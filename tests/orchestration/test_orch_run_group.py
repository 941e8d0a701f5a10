"""Run groups of Dagster re-executions made through Dagster's Python API, without training.

``execute_job(reconstructable(...), reexecution_options=ReexecutionOptions(...))`` sets
``DagsterRun.root_run_id`` but no ``dagster/root_run_id`` tag (the UI sets both). A tiny job
whose op asks the project's own helpers what they see shows which runs a stage, the cost
report and the checks count as "this run", and where the local fleet's market clock starts.
"""

from __future__ import annotations

from dagster import (
    DagsterInstance,
    ReexecutionOptions,
    execute_job,
    in_process_executor,
    job,
    op,
    reconstructable,
)

from assets.cost_assets import ROOT_TAG, run_group
from assets.pipeline_assets import market_clock_start


@op
def ask(context) -> dict:
    return {"group": run_group(context), "clock": market_clock_start(context)}


@job(executor_def=in_process_executor)
def group_job():
    ask()


def test_a_second_re_execution_s_group_has_every_earlier_run_and_its_own_clock(tmp_path):
    target = reconstructable(group_job)
    seen, ids = {}, []

    def run(**kwargs) -> str:
        with execute_job(target, instance=instance, **kwargs) as result:
            assert result.success
            seen[result.run_id] = result.output_for_node("ask")
            ids.append(result.run_id)
            return result.run_id

    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        root = run()
        mid = run(reexecution_options=ReexecutionOptions(root))
        last = run(reexecution_options=ReexecutionOptions(mid))
        runs = {r: instance.get_run_by_id(r) for r in ids}
        # the situation this guards: the Python re-execution path records the root, not the tag
        assert runs[last].root_run_id == root and runs[mid].root_run_id == root
        assert ROOT_TAG not in runs[last].tags and ROOT_TAG not in runs[mid].tags
        starts = {r: instance.get_run_record_by_id(r).start_time for r in ids}
    # the second re-execution's group: root first, then both re-executions, oldest first
    assert seen[last]["group"] == [root, mid, last]
    assert seen[mid]["group"] == [root, mid]
    assert seen[root]["group"] == [root]
    # each run's market clock starts at that run's own start, not at the root's
    for rid, out in seen.items():
        assert out["clock"] == starts[rid]
    assert seen[last]["clock"] > seen[root]["clock"]
