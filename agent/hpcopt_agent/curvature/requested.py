"""An analysis of a finished trial that a user asked for after the fact
(``hpcopt_server.service.requested_analyses``): the agent's trial group takes it at a
trial boundary, like a trial, and each fold group computes its folds' analyses from the
folds' last checkpoints, on its own ranks and the fold's training samples, with the
campaign's ``analysis`` options (``curvature/fold.py`` does the computing).

- The weights are the checkpoint's (the fold leader's: the trained model, or a
  parameter server's centre), loaded into the task's freshly built model; the
  optimizer's state is not read. A checkpoint that is not this agent's, or not plain
  data, is refused as at a resume (``checkpoint.load``), and the fold says why.
- There are no epoch snapshots: the result has the final weights' eigenvalues, density
  and surfaces, no λ_max trace and no trajectory.
- A fold's failure is the analysis's: the request ends FAILED saying which fold and
  why; the folds analysed before it keep their documents.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcopt import Lease, Trial
from hpcopt_agent import checkpoint
from hpcopt_agent.comm import bcast
from hpcopt_agent.curvature.fold import Snapshots
from hpcopt_agent.server import retrying
from hpcopt_agent.task import as_dict

if TYPE_CHECKING:
    from hpcopt import AgentClient
    from hpcopt_agent.fold import FoldTrainer

log = logging.getLogger(__name__)


def analyse_kept(
    trainer: FoldTrainer,
    trial: Trial,
    params: dict[str, Any],
    fold: int,
    train: np.ndarray,
    client: AgentClient | None,
    lease: Lease,
) -> str:
    """One fold's analysis from its checkpoint (a collective over the fold group); the
    fold leader (``client`` set) stores the document under ``lease``. '' when stored,
    else why not (the same on every rank)."""
    from hpcopt_agent.fold import seed_for

    s = trainer.s
    assert s.analysis is not None
    uri = next((f.checkpoint_uri for f in trial.folds if f.index == fold), "")
    model, error = None, ""
    trainer.data.open(seed_for(s.seed, trial.number, fold, 2))
    try:
        try:
            state, why = checkpoint.load(uri, trainer.root, trainer.server_id, trial.campaign_id, trial.id, fold)
            if state is None:
                raise ValueError(why or f"fold {fold} kept no checkpoint")
            models = as_dict(trainer.task.build(params))
            if len(models) != 1:
                raise ValueError(f"the task builds several models ({', '.join(models)}); the analysis takes one")
            [(name, model)] = models.items()
            model.load_state_dict(state["models"][name])
            model = model.to(trainer.comms.device)
        except Exception as exc:
            error = _said(fold, exc)
        error = next((e for e in trainer.fold_comm.allgather(error) if e), "")
        if error or model is None:
            return f"fold {fold}: {error}"
        result: dict[str, Any] | None = None
        try:
            batch = trainer.task.batch_size(params)
            result = trainer.analyse_model(model, train, trial.number, fold, batch, Snapshots(None, s.epochs, False))
        except Exception as exc:
            error = _said(fold, exc)
        error = next((e for e in trainer.fold_comm.allgather(error) if e), "")
        if error or result is None:
            return f"fold {fold}: {error}"
        said = ""
        if client is not None:
            document = json.dumps(result)
            try:
                retrying(lambda: client.report_analysis(lease, fold, document), "ReportAnalysis", 120.0)
            except Exception as exc:  # the lease expired and another agent took it, say
                said = f"fold {fold}: not stored: {exc}"
            else:
                c = result["cost"]
                log.info(
                    "trial #%d fold %d analysed: %d HVPs and %d loss passes on %d samples in %.3g s",
                    trial.number,
                    fold,
                    c["hvps"],
                    c["passes"],
                    result["samples"],
                    c["seconds"],
                )
        return str(bcast(trainer.fold_comm, said))
    finally:
        trainer.data.close()


def _said(fold: int, exc: BaseException) -> str:
    """The error in one line for the request (the traceback goes to this rank's log)."""
    from hpcopt_agent.fold import summarize

    log.warning("fold %d: its analysis failed:\n%s", fold, summarize(exc))
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
