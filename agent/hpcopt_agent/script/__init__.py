"""Script tasks (``training.task: {script: train.py, args: [...]}``): the agent starts
the user's own training script once per fold on the fold group's ranks (``fold.py``),
with ``torchrun``'s environment; the script talks to it through
:mod:`hpcopt_agent.trial` over a socket pair (``channel.py``)."""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcopt.core.taskref import parse_script_path
from hpcopt_agent.trust import TaskPolicy, TaskRefused


@dataclass(frozen=True)
class Script:
    """A script the agent's owner allows: its resolved path and argument templates."""

    path: Path
    args: tuple[str, ...] = ()

    def describe(self) -> str:
        return " ".join([str(self.path), *self.args])

    def command(self, values: dict[str, Any]) -> list[str]:
        """The arguments with ``{name}`` filled from ``values`` (the trial's parameters
        and the fold's fields); each argument stays one argument, never a shell word."""
        out = []
        for arg in self.args:
            try:
                out.append(string.Formatter().vformat(arg, (), values))
            except (KeyError, IndexError) as exc:
                raise ValueError(f"training.task.args: {arg!r} names {exc}, which this trial does not have") from None
        return out


def load_script(path: str, args: tuple[str, ...], policy: TaskPolicy | None) -> Script:
    """The script at ``path``: under the task root when the campaign named it (``policy``),
    the working directory when the agent's owner did. Raises TaskRefused or ValueError."""
    try:
        parse_script_path(path)
    except ValueError as exc:
        raise ValueError(f"training.task.script {path!r}: {exc}") from None
    if policy is None:
        found = (Path.cwd() / path).resolve()
    else:
        found = (policy.root / path).resolve()
        if not found.is_relative_to(policy.root):
            raise TaskRefused(
                f"training.task.script {path!r} resolves to {found}, outside this agent's task root {policy.root} "
                "(--task-root)"
            )
    if not found.is_file():
        raise ValueError(f"training.task.script: no file {found}")
    return Script(found, args)


__all__ = ["Script", "load_script"]
