"""Domain objects to protobuf messages and back: the only place rpc/ builds messages."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from hpcopt.core.records import ACTION_VALUES
from hpcopt.v1 import agent_pb2, campaign_pb2, common_pb2
from hpcopt_server import domain as d
from hpcopt_server.service.agent_messages import Acquisition, HeartbeatReply

CAMPAIGN_STATES = {s: getattr(common_pb2, f"CAMPAIGN_STATE_{s.value}") for s in d.CampaignState}
TRIAL_STATES = {s: getattr(common_pb2, f"TRIAL_STATE_{s.value}") for s in d.TrialState}
TRIAL_STATES_BACK = {v: k for k, v in TRIAL_STATES.items()}


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    out = Timestamp()
    out.FromDatetime(value)
    return out


def param_value(v: d.ParamValue) -> common_pb2.ParamValue:
    if isinstance(v, bool):
        return common_pb2.ParamValue(flag=v)
    if isinstance(v, int):
        return common_pb2.ParamValue(int=v)
    if isinstance(v, float):
        return common_pb2.ParamValue(real=v)
    return common_pb2.ParamValue(str=str(v))


def campaign(s: d.CampaignSummary, *, with_spec: bool = True) -> common_pb2.Campaign:
    """The campaign; listings leave ``spec_json`` empty (GetCampaign has it)."""
    c = s.campaign
    return common_pb2.Campaign(
        id=c.id,
        name=c.name,
        state=CAMPAIGN_STATES[c.state],
        algorithm=c.algorithm,
        metric=c.metric,
        direction=c.direction,
        max_trials=c.max_trials,
        trial_counts=s.trial_counts,
        best_value=s.best_value,
        best_trial_id=s.best_trial_id,
        best_trial_number=s.best_trial_number,
        spec_json=json.dumps(c.spec) if with_spec else "",
        created_at=ts(c.created_at),
        finished_at=ts(c.finished_at),
        owner=c.owner or "",
        pause_reason=c.pause_reason or "",
    )


def fold(f: d.Fold) -> common_pb2.Fold:
    return common_pb2.Fold(
        index=f.index,
        finished=f.finished,
        value=f.value,
        metrics=f.metrics,
        checkpoint_uri=f.checkpoint_uri,
        attempt=f.attempt,
    )


#: How a trial's field becomes its proto field where the types differ.
_TRIAL_WIRE: dict[str, Any] = {
    "state": lambda s: TRIAL_STATES[s],
    "params": lambda p: {k: param_value(v) for k, v in p.items()},
    "values": lambda v: v or [],
    "constraint_values": lambda v: [math.nan if x is None else x for x in v or []],
    "created_at": ts,
    "started_at": ts,
    "finished_at": ts,
}


def trial(t: d.Trial) -> common_pb2.Trial:
    scalars = d.trial_fields(t, common_pb2.Trial.DESCRIPTOR.fields_by_name)
    return common_pb2.Trial(
        **{k: _TRIAL_WIRE[k](v) if k in _TRIAL_WIRE else v for k, v in scalars.items()},
        folds=[fold(f) for f in t.folds],
        curves=[common_pb2.CurvePoint(fold=p.fold, step=p.step, value=p.value) for p in t.curves],
        events=[
            common_pb2.TrialEvent(attempt=e.attempt, kind=e.kind, agent_id=e.agent_id, reason=e.reason, at=ts(e.at))
            for e in t.events
        ],
        lineage=None if t.lineage is None else lineage(t.lineage),
        fidelity=None if t.fidelity is None else fidelity(t.fidelity),
    )


def fidelity(x: d.Fidelity) -> common_pb2.Fidelity:
    return common_pb2.Fidelity(
        rung=x.rung,
        folds=x.folds,
        epochs=x.epochs,
        why=x.why,
        history=[common_pb2.RungResult(**r.as_dict()) for r in x.history],
    )


def lineage(x: d.Lineage) -> common_pb2.Lineage:
    return common_pb2.Lineage(
        member=x.member,
        start_epoch=x.start_epoch,
        stop_epoch=x.stop_epoch,
        parent=x.parent,
        parent_trial_id=x.parent_id or 0,
        previous=x.previous,
        changed_json=json.dumps(x.changed) if x.changed else "",
        unreadable=list(x.unreadable),
    )


def acquisition(a: Acquisition) -> agent_pb2.AcquireResponse:
    status = getattr(agent_pb2.AcquireResponse, f"STATUS_{a.status.value}")
    return agent_pb2.AcquireResponse(
        status=status,
        trial=trial(a.trial) if a.trial else None,
        lease_id=a.lease_id,
        lease_expires_at=ts(a.lease_expires_at),
        retry_after_seconds=a.retry_after_seconds,
        campaign_spec_json=json.dumps(a.campaign_spec) if a.campaign_spec else "",
        wait_reason=a.wait_reason,
    )


def heartbeat(h: HeartbeatReply) -> agent_pb2.HeartbeatResponse:
    return agent_pb2.HeartbeatResponse(action=ACTION_VALUES[h.action], lease_expires_at=ts(h.lease_expires_at))


def analysis_request(r: d.AnalysisRequest) -> campaign_pb2.AnalysisRequest:
    return campaign_pb2.AnalysisRequest(
        trial_id=r.trial_id,
        state=r.state,
        requested_at=ts(r.requested_at),
        finished_at=ts(r.finished_at),
        reason=r.reason,
    )
