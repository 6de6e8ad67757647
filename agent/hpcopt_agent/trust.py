"""Which code an agent runs is its owner's decision, not the campaign's.

A campaign names its task in ``training.task``; anyone with a submit token writes it.
The agent imports that code as its own user, so it runs a task only if its own
configuration allows it:

- a file task ``path/to/file.py:Name`` only if the file, with every symbolic link
  resolved, lies under the task root (``--task-root``, default: the directory the agent
  was started in); a relative path is read from the task root;
- a module task ``package.module:Name`` only if the module is named by an
  ``--allow-module PREFIX`` (the module itself or one under it), or if its top-level
  package or module lies under the task root (``tests.agent.tasks`` run from a
  checkout) and outside the environment's installed packages (a virtual environment
  inside the project). Installed packages and the standard library are not allowed by default:
  importing one by name can run code its authors never meant to be run that way
  (``os:abort``, ``sys:exit`` and ``this:s`` each stopped an agent);
- and ``Name`` must be a Task subclass, a Task instance, or a function defined in that
  module: the agent calls nothing else (``os:abort`` was a function it called).

An explicit ``--task`` on the agent's own command line is its owner's choice and is
loaded as given. A refused task stops the agent before it takes a trial; it tells the
server why (the campaign's agents list shows it).
"""

from __future__ import annotations

import importlib.util
import site
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcopt.core.taskref import TaskRef


def _installed_dirs() -> list[Path]:
    """The directories installed packages and the standard library live in."""
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    dirs = {sysconfig.get_paths()[n] for n in names} | set(site.getsitepackages()) | {site.getusersitepackages()}
    return [Path(d).resolve() for d in dirs if d]


class TaskRefused(ValueError):
    """A task this agent's configuration does not allow, with the reason."""


@dataclass(frozen=True)
class TaskPolicy:
    """What this agent may run: files under ``root``, modules under ``modules``' prefixes
    or under ``root``."""

    root: Path
    modules: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, root: Path | None, modules: Sequence[str] = ()) -> TaskPolicy:
        for prefix in modules:
            if not prefix or not all(p.isidentifier() for p in prefix.split(".")):
                raise ValueError(f"--allow-module must be a dotted module name, got {prefix!r}")
        base = (root or Path.cwd()).resolve()
        if not base.is_dir():
            raise ValueError(f"--task-root {base} is not a directory")
        return cls(base, tuple(modules))

    def describe(self) -> str:
        mods = ", ".join(self.modules) if self.modules else "none"
        return f"task root {self.root}; modules allowed by --allow-module: {mods}"

    def file(self, ref: TaskRef) -> Path:
        """The task file, resolved; TaskRefused if it lies outside the root."""
        assert ref.file is not None
        path = (self.root / ref.file).resolve()
        if not path.is_relative_to(self.root):
            raise TaskRefused(
                f"training.task {str(ref)!r}: {ref.file} resolves to {path}, outside this agent's task root "
                f"{self.root} (--task-root)"
            )
        return path

    def _owned(self, place: Path) -> bool:
        """Under the task root, and not in an environment's installed packages (a
        virtual environment inside the project directory holds torch, os's kin)."""
        real = place.resolve()
        return real.is_relative_to(self.root) and not any(real.is_relative_to(p) for p in _installed_dirs())

    def module(self, ref: TaskRef) -> str:
        """The module name, if allowed; TaskRefused otherwise. Only the top-level name is
        looked up (``find_spec`` of a top-level name runs none of its code)."""
        name = ref.module
        assert name is not None
        if any(name == p or name.startswith(p + ".") for p in self.modules):
            return name
        top = name.split(".", 1)[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        places = [spec.origin] if spec is not None and spec.origin not in (None, "built-in", "frozen") else []
        if spec is not None and spec.submodule_search_locations:
            places = list(spec.submodule_search_locations)
        if places and all(self._owned(Path(p)) for p in places):
            return name
        where = f" (found at {places[0]})" if places else ""
        raise TaskRefused(
            f"training.task {str(ref)!r}: module {name!r}{where} is not allowed by this agent: it is not the "
            f"project's own code (under its task root {self.root}, outside installed packages) and no --allow-module "
            "names it"
        )
