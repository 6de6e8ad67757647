"""The throughput benchmark still runs (a tiny configuration; numbers are not checked)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.env import ROOT, scaled


@pytest.mark.slow
def test_server_throughput_benchmark_runs_and_reports_no_errors() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/server_throughput.py"),
            "--agents",
            "2",
            "--seconds",
            "1",
            "--backends",
            "sqlite",
        ],
        capture_output=True,
        text=True,
        timeout=scaled(240),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    [row] = [line for line in out.stdout.splitlines() if line.startswith("hpcopt ")]
    cells = row.split("|")
    assert cells[0].split()[1:3] == ["sqlite", "2"], row
    assert float(cells[1]) > 0, row  # cycles per second
    assert cells[5].split() == ["0", "0"], row  # errors, duplicate acquisitions
    assert float(cells[6].split()[0]) > 0, row  # the Optuna peer ran too
