"""A simulated agent: speaks the real AgentService protocol, but "trains" by evaluating
a cheap closed-form loss, so the demo runs anywhere in seconds.

The loss has its optimum near lr = 0.01, width = 128, dropout = 0.2, gelu; each fold
adds its own noise, and each epoch reports a learning-curve point that decays toward
the fold's final value.
"""

from __future__ import annotations

import math
import random
import socket
import time
from dataclasses import dataclass, field

from hpcopt import AgentClient, lease_of, param_values
from hpcopt.v1 import agent_pb2


def simulated_loss(params: dict[str, bool | int | float | str], fold: int, rng: random.Random) -> float:
    lr, width, dropout = float(params["lr"]), float(params["width"]), float(params["dropout"])
    act_penalty = {"gelu": 0.0, "relu": 0.03, "tanh": 0.08}.get(str(params["activation"]), 0.1)
    loss = (
        0.1
        + 0.08 * (math.log10(lr) + 2.0) ** 2
        + 0.05 * (math.log2(width) - 7.0) ** 2
        + 0.4 * (dropout - 0.2) ** 2
        + act_penalty
    )
    return loss + rng.gauss(0.0, 0.01 * (1 + fold))


@dataclass
class SimulatedAgent:
    server: str
    campaign_id: int
    token: str | None = None
    epoch_seconds: float = 0.02
    name: str = field(default_factory=socket.gethostname)
    trials_done: int = 0

    def run(self) -> int:
        """Pulls and runs trials until the campaign is done; returns how many it ran."""
        with AgentClient(self.server, self.token) as api:
            reg = api.register(host=self.name, ranks=1, campaign_id=self.campaign_id, version="simulated")
            while True:
                resp = api.acquire(reg.agent_id, self.campaign_id)
                if resp.status == agent_pb2.AcquireResponse.STATUS_DONE:
                    return self.trials_done
                if resp.status == agent_pb2.AcquireResponse.STATUS_WAIT:
                    time.sleep(min(resp.retry_after_seconds, 0.2))
                    continue
                self._train(api, resp, reg.agent_id)

    def _train(self, api: AgentClient, resp: agent_pb2.AcquireResponse, agent_id: str) -> None:
        import json

        lease = lease_of(resp, agent_id)
        spec = json.loads(resp.campaign_spec_json)
        params = param_values(resp.trial)
        rng = random.Random(resp.trial.id)
        finished = {f.index for f in resp.trial.folds if f.finished}
        for fold in range(spec["folds"]):
            if fold in finished:
                continue  # done by an earlier attempt
            final = simulated_loss(params, fold, rng)
            epochs = spec["training"]["epochs"]
            for epoch in range(epochs):
                time.sleep(self.epoch_seconds)
                value = final + (1.5 - final) * math.exp(-3.0 * (epoch + 1) / epochs) * 0.5
                reply = api.report_intermediate(lease, fold, epoch, value)
                if reply.action != agent_pb2.HeartbeatResponse.ACTION_CONTINUE:
                    return  # pruned or cancelled: stop at the epoch boundary
            api.report_fold(lease, fold, final, {"val_loss": final})
        api.complete(lease)
        self.trials_done += 1
