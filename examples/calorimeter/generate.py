"""Synthetic electromagnetic showers in a highly granular calorimeter, written as HDF5
shards: the data of ``examples/calorimeter`` (the CLIC 3DGAN study's setting: 25 x 25 x 25
cells of energy deposition per shower and its primary energy).

    python examples/calorimeter/generate.py --out showers --shards 8 --per-shard 128
    python examples/calorimeter/generate.py --out /scratch/showers --size-gb 40

Each shower is a sum of energy spots drawn from the usual parameterizations:

- **primary energy** E uniform in [--emin, --emax] GeV;
- **longitudinal profile** a gamma distribution in depth t (radiation lengths, one layer
  per X0): dE/dt ∝ (bt)^(a-1) e^(-bt), b = 0.5, with its maximum at
  t_max = ln(E / E_c) - 0.5 (E_c the critical energy), so showers deepen with log E;
- **transverse profile** a core plus a halo, f(r) ∝ r R² / (r² + R²)² for R_core and
  R_halo, both widening with depth; the shower axis enters near the face's centre;
- **sampling fluctuations**: the number of spots is Poisson with mean 30 per GeV, each
  spot carries the same visible energy, and the sampling fraction fluctuates by 1 % per
  shower, so the resolution follows sigma/E = 18 %/sqrt(E) (+) 1 % (in quadrature).

Files: ``showers_000.h5`` … with ``ecal`` (N, 25, 25, 25) float32, chunked one shower per
chunk (shuffled reads touch only their showers), and ``energy`` (N,) float32. Seeded:
the same arguments give the same files.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

CELLS = 25
CRITICAL_GEV = 0.0105  # critical energy of tungsten, GeV
SAMPLING = 0.02  # mean sampling fraction: visible / primary energy
SPOTS_PER_GEV = 30.0  # visible spots per GeV of primary energy: a stochastic term of 1/sqrt(30 E) = 18 %/sqrt(E)
SAMPLING_JITTER = 0.01  # per-shower relative spread of the sampling fraction (the constant term)


def shower(rng: np.random.Generator, energy: float) -> np.ndarray:
    """One shower's 25 x 25 x 25 visible energy (GeV) for a primary of ``energy`` GeV."""
    b = 0.5
    t_max = max(math.log(energy / CRITICAL_GEV) - 0.5, 1.0)
    a = 1.0 + b * t_max
    n = max(1, int(rng.poisson(energy * SPOTS_PER_GEV)))
    depth = rng.gamma(a, 1.0 / b, n)
    # Core and halo radii (in cells) widen with depth relative to the maximum.
    tau = depth / t_max
    r_core = 0.35 + 0.25 * tau
    r_halo = 1.2 + 0.6 * tau
    core = rng.random(n) < 0.85
    radius = np.where(core, r_core, r_halo)
    u = rng.random(n)
    r = radius * np.sqrt(u / (1.0 - u))  # inverse CDF of r R^2 / (r^2 + R^2)^2
    phi = rng.uniform(0.0, 2.0 * math.pi, n)
    x0, y0 = rng.normal(CELLS / 2, 0.4, 2)
    x, y = x0 + r * np.cos(phi), y0 + r * np.sin(phi)
    inside = (x >= 0) & (x < CELLS) & (y >= 0) & (y < CELLS) & (depth < CELLS)
    # Every spot carries the same visible energy: the Poisson count makes the stochastic term.
    visible = SAMPLING / SPOTS_PER_GEV * (1.0 + SAMPLING_JITTER * rng.standard_normal())
    grid = np.zeros((CELLS, CELLS, CELLS), dtype=np.float32)
    np.add.at(grid, (x[inside].astype(int), y[inside].astype(int), depth[inside].astype(int)), visible)
    return grid


def write(out: Path, shards: int, per_shard: int, emin: float, emax: float, seed: int) -> None:
    import h5py

    out.mkdir(parents=True, exist_ok=True)
    t0, total = time.monotonic(), shards * per_shard
    for s in range(shards):
        rng = np.random.default_rng([seed, s])
        energies = rng.uniform(emin, emax, per_shard).astype(np.float32)
        path = out / f"showers_{s:03d}.h5"
        tmp = path.with_suffix(".h5.tmp")
        with h5py.File(tmp, "w") as f:
            ecal = f.create_dataset(
                "ecal", (per_shard, CELLS, CELLS, CELLS), np.float32, chunks=(1, CELLS, CELLS, CELLS)
            )
            for i, e in enumerate(energies):
                ecal[i] = shower(rng, float(e))
            f.create_dataset("energy", data=energies)
            f.attrs.update(seed=seed, shard=s, emin=emin, emax=emax, sampling=SAMPLING)
        tmp.replace(path)
        done = (s + 1) * per_shard
        print(f"{path}: {per_shard} showers ({done}/{total}, {time.monotonic() - t0:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("showers"), help="the folder of the shards (default %(default)s)")
    ap.add_argument("--shards", type=int, default=8, help="files to write (default %(default)s)")
    ap.add_argument("--per-shard", type=int, help="showers per file (default 128; 8192, 512 MB files, with --size-gb)")
    ap.add_argument(
        "--size-gb",
        type=float,
        help="write about this many GB instead (sets --shards; 62.5 KB per shower): few large files, "
        "as every open file costs each reading process about 1 MB",
    )
    ap.add_argument("--emin", type=float, default=10.0, help="lowest primary energy, GeV (default %(default)s)")
    ap.add_argument("--emax", type=float, default=510.0, help="highest primary energy, GeV (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="the same seed writes the same files (default %(default)s)")
    args = ap.parse_args(argv)
    if args.per_shard is None:
        args.per_shard = 128 if args.size_gb is None else 8192
    if args.per_shard < 1 or args.shards < 1:
        ap.error("--shards and --per-shard must be at least 1")
    if not 0 < args.emin < args.emax:
        ap.error("need 0 < --emin < --emax")
    if args.size_gb is not None:
        args.shards = max(1, math.ceil(args.size_gb * 1e9 / (args.per_shard * CELLS**3 * 4)))
    write(args.out, args.shards, args.per_shard, args.emin, args.emax, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
