"""a fold's curvature and landscape

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 20:45:00

``fold_analyses``: what the agent computed at a fold's end when the campaign has an
``analysis`` section (Hessian eigenvalues, spectral density, loss surfaces), one row
per trial and fold, the document plain JSON numbers (``service/analyses.py``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'fold_analyses',
        sa.Column('trial_id', sa.Integer(), nullable=False),
        sa.Column('fold', sa.Integer(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('document', sa.JSON(), nullable=False),
        sa.Column('computed_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('trial_id', 'fold'),
    )


def downgrade() -> None:
    op.drop_table('fold_analyses')
