"""Parallelism schemes, by the name a campaign's ``training.scheme`` uses."""

from __future__ import annotations

from typing import Any

from hpcopt.core.schemes import may_run_as, runs_as
from hpcopt_agent.comm import Comms
from hpcopt_agent.schemes.allreduce import AllReduce
from hpcopt_agent.schemes.base import Placement, Roles, Scheme, Stop, StopVote
from hpcopt_agent.schemes.daso import DASO
from hpcopt_agent.schemes.horovod import HorovodAllReduce
from hpcopt_agent.schemes.pipeline import Pipeline
from hpcopt_agent.schemes.ps import EASGD, GEM, Downpour
from hpcopt_agent.settings import SettingsError, TrainingSettings
from hpcopt_agent.task import Task

SCHEMES: dict[str, type[Scheme]] = {
    s.name: s for s in (AllReduce, HorovodAllReduce, DASO, Pipeline, Downpour, EASGD, GEM)
}


def check_scheme(name: str) -> type[Scheme]:
    try:
        return SCHEMES[name]
    except KeyError:
        raise SettingsError(
            f"training.scheme: {name!r} is not available in this agent release; available: {', '.join(SCHEMES)}"
        ) from None


def check_task(name: str, task: Task) -> None:
    """What a scheme cannot train, refused when the agent starts."""
    if not check_scheme(name).accepts(task):
        raise SettingsError(
            f"training.scheme: {name} runs the task's loss through its schedule, so it cannot use the custom "
            f"train_step of {type(task).__name__}; drop the override (the default step is forward, loss, "
            "backward, step) or use another scheme"
        )


def make_scheme(name: str, comms: Comms, knobs: dict[str, Any], epochs: int, timeout: float = 300.0) -> Scheme:
    """A scheme for one fold of one trial (collective over the fold group); a knob may
    hand ``name`` to another scheme (``hpcopt.core.schemes.runs_as``)."""
    return check_scheme(runs_as(name, knobs))(comms, knobs, epochs, timeout)


def uses_horovod(settings: TrainingSettings) -> bool:
    """Whether a trial of the campaign may train with Horovod (then the agent
    initializes it at start)."""
    found = may_run_as(settings.schemes, settings.scheme_options, settings.param_names)
    return any(SCHEMES[s].traits.horovod for s in found if s in SCHEMES)


__all__ = [
    "SCHEMES",
    "Placement",
    "Roles",
    "Scheme",
    "Stop",
    "StopVote",
    "check_scheme",
    "check_task",
    "make_scheme",
    "uses_horovod",
]
