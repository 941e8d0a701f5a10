"""Dagster's OWN storage on PostgreSQL, from the template docs/deployment.md tells users to copy.

``infra/dagster_home/dagster.postgres.yaml`` is copied to ``$DAGSTER_HOME/dagster.yaml`` with
``DAGSTER_PG_*`` in the environment. With SQLAlchemy 2.1 a plain ``postgresql://`` URL means
psycopg 3, and dagster-postgres's event log then stored no event at all (``NOTIFY run_events,
$1``: syntax error): ``dagster job launch`` left the run NOT_STARTED, the daemons logged the
error every tick (user audit, 2026-11-28). The template now names psycopg2, which
dagster-postgres requires. Real PostgreSQL, a real Dagster instance built from the template,
a real spotfleet job executed on it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

PG_ADMIN_URL = os.environ.get("SPOTFLEET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "dagster_home" / "dagster.postgres.yaml"


@pytest.fixture
def dagster_pg_home(pg_url, tmp_path, monkeypatch):
    """A DAGSTER_HOME with the PostgreSQL template and its own empty database."""
    import psycopg

    admin = PG_ADMIN_URL.replace("postgresql+psycopg", "postgresql")
    name = f"spotfleet_dagster_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    rest = admin.split("://", 1)[1]
    user_host, _db = rest.rsplit("/", 1)
    user, hostport = user_host.rsplit("@", 1)
    user, _, password = user.partition(":")
    host, _, port = hostport.partition(":")
    for k, v in {"DAGSTER_PG_HOST": host, "DAGSTER_PG_PORT": port or "5432", "DAGSTER_PG_USER": user,
                 "DAGSTER_PG_PASSWORD": password, "DAGSTER_PG_DB": name}.items():
        monkeypatch.setenv(k, v)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(TEMPLATE, home / "dagster.yaml")
    try:
        yield home
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_postgres_template_stores_runs_and_events(dagster_pg_home, tmp_path):
    from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus

    from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
    from pipelines.definitions import build_definitions, checks_job_name
    from pipelines.resources import FleetResource, StatsDB

    defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False, resources={
        "stats_db": StatsDB(url=f"sqlite:///{tmp_path / 'stats.db'}", var_dir=str(tmp_path)),
        "fleet": FleetResource(var_dir=str(tmp_path))})
    with DagsterInstance.from_config(str(dagster_pg_home)) as instance:
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        res = defs.resolve_job_def(checks_job_name("demo")).execute_in_process(instance=instance)
        assert res.success
        run = instance.get_run_by_id(res.run_id)
        assert run is not None and run.status == DagsterRunStatus.SUCCESS
        logs = instance.all_logs(res.run_id)
        assert any(e.dagster_event and e.dagster_event.event_type == DagsterEventType.RUN_SUCCESS for e in logs)
        # what the automation sensor reacts to: a materialization of the external node_sessions
        instance.report_runless_asset_event(_materialization(AssetKey(["demo", "node_sessions"])))
        assert instance.get_latest_materialization_event(AssetKey(["demo", "node_sessions"])) is not None


def _materialization(key):
    from dagster import AssetMaterialization

    return AssetMaterialization(asset_key=key, description="recorded by a test")
