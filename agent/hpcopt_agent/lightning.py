"""A PyTorch Lightning callback for a script task (``pip install "hpcopt-agent[lightning]"``).

Inside a training script the agent starts (``training.task: {script: train.py}``)::

    from hpcopt_agent import trial
    from hpcopt_agent.lightning import HpcoptCallback

    hpcopt = HpcoptCallback()
    trainer = L.Trainer(max_epochs=trial.epochs, callbacks=[hpcopt], ...)
    trainer.fit(model, datamodule, ckpt_path=hpcopt.ckpt_path)

After each validation it reports the logged metrics (``trainer.callback_metrics``: log
the campaign's objective with ``self.log(..., sync_dist=True)``) through
:func:`hpcopt_agent.trial.report` and follows the answer: ``"prune"`` and ``"stop"``
(preempted, or the trial's epochs are done) stop the trainer. The fold's checkpoint
folder keeps ``last.ckpt``, which :attr:`HpcoptCallback.ckpt_path`
names on the next attempt. ``last.ckpt`` is saved after every validation, before the
report, so a job killed outright resumes from its last epoch too. Validate once per
epoch (the report is per epoch). Outside an agent it does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.callbacks import Callback
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        f'hpcopt_agent.lightning needs PyTorch Lightning: pip install "hpcopt-agent[lightning]" ({exc})'
    ) from None

from hpcopt_agent import trial

#: The checkpoint the callback keeps in the fold's folder.
LAST = "last.ckpt"


class HpcoptCallback(Callback):
    """Reports validation metrics, prunes and checkpoints for the agent."""

    def __init__(self) -> None:
        super().__init__()
        #: The agent's last answer ("continue", "prune" or "stop").
        self.answer = trial.CONTINUE

    @property
    def ckpt_path(self) -> str | None:
        """``last.ckpt`` of an earlier attempt of this fold, for ``Trainer.fit(ckpt_path=...)``."""
        if trial.resume_from is None:
            return None
        last = Path(trial.resume_from) / LAST
        return str(last) if last.is_file() else None

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or not trial.active:
            return
        metrics: dict[str, float] = {}
        for name, value in trainer.callback_metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError, RuntimeError):  # a tensor of several values
                continue
            metrics[name] = number  # a non-finite objective fails the fold, with the agent's message
        if trial.checkpoint_dir is not None:
            trainer.save_checkpoint(str(trial.checkpoint_dir / LAST))  # rank 0 writes; every rank calls
        self.answer = trial.report(trainer.current_epoch + 1, **metrics)
        if self.answer != trial.CONTINUE:
            trainer.should_stop = True

    def state_dict(self) -> dict[str, Any]:
        return {}


__all__ = ["LAST", "HpcoptCallback"]
