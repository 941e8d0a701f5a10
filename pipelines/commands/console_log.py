"""The console logger of ``spotfleet main``: Dagster's colored console, minus the noise
that buries what the user must read.

A configuration error found at job start (``assets.config_failure``: a bad
``checkpoint_uri``, a market that changed since the code location loaded, ...) fails the
first step; Dagster's console then prints the message with a ~25-line stack trace of its
own execution machinery, twice (STEP_FAILURE and RUN_FAILURE), and one ERROR line per
downstream step that was "not executing". The message is the user's; the stack is not
(``spotfleet main`` prints the message once more at the end, with what to do).
:func:`concise_console_logger` keeps every other record; it cuts the stack trace of a
configuration error and drops the "Dependencies for step ... Not executing." lines (the
stage summary at the end says which stages did not run) and the "did not yield or return
expected outputs" lines of skipped asset checks (each prints why it skipped).
``spotfleet main --verbose`` uses Dagster's own console logger: everything.
"""

from __future__ import annotations

import logging

from dagster import Field, InitLoggerContext, colored_console_logger, logger

#: what the cut stack trace is replaced with
STACK_HIDDEN = "(stack trace hidden: a configuration error; `spotfleet main --verbose` shows it)"
CONFIG_ERROR = "configuration error"


class ConfigErrorNoise(logging.Filter):
    """Cuts the stack trace of a configuration-error record and drops the "not executing"
    lines of the steps after it; every other record passes untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "Dependencies for step" in msg and "Not executing." in msg:
            return False
        if "did not yield or return expected outputs" in msg:
            return False  # a skipped asset check (its own line says why) yields nothing
        if CONFIG_ERROR in msg and "Stack Trace:" in msg:
            head = msg.split("\nStack Trace:", 1)[0].rstrip()
            record.msg, record.args = f"{head}\n{STACK_HIDDEN}", ()
        return True


@logger(
    config_schema={"log_level": Field(str, is_required=False, default_value="INFO"),
                   "name": Field(str, is_required=False, default_value="dagster")},
    description="Dagster's colored console logger without the stack traces of configuration "
                "errors and the 'not executing' lines after them (spotfleet main).")
def concise_console_logger(init_context: InitLoggerContext) -> logging.Logger:
    log = colored_console_logger.logger_fn(init_context)
    log.addFilter(ConfigErrorNoise())
    return log
