"""Import is bounded in work, not only in bytes: trials, curve points and events per
import are counted before anything validates or stores them (413 naming the limit),
timestamps must be in order, curves are held to the campaign's cap, and identifiers with
control characters are refused wherever a campaign is created."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from tests.helpers import web
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec

NOW = "2026-01-01T00:00:00Z"


def _doc(trials: list[dict[str, Any]], **budget: Any) -> dict[str, Any]:
    spec = make_spec(folds=2, budget={"max_trials": 1_000_000, "max_parallel": 4, **budget})
    return {
        "format": "hpcopt-campaign",
        "version": 1,
        "spec": spec,
        "campaign": {"name": "imported", "state": "RUNNING", "created_at": NOW},
        "trials": trials,
    }


def _trial(number: int, **extra: Any) -> dict[str, Any]:
    return {
        "number": number,
        "state": "QUEUED",
        "params": {"lr": 0.01, "width": 8, "act": "relu"},
        "created_at": NOW,
        **extra,
    }


def _post(server: LiveServer, doc: dict[str, Any]) -> httpx.Response:
    return web.post(f"{server.http_url}/api/v1/campaigns/import", content=json.dumps(doc), timeout=scaled(120))


def _campaigns(server: LiveServer) -> int:
    return int(web.get(f"{server.http_url}/api/v1/campaigns", timeout=scaled(30)).json()["total"])


def test_a_document_over_the_trial_limit_is_refused_early_naming_it(live_server: LiveServer) -> None:
    limit = live_server.service.limits.import_trials
    doc = _doc([_trial(i) for i in range(limit + 1)])
    r = _post(live_server, doc)
    assert r.status_code == 413, r.text
    assert f"at most {limit}" in r.json()["detail"] and "trials" in r.json()["detail"]
    assert _campaigns(live_server) == 0


@pytest.mark.parametrize(("key", "limit_name"), [("curves", "import_curve_points"), ("events", "import_events")])
def test_curve_points_and_events_per_import_are_bounded(live_server: LiveServer, key: str, limit_name: str) -> None:
    limit = getattr(live_server.service.limits, limit_name)
    per_trial = limit // 4 + 1
    item = {"fold": 0, "step": 0, "value": 1.0} if key == "curves" else {"attempt": 1, "kind": "acquired", "at": NOW}
    doc = _doc([_trial(i, **{key: [item] * per_trial}) for i in range(4)])
    r = _post(live_server, doc)
    assert r.status_code == 413, r.text
    assert f"at most {limit}" in r.json()["detail"]
    assert _campaigns(live_server) == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t.update(started_at="2025-12-31T00:00:00Z"), "started_at"),
        (lambda t: t.update(started_at=NOW, finished_at="2025-12-31T00:00:00Z", state="FAILED"), "finished_at"),
    ],
)
def test_timestamps_out_of_order_are_refused(live_server: LiveServer, change: Any, field: str) -> None:
    trial = _trial(0)
    change(trial)
    r = _post(live_server, _doc([trial]))
    assert r.status_code == 422 and field in r.text, r.text
    assert _campaigns(live_server) == 0


def test_an_imported_curve_is_held_to_the_campaigns_cap(live_server: LiveServer) -> None:
    points = [{"fold": 0, "step": s, "value": float((s * 7919) % 101)} for s in range(2000)]
    doc = _doc([_trial(0, curves=points)], curve_points_per_fold=50)
    r = _post(live_server, copy.deepcopy(doc))
    assert r.status_code == 201, r.text
    [trial] = web.get(f"{live_server.http_url}/api/v1/campaigns/{r.json()['id']}/trials", timeout=scaled(30)).json()[
        "trials"
    ]
    got = web.get(f"{live_server.http_url}/api/v1/trials/{trial['id']}", timeout=scaled(30)).json()["curves"]
    assert 3 <= len(got) <= 50
    assert {got[0]["step"], got[-1]["step"]} == {0, 1999}
    assert min(p["value"] for p in got) == 0.0 and max(p["value"] for p in got) == 100.0


@pytest.mark.parametrize(
    "name", ["bad\x1b[31mred", "line\r\nforged: log", "c1\x9bcode", "rtl\u202eoverride", "del\x7f"]
)
def test_control_characters_in_a_campaign_name_are_refused(live_server: LiveServer, name: str) -> None:
    for path in ("/api/v1/campaigns/validate", "/api/v1/campaigns"):
        r = web.post(f"{live_server.http_url}{path}", json=make_spec(name=name), timeout=scaled(30))
        body = r.json()
        if path.endswith("validate"):
            assert body["valid"] is False and any(e["field"] == "name" for e in body["errors"]), body
        else:
            assert r.status_code == 422 and "control characters" in r.text, r.text
    doc = _doc([])
    doc["campaign"]["name"] = name
    doc["spec"]["name"] = name
    assert _post(live_server, doc).status_code == 422
    assert _campaigns(live_server) == 0


def test_warm_start_ids_past_the_id_column_are_invalid_everywhere(live_server: LiveServer) -> None:
    spec = make_spec(warm_start={"campaigns": [2**31]})
    body = web.post(f"{live_server.http_url}/api/v1/campaigns/validate", json=spec, timeout=scaled(30)).json()
    assert body["valid"] is False, body
    r = web.post(f"{live_server.http_url}/api/v1/campaigns", json=spec, timeout=scaled(30))
    assert r.status_code == 422 and "warm_start" in r.text, r.text


def test_checking_a_large_array_of_numbers_costs_no_memory_per_element() -> None:
    """A 31 MB JSON array of zeros took 26 s (REST) and 2.4 GB while every element got a
    path string and a stack entry; checking it now allocates next to nothing."""
    import tracemalloc

    from hpcopt.core.documents import check_values

    data = {"trials": [0] * 1_000_000, "ok": [0.5, "x", None, True]}
    tracemalloc.start()
    try:
        check_values(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak  # the old walk: ~150 MB here
