"""stage_attempts.root_run_id: the Dagster run group an attempt belongs to

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26 14:00:00

A Dagster re-execution / "retry from failure" run has its own run id and the failed
run's id as ``dagster/root_run_id``. Before this revision the DB did not store the root,
so a report of one re-execution run id (``spotfleet cost-report --run``) could not find
the runs of its group, and its stage's fresh first node read as a second first launch.
New nullable column; existing rows get ``root_run_id = run_id`` (each run its own root:
what every reader assumed). Downgrade drops the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTERs, no batch "move and copy": recreating stage_attempts on SQLite would
    # cascade-delete its node sessions (docs/database.md, "Migrations")
    op.add_column('stage_attempts', sa.Column('root_run_id', sa.String(length=64), nullable=True))
    op.create_index(op.f('ix_stage_attempts_root_run_id'), 'stage_attempts', ['root_run_id'], unique=False)
    op.execute("UPDATE stage_attempts SET root_run_id = run_id WHERE root_run_id IS NULL")


def downgrade() -> None:
    op.drop_index(op.f('ix_stage_attempts_root_run_id'), table_name='stage_attempts')
    op.drop_column('stage_attempts', 'root_run_id')  # native DROP COLUMN (SQLite >= 3.35)
