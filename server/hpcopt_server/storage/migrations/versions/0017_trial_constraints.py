"""constraints: a trial's outcome against its campaign's constraints

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 07:20:00

``trials.constraint_values`` (JSON: one value per constraint of the spec, <= 0 holds,
null where unmeasured), ``trials.violation`` (0: feasible, > 0 infeasible; NULL: no
outcome, or no constraints) and ``trials.broken`` (what was broken, for people). Views
rank by ``violation`` first: feasible trials before infeasible ones.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('constraint_values', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('violation', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('broken', sa.Text(), nullable=False, server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('broken')
        batch_op.drop_column('violation')
        batch_op.drop_column('constraint_values')
