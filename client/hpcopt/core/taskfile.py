"""What a spec's task file says about the task, read without running it.

``hpcopt submit`` checks a campaign against its task before the server stores it when
the task is a file it can read (``training.task: path/to/task.py:Name``, relative to
the working directory, as the agent resolves it). The file is parsed with :mod:`ast`,
never imported: the submitting machine may lack torch, and importing would run code.
What cannot be known without running it (a base class from another module, a task
built by a function) is left to the agent, which checks again at start.
"""

from __future__ import annotations

import ast
from pathlib import Path


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _task_class(tree: ast.Module, attr: str) -> str | None:
    """The class ``attr`` names: itself, or the class an ``attr = Cls(...)`` instantiates."""
    classes = _classes(tree)
    if attr in classes:
        return attr
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        named = any(isinstance(t, ast.Name) and t.id == attr for t in targets)
        if named and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes:
            return value.func.id
    return None


def own_method(ref: str, method: str, cwd: Path | None = None) -> tuple[str, int] | None:
    """(class name, line) where the task that ``ref`` names defines ``method`` itself or
    in a base class of the same file; None when it does not, or when that cannot be read
    from the file (not a readable ``.py`` file, a syntax error, a task made elsewhere)."""
    module_ref, sep, attr = ref.rpartition(":")
    if not sep or not module_ref.endswith(".py"):
        return None
    path = Path(module_ref)
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    classes = _classes(tree)
    first = _task_class(tree, attr)
    todo, seen = [first] if first else [], set()
    while todo:  # the class, then its bases defined in this file (Task itself is not), in order
        name = todo.pop(0)
        if name in seen or name not in classes:
            continue
        seen.add(name)
        cls = classes[name]
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == method:
                return cls.name, node.lineno
        todo += [b.id for b in cls.bases if isinstance(b, ast.Name)]
    return None
