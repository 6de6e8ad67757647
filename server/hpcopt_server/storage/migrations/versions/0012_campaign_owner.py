"""campaigns have owners

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 00:10:00

``campaigns.owner``: the principal that created (or imported) the campaign, the name of
its token, NULL with auth off. Steering, cancel, note writes and budget changes need
that principal or an ``admin`` token. Campaigns created before this revision keep NULL
(they are not backfilled from ``created_by``): every ``submit`` token may change them,
as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_column('owner')
