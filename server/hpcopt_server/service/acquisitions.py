"""Acquisitions of one campaign, served together.

New trials of a campaign are created one transaction at a time under its row lock (the
budget and ``max_parallel`` must be exact across threads and replicas), so a thousand
agents asking at once (a job array starting, the budget running out while they poll)
queue on it. Here the acquisitions waiting in one server process share that turn: the
thread that gets the campaign's in-process gate takes every waiting request (up to
``MAX_BATCH``) and serves them all in one call of
:meth:`~hpcopt_server.storage.agent_calls.AgentCalls.acquire` — one lock, one count of
the running trials, one optimizer call for n suggestions, one insert of the n trials,
one commit — and hands each waiter its answer (or the exception its turn raised).

The gate is taken before any database connection, so waiting requests hold none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_BATCH = 64


@dataclass
class _Ask:
    agent_id: str
    answer: object = None
    error: BaseException | None = None
    served: threading.Event = field(default_factory=threading.Event)


class AcquireQueue:
    def __init__(self) -> None:
        self._waiting: dict[int, list[_Ask]] = {}
        self._gates: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    def waiting(self) -> int:
        """Acquisitions queued at the gates now."""
        with self._lock:
            return sum(len(q) for q in self._waiting.values())

    def acquire(self, campaign_id: int, agent_id: str, serve: Callable[[list[str]], list[object]]) -> object:
        """``serve(agent ids)`` answers a batch of this campaign's waiting acquisitions
        (one answer each, in order); this one's answer."""
        ask = _Ask(agent_id)
        with self._lock:
            self._waiting.setdefault(campaign_id, []).append(ask)
            gate = self._gates.setdefault(campaign_id, threading.Lock())
        with gate:
            while not ask.served.is_set():
                with self._lock:
                    queue = self._waiting[campaign_id]
                    batch, queue[:] = queue[:MAX_BATCH], queue[MAX_BATCH:]
                self._serve(batch, serve)
        if ask.error is not None:
            raise ask.error
        return ask.answer

    @staticmethod
    def _serve(batch: list[_Ask], serve: Callable[[list[str]], list[object]]) -> None:
        try:
            answers = serve([ask.agent_id for ask in batch])
        except BaseException as exc:  # each waiter raises what its batch raised
            for ask in batch:
                ask.error = exc
                ask.served.set()
            return
        for ask, answer in zip(batch, answers, strict=True):
            ask.answer = answer
            ask.served.set()
