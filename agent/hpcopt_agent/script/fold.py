"""One fold of a script task: every rank of the fold group starts the script as a
process of its own, with the environment ``torchrun`` sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), and serves it
until the fold leader says the fold has ended.

The ranks do not meet in a collective while the scripts run (a rank waiting in one
could not notice its script crash): each polls its script's channel and the fold
communicator's point-to-point messages, and the leader decides.

- The leader takes rank 0's ``report``, reports it to the server and sends the answer
  to every rank, which gives it to its script: every script gets the same answer.
- A rank whose script exits says so to the leader, with its exit code and stderr tail.
  A script that fails (non-zero exit) before any stop fails the fold at once: the
  other ranks' scripts are stopped rather than left hanging in a collective.
- A stop signal on any rank (SIGUSR1, SIGTERM, the walltime's reserve) reaches every
  script (``trial.should_checkpoint()``, and ``"stop"`` from ``report``); scripts that
  are still running ``grace`` seconds later are terminated (SIGTERM to the process
  group, then SIGKILL), so a script that ignores the signal still ends before the
  walltime. The fold is PREEMPTED and resumes from what the script left in its
  checkpoint directory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpcopt import ApiError, TrialState
from hpcopt.core import target
from hpcopt.core.constraints import resources
from hpcopt_agent import checkpoint
from hpcopt_agent.comm import Comms, bcast
from hpcopt_agent.fold import FoldOutcome, TrialInfo, report_error, summarize
from hpcopt_agent.outcomes import Outcome
from hpcopt_agent.peaks import host_peak_mb
from hpcopt_agent.runtime import StopSignal
from hpcopt_agent.script import Script
from hpcopt_agent.script.process import (
    METRICS_PREFIX,
    NOT_STARTED,
    TASK_VARIABLES,
    ScriptProcess,
    exit_text,
    free_port,
    launch,
    threads,
)
from hpcopt_agent.server import LeaseLost, TrialLink
from hpcopt_agent.settings import TrainingSettings
from hpcopt_agent.tracking import Tracking

log = logging.getLogger("hpcopt_agent")

#: The fold communicator's tags for the ranks' messages while their scripts run: each
#: fold run has its own (``TAG + run % TAGS``), so a message one run left unread (a
#: rank's exit after the leader had ended the fold on another's failure) is never taken
#: for the next run's.
TAG, TAGS = 7301, 20_000


@dataclass
class _Leader:
    """What the fold leader decides from."""

    metrics: dict[str, float] = field(default_factory=dict)
    epoch: int = 0
    reports: int = 0  # epochs this attempt reported
    exits: dict[int, tuple[int, str]] = field(default_factory=dict)
    stopping: str = ""  # "stop" (preempt), "prune", "done", "failed", "lost"
    outcome: Outcome | None = None
    error: str = ""
    grace_until: float = math.inf
    started: float = field(default_factory=time.monotonic)  # when the fold's script started


class ScriptFold:
    """Runs one fold of a script task on the fold group (every rank calls :meth:`run`)."""

    def __init__(
        self,
        *,
        comms: Comms,
        script: Script,
        settings: TrainingSettings,
        stop: StopSignal,
        checkpoint_root: Path,
        server_id: str,
        grace: float = 30.0,
        master_addr: str | None = None,
        poll: float = 0.05,
        tracking: Tracking | None = None,
    ) -> None:
        self.tracking = tracking or Tracking(None)
        self.comms, self.fold_comm = comms, comms.fold
        self.script, self.s, self.stop = script, settings, stop
        self.root, self.server_id = checkpoint_root, server_id
        self.grace, self.master_addr, self.poll = grace, master_addr, poll
        hosts = self.fold_comm.allgather(socket.gethostname())
        me = self.fold_comm.rank
        self.local_rank = hosts[:me].count(hosts[me])
        self.local_world = hosts.count(hosts[me])
        self.fold_nodes = len(set(hosts))
        device = comms.device
        mine = [r for r, h in enumerate(hosts) if h == hosts[me]]
        indices = self.fold_comm.allgather(device.index if device.type == "cuda" else None)
        self.cuda = [indices[r] for r in mine] if device.type == "cuda" else None
        self.runs = 0  # fold runs so far (every rank of the fold group runs them in step)
        self.tag = TAG

    # -- every rank ------------------------------------------------------------------------

    def run(
        self,
        trial: TrialInfo,
        fold: int,
        train: np.ndarray,
        validation: np.ndarray,
        link: TrialLink | None,
        resume_uri: str = "",
    ) -> FoldOutcome:
        """Trains ``fold`` to its end (or a stop); ``link`` is set on the fold leader only.
        ``train``/``validation`` are unused: the script splits its own data (``trial.split``)."""
        del train, validation, resume_uri  # the checkpoint is the directory's content
        me = self.fold_comm.rank
        self.runs += 1
        self.tag = TAG + self.runs % TAGS
        where = checkpoint.fold_path(self.root, self.server_id, trial.campaign_id, trial.trial_id, fold)
        folder = where.with_name(where.stem)  # <trial>/fold<k>/: the script's own files
        rendezvous = None
        if me == 0:  # decided once, before any script runs (and writes there)
            folder.mkdir(parents=True, exist_ok=True)
            resume = _holds_files(folder)
            rendezvous = (self.master_addr or socket.gethostname(), free_port(), resume)
        addr, port, resume = bcast(self.fold_comm, rendezvous)
        child, error = None, ""
        scratch = Path(tempfile.mkdtemp(prefix="hpcopt-script-"))  # this rank's params file
        try:
            try:
                child = self._start(trial, fold, folder, folder if resume else None, scratch, addr, port)
            except Exception as exc:  # a template naming what the trial lacks, an exec failure
                error = f"could not start {self.script.path}: {exc}"
            if me == 0:
                why = f" (resuming from {folder})" if resume else ""
                log.info("started %s on %d rank(s)%s", self.script.path.name, self.fold_comm.size, why)
            ended: tuple[Outcome, str, float | None, int] = (Outcome.COMPLETED, "", None, 0)
            if me == 0:
                assert link is not None
                try:
                    ended = self._lead(trial, fold, folder, link, child, error)
                except Exception as exc:  # the other ranks wait for the end: they get it
                    self._tell(("end",))
                    ended = (Outcome.FAILED, f"fold {fold}: serving the script failed: {summarize(exc)}", None, 0)
            else:
                self._follow(child, error)
        finally:
            if child is not None:
                child.stop()
            shutil.rmtree(scratch, ignore_errors=True)
            self.tracking.close(trial.campaign_id, trial.number, fold)
        status, error, value, epochs = bcast(self.fold_comm, ended if me == 0 else None)
        while self.fold_comm.iprobe(tag=self.tag):  # what the run's ranks said after its end
            self.fold_comm.recv(tag=self.tag)
        out = FoldOutcome(fold, status, value, error, epochs)
        if status == Outcome.FAILED and link is not None:
            log.error("failed: %s", error)
            try:
                link.release(TrialState.FAILED, error)
            except (LeaseLost, ApiError) as exc:
                log.warning("could not release the trial as FAILED: %s", exc)
        return out

    def _start(
        self, trial: TrialInfo, fold: int, folder: Path, resume: Path | None, scratch: Path, addr: str, port: int
    ) -> ScriptProcess:
        me = self.fold_comm.rank
        until = trial.stop_epoch or self.s.epochs
        info = {
            "params": dict(trial.params),
            "number": trial.number,
            "trial_id": trial.trial_id,
            "campaign": trial.campaign_id,
            "fold": fold,
            "folds": self.s.folds,
            "fold_seed": self.s.fold_seed,
            "epochs": until,
            "seed": self.s.seed,
            "checkpoint_dir": str(folder),
            "resume_from": str(resume) if resume else "",
        }
        params_file = scratch / "params.json"
        params_file.write_text(json.dumps(info["params"]))
        values = {
            **trial.params,
            "trial": trial.number,
            "fold": fold,
            "folds": self.s.folds,
            "epochs": until,
            "params_file": str(params_file),
            "checkpoint_dir": str(folder),
        }
        argv = [sys.executable, str(self.script.path), *self.script.command(values)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(TASK_VARIABLES)}
        env.update(
            RANK=str(me),
            WORLD_SIZE=str(self.fold_comm.size),
            LOCAL_RANK=str(self.local_rank),
            LOCAL_WORLD_SIZE=str(self.local_world),
            GROUP_RANK=str(self.comms.fold_index),
            MASTER_ADDR=addr,
            MASTER_PORT=str(port),
            TORCHELASTIC_RUN_ID=f"hpcopt-{trial.campaign_id}-{trial.trial_id}-{fold}",
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS") or str(threads()),
            HPCOPT_TRIAL=json.dumps(info),
            HPCOPT_PARAMS_FILE=str(params_file),
        )
        if self.cuda is not None:  # cuda:LOCAL_RANK is this rank's own GPU, as the agent binds it
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(
                visible[i] if i is not None and i < len(visible) else str(i) for i in self.cuda
            )
        return launch(argv, env, f"[trial #{trial.number} fold {fold} rank {me}] ")

    def _follow(self, child: ScriptProcess | None, error: str) -> None:
        """A rank other than the leader: serves its script until the leader ends the fold."""
        answers: dict[int, str] = {}
        waiting: set[int] = set()
        said_exit = said_stop = False
        leader = 0
        while True:
            if child is not None:
                for m in child.channel.poll(self.poll):
                    if m.get("op") == "report":
                        waiting.add(_epoch(m))
            else:
                time.sleep(self.poll)
            while self.fold_comm.iprobe(source=leader, tag=self.tag):
                kind, *rest = self.fold_comm.recv(source=leader, tag=self.tag)
                if kind == "end":
                    return
                if kind == "answer":
                    answers[int(rest[0])] = str(rest[1])
                elif kind == "checkpoint" and child is not None:
                    child.channel.send({"op": "checkpoint"})
            if child is not None:
                for e in sorted(waiting & set(answers)):
                    child.channel.send({"op": "answer", "epoch": e, "answer": answers[e]})
                    waiting.discard(e)
            if not said_exit and (child is None or child.proc.poll() is not None):
                code = NOT_STARTED if child is None else int(child.proc.returncode)
                if child is not None:
                    for t in child.pumps:
                        t.join(timeout=5)
                tail = error if child is None else "\n".join(child.tail)
                self.fold_comm.send(("exit", self.fold_comm.rank, code, tail), dest=leader, tag=self.tag)
                said_exit = True
            if not said_stop and self.stop.requested:
                self.fold_comm.send(("stop", self.fold_comm.rank), dest=leader, tag=self.tag)
                said_stop = True

    # -- the leader --------------------------------------------------------------------------

    def _lead(
        self, trial: TrialInfo, fold: int, folder: Path, link: TrialLink, child: ScriptProcess | None, error: str
    ) -> tuple[Outcome, str, float | None, int]:
        size = self.fold_comm.size
        st = _Leader()
        t0 = time.monotonic()
        until = trial.stop_epoch or self.s.epochs
        if child is None:
            st.exits[0] = (NOT_STARTED, error)
        while True:
            if child is not None:
                for m in child.channel.poll(self.poll):
                    if m.get("op") != "report":
                        continue
                    answer = "stop"  # after the fold's end was decided: the report is not taken
                    if st.stopping in ("", "stop"):  # a checkpoint of a preempted fold still counts
                        seconds = time.monotonic() - t0
                        peak = host_peak_mb(child.proc.pid)  # alive: it waits for the answer
                        answer = self._report(st, link, trial, fold, folder, m, until, seconds, peak)
                    self._tell(("answer", _epoch(m), answer))
                    child.channel.send({"op": "answer", "epoch": _epoch(m), "answer": answer})
            else:
                time.sleep(self.poll)
            signalled = self.stop.requested
            while self.fold_comm.iprobe(tag=self.tag):
                kind, rank, *rest = self.fold_comm.recv(tag=self.tag)
                if kind == "exit":
                    st.exits[rank] = (int(rest[0]), str(rest[1]))
                elif kind == "stop":
                    signalled = True
            if child is not None and 0 not in st.exits and child.proc.poll() is not None:
                for t in child.pumps:
                    t.join(timeout=5)
                st.exits[0] = (int(child.proc.returncode), "\n".join(child.tail))
            if signalled and not st.stopping:
                self._stop(st, "stop", child)
            failed = next(((r, c, t) for r, (c, t) in sorted(st.exits.items()) if c != 0), None)
            # A failure counts while the scripts train; after their last report (done), a stop
            # or a prune, an exit code is their teardown's (gloo aborts a process that ends
            # without destroy_process_group) and the reports stand.
            if failed is not None and not st.stopping:
                r, code, tail = failed
                st.stopping, st.outcome = "failed", Outcome.FAILED
                if code == NOT_STARTED:
                    st.error = f"fold {fold}, rank {r}: {tail}"
                else:
                    st.error = f"fold {fold}: the script on rank {r} {exit_text(code)}" + (
                        f"; its stderr ends:\n{tail}" if tail else " (no stderr)"
                    )
                break
            if len(st.exits) == size or time.monotonic() > st.grace_until:
                break
        if len(st.exits) < size and st.stopping:
            log.warning(
                "%d script rank(s) still ran %.0f s after the %s: terminating them",
                size - len(st.exits),
                self.grace,
                {"stop": "stop signal", "prune": "server stopped the trial"}.get(st.stopping, "fold's end"),
            )
        self._tell(("end",))
        outcome, error = self._finish(st, link, fold, folder, child)
        if outcome == Outcome.COMPLETED:
            uri = _uri(folder)
            self.tracking.fold_end(trial.campaign_id, trial.number, fold, dict(trial.params), st.metrics, uri)
        value = st.metrics.get(self.s.metric) if outcome == Outcome.COMPLETED else None
        return outcome, error, value, st.reports

    def _tell(self, message: tuple[Any, ...]) -> None:
        for r in range(1, self.fold_comm.size):
            self.fold_comm.send(message, dest=r, tag=self.tag)

    def _stop(self, st: _Leader, why: str, child: ScriptProcess | None) -> None:
        st.stopping, st.grace_until = why, time.monotonic() + self.grace
        if why == "stop":
            self._tell(("checkpoint",))
            if child is not None:
                child.channel.send({"op": "checkpoint"})

    def _report(
        self,
        st: _Leader,
        link: TrialLink,
        trial: TrialInfo,
        fold: int,
        folder: Path,
        m: dict[str, Any],
        until: int,
        seconds: float,
        peak: float,
    ) -> str:
        """Rank 0's report after an epoch: to the server; the answer for every script.
        ``peak``: rank 0's script's peak resident memory so far (MiB; 0 unknown)."""
        epoch = _epoch(m)
        metrics = {str(k): _float(v) for k, v in dict(m.get("metrics") or {}).items()}
        metrics.setdefault("train_seconds", seconds)
        if peak > 0:
            metrics.setdefault("peak_host_memory_mb", peak)
        for name, figure in target.clock(self.s.target, metrics, st.metrics, self.fold_comm.size).items():
            metrics.setdefault(name, figure)
        metrics.update(resources(metrics, st.metrics, st.reports + 1, self.fold_comm.size, self.s.folds))
        if "samples_per_second" in metrics:  # the planner's model, as a Task's folds report it
            metrics.setdefault("ranks_per_fold", float(self.fold_comm.size))
            metrics.setdefault("fold_nodes", float(self.fold_nodes))
        st.metrics, st.epoch, st.reports = metrics, epoch, st.reports + 1
        shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        log.info("epoch %d/%d: %s", epoch, until, shown)
        self.tracking.epoch(trial.campaign_id, trial.number, fold, epoch, metrics)
        value = metrics.get(self.s.metric)
        problem = ""
        if value is None:
            problem = (
                f"trial.report gave {sorted(metrics)}; the campaign's objective metric {self.s.metric!r} is not "
                "among them"
            )
        elif not math.isfinite(value):
            problem = f"the objective {self.s.metric} is {value} after epoch {epoch} (training diverged?)"
        else:
            missing = [o for o in self.s.objectives[1:] if not math.isfinite(metrics.get(o, math.nan))]
            if missing:
                problem = (
                    f"trial.report gave {sorted(metrics)}; the campaign's objective {missing[0]!r} is not among them"
                )
        if problem or value is None:
            st.stopping, st.outcome, st.error = "failed", Outcome.FAILED, f"fold {fold}, epoch {epoch}: {problem}"
            st.grace_until = time.monotonic() + self.grace
            return "prune"
        uri = _uri(folder)
        try:
            action = link.intermediate(fold, epoch, value, uri)
        except (LeaseLost, ApiError) as exc:
            st.outcome, st.error = report_error(exc)
            st.stopping, st.grace_until = "lost", time.monotonic() + self.grace
            return "prune"
        if action != Outcome.CONTINUE:
            st.outcome = action
            self._stop(st, "prune", None)
            log.info("the server stopped the trial at epoch %d (%s)", epoch, action)
            return "prune"
        if self.stop.requested or st.stopping == "stop":
            if not st.stopping:
                self._stop(st, "stop", None)
            return "stop"
        if epoch >= until:
            st.stopping, st.grace_until = "done", time.monotonic() + self.grace
            return "stop"
        return "continue"

    def _finish(
        self, st: _Leader, link: TrialLink, fold: int, folder: Path, child: ScriptProcess | None
    ) -> tuple[Outcome, str]:
        if st.outcome is not None:
            return st.outcome, st.error
        if st.stopping == "stop":
            log.info("preempted at epoch %d; the script's checkpoint is %s", st.epoch, folder)
            return Outcome.PREEMPTED, ""
        late = [f"rank {r} {exit_text(c)}" for r, (c, _) in sorted(st.exits.items()) if c != 0]
        if late:
            log.warning("after its last report the script on %s; the fold's reports stand", ", ".join(late))
        if not st.metrics and child is not None and child.metrics_line:
            try:
                printed = json.loads(child.metrics_line.removeprefix(METRICS_PREFIX))
                st.metrics = {str(k): _float(v) for k, v in dict(printed).items()}
            except (ValueError, TypeError):
                return (
                    Outcome.FAILED,
                    f"fold {fold}: the script's last metrics line is not a JSON object of numbers: "
                    f"{child.metrics_line[:200]!r}",
                )
            # One line for the whole fold: its seconds, and the target's figures, as a
            # reported epoch would have them.
            st.metrics.setdefault("train_seconds", time.monotonic() - st.started)
            for name, figure in target.clock(self.s.target, st.metrics, {}, self.fold_comm.size).items():
                st.metrics.setdefault(name, figure)
            st.metrics.update(resources(st.metrics, {}, self.s.epochs, self.fold_comm.size, self.s.folds))
        value = st.metrics.get(self.s.metric)
        if value is None or not math.isfinite(value):
            return Outcome.FAILED, (
                f"fold {fold}: the script exited 0 without a finite {self.s.metric!r}: call "
                f"trial.report(epoch, {self.s.metric}=...) or print a line "
                f"'{METRICS_PREFIX}{{\"{self.s.metric}\": ...}}'"
            )
        uri = _uri(folder)
        try:
            action = link.fold(fold, value, st.metrics, uri)
        except (LeaseLost, ApiError) as exc:
            return report_error(exc)
        log.info("done: %s=%.6g", self.s.metric, value)
        if action != Outcome.CONTINUE:
            log.info("the server stopped the trial after fold %d (%s)", fold, action)
            return action, ""
        return Outcome.COMPLETED, ""


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def _uri(folder: Path) -> str:
    """The fold's checkpoint URI: its folder once the script wrote there ('' before)."""
    return folder.as_uri() if _holds_files(folder) else ""


def _epoch(message: dict[str, Any]) -> int:
    try:
        return int(message.get("epoch", 0))
    except (TypeError, ValueError):
        return 0


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


__all__ = ["METRICS_PREFIX", "ScriptFold"]
