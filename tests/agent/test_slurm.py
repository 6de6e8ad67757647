"""The sbatch examples on a real one-node Slurm cluster (slurmctld, slurmd and munge
from Debian; ``scripts/test.sh`` starts it when run as root)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.agents import AgentServer, agent_spec, mpi_env, trial_json, wait_for
from tests.helpers.env import IN_CI, ROOT, scaled, timeout_scale

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def slurm() -> None:
    problem = ""
    if shutil.which("sbatch") is None:
        problem = "Slurm is not installed (scripts/slurm/start.sh installs and starts it as root)"
    else:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=scaled(30))
        if not any(s.strip().rstrip("*") in ("idle", "mix", "alloc") for s in out.stdout.split()):
            problem = f"the Slurm cluster is not up (sinfo: {out.stdout.strip() or out.stderr.strip()})"
    if problem:
        if IN_CI:
            pytest.fail(problem + " (CI=true: the Slurm tests must run, not skip)")
        pytest.skip(problem)


def sbatch(
    server: AgentServer, script: str, campaign: int, *args: str, ntasks: int | None = None, time: str = "10", **env: str
) -> int:
    """Submits an example script; without ``ntasks`` it asks for what the script says;
    ``time`` is the walltime (Slurm's minutes, or its other forms)."""
    shape = ["-N", "1", "-n", str(ntasks), f"--ntasks-per-node={ntasks}"] if ntasks else []
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--export=ALL",
            *shape,
            f"--time={time}",
            "-o",
            str(server.workdir / "slurm-%j.out"),
            f"examples/slurm/{script}",
            str(campaign),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=mpi_env(
            HPCOPT_SERVER=server.target,
            HPCOPT_PYTHON=sys.executable,
            HPCOPT_CHECKPOINT_DIR=str(server.workdir / "ckpt"),
            **env,
        ),
    )
    assert out.returncode == 0, f"sbatch failed: {out.stderr}"
    return int(out.stdout.strip().split(";")[0])


def job_state(job: int) -> str:
    out = subprocess.run(["scontrol", "show", "job", str(job)], capture_output=True, text=True, timeout=scaled(30))
    for word in out.stdout.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return "GONE"


def wait_job(job: int, timeout: float = scaled(240)) -> str:
    wait_for(lambda: job_state(job) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"), timeout, f"job {job}")
    return job_state(job)


def output(server: AgentServer, job: int) -> str:
    path = Path(server.workdir / f"slurm-{job}.out")
    return path.read_text() if path.exists() else "(no output file)"


def test_the_sbatch_examples_complete_a_campaign(slurm: None, agent_server: AgentServer) -> None:
    # agent.sbatch as the README submits it (its own 4 tasks: 4 folds at once, srun --mpi=pmi2
    # with the mpich wheel; Open MPI's wheel under --mpi=pmix failed to start 4 tasks here),
    # and agent-groups.sbatch on one node's 4 tasks as 2 trial groups.
    campaign = agent_server.submit(agent_spec(budget={"max_trials": 6, "max_parallel": 4}, folds=4))
    one = sbatch(agent_server, "agent.sbatch", campaign)
    two = sbatch(agent_server, "agent-groups.sbatch", campaign, ntasks=4, HPCOPT_GROUPS="2")
    for job in (one, two):
        assert wait_job(job) == "COMPLETED", output(agent_server, job)
    with agent_server.client() as c:
        assert c.get_campaign(campaign).trial_counts == {"COMPLETED": 6}
    both = output(agent_server, one) + output(agent_server, two)
    assert "stopping after" in both and "the campaign is finished" in both, both
    # The agents registered with their Slurm job ids.
    with urllib.request.urlopen(f"{agent_server.url}/api/v1/campaigns/{campaign}/agents", timeout=scaled(10)) as r:
        jobs = {a["slurm_job_id"] for a in json.loads(r.read())}
    assert {str(one), str(two)} <= jobs, jobs


def test_the_walltime_signal_preempts_and_the_job_exits_cleanly(slurm: None, agent_server: AgentServer) -> None:
    spec = agent_spec(
        budget={"max_trials": 1, "max_parallel": 1}, training={"task": "tests/agent/tasks.py:Regression", "epochs": 8}
    )
    campaign = agent_server.submit(spec)
    job = sbatch(agent_server, "agent.sbatch", campaign, "--groups", "2", HPCOPT_TEST_STEP_SLEEP="0.03")

    def running_trial() -> int | None:
        trials = agent_server.client().list_trials(campaign)
        return trials[0].id if trials and len(trial_json(agent_server, trials[0].id)["curves"]) >= 2 else None

    trial = wait_for(running_trial, scaled(120), "two epochs reported")
    # What --signal=B:USR1@120 does near the walltime: signal the batch script only.
    subprocess.run(["scancel", "--batch", "--signal=USR1", str(job)], check=True)
    assert wait_job(job) == "COMPLETED", output(agent_server, job)
    text = output(agent_server, job)
    # Ten minutes of walltime were left: the script says the signal came by hand.
    assert "SIGUSR1 sent by hand" in text and "walltime near" not in text, text
    assert "SIGUSR1 received" in text and "PREEMPTED" in text, text
    state = trial_json(agent_server, trial)
    assert state["state"] == "QUEUED" and state["attempt"] == 2, state
    assert any(f["checkpoint_uri"] for f in state["folds"] if not f["finished"]), state["folds"]


def test_a_request_the_cluster_can_never_run_is_refused_at_submission(slurm: None, tmp_path: Path) -> None:
    # The test cluster declares 4 CPUs and EnforcePartLimits=ALL: without it the job
    # would stay PENDING (reason PartitionConfig) forever, saying nothing.
    out = subprocess.run(
        ["sbatch", "-n", "64", "-o", str(tmp_path / "x-%j.out"), "examples/slurm/agent.sbatch", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=scaled(30),
        env=mpi_env(HPCOPT_SERVER="127.0.0.1:1"),
    )
    assert out.returncode != 0 and "More processors requested than permitted" in out.stderr, out


def test_a_short_walltime_stops_trials_in_time_and_the_job_ends_before_it(
    slurm: None, agent_server: AgentServer
) -> None:
    # A 6-minute job whose last minutes are the agent's reserve (the script's own USR1
    # comes 120 s before the end, later): the agent plans from a probe, starts trials
    # while one is predicted to reach a checkpoint before the reserve, then checkpoints
    # what runs and gives it back; neither the script's signal nor Slurm has to stop it.
    spec = agent_spec(
        budget={"max_trials": 200, "max_parallel": 4}, training={"task": "tests/agent/tasks.py:Regression", "epochs": 4}
    )
    campaign = agent_server.submit(spec)
    # The agent works until the reserve, so the window before it is what the test costs:
    # 50 s on a quiet machine. On a loaded one the job's start (srun, imports, the probe)
    # ate 50 s and no trial could start (the suite under a make demo loop, load 3.6 per
    # core): the window stretches with the load, up to the 170 s that held there.
    minutes = 6
    window = min(50 * timeout_scale(), 170)
    reserve = round(60 * minutes - window)
    job = sbatch(
        agent_server,
        "agent.sbatch",
        campaign,
        "--reserve",
        str(reserve),
        time=str(minutes),
        HPCOPT_TEST_STEP_SLEEP="0.3",
    )
    assert wait_job(job, timeout=scaled(60) * minutes + 120) == "COMPLETED", output(agent_server, job)  # not TIMEOUT
    text = output(agent_server, job)
    assert "probing" in text and "planner:" in text, text
    stops = re.findall(r"stopping after \d+ trial\(s\): (.*)", text)
    assert stops and all("(--reserve)" in s or "predicted to take" in s for s in stops), text
    assert "SIGUSR1" not in text, text
    with agent_server.client() as c:
        trials = c.list_trials(campaign)
    assert trials and len(trials) < 200, f"{len(trials)} trials: the walltime stopped nothing or all\n{text}"
    # Nothing is left running: every trial finished, or went back with a checkpoint.
    for t in trials:
        state = trial_json(agent_server, t.id)
        assert state["state"] in ("COMPLETED", "QUEUED"), state
        if state["state"] == "QUEUED":
            assert state["attempt"] == 2 and any(f["checkpoint_uri"] for f in state["folds"]), state
