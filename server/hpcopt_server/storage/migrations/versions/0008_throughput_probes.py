"""the throughput probe's measurements

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29 10:20:00

``throughput_probes``: the widths an agent's probe measured for a campaign that had no
measurement yet (AgentService.ReportThroughput). The planner's points come from the
folds' metrics, and from these where no fold has trained at that width.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'throughput_probes',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('campaign_id', sa.Integer(), nullable=False),
        sa.Column('agent_id', sa.String(length=64), nullable=False),
        sa.Column('scheme', sa.String(length=64), nullable=False),
        sa.Column('ranks', sa.Integer(), nullable=False),
        sa.Column('nodes', sa.Integer(), nullable=False),
        sa.Column('samples_per_second', sa.Float(), nullable=False),
        sa.Column('train_samples', sa.Integer(), nullable=False),
        sa.Column('measured_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('throughput_probes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_throughput_probes_campaign_id'), ['campaign_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('throughput_probes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_throughput_probes_campaign_id'))
    op.drop_table('throughput_probes')
