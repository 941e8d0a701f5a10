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
