"""Parallelism schemes, by the name a campaign's ``training.scheme`` uses."""

from __future__ import annotations

from typing import Any

from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.allreduce import AllReduce
from hpcopt_agent.schemes.base import Scheme, StopVote
from hpcopt_agent.schemes.daso import DASO
from hpcopt_agent.schemes.rules import EASGD, GEM, Downpour
from hpcopt_agent.settings import SettingsError

SCHEMES: dict[str, type[Scheme]] = {s.name: s for s in (AllReduce, DASO, Downpour, EASGD, GEM)}


def check_scheme(name: str) -> type[Scheme]:
    try:
        return SCHEMES[name]
    except KeyError:
        raise SettingsError(
            f"training.scheme: {name!r} is not available in this agent release; available: {', '.join(SCHEMES)}"
        ) from None


def make_scheme(name: str, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> Scheme:
    """A scheme for one fold of one trial (collective over the fold group)."""
    return check_scheme(name)(comms, knobs, epochs, timeout)


__all__ = ["SCHEMES", "Scheme", "StopVote", "check_scheme", "make_scheme"]
