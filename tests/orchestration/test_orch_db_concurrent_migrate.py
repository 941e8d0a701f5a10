"""Two runs starting at once on a fresh statistics DB (a double-clicked Materialize, a
schedule overlapping a manual run): both migrate it, neither fails.

Each run's first step calls ``StatsDB.engine()`` -> ``upgrade``. Unserialised, both
processes found the DB unmigrated and both created the tables; the loser failed its step
with ``table checkpoints already exists`` (seen with two real concurrent runs of the
example pipeline). Here: two real processes, released together by a barrier, migrate the
same fresh databases (SQLite file; PostgreSQL when reachable).
"""

from __future__ import annotations

import multiprocessing as mp

ROUNDS = 6


def _migrate_all(urls: list[str], barrier, out) -> None:
    from infra.db.session import dispose_engines, upgrade

    errors = []
    for url in urls:
        barrier.wait(timeout=60)
        try:
            upgrade(url)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        dispose_engines()
    out.put(errors)


def _race(urls: list[str]) -> list[str]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_migrate_all, args=(urls, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    errors = [e for _ in procs for e in out.get(timeout=300)]
    for p in procs:
        p.join(timeout=60)
    return errors


def _assert_at_head(url: str) -> None:
    from infra.db.session import current_revision, head_revision

    assert current_revision(url) == head_revision()


def test_two_processes_migrate_a_fresh_sqlite_db_at_once(tmp_path):
    urls = [f"sqlite:///{tmp_path / f'db{i}.db'}" for i in range(ROUNDS)]
    assert _race(urls) == []
    for url in urls:
        _assert_at_head(url)


def test_two_processes_migrate_a_fresh_postgres_db_at_once(pg_url):
    import psycopg

    from infra.db.session import dispose_engines

    admin = pg_url.replace("postgresql+psycopg", "postgresql")
    base = admin.rsplit("/", 1)[0]
    names = [f"{admin.rsplit('/', 1)[1]}_m{i}" for i in range(ROUNDS)]
    with psycopg.connect(admin, autocommit=True) as conn:
        for n in names:
            conn.execute(f'CREATE DATABASE "{n}"')
    urls = [pg_url.rsplit("/", 1)[0] + f"/{n}" for n in names]
    try:
        assert _race(urls) == []
        for url in urls:
            _assert_at_head(url)
    finally:
        dispose_engines()
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            for n in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')
