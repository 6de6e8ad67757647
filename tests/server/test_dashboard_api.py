"""The REST API behind dashboard v2, on SQLite and PostgreSQL over real HTTP: ETags and
304s, trials by campaign-local number, the table's extra sorts and range filters, the
running-now panel, the timeline, the time a requeued trial ran, agents that say goodbye
or vanish, parameter importance and the empirical distribution."""

from __future__ import annotations

import csv
import io
import math
import random
from datetime import timedelta
from typing import Any

import httpx
import pytest

from hpcopt import ApiError
from hpcopt_server import domain as d
from hpcopt_server.service.agents import Lease
from tests.helpers import web
from tests.helpers.clients import AgentClient
from tests.helpers.live import LiveServer
from tests.helpers.seed import MIXED_RESULTS, run_mixed_campaign, seed_campaign
from tests.helpers.specs import make_spec


def _get(server: LiveServer, path: str, **kw: Any) -> httpx.Response:
    return web.get(f"{server.http_url}/api/v1{path}", **kw)


def _run(service: Any, cid: int, agent: str, value: float, folds: int = 1) -> int:
    got = service.agents.acquire(agent, cid)
    lease = Lease(agent, got.trial.id, got.lease_id)
    for k in range(folds):
        service.agents.report_fold(lease, k, value)
    return int(service.agents.complete(lease).id)


def test_unchanged_data_answers_304_and_plot_data_changes_only_when_a_trial_finishes(live_server: LiveServer) -> None:
    service = live_server.service
    # Shared answers may stay up to 10x their cost stale (test_shared.py pins that with a
    # clock); here the revisions alone decide, or a slow moment on a loaded machine would
    # keep the old plot past the completion below.
    service.ctx.shared.factor = 0.0
    cid = seed_campaign(service, name="etag", completed=20, queued=3)
    for path in (f"/campaigns/{cid}", f"/campaigns/{cid}/trials?limit=5", f"/campaigns/{cid}/agents", "/campaigns"):
        first = _get(live_server, path)
        etag = first.headers["etag"]
        assert first.status_code == 200 and first.headers["cache-control"] == "no-cache", path
        again = _get(live_server, path, headers={"if-none-match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag, path
        assert _get(live_server, path, headers={"if-none-match": '"other"'}).status_code == 200, path
    plot = _get(live_server, f"/campaigns/{cid}/plot?max_points=100")
    tag = plot.headers["etag"]
    assert _get(live_server, f"/campaigns/{cid}/plot?max_points=100", headers={"if-none-match": tag}).status_code == 304
    assert _get(live_server, f"/campaigns/{cid}/plot?max_points=200", headers={"if-none-match": tag}).status_code == 200
    # A trial that starts running changes the table and the summary, not the plot data.
    reg = service.agents.register(host="n1", ranks=1, gpus=0, campaign_id=cid)
    got = service.agents.acquire(reg.agent_id, cid)
    lease = Lease(reg.agent_id, got.trial.id, got.lease_id)
    assert _get(live_server, f"/campaigns/{cid}/plot?max_points=100", headers={"if-none-match": tag}).status_code == 304
    summary = _get(live_server, f"/campaigns/{cid}")
    service.agents.report_fold(lease, 0, 0.001)
    for k in (1, 2):
        service.agents.report_fold(lease, k, 0.001)
    service.agents.complete(lease)
    changed = _get(live_server, f"/campaigns/{cid}/plot?max_points=100", headers={"if-none-match": tag})
    assert changed.status_code == 200 and changed.json()["completed"] == 21 and changed.headers["etag"] != tag
    assert _get(live_server, f"/campaigns/{cid}", headers={"if-none-match": summary.headers["etag"]}).status_code == 200
    # Exports are downloads: no ETag games.
    assert "etag" not in _get(live_server, f"/campaigns/{cid}/export").headers
    # An unknown campaign is still a 404, whatever If-None-Match says.
    assert _get(live_server, "/campaigns/999999/plot", headers={"if-none-match": "*"}).status_code == 404


def test_a_trial_is_found_by_its_campaign_local_number(live_server: LiveServer) -> None:
    cid = seed_campaign(live_server.service, name="numbers", completed=5, failed=1)
    with live_server.service.ctx.storage.read() as tx:
        trials, _ = tx.trials.page(cid)
    for t in trials:
        got = _get(live_server, f"/campaigns/{cid}/trials/{t.number}").json()
        assert got["id"] == t.id and got["number"] == t.number and got["events"] and got["folds"] is not None
    missing = _get(live_server, f"/campaigns/{cid}/trials/6")
    assert missing.status_code == 404 and "#6" in missing.json()["detail"]
    assert _get(live_server, f"/campaigns/{cid}/trials/-1").status_code == 422
    assert _get(live_server, f"/campaigns/{cid}/trials/{2**40}").status_code == 422
    assert _get(live_server, "/campaigns/999999/trials/0").status_code == 404


def test_the_table_sorts_by_parameter_duration_and_agent_and_filters_by_ranges(live_server: LiveServer) -> None:
    service = live_server.service
    cid = seed_campaign(service, name="table", completed=30, failed=2, queued=2)
    url = f"/campaigns/{cid}/trials"
    every = _get(live_server, url, params={"limit": 100}).json()["trials"]
    lr = _get(live_server, url, params={"sort": "param:lr", "limit": 100}).json()["trials"]
    assert [t["params"]["lr"] for t in lr] == sorted(t["params"]["lr"] for t in every)
    act = _get(live_server, url, params={"sort": "param:act", "order": "desc", "limit": 100}).json()["trials"]
    order = ["relu", "tanh", "gelu"]  # the spec's order, not the alphabet
    assert [order.index(t["params"]["act"]) for t in act] == sorted(
        (order.index(t["params"]["act"]) for t in act), reverse=True
    )
    by_time = _get(live_server, url, params={"sort": "duration", "order": "desc", "limit": 100}).json()["trials"]
    ran = [t["ran_seconds"] for t in by_time]
    assert ran[:30] == [30.0] * 30 and ran[30:32] == [5.0, 5.0] and ran[32:] == [None, None], "never started: last"
    # Ranges: value, a log parameter, a categorical one by position; all must hold.
    lo, hi = 1e-3, 1e-2
    narrowed = _get(live_server, url, params=[("range", f"lr:{lo}:{hi}"), ("limit", 100)])
    want = [t["number"] for t in every if lo <= t["params"]["lr"] <= hi]
    assert sorted(t["number"] for t in narrowed.json()["trials"]) == want and narrowed.json()["total"] == len(want)
    both = _get(live_server, url, params=[("range", "act:1:1"), ("range", "value:0:1.5"), ("limit", 100)]).json()
    assert both["trials"] and all(t["params"]["act"] == "tanh" and t["value"] <= 1.5 for t in both["trials"])
    for bad, field in (("colour:0:1", "range"), ("lr:1:0", "range"), ("lr:nan:1", "range"), ("lr:0", "range")):
        r = _get(live_server, url, params={"range": bad})
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == field, (bad, r.text)
    r = _get(live_server, url, params={"sort": "param:colour"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "sort"
    # The agent column: host and Slurm job, sortable by host.
    for host, job in (("node-b", "77"), ("node-a", "76")):
        reg = service.agents.register(host=host, ranks=1, gpus=0, slurm_job_id=job, campaign_id=cid)
        service.agents.acquire(reg.agent_id, cid)
    by_agent = _get(live_server, url, params={"sort": "agent", "limit": 2}).json()["trials"]
    assert [(t["agent_host"], t["agent_job"]) for t in by_agent] == [("node-a", "76"), ("node-b", "77")]


def test_a_requeued_trial_stops_its_clock_and_the_timeline_shows_each_attempt(live_server: LiveServer) -> None:
    service = live_server.service
    cid = service.campaigns.create(make_spec(name="requeue", folds=1)).id
    a = service.agents.register(host="node1", ranks=1, gpus=0, slurm_job_id="5", campaign_id=cid).agent_id
    got = service.agents.acquire(a, cid)
    service.agents.release(Lease(a, got.trial.id, got.lease_id), d.TrialState.PREEMPTED, "walltime")
    first = _get(live_server, f"/campaigns/{cid}/trials").json()["trials"][0]
    assert first["state"] == "QUEUED" and first["ran_seconds"] is not None
    real_clock = service.ctx.clock
    service.ctx.clock = lambda: real_clock() + timedelta(minutes=10)
    try:
        later = _get(live_server, f"/campaigns/{cid}/trials").json()["trials"][0]
        assert later["ran_seconds"] == first["ran_seconds"], "waiting in the queue is not running"
    finally:
        service.ctx.clock = real_clock
    again = service.agents.acquire(a, cid)
    assert again.trial.id == got.trial.id
    second = _get(live_server, f"/campaigns/{cid}/trials").json()["trials"][0]
    assert second["ran_seconds"] == first["ran_seconds"] and second["running_since"] is not None, second
    spans = _get(live_server, f"/campaigns/{cid}/timeline").json()
    assert spans["total"] == 2
    assert [(s["attempt"], s["outcome"], s["agent_host"], s["agent_job"]) for s in spans["spans"]] == [
        (1, "preempted", "node1", "5"),
        (2, "running", "node1", "5"),
    ]
    assert spans["spans"][1]["end"] is None
    assert _get(live_server, f"/campaigns/{cid}/timeline", params={"limit": 1}).json()["spans"][0]["attempt"] == 2
    assert _get(live_server, f"/campaigns/{cid}/timeline", params={"limit": 0}).status_code == 422


def test_running_now_lists_each_running_trial_with_its_progress(live_server: LiveServer) -> None:
    service = live_server.service
    cid = service.campaigns.create(make_spec(name="running", folds=3, training={"task": "t.py:T", "epochs": 4})).id
    reg = service.agents.register(host="gpu07", ranks=2, gpus=2, slurm_job_id="4242", campaign_id=cid)
    got = service.agents.acquire(reg.agent_id, cid)
    lease = Lease(reg.agent_id, got.trial.id, got.lease_id)
    for step in (1, 2, 3, 4):
        service.agents.report_intermediate(lease, 0, step, 1.0 / step)
    service.agents.report_fold(lease, 0, 0.25)
    service.agents.report_intermediate(lease, 1, 1, 0.9)
    [row] = _get(live_server, f"/campaigns/{cid}/running").json()
    assert row["trial_id"] == got.trial.id and row["number"] == 0
    assert (row["agent_host"], row["agent_job"], row["folds"], row["folds_finished"], row["epochs"]) == (
        "gpu07",
        "4242",
        3,
        1,
        4,
    )
    assert row["steps"] == {"0": 4, "1": 1} and row["latest"] == {"fold": 1, "step": 1, "value": 0.9}
    # Its clock is running_since (the attempt's start), not seconds as of this answer: the
    # answers stay the same as time passes, so a poll of a quiet campaign is a 304.
    assert row["ran_seconds"] == 0 and row["running_since"] is not None
    table = _get(live_server, f"/campaigns/{cid}/trials").json()
    real_clock = service.ctx.clock
    service.ctx.clock = lambda: real_clock() + timedelta(minutes=10)
    try:
        assert _get(live_server, f"/campaigns/{cid}/running").json() == [row]
        assert _get(live_server, f"/campaigns/{cid}/trials").json() == table
        assert table["trials"][0]["running_since"] == row["running_since"]
        etag = _get(live_server, f"/campaigns/{cid}/running").headers["etag"]
        again = _get(live_server, f"/campaigns/{cid}/running", headers={"if-none-match": etag})
        assert again.status_code == 304
    finally:
        service.ctx.clock = real_clock
    service.agents.release(lease, d.TrialState.FAILED, "boom")
    assert _get(live_server, f"/campaigns/{cid}/running").json() == []


def test_an_agent_that_says_goodbye_is_gone_at_once_and_a_silent_one_later(live_server: LiveServer) -> None:
    service = live_server.service
    cid = service.campaigns.create(make_spec(name="goodbye", folds=1)).id
    with AgentClient(live_server.grpc_target) as client:
        leaving = client.register(host="leaves", campaign_id=cid).agent_id
        holder = client.register(host="holds", campaign_id=cid).agent_id
        got = client.acquire(holder, cid)
        assert client.deregister(leaving) == []
        # An agent that exits holding a trial gives it back to the queue at once.
        assert list(client.deregister(holder)) == [got.trial.id]
        assert client.deregister(holder) == [], "goodbye twice is harmless"
        with pytest.raises(ApiError) as err:
            client.deregister("f" * 32)
        assert err.value.code == "NOT_FOUND"
    agents = {a["host"]: a for a in _get(live_server, f"/campaigns/{cid}/agents").json()}
    assert agents["leaves"]["gone"] and agents["leaves"]["exited_at"] is not None
    assert agents["holds"]["gone"] and agents["holds"]["current_trial_id"] is None
    trial = _get(live_server, f"/trials/{got.trial.id}").json()
    assert trial["state"] == "QUEUED" and trial["attempt"] == 2
    assert "the agent exited" in trial["events"][-1]["reason"]
    # One that never says goodbye: gone after two heartbeat periods of silence.
    silent = service.agents.register(host="silent", ranks=1, gpus=0, campaign_id=cid).agent_id
    assert not next(v for v in service.insights.agents(cid) if v.agent.id == silent).gone
    real_clock = service.ctx.clock
    service.ctx.clock = lambda: real_clock() + timedelta(seconds=3 * service.ctx.settings.heartbeat_seconds)
    try:
        view = next(v for v in service.insights.agents(cid) if v.agent.id == silent)
        assert view.gone and view.agent.exited_at is None
    finally:
        service.ctx.clock = real_clock


def test_permutation_importance_sees_an_interaction_that_first_order_shares_miss(live_server: LiveServer) -> None:
    """y depends on x1 and x2 only together (an XOR of halves): each alone explains
    nothing, so the first-order shares are near 0; shuffling either breaks the surrogate."""
    service = live_server.service
    space = {
        "x1": {"type": "real", "low": 0.0, "high": 1.0},
        "x2": {"type": "real", "low": 0.0, "high": 1.0},
        "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
        "act": {"type": "categorical", "choices": ["a", "b", "c"]},
    }
    spec = make_spec(
        name="interaction",
        space=space,
        folds=1,
        algorithm={"name": "random", "seed": 5},
        budget={"max_trials": 300, "max_parallel": 1},
    )
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    noise = random.Random(1)
    for _ in range(250):
        got = service.agents.acquire(agent, cid)
        p = got.trial.params
        value = float((p["x1"] > 0.5) != (p["x2"] > 0.5)) + noise.gauss(0, 0.05)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, value)
        service.agents.complete(lease)
    first = _get(live_server, f"/campaigns/{cid}/importance").json()
    assert first["method"] == "first-order" and sum(p["raw"] for p in first["params"]) < 0.1, first
    perm = _get(live_server, f"/campaigns/{cid}/importance", params={"method": "permutation"}).json()
    assert perm["method"] == "permutation" and perm["completed"] == 250 and "shuffled" in perm["description"]
    shares = {p["name"]: p["importance"] for p in perm["params"]}
    assert {p["name"] for p in perm["params"][:2]} == {"x1", "x2"} and shares["x1"] + shares["x2"] > 0.85, shares
    assert math.isclose(sum(shares.values()), 1.0)
    # Seeded by the campaign: computed afresh, the same numbers.
    assert service.analysis._importance(cid, 0, "permutation") == service.analysis._importance(cid, 0, "permutation")
    bad = _get(live_server, f"/campaigns/{cid}/importance", params={"method": "fanova"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "method", bad.text
    assert "permutation" in bad.json()["detail"]


def test_importance_finds_the_parameter_that_dominates(live_server: LiveServer) -> None:
    service = live_server.service
    space = {
        "x": {"type": "real", "low": 0.0, "high": 1.0},
        "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
        "act": {"type": "categorical", "choices": ["a", "b", "c"]},
    }
    spec = make_spec(
        name="importance",
        space=space,
        folds=1,
        algorithm={"name": "random", "seed": 3},
        budget={"max_trials": 200, "max_parallel": 1},
    )
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    assert _get(live_server, f"/campaigns/{cid}/importance").json()["params"] == []
    noise = random.Random(0)
    for _ in range(120):
        got = service.agents.acquire(agent, cid)
        p = got.trial.params
        value = 10 * (p["x"] - 0.3) ** 2 + 0.05 * math.log10(p["lr"]) ** 2 / 16 + noise.gauss(0, 0.01)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, value)
        service.agents.complete(lease)
    out = _get(live_server, f"/campaigns/{cid}/importance").json()
    assert out["completed"] == 120 and out["params"][0]["name"] == "x"
    shares = {p["name"]: p["importance"] for p in out["params"]}
    assert shares["x"] > 0.8 and shares["act"] < 0.1, shares
    assert math.isclose(sum(shares.values()), 1.0)
    # The same trials give the same answer; and the EDF covers every completed trial.
    assert _get(live_server, f"/campaigns/{cid}/importance").json() == out
    plot = _get(live_server, f"/campaigns/{cid}/plot", params={"max_points": 10}).json()
    assert len(plot["edf"]) == 120 and plot["edf"] == sorted(plot["edf"]) and len(plot["points"]) < 120
    assert all(p["finished_at"] for p in plot["points"])


def test_values_that_are_not_results_are_absent_and_never_sort_or_filter_among_results(
    live_server: LiveServer,
) -> None:
    """Through the real agent API (``run_mixed_campaign``): only the completed trials carry
    a result; the pruned one its value reached, sorted after every result whichever the
    order; the running and the failed one none, and an open fold none."""
    cid = run_mixed_campaign(live_server.grpc_target, live_server.service, name="not-results")
    url = f"/campaigns/{cid}/trials"
    by_state = {t["state"]: t for t in _get(live_server, url, params={"limit": 100}).json()["trials"]}
    assert by_state["RUNNING"]["value"] is None and by_state["FAILED"]["value"] is None
    assert by_state["PRUNED"]["value"] == 0.05
    detail = _get(live_server, f"{url}/{by_state['RUNNING']['number']}").json()
    assert [(f["index"], f["finished"], f["value"]) for f in detail["folds"]] == [(0, False, None), (1, True, 0.03)]
    losses = [loss for loss, _ in MIXED_RESULTS]
    for order in ("asc", "desc"):
        # In SQL, and in Python (a range on numeric choices, which SQL does not hold).
        for extra in ([], [("range", "batch:0:1")]):
            got = _get(live_server, url, params=[("sort", "value"), ("order", order), ("limit", 100), *extra]).json()
            shown = [(t["state"], t["value"]) for t in got["trials"]]
            assert shown[:3] == [("COMPLETED", v) for v in sorted(losses, reverse=order == "desc")], (order, extra)
            assert shown[3] == ("PRUNED", 0.05) and {s for s, _ in shown[4:]} == {"RUNNING", "FAILED"}
    # A range of values holds results only: the pruned trial's 0.05 is not in 0..0.3.
    ranged = _get(live_server, url, params=[("range", "value:0:0.3"), ("limit", 100)]).json()
    assert [t["value"] for t in ranged["trials"]] == [0.2] and ranged["total"] == 1


def test_the_csv_holds_what_the_table_selects_in_its_order(live_server: LiveServer) -> None:
    """``export?format=csv`` with the table's state, range, sort and order: the same
    trials in the same order as the table (every page of it); without them every trial
    by number. Bad filters get the table's 422s."""
    cid = run_mixed_campaign(live_server.grpc_target, live_server.service, name="csv-selected")
    url = f"/campaigns/{cid}/export"

    def rows(*params: tuple[str, str]) -> list[dict[str, str]]:
        r = _get(live_server, url, params=[("format", "csv"), *params])
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), r.text
        return list(csv.DictReader(io.StringIO(r.text)))

    assert [int(r["number"]) for r in rows()] == list(range(6))
    best_last = rows(("state", "COMPLETED"), ("sort", "value"), ("order", "desc"))
    assert [float(r["loss"]) for r in best_last] == sorted((loss for loss, _ in MIXED_RESULTS), reverse=True)
    table = _get(
        live_server, f"/campaigns/{cid}/trials", params=[("sort", "value"), ("range", "batch:0:1"), ("limit", 2)]
    ).json()
    every = rows(("sort", "value"), ("range", "batch:0:1"))
    assert len(every) == table["total"] == 6, "every page, not the table's first"
    assert [int(r["number"]) for r in every[:2]] == [t["number"] for t in table["trials"]]
    assert [r["number"] for r in rows(("range", "value:0:0.3"))] == [str(t["number"]) for t in table["trials"][:1]]
    bad_filters = ((("range", "colour:0:1"), "range"), (("sort", "param:colour"), "sort"), (("state", "X"), "state"))
    for bad, field in bad_filters:
        r = _get(live_server, url, params=[("format", "csv"), bad])
        assert r.status_code == 422 and r.json()["errors"][0]["field"].startswith(field), r.text


def test_the_csv_leaves_out_the_columns_the_table_hides_and_holds_each_folds_values(live_server: LiveServer) -> None:
    """The review: the filtered CSV ignored the column chooser and had no fold values or
    fold metrics. ``hide`` (the chooser's keys) leaves columns out; each fold's value and
    metrics are columns of their own, empty where a trial has no such fold; a key the
    table cannot hide is refused by name, with what is allowed."""
    cid = run_mixed_campaign(live_server.grpc_target, live_server.service, name="csv-columns")
    url = f"/campaigns/{cid}/export"

    def rows(*params: tuple[str, str]) -> list[dict[str, str]]:
        r = _get(live_server, url, params=[("format", "csv"), *params])
        assert r.status_code == 200, r.text
        return list(csv.DictReader(io.StringIO(r.text)))

    every = rows()
    assert {"param_lr", "param_batch", "attempt", "duration_s", "agent_id", "agent_host"} <= set(every[0])
    assert {"fold_0_loss", "fold_0_latency", "fold_1_loss", "fold_1_latency"} <= set(every[0])
    completed = [r for r in every if r["state"] == "COMPLETED"]
    assert [(float(r["fold_0_loss"]), float(r["fold_1_latency"])) for r in completed] == list(MIXED_RESULTS)
    failed = next(r for r in every if r["state"] == "FAILED")
    assert (failed["fold_0_loss"], failed["fold_1_loss"]) == ("0.02", ""), failed
    assert all(r["agent_host"] == "n1" for r in every) and float(completed[0]["duration_s"]) >= 0
    narrow = rows(("hide", "param:batch"), ("hide", "agent"), ("hide", "duration"), ("state", "COMPLETED"))
    assert len(narrow) == 3
    gone = {"param_batch", "agent_id", "agent_host", "duration_s"}
    assert not gone & set(narrow[0]) and {"param_lr", "attempt", "fold_1_loss"} <= set(narrow[0]), list(narrow[0])
    r = _get(live_server, url, params=[("format", "csv"), ("hide", "param:bacth")])
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "hide", r.text
    assert "did you mean 'param:batch'?" in r.json()["detail"] and "param:lr" in r.json()["detail"], r.text
