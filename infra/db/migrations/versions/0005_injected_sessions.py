"""node_sessions.injected: a session ended by a fault injection, not by the market

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28 09:20:00

The local fleet's fault injection (a pipeline's ``inject_preemptions_at_steps``,
``LocalFleetProvider.preempt_now``) ends a node exactly as a market preemption does, and
before this revision it was recorded as one: the preemption statistics, the forecast's
session update and the plan learned the demo's injected faults as the market's rate. New
column, NOT NULL with a server default of false; existing rows read false (an injection
before this revision cannot be told apart afterwards). Downgrade drops the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ALTER, no batch "move and copy" (docs/database.md, "Migrations")
    op.add_column('node_sessions', sa.Column('injected', sa.Boolean(), nullable=False,
                                             server_default=sa.false()))


def downgrade() -> None:
    op.drop_column('node_sessions', 'injected')  # native DROP COLUMN (SQLite >= 3.35)
