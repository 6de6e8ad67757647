"""Tasks for the agent tests: a small regression MLP on synthetic data.

Knobs (environment, inherited by every rank): ``HPCOPT_TEST_STEP_SLEEP`` seconds slept
per training step, to make epochs long enough to interrupt; ``HPCOPT_TEST_HOLD`` a file
path: while that file exists, training steps wait (a test holds trials in flight for as
long as it needs, whatever the machine's load); ``HPCOPT_TEST_DATA`` the folder where
:class:`FileRegression` keeps its samples as ``.npy`` shards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from hpcopt_agent import Task


class Regression(Task):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(240, 8, generator=g)
        w = torch.randn(8, 1, generator=g)
        self.y = self.x @ w + 0.1 * torch.randn(240, 1, generator=g)
        self.sleep = float(os.environ.get("HPCOPT_TEST_STEP_SLEEP", "0"))
        self.hold = os.environ.get("HPCOPT_TEST_HOLD")

    def dataset(self) -> TensorDataset:
        return TensorDataset(self.x, self.y)

    def build(self, params: dict[str, Any]) -> nn.Module:
        return nn.Sequential(
            nn.Linear(8, int(params.get("width", 16))), nn.Tanh(), nn.Linear(int(params.get("width", 16)), 1)
        )

    def optimizer(self, params: dict[str, Any], model: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=float(params["lr"]))

    def loss(self, output: torch.Tensor, batch: Any) -> torch.Tensor:
        # The step's sleep is here, so the task keeps the default train_step (which a
        # resumed fold's DDP is primed with: Scheme.prime).
        if self.sleep and torch.is_grad_enabled():
            time.sleep(self.sleep)
        while self.hold and torch.is_grad_enabled() and os.path.exists(self.hold):
            time.sleep(0.05)
        return F.mse_loss(output, batch[1])

    def evaluate(self, model: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        total, n = 0.0, 0
        for x, y in batches:
            total += float(F.mse_loss(model(x), y, reduction="sum"))
            n += len(y)
        return {"loss": total / n, "rmse": (total / n) ** 0.5}


class Normalised(Regression):
    """The regression through a BatchNorm layer: running statistics and a batch count."""

    def build(self, params: dict[str, Any]) -> nn.Module:
        return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1))


class FileRegression(Regression):
    """The same samples in 6 ``.npy`` shards of 40 (written by the first process that
    needs them), read through :class:`~hpcopt_agent.datasets.NpyDataset`: the loader's
    workers read them, and ``Task.groups()`` names each sample's shard. Markers in the
    data folder tell the tests which world ranks built the dataset (``built.R``) and
    whether processes other than a rank read it (``read.R.PID``: loader workers)."""

    def __init__(self) -> None:
        super().__init__()
        from hpcopt_agent.datasets import NpyDataset

        class Recording(NpyDataset):
            def __getitems__(self, indices: Any) -> Any:
                if os.getpid() != self.owner:
                    (folder / f"read.{self.rank}.{os.getpid()}").touch()
                return super().__getitems__(indices)

        self.Recording = Recording
        folder = self.folder = Path(os.environ["HPCOPT_TEST_DATA"])
        columns: list[list[Path]] = [[], []]
        for shard in range(6):
            for column, (name, values) in zip(columns, (("x", self.x), ("y", self.y)), strict=True):
                path = folder / f"{name}{shard}.npy"
                if not path.exists():
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    with open(tmp, "wb") as f:
                        np.save(f, values[shard * 40 : (shard + 1) * 40].numpy())
                    os.replace(tmp, path)
                column.append(path)
        self.columns = columns

    def dataset(self) -> Any:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.rank
        (self.folder / f"built.{rank}").touch()
        data = self.Recording(self.columns)
        data.owner, data.rank = os.getpid(), rank
        return data

    def groups(self) -> Any:
        return self.Recording(self.columns).groups()


class Exploding(Regression):
    """Raises while building the model when ``lr`` is above 0.1."""

    def build(self, params: dict[str, Any]) -> nn.Module:
        if float(params["lr"]) > 0.1:
            raise RuntimeError(f"boom: lr {params['lr']:.3g} is too large for this model")
        return super().build(params)


class NoDdp(Regression):
    """Trains on one rank per fold only: a step on a DDP-wrapped model raises (as a model
    with unused parameters, say, does under DistributedDataParallel)."""

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(models, DistributedDataParallel):
            raise RuntimeError("this model does not train under DistributedDataParallel")
        return super().train_step(models, optimizers, batch, params)


class SignalledAtFirstStep(Regression):
    """Each rank sends itself SIGTERM at its first training step (as Slurm's scancel
    would, early): in a job laying itself out, that step is the throughput probe's."""

    signalled = False

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        import os
        import signal

        if not SignalledAtFirstStep.signalled:
            SignalledAtFirstStep.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().train_step(models, optimizers, batch, params)


class Hanging(Regression):
    """World rank 1 stops answering at its first step, as user code stuck in I/O would."""

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_rank() == 1:
            time.sleep(3600)
        return super().train_step(models, optimizers, batch, params)


class TinyGan(Regression):
    """Two networks with their own optimizers and a custom step: a GAN that learns to
    produce samples like the regression inputs. The objective ``loss`` is the distance
    between the means and spreads of generated and real validation samples."""

    def build(self, params: dict[str, Any]) -> dict[str, nn.Module]:
        width = int(params.get("width", 16))
        return {
            "generator": nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 8)),
            "critic": nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1)),
        }

    def optimizer(self, params: dict[str, Any], models: Any) -> dict[str, torch.optim.Optimizer]:
        lr = float(params["lr"])
        return {name: torch.optim.Adam(m.parameters(), lr=lr, betas=(0.5, 0.9)) for name, m in models.items()}

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        real = batch[0]
        g, d = models["generator"], models["critic"]
        noise = torch.randn(len(real), 4)
        fake = g(noise)
        # Critic: one forward over real and fake together (one DDP forward per backward).
        logits = d(torch.cat([real, fake.detach()]))
        target = torch.cat([torch.ones(len(real), 1), torch.zeros(len(real), 1)])
        optimizers["critic"].zero_grad(set_to_none=True)
        d_loss = F.binary_cross_entropy_with_logits(logits, target)
        self.backward(d_loss)
        optimizers["critic"].step()
        # Generator: fool the critic.
        optimizers["generator"].zero_grad(set_to_none=True)
        g_loss = F.binary_cross_entropy_with_logits(d(g(noise)), torch.ones(len(real), 1))
        self.backward(g_loss)
        optimizers["generator"].step()
        return float(g_loss.detach())

    def evaluate(self, models: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        real = torch.cat([b[0] for b in batches])
        fake = models["generator"](torch.randn(len(real), 4))
        gap = (real.mean(0) - fake.mean(0)).abs().mean() + (real.std(0) - fake.std(0)).abs().mean()
        return {"loss": float(gap)}


class PlainBackward(Regression):
    """A train_step of its own that calls ``loss.backward()`` itself (fine in fp32 and
    bf16; under fp16 the agent asks for ``self.backward(loss)``)."""

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        optimizers.zero_grad(set_to_none=True)
        loss = self.loss(models(batch[0]), batch)
        loss.backward()
        optimizers.step()
        return float(loss.detach())


class Ballast(Regression):
    """The regression with ``ballast_mb`` MiB of memory held by the model while it
    trains (touched, so it is resident): what makes a configuration too large for its
    host. An absurd ballast fails to allocate, as a model too large for the host does."""

    def build(self, params: dict[str, Any]) -> nn.Module:
        model = super().build(params)
        ballast = torch.ones(int(float(params["ballast_mb"]) * 2**20) // 4)
        model.register_buffer("ballast", ballast, persistent=False)
        return model
