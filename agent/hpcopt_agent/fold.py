"""Training one fold of one trial on one fold group.

Every rank of the fold group runs :meth:`FoldTrainer.run` in step. Decisions that all
ranks must share are agreed on at fixed points, never assumed:

- after every batch, a stop signal (SIGTERM/SIGUSR1) is combined over the fold group
  with a non-blocking allreduce that completes one batch later, so all ranks stop after
  the same batch without a blocking collective per step;
- after every epoch, failures (any rank) win over preemption, then the fold leader
  evaluates the objective, checkpoints, reports, and broadcasts the server's answer
  (go on, pruned, cancelled, lease lost).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from hpcopt import ApiError
from hpcopt_agent import checkpoint
from hpcopt_agent.comm import CollectiveTimeout, Comms, bcast, bounded_barrier, gather
from hpcopt_agent.data import Data
from hpcopt_agent.runtime import StopSignal
from hpcopt_agent.schemes import Scheme
from hpcopt_agent.server import RETRIED, LeaseLost, TrialLink
from hpcopt_agent.settings import TrainingSettings
from hpcopt_agent.task import Task, as_dict, as_user

log = logging.getLogger("hpcopt_agent")

OK, PREEMPT, FAILED = 0, 1, 2


@dataclass(frozen=True)
class TrialInfo:
    campaign_id: int
    trial_id: int
    number: int
    attempt: int
    params: dict[str, Any]


@dataclass
class FoldOutcome:
    fold: int
    #: completed, preempted, failed, pruned, cancelled or lost
    status: str
    value: float | None = None
    error: str = ""
    epochs: int = 0  # epochs this attempt trained


@dataclass
class _Run:
    models: dict[str, torch.nn.Module]
    optimizers: dict[str, torch.optim.Optimizer]
    single: bool
    epoch: int = 0
    batch: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    uri: str = ""  # the latest checkpoint


def summarize(exc: BaseException, limit: int = 4000) -> str:
    """The end of a traceback: what the server keeps as the trial's error."""
    text = "".join(traceback.format_exception(exc)).strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def seed_for(*parts: int) -> int:
    return int(np.random.SeedSequence([abs(p) for p in parts]).generate_state(1)[0])


class FoldTrainer:
    def __init__(
        self,
        *,
        comms: Comms,
        scheme: Scheme,
        task: Task,
        data: Data,
        settings: TrainingSettings,
        stop: StopSignal,
        checkpoint_root: Path,
        timeout: float = 300.0,
    ) -> None:
        self.comms = comms
        self.fold_comm = comms.fold
        self.scheme = scheme
        self.task = task
        self.data = data
        self.s = settings
        self.stop = stop
        self.root = checkpoint_root
        self.timeout = timeout
        self.current: tuple[TrialInfo, int, TrialLink | None] | None = None

    # -- the fold ------------------------------------------------------------------------

    def run(
        self,
        trial: TrialInfo,
        fold: int,
        train: np.ndarray,
        validation: np.ndarray,
        link: TrialLink | None,
        resume_uri: str = "",
    ) -> FoldOutcome:
        """Trains ``fold`` to the end (or a stop); ``link`` is set on the fold leader only."""
        out = FoldOutcome(fold, "completed")
        params = trial.params
        self.current = (trial, fold, link)
        try:
            run = self._start(trial, fold, resume_uri)
        except Exception as exc:
            run, error = None, summarize(exc)
        else:
            error = ""
        code, error = self._agree(FAILED if run is None else OK, error)
        if code == FAILED or run is None:
            return self._fail(out, trial, link, f"setting up fold {fold}", error)
        wrapped = as_user(self.scheme.wrap(run.models), run.single)
        optimizers = as_user(run.optimizers, run.single)
        batch_size = self.scheme.rank_batch(self.task.batch_size(params))

        while run.epoch < self.s.epochs:
            t0 = time.perf_counter()
            preempt_at, error, samples = None, "", 0
            try:
                preempt_at, samples = self._train_epoch(run, trial, fold, train, wrapped, optimizers, batch_size)
            except Exception as exc:
                error = summarize(exc)
            code, error = self._agree(FAILED if error else PREEMPT if preempt_at is not None else OK, error)
            if code == FAILED:
                return self._fail(out, trial, link, f"epoch {run.epoch + 1}", error)
            if code == PREEMPT:
                run.batch = preempt_at if preempt_at is not None else run.batch
                uri = self._checkpoint(trial, fold, run)
                if link is not None:
                    log.info("preempted after batch %d of epoch %d; checkpoint %s", run.batch, run.epoch + 1, uri)
                out.status = "preempted"
                return out
            try:
                metrics = self._evaluate(run, validation, params)
            except Exception as exc:
                metrics, error = {}, summarize(exc)
            code, error = self._agree(FAILED if error else OK, error)
            if code == FAILED:
                return self._fail(out, trial, link, f"evaluation after epoch {run.epoch + 1}", error)
            run.epoch, run.batch, run.metrics = run.epoch + 1, 0, metrics
            out.epochs += 1
            due = run.epoch == self.s.epochs or (
                self.s.checkpoint_every > 0 and run.epoch % self.s.checkpoint_every == 0
            )
            uri = self._checkpoint(trial, fold, run) if due else ""
            answer = None
            if link is not None:
                answer = self._report_epoch(link, fold, run, uri, samples, time.perf_counter() - t0)
            action, error = bcast(self.fold_comm, answer)
            if action == "failed":
                return self._fail(out, trial, link, f"epoch {run.epoch}", error)
            if action != "continue":
                out.status = action
                return out
        # The fold is done: report its final metrics.
        answer = None
        if link is not None:
            answer = self._report_fold(link, fold, run)
        out.status, out.error = bcast(self.fold_comm, answer)
        if out.status == "completed":
            out.value = run.metrics.get(self.s.metric)
        return out

    # -- pieces ----------------------------------------------------------------------------

    def _start(self, trial: TrialInfo, fold: int, resume_uri: str) -> _Run:
        torch.manual_seed(seed_for(self.s.seed, trial.number, fold))
        random.seed(seed_for(self.s.seed, trial.number, fold, self.fold_comm.rank))
        np.random.seed(seed_for(self.s.seed, trial.number, fold, self.fold_comm.rank) % 2**32)
        built = self.task.build(trial.params)
        single = isinstance(built, torch.nn.Module)
        models = {k: m.to(self.comms.device) for k, m in as_dict(built).items()}
        optimizers = as_dict(self.task.optimizer(trial.params, as_user(models, single)))
        if set(optimizers) - set(models) and not single:
            raise ValueError(f"Task.optimizer returned keys {sorted(optimizers)}; build returned {sorted(models)}")
        run = _Run(models, optimizers, single)
        if not resume_uri:
            return run
        state = checkpoint.load(resume_uri)
        if state is None:
            log.warning("fold %d: checkpoint %s is gone; training the fold from the start", fold, resume_uri)
            return run
        for name, model in models.items():
            model.load_state_dict(state["models"][name])
        for name, opt in optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
        run.epoch, run.batch, run.metrics = int(state["epoch"]), int(state["batch"]), dict(state.get("metrics", {}))
        run.uri = resume_uri
        rng = state.get("rng") or []
        if len(rng) == self.fold_comm.size:
            torch_state, np_state, py_state = rng[self.fold_comm.rank]
            torch.set_rng_state(torch_state)
            np.random.set_state(np_state)
            random.setstate(py_state)
        if self.fold_comm.rank == 0:
            log.info("resuming fold %d from epoch %d, batch %d (%s)", fold, run.epoch, run.batch, resume_uri)
        return run

    def _train_epoch(
        self,
        run: _Run,
        trial: TrialInfo,
        fold: int,
        train: np.ndarray,
        models: Any,
        optimizers: Any,
        batch_size: int,
    ) -> tuple[int | None, int]:
        """One epoch from ``run.batch`` on; returns (the batch count where all ranks
        agreed to stop, or None; samples this rank trained on)."""
        for model in run.models.values():
            model.train()
        order = self.scheme.shard(train, seed_for(self.s.seed, trial.number, fold, run.epoch, 1))
        chunks = self.data.batches(order, batch_size)
        send, recv = np.zeros(1, np.int32), np.zeros(1, np.int32)
        pending: MPI.Request | None = None
        samples = 0
        for b in range(run.batch, len(chunks)):
            batch = self.data.batch(chunks[b])
            self.task.train_step(models, optimizers, batch, trial.params)
            self.scheme.after_step(b)
            samples += len(chunks[b])
            if pending is not None:
                pending.Wait()
                if recv[0]:
                    return b + 1, samples
            send[0] = int(self.stop.requested)
            pending = self.fold_comm.Iallreduce(send, recv, op=MPI.MAX)
        if pending is not None:
            pending.Wait()
            if recv[0]:
                return len(chunks), samples
        return None, samples

    def _evaluate(self, run: _Run, validation: np.ndarray, params: dict[str, Any]) -> dict[str, float]:
        """The fold group's metrics: each rank evaluates its share of the validation
        samples; the leader averages weighted by samples."""
        mine = validation[self.fold_comm.rank :: self.fold_comm.size]
        local: dict[str, float] = {}
        if len(mine):
            for model in run.models.values():
                model.eval()
            with torch.no_grad():
                batches = (self.data.batch(c) for c in self.data.batches(mine, 1024))
                local = {
                    k: float(v) for k, v in self.task.evaluate(as_user(run.models, run.single), batches, params).items()
                }
        parts = gather(self.fold_comm, (len(mine), local))
        if parts is None:
            return {}
        total = sum(n for n, _ in parts if n)
        keys = [k for k in parts[0][1]] if parts[0][1] else []
        return {k: sum(n * m[k] for n, m in parts if n) / total for k in keys}

    def _checkpoint(self, trial: TrialInfo, fold: int, run: _Run) -> str:
        """All ranks give their RNG states; the fold leader writes (weights are equal)."""
        rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
        states = gather(self.fold_comm, rng)
        if states is None:
            return ""
        state = {
            "models": {k: m.state_dict() for k, m in run.models.items()},
            "optimizers": {k: o.state_dict() for k, o in run.optimizers.items()},
            "epoch": run.epoch,
            "batch": run.batch,
            "metrics": run.metrics,
            "rng": states,
            "trial": trial.trial_id,
            "attempt": trial.attempt,
            "fold": fold,
        }
        path = checkpoint.fold_path(self.root, trial.campaign_id, trial.trial_id, fold)
        run.uri = checkpoint.save(path, state)
        return run.uri

    def _report_epoch(
        self, link: TrialLink, fold: int, run: _Run, uri: str, samples: int, seconds: float
    ) -> tuple[str, str]:
        value = run.metrics.get(self.s.metric)
        shown = " ".join(f"{k}={v:.4g}" for k, v in run.metrics.items())
        rate = samples * self.fold_comm.size / seconds if seconds > 0 else 0.0
        log.info("epoch %d/%d: %s (%.1f s, %.0f samples/s)", run.epoch, self.s.epochs, shown, seconds, rate)
        if value is None:
            return "failed", (
                f"Task.evaluate returned {sorted(run.metrics)}; the campaign's objective metric "
                f"{self.s.metric!r} is not among them"
            )
        if not math.isfinite(value):
            return "failed", f"the objective {self.s.metric} is {value} after epoch {run.epoch} (training diverged?)"
        try:
            return link.intermediate(fold, run.epoch, value, uri), ""
        except (LeaseLost, ApiError) as exc:
            return self._report_error(exc)

    def _report_fold(self, link: TrialLink, fold: int, run: _Run) -> tuple[str, str]:
        value = run.metrics.get(self.s.metric)
        if value is None or not math.isfinite(value):
            return "failed", f"no finite {self.s.metric} at the end of fold {fold}"
        try:
            link.fold(fold, value, run.metrics, run.uri)
        except (LeaseLost, ApiError) as exc:
            return self._report_error(exc)
        log.info("done: %s=%.6g", self.s.metric, value)
        return "completed", ""

    @staticmethod
    def _report_error(exc: Exception) -> tuple[str, str]:
        """What a failed report means for the fold group: the trial is gone (lease
        lost, or the server unreachable past the retries), or the report was refused."""
        if isinstance(exc, LeaseLost):
            log.warning("the trial is no longer ours: %s", exc)
            return "lost", ""
        assert isinstance(exc, ApiError)
        if exc.code in RETRIED:
            log.error("the server did not take the report: %s; leaving the trial to its lease", exc)
            return "lost", ""
        return "failed", f"the server refused a report: {exc}"

    def _agree(self, code: int, error: str) -> tuple[int, str]:
        """The fold group's common verdict (failure > preemption > ok) and, on the
        leader, the first error text. A rank that does not arrive within the collective
        timeout fails the trial and ends the job: the fold group cannot go on without it."""
        try:
            bounded_barrier(self.fold_comm, self.timeout)
        except CollectiveTimeout as exc:
            self._abandon(exc, error)
        agreed = self.fold_comm.allreduce(code, op=MPI.MAX)
        if agreed != FAILED:
            return agreed, ""
        errors = gather(self.fold_comm, error)
        first = next((f"rank {r}: {e}" for r, e in enumerate(errors or []) if e), "")
        return agreed, first

    def _abandon(self, exc: CollectiveTimeout, error: str) -> None:
        assert self.current is not None
        _, fold, link = self.current
        ranks = self.comms.layout.fold_ranks(self.comms.group_index, self.comms.fold_index)
        hung = [ranks[r] for r in exc.missing]
        reason = (
            f"fold {fold}: world rank(s) {hung or '(unknown, seen from a non-leader)'} did not reach the fold "
            f"group's agreement within --collective-timeout {exc.timeout:.0f} s (hung in user code or in a "
            "collective); the agent stops"
        )
        if error:
            reason += f"\nrank {self.comms.world.rank} had failed with: {error}"
        log.error("%s", reason)
        if link is not None:
            with contextlib.suppress(Exception):
                link.release("FAILED", reason)
        self.comms.world.Abort(3)

    def _fail(self, out: FoldOutcome, trial: TrialInfo, link: TrialLink | None, where: str, error: str) -> FoldOutcome:
        """Fails the trial right away (the other fold groups learn it at their next report)."""
        out.status, out.error = "failed", f"fold {out.fold}, {where}: {error}"
        if link is not None:
            log.error("failed at %s:\n%s", where, error)
            with contextlib.suppress(LeaseLost):
                link.release("FAILED", out.error)
        return out
