"""hpcopt: the wire protocol, the Python client and the ``hpcopt`` CLI."""

from hpcopt.asktell import ActiveTrial, TrialStopped
from hpcopt.client import AgentClient, ApiError, Client, lease_of, param_values
from hpcopt.records import Campaign, Trial
from hpcopt.spec import CampaignSpec, SpecError, parse_spec

__version__ = "0.1.0"

__all__ = [
    "ActiveTrial",
    "AgentClient",
    "ApiError",
    "Campaign",
    "CampaignSpec",
    "Client",
    "SpecError",
    "Trial",
    "TrialStopped",
    "__version__",
    "lease_of",
    "param_values",
    "parse_spec",
]
