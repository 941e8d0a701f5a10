"""Engines, sessions and programmatic migrations for the statistics database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

ENV_DB_URL = "SPOTFLEET_DB_URL"
MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def db_url(url: str | None = None, var_dir: str | os.PathLike[str] | None = None, *,
           create_dir: bool = True) -> str:
    """The database URL: explicit, else ``$SPOTFLEET_DB_URL``, else ``<var_dir>/spotfleet.db``.

    ``var_dir`` defaults to ``$SPOTFLEET_VAR_DIR`` or ``./var``, created unless
    ``create_dir`` is False (a reader such as ``spotfleet cost-report`` creates nothing).
    """
    if url:
        return url
    env = os.environ.get(ENV_DB_URL)
    if env:
        return env
    base = Path(var_dir or os.environ.get("SPOTFLEET_VAR_DIR") or "var").resolve()
    if create_dir:
        base.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{base / 'spotfleet.db'}"


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # pragma: no cover - trivial
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


_ENGINES: dict[str, Engine] = {}
#: libpq connect_timeout (seconds) of PostgreSQL engines, unless the URL sets its own
PG_CONNECT_TIMEOUT_SECONDS = 10


def make_engine(url: str | None = None) -> Engine:
    """A (cached) engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout."""
    resolved = db_url(url)
    # the plain scheme, and the "postgres://" alias many hosted databases hand out (SQLAlchemy
    # dropped it), use the driver spotfleet installs: psycopg 3
    for scheme in ("postgresql://", "postgres://"):
        if resolved.startswith(scheme):
            resolved = "postgresql+psycopg://" + resolved[len(scheme):]
    eng = _ENGINES.get(resolved)
    if eng is None:
        if resolved.startswith("sqlite"):
            eng = create_engine(resolved, connect_args={"timeout": 30})
            event.listen(eng, "connect", _sqlite_pragmas)
        else:
            # a new connection to a server that accepts TCP but never answers (frozen, or a
            # host gone behind a firewall) fails after this many seconds instead of hanging
            args = {} if "connect_timeout" in resolved else {"connect_timeout": PG_CONNECT_TIMEOUT_SECONDS}
            eng = create_engine(resolved, pool_pre_ping=True, connect_args=args)
        _ENGINES[resolved] = eng
    return eng


def dispose_engines() -> None:
    """Close every cached engine (tests dropping databases call this)."""
    for eng in _ENGINES.values():
        eng.dispose()
    _ENGINES.clear()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    factory = sessionmaker(engine, expire_on_commit=False)
    with factory() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def _alembic_config(engine: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def upgrade(url_or_engine: str | Engine | None = None, revision: str = "head") -> str | None:
    """Apply migrations up to ``revision``; return the resulting revision id."""
    from alembic import command

    engine = url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)
    cfg = _alembic_config(engine)
    with _migration_lock(engine), engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return current_revision(engine)


#: PostgreSQL advisory lock id held while migrating (any bigint; "spotflee" in ASCII)
MIGRATION_LOCK_ID = 0x73706F74666C6565


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """One migrating process per database at a time.

    Two runs starting at once on a fresh database (a double-clicked Materialize, a
    schedule overlapping a manual run) both found it unmigrated and both created the
    tables: the second failed with ``table checkpoints already exists`` (SQLite runs DDL
    outside a transaction, so nothing serialised them). SQLite: an exclusive ``flock`` on
    ``<db>.migrate.lock`` beside the file; PostgreSQL: a transaction-level advisory lock
    (``upgrade``). The second process then finds the schema at head and does nothing."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:") \
            or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        # no folder for the file: SQLite's own "unable to open database file" is the error
        # the user must see (the CLI explains it), not the lock file's FileNotFoundError
        yield
        return
    import fcntl

    with open(f"{path}.migrate.lock", "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def current_revision(url_or_engine: str | Engine | None = None) -> str | None:
    """The schema revision the database is at (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    engine = url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision shipped with the code."""
    from alembic.script import ScriptDirectory

    cfg = _alembic_config(make_engine("sqlite://"))
    return ScriptDirectory.from_config(cfg).get_current_head()
