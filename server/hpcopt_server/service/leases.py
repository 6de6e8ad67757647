"""The lease reaper: RUNNING trials whose agent stopped heartbeating go back to the queue.

Any number of server processes may run it on one database: each pass takes the expired
rows with ``FOR UPDATE SKIP LOCKED``, locks their campaigns first (the writers' lock
order) and re-checks the lease under the lock, so a trial is requeued exactly once and a
heartbeat that won the race keeps its trial.
"""

from __future__ import annotations

import logging
import threading

from hpcopt_server import domain as d
from hpcopt_server.service.agents import requeue
from hpcopt_server.service.context import Context, finish_campaign_if_done

log = logging.getLogger(__name__)


class LeaseReaper:
    def __init__(self, ctx: Context, interval: float = 5.0):
        self.ctx = ctx
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def reap(self) -> int:
        """One pass; returns how many trials lost their lease."""
        now = self.ctx.clock()
        with self.ctx.storage.read() as tx:
            candidates = tx.expired_trials(now)
        reaped = 0
        for cand in candidates:
            with self.ctx.storage.write() as tx:
                campaign = tx.lock_campaign(cand.campaign_id)
                trial = tx.get_trial(cand.id, lock=True)
                if campaign is None or trial is None or trial.state != d.TrialState.RUNNING:
                    continue
                if trial.lease_expires_at is None or trial.lease_expires_at >= now:
                    continue  # renewed meanwhile
                why = f"lease expired at {trial.lease_expires_at.isoformat()} (agent {trial.agent_id})"
                tx.add_event(trial.id, trial.attempt, "lease_expired", now, agent_id=trial.agent_id, reason=why)
                requeue(tx, campaign, trial, now, why="lease expired")
                finish_campaign_if_done(tx, campaign, now)
                reaped += 1
                log.warning("trial %d: %s; requeued or failed", trial.id, why)
        return reaped

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lease-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reap()
            except Exception:  # the reaper must outlive a database hiccup
                log.exception("lease reaper pass failed")
