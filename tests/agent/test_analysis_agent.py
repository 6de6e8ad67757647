"""A campaign's ``analysis`` with the real agent under mpiexec against a real server: at
each fold's end the fold group (2 ranks, Hessian-vector products summed over both)
computes what the spec asks, within its planned cost; the scalars arrive with the
fold's metrics, the event log says what it cost, and the whole result is stored with
the trial and served over REST."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tests.agent.test_docs_blocks import docs_blocks
from tests.helpers import web
from tests.helpers.agents import AgentServer, agent_spec, dump
from tests.helpers.env import scaled

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(900)]

EPOCHS = 3
ANALYSIS = {
    "on": "all",
    "hessian": {"top_k": 2, "steps": 8, "density_samples": 1, "density_steps": 6, "trace": True},
    "landscape": {"points": 5, "grid": 3},
    "samples": 40,
    "min_samples": 40,
}


def test_each_fold_is_analysed_on_its_own_ranks_and_reports_what_it_cost(agent_server: AgentServer) -> None:
    spec: dict[str, Any] = agent_spec(
        budget={"max_trials": 2, "max_parallel": 2},
        training={"task": "tests/agent/tasks.py:Regression", "epochs": EPOCHS, "ranks_per_fold": 2},
    )
    campaign = agent_server.submit({**spec, "analysis": ANALYSIS})
    result = agent_server.run_agent(4, campaign, "--groups", "1", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = [c.get_trial(t.id) for t in c.list_trials(campaign, limit=10)]
    assert [t.state for t in trials] == ["COMPLETED", "COMPLETED"], dump(result)
    docs = []
    for t in trials:
        got = web.get(f"{agent_server.url}/api/v1/trials/{t.id}/analysis").json()
        assert [f["fold"] for f in got["folds"]] == [0, 1], got
        docs += [f["document"] for f in got["folds"]]
        for fold in t.folds:
            m = fold.metrics
            assert m["hessian_eig_1"] >= m["hessian_eig_2"] > 0, m  # a least-squares fit: positive curvature
            assert m["analysis_samples"] == 40 and m["analysis_seconds"] > 0
        said = [e.reason for e in t.events if e.kind == "analysis"]
        # 8 + 6 + 3 x 8 HVPs: top-k, the density, the trace at each epoch's snapshot.
        heads = sorted(s.split(" in ")[0] for s in said)
        assert heads == [f"fold {k}: 38 HVPs and 14 loss passes on 40 samples" for k in (0, 1)], said
    for out in docs:
        assert out["cost"]["hvps"] == 8 + 6 + EPOCHS * 8 and out["cost"]["passes"] == 5 + 9
        assert out["epochs"] == [1, 2, 3] and len(out["hessian"]["trace"]) == EPOCHS
        assert len(out["landscape"]["trajectory"]["xs"]) == EPOCHS
        # The last epoch's snapshot is the final weights: the plane's origin.
        assert out["landscape"]["trajectory"]["xs"][-1] == pytest.approx(0, abs=1e-9)
        assert out["hessian"]["trace"][-1] == pytest.approx(out["hessian"]["eigenvalues"][0], rel=1e-4)


def test_on_best_only_the_trials_that_lead_when_they_finish_are_analysed(agent_server: AgentServer) -> None:
    spec: dict[str, Any] = agent_spec(
        budget={"max_trials": 5, "max_parallel": 1},
        folds=1,
        training={"task": "tests/agent/tasks.py:Regression", "epochs": 2, "ranks_per_fold": 2},
    )
    analysis = {"hessian": {"top_k": 1, "steps": 4, "density_samples": 0}, "samples": 40, "min_samples": 40}
    campaign = agent_server.submit({**spec, "analysis": analysis})  # on: best, the default
    result = agent_server.run_agent(2, campaign, "--groups", "1", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = sorted((c.get_trial(t.id) for t in c.list_trials(campaign, limit=10)), key=lambda t: t.number)
    assert [t.state for t in trials] == ["COMPLETED"] * 5, dump(result)
    best = float("inf")
    chosen = []
    for t in trials:  # one at a time: each was judged against the ones before it
        assert t.value is not None
        leads = t.value <= best
        best = min(best, t.value)
        stored = web.get(f"{agent_server.url}/api/v1/trials/{t.id}/analysis").json()["folds"]
        said = [e.reason for e in t.events if e.kind == "analysis"]
        assert bool(stored) == leads == ("hessian_eig_1" in t.folds[0].metrics), (t.number, said)
        if not leads:
            metric = spec["objective"]["metric"]
            assert said == [
                f"fold 0: not computed: {metric} {t.folds[0].value:.6g} is not as good as the best trial's "
                f"{best:.6g} (analysis.on: best)"
            ]
        chosen.append(leads)
    assert chosen[0] and not all(chosen), chosen  # seed 3 gives trials that do not lead


def test_the_guides_campaign_runs_as_written_and_each_fold_says_what_its_analysis_cost(
    agent_server: AgentServer,
) -> None:
    # The guide's spec as written, cut to 1 trial of 2 epochs (as the first-campaign test
    # cuts its own); the analysis options are the page's.
    [(lang, text)] = docs_blocks("analysis-campaign")
    assert lang == "yaml"
    spec = yaml.safe_load(text)
    spec["budget"], spec["training"]["epochs"] = {"max_trials": 1, "max_parallel": 1}, 2
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(2, campaign, "--groups", "1", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        [t] = [c.get_trial(t.id) for t in c.list_trials(campaign, limit=10)]
    assert t.state == "COMPLETED" and len(t.folds) == 5, dump(result)
    # 2 epochs of 1,437 samples buy fewer than min_samples at 3%: the floor, said.
    assert all(f.metrics["analysis_samples"] == 64 for f in t.folds)
    assert all(f.metrics["hessian_eig_1"] >= f.metrics["hessian_eig_3"] for f in t.folds)
    said = [e.reason for e in t.events if e.kind == "analysis"]
    # 20 (top 3) + 30 (one density vector) + 2 x 20 (the trace) HVPs; 21 + 11 x 11 points.
    assert len(said) == 5 and all(": 90 HVPs and 142 loss passes on 64 samples in " in s for s in said), said
    got = web.get(f"{agent_server.url}/api/v1/trials/{t.id}/analysis").json()
    out = got["folds"][0]["document"]
    assert len(got["folds"]) == 5 and len(out["landscape"]["surface"]["loss"]) == 11 and out["epochs"] == [1, 2]
    assert len(out["hessian"]["trace"]) == 2 and out["landscape"]["directions"] == "random"


def test_an_analysis_asked_of_a_finished_trial_is_computed_by_the_next_agent_from_the_folds_checkpoints(
    agent_server: AgentServer,
) -> None:
    """``hpcopt analyse`` on a finished trial, then an agent
    started on the finished campaign: its two fold groups compute each fold's analysis
    from the fold's checkpoint, store it and end the request DONE; a fold whose
    checkpoint is gone ends another request FAILED, naming it."""
    spec: dict[str, Any] = agent_spec(
        budget={"max_trials": 3, "max_parallel": 1},
        folds=2,
        training={"task": "tests/agent/tasks.py:Regression", "epochs": 2, "ranks_per_fold": 2},
    )
    analysis = {"hessian": {"top_k": 2, "steps": 6, "density_samples": 0}, "landscape": {"points": 3, "grid": 0}}
    campaign = agent_server.submit({**spec, "analysis": {**analysis, "samples": 40, "min_samples": 40}})
    result = agent_server.run_agent(4, campaign, "--groups", "1", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    with agent_server.client() as c:
        trials = sorted((c.get_trial(t.id) for t in c.list_trials(campaign, limit=10)), key=lambda t: t.number)
    asked, gone = trials[1:3]  # whether analysed at their folds' ends or not
    [(_, text)] = docs_blocks("analyse-request")  # the guide's command, with this campaign and trial
    words = text.split("#")[0].split()
    assert words[:2] == ["hpcopt", "analyse"] and len(words) == 4, text
    cli = [sys.executable, "-m", "hpcopt.cli", "--server", agent_server.target, words[1]]
    said = subprocess.run([*cli, str(campaign), str(asked.number)], capture_output=True, text=True)
    assert said.returncode == 0 and f"analysis of trial #{asked.number} (id {asked.id}) QUEUED" in said.stdout, said
    Path(urlparse(gone.folds[1].checkpoint_uri).path).unlink()
    assert web.post(f"{agent_server.url}/api/v1/trials/{gone.id}/analysis").status_code == 202
    result = agent_server.run_agent(4, campaign, "--groups", "1", timeout=scaled(600))
    assert result.returncode == 0, dump(result)
    got = web.get(f"{agent_server.url}/api/v1/trials/{asked.id}/analysis").json()
    assert got["request"]["state"] == "DONE", (got["request"], dump(result))
    assert [f["fold"] for f in got["folds"]] == [0, 1]
    for f in got["folds"]:
        assert f["computed_at"] >= got["request"]["requested_at"]  # computed on request
        doc = f["document"]
        assert len(doc["hessian"]["eigenvalues"]) == 2 and doc["hessian"]["eigenvalues"][0] > 0
        assert doc["hessian"]["trace"] is None and not doc.get("epochs")  # no epoch weights after the fact
        assert len(doc["landscape"]["line"]["loss"]) == 3
    failed = web.get(f"{agent_server.url}/api/v1/trials/{gone.id}/analysis").json()
    assert failed["request"]["state"] == "FAILED" and "fold 1:" in failed["request"]["reason"], dump(result)
    assert "is gone" in failed["request"]["reason"]
    with agent_server.client() as c:
        events = [e.reason for e in c.get_trial(asked.id).events if e.kind == "analysis"]
    assert "requested analysis: 2 fold(s) analysed from their checkpoints" in events, events
