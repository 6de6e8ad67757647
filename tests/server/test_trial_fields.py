"""A trial leaves the server through one mapping per boundary: gRPC
(``rpc.convert.trial``, read back by the client's ``hpcopt.Trial.from_proto``), REST
(``api.schemas.trial_out``) and the export document (``service.export.trial_doc``). The
scalars go through ``domain.trial_fields``; nested records through each boundary's own
record type.

The coverage test builds a trial with every field of the domain record set, nested
records included, and requires each field to arrive, with its value, at all four
(gRPC, the client record, REST, the export), or to be named below as private or as
left out of one boundary, with why. A field added to ``domain.Trial`` (or to a fold, a
curve point, an event or a lineage) that one boundary forgets fails here with its path.
OSS Vizier's ``proto_converters_test.py`` is the model."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, datetime
from typing import Any

import pydantic

import hpcopt
from hpcopt.v1 import common_pb2
from hpcopt_server import domain as d
from hpcopt_server.api.schemas import TrialOut, trial_out
from hpcopt_server.rpc.convert import trial as trial_proto
from hpcopt_server.service.export import TrialDoc, trial_doc

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
PUBLIC = {f.name for f in dataclasses.fields(d.Trial)} - d.PRIVATE_TRIAL_FIELDS - d.NESTED_TRIAL_FIELDS

#: Fields a boundary leaves out on purpose, by path (``[]`` marks a list's items).
LEFT_OUT: dict[str, dict[str, str]] = {
    "export": {
        "id": "an id of this server's rows: an import gives new ones",
        "campaign_id": "the document is one campaign",
        "agent_id": "names this server's agents",
        "lineage.parent_id": "an id of this server's: lineage.parent (a number) says which trial",
    },
    "rest": {"lineage.parent_id": "an id of this server's: lineage.parent (a number) says which trial"},
    "grpc": {},
}
#: Fields a boundary carries under another name, by path: the wire's names are public.
RENAMED: dict[str, dict[str, str]] = {
    "grpc": {"lineage.parent_id": "lineage.parent_trial_id"},
    "rest": {},
    "export": {},
}


def full_trial() -> d.Trial:
    """A trial with every field set to something other than its default."""
    return d.Trial(
        id=7,
        campaign_id=3,
        number=2,
        state=d.TrialState.COMPLETED,
        attempt=2,
        params={"lr": 0.1, "act": "relu", "width": 16, "bn": True},
        created_at=NOW,
        value=0.5,
        value_std=0.01,
        values=(0.5, 2.0),
        agent_id="a1",
        lease_id="secret-lease",
        lease_expires_at=NOW,
        error="a warning kept",
        started_at=NOW,
        finished_at=NOW,
        finish_seq=4,
        folds=(d.Fold(0, True, 0.25, {"acc": 0.9}, "file:///ckpt/fold0.pt", 2),),
        curves=(d.CurvePoint(0, 3, 0.75),),
        events=(d.TrialEvent(1, "checkpoint_refused", "a1", "why", NOW),),
        lineage=d.Lineage(
            member=1,
            start_epoch=2,
            stop_epoch=4,
            parent=1,
            previous=0,
            changed={"lr": [0.2, 0.1]},
            parent_id=5,
            unreadable=(0,),
        ),
        fidelity=d.Fidelity(
            rung=2,
            folds=3,
            epochs=9,
            why="in the best 1/3",
            history=(d.RungResult(1, 1, 9, 0.4, (0.4,), 12.5),),
        ),
        constraint_values=(-12.0, None, 0.5),
        violation=0.25,
        broken="val_loss 2.5 > 2",
    )


def _plain(value: Any) -> Any:
    """A record as nested dicts and lists of plain values, on every boundary alike."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, pydantic.BaseModel):
        return _plain(dict(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a plain record by path; a list's items share ``path[]``."""
    if isinstance(value, dict) and not (path.endswith(("params", "metrics", "changed"))):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{path}.{k}" if path else k))
        return out
    if isinstance(value, list) and value and isinstance(value[0], dict):
        out = {}
        for item in value:
            out.update(_leaves(item, f"{path}[]"))
        return out
    return {path: value}


def _domain() -> dict[str, Any]:
    leaves = _leaves(_plain(full_trial()))
    return {p: v for p, v in leaves.items() if p.split(".")[0].split("[")[0] not in d.PRIVATE_TRIAL_FIELDS}


def _arrived(boundary: str, record: Any) -> list[str]:
    got = _leaves(_plain(record))
    missing = []
    for path, value in _domain().items():
        if path in LEFT_OUT[boundary]:
            assert path not in got, f"{boundary} carries {path}, which LEFT_OUT says it leaves out"
            continue
        path = RENAMED[boundary].get(path, path)
        if path not in got:
            missing.append(f"{boundary} lacks {path}")
        elif got[path] != value:
            missing.append(f"{boundary}: {path} is {got[path]!r}, not {value!r}")
    return missing


def test_every_field_of_a_trial_reaches_every_boundary_or_is_named() -> None:
    t = full_trial()
    problems = _arrived("grpc", hpcopt.Trial.from_proto(trial_proto(t), list(t.params)))
    problems += _arrived("rest", trial_out(t, full=True))
    problems += _arrived("export", trial_doc(t))
    assert not problems, "\n".join(problems)


def test_the_test_fails_when_a_boundary_forgets_a_field() -> None:
    t = full_trial()
    forgetful = trial_out(t, full=True).model_copy(update={"value_std": None, "lineage": None})
    problems = _arrived("rest", forgetful)
    assert "rest: value_std is None, not 0.01" in problems and "rest lacks lineage.member" in problems, problems


def test_the_lease_and_the_finish_number_never_leave_whatever_a_record_asks() -> None:
    got = d.trial_fields(full_trial(), [f.name for f in dataclasses.fields(d.Trial)])
    assert set(got) == PUBLIC and "secret-lease" not in repr(got)
    assert got["values"] == [0.5, 2.0]
    t = full_trial()
    for record in (trial_proto(t), trial_out(t, full=True), trial_doc(t)):
        assert "secret-lease" not in str(record) and "lease_expires_at" not in str(record)
    assert not (set(TrialOut.model_fields) | set(TrialDoc.model_fields)) & d.PRIVATE_TRIAL_FIELDS
    assert not set(common_pb2.Trial.DESCRIPTOR.fields_by_name) & d.PRIVATE_TRIAL_FIELDS
