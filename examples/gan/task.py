"""A small GAN on a ring of eight 2-D Gaussians (generated, seeded: no download).

The figure of merit, ``sliced_w1``, is the sliced 1-Wasserstein distance between
generated and held-out real samples: the mean over 64 fixed directions of the distance
between the two projected distributions (0 when they match; lower is better). It sees
mode collapse (a generator covering 3 of 8 modes scores far worse than one covering
all) where the losses of the two networks say little.

Two networks, two optimizers and a custom ``train_step``: it trains under every scheme
(allreduce, downpour, EASGD, GEM); ``campaign.yaml`` beside this file runs it under
EASGD with a master and two workers per fold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm
from torch.utils.data import TensorDataset

from hpcopt_agent import Task

NOISE = 8


def ring(n: int, seed: int, modes: int = 8, radius: float = 2.0, spread: float = 0.05) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    angle = torch.randint(0, modes, (n,), generator=g).float() * (2 * math.pi / modes)
    centres = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 1)
    return centres + spread * torch.randn(n, 2, generator=g)


def sliced_w1(a: torch.Tensor, b: torch.Tensor, directions: int = 64) -> float:
    """Mean over fixed random directions of the 1-D Wasserstein-1 distance between the
    projections of ``a`` and ``b`` (equal sizes)."""
    g = torch.Generator().manual_seed(1234)
    d = F.normalize(torch.randn(a.shape[1], directions, generator=g), dim=0)
    pa, _ = torch.sort(a @ d, dim=0)
    pb, _ = torch.sort(b @ d, dim=0)
    return float((pa - pb).abs().mean().detach())


class RingGan(Task):
    def __init__(self) -> None:
        self.x = ring(8192, seed=0)

    def dataset(self) -> TensorDataset:
        return TensorDataset(self.x)

    def batch_size(self, params: dict[str, Any]) -> int:
        return int(params.get("batch_size", 64))

    def build(self, params: dict[str, Any]) -> dict[str, nn.Module]:
        w = int(params.get("width", 64))
        return {
            "generator": nn.Sequential(nn.Linear(NOISE, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 2)),
            # Spectral normalization keeps the critic Lipschitz: without it this GAN
            # oscillates instead of converging (its power-iteration vectors are
            # floating buffers, averaged over the workers at each epoch's end).
            "critic": nn.Sequential(
                spectral_norm(nn.Linear(2, w)),
                nn.LeakyReLU(0.2),
                spectral_norm(nn.Linear(w, w)),
                nn.LeakyReLU(0.2),
                spectral_norm(nn.Linear(w, 1)),
            ),
        }

    def optimizer(self, params: dict[str, Any], models: Any) -> dict[str, torch.optim.Optimizer]:
        return {
            "generator": torch.optim.Adam(models["generator"].parameters(), lr=float(params["lr_g"]), betas=(0.5, 0.9)),
            "critic": torch.optim.Adam(models["critic"].parameters(), lr=float(params["lr_d"]), betas=(0.5, 0.9)),
        }

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        real = batch[0]
        gen, critic = models["generator"], models["critic"]
        fake = gen(torch.randn(len(real), NOISE, device=real.device))
        ones, zeros = torch.ones(len(real), 1, device=real.device), torch.zeros(len(real), 1, device=real.device)
        # Critic: real and fake in one forward (one DDP forward per backward).
        logits = critic(torch.cat([real, fake.detach()]))
        optimizers["critic"].zero_grad(set_to_none=True)
        self.backward(F.binary_cross_entropy_with_logits(logits, torch.cat([ones, zeros])))
        optimizers["critic"].step()
        # Generator: make the critic call its samples real.
        optimizers["generator"].zero_grad(set_to_none=True)
        g_loss = F.binary_cross_entropy_with_logits(
            critic(gen(torch.randn(len(real), NOISE, device=real.device))), ones
        )
        self.backward(g_loss)  # loss.backward(), scaled under precision fp16
        optimizers["generator"].step()
        return float(g_loss.detach())

    def evaluate(self, models: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        real = torch.cat([b[0] for b in batches])
        g = torch.Generator().manual_seed(99)  # the same noise for every trial: comparable figures
        fake = models["generator"](torch.randn(len(real), NOISE, generator=g))
        return {"sliced_w1": sliced_w1(real, fake)}
