"""The lease reaper: RUNNING trials whose agent stopped heartbeating go back to the queue.

Any number of server processes may run it on one database: each pass takes the expired
rows with ``FOR UPDATE SKIP LOCKED``; storage's ``AgentCalls.expire`` locks each one's
campaign first (the writers' lock order) and re-checks the lease under the lock, so a
trial is requeued exactly once and a heartbeat that won the race keeps its trial.
"""

from __future__ import annotations

import logging
import threading

from hpcopt_server.service.context import Context

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
            candidates = tx.trials.expired(now)
        reaped = 0
        for cand in candidates:
            trial = self.ctx.agent_calls.expire(cand.id, now)
            if trial is not None:
                reaped += 1
                log.warning("trial %d: lease expired (agent %s); requeued or failed", trial.id, trial.agent_id)
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
