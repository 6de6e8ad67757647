"""The throughput benchmark still runs (a tiny configuration; numbers are not checked)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_server_throughput_benchmark_runs_and_reports_no_errors() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/server_throughput.py"), "--agents", "2", "--seconds", "1",
         "--backends", "sqlite"],
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    [row] = [line for line in out.stdout.splitlines() if line.startswith("sqlite ")]
    cells = row.split("|")
    ours = cells[1].split()
    assert float(ours[0]) > 0 and ours[3] == "0" and ours[4] == "0", row  # cycles, errors, duplicates
    assert float(cells[2].split()[0]) > 0, row  # the Optuna peer ran too
