"""The Dagster code location: ``dagster dev -m pipelines.definitions``.

Builds the default :class:`Definitions` (the configured pipelines, default resources) at
import; everything it is built from lives in ``pipelines/code_location.py``, which
``spotfleet main`` and the tests import instead (one build, with their resources).
"""

from __future__ import annotations

from dagster import Definitions

from pipelines.code_location import (  # noqa: F401 - re-exported (older imports of these names)
    build_definitions,
    checks_job_name,
    main_job_name,
    pipeline_job_name,
    report_job_name,
)
from pipelines.config import PipelineConfigError


def _load() -> Definitions:
    try:
        return build_definitions()
    except PipelineConfigError as exc:
        # the message lists every problem with its file, field and fix; the code location
        # fails to load with it (nothing runs, nothing is retried), without our call stack
        raise PipelineConfigError(str(exc)) from None


defs = _load()
