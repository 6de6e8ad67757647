"""auth flag that outlives tokens; agents bound to their token

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 01:00:00

A database that has ever had a token had auth on under 0001's rule ("on while a token
exists"), so it starts with the flag on: revoking its tokens can no longer open it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    flags = op.create_table('server_flags',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('value', sa.String(length=200), nullable=False),
    sa.Column('changed_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('token_id', sa.Integer(), nullable=True))
    had_tokens = op.get_bind().execute(sa.text("SELECT count(*) FROM api_tokens")).scalar()
    if had_tokens:
        op.bulk_insert(flags, [{"name": "auth", "value": "on", "changed_at": datetime.now(UTC)}])


def downgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_column('token_id')
    op.drop_table('server_flags')
