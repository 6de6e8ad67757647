"""agents say why they refused to work

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 18:10:00

``agents.exit_reason``: set by AgentService.Deregister when an agent leaves without
working, e.g. because its owner does not allow the campaign's ``training.task``; NULL
otherwise. The campaign's agents list shows it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('exit_reason', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_column('exit_reason')
