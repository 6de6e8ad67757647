"""Several "nodes" on this one machine, joined by a real, rate-limited link.

Each node is a network namespace (``hpcopt-n0``, ``hpcopt-n1``, …) with its own host name
(a UTS namespace per rank), one interface ``hpv`` with the address 10.213.0.<k+1>, joined
to the others through veth pairs on a bridge ``hpcopt-br`` in the root namespace
(address 10.213.0.254, where a benchmark's server listens). Each node's egress on
``hpv`` goes through a ``tbf`` queueing discipline at ``rate``, so everything that leaves
a node (both directions of an exchange) crosses a link of that rate; ranks of one node
talk over the kernel's local path, at loopback speed. This kernel has ``tbf`` and
``htb`` but not ``netem``: the link has a rate, not an added latency.

MPI ranks start in their node through :data:`ON_NODE` (``mpiexec -n 4 on_node.sh
python …``: rank r runs on node r // per_node). :func:`rank_env` makes the traffic take
the link: torch's gloo on ``hpv`` with the rendezvous at node 0, and MPICH on its TCP
netmod over ``hpv`` with shared memory off (one Hydra proxy starts every rank here, so
MPICH would otherwise see one node and use shared memory across the "link").

Needs root (``ip netns``). :class:`SlowLink` removes what it made on exit, and first
removes anything a killed earlier run left under the same names.

    with SlowLink(nodes=2, rate="200mbit") as link:
        subprocess.run([*mpiexec, "-n", "4", *link.launcher(per_node=2), python, ...],
                       env=link.rank_env(os.environ, per_node=2))
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from types import TracebackType

ON_NODE = Path(__file__).resolve().parent / "on_node.sh"
PREFIX = "hpcopt-n"
BRIDGE = "hpcopt-br"
SUBNET = "10.213.0"
SERVER_ADDR = f"{SUBNET}.254"


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)


def node_addr(k: int) -> str:
    return f"{SUBNET}.{k + 1}"


def cleanup() -> None:
    """Removes every namespace, veth and bridge of this harness (also a killed run's)."""
    names = _ip("ip", "netns", "list", check=False).stdout.split()
    for ns in [n for n in names if re.fullmatch(rf"{PREFIX}\d+", n)]:
        _ip("ip", "netns", "del", ns, check=False)  # deletes the veth end inside, and so its peer
    links = _ip("ip", "-o", "link", "show", check=False).stdout
    for name in re.findall(r"^\d+: (hpcopt-v\d+)[@:]", links, re.M):
        _ip("ip", "link", "del", name, check=False)
    if re.search(rf"^\d+: {BRIDGE}[@:]", links, re.M):
        _ip("ip", "link", "del", BRIDGE, check=False)


class SlowLink:
    """``nodes`` namespaces on a bridge, each node's egress limited to ``rate`` (tc's
    syntax: ``100mbit``, ``1gbit``)."""

    def __init__(self, nodes: int, rate: str, burst: str = "256kb") -> None:
        if os.geteuid() != 0:
            raise PermissionError("the slow-link harness needs root (ip netns, tc)")
        self.nodes, self.rate, self.burst = nodes, rate, burst

    def __enter__(self) -> SlowLink:
        cleanup()
        try:
            _ip("ip", "link", "add", BRIDGE, "type", "bridge")
            _ip("ip", "addr", "add", f"{SERVER_ADDR}/24", "dev", BRIDGE)
            _ip("ip", "link", "set", BRIDGE, "up")
            for k in range(self.nodes):
                ns, outer, inner = f"{PREFIX}{k}", f"hpcopt-v{k}", f"hpcopt-e{k}"
                _ip("ip", "netns", "add", ns)
                _ip("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("ip", "link", "set", inner, "netns", ns)
                _ip("ip", "link", "set", inner, "name", "hpv", ns=ns)
                _ip("ip", "addr", "add", f"{node_addr(k)}/24", "dev", "hpv", ns=ns)
                _ip("ip", "link", "set", "hpv", "up", ns=ns)
                _ip("ip", "link", "set", "lo", "up", ns=ns)
                _ip("ip", "link", "set", outer, "master", BRIDGE, "up")
                _ip(
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "hpv",
                    "root",
                    "tbf",
                    "rate",
                    self.rate,
                    "burst",
                    self.burst,
                    "latency",
                    "200ms",
                    ns=ns,
                )
        except BaseException:
            cleanup()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        cleanup()

    def launcher(self, per_node: int) -> list[str]:
        """The command prefix that starts an MPI rank in its node (after ``mpiexec -n N``)."""
        return ["env", f"HPCOPT_LINK_PER_NODE={per_node}", "bash", str(ON_NODE)]

    def rank_env(self, base: dict[str, str]) -> dict[str, str]:
        """The ranks' environment: gloo and MPICH over ``hpv``, the rendezvous at node 0."""
        return dict(
            base,
            HPCOPT_MASTER_ADDR=node_addr(0),
            MASTER_ADDR=node_addr(0),
            GLOO_SOCKET_IFNAME="hpv",
            MPIR_CVAR_NOLOCAL="1",
            MPIR_CVAR_CH4_NETMOD="ofi",
            FI_PROVIDER="tcp",
            FI_TCP_IFACE="hpv",
        )

    def sent_bytes(self) -> list[int]:
        """Bytes each node has sent over the link (its tbf's counter)."""
        out = []
        for k in range(self.nodes):
            stats = _ip("tc", "-s", "qdisc", "show", "dev", "hpv", ns=f"{PREFIX}{k}").stdout
            found = re.search(r"Sent (\d+) bytes", stats)
            out.append(int(found.group(1)) if found else 0)
        return out
