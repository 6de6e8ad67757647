"""The flagship example at its small size: showers generated into HDF5 shards, the
documented campaign file (trimmed to two short trials) trained by a 4-rank agent that
reads the shards through the input pipeline, folds over shards, and reports the
physics figures of merit."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.agents import AgentServer, dump, mpi_env, mpiexec_path, trial_json
from tests.helpers.env import ROOT, scaled

pytestmark = pytest.mark.mpi


def test_the_calorimeter_campaign_completes_at_four_ranks(agent_server: AgentServer, tmp_path: Path) -> None:
    data = tmp_path / "showers"
    gen = subprocess.run(
        [sys.executable, "examples/calorimeter/generate.py", "--out", str(data), "--shards", "8", "--per-shard", "16"],
        capture_output=True,
        text=True,
        timeout=scaled(300),
        cwd=ROOT,
        env=mpi_env(),
    )
    assert gen.returncode == 0, gen.stderr
    assert len(list(data.glob("showers_*.h5"))) == 8
    spec = yaml.safe_load((ROOT / "examples/calorimeter/campaign.yaml").read_text())
    spec["budget"] = {"max_trials": 2, "max_parallel": 2}
    spec["training"]["epochs"] = 1
    spec["space"]["width"] = {"type": "int", "low": 8, "high": 12}
    campaign = agent_server.submit(spec)
    result = agent_server.run_agent(4, campaign, timeout=scaled(900), CALO_DATA=str(data))
    assert result.returncode == 0, dump(result)
    trials = agent_server.client().list_trials(campaign)
    assert len(trials) == 2
    for trial in trials:
        state = trial_json(agent_server, trial.id)
        assert state["state"] == "COMPLETED", state
        for fold in state["folds"]:
            metrics = fold["metrics"]
            assert math.isfinite(metrics["physics_distance"]), metrics
            assert {"response_bin0_data", "resolution_bin0_gen", "depth_bin2_gen", "width_bin1_data"} <= set(metrics)


@pytest.mark.timeout(900)
def test_the_gpu_check_rehearses_on_cpus(tmp_path: Path) -> None:
    """scripts/gpu_check.sh runs on CPUs with --cpu: its server, campaigns (bf16, fp16)
    and checks work, so on a GPU machine only the GPU can fail."""
    mpiexec_path()
    out = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--cpu", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=scaled(600),
        cwd=ROOT,
        env=mpi_env(),
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "GPU CHECK OK" in out.stdout
    for precision in ("bf16", "fp16"):
        assert f"calorimeter campaign on 2 GPU rank(s), {precision}" in out.stdout
    assert len(re.findall(r"fold \d: physics_distance \d", out.stdout)) == 4, out.stdout
