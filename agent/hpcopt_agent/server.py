"""The agent's side of the AgentService: one lease quoted by whichever rank reports
(the group leader heartbeats; each fold group's leader reports its fold), with retries
while the server is briefly unreachable (a restart), and the lease's loss as a state
rather than an exception."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from hpcopt import Action, Agent, AgentClient, ApiError, Lease, TrialState
from hpcopt.core.records import Trial
from hpcopt_agent import __version__
from hpcopt_agent.outcomes import Outcome

log = logging.getLogger("hpcopt_agent")
T = TypeVar("T")

RETRIED = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED")
#: The trial is no longer ours: expired or released lease, finished or cancelled trial.
LOST = ("FAILED_PRECONDITION", "NOT_FOUND")


class LeaseLost(Exception):
    """The server no longer accepts reports under this lease."""


def retrying(call: Callable[[], T], what: str, patience: float) -> T:
    """Calls the server, retrying unavailability for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    delay = 0.5
    while True:
        try:
            return call()
        except ApiError as exc:
            if exc.code in LOST:
                raise LeaseLost(exc.message) from None
            if exc.code not in RETRIED or time.monotonic() > deadline:
                raise
            log.warning("%s: %s; retrying in %.1f s", what, exc.message, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


class TrialLink:
    """Reports of one trial under one lease, from any rank of the group."""

    def __init__(self, client: AgentClient, lease: Lease, patience: float = 120.0) -> None:
        self.client = client
        self.lease = lease
        self.patience = patience
        self.renewed_at = time.monotonic()
        """When the last call that renews the lease (a report or a heartbeat) was sent."""

    def _renewing(self, call: Callable[[], T], what: str) -> T:
        sent = time.monotonic()
        reply = retrying(call, what, self.patience)
        self.renewed_at = max(self.renewed_at, sent)
        return reply

    def intermediate(self, fold: int, step: int, value: float, checkpoint_uri: str) -> Outcome:
        """Reports a learning-curve point; the server's answer: continue, pruned, cancelled."""
        answer: Action = self._renewing(
            lambda: self.client.report_intermediate(self.lease, fold, step, value, checkpoint_uri),
            "ReportIntermediate",
        )
        return Outcome.of(answer)

    def fold(self, fold: int, value: float, metrics: dict[str, float], checkpoint_uri: str) -> Outcome:
        """Reports a finished fold, then asks whether the trial goes on: the server's
        pruner may have stopped it on this very result (continue, pruned, cancelled)."""
        self._renewing(
            lambda: self.client.report_fold(self.lease, fold, value, metrics, checkpoint_uri),
            "ReportFold",
        )
        answer: Action = self._renewing(lambda: self.client.heartbeat(self.lease), "Heartbeat")
        return Outcome.of(answer)

    def complete(self) -> Trial:
        """The trial as its completion left it: COMPLETED, or PAUSED after a
        multi-fidelity rung below the top (with its value either way)."""
        trial = retrying(lambda: self.client.complete(self.lease), "Complete", self.patience)
        assert trial.value is not None  # a completed (or paused) trial has its value
        return trial

    def event(self, fold: int, kind: str, reason: str) -> None:
        """Keeps ``reason`` in the trial's event log; a failure to is logged, not raised."""
        try:
            retrying(lambda: self.client.report_event(self.lease, fold, kind, reason), "ReportEvent", self.patience)
        except (ApiError, LeaseLost) as exc:
            log.warning("could not record %s for fold %d: %s", kind, fold, exc)

    def analysis(self, fold: int, document: str) -> str:
        """Stores the fold's analysis with the trial: '' when stored, else why not (it is
        a diagnostic: a refusal is said, never raised)."""
        try:
            retrying(lambda: self.client.report_analysis(self.lease, fold, document), "ReportAnalysis", self.patience)
        except (ApiError, LeaseLost) as exc:
            return str(exc)
        return ""

    def should_analyse(self, fold: int, metrics: dict[str, float]) -> tuple[bool, str]:
        """Whether the fold that trained its last epoch with ``metrics`` is analysed
        (``analysis.on: best``), and why. A server that cannot say is answered as
        ``on: all`` would: analysed (the lease's loss shows at the next report)."""
        try:
            return retrying(
                lambda: self.client.should_analyse(self.lease, fold, metrics), "ShouldAnalyse", self.patience
            )
        except (ApiError, LeaseLost) as exc:
            return True, f"the server did not say ({exc})"

    def release(self, state: TrialState, reason: str) -> None:
        retrying(lambda: self.client.release(self.lease, state, reason), "Release", self.patience)


class Heartbeat(threading.Thread):
    """Renews the lease while a trial runs, so a long epoch never loses it: a heartbeat
    goes out once ``interval`` seconds pass without any call that renews it (reports
    renew it too, and answer with the same continue/stop), so an agent that reports
    more often than that sends none. Remembers a stop the server asked for."""

    def __init__(self, link: TrialLink, interval: float) -> None:
        super().__init__(name="hpcopt-heartbeat", daemon=True)
        self.link = link
        self.interval = interval
        self.stopping = threading.Event()
        self.action = Outcome.CONTINUE

    def run(self) -> None:
        next_try = self.link.renewed_at + self.interval
        while not self.stopping.wait(max(0.0, next_try - time.monotonic())):
            due = self.link.renewed_at + self.interval
            if time.monotonic() < due:
                next_try = due  # a report renewed the lease meanwhile
                continue
            sent = time.monotonic()
            try:
                answer = self.link.client.heartbeat(self.link.lease)
            except ApiError as exc:
                if exc.code in LOST:
                    self.action = Outcome.LOST
                    log.warning("heartbeat: %s", exc.message)
                    return
                log.warning("heartbeat failed (%s); will retry", exc.message)
                next_try = time.monotonic() + self.interval
                continue
            self.link.renewed_at = max(self.link.renewed_at, sent)
            self.action = Outcome.of(answer)
            if self.action != Outcome.CONTINUE:
                return
            next_try = self.link.renewed_at + self.interval

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=self.link.client.timeout + 1)


def gpus_of(ranks: int) -> int:
    """The GPUs a trial group of ``ranks`` ranks uses here (one per rank, as many as there are)."""
    import torch

    return min(ranks, torch.cuda.device_count()) if torch.cuda.is_available() else 0


def register(client: AgentClient, args: argparse.Namespace, ranks: int) -> Agent:
    """Registers a group leader as an agent of ``args.campaign``."""
    return client.register(
        host=socket.gethostname(),
        ranks=ranks,
        gpus=gpus_of(ranks),
        slurm_job_id=os.environ.get("SLURM_JOB_ID", ""),
        campaign_id=args.campaign,
        version=__version__,
    )


def goodbye(client: AgentClient, agent_id: str) -> None:
    """Ends the registration, so the dashboard shows this agent as gone at once (a
    server that cannot be reached is only logged: the agent is leaving anyway)."""
    try:
        requeued = client.deregister(agent_id)
    except Exception as exc:
        log.warning("could not end the registration of agent %s: %s", agent_id, exc)
        return
    if requeued:
        log.warning("trials with id(s) %s were still held and went back to the queue", ", ".join(map(str, requeued)))
