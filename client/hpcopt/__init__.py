"""hpcopt: the wire protocol, the Python client and the ``hpcopt`` CLI."""

from hpcopt.asktell import ActiveTrial, TrialStopped
from hpcopt.client import AgentClient, ApiError, Client
from hpcopt.records import (
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
from hpcopt.spec import CampaignSpec, SpecError, parse_spec

__version__ = "0.1.0"

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
    "Client",
    "CurvePoint",
    "Fold",
    "Lease",
    "Page",
    "ParetoFront",
    "SpecError",
    "Trial",
    "TrialEvent",
    "TrialState",
    "TrialStopped",
    "__version__",
    "parse_spec",
]
