"""Seeded campaigns for the dashboard and insight tests: trials written straight into
storage in one transaction (10,000 trials in seconds), through the same Tx methods the
service uses, so the REST API reads them as it would real ones."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from hpcopt_server import domain as d
from tests.helpers.specs import make_spec

SPACE: dict[str, Any] = {
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
    "width": {"type": "int", "low": 8, "high": 256},
    "act": {"type": "categorical", "choices": ["relu", "tanh", "gelu"]},
}


AGENTS = 4


def objective(params: dict[str, Any]) -> float:
    lr, width = float(params["lr"]), int(params["width"])
    return (
        (math.log10(lr) + 2.0) ** 2
        + 0.3 * abs(math.log2(width) - 6)
        + {"relu": 0.0, "tanh": 0.2, "gelu": 0.1}[params["act"]]
    )


def seed_campaign(
    service: Any,
    *,
    name: str,
    completed: int,
    failed: int = 0,
    queued: int = 0,
    folds: int = 3,
    epochs: int = 4,
    curves_for: int = 50,
    seed: int = 0,
    pruned: int = 0,
    diverged: float = 0.0,
    space: dict[str, Any] | None = None,
    draw: Callable[[random.Random], dict[str, Any]] | None = None,
    loss: Callable[[dict[str, Any]], float] | None = None,
) -> int:
    """A RUNNING campaign with ``completed`` COMPLETED trials (values from
    :func:`objective` plus noise, fold values and per-epoch curves for the first
    ``curves_for``; a ``diverged`` share of them diverged, loss 1,000 to 10,000), ``pruned``
    PRUNED trials (pruned at epoch 2 of fold 0, with their curve), ``failed`` FAILED
    trials with an error, and ``queued`` QUEUED ones. ``space``, ``draw`` and ``loss``
    replace :data:`SPACE`, :func:`draw_params` and :func:`objective`."""
    draw = draw or draw_params
    loss = loss or objective
    total = completed + pruned + failed + queued
    spec = make_spec(
        name=name,
        space=space or SPACE,
        folds=folds,
        budget={"max_trials": max(total + 5, 10), "max_parallel": 4},
        training={"task": "tests/agent/tasks.py:Regression", "epochs": epochs},
    )
    cid = int(service.campaigns.create(spec).id)
    rng = random.Random(seed)
    # Trials ran on AGENTS agents of one Slurm job, one after another (30 s each, 5 s apart).
    rounds = -(-total // AGENTS)
    t0 = datetime.now(UTC) - timedelta(seconds=35 * rounds + 600)
    agents = [f"seed{cid:04d}{k:02d}" + "0" * 22 for k in range(AGENTS)]
    with service.ctx.storage.write() as tx:
        for k, agent_id in enumerate(agents):
            seen = t0 + timedelta(seconds=35 * rounds)
            tx.agents.insert(
                d.Agent(agent_id, f"node{k + 1:02d}", 4, 0, "1001", cid, 0, "seed", t0, seen, exited_at=seen)
            )
        for number in range(total):
            agent_id = agents[number % AGENTS]
            params = draw(rng)
            started = t0 + timedelta(seconds=35 * (number // AGENTS))
            if number < completed:
                # (No draw without divergence: a seed gives the campaign it always gave.)
                base = 10 ** rng.uniform(3, 4) if diverged and rng.random() < diverged else loss(params)
                write_completed(
                    tx, cid, number, params, base, agent_id, started, folds, epochs if number < curves_for else 0, rng
                )
            elif number < completed + pruned:
                trial = tx.trials.insert(cid, number, params, d.TrialState.RUNNING, started, started_at=started)
                base = loss(params) + 1.0
                tx.trials.put_curve(trial.id, 0, [(e, base + (epochs - e) * 0.3) for e in (1, 2)])
                reached = base + (epochs - 2) * 0.3
                why = f"median: its best loss in fold 0 up to epoch 2 ({reached:.4g}) is worse than the median"
                tx.trials.add_event(trial.id, 1, "acquired", started, agent_id=agent_id)
                tx.trials.add_event(
                    trial.id, 1, "pruned", started + timedelta(seconds=8), agent_id=agent_id, reason=why
                )
                tx.trials.finish(
                    trial.id,
                    d.TrialState.PRUNED,
                    started + timedelta(seconds=8),
                    value=reached,
                    error=why,
                    agent_id=agent_id,
                )
            elif number < completed + pruned + failed:
                trial = tx.trials.insert(cid, number, params, d.TrialState.RUNNING, started, started_at=started)
                error = "fold 0, epoch 1: rank 0: Traceback (most recent call last):\nRuntimeError: boom"
                tx.trials.add_event(trial.id, 1, "acquired", started, agent_id=agent_id)
                tx.trials.add_event(
                    trial.id, 1, "failed", started + timedelta(seconds=5), agent_id=agent_id, reason=error
                )
                tx.trials.finish(
                    trial.id, d.TrialState.FAILED, started + timedelta(seconds=5), error=error, agent_id=agent_id
                )
            else:
                tx.trials.insert(cid, number, params, d.TrialState.QUEUED, started)
        tx.campaigns.set_next_number(cid, total)
    return cid


def draw_params(rng: random.Random) -> dict[str, Any]:
    return {"lr": 10 ** rng.uniform(-4, 0), "width": rng.randint(8, 256), "act": rng.choice(["relu", "tanh", "gelu"])}


def write_completed(
    tx: Any,
    cid: int,
    number: int,
    params: dict[str, Any],
    base: float,
    agent_id: str,
    started: datetime,
    folds: int,
    epochs: int,
    rng: random.Random,
) -> None:
    """One COMPLETED trial: fold values around ``base``, a curve per fold over ``epochs``
    (none for 0), its acquired and completed events."""
    values = [base + rng.gauss(0, 0.05) for _ in range(folds)]
    mean = sum(values) / folds
    std = (sum((v - mean) ** 2 for v in values) / max(1, folds - 1)) ** 0.5
    trial = tx.trials.insert(cid, number, params, d.TrialState.RUNNING, started, started_at=started)
    uris = [f"file:///ckpt/{cid}/{trial.id}/fold{k}.pt" for k in range(folds)]
    tx.trials.put_folds(
        trial.id,
        [d.Fold(k, True, v, {"loss": v, "acc": 1 / (1 + v)}, uris[k], 1) for k, v in enumerate(values)],
        started,
    )
    for k, v in enumerate(values):
        tx.trials.put_curve(trial.id, k, [(e, v + (epochs - e) * 0.3 * (1 + k * 0.1)) for e in range(1, epochs + 1)])
    tx.trials.add_event(trial.id, 1, "acquired", started, agent_id=agent_id)
    done = started + timedelta(seconds=30)
    tx.trials.finish(trial.id, d.TrialState.COMPLETED, done, value=mean, value_std=std, agent_id=agent_id)
    tx.trials.add_event(trial.id, 1, "completed", done, agent_id=agent_id)


def add_completed(service: Any, cid: int, rng: random.Random, folds: int = 3, epochs: int = 4) -> None:
    """One more COMPLETED trial in campaign ``cid`` now (a live campaign's progress)."""
    with service.ctx.storage.write() as tx:
        number = tx.campaigns.get(cid).trials_created
        params = draw_params(rng)
        started = datetime.now(UTC) - timedelta(seconds=30)
        write_completed(tx, cid, number, params, objective(params), "", started, folds, epochs, rng)
        tx.campaigns.set_next_number(cid, number + 1)


def checkpoint_uri(server_id: str, campaign_id: int, trial_id: int, fold: int, root: str = "/ck") -> str:
    """A checkpoint URI as an agent with checkpoint root ``root`` reports it."""
    return f"file://{root}/{server_id}/{campaign_id}/{trial_id}/fold{fold}.pt"


#: A campaign whose parameters' effects are known (``truth_loss``), with a conditional
#: parameter: sgd's momentum.
TRUTH_SPACE: dict[str, Any] = {
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "rmsprop"]},
    "momentum": {"type": "real", "low": 0.0, "high": 0.99, "when": {"optimizer": ["sgd"]}},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5},
}


def truth_variance(momentum_weight: float) -> dict[str, float]:
    """The variance of each parameter's main effect in ``truth_loss`` (momentum's over
    all trials: it acts on the third that use sgd): the ranking a correct importance
    gives."""
    return {
        "lr": 0.64 * (1 / 5 - 1 / 9),  # 0.8 u^2, u uniform on [-1, 1]
        "optimizer": (0.3**2 + 0.1**2) / 3 - (0.4 / 3) ** 2,  # sgd 0.3, adam 0, rmsprop 0.1
        "momentum": momentum_weight**2 * 0.99**2 / 12 / 3,
        "dropout": 0.0,
    }


def truth_loss(params: dict[str, Any], momentum_weight: float, rng: random.Random) -> float:
    """0.8 u^2 for u = (log10 lr + 2) / 2, plus the optimizer's offset, plus
    ``momentum_weight`` x (momentum - 0.5) under sgd (centred: the optimizer's offset stays
    its whole effect), plus noise of sd 0.05; dropout does nothing."""
    u = (math.log10(float(params["lr"])) + 2.0) / 2.0
    value = 0.8 * u * u + {"sgd": 0.3, "adam": 0.0, "rmsprop": 0.1}[params["optimizer"]]
    if params["optimizer"] == "sgd":
        value += momentum_weight * (float(params["momentum"]) - 0.5)
    return value + rng.gauss(0.0, 0.05)


def run_truth_campaign(grpc_target: str, service: Any, *, trials: int, momentum_weight: float, seed: int) -> int:
    """A campaign over ``TRUTH_SPACE`` (random search, 3 folds) whose ``trials`` trials an
    agent ran through the real gRPC agent API, each fold reporting ``truth_loss``."""
    from tests.helpers.clients import AgentClient

    spec = make_spec(
        name=f"truth-m{momentum_weight}-s{seed}",
        space=TRUTH_SPACE,
        folds=3,
        algorithm={"name": "random", "seed": seed},
        budget={"max_trials": trials, "max_parallel": 1},
    )
    cid = int(service.campaigns.create(spec).id)
    rng = random.Random(seed)
    with AgentClient(grpc_target) as client:
        agent = client.register(host="truth", campaign_id=cid).agent_id
        for _ in range(trials):
            got = client.acquire(agent, cid)
            assert got.trial is not None and got.lease is not None, got
            for fold in range(3):
                client.report_fold(got.lease, fold, truth_loss(got.trial.params, momentum_weight, rng))
            client.complete(got.lease)
    return cid


#: ``run_mixed_campaign``'s completed trials: (loss, latency) each.
MIXED_RESULTS = ((0.9, 30.0), (0.2, 50.0), (0.5, 10.0))


def run_mixed_campaign(grpc_target: str, service: Any, *, name: str, two_objectives: bool = False) -> int:
    """A campaign (2 folds, numeric and categorical choices) whose trials one agent ran
    through the real gRPC agent API: the three ``MIXED_RESULTS`` completed, then one
    PRUNED after a point at 0.05, one FAILED after a point (0.01) and a finished fold
    (0.02), and one still RUNNING with points 2.28 then 0.64 on fold 0 and fold 1
    finished at 0.03. ``two_objectives``: minimize loss and latency."""
    from tests.helpers.clients import AgentClient

    space = {"lr": {"type": "real", "low": 1e-4, "high": 1.0}, "batch": {"type": "categorical", "choices": [16, 32]}}
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "latency", "direction": "minimize"}]
    spec = make_spec(name=name, folds=2, space=space)
    if two_objectives:
        spec.pop("objective")
        spec["objectives"] = objectives
    cid = int(service.campaigns.create(spec).id)
    with AgentClient(grpc_target) as client:
        agent = client.register(host="n1", campaign_id=cid).agent_id

        def started() -> Any:
            got = client.acquire(agent, cid)
            assert got.lease is not None, got
            return got.lease

        for loss, latency in MIXED_RESULTS:
            lease = started()
            for fold in (0, 1):
                client.report_fold(lease, fold, loss, {"latency": latency})
            client.complete(lease)
        pruned = started()
        client.report_intermediate(pruned, 0, 1, 0.05)
        client.release(pruned, "PRUNED", "plateau")
        failed = started()
        client.report_intermediate(failed, 0, 1, 0.01)
        client.report_fold(failed, 0, 0.02, {"latency": 1.0})
        client.release(failed, "FAILED", "out of memory")
        running = started()
        client.report_intermediate(running, 0, 1, 2.28)
        client.report_intermediate(running, 0, 2, 0.64)
        client.report_fold(running, 1, 0.03, {"latency": 1.0})
    return cid
