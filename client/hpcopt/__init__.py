"""hpcopt: the wire protocol, the Python client and the ``hpcopt`` CLI."""

from hpcopt.spec import CampaignSpec, SpecError, parse_spec

__version__ = "0.1.0"

__all__ = ["CampaignSpec", "SpecError", "__version__", "parse_spec"]
