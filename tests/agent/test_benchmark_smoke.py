"""The training benchmark still runs end to end (tiny data; its numbers are not checked
beyond being there)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers.agents import mpi_env, mpiexec_path
from tests.helpers.env import ROOT, scaled

pytestmark = pytest.mark.mpi


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_training_benchmark_runs_and_prints_both_tables() -> None:
    mpiexec_path()  # a skip or, under CI, a failure without MPI
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/training/run.py"), "--reps", "1", "--epochs", "2", "--small"],
        capture_output=True,
        text=True,
        timeout=scaled(380),
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"ratio hpcopt / plain DDP: \d\.\d{3}", out.stdout), out.stdout
    assert re.search(r"folds in parallel vs in turn with DDP on the same ranks: [\d.]+x", out.stdout), out.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_input_pipeline_benchmark_runs_and_prints_its_tables() -> None:
    mpiexec_path()
    out = subprocess.run(
        # One step kind keeps the smoke run short; the gan step is the same code path with another task step.
        [sys.executable, str(ROOT / "benchmarks/training/input_pipeline.py"), "--small", "--steps", "feed"],
        capture_output=True,
        text=True,
        timeout=scaled(580),
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for step in ("feed",):
        assert re.search(rf"ratio hpcopt / plain DDP \({step}\): \d+\.\d{{3}}", out.stdout), out.stdout
        assert re.search(rf"ratio hpcopt / item by item \({step}\): [\d.]+x", out.stdout), out.stdout
    assert re.search(r"memory growth 16x data / 1x: [\d.]+x", out.stdout), out.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_script_overhead_benchmark_runs_and_prints_its_ratios() -> None:
    mpiexec_path()
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/training/script_overhead.py"),
            *("--reps", "1", "--epochs", "2", "--small"),
        ],
        capture_output=True,
        text=True,
        timeout=scaled(380),
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"script / Task, per repetition: epoch \d\.\d{3} .* whole trial \d\.\d{3}", out.stdout), out.stdout


@pytest.mark.timeout(300)
def test_curvature_cost_benchmark_runs_and_prints_its_tables() -> None:
    # Without the peer's checkout: its rows say so, ours are measured.
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/curvature/cost.py"), "--reps", "1", "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=scaled(280),
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "(no --eigenthings)" in out.stdout and re.search(r"λ_1 +\d", out.stdout), out.stdout
    assert re.search(r"2 epochs x 1437 +[\d.]+ +64 ", out.stdout), out.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_compression_benchmark_runs_on_the_loopback_and_prints_its_table() -> None:
    mpiexec_path()
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/training/compression.py"),
            *("--rate", "loopback", "--reps", "1", "--epochs", "2", "--samples", "2048"),
            *("--target", "0", "--only", "bf16 hook,powersgd r2,daso bf16"),
        ],
        capture_output=True,
        text=True,
        timeout=scaled(380),
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for side in ("powersgd r2", "daso bf16"):
        assert re.search(rf"{side} +[\d.]+ \([\d.]+-[\d.]+\) +0\.\d{{3}}", out.stdout), out.stdout
    best = r"best PowerSGD \(powersgd r2\) vs the bf16 hook, time to target per rep: \d+\.\d\d"
    assert re.search(best, out.stdout), out.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_compression_search_runs_a_campaign_on_the_loopback_and_names_its_choice() -> None:
    mpiexec_path()
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/training/compression_search.py"),
            *("--rate", "loopback", "--seeds", "1", "--trials", "2", "--epochs", "1", "--samples", "2048"),
            *("--target", "0"),
        ],
        capture_output=True,
        text=True,
        timeout=scaled(380),
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # seed, the chosen exchange, its seconds, 2 trials, then the best per exchange (nan: not tried)
    assert re.search(r"\n +0 +(none|bf16|powersgd r[1-4]) +[\d.]+ +2 +", out.stdout), out.stdout
