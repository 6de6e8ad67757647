"""a task that keeps failing pauses its campaign

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 00:40:00

``trials.failure``: the signature of a trial its agent failed (the exception's type and
the task's innermost frame: ``failures.py``), NULL otherwise; ``campaigns.pause_reason``:
why a PAUSED campaign is paused (repeated identical failures, or a user), NULL when it
is not paused.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.add_column(sa.Column('failure', sa.String(length=300), nullable=True))
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pause_reason', sa.String(length=2000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('pause_reason')
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_column('failure')
