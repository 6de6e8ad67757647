"""The agent's heartbeat: none while reports renew the lease often enough, one every
interval once they stop; against a real server over gRPC."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hpcopt import AgentClient, Client
from hpcopt_agent.server import Heartbeat, TrialLink
from tests.conftest import LiveServer, make_spec


class CountingClient(AgentClient):
    """A real client that counts the heartbeats it sends."""

    heartbeats = 0

    def heartbeat(self, lease: Any) -> Any:
        self.heartbeats += 1
        return super().heartbeat(lease)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the agent's side: one backend is enough
def test_reports_stand_in_for_heartbeats_and_heartbeats_resume_when_they_stop(live_server: LiveServer) -> None:
    with Client(live_server.grpc_target) as c:
        cid = c.create_campaign(make_spec(folds=1, budget={"max_trials": 1, "max_parallel": 1})).id
    with CountingClient(live_server.grpc_target) as api:
        reg = api.register(host="reporting", campaign_id=cid)
        lease = (api.acquire(reg.agent_id, cid)).lease
        link = TrialLink(api, lease)
        beat = Heartbeat(link, interval=0.4)
        beat.start()
        try:
            for step in range(15):  # a report every 0.1 s: the lease never goes 0.4 s unrenewed
                assert link.intermediate(0, step, 1.0 / (step + 1), "") == "continue"
                time.sleep(0.1)
            assert api.heartbeats == 0
            time.sleep(1.5)  # silence: the heartbeat takes over
            assert 2 <= api.heartbeats <= 5, api.heartbeats
            assert beat.action == "continue"
        finally:
            beat.stop()
