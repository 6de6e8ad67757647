"""notes on campaigns and trials

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 09:00:00

``notes``: one free-text note per campaign (``trial_number`` -1) and per trial (its
campaign-local number), with a version for optimistic concurrency and who saved it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'notes',
        sa.Column('campaign_id', sa.Integer(), nullable=False),
        sa.Column('trial_number', sa.Integer(), nullable=False),
        sa.Column('body', sa.Text(), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('updated_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column('updated_by', sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('campaign_id', 'trial_number'),
    )


def downgrade() -> None:
    op.drop_table('notes')
