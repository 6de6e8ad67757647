"""Communicators of one agent process: MPI for control (which trial, which fold, stop
or go), torch.distributed for the gradients of a fold group.

torch's CPU wheel has no MPI backend, so fold groups get gloo (NCCL on GPUs) process
groups whose rendezvous address comes from MPI. Waits that can be long (a group leader
asking the server, a fold group waiting for the others) go through :func:`quiet` so
idle ranks sleep instead of spinning on a core that training needs.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from hpcopt.core.planner import Layout


@dataclass
class Comms:
    layout: Layout
    world: MPI.Comm
    group: MPI.Comm  # my trial group; rank 0 is the registered agent
    fold: MPI.Comm  # my fold group; rank 0 reports the fold
    group_index: int
    fold_index: int
    device: torch.device
    pg: Any = None  # torch process group of my fold group (None with one rank per fold)
    subgroups: dict[tuple[int, ...], Any] = field(default_factory=dict)
    timeout: float = 300.0
    horovod: Any = None  # this rank's Horovod process set (its fold group), when a campaign uses Horovod

    def subgroup(self, ranks: list[int]) -> Any:
        """A torch process group of these world ranks (a DASO node), made by its members
        alone the first time and kept until :meth:`close`: torch names such groups by
        their ranks, so making one twice would reuse the first one's rendezvous keys."""
        key = tuple(sorted(ranks))
        if key not in self.subgroups:
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            self.subgroups[key] = dist.new_group(
                list(key), timeout=timedelta(seconds=self.timeout), backend=backend, use_local_synchronization=True
            )
        return self.subgroups[key]

    @property
    def is_group_leader(self) -> bool:
        return self.group.rank == 0

    @property
    def is_fold_leader(self) -> bool:
        return self.fold.rank == 0

    def init_horovod(self) -> None:
        """``hvd.init`` over the world with this rank's fold group as its process set
        (collective over the world, once per agent): :attr:`horovod`. Horovod is
        started and stopped here, with the communicators; ``schemes/horovod.py`` uses it."""
        try:
            import horovod.torch as hvd
        except ImportError as exc:
            raise RuntimeError(
                "the campaign trains with Horovod (allreduce.backend: horovod or scheme: horovod), which is not "
                f"installed in this environment ({exc}); build it with `make horovod` (about 5 minutes)"
            ) from None
        # A fold group that spans the world is Horovod's global process set: registering it
        # again as a process set of its own makes hvd.init fail on every rank ("mismatching
        # numbers of process sets": Horovod finds the set already registered, as set 0).
        # The layout is the same on every rank, so every rank takes the same branch.
        if self.layout.ranks_per_fold == self.world.size:
            hvd.init(comm=self.world)
            process_set = hvd.global_process_set
        else:
            process_set = hvd.ProcessSet(self.fold)
            hvd.init(comm=self.world, process_sets=[process_set])
        if not hvd.mpi_threads_supported():
            raise RuntimeError("Horovod needs MPI_THREAD_MULTIPLE; this MPI does not provide it")
        self.horovod = process_set

    def close(self) -> None:
        """Ends the torch process groups (collective over the fold group). gloo's worker
        threads drop their last reference to finished work under the GIL; if one is
        still doing so when a process group is destroyed (the destructor joins them
        while the main thread holds the GIL) the rank deadlocks, and at interpreter exit
        it aborts (SIGABRT). So: a barrier, a pause that lets them finish, then destroy."""
        if self.horovod is not None:
            import horovod.torch as hvd

            self.horovod = None
            quiet(self.world)  # Horovod's shutdown is global: every fold group must be done
            hvd.shutdown()
        if self.pg is None:
            if dist.is_initialized():  # started by the throughput probe; no fold group uses it
                quiet(self.world)
                time.sleep(0.1)
                dist.destroy_process_group()
            return
        pg, self.pg = self.pg, None
        dist.barrier(group=pg)
        time.sleep(0.1)
        dist.destroy_process_group()


def quiet(comm: MPI.Comm, poll: float = 0.002) -> None:
    """A barrier that sleeps while it waits (blocking MPI collectives spin)."""
    if comm.size == 1:
        return
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)


#: The tag of a group leader's "re-plan at your next trial boundary" to the others.
REPLAN_TAG = 7321


class Notices:
    """Point-to-point notes between group leaders within one phase: one leader asks the
    others to re-plan at their next trial boundary (they :meth:`pending` it before taking
    a trial). :meth:`settle` (every rank of the world, after the phase) receives every
    note sent, so none outlives the communicators."""

    def __init__(self, world: MPI.Comm) -> None:
        self.world = world
        self.sent: list[tuple[int, MPI.Request]] = []

    def ask(self, leaders: list[int]) -> None:
        for dest in leaders:
            if dest != self.world.rank:
                self.sent.append((dest, self.world.isend(None, dest=dest, tag=REPLAN_TAG)))

    def pending(self) -> bool:
        return bool(self.world.iprobe(source=MPI.ANY_SOURCE, tag=REPLAN_TAG))

    def settle(self) -> None:
        counts = [0] * self.world.size
        for dest, _ in self.sent:
            counts[dest] += 1
        for src, n in enumerate(self.world.alltoall(counts)):
            for _ in range(n):
                self.world.recv(source=src, tag=REPLAN_TAG)
        MPI.Request.Waitall([r for _, r in self.sent])
        self.sent = []


class CollectiveTimeout(RuntimeError):
    """Ranks of a communicator did not arrive in time; ``missing`` are their ranks in
    it (known on its rank 0 only)."""

    def __init__(self, missing: list[int], timeout: float) -> None:
        super().__init__(f"ranks {missing or '?'} did not arrive within {timeout:.0f} s")
        self.missing = missing
        self.timeout = timeout


def bounded_barrier(comm: MPI.Comm, timeout: float, poll: float = 0.002) -> None:
    """:func:`quiet`, but raising :class:`CollectiveTimeout` after ``timeout`` seconds;
    rank 0 learns which ranks never arrived from their arrival messages."""
    if comm.size == 1:
        return
    arrivals = [comm.irecv(source=r, tag=7101) for r in range(1, comm.size)] if comm.rank == 0 else []
    sent = comm.isend(True, dest=0, tag=7101) if comm.rank != 0 else None
    barrier = comm.Ibarrier()
    deadline = time.monotonic() + timeout
    while not barrier.Test():
        if time.monotonic() > deadline:
            missing = [r for r, req in enumerate(arrivals, start=1) if not req.test()[0]]
            raise CollectiveTimeout(missing, timeout)
        time.sleep(poll)
    for req in arrivals:
        req.wait()
    if sent is not None:
        sent.wait()


def bcast(comm: MPI.Comm, obj: Any = None) -> Any:
    quiet(comm)
    return comm.bcast(obj, root=0)


def gather(comm: MPI.Comm, obj: Any) -> list[Any] | None:
    quiet(comm)
    return comm.gather(obj, root=0)


def any_true(comm: MPI.Comm, flag: bool) -> bool:
    quiet(comm)
    return bool(comm.allreduce(bool(flag), op=MPI.LOR))


def limit_threads(world: MPI.Comm, threads: int | None) -> int:
    """Torch threads per rank: ``threads``, else the node's cores over its ranks. Call
    before any torch work: OpenMP keeps the first pool's threads spinning, and without
    CPU binding (srun with task/none) that pool would oversubscribe the cores."""
    _, local_size = node_position(world)
    cores = len(os.sched_getaffinity(0)) if local_size == 1 else (os.cpu_count() or 1)
    n = threads or max(1, cores // local_size)
    torch.set_num_threads(n)
    return n


def node_position(world: MPI.Comm) -> tuple[int, int]:
    """(this rank's index among the ranks on its host, how many there are). By host
    name: MPI_COMM_TYPE_SHARED sees one rank per node under some srun/PMIx launches."""
    hosts = world.allgather(socket.gethostname())
    me = hosts[world.rank]
    return hosts[: world.rank].count(me), hosts.count(me)


def local_rank(world: MPI.Comm) -> int:
    """This rank's index on its node: Slurm's ``SLURM_LOCALID`` when srun started this
    rank (its ``SLURM_PROCID`` is the MPI rank; ranks that mpiexec started inside a
    batch script all inherit the script's), else its position among the ranks
    sharing its host name."""
    given = os.environ.get("SLURM_LOCALID", "")
    if given.isdigit() and os.environ.get("SLURM_PROCID") == str(world.rank):
        return int(given)
    return node_position(world)[0]


def pick_device(local_rank: int) -> torch.device:
    """One GPU per rank: the node-local rank's GPU among those visible (with srun
    ``--gpus-per-task``/``--gpu-bind`` each task sees only its own: index 0)."""
    if torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def split(
    layout: Layout,
    world: MPI.Comm,
    *,
    timeout: float,
    master_addr: str | None = None,
) -> Comms:
    """Builds the group and fold communicators and, where a fold has several ranks,
    the torch process groups (collective over the world, called once at start)."""
    rank = world.rank
    group_index, fold_index = layout.group_of(rank), layout.fold_group_of(rank)
    group = world.Split(color=group_index, key=rank)
    fold = group.Split(color=fold_index, key=rank)
    device = pick_device(local_rank(world))
    comms = Comms(layout, world, group, fold, group_index, fold_index, device, timeout=timeout)
    if layout.ranks_per_fold > 1:
        comms.pg = _process_groups(layout, world, device, timeout, master_addr)
    return comms


def rendezvous(world: MPI.Comm, master_addr: str | None) -> tuple[str, int]:
    """The address of torch's rendezvous: rank 0's host and a free port, sent to all."""
    address = None
    if world.rank == 0:
        host = master_addr or os.environ.get("HPCOPT_MASTER_ADDR") or _reachable_address()
        with socket.socket() as s:
            s.bind(("", 0))
            address = (host, s.getsockname()[1])
    host, port = world.bcast(address, root=0)
    return str(host), int(port)


def _process_groups(
    layout: Layout, world: MPI.Comm, device: torch.device, timeout: float, master_addr: str | None
) -> Any:
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():  # the throughput probe may have started it
        host, port = rendezvous(world, master_addr)
        dist.init_process_group(
            backend,
            init_method=f"tcp://{host}:{port}",
            rank=world.rank,
            world_size=world.size,
            timeout=timedelta(seconds=timeout),
        )
    mine = None
    for g in range(layout.groups):
        for f in range(layout.fold_groups):
            ranks = layout.fold_ranks(g, f)
            pg = dist.new_group(ranks, timeout=timedelta(seconds=timeout), backend=backend)
            if world.rank in ranks:
                mine = pg
    return mine


def _reachable_address() -> str:
    """This host's address as other nodes see it (loopback on a single node is fine)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
