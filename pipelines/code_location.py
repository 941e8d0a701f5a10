"""What the code location serves, built on demand: ``build_definitions`` and the job names.

``pipelines/definitions.py`` (``dagster dev -m pipelines.definitions``) builds the default
:class:`Definitions` from it at import; ``spotfleet main`` and the tests build their own
(with their resources) from here, without paying for the default one too (~0.14 s).

Pipelines come from ``$SPOTFLEET_PIPELINES`` (YAML file(s), ':'-separated) or the
example ``pipelines/examples/two_stage.yaml``. Each pipeline gets its own assets
(key prefix = pipeline name), a job that materializes its whole graph, and an
hourly (``schedule_cron``) refresh of its statistics and cost report; one automation
sensor refreshes those assets whenever a training attempt records its node sessions.
"""

from __future__ import annotations

import os

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Definitions,
    RunFailureSensorContext,
    RunRequest,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
    run_failure_sensor,
)

from assets.pipeline_assets import PipelineAssets, build_pipeline_assets
from pipelines.config import PipelineConfig, load_default_pipelines
from pipelines.resources import FleetResource, StatsDB


def pipeline_job_name(pipeline: str) -> str:
    return f"{pipeline}__train_all"


def main_job_name(pipeline: str) -> str:
    """The job ``spotfleet main`` runs: the whole graph AND every check, in one run."""
    return f"{pipeline}__main"


def checks_job_name(pipeline: str) -> str:
    return f"{pipeline}__checks"


def report_job_name(pipeline: str) -> str:
    return f"{pipeline}__report_and_checks"


def checks_after_failure_sensor(built: list[PipelineAssets], report_jobs: list):
    """After a run that trained a pipeline's stage and FAILED: run its cost report + checks.

    Dagster resolves a check planned in a failed run (e.g. "Materialize all" in the UI) as
    "execution failed" although it never ran. The follow-up ``<pipeline>__report_and_checks``
    run evaluates each check on what was recorded, or skips it (no result -> "Skipped"), and
    becomes the check's latest execution. Not for a run that Dagster will retry.
    """
    from dagster._core.storage.tags import WILL_RETRY_TAG

    @run_failure_sensor(name="spotfleet_checks_after_failed_run", default_status=DefaultSensorStatus.RUNNING,
                        minimum_interval_seconds=10, request_jobs=report_jobs,
                        description="After a failed training run: cost report + checks, so that a check "
                                    "that could not run shows as Skipped (or its real result), not as "
                                    "\"execution failed\".")
    def checks_after_failed_run(context: RunFailureSensorContext):
        run = context.dagster_run
        if run.tags.get(WILL_RETRY_TAG) == "true":
            return
        selected = set(run.asset_selection or ())
        for pa in built:
            if run.job_name in (pipeline_job_name(pa.prefix), main_job_name(pa.prefix)) \
                    or selected & set(pa.train_keys):
                yield RunRequest(run_key=f"{run.run_id}:{pa.prefix}", job_name=report_job_name(pa.prefix),
                                 tags={"spotfleet/after_failed_run": run.run_id})

    return checks_after_failed_run


def _gfs_assets() -> list:
    """The GFS scheduling assets (assets/gfs.py) when present and loadable.

    A broken GFS module must not take the training pipelines down with it: the error is
    reported as a warning naming the module, and the rest of the code location loads.
    """
    import importlib.util
    import warnings

    if importlib.util.find_spec("assets.gfs") is None:
        return []
    try:
        from assets.gfs import gfs_assets
    except Exception as exc:  # noqa: BLE001 - any definition error in that module
        warnings.warn(f"assets/gfs.py could not be loaded ({type(exc).__name__}: {str(exc)[:300]}); "
                      "serving the code location without the GFS assets", stacklevel=2)
        return []
    return list(gfs_assets)


def build_definitions(pipelines: list[PipelineConfig] | None = None,
                      resources: dict | None = None, include_gfs: bool = True,
                      loggers: dict | None = None) -> Definitions:
    """Definitions for ``pipelines`` (default: the configured ones) with the given resources
    (and ``loggers`` for every job, e.g. ``spotfleet main``'s concise ``console``)."""
    configs = pipelines if pipelines is not None else load_default_pipelines()
    built: list[PipelineAssets] = [build_pipeline_assets(c) for c in configs]
    assets: list = []
    checks: list = []
    jobs: list = []
    schedules: list = []
    refresh_keys = []
    train_keys = []
    report_jobs = []
    for pa in built:
        assets += pa.assets + pa.external
        checks += pa.checks
        # Checks are not planned in the training job: Dagster shows a planned check whose
        # upstream step failed as "execution failed" (red) although it never ran. They run in
        # <pipeline>__checks, __report_and_checks (after a failed run), __main and by automation.
        jobs.append(define_asset_job(
            pipeline_job_name(pa.prefix), selection=AssetSelection.assets(*pa.all_keys).without_checks(),
            description=f"Materialize the whole graph of pipeline {pa.prefix}: market, statistics, "
                        "forecast, plan, every training stage, cost report (checks: the "
                        f"{checks_job_name(pa.prefix)} job)."))
        # spotfleet main's job plans the checks too (one Dagster run instead of two: ~0.5 s
        # of run bookkeeping). When it succeeds, each check ran on this run's data (or emitted
        # nothing -> Skipped); when it fails, spotfleet main (or the run-failure sensor) runs
        # <pipeline>__report_and_checks next, whose outcome becomes the checks' latest.
        jobs.append(define_asset_job(
            main_job_name(pa.prefix), selection=AssetSelection.assets(*pa.all_keys),
            description=f"What `spotfleet main` runs: the whole graph of pipeline {pa.prefix} and every "
                        f"asset check in one run (after a failed run: {report_job_name(pa.prefix)})."))
        jobs.append(define_asset_job(
            checks_job_name(pa.prefix), selection=AssetSelection.checks_for_assets(*pa.all_keys),
            description=f"Evaluate every asset check of pipeline {pa.prefix} on the latest recorded run."))
        report_jobs.append(define_asset_job(
            report_job_name(pa.prefix),
            selection=AssetSelection.assets(pa.key("cost_report")) | AssetSelection.checks_for_assets(*pa.all_keys),
            description=f"The cost report of {pa.prefix}'s latest recorded run and every check (what "
                        "spotfleet main runs after a training run that failed)."))
        jobs.append(report_jobs[-1])
        refresh = define_asset_job(f"{pa.prefix}__refresh_stats", selection=AssetSelection.assets(*pa.refresh_keys),
                                   description="Refresh preemption statistics, forecast and cost report.")
        jobs.append(refresh)
        refresh_keys += pa.refresh_keys
        train_keys += pa.train_keys
        if pa.config.schedule_cron:
            schedules.append(ScheduleDefinition(
                name=f"{pa.prefix}__refresh_schedule", job=refresh, cron_schedule=pa.config.schedule_cron,
                default_status=DefaultScheduleStatus.STOPPED,
                description="Refresh statistics and cost report on a schedule (turn on in the UI)."))
    if include_gfs:
        assets += _gfs_assets()
    sensors = [AutomationConditionSensorDefinition(
        "spotfleet_automation",
        target=(AssetSelection.assets(*refresh_keys) | AssetSelection.checks_for_assets(*train_keys))
        if refresh_keys else AssetSelection.all(),
        default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=30,
        description="Declarative automation: refresh statistics, forecasts and cost reports when "
                    "training runs land (node sessions recorded).")]
    if built:
        sensors.append(checks_after_failure_sensor(built, report_jobs))
    res = {"stats_db": StatsDB(url=os.environ.get("SPOTFLEET_DB_URL", "")),
           "fleet": FleetResource()}
    res.update(resources or {})
    # Steps are light (training runs in node-runner subprocesses), so runs execute their
    # steps in one process: no per-step interpreter start-up, retries still per step.
    return Definitions(assets=assets, asset_checks=checks, jobs=jobs, schedules=schedules,
                       sensors=sensors, resources=res, executor=in_process_executor, loggers=loggers)
