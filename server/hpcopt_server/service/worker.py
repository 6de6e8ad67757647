"""Runs a costly pure computation in a child process with a memory and a time limit.

A computation on what any read token can ask for must not be able to take the server's
memory: permutation importance once reached 3.4 GB in the server process, and a few at
once got the server killed by the kernel. The work budget (``importance.py``) keeps it
small by design; this is the limit that holds even if a budget is wrong. The function
runs in a child forked from a ``forkserver`` (a clean process that has already imported
numpy and the analysis code, so a child starts in milliseconds, not seconds). The parent
watches the child's resident memory and the clock, and kills it past either limit: the
request is refused with a 4xx naming the limit, and the server is untouched. The answer
comes back over a pipe from our own child (plain lists and numbers).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hpcopt_server.errors import InvalidArgument, Unavailable

T = TypeVar("T")

#: Resident memory one analysis child may reach, in MB.
MEMORY_MB = 1024
#: Seconds one analysis may run.
SECONDS = 120.0
_POLL = 0.05

_context: Any = None
_lock = threading.Lock()


def _ctx() -> Any:
    global _context
    with _lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["numpy", "hpcopt_server.service.importance"])
            _context = ctx
        return _context


def _child(conn: multiprocessing.connection.Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        conn.send(("ok", fn(*args)))
    except MemoryError:
        conn.send(("memory", ""))
    except Exception as exc:  # the parent raises it as the server's error
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_limited(
    what: str, fn: Callable[..., T], *args: Any, memory_mb: float = MEMORY_MB, seconds: float = SECONDS
) -> T:
    """``fn(*args)`` in a child process; InvalidArgument naming the limit if the child
    passes ``memory_mb`` of resident memory or ``seconds``, Unavailable if it dies."""
    ctx = _ctx()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args), daemon=True, name=f"hpcopt-{what}")
    proc.start()
    child.close()
    deadline = time.monotonic() + seconds
    try:
        while not parent.poll(_POLL):
            if not proc.is_alive() and not parent.poll(0):
                raise Unavailable(f"the {what} worker exited with status {proc.exitcode} before answering; try again")
            if rss_mb(proc.pid) > memory_mb:
                raise InvalidArgument(
                    f"the {what} needs more than the analysis memory limit of {memory_mb:g} MB",
                    [("memory", f"at most {memory_mb:g} MB per analysis")],
                )
            if time.monotonic() > deadline:
                raise InvalidArgument(
                    f"the {what} takes longer than the analysis time limit of {seconds:g} s",
                    [("time", f"at most {seconds:g} s per analysis")],
                )
        status, value = parent.recv()
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=10)
        parent.close()
    if status == "memory":
        raise InvalidArgument(
            f"the {what} ran out of memory in its worker", [("memory", f"at most {memory_mb:g} MB per analysis")]
        )
    if status == "error":
        raise RuntimeError(f"the {what} failed in its worker: {value}")
    result: T = value
    return result
