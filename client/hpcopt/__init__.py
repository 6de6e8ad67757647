"""hpcopt: the wire protocol, the Python client and the ``hpcopt`` CLI."""

from hpcopt.client import AgentClient, ApiError, Client, lease_of, param_values
from hpcopt.spec import CampaignSpec, SpecError, parse_spec

__version__ = "0.1.0"

__all__ = [
    "AgentClient",
    "ApiError",
    "CampaignSpec",
    "Client",
    "SpecError",
    "__version__",
    "lease_of",
    "param_values",
    "parse_spec",
]
