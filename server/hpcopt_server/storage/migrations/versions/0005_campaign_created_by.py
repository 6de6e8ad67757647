"""campaigns remember the token that created them

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 09:00:00

``campaigns.created_by``: the id of the API token that created or imported the campaign
(NULL with auth off, and for campaigns from before this revision), and
``campaigns.submitted_at``: when this server received it (an import keeps the original
``created_at``). Indexed together for the per-token creation quota.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('created_by', sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column('submitted_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.create_index('ix_campaigns_created_by', ['created_by', 'submitted_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_index('ix_campaigns_created_by')
        batch_op.drop_column('submitted_at')
        batch_op.drop_column('created_by')
