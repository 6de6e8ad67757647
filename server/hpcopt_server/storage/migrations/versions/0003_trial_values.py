"""a value per objective for the trials of multi-objective campaigns

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 18:00:00

Existing trials belong to single-objective campaigns: their ``values`` stay NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('values', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('values')
