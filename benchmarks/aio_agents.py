"""Lightweight simulated agents: asyncio coroutines on ``grpc.aio`` channels, each with
its own connection, timing every RPC. Shared by ``server_throughput.py`` and
``simulate.py``; also the CPU accounting both print.

Import this module only in the process that runs the agents (after any fork): gRPC
must not be initialized before ``fork``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from hpcopt.v1 import agent_pb2, agent_pb2_grpc

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Recorder:
    """Per-RPC latencies (seconds), errors by code, granted trial ids."""

    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    first_error: str = ""
    granted: list[tuple[int, int]] = field(default_factory=list)  # (trial id, attempt)
    cycles: int = 0
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    steady: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Latencies of the calls that started inside ``window`` (wall-clock seconds)."""
    window: tuple[float, float] = (0.0, 0.0)
    phases: list[float] = field(default_factory=list)
    """Wall-clock starts of the run's phases, ascending: ``by_phase[i]`` holds the
    latencies of the calls that started in phase i (from ``phases[i]`` to the next)."""
    by_phase: dict[int, dict[str, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))

    def merge(self, other: dict[str, Any]) -> None:
        for k, v in other["latency"].items():
            self.latency[k].extend(v)
        for k, n in other["errors"].items():
            self.errors[k] += n
        for k, n in other.get("counters", {}).items():
            self.counters[k] += n
        for k, v in other.get("steady", {}).items():
            self.steady[k].extend(v)
        self.phases = self.phases or list(other.get("phases", []))
        for i, methods in other.get("by_phase", {}).items():
            for k, v in methods.items():
                self.by_phase[i][k].extend(v)
        self.first_error = self.first_error or other["first_error"]
        self.granted.extend(other["granted"])
        self.cycles += other["cycles"]

    def dump(self) -> dict[str, Any]:
        return {
            "latency": dict(self.latency),
            "errors": dict(self.errors),
            "first_error": self.first_error,
            "granted": self.granted,
            "cycles": self.cycles,
            "counters": dict(self.counters),
            "steady": dict(self.steady),
            "phases": self.phases,
            "by_phase": {i: dict(m) for i, m in self.by_phase.items()},
        }

    def calls(self) -> int:
        return sum(len(v) for v in self.latency.values())


def pct(xs: list[float], q: float) -> float:
    """The q-quantile of xs in milliseconds (nan if empty)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


class Agent:
    """One simulated agent: a channel to one server replica and the calls it makes."""

    def __init__(self, target: str, rec: Recorder, token: str = ""):
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        self.rec = rec
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.agent_id = ""

    async def call(self, method: str, request: Any, timeout: float = 120.0) -> Any:
        started = time.time()
        t0 = time.perf_counter()
        try:
            return await getattr(self.stub, method)(request, timeout=timeout, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            self.rec.errors[f"{method}:{exc.code().name}"] += 1
            self.rec.first_error = self.rec.first_error or f"{method}: {exc.code().name} {exc.details()}"
            raise
        finally:
            took = time.perf_counter() - t0
            self.rec.latency[method].append(took)
            if self.rec.window[0] <= started <= self.rec.window[1]:
                self.rec.steady[method].append(took)
            if self.rec.phases and started >= self.rec.phases[0]:
                phase = sum(1 for p in self.rec.phases if p <= started) - 1
                self.rec.by_phase[phase][method].append(took)

    async def register(self, campaign_id: int, host: str = "") -> agent_pb2.RegisterResponse:
        req = agent_pb2.RegisterRequest(host=host or socket.gethostname(), ranks=1, campaign_id=campaign_id)
        resp: agent_pb2.RegisterResponse = await self.call("Register", req)
        self.agent_id = resp.agent_id
        return resp

    async def acquire(self, campaign_id: int) -> agent_pb2.AcquireResponse:
        req = agent_pb2.AcquireRequest(agent_id=self.agent_id, campaign_id=campaign_id)
        resp: agent_pb2.AcquireResponse = await self.call("Acquire", req)
        if resp.status == agent_pb2.AcquireResponse.STATUS_GRANTED:
            self.rec.granted.append((resp.trial.id, resp.trial.attempt))
        return resp

    def lease(self, resp: agent_pb2.AcquireResponse) -> agent_pb2.TrialLease:
        return agent_pb2.TrialLease(agent_id=self.agent_id, trial_id=resp.trial.id, lease_id=resp.lease_id)

    async def heartbeat(self, lease: agent_pb2.TrialLease) -> agent_pb2.HeartbeatResponse:
        resp: agent_pb2.HeartbeatResponse = await self.call("Heartbeat", agent_pb2.HeartbeatRequest(lease=lease))
        return resp

    async def report(self, lease: agent_pb2.TrialLease, fold: int, step: int, value: float) -> Any:
        req = agent_pb2.ReportIntermediateRequest(lease=lease, fold=fold, step=step, value=value)
        return await self.call("ReportIntermediate", req)

    async def report_fold(self, lease: agent_pb2.TrialLease, fold: int, value: float) -> Any:
        return await self.call("ReportFold", agent_pb2.ReportFoldRequest(lease=lease, fold=fold, value=value))

    async def complete(self, lease: agent_pb2.TrialLease) -> Any:
        return await self.call("Complete", lease)

    async def release(self, lease: agent_pb2.TrialLease, state: Any, reason: str) -> Any:
        return await self.call("Release", agent_pb2.ReleaseRequest(lease=lease, state=state, reason=reason))

    async def close(self) -> None:
        await self.channel.close()


# -- CPU accounting ----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of a process and its live descendants (a ``serve --processes``
    server's gRPC children), from /proc/PID/task/*/children."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu_seconds(p)
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


def database_cpu(db: str) -> tuple[dict[int, float], float]:
    """(CPU seconds of each PostgreSQL backend now connected to ``db``, a libpq URL, by
    pid; CPU seconds of the backends the postmaster has reaped so far). Take it before and
    after a run and :func:`database_cpu_used` gives what the run's sessions used,
    without the live sessions of other databases on a shared machine."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        pids = [
            int(r[0])
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ]
        me = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
    live = {pid: cpu_seconds(pid) for pid in pids}
    try:  # the postmaster accumulates the CPU of the backends it reaped (cutime + cstime)
        postmaster = int(Path(f"/proc/{me}/stat").read_text().rsplit(")", 1)[1].split()[1])
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
        reaped = (int(fields[13]) + int(fields[14])) / TICK
    except (OSError, IndexError, ValueError):
        reaped = 0.0
    return live, reaped


def database_cpu_used(before: tuple[dict[int, float], float], after: tuple[dict[int, float], float]) -> float:
    """CPU seconds the database's backends used between two :func:`database_cpu` samples:
    the live ones' growth, and the backends that ended meanwhile (a connection pool's
    overflow connections come and go), less what those had used before."""
    (live0, reaped0), (live1, reaped1) = before, after
    grown = sum(used - live0.get(pid, 0.0) for pid, used in live1.items())
    ended = reaped1 - reaped0 - sum(used for pid, used in live0.items() if pid not in live1)
    return grown + max(0.0, ended)


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (from /proc/stat)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return (sum(parts[:8]) - idle) / TICK


async def gather_bounded(coros: list[Any]) -> list[Any]:
    return await asyncio.gather(*coros, return_exceptions=True)
