"""What ``spotfleet main`` prints after its run: stages across attempts, checks, THIS run's report.

Everything refers to the run just executed: stage lines come from its attempts and
node sessions (preemptions include nodes lost with their node group), the report
paths are the run's own ``reports/<pipeline>/runs/<run id>/`` files, and nothing is
printed for a figure that does not exist ("-" instead of "nan", no empty zone list).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class SkippedCheck(NamedTuple):
    """A check planned in the run that emitted no result (Dagster shows it as "Skipped")."""

    asset_key: object
    check_name: str
    why: str
    passed = None  # neither passed nor failed


def run_checks(defs, cfg, instance, main_result, log_level: str = "INFO") -> list:
    """The check outcomes of ``spotfleet main``'s run (``<pipeline>__main`` plans them all).

    Run succeeded: its own check evaluations (each on this run's data) and a
    ``SkippedCheck`` (with the reason the check logged) for each planned check without one.
    Run failed: Dagster resolves the checks it planned as "execution failed" although they
    never ran, so the ``<pipeline>__report_and_checks`` job runs next (cost report of what
    was recorded + every check, evaluated or skipped) and its outcomes are returned; that
    run becomes the checks' latest execution (the UI shows Skipped, not red).
    """
    from pipelines.code_location import report_job_name

    if main_result.success:
        return check_outcomes(instance, main_result)
    from assets.cost_assets import AFTER_FAILED_RUN_TAG

    res = defs.resolve_job_def(report_job_name(cfg.name)).execute_in_process(
        instance=instance, raise_on_error=False, tags={AFTER_FAILED_RUN_TAG: main_result.run_id},
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}})
    return check_outcomes(instance, res)


def check_outcomes(instance, res) -> list:
    """Evaluations of a run's checks, plus a ``SkippedCheck`` for every planned check without one."""
    from assets.checks import SKIP_LOG

    evaluated = [e.event_specific_data for e in res.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    done = {(c.asset_key, c.check_name) for c in evaluated}
    why, planned = {}, []
    for entry in instance.all_logs(res.run_id):
        if entry.is_dagster_event:
            if entry.dagster_event_type.value == "ASSET_CHECK_EVALUATION_PLANNED":
                planned.append(entry.dagster_event.event_specific_data)
        elif m := SKIP_LOG.match(entry.user_message or ""):
            why[(m["asset"], m["name"])] = m["why"]
    skipped = [SkippedCheck(d.asset_key, d.check_name,
                            why.get((d.asset_key.to_user_string(), d.check_name), "the check's step did not run"))
               for d in planned if (d.asset_key, d.check_name) not in done]
    return evaluated + skipped


def check_line(c) -> str:
    """``check <asset>:<name>: passed | FAILED | WARNING | skipped (why)``."""
    if isinstance(c, SkippedCheck):
        state = f"skipped ({c.why})"
    elif c.passed:
        state = "passed"
    else:
        state = ("FAILED" if c.severity.value == "ERROR" else "WARNING") + (f": {c.description}" if c.description else "")
    return f"  check {c.asset_key.to_user_string()}:{c.check_name}: {state}"


def print_stage_summary(cfg, stats_db, run_id: str) -> None:
    """One line per stage of THIS run, across all its attempts."""
    from assets import cost_tables as ct

    data = ct.for_runs(ct.load(stats_db.engine(), cfg.name), [run_id])
    print("[spotfleet main] stages:")
    for stage in cfg.stages:
        att = ct.attempts_table(data, stage.name)
        if att.empty:
            print(f"  {stage.name}: not run (an upstream step failed or the run stopped before it)")
            continue
        h = ct.stage_history(data, stage.name)
        s = data.sessions[data.sessions["stage"] == stage.name]
        resumes = sorted(int(x) for x in s["first_step"].dropna() if x > 0)
        final = str(h.final_step) if h.final_step is not None else "- (not finished)"
        lost = f", {h.lost_attempts} lost" if h.lost_attempts else ""
        print(f"  {stage.name}: {h.attempts} attempt(s) ({', '.join(att['status'])}{lost}), {h.sessions} node "
              f"session(s), {h.preemptions} preemption(s) (lost node groups included), resumed from steps "
              f"{resumes or 'none'}, final step {final}, zones {h.zones or '- (no node launched)'}, "
              f"${h.cost_usd:.2f}")


def print_report_paths(cfg, var: Path, run_id: str) -> None:
    """THIS run's report files, or say that the run has none (never an older run's)."""
    reports = var / "reports" / cfg.name
    run_dir = reports / "runs" / run_id
    if (run_dir / "cost_report.html").exists():
        print(f"  cost report: {run_dir / 'cost_report.html'}")
        print(f"               {run_dir / 'cost_report.md'} | {run_dir / 'cost_report.csv'}")
        print(f"  plot:        {run_dir / 'cost_report.png'}")
        print(f"  period / all runs: {reports / 'cost_by_day.csv'} | {reports / 'cost_all_time.csv'}")
        focus = reports / "focus" / "cost_and_usage_focus.csv"
        if focus.exists():
            print(f"  FOCUS 1.2 export: {focus}" + (" (+ .parquet)" if focus.with_suffix(".parquet").exists() else ""))
    else:
        print(f"  cost report: none for run {run_id[:8]} (it recorded no node session); earlier runs' "
              f"reports are under {reports / 'runs'}")
