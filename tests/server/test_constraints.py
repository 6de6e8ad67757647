"""Constraints (``constraints`` in the spec) in the server: a trial's outcome from its
folds, a resource exhausted by a failure, what the search does with both, hard limits
before launch, and feasible trials first on every read path (REST, gRPC, the CLI, the
embedded study, the export)."""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpcopt.core.spec import parse_spec, spec_to_json_dict
from hpcopt.errors import SpecError
from hpcopt_server import domain as d
from hpcopt_server.service import Service
from hpcopt_server.service.agent_messages import AcquireStatus
from hpcopt_server.service.agents import Lease
from tests.helpers import web
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import ROOT, scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec

MEMORY = [{"metric": "peak_host_memory_mb", "max": 4000.0}]
#: A model's memory grows with its width: widths above 40 do not fit 4000 MiB (3/7 of
#: the space).
SPACE = {"width": {"type": "int", "low": 10, "high": 80}, "lr": {"type": "real", "low": 0.0, "high": 1.0}}


def memory_of(params: dict[str, Any]) -> float:
    return 100.0 * float(params["width"])


def loss_of(params: dict[str, Any]) -> float:
    # Wider is better: the unconstrained optimum (width 80) does not fit.
    return (80 - float(params["width"])) / 10 + (float(params["lr"]) - 0.3) ** 2


@pytest.mark.parametrize(
    ("constraints", "field", "needle"),
    [
        ([{"metric": "m"}], "constraints.0", "exactly one of max"),
        ([{"metric": "m", "max": 1, "min": 0}], "constraints.0", "exactly one of max"),
        ([{"metric": "m", "max": "a lot"}], "constraints.0.max", "valid number"),
        ([{"metric": "m", "max": math.inf}], "constraints.0.max", "finite"),
        ([{"metric": "m", "max": 1}, {"metric": "m", "min": 0}], "constraints.1.metric", "already bounded"),
        ([{"metric": "m", "max": 1, "spread": -1}], "constraints.0.spread", "greater than or equal to 0"),
        ([{"metric": "m", "maximum": 1}], "constraints.0.maximum", "unknown field"),
        ([{"metric": "", "max": 1}], "constraints.0.metric", "at least 1"),
        ([{"metric": "m", "max": 1}] * 17, "constraints", "at most 16"),
        ("peak_gpu_memory_mb <= 4000", "constraints", "valid list"),
    ],
)
def test_a_bad_constraint_is_refused_naming_its_field(constraints: Any, field: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(make_spec(constraints=constraints))
    assert any(f == field and needle in msg for f, msg in err.value.errors), err.value.errors


def test_a_resource_bound_needs_a_training_section() -> None:
    spec = make_spec(constraints=MEMORY)
    spec.pop("training")
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert err.value.errors[0][0] == "constraints.0.metric" and "measured by the agent" in err.value.errors[0][1]


def _run(service: Service, agent: str, campaign: d.Campaign, fits: bool = True) -> d.Trial | None:
    """One trial as a real agent would end it: every fold measured, or out of memory."""
    for _ in range(10):  # WAIT: every configuration this acquisition made was refused
        got = service.agents.acquire(agent, campaign.id)
        if got.status != AcquireStatus.WAIT:
            break
    if got.status == AcquireStatus.DONE:
        return None
    assert got.status == AcquireStatus.GRANTED, got
    assert got.trial is not None
    lease = Lease(agent, got.trial.id, got.lease_id)
    params = got.trial.params
    if memory_of(params) > 4000 or not fits:
        reason = (
            "fold 0, epoch 1: Traceback (most recent call last):\n"
            '  File "/work/task.py", line 12, in forward\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
            if "gpu" in json.dumps(campaign.constraints)
            else "fold 0, epoch 1: Traceback (most recent call last):\n"
            '  File "/work/task.py", line 12, in forward\nMemoryError'
        )
        return service.agents.release(lease, d.TrialState.FAILED, reason)
    for k in range(campaign.folds):
        loss = loss_of(params)
        metric = MEMORY[0]["metric"] if "host" in json.dumps(campaign.constraints) else "peak_gpu_memory_mb"
        service.agents.report_fold(lease, k, loss, {"loss": loss, metric: memory_of(params) - 10 * k})
    return service.agents.complete(lease)


def test_a_trial_killed_for_memory_is_infeasible_and_no_value_for_the_search(service: Service) -> None:
    from hpcopt_server.optimizers.bo import BayesianOptimization

    spec = make_spec(space=SPACE, constraints=MEMORY, algorithm={"name": "bo", "seed": 3}, folds=2)
    spec["budget"] = {"max_trials": 30, "max_parallel": 1}
    spec["pause_after_failures"] = 2  # out-of-memory failures are outcomes: they never pause it
    campaign = service.campaigns.create(spec)
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    ended = [t for t in (_run(service, agent, campaign) for _ in range(14)) if t is not None]
    killed = [t for t in ended if t.state == d.TrialState.FAILED and "MemoryError" in t.error]
    assert killed, "the Sobol phase draws wide models too"
    for t in killed:
        assert t.value is None and t.feasible is False
        assert t.broken.startswith("peak_host_memory_mb: ran out") and t.violation == pytest.approx(0.1)
        assert t.constraint_values == (pytest.approx(400.0),)
    fitting = [t for t in ended if t.state == d.TrialState.COMPLETED]
    for t in fitting:
        assert t.feasible is True and t.violation == 0.0 and t.broken == ""
        mean = memory_of(t.params) - 5  # folds 0 and 1 measured -0 and -10
        assert t.constraint_values == (pytest.approx(mean - 4000.0),)
    assert service.campaigns.get(campaign.id).campaign.state == d.CampaignState.RUNNING
    # The search: the objective's GP holds the completed trials only (no imputed row for
    # the killed ones), the memory model holds both.
    current = service.campaigns.get(campaign.id).campaign
    with service.ctx.storage.read() as tx:
        optimizer = service.ctx.optimizers._caught_up(tx, current)
    assert isinstance(optimizer, BayesianOptimization)
    assert len(optimizer._rows) == len(fitting)
    assert optimizer.feasibility is not None
    every = service.campaigns.trials(campaign.id, limit=100)[0]
    refused = [t for t in every if t.broken.startswith("not started")]  # bo's Sobol phase, before launch
    assert len(optimizer.feasibility.models[0].y) == len(fitting) + len(killed) + len(refused)


def test_a_completed_trial_that_breaks_a_bound_is_infeasible_and_says_which(service: Service) -> None:
    bounds = [{"metric": "acc", "min": 0.9}, {"metric": "loss", "max": 1.0, "spread": 2.0}]
    campaign = service.campaigns.create(make_spec(constraints=bounds, folds=3))
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, campaign.id)
    lease = Lease(agent, got.trial.id, got.lease_id)
    for k, (loss, acc) in enumerate([(0.5, 0.95), (0.7, 0.85), (0.9, 0.8)]):
        service.agents.report_fold(lease, k, loss, {"acc": acc})
    t = service.agents.complete(lease)
    # acc: mean 0.8667 < 0.9; loss: mean 0.7 + 2 * std 0.2 = 1.1 > 1.0.
    assert t.feasible is False
    assert t.constraint_values == (pytest.approx(0.9 - 2.6 / 3), pytest.approx(0.1))
    assert t.broken == "acc 0.866667 < 0.9; loss 1.1 > 1"
    assert t.violation == pytest.approx((0.9 - 2.6 / 3) / 0.9 + 0.1)
    stored = service.campaigns.trial(t.id)
    assert (stored.constraint_values, stored.violation, stored.broken) == (
        t.constraint_values,
        t.violation,
        t.broken,
    )


def test_a_configuration_predicted_to_exceed_a_hard_limit_is_never_started(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random search, its suggestions unscreened so that only the hard limit stands
    between a wide model and an agent: after the memory model has its first few
    measurements, nothing it predicts over the limit is started, and what it refuses
    is a FAILED trial that never ran, saying why."""
    from hpcopt_server.service import suggestions

    monkeypatch.setattr(suggestions, "screen", lambda made, model, again: made)
    spec = make_spec(space=SPACE, constraints=MEMORY, folds=1, algorithm={"name": "random", "seed": 5})
    spec["budget"] = {"max_trials": 60, "max_parallel": 1}
    campaign = service.campaigns.create(spec)
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    while _run(service, agent, campaign) is not None:
        pass
    trials = [service.campaigns.trial(t.id) for t in service.campaigns.trials(campaign.id, limit=100)[0]]
    ran = sorted((t for t in trials if any(e.kind == "acquired" for e in t.events)), key=lambda t: t.number)
    refused = [t for t in trials if any(e.kind == "skipped" for e in t.events)]
    assert refused, "random search draws wide models: the limit must have refused some"
    for t in refused:
        assert t.state == d.TrialState.FAILED and t.started_at is None and t.feasible is False
        assert t.broken.startswith("not started: peak_host_memory_mb predicted") and "> 4000" in t.broken
        assert memory_of(t.params) > 4000 * 0.9, t.params  # refused only near or over the limit
    failures = 0
    for t in ran:
        over = memory_of(t.params) > 4000
        assert not (over and failures >= 10), f"trial #{t.number} (width {t.params['width']}) was launched"
        failures += over
    assert len(ran) + len(refused) == 60


def test_the_search_keeps_its_launches_within_the_memory_limit(service: Service) -> None:
    """bo and the screened algorithms, as users run them: once the memory model has
    had its first failures, launches over the limit stop, and bo still finds the
    widest model that fits."""
    for algorithm in ("bo", "random", "ea"):
        spec = make_spec(space=SPACE, constraints=MEMORY, folds=1, algorithm={"name": algorithm, "seed": 2})
        spec["budget"] = {"max_trials": 40, "max_parallel": 1}
        campaign = service.campaigns.create(spec)
        agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
        ended = []
        while (t := _run(service, agent, campaign)) is not None:
            ended.append(t)
        launched = [t for t in ended if t.started_at is not None]
        over = [memory_of(t.params) > 4000 for t in sorted(launched, key=lambda t: t.number)]
        late = [i for i, o in enumerate(over) if o and sum(over[:i]) >= 10]
        assert not late, (algorithm, over)
        if algorithm == "bo":
            best = service.campaigns.best(campaign.id)
            assert best.feasible and best.params["width"] >= 37, best.params


def _trials(agent: AgentClient, agent_id: str, campaign_id: int, rows: list[tuple[float, float]]) -> list[int]:
    ids = []
    for loss, memory in rows:
        got = agent.acquire(agent_id, campaign_id)
        agent.report_fold(got.lease, 0, loss, {"peak_gpu_memory_mb": memory})
        ids.append(int(agent.complete(got.lease).id))
    return ids


def test_every_read_path_ranks_feasible_trials_first(live_server: LiveServer) -> None:
    spec = make_spec(
        folds=1,
        constraints=[{"metric": "peak_gpu_memory_mb", "max": 1000.0}],
        budget={"max_trials": 10, "max_parallel": 1},
    )
    http = web.http(base_url=f"{live_server.http_url}/api/v1")
    with Client(live_server.grpc_target) as c, AgentClient(live_server.grpc_target) as agent:
        cid = int(c.create_campaign(spec).id)
        reg = agent.register(host="n", ranks=1, gpus=0, campaign_id=cid)
        # The lowest loss breaks the memory bound; then feasible 0.5 and 0.3; a second
        # infeasible trial breaks it by less.
        best_infeasible, worse, best, slight = _trials(
            agent, reg.agent_id, cid, [(0.1, 5000.0), (0.5, 900.0), (0.3, 1000.0), (0.2, 1100.0)]
        )

        rest = http.get(f"/campaigns/{cid}/best").json()
        assert rest["id"] == best and rest["violation"] == 0.0 and rest["broken"] == ""
        assert c.get_best_trial(cid).id == best and c.get_best_trial(cid).feasible is True
        by_value = http.get(f"/campaigns/{cid}/trials", params={"sort": "value"}).json()["trials"]
        assert [t["id"] for t in by_value] == [best, worse, slight, best_infeasible]
        assert by_value[3]["broken"] == "peak_gpu_memory_mb 5000 > 1000" and by_value[3]["violation"] == 4.0
        grpc = {t.id: t for t in c.list_trials(cid)}
        assert grpc[slight].constraint_values == [pytest.approx(100.0)] and grpc[slight].feasible is False
        assert grpc[slight].broken == "peak_gpu_memory_mb 1100 > 1000" and grpc[worse].feasible is True
        listed = {x["id"]: x for x in http.get("/campaigns").json()["campaigns"]}
        assert listed[cid]["best_trial_id"] == best

        cli = subprocess.run(
            [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, "--json", "best", str(cid)],
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["id"] == best

        table = http.get(f"/campaigns/{cid}/export", params={"format": "csv", "sort": "value"}).text
        rows = list(csv.DictReader(io.StringIO(table)))
        assert [int(r["trial_id"]) for r in rows] == [best, worse, slight, best_infeasible]
        assert [r["feasible"] for r in rows] == ["yes", "yes", "no", "no"]
        assert rows[3]["broken"] == "peak_gpu_memory_mb 5000 > 1000"

        exported = c.export_campaign(cid)
        rows = {t["number"]: t for t in exported["trials"]}
        assert rows[0]["broken"] == "peak_gpu_memory_mb 5000 > 1000" and rows[2]["violation"] == 0.0
        copy = int(c.import_campaign(exported).id)
        assert c.get_best_trial(copy).number == 2  # the outcome travels with the trials
        plot = http.get(f"/campaigns/{cid}/plot").json()
        assert {p["trial_id"]: p["feasible"] for p in plot["points"]} == {
            best_infeasible: False,
            worse: True,
            best: True,
            slight: False,
        }


def test_the_embedded_study_takes_constraints_as_optuna_users_write_them(tmp_path: Path) -> None:
    """Optuna's door: ``trial.set_constraint`` and a ``constraints_func`` become the
    campaign's constraints (bounded at 0) while the first trial runs; the best trial is
    the best feasible one, as Optuna's ``best_trial`` is."""
    from hpcopt_server import optuna

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -10, 10)
        y = trial.suggest_float("y", -10, 10)
        trial.set_constraint("sum", x + y - 2)  # x + y <= 2
        trial.set_user_attr("x", x)
        return (x - 3) ** 2 + (y - 3) ** 2

    study = optuna.create_study(
        storage=str(tmp_path / "s.db"),
        algorithm="bo",
        seed=1,
        constraints_func=lambda t: [t.user_attrs["x"] - 1.5],  # x <= 1.5
    )
    try:
        study.optimize(objective, n_trials=25)
        assert study.spec["constraints"] == [
            {"metric": "constraint_sum", "max": 0.0, "spread": 0.0},
            {"metric": "constraint_0", "max": 0.0, "spread": 0.0},
        ]
        trials = [t for t in study.trials if t.state == "COMPLETED"]
        for t in trials:
            x, y = t.params["x"], t.params["y"]
            assert t.constraint_values == [pytest.approx(x + y - 2), pytest.approx(x - 1.5)]
            assert t.feasible == (x + y <= 2 and x <= 1.5)
        best = study.best_trial
        assert best.feasible, "an infeasible trial is never the best while a feasible one exists"
        assert best.value == min(t.value for t in trials if t.feasible)
        assert best.value < 8.5  # the constrained optimum is 8, at (1, 1)
    finally:
        study.close()


def test_the_native_study_takes_constraint_values_told_with_the_result(tmp_path: Path) -> None:
    from hpcopt_server import Study

    spec = {
        "name": "told",
        "objective": {"metric": "value", "direction": "minimize"},
        "space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
        "algorithm": {"name": "random", "seed": 4},
        "budget": {"max_trials": 4},
    }
    with Study(str(tmp_path / "n.db"), spec) as study:
        first = study.ask()
        assert first is not None
        x = first.params["x"]
        done = study.tell(first, -x, constraints=[x - 0.5])  # x <= 0.5
        assert done is not None and done.feasible == (x <= 0.5) and done.constraint_values == [pytest.approx(x - 0.5)]
        second = study.ask()
        assert second is not None
        with pytest.raises(ValueError, match="constraint_extra is not one of the campaign's constraints"):
            study.tell(second, 1.0, constraints={"extra": 1.0})
        with pytest.raises(ValueError, match="constraint_0 is nan"):
            study.tell(second, 1.0, constraints=[math.nan])
        assert study.tell(second, 5.0, constraints=[-1.0]).feasible is True  # type: ignore[union-attr]
        third = study.ask()
        assert third is not None
        assert study.tell(third, -10.0, constraints=[2.0]).feasible is False  # type: ignore[union-attr]
        expected = min(done.value, 5.0) if done.feasible else 5.0  # never an infeasible trial's
        assert study.best_trial.feasible and study.best_value == expected


def test_the_guides_spec_is_valid_and_bounds_what_the_agent_measures() -> None:
    from hpcopt.core.constraints import RESOURCES
    from tests.agent.test_docs_blocks import docs_blocks

    [(lang, text)] = docs_blocks("constraints-spec")
    assert lang == "yaml"
    spec = spec_to_json_dict(parse_spec(yaml.safe_load(text)))
    [bound] = spec["constraints"]
    assert bound["metric"] in RESOURCES and bound["max"] == 40000.0
    assert (ROOT / spec["training"]["task"].split(":")[0]).exists()


def test_the_guides_optuna_block_runs_as_written(tmp_path: Path) -> None:
    from tests.agent.test_docs_blocks import docs_blocks

    [(lang, text)] = docs_blocks("constraints-optuna")
    assert lang == "python" and text.startswith("from hpcopt_server import optuna\n")
    out = subprocess.run(
        [sys.executable, "-c", text], capture_output=True, text=True, cwd=tmp_path, timeout=scaled(300)
    )
    assert out.returncode == 0, out.stderr
    feasible, params = out.stdout.strip().splitlines()[-1].split(" ", 1)
    best = ast.literal_eval(params)
    assert feasible == "True" and best["x"] + best["y"] <= 2 + 1e-9, out.stdout
    assert list(tmp_path.iterdir()) == [], "nothing written where the script ran"


def test_the_multi_fidelity_searcher_makes_no_configuration_the_models_deem_infeasible() -> None:
    """``skip_infeasible``: a planning algorithm's new configurations the constraint
    models deem likely infeasible are left out (promotions and PBT intervals never);
    all of them are kept when none would be left."""
    from datetime import UTC, datetime

    from hpcopt.core import constraints as C
    from hpcopt_server.service.suggestions import make_optimizer, skip_infeasible

    spec = spec_to_json_dict(
        parse_spec(make_spec(space=SPACE, constraints=MEMORY, algorithm={"name": "mf", "seed": 1}, folds=1))
    )
    optimizer = make_optimizer(spec)
    assert optimizer.feasibility is not None and optimizer.plans
    now = datetime(2026, 1, 1, tzinfo=UTC)
    done = []
    for i, width in enumerate([12, 20, 30, 38, 50, 60, 70, 78]):
        params = {"width": width, "lr": 0.5}
        fits = memory_of(params) <= 4000
        outcome = (
            C.from_folds(MEMORY, [{"peak_host_memory_mb": memory_of(params)}])
            if fits
            else C.exhausted_outcome(MEMORY, ["peak_host_memory_mb"], "ran out")
        )
        state = d.TrialState.COMPLETED if fits else d.TrialState.FAILED
        done.append(
            d.Trial(
                id=i + 1,
                campaign_id=1,
                number=i,
                state=state,
                attempt=1,
                params=params,
                created_at=now,
                constraint_values=outcome.values,
                violation=outcome.violation,
                broken=outcome.broken,
            )
        )
    optimizer.feasibility.observe(done)
    wide, narrow = d.Suggestion({"width": 75, "lr": 0.4}), d.Suggestion({"width": 15, "lr": 0.4})
    promotion = d.Suggestion({"width": 75, "lr": 0.4}, promote=3)
    assert skip_infeasible([wide, narrow, promotion], optimizer) == [narrow, promotion]
    assert skip_infeasible([wide], optimizer) == [wide]  # none left: kept, not starved
