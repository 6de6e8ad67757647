"""Seeded campaigns for the dashboard and insight tests: trials written straight into
storage in one transaction (10,000 trials in seconds), through the same Tx methods the
service uses, so the REST API reads them as it would real ones."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from hpcopt_server import domain as d
from tests.conftest import make_spec

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
) -> int:
    """A RUNNING campaign with ``completed`` COMPLETED trials (values from
    :func:`objective` plus noise, fold values and per-epoch curves for the first
    ``curves_for``), ``failed`` FAILED trials with an error, and ``queued`` QUEUED ones."""
    total = completed + failed + queued
    spec = make_spec(
        name=name,
        space=SPACE,
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
            tx.insert_agent(
                d.Agent(agent_id, f"node{k + 1:02d}", 4, 0, "1001", cid, 0, "seed", t0, seen, exited_at=seen)
            )
        for number in range(total):
            agent_id = agents[number % AGENTS]
            params = {
                "lr": 10 ** rng.uniform(-4, 0),
                "width": rng.randint(8, 256),
                "act": rng.choice(["relu", "tanh", "gelu"]),
            }
            started = t0 + timedelta(seconds=35 * (number // AGENTS))
            if number < completed:
                base = objective(params)
                values = [base + rng.gauss(0, 0.05) for _ in range(folds)]
                mean = sum(values) / folds
                std = (sum((v - mean) ** 2 for v in values) / max(1, folds - 1)) ** 0.5
                trial = tx.insert_trial(cid, number, params, d.TrialState.RUNNING, started, started_at=started)
                for k, v in enumerate(values):
                    uri = f"file:///ckpt/{cid}/{trial.id}/fold{k}.pt"
                    metrics = {"loss": v, "acc": 1 / (1 + v)}
                    tx.put_fold(trial.id, d.Fold(k, True, v, metrics, uri, 1), started)
                    if number < curves_for:
                        for e in range(1, epochs + 1):
                            tx.put_curve_point(trial.id, k, e, v + (epochs - e) * 0.3 * (1 + k * 0.1))
                tx.add_event(trial.id, 1, "acquired", started, agent_id=agent_id)
                tx.finish_trial(
                    trial.id,
                    d.TrialState.COMPLETED,
                    started + timedelta(seconds=30),
                    value=mean,
                    value_std=std,
                    agent_id=agent_id,
                )
                tx.add_event(trial.id, 1, "completed", started + timedelta(seconds=30), agent_id=agent_id)
            elif number < completed + failed:
                trial = tx.insert_trial(cid, number, params, d.TrialState.RUNNING, started, started_at=started)
                error = "fold 0, epoch 1: rank 0: Traceback (most recent call last):\nRuntimeError: boom"
                tx.add_event(trial.id, 1, "acquired", started, agent_id=agent_id)
                tx.add_event(trial.id, 1, "failed", started + timedelta(seconds=5), agent_id=agent_id, reason=error)
                tx.finish_trial(
                    trial.id, d.TrialState.FAILED, started + timedelta(seconds=5), error=error, agent_id=agent_id
                )
            else:
                tx.insert_trial(cid, number, params, d.TrialState.QUEUED, started)
        tx.set_next_trial_number(cid, total)
    return cid


def checkpoint_uri(server_id: str, campaign_id: int, trial_id: int, fold: int, root: str = "/ck") -> str:
    """A checkpoint URI as an agent with checkpoint root ``root`` reports it."""
    return f"file://{root}/{server_id}/{campaign_id}/{trial_id}/fold{fold}.pt"
