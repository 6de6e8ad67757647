"""``training.task``: the syntax of a task reference, checked by the server at submission
and by the agent before it decides whether its owner allows the task.

A reference is ``path/to/file.py:Name`` (a file relative to the agent's task root) or
``package.module:Name`` (an importable module); ``Name`` is a Python identifier. A
campaign names the code its agents run, so the syntax alone refuses what can never be
meant: an absolute path, ``..``, a backslash, a drive letter, empty or control-character
components. Whether an agent runs an allowed-looking reference is its owner's decision
(``hpcopt_agent.trust``), not the campaign's.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcopt.core.documents import UNSAFE_CHARS

MAX_TASK_REF = 256


@dataclass(frozen=True)
class TaskRef:
    """A parsed reference: ``file`` (a relative POSIX path ending in ``.py``) or
    ``module`` (a dotted module name), and the attribute ``name`` to take from it."""

    file: str | None
    module: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.file or self.module}:{self.name}"


def parse_task_ref(ref: str) -> TaskRef:
    """The reference's parts; a ValueError saying what is wrong and what is allowed."""
    allowed = "'relative/path.py:Name' or 'package.module:Name'"
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"must look like {allowed}")
    if len(ref) > MAX_TASK_REF:
        raise ValueError(f"must be at most {MAX_TASK_REF} characters, got {len(ref)}")
    bad = UNSAFE_CHARS.search(ref)
    if bad:
        raise ValueError(f"must not contain control characters (found U+{ord(bad.group()):04X})")
    target, sep, name = ref.rpartition(":")
    if not sep or not target or not name:
        raise ValueError(f"must look like {allowed}, got {ref!r}")
    if not name.isidentifier():
        raise ValueError(f"the name after ':' must be a Python identifier, got {name!r}")
    if target.endswith(".py"):
        if ":" in target or "\\" in target:
            raise ValueError(f"a task file is a relative POSIX path without ':' or '\\', got {target!r}")
        if target.startswith(("/", "~")):
            raise ValueError(f"a task file must be relative to the agent's task root, not absolute: {target!r}")
        parts = target.split("/")
        if any(p in ("", "..") for p in parts):
            raise ValueError(f"a task file path must not hold '..' or empty components: {target!r}")
        return TaskRef(file=target, module=None, name=name)
    if not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(f"a task module must be a dotted Python module name, got {target!r} (a file ends in .py)")
    return TaskRef(file=None, module=target, name=name)
