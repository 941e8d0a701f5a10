"""Make SkyPilot's catalog available offline, from a local copy of ``catalogs/v8``.

SkyPilot reads its catalog from ``<SKY_RUNTIME_DIR or ~>/.sky/catalogs/v8/<cloud>/`` and
downloads a file only when it is missing; a file placed there without
``.meta/<file>.md5`` counts as user-modified and is never re-downloaded. So copying a
catalog folder there is enough for ``sky.catalog.get_hourly_cost`` and friends.

Two details make it work inside one Python process:

* ``sky.catalog.common`` resolves the catalog directory when it is imported, and each
  cloud's ``*_catalog`` module creates its lazy data frames at import time. If SkyPilot
  was already imported (another test, a provider), ``offline_catalog`` points those
  module attributes at the new home and rebuilds the AWS frames and the accelerator
  registry's frame, and restores them on exit.
* ``sky.Resources(...).validate()`` and the optimizer ask which clouds are enabled
  (credentials). ``enable_clouds`` patches ``sky.check.get_cached_enabled_clouds_or_refresh``
  and ``sky.check.check`` the way SkyPilot's own test fixtures do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

CATALOG_VERSION = "v8"

#: module attribute -> catalog file, rebuilt for an already-imported aws_catalog
_AWS_FRAMES = {"_default_df": "aws/vms.csv", "_image_df": "aws/images.csv",
               "_quotas_df": "aws/instance_quota_mapping.csv"}
#: the same for gcp_catalog (a GCP book read under an earlier, removed home read from there)
_GCP_FRAMES = {"_df": "gcp/vms.csv", "_image_df": "gcp/images.csv",
               "_quotas_df": "gcp/accelerator_quota_mapping.csv"}


def catalog_dir(home_dir: str | Path) -> Path:
    """Where SkyPilot looks for the catalog under ``home_dir``."""
    return Path(home_dir) / ".sky" / "catalogs" / CATALOG_VERSION


def install_catalog(home_dir: str | Path, source_dir: str | Path) -> Path:
    """Copy a ``catalogs/v8`` folder (``aws/vms.csv`` ...) under ``home_dir``; return the target.

    No ``.meta/*.md5`` is written, so SkyPilot treats the files as user-modified and
    never tries to refresh them from the internet.
    """
    src = Path(source_dir)
    if not (src / "aws" / "vms.csv").is_file() and not any(src.glob("*/vms.csv")):
        raise FileNotFoundError(
            f"{src}: not a SkyPilot catalog folder (expected <cloud>/vms.csv, e.g. aws/vms.csv); "
            "point source_dir at a copy of skypilot-catalog catalogs/v8")
    dst = catalog_dir(home_dir)
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst, dirs_exist_ok=True)
    return dst


@contextlib.contextmanager
def offline_catalog(home_dir: str | Path, source_dir: str | Path,
                    enable_clouds: Sequence[str] | None = ("aws",),
                    set_home: bool = True) -> Iterator[Path]:
    """Context manager: SkyPilot reads its catalog from ``source_dir`` copied into ``home_dir``.

    Sets ``SKY_RUNTIME_DIR`` (and ``HOME`` if ``set_home``) to ``home_dir`` for the
    duration, repoints already-imported catalog modules, and (unless ``enable_clouds``
    is None) makes SkyPilot believe those clouds are enabled. Yields the catalog dir.
    Everything is restored on exit.
    """
    home = Path(home_dir).resolve()
    target = install_catalog(home, source_dir)
    saved_env = {k: os.environ.get(k) for k in ("SKY_RUNTIME_DIR", "HOME")}
    os.environ["SKY_RUNTIME_DIR"] = str(home)
    if set_home:
        os.environ["HOME"] = str(home)
    restores: list[tuple[object, str, object]] = []

    def patch(obj: object, name: str, value: object) -> None:
        restores.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    try:
        from sky.catalog import common

        patch(common, "_ABSOLUTE_VERSIONED_CATALOG_DIR", str(target))
        aws_mod = sys.modules.get("sky.catalog.aws_catalog")
        if aws_mod is None:
            import sky.catalog.aws_catalog as aws_mod  # noqa: PLC0415
        for attr, fname in _AWS_FRAMES.items():
            if hasattr(aws_mod, attr):
                pull = getattr(aws_mod, "_PULL_FREQUENCY_HOURS", None)
                patch(aws_mod, attr, common.read_catalog(fname, pull_frequency_hours=pull))
        if hasattr(aws_mod, "_user_df"):
            patch(aws_mod, "_user_df", None)
        gcp_mod = sys.modules.get("sky.catalog.gcp_catalog")  # imported later: reads this home
        if gcp_mod is not None:
            for attr, fname in _GCP_FRAMES.items():
                if hasattr(gcp_mod, attr):
                    pull = getattr(gcp_mod, "_PULL_FREQUENCY_HOURS", None)
                    patch(gcp_mod, attr, common.read_catalog(fname, pull_frequency_hours=pull))
        # the accelerator registry's frame (``Resources.validate`` canonicalizes names with
        # it) is made at its import too: imported under an earlier offline_catalog whose home
        # is gone (PriceBook.from_skypilot's temporary one), it downloaded the file instead
        import sky.utils.accelerator_registry as acc_mod  # noqa: PLC0415

        if hasattr(acc_mod, "_accelerator_df"):
            patch(acc_mod, "_accelerator_df", common.read_catalog("common/accelerators.csv"))
        if enable_clouds is not None:
            import sky.check
            from sky.utils import registry

            clouds = [registry.CLOUD_REGISTRY.from_str(c) for c in enable_clouds]
            patch(sky.check, "get_cached_enabled_clouds_or_refresh",
                  lambda *_a, **_k: list(clouds))
            patch(sky.check, "check", lambda *_a, **_k: None)
        yield target
    finally:
        for obj, name, old in reversed(restores):
            setattr(obj, name, old)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
