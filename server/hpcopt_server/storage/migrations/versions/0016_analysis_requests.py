"""analyses of finished trials, asked for after the fact

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 03:30:00

``analysis_requests``: one per trial, QUEUED by ``POST /trials/{id}/analysis``, leased
to an agent of the campaign (RUNNING), then DONE or FAILED (``storage/analyses.py``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'analysis_requests',
        sa.Column('trial_id', sa.Integer(), nullable=False),
        sa.Column('campaign_id', sa.Integer(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('requested_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column('agent_id', sa.String(length=64), nullable=False),
        sa.Column('lease_id', sa.String(length=64), nullable=False),
        sa.Column('lease_expires_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column('finished_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('trial_id'),
    )
    op.create_index('ix_analysis_requests_campaign_state', 'analysis_requests', ['campaign_id', 'state'])


def downgrade() -> None:
    op.drop_index('ix_analysis_requests_campaign_state', table_name='analysis_requests')
    op.drop_table('analysis_requests')
