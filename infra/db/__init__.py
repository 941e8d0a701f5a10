"""The statistics database: node sessions, preemptions, checkpoints, attempts, cost lines.

SQLite file by default (``./var/spotfleet.db``), PostgreSQL by URL through
``SPOTFLEET_DB_URL`` (e.g. ``postgresql+psycopg://user@host:5432/spotfleet``).
Schema changes go through the alembic migrations in ``infra/db/migrations``.
"""

from infra.db.models import (
    Base,
    CheckpointRecord,
    CostLine,
    MembershipChange,
    NodeSessionRecord,
    PreemptionEvent,
    StageAttempt,
)
from infra.db.session import current_revision, db_url, make_engine, session_scope, upgrade

__all__ = [
    "Base",
    "CheckpointRecord",
    "CostLine",
    "MembershipChange",
    "NodeSessionRecord",
    "PreemptionEvent",
    "StageAttempt",
    "current_revision",
    "db_url",
    "make_engine",
    "session_scope",
    "upgrade",
]
