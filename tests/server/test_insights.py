"""The REST aggregates behind the dashboard: downsampled plot data, sorted trial pages,
learning curves, agents with their health, CSV export, spec validation."""

from __future__ import annotations

import csv
import io
import random
from datetime import timedelta
from typing import Any

import pytest

from hpcopt_server.service.agents import Lease
from tests.helpers import web
from tests.helpers.live import LiveServer
from tests.helpers.seed import add_completed, seed_campaign
from tests.helpers.specs import make_spec


def test_plot_data_keeps_every_point_when_small_and_downsamples_big_campaigns(service: Any) -> None:
    small = seed_campaign(service, name="small", completed=30, failed=2, queued=1)
    data = service.insights.plot_data(small, max_points=100)
    assert data["completed"] == 30 and not data["downsampled"] and len(data["points"]) == 30
    assert [p["number"] for p in data["points"]] == sorted(p["number"] for p in data["points"])
    best = [b["value"] for b in data["best"]]
    assert best == sorted(best, reverse=True) and best[-1] == min(p["value"] for p in data["points"])

    big = seed_campaign(service, name="big", completed=1500, folds=1, curves_for=0, seed=4)
    data = service.insights.plot_data(big, max_points=200)
    assert data["completed"] == 1500 and data["downsampled"] and len(data["points"]) <= 200
    kept = {p["trial_id"] for p in data["points"]}
    assert {b["trial_id"] for b in data["best"]} <= kept, "every improvement is drawn"
    with service.ctx.storage.read() as tx:
        values = sorted(v for _, _, v, _, _ in tx.results.completed_points(big))
    drawn = sorted(p["value"] for p in data["points"])
    assert drawn[:20] == values[:20], "the best trials are all drawn"
    assert service.insights.plot_data(big, max_points=200) == data, "the sample is stable between polls"
    # ... and as trials complete: each one enters the sample or not, and the others stay
    # (a fresh random sample on every completion made a live page redraw every plot).
    rng = random.Random(5)
    for _ in range(10):
        add_completed(service, big, rng, folds=1)
        now = service.insights.plot_data(big, max_points=200)
        after = {p["trial_id"] for p in now["points"]}
        assert len(kept - after) <= 1 and len(after - kept) <= 1, (kept - after, after - kept)
        kept = after


def test_plot_data_gives_each_objective_its_limit_and_lists_pruned_and_failed_trials(service: Any) -> None:
    cid = seed_campaign(service, name="robust", completed=300, pruned=7, failed=5, diverged=0.02, seed=3)
    data = service.insights.plot_data(cid, max_points=100)
    (objective,) = data["objectives"]
    with service.ctx.storage.read() as tx:
        values = [v for _, _, v, _, _ in tx.results.completed_points(cid)]
    assert objective["limit"] is not None and objective["off_scale"] == sum(v > objective["limit"] for v in values)
    assert objective["off_scale"] >= 1 and all(v >= 1000 for v in values if v > objective["limit"]), "the diverged"
    assert objective["best"] == data["best"] and objective["edf"] == data["edf"]
    assert data["ended_total"] == 12 and len(data["ended"]) == 12
    assert {e["state"] for e in data["ended"]} == {"PRUNED", "FAILED"}
    assert all(e["value"] is not None for e in data["ended"] if e["state"] == "PRUNED"), "the value it reached"
    assert len(service.insights.plot_data(cid, max_points=10)["ended"]) == 10, "sampled past max_points"


def test_importance_of_a_chosen_objective_and_a_clear_error_for_a_missing_one(live_server: LiveServer) -> None:
    service = live_server.service
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "acc", "direction": "maximize"}]
    cid = service.campaigns.create(make_spec(name="imp2", folds=1, objectives=objectives, budget={"max_trials": 30})).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    for _ in range(30):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        p = got.trial.params  # loss follows width only, acc the activation only
        service.agents.report_fold(lease, 0, float(p["width"]), {"acc": 1.0 if p["act"] == "relu" else 0.0})
        service.agents.complete(lease)
    with web.http(base_url=live_server.http_url) as client:
        first = client.get(f"/api/v1/campaigns/{cid}/importance").json()
        second = client.get(f"/api/v1/campaigns/{cid}/importance", params={"objective": 1}).json()
        assert first["params"][0]["name"] == "width" and second["params"][0]["name"] == "act"
        bad = client.get(f"/api/v1/campaigns/{cid}/importance", params={"objective": 2})
        assert bad.status_code == 422 and "objective" in bad.text and "0..1" in bad.text
        plot = client.get(f"/api/v1/campaigns/{cid}/plot").json()
        assert [o["metric"] for o in plot["objectives"]] == ["loss", "acc"]
        assert plot["objectives"][1]["best"][-1]["value"] == 1.0, "acc's own best line"


def test_trials_sort_on_the_server_and_refuse_an_unknown_key(live_server: LiveServer) -> None:
    service = live_server.service
    cid = seed_campaign(service, name="sorting", completed=40, failed=3, queued=2)
    url = f"{live_server.http_url}/api/v1/campaigns/{cid}/trials"
    page = web.get(url, params={"sort": "value", "order": "asc", "limit": 10}).json()
    values = [t["value"] for t in page["trials"]]
    assert page["total"] == 45 and values == sorted(values)
    with service.ctx.storage.read() as tx:
        assert values[0] == min(v for _, _, v, _, _ in tx.results.completed_points(cid))
    last = web.get(url, params={"sort": "value", "order": "asc", "offset": 40, "limit": 10}).json()["trials"]
    assert [t["value"] for t in last] == [None] * 5, "trials without a value sort last"
    desc = web.get(url, params={"sort": "value", "order": "desc", "limit": 5}).json()["trials"]
    assert [t["value"] for t in desc] == sorted((t["value"] for t in desc), reverse=True)
    failed = web.get(url, params={"state": "FAILED", "sort": "number"}).json()
    assert failed["total"] == 3 and {t["state"] for t in failed["trials"]} == {"FAILED"}
    bad = web.get(url, params={"sort": "colour"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "sort"


def test_learning_curves_of_the_best_or_chosen_trials(live_server: LiveServer) -> None:
    cid = seed_campaign(live_server.service, name="curves", completed=12, folds=2, epochs=3)
    url = f"{live_server.http_url}/api/v1/campaigns/{cid}/curves"
    best = web.get(url, params={"limit": 3}).json()
    assert len(best) == 3 and [c["value"] for c in best] == sorted(c["value"] for c in best)
    assert all(len(c["points"]) == 2 * 3 for c in best)
    chosen = web.get(url, params=[("trial_id", best[2]["trial_id"])]).json()
    assert [c["trial_id"] for c in chosen] == [best[2]["trial_id"]]


def test_agents_show_their_trial_and_turn_stale_when_silent(service: Any) -> None:
    cid = seed_campaign(service, name="agents", completed=2, queued=2)
    reg = service.agents.register(host="node17", ranks=4, gpus=1, slurm_job_id="991", campaign_id=cid)
    got = service.agents.acquire(reg.agent_id, cid)

    def view_of() -> Any:
        return next(v for v in service.insights.agents(cid) if v.agent.id == reg.agent_id)

    view = view_of()
    assert view.current_trial_id == got.trial.id and not view.stale and view.agent.slurm_job_id == "991"
    real_clock = service.ctx.clock
    service.ctx.clock = lambda: real_clock() + timedelta(seconds=3 * service.ctx.settings.heartbeat_seconds)
    try:
        view = view_of()
        assert view.stale and not view.gone, "no heartbeat for two periods: the lease is at risk"
        assert service.campaigns.get(cid).live_agents == 1
    finally:
        service.ctx.clock = real_clock
    service.agents.heartbeat(Lease(reg.agent_id, got.trial.id, got.lease_id))
    assert not view_of().stale


def test_csv_export_has_a_row_per_trial(live_server: LiveServer) -> None:
    cid = seed_campaign(live_server.service, name="csv", completed=7, failed=1)
    res = web.get(f"{live_server.http_url}/api/v1/campaigns/{cid}/export", params={"format": "csv"})
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/csv")
    assert f"campaign-{cid}-trials.csv" in res.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(res.text)))
    assert len(rows) == 8
    assert {"trial_id", "number", "state", "loss", "loss_std", "param_lr", "param_width", "param_act"} <= set(rows[0])
    assert [r["state"] for r in rows].count("FAILED") == 1
    assert float(rows[0]["loss"]) > 0 and rows[0]["param_act"] in ("relu", "tanh", "gelu")


def test_validate_answers_200_with_field_errors_and_stores_nothing(live_server: LiveServer) -> None:
    url = f"{live_server.http_url}/api/v1/campaigns/validate"
    bad = make_spec(space={"lr": {"type": "real", "low": 0.0, "high": 1.0, "scale": "log"}})
    res = web.post(url, json=bad)
    assert res.status_code == 200
    body = res.json()
    assert not body["valid"] and body["errors"][0]["field"] == "space.lr" and "> 0" in body["errors"][0]["message"]
    yaml_res = web.post(url, content="name: [unclosed", headers={"content-type": "application/yaml"})
    assert yaml_res.status_code == 200 and yaml_res.json()["errors"][0]["field"] == "body"
    assert web.post(url, json=make_spec()).json() == {"valid": True, "detail": "", "errors": []}
    assert web.get(f"{live_server.http_url}/api/v1/campaigns").json()["campaigns"] == []


@pytest.mark.parametrize("max_points", [5, 50_000])
def test_plot_data_bounds_are_enforced(live_server: LiveServer, max_points: int) -> None:
    cid = live_server.service.campaigns.create(make_spec()).id
    res = web.get(f"{live_server.http_url}/api/v1/campaigns/{cid}/plot", params={"max_points": max_points})
    assert res.status_code == 422
