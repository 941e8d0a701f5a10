"""Fixtures for the Dagster code location tests: statistics DBs (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN_URL = os.environ.get("SPOTFLEET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _pg_available() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL.replace("postgresql+psycopg", "postgresql"), connect_timeout=3):
            return None
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database for this test session (dropped afterwards)."""
    why = _pg_available()
    if why:
        pytest.skip(f"PostgreSQL at {PG_ADMIN_URL} not reachable ({why}); start it or set SPOTFLEET_TEST_PG_URL")
    import psycopg

    name = f"spotfleet_test_{uuid.uuid4().hex[:10]}"
    admin = PG_ADMIN_URL.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        from infra.db.session import dispose_engines

        dispose_engines()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> str:
    """A fresh statistics DB URL: a SQLite file, or the session's PostgreSQL database (cleaned)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stats.db'}"
    return _empty_schema(request.getfixturevalue("pg_url"))


@pytest.fixture
def pg_fresh_url(pg_url) -> str:
    """The session's PostgreSQL database with an empty schema: tests that use PostgreSQL
    directly must not see the tables, rows or sequences an earlier test left there (a
    migration test inserts rows with explicit ids, so the next insert of id 1 collided)."""
    return _empty_schema(pg_url)


def _empty_schema(url: str) -> str:
    from sqlalchemy import text

    from infra.db.session import make_engine

    eng = make_engine(url)
    with eng.begin() as conn:  # every test starts from an empty schema
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    return url


@pytest.fixture
def demo_checks(tmp_path):
    """Run the example pipeline's checks job on the statistics DB at a URL; returns the
    execution result and the check outcomes keyed by (asset name, check name)."""
    def run(db_url: str):
        from dagster import DagsterInstance

        from pipelines.commands.main_report import check_outcomes
        from pipelines.config import EXAMPLE_PIPELINES, load_pipelines
        from pipelines.definitions import build_definitions, checks_job_name
        from pipelines.resources import FleetResource, StatsDB

        stats = StatsDB(url=db_url, var_dir=str(tmp_path))
        defs = build_definitions(load_pipelines(EXAMPLE_PIPELINES), include_gfs=False,
                                 resources={"stats_db": stats, "fleet": FleetResource(var_dir=str(tmp_path))})
        with DagsterInstance.ephemeral() as instance:
            res = defs.resolve_job_def(checks_job_name("demo")).execute_in_process(instance=instance)
            outcomes = {(c.asset_key.path[-1], c.check_name): c for c in check_outcomes(instance, res)}
        return res, outcomes

    return run
