"""A stepped wall clock moves neither leases nor the order of stored times. A +2 h step
of the server's clock used to expire every live lease within one lease; after a -2 h
step trials "finished before they started" and the campaign's export answered 500 for
good. The server's clock (``service/clock.py``) advances with the monotonic clock and
only slews toward a wall clock that stepped away."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hpcopt_server.service import Service
from hpcopt_server.service.clock import SLEW, SteadyClock
from tests.server.test_service import _acquire, _finish, _start


class FakeHost:
    """A wall clock to step and a monotonic clock to advance."""

    def __init__(self) -> None:
        self.wall_at = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
        self.mono = 1000.0

    def wall(self) -> datetime:
        return self.wall_at

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall_at += timedelta(seconds=seconds)
        self.mono += seconds


def test_the_clock_follows_small_corrections_and_slews_toward_a_step_never_going_back() -> None:
    host = FakeHost()
    clock = SteadyClock(host.wall, host.monotonic)
    t0 = clock.now()
    host.advance(10)
    host.wall_at += timedelta(seconds=0.5)  # NTP-sized: taken as it is
    assert clock.now() == host.wall_at
    host.wall_at += timedelta(hours=2)
    before = clock.now()
    host.advance(100)
    after = clock.now()
    assert timedelta(seconds=100) < after - before <= timedelta(seconds=100 * (1 + SLEW) + 1e-6)
    host.wall_at -= timedelta(hours=4)  # now two hours behind where the clock is
    last = clock.now()
    for _ in range(50):
        host.advance(10)
        now = clock.now()
        assert now >= last and now - last >= timedelta(seconds=10 * (1 - SLEW) - 1e-6)
        last = now
    assert last > t0


@pytest.mark.parametrize("step", [timedelta(hours=2), -timedelta(hours=2)])
def test_a_step_of_the_wall_clock_neither_expires_leases_nor_breaks_the_export(
    service: Service, step: timedelta
) -> None:
    host = FakeHost()
    service.ctx.clock = SteadyClock(host.wall, host.monotonic).now
    lease_s = service.ctx.settings.lease_seconds
    campaign, agent = _start(service, folds=1, budget={"max_trials": 2, "max_parallel": 2})
    _, lease = _acquire(service, agent, campaign)
    host.advance(lease_s / 4)
    host.wall_at += step
    host.advance(1)
    assert service.reaper.reap() == 0  # the lease has 3/4 of its time left
    service.agents.heartbeat(lease)
    for _ in range(8):  # heartbeats every quarter lease keep it, across the step
        host.advance(lease_s / 4)
        assert service.reaper.reap() == 0
        service.agents.heartbeat(lease)
    done = _finish(service, lease, [0.5])
    assert done.state.name == "COMPLETED" and done.finished_at is not None and done.started_at is not None
    assert done.finished_at >= done.started_at >= done.created_at
    host.advance(lease_s * 2)
    _acquire(service, agent, campaign)
    host.advance(lease_s * 2)  # silent past its lease: this one does expire
    assert service.reaper.reap() == 1


def test_the_export_returns_times_stored_out_of_order(service: Service) -> None:
    """Times written by an older server whose clock stepped back between a trial's start
    and finish: the export returns them as stored (it used to answer 500 for good)."""
    wall = [datetime(2026, 11, 28, 12, 0, tzinfo=UTC)]
    service.ctx.clock = lambda: wall[0]  # a plain wall clock, as before
    campaign, agent = _start(service, folds=1, budget={"max_trials": 1, "max_parallel": 1})
    _, lease = _acquire(service, agent, campaign)
    wall[0] -= timedelta(hours=2)
    done = _finish(service, lease, [0.5])
    assert done.finished_at is not None and done.started_at is not None and done.finished_at < done.started_at
    [trial] = service.export_campaign(campaign.id)["trials"]
    assert trial["state"] == "COMPLETED" and trial["finished_at"] < trial["started_at"]
    assert service.export_json(campaign.id).count('"number"') == 1
