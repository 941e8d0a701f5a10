"""Local state of a spotfleet checkout: ``./var`` (DB, checkpoints, reports, DAGSTER_HOME)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "infra" / "dagster_home"


def var_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$SPOTFLEET_VAR_DIR``, else ``./var`` (created)."""
    p = Path(path or os.environ.get("SPOTFLEET_VAR_DIR") or "var").resolve()
    p.mkdir(parents=True, exist_ok=True)
    return p


def prepare_dagster_home(var: Path, postgres: bool = False, overwrite: bool = False) -> Path:
    """Create ``<var>/dagster_home`` with the instance config template; return its path.

    An existing dagster.yaml is kept unless ``overwrite`` (users may have edited it).
    """
    home = var / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    src = TEMPLATES / ("dagster.postgres.yaml" if postgres else "dagster.yaml")
    if overwrite or not target.exists():
        shutil.copyfile(src, target)
    return home


#: ``$SPOTFLEET_DAGSTER_SQLITE_SYNC``: ``off`` (default for ``spotfleet main``) or ``full``
ENV_DAGSTER_SQLITE_SYNC = "SPOTFLEET_DAGSTER_SQLITE_SYNC"


def fast_dagster_sqlite(home: Path) -> bool:
    """Write Dagster's own SQLite storage under ``home`` without an fsync per event.

    Dagster's SQLite event log opens a connection, inserts, commits and closes for every
    event (~150 per main job); each commit waits for an fsync (~5-10 ms here, more under
    load): several seconds of the main job's time outside the training nodes. This sets
    ``PRAGMA synchronous=OFF`` on connections to database files under ``home`` only, in
    this process: a crash of the process loses nothing (SQLite has handed the data to the
    OS), an OS crash or power loss during a run may lose or corrupt the LOCAL run history
    under ``home``. The statistics DB (costs, sessions) is not touched and keeps full
    durability. ``SPOTFLEET_DAGSTER_SQLITE_SYNC=full`` keeps Dagster's default.
    Returns whether the hook was installed.
    """
    if os.environ.get(ENV_DAGSTER_SQLITE_SYNC, "off").lower() == "full":
        return False
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    root = str(Path(home).resolve()) + os.sep

    def _pragma(dbapi_conn, _record) -> None:
        if not isinstance(dbapi_conn, sqlite3.Connection):
            return
        files = [row[2] for row in dbapi_conn.execute("PRAGMA database_list") if row[1] == "main"]
        if files and files[0] and str(Path(files[0]).resolve()).startswith(root):
            dbapi_conn.execute("PRAGMA synchronous=OFF")

    if not event.contains(Engine, "connect", _HOOKS.get(root, _pragma)):
        _HOOKS[root] = _pragma
        event.listen(Engine, "connect", _pragma)
    return True


_HOOKS: dict[str, object] = {}
