"""The public API, pinned (the shape of temporal's ``test_client_exports.py``): what
``import hpcopt`` and ``import hpcopt_server`` offer is exactly this list, each name
imports, and every error a script may catch is an ``hpcopt.Error``. A name added or
removed by accident fails here; one added on purpose is added to the pin, with a line
in the changelog."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest

import hpcopt
import hpcopt.errors
from tests.helpers.env import ROOT, scaled

CLIENT = [
    "Action",
    "ActiveTrial",
    "Agent",
    "AgentClient",
    "ApiError",
    "Assignment",
    "Campaign",
    "CampaignSpec",
    "CampaignState",
    "CheckpointRefused",
    "Client",
    "CurvePoint",
    "DocumentError",
    "Error",
    "Fold",
    "Lease",
    "OptionError",
    "Page",
    "ParetoFront",
    "PlanError",
    "ServerFileError",
    "SpecError",
    "Trial",
    "TrialEvent",
    "TrialPruned",
    "TrialState",
    "TrialStopped",
    "__version__",
    "parse_spec",
]
SERVER = ["Study", "TrialPruned"]


@pytest.mark.parametrize(("module", "pinned"), [("hpcopt", CLIENT), ("hpcopt_server", SERVER)])
def test_the_public_names_are_the_pinned_ones(module: str, pinned: list[str]) -> None:
    m = importlib.import_module(module)
    assert sorted(m.__all__) == sorted(pinned), f"{module}.__all__ changed: {sorted(set(m.__all__) ^ set(pinned))}"
    for name in pinned:
        assert getattr(m, name, None) is not None, f"{module}.{name} does not import"
    typing_names = {"annotations", "TYPE_CHECKING", "Any"}  # a lazy module's own imports
    public = {n for n in vars(m) if not n.startswith("_") and not inspect.ismodule(getattr(m, n))} - typing_names
    assert public <= set(pinned), f"{module} offers names outside __all__: {sorted(public - set(pinned))}"


def test_every_error_a_script_may_catch_is_an_hpcopt_error() -> None:
    errors = [c for _, c in inspect.getmembers(hpcopt.errors, inspect.isclass) if issubclass(c, BaseException)]
    assert len(errors) >= 10
    for cls in errors:
        assert issubclass(cls, hpcopt.Error), cls
        assert getattr(hpcopt, cls.__name__) is cls, f"hpcopt.{cls.__name__} is not exported"
    # The built-in bases they had stay, so code that caught those still catches them.
    assert issubclass(hpcopt.SpecError, ValueError) and issubclass(hpcopt.TrialStopped, RuntimeError)
    import hpcopt_server

    assert hpcopt_server.TrialPruned is hpcopt.TrialPruned


def test_a_script_catches_a_refused_call_as_hpcopt_error(tmp_path: Path) -> None:
    from hpcopt_server.embedded import LocalChannel
    from hpcopt_server.local import LocalServer

    with LocalServer.open(f"sqlite:///{tmp_path / 'api.db'}") as server:
        client = hpcopt.Client("embedded", channel=LocalChannel(server.service), timeout=scaled(30))
        with client as c, pytest.raises(hpcopt.Error) as err:
            c.get_campaign(12345)
        assert isinstance(err.value, hpcopt.ApiError) and err.value.code == "NOT_FOUND"


def test_old_module_paths_are_the_moved_modules_and_say_where_they_went() -> None:
    from hpcopt._moved import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}"):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
    # A name imported from an old path is the new one (state and monkeypatches are shared).
    sys.modules.pop("hpcopt.spec", None)
    with pytest.warns(DeprecationWarning):
        from hpcopt.spec import parse_spec  # type: ignore[import-not-found]
    assert parse_spec is hpcopt.parse_spec
    # An old name read as the package's attribute, as `import hpcopt; hpcopt.planner.X` did.
    sys.modules.pop("hpcopt.planner", None)
    vars(hpcopt).pop("planner", None)
    with pytest.warns(DeprecationWarning, match="hpcopt.planner moved to hpcopt.core.planner"):
        assert hpcopt.planner.Layout is importlib.import_module("hpcopt.core.planner").Layout
    # Nothing in the tree imports an old path: the warning is for users only.
    assert not [m for m in MOVED if (ROOT / "client" / (m.replace(".", "/") + ".py")).exists()]
