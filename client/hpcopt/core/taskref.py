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
        check_relative_file(target, "a task file")
        return TaskRef(file=target, module=None, name=name)
    if not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(f"a task module must be a dotted Python module name, got {target!r} (a file ends in .py)")
    return TaskRef(file=None, module=target, name=name)


def check_relative_file(path: str, what: str) -> None:
    """A ValueError unless ``path`` is a relative POSIX path under the agent's task
    root (no absolute path, ``~``, ``..``, empty component, ``:`` or backslash)."""
    if ":" in path or "\\" in path:
        raise ValueError(f"{what} is a relative POSIX path without ':' or '\\', got {path!r}")
    if path.startswith(("/", "~")):
        raise ValueError(f"{what} must be relative to the agent's task root, not absolute: {path!r}")
    if any(p in ("", "..") for p in path.split("/")):
        raise ValueError(f"{what} path must not hold '..' or empty components: {path!r}")


def parse_script_path(path: str) -> str:
    """A training script's path (``training.task.script``): a relative ``.py`` file under
    the agent's task root; a ValueError saying what is wrong otherwise."""
    if not isinstance(path, str) or not path:
        raise ValueError("must be a relative path such as 'train.py'")
    if len(path) > MAX_TASK_REF:
        raise ValueError(f"must be at most {MAX_TASK_REF} characters, got {len(path)}")
    bad = UNSAFE_CHARS.search(path)
    if bad:
        raise ValueError(f"must not contain control characters (found U+{ord(bad.group()):04X})")
    if not path.endswith(".py"):
        raise ValueError(f"must be a Python file ending in .py, got {path!r}")
    check_relative_file(path, "a script")
    return path
