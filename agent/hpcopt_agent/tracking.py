"""Where users already look: TensorBoard event files and MLflow runs per trial and fold,
written by the fold leaders of either door (a ``Task`` or a script) as the folds report.

``hpcopt-agent --tensorboard DIR`` writes ``DIR/campaign-<id>/trial-<number>/fold-<k>/``:
every metric of every epoch as a scalar (``val_loss``, ``train_loss``...) at the epoch
as its step, and the trial's parameters as TensorBoard hparams with the fold's final
metrics. ``tensorboard --logdir DIR`` shows the folds as runs; a preempted fold that
resumes appends to its own folder. The agent's owner chooses the folder, never the
campaign (as for checkpoints). ``torch.utils.tensorboard`` ships with torch and needs
the ``tensorboard`` package (``pip install "hpcopt-agent[tensorboard]"``); the agent
refuses the flag at start without it.

``hpcopt-agent --mlflow URI`` (an MLflow tracking URI: ``http://host:5000``,
``sqlite:///mlflow.db``) logs to the experiment ``hpcopt: <campaign name> (campaign
<id>)`` a run per trial (its parameters, its state and value at the end; the trial group
leader finds it again by the tag ``hpcopt.trial_id`` when a preempted trial resumes)
and, nested in it, a run per fold (every metric per epoch, the checkpoint URI as the
tag ``hpcopt.checkpoint``). It needs ``mlflow-skinny`` (``pip install
"hpcopt-agent[mlflow]"``). Nothing either writer fails fails a trial: it is logged.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("hpcopt_agent")


def check_mlflow(uri: str) -> None:
    """A ValueError naming the flag when MLflow is missing (every rank checks; the URI is
    opened by the leaders that log, when they first do)."""
    try:
        from mlflow.tracking import MlflowClient  # noqa: F401
    except ImportError as exc:
        raise ValueError(f'--mlflow {uri}: needs MLflow (pip install "hpcopt-agent[mlflow]"): {exc}') from None


def check_tensorboard() -> None:
    """A ValueError naming the flag when ``torch.utils.tensorboard`` cannot write."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as exc:
        raise ValueError(
            f'--tensorboard needs the tensorboard package (pip install "hpcopt-agent[tensorboard]"): {exc}'
        ) from None


class Tracking:
    """The fold leaders' writers, one per trial and fold while the fold trains."""

    def __init__(self, tensorboard: Path | None, mlflow: str | None = None, campaign_name: str = "") -> None:
        self.root = tensorboard
        self.writers: dict[tuple[int, int, int], Any] = {}
        self.mlflow_uri = mlflow
        self.campaign_name = campaign_name
        self._client: Any = None
        self._experiments: dict[int, str] = {}
        #: The MLflow run of each trial this rank takes part in, and of each fold it leads.
        self.trial_runs: dict[tuple[int, int], str] = {}
        self.fold_runs: dict[tuple[int, int, int], str] = {}

    @property
    def uses_mlflow(self) -> bool:
        return self.mlflow_uri is not None

    def _mlflow(self, campaign: int) -> tuple[Any, str]:
        """The client and the campaign's experiment id (created the first time)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(self.mlflow_uri)
        if campaign not in self._experiments:
            name = f"hpcopt: {self.campaign_name} (campaign {campaign})"
            found = self._client.get_experiment_by_name(name)
            self._experiments[campaign] = found.experiment_id if found else self._client.create_experiment(name)
        return self._client, self._experiments[campaign]

    def _find(self, campaign: int, tags: dict[str, str]) -> str:
        client, experiment = self._mlflow(campaign)
        query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        found = client.search_runs([experiment], query, max_results=1)
        return str(found[0].info.run_id) if found else ""

    def trial_run(self, campaign: int, trial_id: int, number: int, params: dict[str, Any]) -> str:
        """The trial group leader: the trial's run, found again or created ('' on failure)."""
        if not self.uses_mlflow:
            return ""
        try:
            client, experiment = self._mlflow(campaign)
            tags = {"hpcopt.trial_id": str(trial_id)}
            run = self._find(campaign, tags)
            if run:
                client.update_run(run, status="RUNNING")
                return run
            created = client.create_run(
                experiment, run_name=f"trial #{number}", tags={**tags, "hpcopt.number": str(number)}
            )
            for name, value in params.items():
                client.log_param(created.info.run_id, name, value)
            return str(created.info.run_id)
        except Exception as exc:
            log.warning("mlflow: could not start trial #%d's run: %s", number, exc)
            return ""

    def set_trial(self, campaign: int, number: int, run: str) -> None:
        """Every rank of the trial group: the trial's run, which fold runs nest in."""
        if run:
            self.trial_runs[(campaign, number)] = run

    def trial_end(self, campaign: int, number: int, status: str, value: float | None) -> None:
        """The trial group leader: FINISHED (with ``value``), FAILED or KILLED (given back)."""
        run = self.trial_runs.pop((campaign, number), "")
        if not run:
            return
        try:
            client, _ = self._mlflow(campaign)
            if value is not None and math.isfinite(value):
                client.log_metric(run, "value", value)
            client.set_terminated(run, status)
        except Exception as exc:
            log.warning("mlflow: could not end trial #%d's run: %s", number, exc)

    def _fold_run(self, campaign: int, number: int, fold: int) -> str:
        key = (campaign, number, fold)
        parent = self.trial_runs.get((campaign, number), "")
        if key not in self.fold_runs and parent:
            client, experiment = self._mlflow(campaign)
            tags = {"mlflow.parentRunId": parent, "hpcopt.fold": str(fold)}
            run = self._find(campaign, tags)
            if run:
                client.update_run(run, status="RUNNING")
            else:
                run = str(client.create_run(experiment, run_name=f"trial #{number} fold {fold}", tags=tags).info.run_id)
            self.fold_runs[key] = run
        return self.fold_runs.get(key, "")

    def _writer(self, campaign: int, number: int, fold: int) -> Any:
        key = (campaign, number, fold)
        if key not in self.writers:
            from torch.utils.tensorboard import SummaryWriter

            assert self.root is not None
            folder = self.root / f"campaign-{campaign}" / f"trial-{number}" / f"fold-{fold}"
            self.writers[key] = SummaryWriter(log_dir=str(folder))
        return self.writers[key]

    def epoch(self, campaign: int, number: int, fold: int, epoch: int, metrics: dict[str, float]) -> None:
        """One epoch's metrics, each a scalar at step ``epoch``."""
        finite = {k: v for k, v in metrics.items() if math.isfinite(v)}
        if self.root is not None:
            try:
                writer = self._writer(campaign, number, fold)
                for name, value in finite.items():
                    writer.add_scalar(name, value, epoch)
                writer.flush()
            except Exception as exc:  # a full disk must not fail the trial
                log.warning("tensorboard: could not write epoch %d of fold %d: %s", epoch, fold, exc)
        if self.uses_mlflow:
            try:
                run = self._fold_run(campaign, number, fold)
                if run:
                    from mlflow.entities import Metric

                    now = int(time.time() * 1000)
                    batch = [Metric(k, v, now, epoch) for k, v in finite.items()]
                    self._mlflow(campaign)[0].log_batch(run, metrics=batch)
            except Exception as exc:
                log.warning("mlflow: could not log epoch %d of fold %d: %s", epoch, fold, exc)

    def fold_end(
        self,
        campaign: int,
        number: int,
        fold: int,
        params: dict[str, Any],
        metrics: dict[str, float],
        checkpoint: str = "",
    ) -> None:
        """A completed fold: the trial's parameters as TensorBoard hparams with the fold's
        final metrics; its MLflow run tagged with the checkpoint and FINISHED."""
        if self.root is not None:
            try:
                writer = self._writer(campaign, number, fold)
                hparams = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in params.items()}
                final = {f"hparam/{k}": v for k, v in metrics.items() if math.isfinite(v)}
                writer.add_hparams(hparams, final, run_name=".")
            except Exception as exc:
                log.warning("tensorboard: could not write the hparams of fold %d: %s", fold, exc)
        run = self.fold_runs.pop((campaign, number, fold), "")
        if run:
            try:
                client, _ = self._mlflow(campaign)
                if checkpoint:
                    client.set_tag(run, "hpcopt.checkpoint", checkpoint)
                client.set_terminated(run, "FINISHED")
            except Exception as exc:
                log.warning("mlflow: could not end fold %d's run: %s", fold, exc)
        self.close(campaign, number, fold)

    def close(self, campaign: int, number: int, fold: int) -> None:
        """The fold's end, whatever it was (a fold run still open was not completed)."""
        writer = self.writers.pop((campaign, number, fold), None)
        if writer is not None:
            try:
                writer.close()
            except Exception as exc:
                log.warning("tensorboard: could not close fold %d's writer: %s", fold, exc)
        run = self.fold_runs.pop((campaign, number, fold), "")
        if run:
            try:
                self._mlflow(campaign)[0].set_terminated(run, "KILLED")
            except Exception as exc:
                log.warning("mlflow: could not end fold %d's run: %s", fold, exc)


__all__ = ["Tracking", "check_mlflow", "check_tensorboard"]
