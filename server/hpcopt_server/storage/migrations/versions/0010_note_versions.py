"""every saved version of a note

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 20:30:00

``note_versions``: each save of a note (campaign or trial) as its own row, so that a
save over someone else's text loses nothing and a reader can see and restore any
version. The notes saved before this migration enter as their current version.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'note_versions',
        sa.Column('campaign_id', sa.Integer(), nullable=False),
        sa.Column('trial_number', sa.Integer(), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('body', sa.Text(), nullable=False),
        sa.Column('saved_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column('saved_by', sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('campaign_id', 'trial_number', 'version'),
    )
    op.execute(
        "INSERT INTO note_versions (campaign_id, trial_number, version, body, saved_at, saved_by) "
        "SELECT campaign_id, trial_number, version, body, updated_at, updated_by FROM notes"
    )


def downgrade() -> None:
    op.drop_table('note_versions')
