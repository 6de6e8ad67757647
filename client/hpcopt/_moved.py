"""Old import paths of modules that moved, kept working with a DeprecationWarning:
``import hpcopt.spec`` gives the very module ``hpcopt.core.spec`` is (so state and
monkeypatches are shared), and says where it lives now. One import hook, installed by
``hpcopt/__init__.py``, rather than a stub file per old name."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

#: Old module path -> where it lives now (moved in 0.2: the shared core and the CLI).
MOVED = {
    **{
        f"hpcopt.{m}": f"hpcopt.core.{m}"
        for m in (
            "names",
            "options",
            "schemes",
            "planner",
            "records",
            "spec",
            "documents",
            "specfile",
            "taskref",
            "training",
            "checkpoints",
            "serverfile",
            "taskfile",
        )
    },
    "hpcopt.cliutil": "hpcopt.cli.util",
    "hpcopt.plancli": "hpcopt.cli.plan",
    "hpcopt.tables": "hpcopt.cli.tables",
    "hpcopt.views": "hpcopt.cli.views",
    "hpcopt.watch": "hpcopt.cli.watch",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old path goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the module it stands for is loaded already


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
