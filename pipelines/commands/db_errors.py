"""One-line explanations of statistics-DB URL problems for the CLI (no tracebacks).

``spotfleet db upgrade --url <bad>`` used to print SQLAlchemy's and alembic's whole
stack; :func:`db_url_error` turns the exception into one line naming the URL (password
hidden), where it came from (``--url``, ``--db-url`` or ``$SPOTFLEET_DB_URL``), what is
wrong and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

EXAMPLES = "sqlite:///var/spotfleet.db or postgresql+psycopg://user@host:5432/spotfleet"


def shown_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (unparseable URLs are shown as given)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - show what the user typed
        return url


def db_url_error(url: str, exc: BaseException, flag: str | None) -> str:
    """One line: which URL, from where, what went wrong, how to fix it."""
    from sqlalchemy import exc as sa_exc

    where = flag or ("$SPOTFLEET_DB_URL" if os.environ.get("SPOTFLEET_DB_URL") == url else "the default")
    head = f"statistics DB URL {shown_url(url)!r} (from {where})"
    if isinstance(exc, sa_exc.NoSuchModuleError):
        scheme = url.split("://", 1)[0] if "://" in url else url
        return f"{head}: unknown database type {scheme!r}; use {EXAMPLES}"
    if isinstance(exc, sa_exc.ArgumentError):
        return f"{head} is not a database URL; use {EXAMPLES}"
    if isinstance(exc, ModuleNotFoundError):
        return (f"{head}: its driver module {exc.name!r} is not installed; use {EXAMPLES} "
                "(psycopg is installed with spotfleet)")
    if isinstance(exc, sa_exc.DBAPIError):
        orig = str(getattr(exc, "orig", exc) or exc).strip().splitlines()
        detail = " ".join(x.strip() for x in orig[:2]) if orig else type(exc).__name__
        if url.startswith("sqlite"):
            folder = url.split("///", 1)[-1]
            return (f"{head}: cannot open the SQLite file ({detail}); check that the folder of "
                    f"{folder} exists and is writable")
        return (f"{head}: cannot connect ({detail}); check host, port, user, password and "
                "database name, and that the server is running")
    return f"{head}: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


#: what ``spotfleet cost-report`` says after "does not exist": the reader's consequence and fix
COST_REPORT_FIX = ("so no run is recorded there; nothing was created. Point --db-url (or --var-dir, "
                   "or $SPOTFLEET_DB_URL) at the database `spotfleet main` wrote, e.g. "
                   "sqlite:///var/spotfleet.db, or run `spotfleet main` first")


def require_existing_sqlite(url: str, flag: str | None, fix: str = COST_REPORT_FIX) -> None:
    """For a command that only reads the statistics DB (``spotfleet cost-report``,
    ``spotfleet db current``): a SQLite URL whose file does not exist is a one-line
    ``ValueError`` naming the file, where the URL came from and ``fix`` (the command's
    consequence and remedy), before SQLite would create an empty database there (both
    commands did until 2026-11-27)."""
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
    except Exception:  # noqa: BLE001 - with_db reports a malformed URL
        return
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:" \
            or u.database.startswith("file:"):
        return
    path = Path(u.database).resolve()
    if path.is_file():
        return
    where = flag or ("$SPOTFLEET_DB_URL" if os.environ.get("SPOTFLEET_DB_URL") == url else "the default")
    raise ValueError(f"statistics DB {path} does not exist (URL {shown_url(url)!r}, from {where}), {fix}")


def with_db(url: str, flag: str | None, fn: Callable[[], T]) -> T:
    """``fn()``, with any database/URL error turned into a one-line ``ValueError``."""
    from sqlalchemy import exc as sa_exc

    try:
        return fn()
    except (sa_exc.SQLAlchemyError, ModuleNotFoundError) as exc:
        if isinstance(exc, ModuleNotFoundError) and not _is_driver(exc):
            raise
        raise ValueError(db_url_error(url, exc, flag)) from None


def _is_driver(exc: ModuleNotFoundError) -> bool:
    return (exc.name or "").split(".")[0] in {"psycopg", "psycopg2", "pymysql", "MySQLdb", "asyncpg",
                                              "pg8000", "oracledb", "cx_Oracle", "pyodbc", "pymssql"}
