"""More gRPC server processes behind one port (``hpcopt-server serve --processes N``).

One Python process answers agent calls on about one core (the interpreter's lock), so a
site with more cores than that runs more processes. The first process binds the gRPC
port and serves everything (REST, the dashboard, the reaper, gRPC); it starts N - 1
more that serve only gRPC, each accepting clients from the *same* listening socket
(inherited, not re-bound): the kernel hands each new connection to whichever process
accepts it first, so a busy process takes fewer. They share nothing but the database,
as replicas do (PostgreSQL only: SQLite has one writer at a time).

Each child holds the read end of a pipe whose write end only the first process has: when
that closes (the first process stops or dies, however), the child finishes its calls
and exits. A child that exits while the first process runs is started again, after a
pause that doubles while children keep dying within a minute of starting.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

log = logging.getLogger("hpcopt.processes")

#: Hidden ``serve`` options a child is started with: the inherited socket's and pipe's
#: file descriptors.
CHILD_SOCKET, CHILD_PIPE = "--grpc-child-socket", "--grpc-child-pipe"
#: How ``serve`` hands its start secret (hex; ``rpc/identity.py``) to its gRPC processes.
START_SECRET_ENV = "HPCOPT_START_SECRET"


class GrpcProcesses:
    """The N - 1 gRPC-only children of a ``serve --processes N``."""

    def __init__(self, count: int, sock: socket.socket, argv: Sequence[str]) -> None:
        self.count, self.sock, self.argv = count, sock, list(argv)
        self.read_end, self.write_end = os.pipe()
        os.set_inheritable(self.read_end, True)
        self.children: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watch = threading.Thread(target=self._supervise, name="grpc-processes", daemon=True)

    def start(self) -> None:
        if not self.count:  # --processes 1: nothing to start or watch
            return
        with self._lock:
            self.children = [self._spawn() for _ in range(self.count)]
        self._watch.start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        fd = self.sock.fileno()
        os.set_inheritable(fd, True)
        cmd = [
            sys.executable,
            "-m",
            "hpcopt_server.cli",
            *self.argv,
            CHILD_SOCKET,
            str(fd),
            CHILD_PIPE,
            str(self.read_end),
        ]
        proc = subprocess.Popen(cmd, pass_fds=(fd, self.read_end))
        log.info("gRPC process %d started", proc.pid)
        return proc

    def _supervise(self) -> None:
        pause, started = 0.5, {id(p): time.monotonic() for p in self.children}
        while not self._stopping.wait(0.5):
            with self._lock:
                for i, proc in enumerate(self.children):
                    code = proc.poll()
                    if code is None or self._stopping.is_set():
                        continue
                    lived = time.monotonic() - started.pop(id(proc), 0.0)
                    pause = min(30.0, pause * 2) if lived < 60 else 1.0
                    log.warning(
                        "gRPC process %d exited with status %s after %.0f s; starting another in %.0f s",
                        proc.pid,
                        code,
                        lived,
                        pause,
                    )
                    if self._stopping.wait(pause):
                        return
                    self.children[i] = new = self._spawn()
                    started[id(new)] = time.monotonic()

    def stop(self, grace: float = 5.0) -> None:
        """Closes the pipe (each child finishes its calls within ``grace``), then kills
        what is left."""
        self._stopping.set()
        os.close(self.write_end)
        deadline = time.monotonic() + grace + 5
        with self._lock:
            for proc in self.children:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("gRPC process %d did not stop in %.0f s; killing it", proc.pid, grace + 5)
                    proc.kill()
                    proc.wait()
        os.close(self.read_end)


def wait_for_parent(pipe_fd: int) -> None:
    """In a child: returns when the first process closes its end of the pipe (it stopped
    or died), or on SIGTERM or SIGINT."""
    done = threading.Event()

    def watch() -> None:
        while os.read(pipe_fd, 1):
            pass
        done.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        pass
