"""Layers point one way, and no module imports itself round a cycle (lazy imports inside
functions count: they are cycles a reader has to untangle all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"hpcopt": "client/hpcopt", "hpcopt_server": "server/hpcopt_server", "hpcopt_agent": "agent/hpcopt_agent"}
#: (modules under this prefix, may not import modules under these)
FORBIDDEN = [
    ("hpcopt_server.storage", ("hpcopt_server.service", "hpcopt_server.api", "hpcopt_server.rpc")),
    ("hpcopt_server.service", ("hpcopt_server.api", "hpcopt_server.rpc")),
    ("hpcopt_server.optimizers", ("hpcopt_server.storage", "hpcopt_server.service", "hpcopt_server.api")),
    ("hpcopt_server.pruners", ("hpcopt_server.storage", "hpcopt_server.service", "hpcopt_server.api")),
    ("hpcopt_server.rules", ("hpcopt_server.storage", "hpcopt_server.service")),
    ("hpcopt_server.domain", ("hpcopt_server.storage", "hpcopt_server.service")),
    ("hpcopt_agent.comm", ("hpcopt_agent.schemes", "hpcopt_agent.fold", "hpcopt_agent.agent")),
    ("hpcopt", ("hpcopt_server", "hpcopt_agent")),
    # The shared core all three parts import stands on its own: no transport, no CLI.
    (
        "hpcopt.core",
        ("hpcopt.cli", "hpcopt.client", "hpcopt.agent_client", "hpcopt.transport", "hpcopt.asktell"),
    ),
    # Nothing but the CLI's own entry points imports the CLI (the server's and agent's
    # commands share its helpers, hpcopt.cli.util).
    ("hpcopt.client", ("hpcopt.cli",)),
    ("hpcopt.transport", ("hpcopt.cli",)),
    ("hpcopt_server.service", ("hpcopt.cli",)),
]


def _modules() -> dict[str, Path]:
    found = {}
    for package, where in PACKAGES.items():
        for path in (ROOT / where).rglob("*.py"):
            if "v1" in path.relative_to(ROOT / where).parts:  # generated protobuf code
                continue
            parts = path.relative_to(ROOT / where).with_suffix("").parts
            found[".".join((package, *parts)).removesuffix(".__init__")] = path
    return found


def _imports() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for dep in names:
                # A module's own package (its __init__) is not a cycle to untangle.
                if dep in modules and dep != name and not name.startswith(dep + "."):
                    deps.add(dep)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_imports()) == []


def test_the_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_point_one_way() -> None:
    graph = _imports()
    wrong = [
        f"{name} imports {dep}"
        for name, deps in graph.items()
        for prefix, banned in FORBIDDEN
        if name == prefix or name.startswith(prefix + ".")
        for dep in deps
        if any(dep == b or dep.startswith(b + ".") for b in banned)
    ]
    assert wrong == []
