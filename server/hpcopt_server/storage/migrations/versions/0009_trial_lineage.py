"""population-based training: a trial's lineage

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29 13:10:00

``trials.lineage``: for ``algorithm: pbt``, the member an interval trains, its epochs,
the trial whose checkpoint it starts from and what the explore step changed (JSON;
NULL for every other algorithm).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lineage', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('lineage')
