"""Parallelism schemes, by the name a campaign's ``training.scheme`` uses."""

from __future__ import annotations

from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.allreduce import AllReduce
from hpcopt_agent.schemes.base import Scheme
from hpcopt_agent.settings import SettingsError

SCHEMES: dict[str, type[Scheme]] = {AllReduce.name: AllReduce}


def check_scheme(name: str) -> type[Scheme]:
    try:
        return SCHEMES[name]
    except KeyError:
        raise SettingsError(
            f"training.scheme: {name!r} is not available in this agent release; available: {', '.join(SCHEMES)}"
        ) from None


def make_scheme(name: str, comms: Comms) -> Scheme:
    return check_scheme(name)(comms)


__all__ = ["SCHEMES", "Scheme", "check_scheme", "make_scheme"]
