"""Hostile and careless input against a real server process (auth on), on SQLite and
PostgreSQL: every case gets a 4xx / INVALID_ARGUMENT naming the field, stores nothing,
and leaves the server answering /healthz within a second with bounded memory.

The cases are the ones found by hand before the hardening (issue 9), each with the
input that broke it then."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from hpcopt import ApiError, Lease
from hpcopt.v1 import campaign_pb2
from hpcopt_server.service import Service
from hpcopt_server.storage.migrate import upgrade
from hpcopt_server.storage.repository import Storage
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.hostile import alias_bomb
from tests.helpers.pg import fresh_pg_database
from tests.helpers.process import ServerProcess
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.slow

SCOPES = ("read", "submit", "agent", "admin")
TABLES = ("campaigns", "trials", "folds", "curves", "trial_events", "agents")
TOO_BIG = 2**31  # one past the 32-bit id and step columns
#: Peak memory of the server process after every case here. It idles at ~150 MB; the
#: alias bomb alone took it to 900 MB before the hardening.
MAX_RSS_MB = 350


@dataclass
class Target:
    server: ServerProcess
    tokens: dict[str, str]
    campaign_id: int  # BO, one fold, one completed trial
    db: str

    def rest(self, method: str, path: str, scope: str | None = "admin", **kw: Any) -> httpx.Response:
        headers = {**kw.pop("headers", {}), **({"authorization": f"Bearer {self.tokens[scope]}"} if scope else {})}
        return web.request(method, self.server.http_url + path, headers=headers, timeout=scaled(30), **kw)

    def client(self, scope: str = "submit") -> Client:
        return Client(self.server.grpc_target, token=self.tokens[scope], timeout=scaled(30))

    def agent(self) -> AgentClient:
        return AgentClient(self.server.grpc_target, token=self.tokens["agent"], timeout=scaled(30))

    def counts(self) -> dict[str, int]:
        engine = create_engine(self.db)
        try:
            with engine.connect() as conn:
                return {t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() or 0) for t in TABLES}
        finally:
            engine.dispose()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    pg = None
    if request.param == "sqlite":
        db = f"sqlite:///{tmp_path_factory.mktemp('bad') / 'hpcopt.db'}"
    else:
        pg = fresh_pg_database(request.getfixturevalue("pg_admin"))
        db = next(pg)
    upgrade(db)
    storage = Storage(db)
    service = Service(storage)
    tokens = {scope: service.tokens.create(f"{scope}-token", [scope])[1] for scope in SCOPES}
    storage.close()
    with ServerProcess(db) as server:
        t = Target(server, tokens, 0, db)
        spec = make_spec(algorithm={"name": "bo", "seed": 1}, folds=1, budget={"max_trials": 30, "max_parallel": 4})
        with t.client() as c:
            t.campaign_id = c.create_campaign(spec).id
        with t.agent() as a:
            agent_id = a.register(host="seed").agent_id
            lease = (a.acquire(agent_id, t.campaign_id)).lease
            a.report_intermediate(lease, 0, 0, 0.5)
            a.report_fold(lease, 0, 0.4, {"acc": 0.9})
            a.complete(lease)
        yield t
    if pg is not None:
        pg.close()


@pytest.fixture
def unchanged(target: Target) -> Iterator[None]:
    """The case stores nothing, and the server still answers /healthz. (Its cost is
    pinned by what the server refuses to read, not by a wall clock: a loaded machine
    once took over a second to answer, and the teardown failed a correct server.)"""
    before = target.counts()
    yield
    assert target.counts() == before, "a refused request changed rows"
    assert web.get(target.server.http_url + "/healthz", timeout=scaled(60.0)).status_code == 200


def _fields(response: httpx.Response) -> set[str]:
    return {e["field"] for e in response.json()["errors"]}


def _grpc_error(call: Any, *args: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        call(*args)
    return info.value


# -- cost -----------------------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_unexpanded(target: Target, unchanged: None) -> None:
    yaml_headers = {"content-type": "application/yaml"}
    checked = target.rest("POST", "/api/v1/campaigns/validate", "read", content=alias_bomb(), headers=yaml_headers)
    assert checked.status_code == 200
    assert checked.json()["valid"] is False and "alias" in checked.json()["detail"]
    created = target.rest("POST", "/api/v1/campaigns", "submit", content=alias_bomb(), headers=yaml_headers)
    assert created.status_code == 422 and "alias" in created.json()["detail"]


@pytest.mark.parametrize(
    ("algorithm", "space_size", "field"),
    [
        ({"name": "grid", "options": {"points": 10_000_000}}, 3, "algorithm.options.points"),
        ({"name": "grid", "options": {"points": 2}}, 64, "algorithm.options.points"),  # 2**64 points
        ({"name": "bo", "options": {"candidates": 10**7}}, 3, "algorithm.options.candidates"),
        ({"name": "bo", "options": {"polish": 10**6}}, 3, "algorithm.options.polish"),
        ({"name": "ea", "options": {"population": 10**9}}, 3, "algorithm.options.population"),
        ({"name": "skopt", "options": {"n_jobs": -1}}, 3, "algorithm.options"),
        ({"name": "random"}, 101, "space"),
    ],
)
def test_options_and_spaces_that_cost_without_bound_are_refused(
    target: Target, unchanged: None, algorithm: dict[str, Any], space_size: int, field: str
) -> None:
    space = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(space_size)}
    spec = make_spec(algorithm=algorithm, space=space)
    r = target.rest("POST", "/api/v1/campaigns", "submit", json=spec)
    assert r.status_code == 422, r.text
    assert any(f.startswith(field) for f in _fields(r)), r.json()
    with target.client() as c:
        err = _grpc_error(c.create_campaign, spec)
    assert err.code == "INVALID_ARGUMENT" and any(e["field"].startswith(field) for e in err.field_errors)


# -- ids and steps ----------------------------------------------------------------------

ID_ROUTES = [
    ("GET", "/api/v1/campaigns/{id}", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/trials", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/best", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/agents", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/export", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/plot", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/curves", "campaign_id"),
    ("POST", "/api/v1/campaigns/{id}/cancel", "campaign_id"),
    ("GET", "/api/v1/trials/{id}", "trial_id"),
    ("GET", "/api/v1/campaigns/{id}/trials/0", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/running", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/timeline", "campaign_id"),
    ("GET", "/api/v1/campaigns/{id}/importance", "campaign_id"),
]


@pytest.mark.parametrize("value", [TOO_BIG, 2**63, 10**30, 0, -1])
def test_ids_outside_the_columns_get_422_on_every_id_route(target: Target, unchanged: None, value: int) -> None:
    for method, path, field in ID_ROUTES:
        r = target.rest(method, path.format(id=value))
        assert r.status_code == 422, (path, r.status_code, r.text)
        assert field in _fields(r), (path, r.json())
    r = target.rest("GET", f"/api/v1/campaigns/{target.campaign_id}/curves?trial_id={value}")
    assert r.status_code == 422 and "trial_id" in _fields(r)
    r = target.rest("GET", f"/api/v1/campaigns/{target.campaign_id}/trials?offset={TOO_BIG}")
    assert r.status_code == 422 and "offset" in _fields(r)


def test_ids_and_steps_outside_the_columns_get_invalid_argument_over_grpc(target: Target, unchanged: None) -> None:
    big = 2**40
    with target.client("read") as c:
        for call in (c.get_campaign, c.get_best_trial, c.get_trial):
            err = _grpc_error(call, big)
            assert err.code == "INVALID_ARGUMENT", (call, err)
    with target.agent() as a:
        err = _grpc_error(lambda: a.register(host="h", campaign_id=big))
        assert err.code == "INVALID_ARGUMENT" and err.field_errors[0]["field"] == "campaign_id"
        err = _grpc_error(a.acquire, "0" * 32, big)
        assert err.code == "INVALID_ARGUMENT"
        lease = Lease(agent_id="a" * 32, trial_id=big, lease_id="l")
        err = _grpc_error(a.heartbeat, lease)
        assert err.code == "INVALID_ARGUMENT" and err.field_errors[0]["field"] == "lease.trial_id"


def test_a_step_past_the_column_is_refused_and_the_last_one_stored(target: Target) -> None:
    with target.client() as c:
        cid = c.create_campaign(make_spec(budget={"max_trials": 1, "max_parallel": 1})).id
    with target.agent() as a:
        agent_id = a.register(host="steps").agent_id
        lease = (a.acquire(agent_id, cid)).lease
        before = target.counts()
        err = _grpc_error(a.report_intermediate, lease, 0, 2**40, 1.0)
        assert err.code == "INVALID_ARGUMENT" and err.field_errors[0]["field"] == "step"
        assert target.counts() == before
        a.report_intermediate(lease, 0, TOO_BIG - 1, 1.0)  # the largest step the column holds
    with target.client("read") as c:
        assert [p.step for p in c.get_trial(lease.trial_id).curves] == [TOO_BIG - 1]


# -- imports ----------------------------------------------------------------------------


def _export(target: Target) -> dict[str, Any]:
    r = target.rest("GET", f"/api/v1/campaigns/{target.campaign_id}/export", "read")
    assert r.status_code == 200
    return r.json()  # type: ignore[no-any-return]


BAD_IMPORTS = [
    ("a fold index past K", lambda doc: doc["trials"][0]["folds"][0].update(index=57), "trials.0.folds.0.index"),
    ("a curve fold past K", lambda doc: doc["trials"][0]["curves"][0].update(fold=3), "trials.0.curves.0.fold"),
    ("a param out of range", lambda doc: doc["trials"][0]["params"].update(lr=5.0), "trials.0.params.lr"),
    ("an unknown param", lambda doc: doc["trials"][0]["params"].update(zz=1), "trials.0.params.zz"),
    ("a missing param", lambda doc: doc["trials"][0]["params"].pop("act"), "trials.0.params.act"),
    ("a wrong choice", lambda doc: doc["trials"][0]["params"].update(act="gelu"), "trials.0.params.act"),
    ("a trial number past the column", lambda doc: doc["trials"][0].update(number=TOO_BIG), "trials.0.number"),
    (
        "a step past the column",
        lambda doc: doc["trials"][0]["curves"][0].update(step=TOO_BIG),
        "trials.0.curves.0.step",
    ),
    ("attempt 0", lambda doc: doc["trials"][0].update(attempt=0), "trials.0.attempt"),
    ("a naive time", lambda doc: doc["trials"][0].update(created_at="2026-01-01T00:00:00"), "trials.0.created_at"),
    ("a long event kind", lambda doc: doc["trials"][0]["events"][0].update(kind="k" * 33), "trials.0.events.0.kind"),
    (
        "a NUL in a URI",
        lambda doc: doc["trials"][0]["folds"][0].update(checkpoint_uri="a\x00b"),
        "trials.0.folds.0.checkpoint_uri",
    ),
    ("a completed trial without value", lambda doc: doc["trials"][0].update(value=None), "trials.0.value"),
    ("more trials than the budget", lambda doc: doc["spec"]["budget"].update(max_trials=0), "budget.max_trials"),
]


@pytest.mark.parametrize(("case", "mutate", "field"), BAD_IMPORTS, ids=[c[0] for c in BAD_IMPORTS])
def test_an_import_is_as_strict_as_live_reports(
    target: Target, unchanged: None, case: str, mutate: Any, field: str
) -> None:
    doc = _export(target)
    mutate(doc)
    r = target.rest("POST", "/api/v1/campaigns/import", "submit", json=doc)
    assert r.status_code == 422, (case, r.text)
    assert any(f.startswith(field) for f in _fields(r)), (case, r.json())
    with target.client() as c:
        assert _grpc_error(c.import_campaign, doc).code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_an_import_with_non_finite_values_is_refused(target: Target, unchanged: None, literal: str) -> None:
    body = json.dumps(_export(target)).replace('"value": 0.4', f'"value": {literal}', 1)
    assert literal in body
    r = target.rest("POST", "/api/v1/campaigns/import", "submit", content=body)
    assert r.status_code == 422 and "trials.0.value" in _fields(r), r.text


def test_a_valid_import_still_round_trips(target: Target) -> None:
    r = target.rest("POST", "/api/v1/campaigns/import", "submit", json=_export(target))
    assert r.status_code == 201, r.text
    again = target.rest("GET", f"/api/v1/campaigns/{r.json()['id']}/export", "read")
    assert again.status_code == 200 and len(again.json()["trials"]) == 1


# -- NUL, sizes, depth, non-finite numbers, echoes ---------------------------------------


def test_nul_bytes_are_refused_naming_the_field(target: Target) -> None:
    before = target.counts()
    r = target.rest("POST", "/api/v1/campaigns", "submit", json=make_spec(name="a\x00b"))
    assert r.status_code == 422 and "name" in _fields(r)
    with target.agent() as a:
        err = _grpc_error(lambda: a.register(host="node\x0001"))
        assert err.code == "INVALID_ARGUMENT" and err.field_errors[0]["field"] == "host"
        agent_id = a.register(host="nul").agent_id
        err = _grpc_error(a.acquire, agent_id + "\x00", target.campaign_id)
        assert err.code == "INVALID_ARGUMENT"
        lease = Lease(agent_id=agent_id, trial_id=1, lease_id="x")
        for call, field in (
            (lambda: a.report_intermediate(lease, 0, 1, 1.0, checkpoint_uri="file:///a\x00"), "checkpoint_uri"),
            (lambda: a.report_fold(lease, 0, 1.0, {"m\x00": 1.0}), "metrics.m\x00"),
            (lambda: a.release(lease, "FAILED", reason="boom\x00"), "reason"),
        ):
            err = _grpc_error(call)
            assert err.code == "INVALID_ARGUMENT" and err.field_errors[0]["field"] == field, err
    assert target.counts() == {**before, "agents": before["agents"] + 1}  # only the valid registration


def test_documents_over_the_size_limits_are_refused(target: Target, unchanged: None) -> None:
    huge = json.dumps(make_spec(training={"task": "t:T", "options": {"blob": "x" * 2_000_000}}))
    r = target.rest("POST", "/api/v1/campaigns", "submit", content=huge)
    assert r.status_code == 413 and "body" in _fields(r)
    assert target.rest("POST", "/api/v1/campaigns/validate", "read", content=huge).status_code == 413
    r = target.rest(
        "POST", "/api/v1/campaigns/import", "submit", content=huge, headers={"content-type": "application/yaml"}
    )
    assert r.status_code == 413  # YAML is held to the spec limit, even for imports
    with target.client() as c:
        req = campaign_pb2.CreateCampaignRequest(spec_json=huge)
        assert _grpc_error(c._do, c._stub.CreateCampaign, req).code == "INVALID_ARGUMENT"
    # Under the body limit, over the spec's own limit (it is sent with every Acquire).
    big = make_spec(training={"task": "t:T", "options": {"blob": "x" * 100_000}})
    r = target.rest("POST", "/api/v1/campaigns", "submit", json=big)
    assert r.status_code == 422 and "at most 65536" in r.json()["detail"]


def test_listings_do_not_echo_specs(target: Target) -> None:
    listed = target.rest("GET", "/api/v1/campaigns", "read").json()["campaigns"]
    assert listed and all(c["spec"] is None for c in listed)
    assert target.rest("GET", f"/api/v1/campaigns/{target.campaign_id}", "read").json()["spec"]["folds"] == 1
    with target.client("read") as c:
        assert all(x.spec is None for x in c.list_campaigns())
        assert c.get_campaign(target.campaign_id).folds == 1


def _deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (_deep_json(100_000), "application/json"),
        ("a:\n" + "".join(" " * i + "- \n" for i in range(1, 200)), "application/yaml"),
        ("x: " + "[" * 50_000 + "]" * 50_000, "application/yaml"),
        (
            json.dumps(make_spec(training={"task": "t:T", "options": json.loads('{"a":' * 500 + "1" + "}" * 500)})),
            "application/json",
        ),
    ],
    ids=["json-100k-deep", "yaml-200-deep-block", "yaml-50k-deep-flow", "options-500-deep"],
)
def test_deep_nesting_is_refused(target: Target, unchanged: None, body: str, content_type: str) -> None:
    r = target.rest("POST", "/api/v1/campaigns", "submit", content=body, headers={"content-type": content_type})
    assert r.status_code == 422 and "levels" in r.json()["detail"], r.text[:300]
    r = target.rest("POST", "/api/v1/campaigns/import", "submit", content=body, headers={"content-type": content_type})
    assert r.status_code == 422, r.text[:300]
    if content_type == "application/json":
        with target.client() as c:
            req = campaign_pb2.CreateCampaignRequest(spec_json=body)
            assert _grpc_error(c._do, c._stub.CreateCampaign, req).code == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("body", "content_type", "field"),
    [
        (json.dumps(make_spec()).replace('"relu"', "NaN"), "application/json", "space.act.choices.0"),
        (
            json.dumps(make_spec(training={"task": "t:T", "options": {"x": 1.0}})).replace("1.0", "Infinity"),
            "application/json",
            "training.options.x",
        ),
        (
            "name: n\nobjective: {metric: m}\nspace: {x: {type: real, low: .nan, high: 1}}\n"
            "budget: {max_trials: 1}\ntraining: {task: 't:T'}\n",
            "application/yaml",
            "space.x.low",
        ),
    ],
    ids=["nan-choice", "infinity-in-options", "yaml-nan-bound"],
)
def test_non_finite_numbers_in_specs_are_refused(
    target: Target, unchanged: None, body: str, content_type: str, field: str
) -> None:
    r = target.rest("POST", "/api/v1/campaigns", "submit", content=body, headers={"content-type": content_type})
    assert r.status_code == 422 and field in _fields(r), r.text


def test_errors_do_not_echo_long_input(target: Target, unchanged: None) -> None:
    spec = make_spec(space={"p" * 8000: {"type": "real", "low": 0, "high": 1}})
    with target.client() as c:
        err = _grpc_error(c.create_campaign, spec)
    assert err.code == "INVALID_ARGUMENT", err  # not RESOURCE_EXHAUSTED from an oversized trailer
    assert len(json.dumps(err.field_errors)) < 4096 and len(err.message) <= 1100
    r = target.rest(
        "POST",
        "/api/v1/campaigns",
        "submit",
        json=make_spec(space={"q" * 1_000_000: {"type": "real", "low": 0, "high": 1}}),
    )
    assert r.status_code == 422 and len(r.content) < 16_384


def test_a_grpc_token_without_bearer_is_refused(target: Target) -> None:
    with Client(target.server.grpc_target, timeout=scaled(30)) as c:
        metadata = (("authorization", target.tokens["read"]),)
        with pytest.raises(Exception) as info:
            c._stub.ListCampaigns(campaign_pb2.ListCampaignsRequest(), metadata=metadata, timeout=scaled(30))
    assert "UNAUTHENTICATED" in str(info.value) and "Bearer" in str(info.value)


def test_the_server_kept_its_memory_bounded(target: Target, tmp_path: Path) -> None:
    # Last in the module: the peak over every hostile request above.
    assert target.server.peak_rss_mb() < MAX_RSS_MB
