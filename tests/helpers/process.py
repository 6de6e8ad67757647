"""A real ``hpcopt-server serve`` process on free ports, for tests that kill it, limit
its descriptors or measure its memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.helpers.env import scaled
from tests.helpers.live import free_port


def wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = scaled(60)) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"server exited with {proc.returncode}:\n{out}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=scaled(2)):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"server at {url} did not become healthy")


class ServerProcess:
    """``hpcopt-server serve --db DB`` with ``args``; ``nofile`` caps its open files."""

    def __init__(
        self,
        db: str,
        *args: str,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        log: Path | None = None,
        soft_nofile: int | None = None,
    ):
        self.db, self.args, self.host, self.env, self.nofile = db, args, host, env or {}, nofile
        self.soft_nofile = soft_nofile
        self.port, self.grpc_port = free_port(), free_port()
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self.log = log
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ServerProcess:
        cmd: Sequence[str] = [
            sys.executable,
            "-m",
            "hpcopt_server.cli",
            "serve",
            "--db",
            self.db,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--grpc-port",
            str(self.grpc_port),
            "--log-level",
            "warning",
            *self.args,
        ]
        out = open(self.log, "a") if self.log else subprocess.PIPE  # noqa: SIM115 - the child keeps it
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        if self.nofile is not None:  # before the interpreter has even imported the server
            resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        if self.soft_nofile is not None:  # a soft limit under a higher hard one, as on most hosts
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE, (self.soft_nofile, hard))
        wait_healthy(self.http_url, self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=scaled(30))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=scaled(30))
            except subprocess.TimeoutExpired:
                self.kill()

    def peak_rss_mb(self) -> float:
        """The process's peak resident memory (VmHWM) so far, in MB."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmHWM")

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
