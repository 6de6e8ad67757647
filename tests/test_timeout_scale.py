"""Per-test time limits scale with the machine's load (``conftest.timeout_scale``): a
limit guards against a hang; it must not fail a correct test on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.env import ROOT


@pytest.mark.skipif(os.environ.get("HPCOPT_TIMEOUT_PROBE") != "1", reason="run by the test below only")
@pytest.mark.timeout(1)
def test_probe_that_takes_two_seconds(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    Path(os.environ["HPCOPT_TIMEOUT_PROBE_OUT"]).write_text(str(marker.args[0]))  # the limit it runs under
    time.sleep(2)


@pytest.mark.parametrize(
    ("scale", "late", "passes"),
    [("1", False, False), ("4", False, True), ("1", True, True)],
    ids=["1", "4", "late load"],
)
def test_a_limit_is_stretched_by_the_scale(scale: str, late: bool, passes: bool, tmp_path: Path) -> None:
    """``late load``: the machine gets busy after collection (tests/helpers/late_load.py):
    the limit is stretched again as the test starts."""
    said = tmp_path / "limit"
    env = {**os.environ, "HPCOPT_TIMEOUT_PROBE": "1", "HPCOPT_TEST_TIMEOUT_SCALE": scale}
    env["HPCOPT_TIMEOUT_PROBE_OUT"] = str(said)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider"]
    if late:
        cmd += ["-p", "tests.helpers.late_load"]
    cmd += [f"{__file__}::test_probe_that_takes_two_seconds"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    limit = float(said.read_text())
    assert limit >= float(scale), f"the probe ran under {limit} s, not at least {scale} x 1 s"
    if not passes and limit >= 2:  # the load when the probe started stretched the limit by itself
        pytest.skip(f"the machine's load stretched the 1 s limit to {limit:.1f} s")
    assert (out.returncode == 0) is passes, out.stdout[-2000:]
