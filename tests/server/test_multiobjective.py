"""Multi-objective campaigns (``objectives: [...]``) through real gRPC and HTTP servers on
SQLite and PostgreSQL: each trial's values, the Pareto front in the API, the CLI and
the export, and the bad input that must be refused by field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hpcopt import ApiError
from hpcopt.core.spec import parse_spec, spec_to_json_dict
from hpcopt.errors import SpecError
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec

OBJECTIVES = [{"metric": "loss", "direction": "minimize"}, {"metric": "acc", "direction": "maximize"}]
SPACE = {"x": {"type": "real", "low": 0.0, "high": 1.0}, "y": {"type": "real", "low": 0.0, "high": 1.0}}


def _spec(**extra: Any) -> dict[str, Any]:
    fields = {"objectives": OBJECTIVES, "space": SPACE, "folds": 2, "budget": {"max_trials": 12, "max_parallel": 4}}
    spec = make_spec(**{**fields, **extra})
    if "objective" not in extra:
        spec.pop("objective")  # `objectives` alone, as users write it
    return spec


def _dominated(a: list[float], b: list[float]) -> bool:
    """b dominates a (minimize loss, maximize acc)."""
    la, lb = (a[0], -a[1]), (b[0], -b[1])
    return all(y <= x for x, y in zip(la, lb, strict=True)) and la != lb


@pytest.mark.parametrize(
    ("extra", "field", "needle"),
    [
        ({"objectives": [{"metric": "loss"}]}, "objectives", "at least 2"),
        ({"objectives": [{"metric": "loss"}, {"metric": "loss"}]}, "", "each metric may appear once"),
        ({"objective": {"metric": "acc"}}, "", "objective must be the first of objectives"),
        ({"algorithm": "skopt"}, "", "skopt optimizes one objective"),
        ({"pruner": "asha"}, "", "cannot prune"),
        ({"objectives": [{"metric": "loss"}, {"metric": "t", "direction": "up"}]}, "objectives.1.direction", "one of"),
        ({"objectives": [{"metric": "a"}] * 5}, "objectives", "at most 4"),
        (
            {"objectives": [{"metric": m} for m in "abc"], "budget": {"max_trials": 10_001}},
            "",
            "budget.max_trials: a campaign with 3 objectives may have at most 10,000 trials",
        ),
    ],
)
def test_a_bad_objectives_list_is_refused_by_field(extra: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**_spec(), **extra})
    assert any(f == field and needle in msg for f, msg in err.value.errors), err.value.errors


def test_objectives_alone_make_the_first_the_objective() -> None:
    spec = spec_to_json_dict(parse_spec(_spec()))
    assert spec["objective"] == OBJECTIVES[0] and spec["objectives"] == OBJECTIVES
    assert "objectives" not in spec_to_json_dict(parse_spec(make_spec()))  # single-objective specs unchanged


def _trial(agent: AgentClient, agent_id: str, campaign_id: int, fn: Any, metrics: bool = True) -> int:
    got = agent.acquire(agent_id, campaign_id)
    assert got.status == "granted"
    lease = got.lease
    x, y = (got.trial.params[k].real for k in ("x", "y"))
    for k in range(2):
        loss, acc = fn(x, y, k)
        agent.report_fold(lease, k, loss, {"acc": acc} if metrics else {"other": 1.0})
    return int(agent.complete(lease).id)


def test_a_multi_objective_campaign_keeps_each_trials_values_and_serves_its_pareto_front(
    live_server: LiveServer, tmp_path: Path
) -> None:
    def fn(x: float, y: float, k: int) -> tuple[float, float]:
        return x + 0.1 * y + 0.01 * k, 1 - (1 - x) ** 2 - 0.1 * y  # a trade-off along x

    http = web.http(base_url=f"{live_server.http_url}/api/v1")
    with Client(live_server.grpc_target) as c, AgentClient(live_server.grpc_target) as agent:
        cid = int(c.create_campaign(_spec(algorithm={"name": "ea", "seed": 4})).id)
        reg = agent.register(host="n", ranks=1, gpus=0, campaign_id=cid)
        # A fold without the second objective's metric is refused by name; nothing stored.
        got = agent.acquire(reg.agent_id, cid)
        with pytest.raises(ApiError) as err:
            agent.report_fold(got.lease, 0, 0.5, {"other": 1.0})
        assert err.value.code == "INVALID_ARGUMENT" and "'acc'" in err.value.message
        agent.release(got.lease, "FAILED", "no acc")
        for _ in range(10):
            _trial(agent, reg.agent_id, cid, fn)

        trials = http.get(f"/campaigns/{cid}/trials", params={"state": "COMPLETED", "limit": 100}).json()["trials"]
        assert len(trials) == 10
        for t in trials:
            x, y = t["params"]["x"], t["params"]["y"]
            loss = np.mean([fn(x, y, k)[0] for k in range(2)])
            assert t["values"] == pytest.approx([loss, fn(x, y, 0)[1]]) and t["value"] == pytest.approx(loss)
        values = {t["id"]: t["values"] for t in trials}
        expected = {i for i, v in values.items() if not any(_dominated(v, w) for w in values.values())}

        front = http.get(f"/campaigns/{cid}/front").json()
        assert {t["id"] for t in front} == expected
        # The campaign list says how large the front is (no one trial is the best).
        listed = {c["id"]: c for c in http.get("/campaigns").json()["campaigns"]}
        assert listed[cid]["front_size"] == len(expected) and listed[cid]["objectives"] == ["loss", "acc"]
        assert [t["values"][0] for t in front] == sorted(t["values"][0] for t in front)  # best first in objective 1
        assert [t.id for t in c.get_pareto_front(cid).trials] == [t["id"] for t in front]

        plot = http.get(f"/campaigns/{cid}/plot").json()
        summaries = plot["objectives"]
        assert [{"metric": o["metric"], "direction": o["direction"]} for o in summaries] == OBJECTIVES
        assert set(plot["front"]) == expected
        for k, o in enumerate(summaries):  # each objective's own best-so-far and distribution
            by_number = sorted(trials, key=lambda t: t["number"])
            best = max if o["direction"] == "maximize" else min
            running = [best(t["values"][k] for t in by_number[: i + 1]) for i in range(len(by_number))]
            assert o["best"][-1]["value"] == pytest.approx(running[-1])
            assert sorted(o["edf"]) == pytest.approx(sorted(t["values"][k] for t in trials))
        assert all(p["values"] == values[p["trial_id"]] for p in plot["points"])

        cli = subprocess.run(
            [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, "--json", "best", str(cid)],
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
        assert cli.returncode == 0, cli.stderr
        assert [t["id"] for t in json.loads(cli.stdout)] == [t["id"] for t in front]

        exported = c.export_campaign(cid)
        numbers = {t["id"]: t["number"] for t in trials}
        assert exported["front"] == sorted(numbers[i] for i in expected)
        copy = int(c.import_campaign(exported).id)
        assert [t["number"] for t in http.get(f"/campaigns/{copy}/front").json()] == [t["number"] for t in front]

        # A single-objective campaign's front is its best trial.
        single = int(c.create_campaign(make_spec(folds=1)).id)
        assert http.get(f"/campaigns/{single}/front").json() == []
        assert http.get("/campaigns/999/front").status_code == 404


def test_an_import_with_values_that_do_not_fit_the_objectives_is_refused_by_field(live_server: LiveServer) -> None:
    http = web.http(base_url=f"{live_server.http_url}/api/v1")
    with Client(live_server.grpc_target) as c, AgentClient(live_server.grpc_target) as agent:
        cid = int(c.create_campaign(_spec()).id)
        reg = agent.register(host="n", ranks=1, gpus=0, campaign_id=cid)
        _trial(agent, reg.agent_id, cid, lambda x, y, k: (x, y))
        doc = c.export_campaign(cid)
    for values, needle in (([1.0], "one value per objective"), (None, "needs values"), ([9.0, 1.0], "must equal")):
        bad = json.loads(json.dumps(doc))
        bad["trials"][0]["values"] = values if values != [9.0, 1.0] else [bad["trials"][0]["value"] + 1, 1.0]
        r = http.post("/campaigns/import", json=bad)
        assert r.status_code == 422 and needle in r.text and "trials.0.values" in r.text, r.text
    single = json.loads(json.dumps(doc))
    single["spec"].pop("objectives")
    single["spec"]["objective"] = OBJECTIVES[0]
    r = http.post("/campaigns/import", json=single)  # values in a single-objective campaign
    assert r.status_code == 422 and "only the trials of a campaign with objectives" in r.text, r.text


def test_a_warm_start_needs_the_same_objectives(live_server: LiveServer) -> None:
    with Client(live_server.grpc_target) as c:
        single = int(c.create_campaign(make_spec()).id)
        with pytest.raises(ApiError) as err:
            c.create_campaign(_spec(warm_start={"campaigns": [single]}))
    assert "warm_start.campaigns.0" in err.value.message and "minimize loss, maximize acc" in err.value.message


def test_plot_data_draws_a_large_front_evenly_and_says_how_large_it_is(service: Any) -> None:
    from hpcopt_server.service.agents import Lease

    cid = service.campaigns.create(_spec(folds=1, budget={"max_trials": 30, "max_parallel": 30})).id
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    for i in range(30):  # every trial on the front: loss up, accuracy up
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, i / 30, {"acc": i / 30})
        service.agents.complete(lease)
    plot = service.insights.plot_data(cid, max_points=10)
    assert plot["front_size"] == 30 and len(plot["front"]) == 5
    losses = {p["trial_id"]: p["value"] for p in plot["points"]}
    assert [round(losses[t] * 30) for t in plot["front"]] == [0, 7, 14, 22, 29]  # evenly, ends included
    assert plot["downsampled"] and len(plot["points"]) <= 15


def test_the_csv_export_has_a_column_per_objective(service: Any) -> None:
    from hpcopt_server.service.agents import Lease

    cid = service.campaigns.create(_spec(folds=1)).id
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, cid)
    lease = Lease(agent, got.trial.id, got.lease_id)
    service.agents.report_fold(lease, 0, 0.25, {"acc": 0.75})
    service.agents.complete(lease)
    header, row = service.insights.trials_csv(cid).splitlines()[:2]
    assert header.split(",")[4:7] == ["loss", "loss_std", "acc"] and row.split(",")[4:7] == ["0.25", "0.0", "0.75"]


def test_the_table_filters_by_any_objective_and_names_what_it_accepts(service: Any) -> None:
    from hpcopt_server.errors import InvalidArgument
    from hpcopt_server.service.agents import Lease

    cid = service.campaigns.create(_spec(folds=1, budget={"max_trials": 20, "max_parallel": 20})).id
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    accs = {}
    for i in range(20):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        accs[got.trial.number] = (i * 7 % 20) / 20
        service.agents.report_fold(lease, 0, i / 20, {"acc": accs[got.trial.number]})
        service.agents.complete(lease)
    page = service.insights.table(cid, ranges=[("values.1", 0.25, 0.5)], limit=100)
    assert sorted(t.number for t in page.trials) == sorted(n for n, a in accs.items() if 0.25 <= a <= 0.5)
    both = service.insights.table(cid, ranges=[("values.1", 0.25, 0.5), ("value", 0.0, 0.5)], limit=100)
    assert {t.number for t in both.trials} == {t.number for t in page.trials if t.value <= 0.5}
    for bad in ("values.2", "values.0", "values.x", "values.-1"):
        with pytest.raises(InvalidArgument) as err:
            service.insights.table(cid, ranges=[(bad, 0.0, 1.0)])
        assert "values.1" in err.value.message and err.value.errors[0][0] == "range"
