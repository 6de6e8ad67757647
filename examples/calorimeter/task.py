"""A conditional 3-D convolutional GAN for calorimeter showers (after the CLIC 3DGAN):
the generator draws a 25 x 25 x 25 shower for a primary energy, the discriminator tells
real from generated and regresses the primary energy (an auxiliary task that makes the
generator respect the energy). Showers come from HDF5 shards (``generate.py``) through
the agent's input pipeline, and the folds are over shards (``folds_by: group``).

The data folder is ``$CALO_DATA`` (default ``showers`` in the agent's directory).

Figures of merit (``evaluate``), per primary-energy bin, generated against the
validation showers of the same energies:

- energy response (visible / primary energy) and resolution (its relative spread);
- shower shapes: the mean depth (longitudinal first moment, in layers) and the
  transverse width (second moment across the axis, in cells).

``physics_distance``, the campaign's objective, is the mean over the four figures and
the bins of the symmetric relative difference |gen - data| / (|gen| + |data|): 0 when
the generator reproduces the data's physics, at most 1 per figure, so no one figure
(a resolution 20 times too wide, early on) drowns the others. Each rank
computes it on its share of the validation showers and the fold leader averages the
shares by their sizes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hpcopt_agent import Task
from hpcopt_agent.datasets import H5Dataset

CELLS = 25
SAMPLING = 0.02  # the generator's mean sampling fraction: visible energy per GeV
E_SCALE = 500.0  # primary energies are given to the networks as E / E_SCALE
BINS = (10.0, 110.0, 260.0, 510.0)  # primary-energy bins of the figures of merit, GeV


def normalized(ecal: torch.Tensor, energy: torch.Tensor) -> torch.Tensor:
    """Cell energies as fractions of the expected visible energy (about 1 in all)."""
    return (ecal / (SAMPLING * energy).view(-1, 1, 1, 1)).unsqueeze(1) * 100.0


class Generator(nn.Module):
    def __init__(self, latent: int, width: int) -> None:
        super().__init__()
        self.latent = latent
        self.fc = nn.Linear(latent + 1, width * 5 * 5 * 5)
        self.width = width
        self.net = nn.Sequential(
            nn.Upsample(scale_factor=5, mode="nearest"),
            nn.Conv3d(width, width // 2, 3, padding=1),
            nn.LeakyReLU(0.2),
            nn.Conv3d(width // 2, width // 2, 3, padding=1),
            nn.LeakyReLU(0.2),
            nn.Conv3d(width // 2, 1, 3, padding=1),
            nn.Softplus(),
        )

    def forward(self, z: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = self.fc(torch.cat([z, e.view(-1, 1) / E_SCALE], dim=1)).view(-1, self.width, 5, 5, 5)
        # Softplus starts near 0.7 per cell: scaled, a first shower's total is about 1 (of 100).
        out: torch.Tensor = self.net(F.leaky_relu(h, 0.2))
        return out * (100.0 / CELLS**3)


class Discriminator(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv3d(1, width // 2, 4, stride=2, padding=1),  # 12^3
            nn.LeakyReLU(0.2),
            nn.Conv3d(width // 2, width, 3, stride=2, padding=1),  # 6^3
            nn.LeakyReLU(0.2),
            nn.AdaptiveAvgPool3d(3),
            nn.Flatten(),
        )
        self.real = nn.Linear(width * 27 + 1, 1)  # real or generated, given the energy
        self.energy = nn.Linear(width * 27, 1)  # the primary energy (auxiliary regression)

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.net(x)
        return self.real(torch.cat([h, e.view(-1, 1) / E_SCALE], dim=1)), self.energy(h).squeeze(1)


class CalorimeterGan(Task):
    def __init__(self) -> None:
        folder = Path(os.environ.get("CALO_DATA", "showers"))
        files = sorted(folder.glob("showers_*.h5"))
        if not files:
            raise FileNotFoundError(
                f"no showers_*.h5 in {folder.resolve()}: run examples/calorimeter/generate.py --out {folder} "
                "(or set CALO_DATA)"
            )
        self.data = H5Dataset(files, ["ecal", "energy"])

    def dataset(self) -> H5Dataset:
        return self.data

    def groups(self) -> Any:
        return self.data.groups()  # a shard (one simulation job) never spans two folds

    def build(self, params: dict[str, Any]) -> dict[str, nn.Module]:
        width = int(params.get("width", 16))
        return {"generator": Generator(int(params.get("latent", 32)), width), "discriminator": Discriminator(width)}

    def optimizer(self, params: dict[str, Any], models: Any) -> dict[str, torch.optim.Optimizer]:
        betas = (0.5, 0.999)
        return {
            "generator": torch.optim.Adam(models["generator"].parameters(), lr=float(params["lr_g"]), betas=betas),
            "discriminator": torch.optim.Adam(
                models["discriminator"].parameters(), lr=float(params["lr_d"]), betas=betas
            ),
        }

    def batch_size(self, params: dict[str, Any]) -> int:
        return int(params.get("batch_size", 32))

    def train_step(self, models: Any, optimizers: Any, batch: Any, params: dict[str, Any]) -> float:
        ecal, energy = batch[0].float(), batch[1].float()
        real = normalized(ecal, energy)
        gen, disc = models["generator"], models["discriminator"]
        n, aux = len(real), float(params.get("aux_weight", 0.5))
        z = torch.randn(n, int(params.get("latent", 32)), device=real.device)
        fake = gen(z, energy)
        ones, zeros = torch.ones(n, 1, device=real.device), torch.zeros(n, 1, device=real.device)
        # Discriminator: real and generated in one forward (one DDP forward per backward).
        logits, e_pred = disc(torch.cat([real, fake.detach()]), torch.cat([energy, energy]))
        e_true = torch.cat([energy, energy]) / E_SCALE
        d_loss = F.binary_cross_entropy_with_logits(logits, torch.cat([ones, zeros])) + aux * F.mse_loss(
            e_pred.float(), e_true
        )
        optimizers["discriminator"].zero_grad(set_to_none=True)
        self.backward(d_loss)
        optimizers["discriminator"].step()
        # Generator: showers the discriminator calls real, of the right energy and total.
        logits, e_pred = disc(fake, energy)
        total = fake.sum(dim=(1, 2, 3, 4)) / 100.0  # about 1 for a shower without leakage
        g_loss = (
            F.binary_cross_entropy_with_logits(logits, ones)
            + aux * F.mse_loss(e_pred.float(), energy / E_SCALE)
            + aux * F.mse_loss(total.float(), real.sum(dim=(1, 2, 3, 4)) / 100.0)
        )
        optimizers["generator"].zero_grad(set_to_none=True)
        self.backward(g_loss)
        optimizers["generator"].step()
        return float(g_loss.detach())

    def evaluate(self, models: Any, batches: Iterable[Any], params: dict[str, Any]) -> dict[str, float]:
        gen = models["generator"]
        sums: dict[str, Any] = {}
        for ecal, energy in batches:
            ecal, energy = ecal.float(), energy.float()
            z = torch.randn(len(energy), gen.latent, device=energy.device)
            fake = gen(z, energy).squeeze(1).float() / 100.0 * (SAMPLING * energy).view(-1, 1, 1, 1)
            for name, showers in (("data", ecal), ("gen", fake)):
                for key, value in figures(showers, energy).items():
                    sums[f"{key}_{name}"] = sums.get(f"{key}_{name}", 0) + value
        out: dict[str, float] = {}
        distances = []
        for b in range(len(BINS) - 1):
            n = float(sums[f"n{b}_data"])
            if n < 2:
                continue
            row = {}
            for s in ("data", "gen"):
                r, r2 = float(sums[f"r{b}_{s}"]) / n, float(sums[f"r2{b}_{s}"]) / n
                row[s] = {
                    "response": r,
                    "resolution": max(r2 - r * r, 0.0) ** 0.5 / max(r, 1e-12),
                    "depth": float(sums[f"depth{b}_{s}"]) / n,
                    "width": float(sums[f"width{b}_{s}"]) / n,
                }
            for k in ("response", "resolution", "depth", "width"):
                out[f"{k}_bin{b}_data"] = row["data"][k]
                out[f"{k}_bin{b}_gen"] = row["gen"][k]
                g, d = row["gen"][k], row["data"][k]
                distances.append(abs(g - d) / max(abs(g) + abs(d), 1e-12))
        out["physics_distance"] = sum(distances) / len(distances) if distances else float("nan")
        return out


def figures(showers: torch.Tensor, energy: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sums over the showers of each energy bin: count, response and its square, mean
    depth and transverse width (the evaluation divides by the count)."""
    cells = torch.arange(CELLS, dtype=torch.float32, device=showers.device)
    total = showers.sum(dim=(1, 2, 3)).clamp_min(1e-12)
    depth = (showers.sum(dim=(1, 2)) * cells).sum(dim=1) / total
    x_profile = showers.sum(dim=(2, 3))
    x_mean = (x_profile * cells).sum(dim=1) / total
    width = ((x_profile * (cells.view(1, -1) - x_mean.view(-1, 1)) ** 2).sum(dim=1) / total).sqrt()
    response = total / energy
    out = {}
    for b in range(len(BINS) - 1):
        m = (energy >= BINS[b]) & (energy < BINS[b + 1])
        out[f"n{b}"] = m.sum()
        out[f"r{b}"] = response[m].sum()
        out[f"r2{b}"] = (response[m] ** 2).sum()
        out[f"depth{b}"] = depth[m].sum()
        out[f"width{b}"] = width[m].sum()
    return out
