"""Running the real agent: mpiexec, a server process on SQLite, and the processes a
test kills and waits on."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.env import IN_CI, ROOT, require_marker, scaled, timeout_scale
from tests.helpers.specs import make_spec

BIN = Path(sys.executable).parent


def mpiexec_path() -> str:
    require_marker("mpi")
    found = shutil.which("mpiexec", path=str(BIN)) or shutil.which("mpiexec")
    if found is None:
        message = "mpiexec is not installed (pip install mpich, or the system's MPI)"
        if IN_CI:
            pytest.fail(message + " (CI=true: the MPI tests must run, not skip)")
        pytest.skip(message)
    return found


def _horovod_build_running() -> bool:
    """Whether the test command's background build of Horovod is still going."""
    pid_file = ROOT / ".venv/horovod-build.pid"
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def require_horovod() -> None:
    """Horovod must import (the test command builds it once per machine, cached outside
    the tree; a first build runs in the background, which this waits for, up to 20
    minutes): a skip locally without it, a failure under CI=true."""
    deadline = time.monotonic() + scaled(1200)
    while _horovod_build_running() and time.monotonic() < deadline:
        time.sleep(5)
    # In a fresh interpreter: once anything in this process has loaded mpi4py, libmpi is
    # mapped and an extension that cannot find it on its own would import here anyway.
    probe = subprocess.run(
        [sys.executable, "-c", "import horovod.torch"], capture_output=True, text=True, timeout=scaled(300), cwd=ROOT
    )
    if probe.returncode != 0:
        error = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        log = ROOT / ".venv/horovod-build.log"
        tail = log.read_text()[-2000:] if log.is_file() else ""
        message = f"Horovod does not import ({error}); `make horovod` builds it" + (f"\n{tail}" if tail else "")
        if IN_CI:
            pytest.fail(message + " (CI=true: the Horovod tests must run, not skip)")
        pytest.skip(message)


def mpi_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(ROOT))
    env.pop("HPCOPT_TOKEN", None)
    env.update(extra)
    return env


@dataclass
class AgentServer:
    target: str
    url: str
    proc: subprocess.Popen[bytes]
    workdir: Path

    def client(self) -> Any:
        from tests.helpers.clients import Client

        return Client(self.target)

    def submit(self, spec: dict[str, Any]) -> int:
        with self.client() as c:
            return int(c.create_campaign(spec).id)

    def agent_cmd(self, ranks: int, campaign: int, *extra: str) -> list[str]:
        return [
            mpiexec_path(),
            "-n",
            str(ranks),
            sys.executable,
            "-m",
            "mpi4py",
            "-m",
            "hpcopt_agent",
            "--server",
            self.target,
            "--campaign",
            str(campaign),
            "--checkpoint-dir",
            str(self.workdir / "ckpt"),
            "--threads",
            "1",
            *extra,
        ]

    def run_agent(
        self, ranks: int, campaign: int, *extra: str, timeout: float = scaled(240), **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.agent_cmd(ranks, campaign, *extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=mpi_env(**env),
            cwd=ROOT,
        )

    def start_agent(self, ranks: int, campaign: int, *extra: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            return subprocess.Popen(
                self.agent_cmd(ranks, campaign, *extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=mpi_env(**env),
                cwd=ROOT,
                start_new_session=True,
            )


def wait_for(predicate: Any, timeout: float, what: str, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it. MPICH's hydra starts its proxy and each rank
    in a session of its own, so only the parent links tie them to the launcher."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True, check=True)
    children: dict[int, list[int]] = {}
    for line in out.stdout.splitlines():
        child, parent = (int(x) for x in line.split())
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def rank_pids(proc: subprocess.Popen[bytes]) -> list[int]:
    """The agent's ranks (the Python processes) under a launcher."""
    pids = []
    for pid in descendants(proc.pid):
        with contextlib.suppress(OSError):
            if b"hpcopt_agent" in Path(f"/proc/{pid}/cmdline").read_bytes() and pid != proc.pid:
                pids.append(pid)
    return pids


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _status(p)]


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "zombie"


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """``kill -9`` of a whole agent: the launcher, its proxy and every rank at once."""
    pids = descendants(proc.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    proc.wait(timeout=scaled(30))
    wait_for(lambda: not alive(pids), scaled(30), "the agent's ranks to exit")


#: What the server says when a port free_port() picked was taken before it could bind it
#: (another process's outgoing connection may get the same ephemeral port on a busy machine).
PORT_TAKEN = b"the port is already in use"


def agent_spec(task: str = "tests/agent/tasks.py:Regression", **overrides: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "name": "agent-test",
        "space": {
            "lr": {"type": "real", "low": 1e-3, "high": 0.05, "scale": "log"},
            "width": {"type": "int", "low": 4, "high": 32},
        },
        "algorithm": {"name": "random", "seed": 3},
        "budget": {"max_trials": 4, "max_parallel": 4},
        "folds": 2,
        "training": {"task": task, "epochs": 2, "ranks_per_fold": 1},
        "max_attempts": 3,
    }
    spec = make_spec(**{**defaults, **overrides})
    return spec


def dump(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"


def trial_json(server: AgentServer, trial_id: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.url}/api/v1/trials/{trial_id}", timeout=scaled(10)) as r:
        return dict(json.loads(r.read()))


def preempt_after_first_epoch(server: AgentServer, campaign: int, **env: str) -> str:
    """Starts a 4-rank agent on ``campaign``, and once its trial reported an epoch sends
    SIGTERM to every process of the ranks (as Slurm does); returns the agent's log after
    it exited 0 and said PREEMPTED. ``HPCOPT_TEST_STEP_SLEEP`` (a pause per training
    step, which leaves the signal time to arrive mid-training) is stretched by the
    load: on a busy machine the poll that sees the first epoch answers late, and with
    the pause as written the trial had finished its last epoch before the signal."""
    if "HPCOPT_TEST_STEP_SLEEP" in env:
        env["HPCOPT_TEST_STEP_SLEEP"] = f"{float(env['HPCOPT_TEST_STEP_SLEEP']) * timeout_scale():.3f}"

    def one_epoch() -> bool:
        trials = server.client().list_trials(campaign)
        return bool(trials) and len(trial_json(server, trials[0].id)["curves"]) >= 1

    return preempt_when(server, campaign, one_epoch, "an epoch reported", 4, **env)


def preempt_when(server: AgentServer, campaign: int, due: Any, what: str, ranks: int, *extra: str, **env: str) -> str:
    """Starts a ``ranks``-rank agent on ``campaign`` (``extra``: its options), and once
    ``due()`` holds sends SIGTERM to every process of the ranks (as Slurm does); returns
    the agent's log after it exited 0 and said PREEMPTED."""
    log = server.workdir / f"preempted-{campaign}.log"
    agent = server.start_agent(ranks, campaign, *extra, log=log, **env)
    try:
        wait_for(due, scaled(300), what)
        for pid in rank_pids(agent):
            subprocess.run(["kill", "-TERM", str(pid)], check=False)
        assert agent.wait(timeout=scaled(120)) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            kill_group(agent)
    text = log.read_text()
    assert "PREEMPTED" in text, text
    return text


def final_state(server: AgentServer, trial_id: int, epochs: int) -> dict[str, Any]:
    """The checkpoint of the trial's fold 0 after its last epoch (``weights_only``)."""
    import torch

    uri = trial_json(server, trial_id)["folds"][0]["checkpoint_uri"]
    state = dict(torch.load(uri.removeprefix("file://"), weights_only=True))
    assert state["epoch"] == epochs, state["epoch"]
    return state
