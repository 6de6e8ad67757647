"""hpcopt: the wire protocol, the Python client and the ``hpcopt`` CLI. Every error it
raises on purpose is an ``hpcopt.Error`` (``hpcopt.errors``)."""

from hpcopt import _moved
from hpcopt.asktell import ActiveTrial
from hpcopt.client import AgentClient, Client
from hpcopt.core.records import (
    Action,
    Agent,
    Assignment,
    Campaign,
    CampaignState,
    CurvePoint,
    Fold,
    Lease,
    Page,
    ParetoFront,
    Trial,
    TrialEvent,
    TrialState,
)
from hpcopt.core.spec import CampaignSpec, parse_spec
from hpcopt.errors import (
    ApiError,
    CheckpointRefused,
    DocumentError,
    Error,
    OptionError,
    PlanError,
    ServerFileError,
    SpecError,
    TrialPruned,
    TrialStopped,
)

__version__ = "0.1.0"

_moved.install()  # old module paths (hpcopt.spec, hpcopt.records, ...) keep working, deprecated


def __getattr__(name: str) -> object:
    # ``import hpcopt; hpcopt.records.Trial`` worked while the package imported its
    # modules by their old names: an old name is the moved module, with the warning.
    if f"hpcopt.{name}" in _moved.MOVED:
        import importlib

        return importlib.import_module(f"hpcopt.{name}")
    raise AttributeError(f"module 'hpcopt' has no attribute {name!r}")


__all__ = [
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
