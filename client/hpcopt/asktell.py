"""Ask/tell for scripts: ``Client.trials(campaign_id)`` hands out trials one at a time
under a lease, renews the lease in the background, and takes the results back.

    with hpcopt.Client() as c:
        for trial in c.trials(campaign_id):
            for epoch in range(10):
                loss = train_one_epoch(trial.params)
                if not trial.report(epoch, loss):   # False: pruned or cancelled, stop
                    break
            else:
                trial.complete(loss)                # or complete(folds=[...]) with K values

The script registers as an agent (its token needs the ``agent`` scope when auth is on).
A script that dies mid-trial stops heartbeating; the server requeues the trial when the
lease expires (``--lease-seconds``) and the next caller resumes it as attempt + 1.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hpcopt.agent_client import AgentClient
from hpcopt.core.records import Action, Lease, ParamValue, Trial
from hpcopt.errors import ApiError, TrialStopped

log = logging.getLogger("hpcopt.trials")


class ActiveTrial:
    """A trial this script holds under a lease. ``number`` is the trial's number in its
    campaign (``#27``, as the CLI and dashboard show it); ``id`` its global id (the API's).
    ``params`` are in the spec's order."""

    def __init__(self, agent: AgentClient, lease: Lease, trial: Trial, folds: int, heartbeat_seconds: float) -> None:
        self._agent = agent
        self._lease = lease
        self.id = trial.id
        self.number = trial.number
        self.attempt = trial.attempt
        self.params: dict[str, ParamValue] = dict(trial.params)
        #: K of the campaign's K-fold cross-validation: ``complete(folds=...)`` takes K values.
        self.folds = folds
        #: Folds a previous attempt already reported (a requeued trial keeps them).
        self.finished_folds = {f.index: f.value for f in trial.folds if f.finished}
        self.ended: str = ""  # why this script no longer holds the trial
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(heartbeat_seconds,), daemon=True, name=f"hpcopt-heartbeat-{self.id}"
        )
        self._thread.start()

    def __repr__(self) -> str:
        return f"ActiveTrial(number={self.number}, id={self.id}, attempt={self.attempt}, params={self.params})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("suggest_") or name in ("should_prune", "set_user_attr"):
            raise AttributeError(
                f"ActiveTrial has no {name}: its parameters come from the campaign's space (trial.params[...]); "
                "an Optuna objective that defines its space as it runs takes `from hpcopt_server import optuna` "
                "(docs/getting-started/from-optuna.md)"
            )
        raise AttributeError(f"'ActiveTrial' object has no attribute {name!r}")

    # -- results ------------------------------------------------------------------------

    def report(self, step: int, value: float, fold: int = 0) -> bool:
        """An intermediate value (a learning-curve point of ``fold``). True: go on; False:
        the server pruned the trial or the campaign was cancelled, and this script should
        stop working on it (it is no longer held)."""
        self._check_open()
        return self._act(self._call(lambda: self._agent.report_intermediate(self._lease, fold, step, float(value))))

    @property
    def lease(self) -> Lease:
        """The lease this script holds the trial under (every report quotes it)."""
        return self._lease

    def event(self, kind: str, text: str) -> None:
        """Adds an event of ``kind`` to the trial's log (``AgentClient.report_event``)."""
        self._check_open()
        self._call(lambda: self._agent.report_event(self._lease, 0, kind, text))

    def should_stop(self) -> bool:
        """Whether the trial ended for this script since the last report (pruned,
        cancelled, lease lost), as the background heartbeat heard."""
        return bool(self.ended)

    def complete(
        self,
        value: float | None = None,
        *,
        folds: Sequence[float] | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> Trial:
        """Finishes the trial: ``value`` for a campaign of one fold, or ``folds``: one value
        per fold (K of them; those a previous attempt finished, see ``finished_folds``, keep
        their stored value and may be None). The trial's value is the mean of the K. Returns the completed trial."""
        self._check_open()
        if (value is None) == (folds is None):
            raise ValueError("complete() takes a value or folds=[...], not both and not neither")
        values: list[float | None] = [value] if folds is None else list(folds)
        if len(values) != self.folds:
            what = "a value" if folds is None else f"{len(values)} fold values"
            raise ValueError(
                f"the campaign has {self.folds} folds: complete() got {what}; pass folds=[...] with {self.folds} values"
            )
        for k, v in enumerate(values):
            if k in self.finished_folds:  # an earlier attempt finished it: the server keeps that value
                continue
            if v is None or not math.isfinite(float(v)):
                raise ValueError(f"fold {k}: a finite number is needed, got {v!r}")
            self._call(lambda k=k, v=v: self._agent.report_fold(self._lease, k, float(v), dict(metrics or {})))
            self.finished_folds[k] = float(v)
        done: Trial = self._call(lambda: self._agent.complete(self._lease, self.params))
        self._end("completed")
        return done

    def fail(self, reason: str) -> None:
        """Ends the trial as FAILED (final) with ``reason`` as its error."""
        self._release("FAILED", reason, "failed")

    def prune(self, reason: str = "pruned by the script") -> None:
        """Ends the trial as PRUNED (final)."""
        self._release("PRUNED", reason, "pruned")

    def give_back(self, reason: str = "the script stopped") -> None:
        """Gives the trial back unfinished (PREEMPTED): it is requeued as attempt + 1."""
        self._release("PREEMPTED", reason, "given back")

    # -- internals ----------------------------------------------------------------------

    def _release(self, state: str, reason: str, why: str) -> None:
        self._check_open()
        self._call(lambda: self._agent.release(self._lease, state, reason))
        self._end(why)

    def _check_open(self) -> None:
        if self.ended:
            raise TrialStopped(self.number, self.ended)

    def _call(self, fn: Any) -> Any:
        with self._lock:
            try:
                return fn()
            except ApiError as exc:
                if exc.code == "FAILED_PRECONDITION":  # the lease is no longer ours
                    self._end(f"the server refused: {exc.message}")
                raise

    def _act(self, action: Action) -> bool:
        if action == Action.CONTINUE:
            return True
        self._end("pruned by the server" if action == Action.PRUNED else "the campaign was cancelled")
        return False

    def _end(self, why: str) -> None:
        if not self.ended:
            self.ended = why
        self._stop.set()

    def _beat(self, period: float) -> None:
        while not self._stop.wait(max(period, 0.2)):
            try:
                with self._lock:
                    if self._stop.is_set():
                        return
                    answer = self._agent.heartbeat(self._lease)
                self._act(answer)
            except ApiError as exc:
                if exc.code == "FAILED_PRECONDITION":
                    self._end(f"lease lost: {exc.message}")
                else:  # the server is away: keep trying until the lease would expire anyway
                    log.warning("trial #%d: heartbeat failed: %s", self.number, exc)

    def close(self) -> None:
        """Stops the background heartbeat (the trial, if not ended, is left to its lease)."""
        self._stop.set()
        self._thread.join(timeout=5)


class Session:
    """A script registered as an agent on one campaign: what ``trials()`` and the embedded
    ``Study.ask()`` acquire trials with."""

    def __init__(self, agent: AgentClient, campaign_id: int, *, host: str | None = None, version: str = "") -> None:
        self.agent = agent
        self.campaign_id = campaign_id
        self.registration = agent.register(
            host=host or socket.gethostname(),
            ranks=1,
            campaign_id=campaign_id,
            pid=os.getpid(),
            version=version or "hpcopt-script",
        )
        #: K of the campaign's K-fold cross-validation.
        self.folds = int((self.registration.campaign_spec or {}).get("folds", 1))

    def acquire(self) -> ActiveTrial | float | None:
        """The next trial under a new lease; None when the campaign is done; the seconds
        to wait when ``max_parallel`` trials are out now."""
        got = self.agent.acquire(self.registration.agent_id, self.campaign_id)
        if got.status == "done":
            return None
        if got.trial is None or got.lease is None:
            return max(got.retry_after_seconds, 0.2)
        return ActiveTrial(self.agent, got.lease, got.trial, self.folds, self.registration.heartbeat_seconds)

    def close(self, reason: str = "") -> None:
        """Ends the registration: trials still held go back to the queue."""
        self.agent.deregister(self.registration.agent_id, reason)


def trials(
    agent: AgentClient, campaign_id: int, *, host: str | None = None, max_trials: int | None = None, poll: float = 30.0
) -> Iterator[ActiveTrial]:
    """The generator behind :meth:`hpcopt.Client.trials`."""
    session = Session(agent, campaign_id, host=host)
    served = 0
    while max_trials is None or served < max_trials:
        got = session.acquire()
        if got is None:
            return
        if isinstance(got, float):  # wait: the parallel budget is in use
            time.sleep(min(got, poll))
            continue
        trial = got
        served += 1
        try:
            yield trial
        except GeneratorExit:  # the loop was left (break, exception): give the trial back
            _abandon(trial, "the script left its trials() loop before finishing the trial")
            raise
        _abandon(trial, "the script's loop body ended without complete(), fail() or prune()")


def _abandon(trial: ActiveTrial, reason: str) -> None:
    if not trial.ended:
        log.warning("trial #%d: %s; giving it back", trial.number, reason)
        try:
            trial.give_back(reason)
        except ApiError as exc:
            log.warning("trial #%d: could not give it back (%s); its lease will expire", trial.number, exc)
    trial.close()
