"""A trial leaves the server through one mapping (``domain.trial_fields``): REST, gRPC
and the export document each take the fields their record declares, and the lease's
secret never leaves."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

from hpcopt.v1 import common_pb2
from hpcopt_server import domain as d
from hpcopt_server.api.schemas import TrialOut
from hpcopt_server.rpc.convert import trial as trial_proto
from hpcopt_server.service.export import TrialDoc

NOW = datetime(2026, 1, 2, tzinfo=UTC)
PUBLIC = {f.name for f in fields(d.Trial)} - d.PRIVATE_TRIAL_FIELDS - d.NESTED_TRIAL_FIELDS


def _trial() -> d.Trial:
    return d.Trial(
        id=7,
        campaign_id=3,
        number=2,
        state=d.TrialState.COMPLETED,
        attempt=2,
        params={"lr": 0.1, "act": "relu"},
        created_at=NOW,
        value=0.5,
        value_std=0.01,
        values=(0.5, 2.0),
        agent_id="a1",
        lease_id="secret-lease",
        lease_expires_at=NOW,
        error="",
        started_at=NOW,
        finished_at=NOW,
        finish_seq=4,
    )


def test_the_lease_and_the_finish_number_never_leave_whatever_a_record_asks() -> None:
    got = d.trial_fields(_trial(), [f.name for f in fields(d.Trial)])
    assert set(got) == PUBLIC and "secret-lease" not in repr(got)
    assert got["values"] == [0.5, 2.0]


def test_each_transport_carries_the_public_fields_it_declares() -> None:
    t = _trial()
    wire = trial_proto(t)
    for name in PUBLIC:
        if name in ("state", "params") or name.endswith("_at"):
            continue
        assert getattr(wire, name) == d.trial_fields(t, [name])[name], name
    assert wire.state == common_pb2.TRIAL_STATE_COMPLETED and wire.params["act"].str == "relu"
    assert wire.finished_at.ToDatetime(tzinfo=UTC) == NOW
    assert set(common_pb2.Trial.DESCRIPTOR.fields_by_name) >= PUBLIC, "gRPC's Trial carries every public field"
    assert set(TrialOut.model_fields) >= PUBLIC, "REST's Trial carries every public field"
    # The export document leaves out what names this server's rows and agents.
    assert set(TrialDoc.model_fields) & PUBLIC == PUBLIC - {"id", "campaign_id", "agent_id"}
    assert not (set(TrialOut.model_fields) | set(TrialDoc.model_fields)) & d.PRIVATE_TRIAL_FIELDS
