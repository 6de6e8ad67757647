"""Training one fold of one trial on one fold group.

Every rank of the fold group runs :meth:`FoldTrainer.run` in step. Decisions that all
ranks must share are agreed on at fixed points, never assumed:

- after every batch, the scheme's stop vote combines a stop signal (SIGTERM/SIGUSR1)
  over the ranks that train, so they stop after the same batch without a blocking
  collective per step;
- after every epoch, failures (any rank) win over preemption; then the scheme's
  consensus gives every rank the weights to evaluate, the fold leader evaluates the
  objective, checkpoints (with every rank's position and scheme state), reports, and
  broadcasts the server's answer (go on, pruned, cancelled, lease lost).

The scheme (``hpcopt_agent.schemes``) is built per trial and fold from the trial's
params and the campaign's knobs; ranks that do not train (a parameter server's master)
serve the epoch instead of running the batch loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import socket
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from hpcopt import ApiError, TrialState
from hpcopt.core import target
from hpcopt.core.constraints import resources
from hpcopt_agent import batchnorm, checkpoint
from hpcopt_agent.comm import CollectiveTimeout, Comms, bcast, bounded_barrier, gather
from hpcopt_agent.curvature.fold import Snapshots, analyse_fold, fold_metrics
from hpcopt_agent.data import Data
from hpcopt_agent.epoch import Batches, EpochDriver
from hpcopt_agent.outcomes import Outcome, Verdict
from hpcopt_agent.pbt import Parent, hyper_parameters, load_parent, restore_hyper_parameters, shape_error
from hpcopt_agent.peaks import host_peak_mb, reset_host_peak
from hpcopt_agent.precision import Precision
from hpcopt_agent.reads import ReadParams, unread_note
from hpcopt_agent.runtime import StopSignal
from hpcopt_agent.schemes import Scheme, make_scheme
from hpcopt_agent.server import RETRIED, LeaseLost, TrialLink
from hpcopt_agent.settings import TrainingSettings
from hpcopt_agent.task import Task, as_dict, as_user
from hpcopt_agent.tracking import Tracking

log = logging.getLogger("hpcopt_agent")


@dataclass(frozen=True)
class TrialInfo:
    campaign_id: int
    trial_id: int
    number: int
    attempt: int
    params: dict[str, Any]
    #: A PBT interval (``algorithm: pbt``): the epoch it trains to (0: the campaign's
    #: ``training.epochs``) and the checkpoint it starts from (None: none).
    stop_epoch: int = 0
    parent: Parent | None = None


@dataclass
class FoldOutcome:
    fold: int
    status: Outcome
    value: float | None = None
    error: str = ""
    epochs: int = 0  # epochs this attempt trained


@dataclass
class _Run:
    models: dict[str, torch.nn.Module]
    optimizers: dict[str, torch.optim.Optimizer]
    single: bool
    scheme: Scheme
    precision: Precision
    driver: EpochDriver
    epoch: int = 0
    batch: int = 0  # this rank's position in the epoch (asynchronous schemes: per rank)
    metrics: dict[str, float] = field(default_factory=dict)
    uri: str = ""  # the latest checkpoint


def summarize(exc: BaseException, limit: int = 4000) -> str:
    """The end of a traceback: what the server keeps as the trial's error."""
    text = "".join(traceback.format_exception(exc)).strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def position(epoch: int, batch: int, epochs: int) -> str:
    """Where a fold stands, as the epoch log counts (from 1): ``epoch 27/100, after batch
    13`` or ``the start of epoch 27/100``. ``epoch`` counts from 0 (epochs done) and
    ``batch`` is the batches of it done. The preemption and the resume print the same."""
    where = f"epoch {epoch + 1}/{epochs}"
    return f"{where}, after batch {batch}" if batch else f"the start of {where}"


def report_error(exc: Exception) -> tuple[Outcome, str]:
    """What a failed report means for a fold group (a Task's or a script's): the trial is
    gone (lease lost, or the server unreachable past the retries), or the report was
    refused."""
    if isinstance(exc, LeaseLost):
        log.warning("the trial is no longer ours: %s", exc)
        return Outcome.LOST, ""
    assert isinstance(exc, ApiError)
    if exc.code in RETRIED:
        log.error("the server did not take the report: %s; leaving the trial to its lease", exc)
        return Outcome.LOST, ""
    return Outcome.FAILED, f"the server refused a report: {exc}"


def seed_for(*parts: int) -> int:
    return int(np.random.SeedSequence([abs(p) for p in parts]).generate_state(1)[0])


class FoldTrainer:
    def __init__(
        self,
        *,
        comms: Comms,
        task: Task,
        data: Data,
        settings: TrainingSettings,
        stop: StopSignal,
        checkpoint_root: Path,
        server_id: str,
        timeout: float = 300.0,
        tracking: Tracking | None = None,
    ) -> None:
        self.tracking = tracking or Tracking(None)
        self.comms = comms
        self.fold_comm = comms.fold
        self.task = task
        self.data = data
        self.s = settings
        self.stop = stop
        self.root = checkpoint_root
        self.server_id = server_id
        self.timeout = timeout
        self.current: tuple[TrialInfo, int, TrialLink | None] | None = None
        #: What :meth:`_say_unread` logged already (it logs each note once).
        self.said_unread: set[str] = set()
        #: Nodes this fold group spans (by host name): with ranks_per_fold, where the
        #: throughput measured in each epoch belongs in the planner's model.
        self.fold_nodes = len(set(self.fold_comm.allgather(socket.gethostname())))

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
        out = FoldOutcome(fold, Outcome.COMPLETED)
        self.current = (trial, fold, link)
        scheme: Scheme | None = None
        run: _Run | None = None
        state: dict[str, Any] | None = None
        why, error = "", ""
        self.data.open(seed_for(self.s.seed, trial.number, fold, 2))
        try:  # the same knobs on every rank: all build the scheme (a collective) or none does
            name = self.s.scheme_for(trial.params)
            scheme = make_scheme(name, self.comms, self.s.knobs(trial.params), self.s.epochs, self.timeout)
            trial = replace(trial, params=ReadParams(trial.params))  # what the task reads of them
            if resume_uri:
                state, why = checkpoint.load(
                    resume_uri, self.root, self.server_id, trial.campaign_id, trial.trial_id, fold
                )
        except Exception as exc:
            error = summarize(exc)
        try:
            code, error = self._agree(Verdict.FAILED if error else Verdict.OK, error)
            if code == Verdict.FAILED or scheme is None:
                return self._fail(out, trial, link, f"setting up fold {fold}", error)
            # Every rank resumes or none does (a rank that could not read the file would
            # otherwise train another epoch than its peers).
            why = next((w for w in self.fold_comm.allgather(why) if w), "")
            parent = "" if trial.parent is None else f"from trial #{trial.parent.number}'s checkpoint"
            if why:
                state = None
                if link is not None:
                    log.warning("fold %d: %s; training the fold %s", fold, why, parent or "from the start")
                    link.event(
                        fold, "checkpoint_refused", f"{why}; the fold restarts {parent or 'from its first epoch'}"
                    )
            if state is None and trial.parent is not None:
                state, error = load_parent(trial.parent, self.root, self.server_id, trial.campaign_id, fold)
                code, error = self._agree(Verdict.FAILED if error else Verdict.OK, error)
                if code == Verdict.FAILED:
                    return self._fail(out, trial, link, f"starting fold {fold} {parent}", error)
                resume_uri = ""
            try:
                run = self._start(trial, fold, state, resume_uri, scheme)
            except Exception as exc:
                error = summarize(exc)
            code, error = self._agree(Verdict.FAILED if run is None else Verdict.OK, error)
            if code == Verdict.FAILED or run is None:
                return self._fail(out, trial, link, f"setting up fold {fold}", error)
            return self._epochs(out, run, trial, fold, train, validation, link)
        finally:
            self.data.close()
            if scheme is not None:
                scheme.close()
            self.tracking.close(trial.campaign_id, trial.number, fold)

    def _epochs(
        self,
        out: FoldOutcome,
        run: _Run,
        trial: TrialInfo,
        fold: int,
        train: np.ndarray,
        validation: np.ndarray,
        link: TrialLink | None,
    ) -> FoldOutcome:
        params = trial.params
        batch_size = run.scheme.roles.rank_batch(self.task.batch_size(params))
        until = trial.stop_epoch or self.s.epochs
        snapshots = Snapshots(self.s.analysis if run.single else None, self.s.epochs, self.fold_comm.rank == 0)
        while run.epoch < until:
            t0 = time.perf_counter()
            ep, error = Batches(), ""
            try:
                ep = self._train_epoch(run, trial, fold, train, batch_size)
            except Exception as exc:
                error = summarize(exc)
            code, error = self._agree(
                Verdict.FAILED if error else Verdict.PREEMPT if ep.stop_at is not None else Verdict.OK, error
            )
            if code == Verdict.FAILED:
                return self._fail(out, trial, link, f"epoch {run.epoch + 1}", error)
            if code == Verdict.PREEMPT:
                run.batch = ep.stop_at if ep.stop_at is not None else run.batch
                uri = self._checkpoint(trial, fold, run)
                if link is not None:
                    log.info("preempted at %s; checkpoint %s", position(run.epoch, run.batch, self.s.epochs), uri)
                out.status = Outcome.PREEMPTED
                return out
            samples = 0

            def evaluate(ep: Batches = ep) -> tuple[dict[str, float], float]:
                nonlocal samples
                metrics, samples, train_loss = self._evaluate(run, validation, params, ep)
                return metrics, train_loss

            try:
                metrics = run.driver.end(run.epoch, run.models, evaluate)
            except Exception as exc:
                metrics, error = {}, summarize(exc)
            code, error = self._agree(Verdict.FAILED if error else Verdict.OK, error)
            if code == Verdict.FAILED:
                return self._fail(out, trial, link, f"evaluation after epoch {run.epoch + 1}", error)
            # Wall seconds of this fold's training and evaluation so far (resumes included):
            # an objective of its own in a multi-objective campaign, unless the task reports one.
            metrics.setdefault("train_seconds", run.metrics.get("train_seconds", 0.0) + time.perf_counter() - t0)
            for name, figure in target.clock(self.s.target, metrics, run.metrics, self.fold_comm.size).items():
                metrics.setdefault(name, figure)
            metrics.update(resources(metrics, run.metrics, run.epoch + 1, self.fold_comm.size, self.s.folds))
            run.epoch, run.batch, run.metrics = run.epoch + 1, 0, metrics
            out.epochs += 1
            snapshots.keep(run.epoch, next(iter(run.models.values())))
            due = run.epoch == until or (self.s.checkpoint_every > 0 and run.epoch % self.s.checkpoint_every == 0)
            uri = self._checkpoint(trial, fold, run) if due else ""
            answer = None
            if link is not None:
                self.tracking.epoch(trial.campaign_id, trial.number, fold, run.epoch, run.metrics)
                answer = self._report_epoch(link, fold, run, uri, samples, time.perf_counter() - t0)
            action, error = bcast(self.fold_comm, answer)
            if action == Outcome.FAILED:
                return self._fail(out, trial, link, f"epoch {run.epoch}", error)
            if action != Outcome.CONTINUE:
                out.status = action
                return out
        # The fold is done: its analysis (when the campaign asks), then its final metrics.
        if self.s.analysis is not None and run.epoch == self.s.epochs:
            self._analyse(run, trial, fold, train, link, snapshots)
        answer = None
        if link is not None:
            answer = self._report_fold(link, fold, run)
        status, error = bcast(self.fold_comm, answer)
        if status == Outcome.FAILED:  # released as FAILED at once, not left to its lease
            return self._fail(out, trial, link, "its end", error)
        if link is not None and fold == 0 and out.epochs > 0 and isinstance(trial.params, ReadParams):
            self._say_unread(link, trial.params)
        out.status, out.error = status, error
        if out.status == Outcome.COMPLETED:
            out.value = run.metrics.get(self.s.metric)
            if link is not None:
                self.tracking.fold_end(
                    trial.campaign_id, trial.number, fold, dict(dict.items(trial.params)), run.metrics, run.uri
                )
        return out

    # -- pieces ----------------------------------------------------------------------------

    def _start(
        self, trial: TrialInfo, fold: int, state: dict[str, Any] | None, resume_uri: str, scheme: Scheme
    ) -> _Run:
        torch.manual_seed(seed_for(self.s.seed, trial.number, fold))
        random.seed(seed_for(self.s.seed, trial.number, fold, self.fold_comm.rank))
        np.random.seed(seed_for(self.s.seed, trial.number, fold, self.fold_comm.rank) % 2**32)
        models, single = scheme.placement.build(self.task, trial.params)
        optimizers = as_dict(self.task.optimizer(trial.params, as_user(models, single)))
        if set(optimizers) - set(models) and not single:
            raise ValueError(f"Task.optimizer returned keys {sorted(optimizers)}; build returned {sorted(models)}")
        precision = Precision(self.s.precision, self.comms.device)
        # A PBT interval starts from its parent's checkpoint (``state`` without a
        # ``resume_uri``) with its own hyper-parameters, RNG and position.
        inherited = state is not None and not resume_uri and trial.parent is not None
        if state is not None:
            owner = trial.parent.trial_id if inherited and trial.parent is not None else trial.trial_id
            path = checkpoint.fold_path(self.root, self.server_id, trial.campaign_id, owner, fold)
            settings = hyper_parameters(optimizers)
            try:
                scheme.placement.load_models(path, state, models, optimizers)
            except RuntimeError as exc:
                if not inherited or trial.parent is None:
                    raise
                raise RuntimeError(shape_error(trial.parent, exc)) from None
            if inherited:
                restore_hyper_parameters(optimizers, settings)
        models = batchnorm.synchronise(models, self.s.batchnorm, self.comms)
        step_models, step_optimizers = scheme.wrap(models, optimizers)
        precision.compress(step_models)
        step_optimizers = precision.wrap(step_optimizers)
        driver = EpochDriver(
            scheme,
            self.task,
            self.data,
            trial.params,
            precision,
            as_user(step_models, single),
            as_user(step_optimizers, single),
        )
        run = _Run(models, optimizers, single, scheme, precision, driver)
        if state is None:
            return run
        me = self.fold_comm.rank
        run.epoch, run.metrics = int(state["epoch"]), dict(state.get("metrics", {}))
        if inherited:
            run.driver.resumed = True
            if me == 0 and trial.parent is not None:
                log.info("starts at epoch %d from trial #%d's checkpoint", run.epoch, trial.parent.number)
            return run
        batches, schemes = state.get("batches") or [], state.get("schemes") or []
        run.batch = int(batches[me]) if len(batches) == self.fold_comm.size else int(state["batch"])
        if len(schemes) == self.fold_comm.size:
            scheme.load_state(schemes[me])
        scalers = state.get("scalers") or []
        if len(scalers) == self.fold_comm.size:
            run.precision.load_state(scalers[me])
        run.uri = resume_uri
        run.driver.resumed = True
        rng = state.get("rng") or []
        if len(rng) == self.fold_comm.size:
            torch_state, np_state, py_state = rng[me]
            torch.set_rng_state(torch_state)
            np.random.set_state(checkpoint.numpy_rng(np_state))
            random.setstate(py_state)
        if me == 0:
            log.info("resuming fold %d at %s (%s)", fold, position(run.epoch, run.batch, self.s.epochs), resume_uri)
        return run

    def _train_epoch(self, run: _Run, trial: TrialInfo, fold: int, train: np.ndarray, batch_size: int) -> Batches:
        """This rank's part of one epoch from ``run.batch`` on (the epoch driver)."""
        for model in run.models.values():
            model.train()
        device = self.comms.device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        reset_host_peak()
        seed = seed_for(self.s.seed, trial.number, fold, run.epoch, 1)
        return run.driver.batches(run.epoch, run.batch, train, seed, batch_size, self.stop)

    def _evaluate(
        self, run: _Run, validation: np.ndarray, params: dict[str, Any], ep: Batches
    ) -> tuple[dict[str, float], int, float]:
        """The fold group's metrics (the ranks that read data each evaluate a share of
        the validation samples; the leader averages weighted by samples), the samples
        trained in the epoch, and the mean training loss (every rank gets the last two).
        The leader adds ``samples_per_second`` (of the batch loops) with the
        ``ranks_per_fold`` and ``fold_nodes`` it was measured at (the planner's model)
        and, on CUDA,
        ``peak_gpu_memory_mb`` (the largest over the fold group), and everywhere
        ``peak_host_memory_mb`` (the largest resident set of the group's ranks in the
        epoch, ``peaks.py``)."""
        roles, placement = run.scheme.roles, run.scheme.placement
        index, count = roles.reader()
        share = validation[index::count]
        mine = share if roles.reads else share[:0]
        local: dict[str, float] = {}
        if placement.takes_part(len(share), len(mine)):
            for model in run.models.values():
                model.eval()
            size = self.data.eval_size(roles.rank_batch(self.task.batch_size(params)))
            with torch.no_grad(), run.precision.active():
                batches = self.data.read(self.data.batches(mine, size))
                local = placement.evaluate(self.task, run.models, run.single, batches, params)
        device = self.comms.device
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
        host = host_peak_mb()
        trained = np.array([ep.samples, sum(ep.losses), len(ep.losses)], np.float64)
        total = np.zeros_like(trained)
        self.fold_comm.Allreduce(trained, total, op=MPI.SUM)
        longest = np.zeros(3, np.float64)
        self.fold_comm.Allreduce(np.array([ep.seconds, peak, host], np.float64), longest, op=MPI.MAX)
        train_loss = total[1] / total[2] if total[2] else math.nan
        parts = gather(self.fold_comm, (placement.evaluated(len(mine)), local))
        if parts is None:
            return {}, int(total[0]), train_loss
        n = sum(k for k, _ in parts if k)
        keys = next((list(m) for k, m in parts if k and m), [])
        metrics = {k: sum(c * m[k] for c, m in parts if c) / n for k in keys}
        if math.isfinite(train_loss):
            metrics.setdefault("train_loss", train_loss)
        if longest[0] > 0 and total[0]:
            metrics.setdefault("samples_per_second", total[0] / longest[0])
            metrics.setdefault("ranks_per_fold", float(self.fold_comm.size))
            metrics.setdefault("fold_nodes", float(self.fold_nodes))
            metrics.setdefault("train_samples", float(total[0]))
        if device.type == "cuda":
            metrics.setdefault("peak_gpu_memory_mb", longest[1])
        if longest[2] > 0:
            metrics.setdefault("peak_host_memory_mb", longest[2])
        return metrics, int(total[0]), train_loss

    def _checkpoint(self, trial: TrialInfo, fold: int, run: _Run) -> str:
        """Every rank gives its RNG states, position and scheme state; the fold leader
        writes them with its models and optimizers (a scheme whose ranks hold different
        weights keeps them in its state)."""
        rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
        path = checkpoint.fold_path(self.root, self.server_id, trial.campaign_id, trial.trial_id, fold)
        held = run.scheme.placement.save_models(path, run.models, run.optimizers)
        states = gather(self.fold_comm, (rng, run.batch, run.scheme.state(), run.precision.state()))
        if states is None:
            return ""
        state = {
            **held,
            "epoch": run.epoch,
            "batch": run.batch,
            "batches": [b for _, b, _, _ in states],
            "schemes": [s for _, _, s, _ in states],
            "scalers": [p for _, _, _, p in states],
            "scheme": run.scheme.name,
            "metrics": run.metrics,
            "rng": [r for r, _, _, _ in states],
            "server": self.server_id,
            "campaign": trial.campaign_id,
            "trial": trial.trial_id,
            "attempt": trial.attempt,
            "fold": fold,
        }
        run.uri = checkpoint.save(path, state)
        return run.uri

    def _analyse(
        self, run: _Run, trial: TrialInfo, fold: int, train: np.ndarray, link: TrialLink | None, snaps: Snapshots
    ) -> None:
        """The fold's curvature and landscape (``curvature/fold.py``), on every rank of the
        fold group: its scalars join the fold's metrics, the whole result is stored with
        the trial (``ReportAnalysis``). A task of several models is skipped, saying so; a
        failure is said and the fold goes on (it is a diagnostic, not the fold's result)."""
        assert self.s.analysis is not None
        if self.s.analysis["on"] == "best":  # the server knows how the other trials did
            chosen, why = bcast(self.fold_comm, link.should_analyse(fold, run.metrics) if link is not None else None)
            if not chosen:
                if link is not None:
                    log.info("fold %d: not analysed: %s (analysis.on: best)", fold, why)
                    link.event(fold, "analysis", f"not computed: {why} (analysis.on: best)")
                return
        result, error = None, ""
        if not run.single:
            error = f"the task builds several models ({', '.join(run.models)}); the analysis takes one"
        else:
            batch = run.scheme.roles.rank_batch(self.task.batch_size(trial.params))
            try:
                result = self.analyse_model(next(iter(run.models.values())), train, trial.number, fold, batch, snaps)
            except Exception as exc:
                error = summarize(exc, 1000)
        code, error = self._agree(Verdict.FAILED if error else Verdict.OK, error)
        if link is None:
            return
        if code == Verdict.FAILED or result is None:
            log.warning("fold %d: no analysis: %s", fold, error)
            link.event(fold, "analysis", f"not computed: {error}")
            return
        run.metrics.update(fold_metrics(result))
        refused = link.analysis(fold, json.dumps(result))
        c = result["cost"]
        summary = (
            f"{c['hvps']} HVPs and {c['passes']} loss passes on {result['samples']} samples in {c['seconds']:.3g} s "
            f"(planned share {c['share_planned']:.1%})" + (f"; not stored: {refused}" if refused else "")
        )
        log.info("fold %d analysis: %s", fold, summary)
        link.event(fold, "analysis", summary)

    def analyse_model(
        self, model: torch.nn.Module, train: np.ndarray, number: int, fold: int, batch: int, snapshots: Snapshots
    ) -> dict[str, Any]:
        """The analysis of ``model`` (``curvature/fold.py``, a collective over the fold
        group) with the task's loss on the fold's training samples, read in batches of
        ``batch`` samples or more; at a fold's end and for an analysis asked for later."""
        assert self.s.analysis is not None
        size = self.data.eval_size(batch)
        return analyse_fold(
            options=self.s.analysis,
            model=model,
            loss=lambda m, b: self.task.loss(m(b[0]), b),
            read=lambda idx: list(self.data.read(self.data.batches(idx, size))),
            train=train,
            epochs=self.s.epochs,
            comm=self.fold_comm,
            pg=self.comms.pg,
            device=self.comms.device,
            snapshots=snapshots,
            seed=seed_for(self.s.seed, number, fold, 3),
        )

    def _report_epoch(
        self, link: TrialLink, fold: int, run: _Run, uri: str, samples: int, seconds: float
    ) -> tuple[Outcome, str]:
        value = run.metrics.get(self.s.metric)
        shown = " ".join(f"{k}={v:.4g}" for k, v in run.metrics.items())
        rate = samples / seconds if seconds > 0 else 0.0
        log.info("epoch %d/%d: %s (%.1f s, %.0f samples/s)", run.epoch, self.s.epochs, shown, seconds, rate)
        if value is None:
            return Outcome.FAILED, (
                f"Task.evaluate returned {sorted(run.metrics)}; the campaign's objective metric "
                f"{self.s.metric!r} is not among them"
            )
        if not math.isfinite(value):
            return (
                Outcome.FAILED,
                f"the objective {self.s.metric} is {value} after epoch {run.epoch} (training diverged?)",
            )
        missing = self._missing_objectives(run)
        if missing:
            return Outcome.FAILED, missing
        try:
            return link.intermediate(fold, run.epoch, value, uri), ""
        except (LeaseLost, ApiError) as exc:
            return report_error(exc)

    def _missing_objectives(self, run: _Run) -> str:
        """Why the metrics lack an objective of a multi-objective campaign ('' if none)."""
        missing = [m for m in self.s.objectives[1:] if not math.isfinite(run.metrics.get(m, math.nan))]
        if not missing:
            return ""
        return (
            f"Task.evaluate returned {sorted(run.metrics)}; the campaign's objective {missing[0]!r} "
            "is not among them (or not finite)"
        )

    def _say_unread(self, link: TrialLink, params: ReadParams) -> None:
        """Fold 0's leader, once it trained: the trial's parameters the task never read,
        as a warning (once per agent) and an event on the trial."""
        note = unread_note(params)
        if not note:
            return
        if note not in self.said_unread:
            self.said_unread.add(note)
            log.warning("%s: a misspelt name, or a parameter the search spends a dimension on for nothing", note)
        link.event(0, "params_unread", note)  # a refusal is logged: the fold is reported already

    def _report_fold(self, link: TrialLink, fold: int, run: _Run) -> tuple[Outcome, str]:
        value = run.metrics.get(self.s.metric)
        if value is None or not math.isfinite(value):
            return Outcome.FAILED, f"no finite {self.s.metric} at the end of fold {fold}"
        missing = self._missing_objectives(run)
        if missing:
            return Outcome.FAILED, missing
        try:
            action = link.fold(fold, value, run.metrics, run.uri)
        except (LeaseLost, ApiError) as exc:
            return report_error(exc)
        log.info("done: %s=%.6g", self.s.metric, value)
        if action != Outcome.CONTINUE:
            log.info("the server stopped the trial after fold %d (%s)", fold, action)
            return action, ""
        return Outcome.COMPLETED, ""

    def _agree(self, code: Verdict, error: str) -> tuple[Verdict, str]:
        """The fold group's common verdict (failure > preemption > ok) and, on the
        leader, the first error text. A rank that does not arrive within the collective
        timeout fails the trial and ends the job: the fold group cannot go on without it."""
        try:
            bounded_barrier(self.fold_comm, self.timeout)
        except CollectiveTimeout as exc:
            self._abandon(exc, error)
        agreed = Verdict(self.fold_comm.allreduce(int(code), op=MPI.MAX))
        if agreed != Verdict.FAILED:
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
                link.release(TrialState.FAILED, reason)
        self.comms.world.Abort(3)

    def _fail(self, out: FoldOutcome, trial: TrialInfo, link: TrialLink | None, where: str, error: str) -> FoldOutcome:
        """Fails the trial right away (the other fold groups learn it at their next report)."""
        out.status, out.error = Outcome.FAILED, f"fold {out.fold}, {where}: {error}"
        if link is not None:
            log.error("failed at %s:\n%s", where, error)
            with contextlib.suppress(LeaseLost):
                link.release(TrialState.FAILED, out.error)
        return out
