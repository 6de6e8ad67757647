"""SQLAlchemy ORM tables. Rows never leave ``storage/``: see ``mapping.py``.

The schema is created and changed only by Alembic (``migrations/``); a test checks that
these models and the migrations agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to storage")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON}


class CampaignRow(Base):
    __tablename__ = "campaigns"
    __table_args__ = (Index("ix_campaigns_created_by", "created_by", "submitted_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Trials created so far; bumped under the campaign row lock, so numbers are dense.
    next_number: Mapped[int] = mapped_column(Integer, default=0)
    # Trials that reached a final state; also the last `trials.finish_seq` handed out.
    finished_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    # The API token that created (or imported) it, NULL with auth off, and when this
    # server received it (an import keeps the original created_at). For the quota.
    created_by: Mapped[int | None] = mapped_column(Integer, default=None)
    submitted_at: Mapped[datetime | None] = mapped_column(default=None)
    # The principal that created (or imported) it: its token's name; NULL with auth off
    # and for campaigns from before owners (migration 0012), which every submit token
    # may change. Steering, cancel, notes and budget need it or an admin token.
    owner: Mapped[str | None] = mapped_column(String(200), default=None)
    # Why a PAUSED campaign is paused (repeated identical failures, or a user); NULL
    # when it is not paused.
    pause_reason: Mapped[str | None] = mapped_column(String(2000), default=None)


class TrialRow(Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("campaign_id", "number", name="uq_trials_campaign_number"),
        Index("ix_trials_campaign_state", "campaign_id", "state"),
        Index("ix_trials_state_lease", "state", "lease_expires_at"),
        Index("ix_trials_campaign_finish_seq", "campaign_id", "finish_seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    value: Mapped[float | None] = mapped_column(Float)
    value_std: Mapped[float | None] = mapped_column(Float)
    # Per objective, for a multi-objective campaign (a JSON list of floats).
    values: Mapped[list[float] | None] = mapped_column(JSON)
    agent_id: Mapped[str] = mapped_column(String(64), default="")
    lease_id: Mapped[str] = mapped_column(String(64), default="")
    lease_expires_at: Mapped[datetime | None]
    error: Mapped[str] = mapped_column(Text, default="")
    # 1, 2, 3, ... in the order trials of a campaign reached a final state. Handed out
    # under the campaign row lock, so "everything after n" is a safe incremental read.
    finish_seq: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # A population-based training interval's lineage (domain.Lineage.as_dict, parent
    # and previous as trial numbers); NULL for every other algorithm.
    lineage: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # A multi-fidelity trial's rung and finished rungs (domain.Fidelity.as_dict); NULL
    # for every other algorithm.
    fidelity: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # A trial its agent failed: the failure's signature (exception type and the task's
    # innermost frame, ``failures.py``); NULL otherwise. Repeated ones pause the campaign.
    failure: Mapped[str | None] = mapped_column(String(300), default=None)
    # The campaign's constraints (``hpcopt.core.constraints``): each one's value (<= 0
    # holds; JSON null where unmeasured), the violation (0: feasible; NULL: the
    # campaign has none, or the trial has no outcome) views rank by, and what was broken.
    constraint_values: Mapped[list[float | None] | None] = mapped_column(JSON, default=None)
    violation: Mapped[float | None] = mapped_column(Float, default=None)
    broken: Mapped[str] = mapped_column(Text, default="", server_default="")


class FoldRow(Base):
    __tablename__ = "folds"

    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column("fold", Integer, primary_key=True)
    finished: Mapped[bool] = mapped_column(default=False)
    value: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checkpoint_uri: Mapped[str] = mapped_column(Text, default="")
    attempt: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime]


class CurveRow(Base):
    __tablename__ = "curves"

    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True)
    fold: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class TrialEventRow(Base):
    __tablename__ = "trial_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    agent_id: Mapped[str] = mapped_column(String(64), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime]


class AgentRow(Base):
    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    ranks: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)
    slurm_job_id: Mapped[str] = mapped_column(String(64))
    campaign_id: Mapped[int | None] = mapped_column(Integer, index=True)
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(64))
    registered_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]
    # The API token that registered the agent; NULL when it registered with auth off.
    token_id: Mapped[int | None] = mapped_column(Integer)
    # When it said goodbye (Deregister on a normal exit); NULL while it runs or if it vanished.
    exited_at: Mapped[datetime | None]
    # Why it left, when it refused to work (the campaign's task or layout); NULL otherwise.
    exit_reason: Mapped[str | None] = mapped_column(Text)


class ApiTokenRow(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # sha256 of the secret, hex: the secret itself is shown once and never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class NoteRow(Base):
    """One note per campaign (``trial_number`` -1) and per trial (its campaign-local
    number, which an export keeps and an id would not)."""

    __tablename__ = "notes"

    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"), primary_key=True)
    trial_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime]
    updated_by: Mapped[str] = mapped_column(String(200), default="")


class NoteVersionRow(Base):
    """Every saved version of a note (``notes`` holds the latest): a save over someone
    else's text keeps theirs here."""

    __tablename__ = "note_versions"

    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"), primary_key=True)
    trial_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    saved_at: Mapped[datetime]
    saved_by: Mapped[str] = mapped_column(String(200), default="")


class ThroughputProbeRow(Base):
    """One width the throughput probe measured for a campaign (``--groups auto`` with no
    measurement yet): the planner's points where no fold has trained at that width."""

    __tablename__ = "throughput_probes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(String(64))
    scheme: Mapped[str] = mapped_column(String(64))
    ranks: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer)
    samples_per_second: Mapped[float] = mapped_column(Float)
    train_samples: Mapped[int] = mapped_column(Integer)
    measured_at: Mapped[datetime]


class FoldAnalysisRow(Base):
    """A fold's curvature and landscape (the spec's ``analysis``): the agent's result as
    plain numbers, checked by ``service/analyses.py``; the fold's latest replaces it."""

    __tablename__ = "fold_analyses"

    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True)
    fold: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    computed_at: Mapped[datetime]


class AnalysisRequestRow(Base):
    """An analysis of a finished trial, asked for after the fact (``POST
    /trials/{id}/analysis``): QUEUED until an agent of its campaign takes it, RUNNING
    under that agent's lease, then DONE or FAILED (``reason`` says why). One per trial:
    asking again replaces it."""

    __tablename__ = "analysis_requests"
    __table_args__ = (Index("ix_analysis_requests_campaign_state", "campaign_id", "state"),)

    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16))
    requested_at: Mapped[datetime]
    agent_id: Mapped[str] = mapped_column(String(64), default="")
    lease_id: Mapped[str] = mapped_column(String(64), default="")
    lease_expires_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    reason: Mapped[str] = mapped_column(Text, default="")


class ServerFlagRow(Base):
    """Server-wide settings that must outlive a process, such as whether auth is on."""

    __tablename__ = "server_flags"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
    changed_at: Mapped[datetime]
