"""agents end their registration when they exit

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 21:30:00

``agents.exited_at``: set by AgentService.Deregister on an agent's normal exit; NULL for
a live agent and for one that vanished (the dashboard shows the latter as gone once it
has been silent for two heartbeat periods).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('exited_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_column('exited_at')
