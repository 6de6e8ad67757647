"""The agent's heartbeat: none while reports renew the lease often enough, one every
interval once they stop; against a real server over gRPC."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hpcopt_agent.server import Heartbeat, TrialLink
from tests.helpers.clients import AgentClient, Client
from tests.helpers.env import scaled, timeout_scale
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec


class CountingClient(AgentClient):
    """A real client that records each heartbeat: when it went out, and when the lease
    had last been renewed (by a report or a heartbeat) at that moment."""

    link: TrialLink | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.beats: list[tuple[float, float]] = []

    def heartbeat(self, lease: Any) -> Any:
        assert self.link is not None
        self.beats.append((time.monotonic(), self.link.renewed_at))
        return super().heartbeat(lease)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the agent's side: one backend is enough
def test_reports_stand_in_for_heartbeats_and_heartbeats_resume_when_they_stop(live_server: LiveServer) -> None:
    """No heartbeat leaves sooner than ``interval`` after the lease's last renewal, so
    reports more often than that stand in for them (a loaded machine that delays a
    report past the interval gets a heartbeat, rightly); in silence they go out one per
    interval. Pinned by those times, not by counts in a wall-clock window."""
    interval = 0.4
    with Client(live_server.grpc_target) as c:
        cid = c.create_campaign(make_spec(folds=1, budget={"max_trials": 1, "max_parallel": 1})).id
    with CountingClient(live_server.grpc_target) as api:
        reg = api.register(host="reporting", campaign_id=cid)
        lease = (api.acquire(reg.agent_id, cid)).lease
        link = api.link = TrialLink(api, lease)
        beat = Heartbeat(link, interval=interval)
        beat.start()
        try:
            for step in range(15):  # a report every 0.1 s: the lease never goes 0.4 s unrenewed
                assert link.intermediate(0, step, 1.0 / (step + 1), "") == "continue"
                time.sleep(0.1)
            reported = len(api.beats)
            deadline = time.monotonic() + scaled(60) * timeout_scale()
            while len(api.beats) < reported + 3 and time.monotonic() < deadline:  # silence: heartbeats take over
                time.sleep(0.05)
            assert len(api.beats) >= reported + 3, f"{len(api.beats) - reported} heartbeats in the silence"
            assert beat.action == "continue"
        finally:
            beat.stop()
    early = [(round(t - r, 3)) for t, r in api.beats if t - r < interval - 1e-3]
    assert not early, f"heartbeats sent {early} s after the lease's last renewal (interval {interval} s)"
    assert api.beats[-1][1] > api.beats[0][1], "heartbeats did not renew the lease"
