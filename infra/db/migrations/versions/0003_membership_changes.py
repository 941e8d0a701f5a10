"""membership_changes: the groups an elastic multi-node stage formed, with the tax of each change

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26 11:20:00

One row per group (rank 0's ``membership`` training event): its kind (form, shrink,
grow, reform, restore), world sizes, nodes, and the pause of a shrink / grow in billed
node-seconds and $ (fleet/providers/membership.py). New table only; nothing else changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('membership_changes',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('attempt_id', sa.Integer(), nullable=True),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('pipeline', sa.String(length=128), nullable=False),
    sa.Column('stage', sa.String(length=128), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('formed_at', sa.Float(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('world_size_before', sa.Integer(), nullable=True),
    sa.Column('world_size', sa.Integer(), nullable=False),
    sa.Column('state_from', sa.String(length=16), nullable=False),
    sa.Column('nodes', sa.String(length=2000), nullable=False),
    sa.Column('pause_seconds', sa.Float(), nullable=False),
    sa.Column('node_seconds', sa.Float(), nullable=False),
    sa.Column('dollars', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['stage_attempts.id'],
                            name=op.f('fk_membership_changes_attempt_id_stage_attempts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_membership_changes'))
    )
    with op.batch_alter_table('membership_changes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_membership_changes_attempt_id'), ['attempt_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_membership_changes_pipeline'), ['pipeline'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('membership_changes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_membership_changes_pipeline'))
        batch_op.drop_index(batch_op.f('ix_membership_changes_attempt_id'))
    op.drop_table('membership_changes')
