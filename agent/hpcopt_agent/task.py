"""The task: what a user writes so that the agent can train and evaluate a trial.

A task is a subclass of :class:`Task` in plain PyTorch::

    class Digits(Task):
        def dataset(self):                       # the data to cross-validate on
            return TensorDataset(x, y)
        def build(self, params):                 # a model (or a dict of them) from the params
            return nn.Sequential(...)
        def optimizer(self, params, model):      # its optimizer (or a dict, keyed like build's)
            return torch.optim.AdamW(model.parameters(), lr=params["lr"])
        def loss(self, output, batch):           # used by the default training step
            return F.cross_entropy(output, batch[1])
        def evaluate(self, model, batches, params):   # means over the samples given
            ...
            return {"val_loss": ..., "val_accuracy": ...}

The campaign names it in ``training.task`` as ``path/to/file.py:Digits`` or
``package.module:Digits`` (a class, an instance, or a function returning one), and the
agent runs it only if its owner allows it (``trust.py``: ``--task-root``,
``--allow-module``).

Several networks (a GAN's generator and discriminator) are a dict from ``build`` and a
dict from ``optimizer``; override :meth:`Task.train_step`, which receives both dicts
(models wrapped by the parallelism scheme) and one batch.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from hpcopt.core.taskref import parse_task_ref
from hpcopt_agent.trust import TaskPolicy

Params = dict[str, Any]
Models = nn.Module | Mapping[str, nn.Module]
Optimizers = torch.optim.Optimizer | Mapping[str, torch.optim.Optimizer]
Batch = Any


class Task:
    """Override ``dataset``, ``build``, ``optimizer``, ``loss`` and ``evaluate``;
    ``labels``, ``groups``, ``batch_size`` and ``train_step`` have defaults."""

    def dataset(self) -> Dataset[Any]:
        """The whole dataset the K folds are drawn from, built once per process that
        reads samples (a parameter server's master never does). Data larger than
        memory: a file-backed dataset (:mod:`hpcopt_agent.datasets`) that reads
        samples when asked."""
        raise NotImplementedError("Task.dataset() must return the dataset to cross-validate on")

    def labels(self) -> Sequence[int] | None:
        """Class labels per sample, for ``training.options.stratified: true``."""
        return None

    def groups(self) -> Sequence[Any] | None:
        """A group per sample (the file, run or simulation job it comes from), for
        ``training.options.folds_by: group``: a group is never split over two folds."""
        return None

    def build(self, params: Params) -> Models:
        """A fresh model (or a dict of named models) for these params."""
        raise NotImplementedError("Task.build(params) must return a torch.nn.Module or a dict of them")

    def optimizer(self, params: Params, models: Models) -> Optimizers:
        """The optimizer(s) of the models ``build`` returned (a dict keyed like them)."""
        raise NotImplementedError("Task.optimizer(params, models) must return a torch optimizer or a dict of them")

    def loss(self, output: Any, batch: Batch) -> torch.Tensor:
        """The training loss of one batch, used by the default :meth:`train_step`."""
        raise NotImplementedError("Task.loss(output, batch) is needed by the default train_step")

    def evaluate(self, models: Models, batches: Iterable[Batch], params: Params) -> dict[str, float]:
        """Metrics on validation batches, each a mean over the samples given; one of them
        must be the campaign's objective metric. Runs under ``torch.no_grad()`` with the
        models in eval mode."""
        raise NotImplementedError("Task.evaluate(models, batches, params) must return a dict of metrics")

    def batch_size(self, params: Params) -> int:
        """The global batch size of one fold (split over its ranks); ``params["batch_size"]``
        when the space has one, else 64."""
        return int(params.get("batch_size", 64))

    def train_step(self, models: Models, optimizers: Optimizers, batch: Batch, params: Params) -> float:
        """One optimization step; returns the batch's loss. The default handles a single
        model: ``inputs = batch[0]``, forward, :meth:`loss`, backward, step."""
        if not isinstance(models, nn.Module) or not isinstance(optimizers, torch.optim.Optimizer):
            raise TypeError("the default train_step handles one model and one optimizer; override train_step")
        optimizers.zero_grad(set_to_none=True)
        loss = self.loss(models(batch[0]), batch)
        self.backward(loss)
        optimizers.step()
        return float(loss.detach())

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, with the loss scaled when the campaign trains in fp16
        (``training.options.precision``): a ``train_step`` of your own calls this."""
        from hpcopt_agent.precision import backward

        backward(loss)

    def stages(self, params: Params, model: nn.Module, n: int) -> list[nn.Module]:
        """The model cut into ``n`` contiguous pipeline stages for ``scheme: pipeline``,
        sharing the model's parameters: stage k's output is stage k + 1's input, the last
        stage's output goes to :meth:`loss`. The default cuts an ``nn.Sequential`` into
        runs of layers with about equal parameter counts; override it for other models."""
        return split_sequential(model, n)


def split_sequential(model: nn.Module, n: int) -> list[nn.Module]:
    """``model``'s layers in ``n`` contiguous ``nn.Sequential`` runs, each with about
    1/n of the parameters (and at least one layer)."""
    if not isinstance(model, nn.Sequential):
        raise TypeError(
            f"scheme pipeline: the model is a {type(model).__name__}, not an nn.Sequential; override "
            "Task.stages(params, model, n) to cut it into n stages"
        )
    layers = list(model)
    if len(layers) < n:
        raise ValueError(f"scheme pipeline: {n} stages need at least {n} layers; the nn.Sequential has {len(layers)}")
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    count = len(layers)
    # best[k][i]: the smallest largest stage for layers[:i] in k stages (linear partition).
    inf = float("inf")
    best = [[inf] * (count + 1) for _ in range(n + 1)]
    cut = [[0] * (count + 1) for _ in range(n + 1)]
    best[0][0] = 0
    for k in range(1, n + 1):
        for i in range(k, count + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    cuts, i = [count], count
    for k in range(n, 0, -1):
        i = cut[k][i]
        cuts.append(i)
    cuts.reverse()
    return [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(cuts)]


class TaskError(ValueError):
    """A task reference that cannot be loaded, with the reason."""


def load_task(ref: str, policy: TaskPolicy | None = None) -> Task:
    """Loads ``path/to/file.py:Attr`` or ``package.module:Attr``. ``Attr`` is a Task
    subclass, an instance, or a function defined in that module that returns one.

    With ``policy`` (a campaign's task), the reference must be one the agent's owner
    allows (``trust.py``; TaskRefused says why) and a relative file is read from its task
    root. Without (the owner's own ``--task``), a relative file is read from the working
    directory and any module may be imported."""
    try:
        parsed = parse_task_ref(ref)
    except ValueError as exc:
        raise TaskError(f"training.task {ref!r}: {exc}") from None
    if parsed.file is not None:
        path = policy.file(parsed) if policy is not None else Path.cwd() / parsed.file
        if not path.is_file():
            raise TaskError(f"training.task: no file {path}")
        name = f"hpcopt_task_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TaskError(f"training.task: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module_name = policy.module(parsed) if policy is not None else str(parsed.module)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise TaskError(f"training.task: cannot import module {module_name!r}: {exc}") from exc
    attr = parsed.name
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise TaskError(f"training.task: {parsed.file or parsed.module} has no attribute {attr!r}") from None
    if (isinstance(obj, type) and issubclass(obj, Task)) or (
        inspect.isfunction(obj) and obj.__module__ == module.__name__
    ):
        task = obj()
    else:
        task = obj
    if not isinstance(task, Task):
        raise TaskError(
            f"training.task: {ref} gave a {type(task).__name__}, not an hpcopt_agent.Task (a Task subclass, an "
            "instance, or a function defined in that module returning one)"
        )
    return task


def as_dict(items: Any) -> dict[str, Any]:
    """A task's single model or optimizer as ``{"model": x}``; a dict as itself."""
    return dict(items) if isinstance(items, Mapping) else {"model": items}


def as_user(items: Mapping[str, Any], single: bool) -> Any:
    """The shape the task used: its single object back, or the dict."""
    return items["model"] if single else dict(items)
