"""The slow-link harness the training benchmarks run on (benchmarks/training/netns.py):
"nodes" as network namespaces whose traffic between them crosses a rate-limited link,
MPI and gloo across it, and nothing left behind. The benchmarks themselves stay out of
the suite's time (``benchmarks/training/slow_link.py`` runs on this harness)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.helpers.agents import mpi_env, mpiexec_path
from tests.helpers.env import IN_CI, ROOT, scaled
from tests.helpers.netlock import network_lock

sys.path.insert(0, str(ROOT / "benchmarks/training"))
from netns import SlowLink, cleanup

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _no_open_pages() -> Iterator[None]:
    with network_lock(exclusive=True):
        yield


def _require_root() -> None:
    missing = "root" if os.geteuid() != 0 else ", ".join(c for c in ("ip", "tc", "unshare") if not shutil.which(c))
    if missing:
        message = f"the slow-link harness needs root and iproute2 (ip netns, tc); missing: {missing}"
        if IN_CI:
            pytest.fail(message + " (CI=true: the harness tests must run, not skip)")
        pytest.skip(message)


def _ours() -> tuple[list[str], str]:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^hpcopt-n\d+", namespaces, re.M), " ".join(re.findall(r"hpcopt-\w+", links))


def test_ranks_on_two_emulated_nodes_talk_mpi_and_gloo_across_the_rate_limited_link() -> None:
    _require_root()
    mpiexec = mpiexec_path()
    # A leftover of a killed run (same names) is cleared by the next harness.
    subprocess.run(["ip", "netns", "add", "hpcopt-n7"], check=True)
    with SlowLink(nodes=2, rate="100mbit") as link:
        assert sorted(_ours()[0]) == ["hpcopt-n0", "hpcopt-n1"]  # n7 is gone
        before = link.sent_bytes()
        out = subprocess.run(
            [mpiexec, "-n", "4", *link.launcher(per_node=2), sys.executable, "tests/agent/link_check.py"],
            capture_output=True,
            text=True,
            timeout=scaled(240),
            cwd=ROOT,
            env=link.rank_env(mpi_env()),
        )
        assert out.returncode == 0, out.stderr[-3000:]
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        sent = [a - b for a, b in zip(link.sent_bytes(), before, strict=True)]
    assert [host for host, _, _ in rows] == ["hpcopt-n0", "hpcopt-n0", "hpcopt-n1", "hpcopt-n1"], rows
    assert all(mpi == 10.0 and gloo == 10.0 for _, mpi, gloo in rows), rows  # 1 + 2 + 3 + 4
    # Each node sent at least its share of both 2 MB allreduces over the link (not shared memory).
    assert all(s > 2_000_000 for s in sent), sent
    assert _ours() == ([], ""), "the harness left namespaces or links behind"


def test_the_harness_cleans_up_after_an_error_inside_it() -> None:
    _require_root()
    with pytest.raises(RuntimeError, match="inside"), SlowLink(nodes=3, rate="1gbit"):
        assert len(_ours()[0]) == 3
        raise RuntimeError("inside")
    assert _ours() == ([], "")
    cleanup()  # idempotent
