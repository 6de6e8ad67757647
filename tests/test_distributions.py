"""The three distributions as a user on a cluster gets them: built from this checkout,
installed as wheels into a fresh environment that already holds torch, which pip must
leave alone, then used (scripts/wheel_smoke.sh does it all and says what it checked)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.env import ROOT, scaled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_wheels_install_next_to_an_existing_torch_and_run_a_campaign(tmp_path: Path) -> None:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/wheel_smoke.sh"), str(tmp_path / "smoke")],
        capture_output=True,
        text=True,
        timeout=scaled(840),
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-8000:]
    for line in ("all ranges", "torch not among them", "hpcopt-agent 0.1.0", "(COMPLETED 2)", "ask/tell: best trial #"):
        assert line in text, text[-8000:]
    before = next(x for x in text.splitlines() if x.startswith("torch before:")).split(":", 1)[1]
    after = next(x for x in text.splitlines() if x.startswith("torch after:")).split(":", 1)[1]
    assert before.split() == after.split(), "pip touched the torch that was there"
