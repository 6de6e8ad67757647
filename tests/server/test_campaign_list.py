"""The campaign list is paged (REST, gRPC, the Python client, the CLI), newest first, and
a token's campaign creations are held to a quota (REST 429 with Retry-After, gRPC
RESOURCE_EXHAUSTED) that admin tokens do not have. A submit token used to create 100
campaigns a second, and at 4,504 campaigns the unpaged list the dashboard polls took 5 s."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from hpcopt import ApiError
from tests.helpers import web
from tests.helpers.clients import Client
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer, run_live_server
from tests.helpers.specs import make_spec


@pytest.fixture
def quota_server(db_url: str) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    from hpcopt_server.service import RequestLimits, Service
    from hpcopt_server.storage.repository import Storage

    storage = Storage(db_url)
    service = Service(storage, limits=RequestLimits(campaigns_per_hour=3))
    secrets = {scope: service.tokens.create(f"{scope}-token", [scope])[1] for scope in ("submit", "admin", "read")}
    secrets["submit2"] = service.tokens.create("second-submit-token", ["submit"])[1]
    servers = run_live_server(service)
    try:
        yield next(servers), secrets
    finally:
        servers.close()
        storage.close()


def _create_many(server: LiveServer, n: int) -> list[int]:
    return [server.service.campaigns.create(make_spec(name=f"c{i}")).id for i in range(n)]


def test_the_list_is_paged_newest_first_on_rest_grpc_and_the_client(live_server: LiveServer) -> None:
    ids = _create_many(live_server, 250)
    base = f"{live_server.http_url}/api/v1/campaigns"
    first = web.get(base).json()
    assert first["total"] == 250 and first["offset"] == 0 and first["limit"] == 100
    assert [c["id"] for c in first["campaigns"]] == ids[::-1][:100]
    last = web.get(base, params={"offset": 200, "limit": 100}).json()
    assert [c["id"] for c in last["campaigns"]] == ids[::-1][200:]
    r = web.get(base, params={"limit": 1001})
    assert r.status_code == 422 and "limit" in r.text
    with Client(live_server.grpc_target) as c:
        assert [x.id for x in c.list_campaigns(limit=100)] == ids[::-1][:100]
        page = c.campaign_page(offset=240, limit=50)
        assert page.total == 250 and [x.id for x in page.items] == ids[::-1][240:]
        assert [x.id for x in c.list_campaigns()] == ids[::-1], "all of them, paged through"
        assert [x.id for x in c.list_campaigns(offset=10, limit=1500)] == ids[::-1][10:]
        with pytest.raises(ApiError) as err:
            c.campaign_page(limit=5000)
        assert err.value.code == "INVALID_ARGUMENT" and "limit" in str(err.value)


def test_the_list_searches_filters_and_sorts_on_the_server_across_pages(live_server: LiveServer) -> None:
    """The review: 213 campaigns sorted only within a page and could not be searched. The
    server now filters by name (any case, % and _ taken literally) and state, and sorts
    every match before it pages; bad input gets a 422 naming the field."""
    service = live_server.service
    ids = {}
    for i in range(130):
        name = f"{'Resnet' if i % 3 == 0 else 'mlp'}-{i:03d}" + ("_100%" if i == 7 else "")
        ids[name] = service.campaigns.create(make_spec(name=name, budget={"max_trials": 10 + i})).id
    for name in ("mlp-001", "mlp-002", "Resnet-003"):
        service.campaigns.cancel(ids[name])
    base = f"{live_server.http_url}/api/v1/campaigns"

    def listed(**params: Any) -> tuple[list[str], int]:
        body = web.get(base, params=params).json()
        return [c["name"] for c in body["campaigns"]], body["total"]

    resnets = sorted((n for n in ids if n.startswith("Resnet")), key=str.lower)
    names, total = listed(q="RESNET", sort="name", order="asc", limit=20)
    assert total == len(resnets) == 44 and names == resnets[:20]
    names, total = listed(q="resnet", sort="name", order="asc", limit=20, offset=40)
    assert names == resnets[40:] and total == 44
    assert listed(q="_100%")[0] == ["mlp-007_100%"], "% and _ are literal"
    assert listed(q="1_")[1] == 0
    # By name across every page: the first page is the alphabetically first of all 130.
    assert listed(sort="name", order="asc", limit=5)[0] == sorted(ids, key=str.lower)[:5]
    assert listed(sort="name", order="desc", limit=5)[0] == sorted(ids, key=str.lower, reverse=True)[:5]
    cancelled, total = listed(state="CANCELLED")
    assert sorted(cancelled) == ["Resnet-003", "mlp-001", "mlp-002"] and total == 3
    assert listed(state=["CANCELLED", "COMPLETED"], q="mlp")[1] == 2
    # Progress: finished trials over the budget; none finished, so ties go newest first.
    assert listed(sort="progress", limit=3)[0] == [n for n, _ in sorted(ids.items(), key=lambda kv: -kv[1])][:3]
    by_state = web.get(base, params={"sort": "state", "order": "asc", "limit": 3}).json()["campaigns"]
    assert [c["state"] for c in by_state] == ["CANCELLED"] * 3
    for bad, field in (
        ({"sort": "best"}, "sort"),
        ({"state": "STOPPED"}, "state"),
        ({"q": "x" * 300}, "q"),
        ({"q": "a\x1b[31m"}, "q"),
        ({"order": "up"}, "order"),
    ):
        r = web.get(base, params=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["errors"][0]["field"].startswith(field), (bad, r.json())


def test_the_cli_lists_a_page_and_says_how_to_see_the_rest(live_server: LiveServer) -> None:
    ids = _create_many(live_server, 60)
    cmd = [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, "list", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(120))
    assert out.returncode == 0, out.stderr
    assert [c["id"] for c in json.loads(out.stdout)] == ids[::-1][:50]
    assert "50 of 60 campaigns shown, newest first; the next ones with --offset 50" in out.stderr
    out = subprocess.run([*cmd, "--offset", "50"], capture_output=True, text=True, timeout=scaled(120))
    assert [c["id"] for c in json.loads(out.stdout)] == ids[::-1][50:] and "shown" not in out.stderr


def _rest_create(server: LiveServer, secret: str, path: str = "/api/v1/campaigns", body: Any = None) -> httpx.Response:
    return web.post(
        f"{server.http_url}{path}",
        json=body or make_spec(),
        headers={"authorization": f"Bearer {secret}"},
        timeout=scaled(60),
    )


def test_a_token_past_its_quota_is_refused_with_429_and_when_to_retry(
    quota_server: tuple[LiveServer, dict[str, str]],
) -> None:
    server, secrets = quota_server
    for _ in range(3):
        assert _rest_create(server, secrets["submit"]).status_code == 201
    r = _rest_create(server, secrets["submit"])
    assert r.status_code == 429, r.text
    assert 1 <= int(r.headers["retry-after"]) <= 3600
    assert "'submit-token' created 3 campaigns in the last hour" in r.json()["detail"]
    assert r.json()["errors"][0]["field"] == "campaigns"
    # Nothing was stored for the refused call; the quota is per token; admin has none.
    assert server.service.campaigns.page()[1] == 3
    assert _rest_create(server, secrets["submit2"]).status_code == 201
    for _ in range(5):
        assert _rest_create(server, secrets["admin"]).status_code == 201
    # gRPC says the same; an import counts as a creation.
    with Client(server.grpc_target, token=secrets["submit"]) as c:
        with pytest.raises(ApiError) as err:
            c.create_campaign(make_spec())
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED.name
        doc = Client(server.grpc_target, token=secrets["admin"]).export_campaign(1)
        with pytest.raises(ApiError) as err:
            c.import_campaign(doc)
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED.name
    r = _rest_create(server, secrets["submit2"], "/api/v1/campaigns/import", doc)
    assert r.status_code == 201, r.text


def test_the_quota_is_zero_for_off_and_absent_with_auth_off(db_url: str) -> None:
    from hpcopt_server.service import RequestLimits, Service
    from hpcopt_server.storage.repository import Storage

    storage = Storage(db_url)
    try:
        no_auth = Service(storage, limits=RequestLimits(campaigns_per_hour=1))
        for _ in range(3):
            no_auth.campaigns.create(make_spec())  # no token: no quota
        off = Service(storage, limits=RequestLimits(campaigns_per_hour=0))
        token = off.tokens.create("t", ["submit"])[0]
        for _ in range(3):
            off.campaigns.create(make_spec(), token)
        assert off.campaigns.page()[1] == 6
    finally:
        storage.close()
