"""Configuration errors inside a Dagster run: fail once, retry nothing.

A wrong pipeline config (a missing script, an impossible deadline, a zone the market
does not have) fails the same way on every retry, so retrying it only repeats the
stack traces. :func:`config_failure` returns a ``dagster.Failure`` with
``allow_retries=False`` (the step's ``RetryPolicy`` is bypassed) after tagging the run
with ``dagster/retry_on_asset_or_op_failure = false``, which the instance's run
retries (``run_retries`` in dagster.yaml, the daemon's auto re-execution) read when
the run fails: the run is not re-executed either.

Most configuration errors never reach a run: ``pipelines/config.py`` +
``pipelines/validation.py`` reject them when the code location loads. This covers what
can only be seen when the job starts (a script deleted after the code location loaded,
a trace folder that went away, a plan the planner cannot make).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import Failure

#: run tag read by Dagster's run retries: do not re-execute a run failed by a step
NO_RUN_RETRY_TAGS = {"dagster/retry_on_asset_or_op_failure": "false"}
CONFIG_ERROR_TAG = "spotfleet/config_error"


def config_failure(context: Any, description: str, metadata: Mapping[str, Any] | None = None) -> Failure:
    """A ``Failure`` for a configuration error: no step retry and no run retry.

    ``context``: the asset/op execution context (its run gets the no-retry tag).
    Raise the result: ``raise config_failure(context, "...") from None``.
    """
    try:
        context.instance.add_run_tags(context.run.run_id, {**NO_RUN_RETRY_TAGS, CONFIG_ERROR_TAG: "true"})
    except Exception as exc:  # noqa: BLE001 - tagging is best effort; the Failure still stops retries
        context.log.warning(f"could not tag the run against run retries: {exc}")
    return Failure(description=f"configuration error: {description}", metadata=dict(metadata or {}),
                   allow_retries=False)
