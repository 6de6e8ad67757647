"""values that were never results are cleared

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29 23:20:00

Before this revision SQLite's agent calls wrote each learning-curve point and each
fold's value into the trial's ``value`` while it ran (a lease renewal took every
parameter named like a column), and an opened fold took its first point as its value.
A trial that then failed or went back to the queue kept that value, which the
dashboard listed and sorted as a result. Only COMPLETED trials have a result and a
PRUNED one the value it reached; an unfinished fold has none.
"""

from __future__ import annotations

from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE trials SET value = NULL, value_std = NULL "
        "WHERE state NOT IN ('COMPLETED', 'PRUNED') AND (value IS NOT NULL OR value_std IS NOT NULL)"
    )
    op.execute("UPDATE folds SET value = NULL WHERE NOT finished AND value IS NOT NULL")


def downgrade() -> None:
    pass  # the values cleared were not results; there is nothing to restore
