"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-21 22:10:23.691728
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import hpcopt_server.storage.models

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('agents',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('ranks', sa.Integer(), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('slurm_job_id', sa.String(length=64), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('registered_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_agents_campaign_id'), ['campaign_id'], unique=False)

    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('scopes', sa.String(length=200), nullable=False),
    sa.Column('created_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    op.create_table('campaigns',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('next_number', sa.Integer(), nullable=False),
    sa.Column('finished_count', sa.Integer(), nullable=False),
    sa.Column('created_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('finished_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_campaigns_state'), ['state'], unique=False)

    op.create_table('trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('value_std', sa.Float(), nullable=True),
    sa.Column('agent_id', sa.String(length=64), nullable=False),
    sa.Column('lease_id', sa.String(length=64), nullable=False),
    sa.Column('lease_expires_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('finish_seq', sa.Integer(), nullable=True),
    sa.Column('created_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.Column('started_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
    sa.Column('finished_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('campaign_id', 'number', name='uq_trials_campaign_number')
    )
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.create_index('ix_trials_campaign_finish_seq', ['campaign_id', 'finish_seq'], unique=False)
        batch_op.create_index('ix_trials_campaign_state', ['campaign_id', 'state'], unique=False)
        batch_op.create_index('ix_trials_state_lease', ['state', 'lease_expires_at'], unique=False)

    op.create_table('curves',
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('fold', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trial_id', 'fold', 'step')
    )
    op.create_table('folds',
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('fold', sa.Integer(), nullable=False),
    sa.Column('finished', sa.Boolean(), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('checkpoint_uri', sa.Text(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('updated_at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trial_id', 'fold')
    )
    op.create_table('trial_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('agent_id', sa.String(length=64), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('at', hpcopt_server.storage.models.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('trial_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trial_events_trial_id'), ['trial_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('trial_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trial_events_trial_id'))

    op.drop_table('trial_events')
    op.drop_table('folds')
    op.drop_table('curves')
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index('ix_trials_state_lease')
        batch_op.drop_index('ix_trials_campaign_state')
        batch_op.drop_index('ix_trials_campaign_finish_seq')

    op.drop_table('trials')
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_campaigns_state'))

    op.drop_table('campaigns')
    op.drop_table('api_tokens')
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_agents_campaign_id'))

    op.drop_table('agents')
