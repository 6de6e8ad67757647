"""A multi-fidelity (``algorithm: mf``) campaign driven through the real service by
simulated agents that train a unit's folds as the real agent does, counting every
fold-epoch: the server tests and the dashboard's seed it."""

from __future__ import annotations

import math
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.service import Service
from hpcopt_server.service.agents import AcquireStatus, Lease
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec

FOLDS, EPOCHS = 3, 9
SPACE = {
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
    "width": {"type": "int", "low": 8, "high": 64},
}


def mf_spec(max_trials: int = 24, max_parallel: int = 3, name: str = "test-campaign", **options: Any) -> dict[str, Any]:
    return make_spec(
        name=name,
        space=SPACE,
        algorithm={"name": "mf", "seed": 5, "options": {"n_initial": 6, **options}},
        budget={"max_trials": max_trials, "max_parallel": max_parallel},
        folds=FOLDS,
        training={"task": "tests:task", "epochs": EPOCHS},
    )


def loss(params: d.Params, fold: int, epochs: int) -> float:
    """A learning curve that falls with epochs, best at lr 1e-2, with a fold offset."""
    lr, width = float(params["lr"]), float(params["width"])  # type: ignore[arg-type]
    return (math.log10(lr) + 2) ** 2 + 0.002 * abs(width - 40) + 1.0 / epochs + 0.05 * fold


class Agents:
    """Agents that train a unit's folds as a real agent would: each fold from the epoch
    its checkpoint holds to the unit's epochs, counting every fold-epoch it trains."""

    def __init__(self, service: Service, campaign_id: int):
        self.service = service
        self.cid = campaign_id
        self.agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
        self.sid = service.agents.server_id()
        self.at: dict[tuple[int, int], int] = {}  # (trial id, fold) -> epochs its checkpoint holds
        self.trained: dict[tuple[int, int, int], int] = {}  # (trial, fold, epoch) -> times trained
        self.granted: list[d.Trial] = []

    def acquire(self) -> tuple[d.Trial, Lease] | None:
        got = self.service.agents.acquire(self.agent, self.cid)
        if got.status != AcquireStatus.GRANTED:
            return None
        assert got.trial is not None
        self.granted.append(got.trial)
        return got.trial, Lease(self.agent, got.trial.id, got.lease_id)

    def train(self, trial: d.Trial, lease: Lease) -> d.Trial:
        assert trial.fidelity is not None
        f = trial.fidelity
        finished = {x.index for x in trial.folds if x.finished}
        resume = {x.index: x.checkpoint_uri for x in trial.folds if not x.finished and x.checkpoint_uri}
        for k in range(f.folds):
            if k in finished:
                continue
            start = self.at.get((trial.id, k), 0) if k in resume else 0
            for e in range(start, f.epochs):
                key = (trial.id, k, e)
                self.trained[key] = self.trained.get(key, 0) + 1
            self.at[(trial.id, k)] = f.epochs
            uri = checkpoint_uri(self.sid, self.cid, trial.id, k)
            value = loss(trial.params, k, f.epochs)
            seconds = 0.1 * f.epochs
            self.service.agents.report_fold(lease, k, value, {"loss": value, "train_seconds": seconds}, uri)
        return self.service.agents.complete(lease)


def run_campaign(service: Service, agents: Agents, *, forget_at: int | None = None, limit: int = 400) -> list[d.Trial]:
    """Runs the campaign to its end (``limit`` rounds of up to 3 units at once)."""
    ended = []
    for step in range(limit):
        if forget_at is not None and step == forget_at:
            service.ctx.optimizers.forget(agents.cid)  # as after a restart: rebuilt from SQL
        held = [h for h in (agents.acquire() for _ in range(3)) if h]
        if not held:
            state = service.campaigns.get(agents.cid).campaign.state
            if state == d.CampaignState.COMPLETED:
                return ended
            continue
        for trial, lease in held:
            ended.append(agents.train(trial, lease))
    raise AssertionError(f"the campaign did not end in {limit} rounds")
