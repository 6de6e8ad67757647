"""Acquisitions of one campaign, served in batches.

New trials of a campaign are created one transaction at a time under its row lock (the
budget and ``max_parallel`` must be exact across threads and replicas), so a thousand
agents asking at once (a job array starting, the budget running out while they poll)
queue on it. Here the acquisitions waiting in one server process share that turn: the
thread that gets the campaign's in-process gate takes every waiting request (up to
``MAX_BATCH``), serves them all in one transaction — one lock, one count of the
running trials, one optimizer call for n suggestions, one insert of the n trials, one
commit — and hands each waiter its answer. A request it cannot serve (a requeued trial
waits in the queue, an unknown agent) gets ``None``: the full path, one by one,
answers it.

The gate is taken before any database connection, so waiting requests hold none.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hpcopt_server import domain as d
from hpcopt_server.service.leasing import AcquireStatus, Acquisition
from hpcopt_server.storage.repository import Tx

if TYPE_CHECKING:
    from hpcopt_server.service.hot import HotPath

MAX_BATCH = 64


@dataclass
class _Ask:
    agent_id: str
    caller: int | None
    answer: Acquisition | None = None
    served: threading.Event = field(default_factory=threading.Event)


class AcquireBatcher:
    def __init__(self, hot: HotPath):
        self.hot = hot
        self._waiting: dict[int, list[_Ask]] = {}
        self._lock = threading.Lock()

    def acquire(self, agent_id: str, campaign_id: int, caller: int | None) -> Acquisition | None:
        ask = _Ask(agent_id, caller)
        with self._lock:
            self._waiting.setdefault(campaign_id, []).append(ask)
        with self.hot.gate(campaign_id):
            while not ask.served.is_set():
                with self._lock:
                    queue = self._waiting[campaign_id]
                    batch, queue[:] = queue[:MAX_BATCH], queue[MAX_BATCH:]
                self._serve(campaign_id, batch)
        return ask.answer

    def _serve(self, campaign_id: int, batch: list[_Ask]) -> None:
        answers: dict[int, Acquisition] | None = None
        try:
            answers = self.hot.run(lambda tx: self._grant(tx, campaign_id, batch))
        finally:  # an answer counts once its transaction committed; otherwise the full path
            for i, ask in enumerate(batch):
                ask.answer = (answers or {}).get(i)
                ask.served.set()

    def _grant(self, tx: Tx, campaign_id: int, batch: list[_Ask]) -> dict[int, Acquisition]:
        """Answers by position in ``batch``; a position left out takes the full path."""
        hot, settings = self.hot, self.hot.ctx.settings
        now = hot.ctx.clock()
        expires = hot.expiry(now)
        known = [i for i, ask in enumerate(batch) if hot.owns(tx, ask.agent_id, ask.caller)]
        if not known:
            return {}
        campaign = hot.campaign(tx, campaign_id)
        taken = tx.take_numbers(campaign_id, len(known))  # the campaign lock, to the commit
        if taken is None:
            return {}
        state, first, finished = taken
        running, queued = tx.active_counts(campaign_id)
        if state != d.CampaignState.RUNNING or queued:
            tx.set_next_number(campaign_id, first)
            # A finished campaign says DONE; requeued trials resume first (the full path).
            return {} if queued else dict.fromkeys(known, Acquisition(AcquireStatus.DONE))
        room = max(0, min(campaign.max_parallel - running, campaign.max_trials - first, len(known)))
        wait = Acquisition(AcquireStatus.WAIT, retry_after_seconds=settings.wait_seconds)
        answers = dict.fromkeys(known[room:], wait)
        if room < len(known):
            tx.set_next_number(campaign_id, first + room)
        if room:
            fresh = dataclasses.replace(campaign, trials_created=first, trials_finished=finished)
            suggestions = [campaign.in_space_order(p) for p in
                           hot.ctx.optimizers.suggest(tx, fresh, room, active=running)]  # fmt: skip
            chosen = known[:room]
            agents = [batch[i].agent_id for i in chosen]
            leases = [uuid.uuid4().hex for _ in chosen]
            numbers = list(range(first, first + room))
            ids = tx.insert_running_trials(campaign_id, numbers, suggestions, agents, leases, now, expires)
            for i, tid, number, params, agent, lease in zip(chosen, ids, numbers, suggestions, agents, leases,
                                                             strict=True):  # fmt: skip
                trial = d.Trial(id=tid, campaign_id=campaign_id, number=number, state=d.TrialState.RUNNING,
                                attempt=1, params=params, created_at=now, agent_id=agent, lease_id=lease,
                                lease_expires_at=expires, started_at=now)  # fmt: skip
                answers[i] = Acquisition(AcquireStatus.GRANTED, trial, lease, expires, campaign_spec=campaign.spec)
        return answers
