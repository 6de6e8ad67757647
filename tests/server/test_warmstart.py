"""Warm starts (``warm_start: {campaigns: [...]}``), on SQLite and PostgreSQL: a new
campaign's optimizer first observes the compatible completed trials of earlier ones,
which use none of its budget, and reaches their best sooner."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service import Service
from hpcopt_server.service.agents import Lease
from hpcopt_server.service.warmstart import warm_trials
from tests.helpers.specs import make_spec

SPACE = {"x1": {"type": "real", "low": -5.0, "high": 10.0}, "x2": {"type": "real", "low": 0.0, "high": 15.0}}


def branin(p: d.Params) -> float:
    x1, x2 = float(p["x1"]), float(p["x2"])
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def _spec(**extra: Any) -> dict[str, Any]:
    algorithm = {"name": "bo", "seed": 3, "options": {"n_initial": 8, "background_refit": False}}
    fields = {"space": SPACE, "algorithm": algorithm, "folds": 1, "budget": {"max_trials": 30, "max_parallel": 1}}
    return make_spec(**{**fields, **extra})


def _run(service: Service, campaign_id: int, trials: int, target: float = -math.inf) -> tuple[float, int | None]:
    """Runs trials one by one; (best value, trials until the best was <= target)."""
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    best, reached = math.inf, None
    for i in range(trials):
        got = service.agents.acquire(agent, campaign_id)
        assert got.trial is not None
        lease = Lease(agent, got.trial.id, got.lease_id)
        value = branin(got.trial.params)
        service.agents.report_fold(lease, 0, value, {"loss": value})
        service.agents.complete(lease)
        best = min(best, value)
        if reached is None and best <= target:
            reached = i + 1
    return best, reached


def test_a_warm_started_bo_campaign_reaches_the_old_best_in_fewer_trials(service: Service) -> None:
    old = service.campaigns.create(_spec(name="old")).id
    old_best, _ = _run(service, old, 20)
    warm = service.campaigns.create(_spec(name="warm", warm_start={"campaigns": [old]})).id
    cold = service.campaigns.create(_spec(name="cold")).id
    _, warm_reached = _run(service, warm, 12, old_best)
    _, cold_reached = _run(service, cold, 12, old_best)
    assert warm_reached is not None and warm_reached <= 5, warm_reached
    assert cold_reached is None or warm_reached < cold_reached
    assert service.campaigns.get(warm).campaign.trials_created == 12  # the old trials are not its trials


def test_only_compatible_trials_carry_over(service: Service) -> None:
    old = service.campaigns.create(_spec(name="old")).id
    _run(service, old, 12)
    narrower = {**SPACE, "x1": {"type": "real", "low": 0.0, "high": 10.0}, "x3": {"type": "int", "low": 0, "high": 3}}
    new = service.campaigns.create(_spec(name="narrow", space=narrower, warm_start={"campaigns": [old]}))
    with service.ctx.storage.read() as tx:
        olds, _ = tx.trials.page(old, states=[d.TrialState.COMPLETED])
        carried = warm_trials(tx, new)
    inside = [t for t in olds if float(t.params["x1"]) >= 0.0]
    assert carried == []  # x3 is needed and none of them has it
    lenient = {**narrower}
    lenient.pop("x3")
    new = service.campaigns.create(_spec(name="narrow2", space=lenient, warm_start={"campaigns": [old]}))
    with service.ctx.storage.read() as tx:
        carried = warm_trials(tx, new)
    assert 0 < len(carried) == len(inside) < len(olds)
    assert [t.params for t in carried] == [t.params for t in inside]


@pytest.mark.parametrize(
    ("warm", "objective", "message"),
    [
        ({"campaigns": [999]}, None, "campaign 999 does not exist"),
        (None, {"metric": "acc", "direction": "maximize"}, "optimized minimize loss, this one maximize acc"),
    ],
)
def test_warm_start_refuses_missing_or_incomparable_campaigns(
    service: Service, warm: dict[str, Any] | None, objective: dict[str, str] | None, message: str
) -> None:
    old = service.campaigns.create(_spec(name="old")).id
    spec = _spec(name="new", warm_start=warm or {"campaigns": [old]})
    if objective:
        spec["objective"] = objective
    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(spec)
    assert err.value.errors[0][0] == "warm_start.campaigns.0" and message in err.value.errors[0][1]


def test_an_imported_campaign_drops_its_warm_start(service: Service) -> None:
    from hpcopt_server.service.export import export_campaign
    from hpcopt_server.service.importing import import_campaign

    old = service.campaigns.create(_spec(name="old")).id
    warm = service.campaigns.create(_spec(name="warm", warm_start={"campaigns": [old]})).id
    doc = export_campaign(service.ctx, warm)
    assert doc["spec"]["warm_start"] == {"campaigns": [old]}
    again = import_campaign(service.ctx, doc)
    assert "warm_start" not in again.spec


def test_carried_trials_are_judged_by_the_new_campaign_s_constraints(service: Service) -> None:
    """The earlier campaign's outcome was against its own constraints (here none, or
    another bound): a carried trial is judged against the new campaign's, from its
    folds, and its constraint models learn from them; without constraints it carries
    no outcome."""

    def run(campaign_id: int, trials: int) -> None:
        agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
        for _ in range(trials):
            got = service.agents.acquire(agent, campaign_id)
            assert got.trial is not None
            lease = Lease(agent, got.trial.id, got.lease_id)
            value = branin(got.trial.params)
            service.agents.report_fold(lease, 0, value, {"loss": value, "mem": 100.0 * float(got.trial.params["x1"])})
            service.agents.complete(lease)

    free = service.campaigns.create(_spec(name="free")).id
    run(free, 12)
    loose = service.campaigns.create(_spec(name="loose", constraints=[{"metric": "mem", "max": 900.0}])).id
    run(loose, 12)
    tight = [{"metric": "mem", "max": 0.0}, {"metric": "loss", "max": 40.0}]
    new = service.campaigns.create(_spec(name="new", constraints=tight, warm_start={"campaigns": [free, loose]}))
    plain = service.campaigns.create(_spec(name="plain", warm_start={"campaigns": [loose]}))
    with service.ctx.storage.read() as tx:
        carried = warm_trials(tx, new)
        unconstrained = warm_trials(tx, plain)
    assert len(carried) == 24 and len(unconstrained) == 12
    for t in carried:
        x1, loss = float(t.params["x1"]), float(t.value)  # type: ignore[arg-type]
        assert t.constraint_values == pytest.approx((100.0 * x1, loss - 40.0)), t
        assert t.feasible == (x1 <= 0.0 and loss <= 40.0), t
        assert (t.violation or 0.0) == pytest.approx(max(x1, 0.0) * 100.0 / 1.0 + max(loss - 40.0, 0.0) / 40.0)
    assert {t.feasible for t in carried} == {True, False}
    assert all(t.constraint_values is None and t.violation is None and t.broken == "" for t in unconstrained)
    # The new campaign's models learn the bound from the carried trials alone.
    from hpcopt_server.service.suggestions import build_optimizer

    optimizer = build_optimizer(new)
    optimizer.feed(carried)
    assert optimizer.feasibility is not None and optimizer.feasibility.ready()
    # Two of branin's minima (loss 0.4): x1 < 0 fits the memory bound, x1 > 0 does not.
    feasible, over = (
        optimizer.feasibility.pof({"x1": -3.14, "x2": 12.3}),
        optimizer.feasibility.pof({"x1": 9.42, "x2": 2.5}),
    )
    assert feasible > 0.5 > over, (feasible, over)
