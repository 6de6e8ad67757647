"""multi-fidelity: a trial's rung

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 18:10:00

``trials.fidelity``: for ``algorithm: mf``, the unit of work a trial trains now (its
folds and epochs, the ladder's rung, why) and the rungs it finished with their fold
values and seconds (JSON, ``domain.Fidelity.as_dict``; NULL for every other algorithm).
A trial between rungs is in the new state PAUSED (a string: no schema change).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fidelity', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('fidelity')
