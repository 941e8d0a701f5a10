"""A stage attempt's record survives a statistics DB that is down when the attempt ends.

A training stage writes its attempt (node sessions, preemptions, checkpoints, cost lines)
into the statistics DB once, after its nodes stopped. If the DB (PostgreSQL killed,
restarted, network gone) does not answer then:

1. ``record_attempt_retrying`` retries the write with exponential backoff (0.5 s, 1 s,
   2 s, ... at most 8 s apart) for at most ``SPOTFLEET_DB_RECORD_RETRY_SECONDS`` seconds
   (default 60), logging one warning per failed try that names the DB and the wait;
2. still down: the record is written as JSON to the pending folder
   (``<state folder>/db_pending/``) and ``RecordNotWritten`` is raised, naming the DB,
   the error and that file;
3. the next run of the same stage (a Dagster retry, a re-execution, the next run)
   calls ``replay_pending`` before it reads the DB: every pending record of that
   pipeline/stage is written and its file deleted. Recording the same attempt again
   replaces its rows (``record_attempt``), so a replay is idempotent.

Every DB call of a stage (a try of the record, the reads before a launch) is also
waited for at most ``SPOTFLEET_DB_TIMEOUT_SECONDS`` (default 60): a FROZEN server
(stopped process, stuck disk, a lock never released) answers nothing, and neither
psycopg nor SQLAlchemy time out a query on an open connection; such a call counts as
"DB not answering" like a refused connection (``call_with_deadline``).

Before, the attempt's sessions, preemptions and costs were dropped and the stage failed
with a bare ``OperationalError``. Only connection-level errors (``is_db_unavailable``)
are retried or spooled; a bug (an integrity error, a bad value) still raises at once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from checkpointing.redact import redact
from fleet.providers.wire import event_from_dict, event_to_dict, session_from_dict, session_to_dict
from infra.db.recorder import record_attempt

ENV_RECORD_RETRY_SECONDS = "SPOTFLEET_DB_RECORD_RETRY_SECONDS"
ENV_DB_TIMEOUT_SECONDS = "SPOTFLEET_DB_TIMEOUT_SECONDS"
#: longest wait (s) for one DB call of a stage (one try of the record, the reads before a
#: launch) before it counts as "DB not answering": a frozen server (process stopped,
#: stuck disk, a lock never released) answers nothing and has no client-side timeout
DEFAULT_DB_TIMEOUT_SECONDS = 60.0
#: how long (s) ``record_attempt_retrying`` keeps retrying a DB that does not answer
DEFAULT_RECORD_RETRY_SECONDS = 60.0
#: first and largest wait (s) between two tries
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0
PENDING_DIR = "db_pending"

log = logging.getLogger(__name__)
T = TypeVar("T")


class DBNotAnswering(TimeoutError):
    """A DB call did not return within its deadline (``call_with_deadline``)."""


def db_timeout_seconds() -> float:
    """``$SPOTFLEET_DB_TIMEOUT_SECONDS``, else 60 (seconds; at least 0.1)."""
    raw = os.environ.get(ENV_DB_TIMEOUT_SECONDS, "").strip()
    return max(0.1, float(raw)) if raw else DEFAULT_DB_TIMEOUT_SECONDS


def call_with_deadline(fn: Callable[[], T], seconds: float, what: str) -> T:
    """``fn()`` in a daemon thread, waited for at most ``seconds`` (wall seconds).

    Past the deadline ``DBNotAnswering`` is raised and the thread is left blocked where
    it is (in a socket read of a frozen server; it ends when the server answers or the
    process exits): the caller gets control back, which no driver timeout gives for a
    connection the server's kernel keeps open. ``fn``'s own exception is re-raised."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"db-call: {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise DBNotAnswering(f"no answer within {seconds:.0f} s ({what}; {ENV_DB_TIMEOUT_SECONDS})")
    if "error" in box:
        raise box["error"]
    return box["value"]


class RecordNotWritten(RuntimeError):
    """The statistics DB did not answer within the retry bound; the record is in ``path``."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class AttemptRecord:
    """Everything ``record_attempt`` needs, in a JSON-able form (times: unix seconds as the
    provider reported them; ``on_demand_price_per_hour``: $/h, one price for every session)."""

    run_id: str
    pipeline: str
    stage: str
    attempt: int
    provider: str
    status: str
    sessions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    started_at: float
    ended_at: float | None = None
    start_step: int | None = None
    final_step: int | None = None
    total_steps: int | None = None
    on_demand_price_per_hour: float | None = None
    error: str | None = None
    root_run_id: str | None = None

    def write(self, engine: Engine) -> int:
        """``record_attempt`` of this record; returns the attempt's row id."""
        price = self.on_demand_price_per_hour
        return record_attempt(
            engine, run_id=self.run_id, pipeline=self.pipeline, stage=self.stage, attempt=self.attempt,
            provider=self.provider, status=self.status,
            sessions=[session_from_dict(s) for s in self.sessions],
            events=[event_from_dict(e) for e in self.events], started_at=self.started_at,
            ended_at=self.ended_at, start_step=self.start_step, final_step=self.final_step,
            total_steps=self.total_steps, error=self.error, root_run_id=self.root_run_id,
            on_demand_price=None if price is None else (lambda _s: price))

    @staticmethod
    def wire(sessions: list, events: list) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``NodeSession`` / ``Event`` objects as the dicts this record stores."""
        return [session_to_dict(s) for s in sessions], [event_to_dict(e) for e in events]

    def file_name(self) -> str:
        return f"{_safe(self.pipeline)}__{_safe(self.stage)}__{_safe(self.run_id)}__a{self.attempt}.json"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


#: SQLite raises OperationalError for its schema errors too ("no such table", "no such
#: column"); only these messages mean the file cannot be used right now
_SQLITE_UNAVAILABLE = ("database is locked", "database is busy", "unable to open", "disk i/o error",
                       "readonly database", "database or disk is full")


def is_db_unavailable(exc: BaseException) -> bool:
    """A connection-level failure (server down or restarting, network, a dropped
    connection, no free connection in the pool, no answer within ``call_with_deadline``),
    as opposed to an error in what was written. On SQLite an ``OperationalError`` counts
    only for a locked, busy or unopenable file: a missing table or column is a schema error
    and raises at once (review, session 20: an old DB file without a migration was
    retried for a minute, spooled, and every later run failed "the DB does not answer")."""
    if isinstance(exc, (DBNotAnswering, PoolTimeout, InterfaceError)):
        return True
    if isinstance(exc, OperationalError):
        orig = getattr(exc, "orig", None)
        if type(orig).__module__ == "sqlite3":
            return any(m in str(orig).lower() for m in _SQLITE_UNAVAILABLE)
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def db_location(engine: Engine) -> str:
    """The engine's URL without its password, for messages."""
    return redact(engine.url.render_as_string(hide_password=True))


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return redact(f"{type(getattr(exc, 'orig', None) or exc).__name__}: {text[0] if text else ''}")


def retry_seconds(value: float | None = None) -> float:
    """The retry bound (s): explicit, else ``$SPOTFLEET_DB_RECORD_RETRY_SECONDS``, else 60."""
    if value is not None:
        return max(0.0, float(value))
    raw = os.environ.get(ENV_RECORD_RETRY_SECONDS, "").strip()
    return max(0.0, float(raw)) if raw else DEFAULT_RECORD_RETRY_SECONDS


def record_attempt_retrying(engine: Engine, record: AttemptRecord, pending_dir: Path, *,
                            bound_seconds: float | None = None,
                            warn: Callable[[str], None] | None = None,
                            sleep: Callable[[float], None] = time.sleep) -> int:
    """Write ``record`` (each try waited for at most ``db_timeout_seconds()`` and what is
    left of the bound); retry a DB that does not answer for at most ``bound_seconds``
    (default ``retry_seconds()``), then spool it into ``pending_dir`` and raise
    ``RecordNotWritten``. ``warn`` gets one line per failed try (default: this module's
    logger). Returns the attempt's row id."""
    warn = warn or log.warning
    bound = retry_seconds(bound_seconds)
    start, wait, tries = time.monotonic(), FIRST_BACKOFF_SECONDS, 0
    where = f"{record.pipeline}/{record.stage} attempt {record.attempt}"
    abandoned = False  # an earlier try timed out: its thread may still commit the same rows
    while True:
        tries += 1
        try:
            left = bound - (time.monotonic() - start)
            return call_with_deadline(lambda: record.write(engine), max(min(db_timeout_seconds(), left), 0.1),
                                      f"recording {where}")
        except Exception as exc:
            abandoned = abandoned or isinstance(exc, DBNotAnswering)
            # the abandoned try and this one both inserted the attempt once the server woke:
            # the loser's unique-key error is that race, not bad data; the next try replaces
            # the rows the winner wrote (record_attempt is one replacing transaction)
            race = abandoned and isinstance(exc, IntegrityError)
            if not (is_db_unavailable(exc) or race):
                raise
            left = bound - (time.monotonic() - start)
            if left <= 0:
                path = spool(record, pending_dir)
                raise RecordNotWritten(
                    f"the statistics DB {db_location(engine)} did not answer for {bound:.0f} s "
                    f"({tries} tries; {first_line(exc)}): the record of {where} (its node sessions, "
                    f"preemptions, checkpoints and costs) is NOT in the DB yet; it is kept in {path} and "
                    f"is written by the next run of this stage once the DB answers", path) from exc
            pause = min(wait, left)
            warn(f"statistics DB {db_location(engine)} unreachable while recording {where} "
                 f"({first_line(exc)}); retrying in {pause:.1f} s (gives up {left:.1f} s from now)")
            sleep(pause)
            wait = min(wait * 2, MAX_BACKOFF_SECONDS)


def spool(record: AttemptRecord, pending_dir: Path) -> Path:
    """Write ``record`` atomically into ``pending_dir``; returns the file."""
    pending_dir.mkdir(parents=True, exist_ok=True)
    path = pending_dir / record.file_name()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.__dict__, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def pending_records(pending_dir: Path, pipeline: str, stage: str) -> list[Path]:
    """The pending record files of one pipeline/stage, oldest first."""
    if not pending_dir.is_dir():
        return []
    prefix = f"{_safe(pipeline)}__{_safe(stage)}__"
    found = []
    for p in pending_dir.glob(f"{prefix}*.json"):
        # the prefix of stage "train" also matches stage "train__x"'s files: the rest of the
        # name must be <run>__a<attempt>
        rest = p.name[len(prefix):-len(".json")]
        if "__" in rest.rsplit("__a", 1)[0]:
            continue
        try:
            found.append((p.stat().st_mtime, p))
        except FileNotFoundError:
            continue
    return [p for _, p in sorted(found)]


def replay_pending(engine: Engine, pending_dir: Path, pipeline: str, stage: str,
                   info: Callable[[str], None] | None = None) -> int:
    """Write every pending record of ``pipeline``/``stage`` into the DB and delete its file.
    Returns how many were written. A DB that does not answer raises (the files stay)."""
    done = 0
    for path in pending_records(pending_dir, pipeline, stage):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:  # written by another replay meanwhile (an abandoned try's)
            continue
        try:
            record = AttemptRecord(**json.loads(text))
        except (ValueError, TypeError) as exc:
            bad = pending_dir / "unreadable" / path.name
            bad.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, bad)
            (info or log.warning)(f"the pending record {path} cannot be read ({type(exc).__name__}: "
                                  f"{exc}); moved to {bad}, not written: inspect it, or delete it")
            continue
        record.write(engine)
        path.unlink(missing_ok=True)
        done += 1
        (info or log.info)(f"wrote the pending record of {record.pipeline}/{record.stage} attempt "
                           f"{record.attempt} (run {record.run_id[:8]}) from {path} into the statistics DB")
    return done
