"""The pruner interface: early stopping decided by the server, where a trial's
intermediate values (``ReportIntermediate``: fold, epoch, value) and fold results
(``ReportFold``) arrive.

A pruner is pure numerics, like an optimizer: it reads the campaign's history through
:class:`History` (the service implements it on a SQL transaction, so every server
replica decides from the same data) and answers ``None`` (go on) or a :class:`Verdict`.
The service then moves the trial to PRUNED with the verdict's value and reason in the
same transaction, and the agent stops at its next report or heartbeat.

Values handed to a pruner are as reported; :meth:`Pruner.loss` turns them into losses
(lower is better) for either direction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from hpcopt.core.options import Option, unknown
from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import read_option


class History(Protocol):
    """What a pruner may read about its campaign (as reported, not as losses)."""

    def values_at(self, fold: int, step: int, states: Sequence[d.TrialState]) -> dict[int, float]:
        """{trial id: value} of the trials in ``states`` that reported (fold, step)."""
        ...

    def curve(self, trial_id: int, fold: int) -> list[tuple[int, float]]:
        """(step, value) points of one trial's fold, by step."""
        ...

    def completed_folds(self) -> dict[int, tuple[int, list[float]]]:
        """{trial id: (number, its K fold values by fold index)} of COMPLETED trials."""
        ...


@dataclass(frozen=True)
class PrunerProblem:
    direction: str  # "minimize" | "maximize"
    folds: int
    options: dict[str, Any] = field(default_factory=dict)
    metric: str = "value"
    epochs: int = 0  # training.epochs: epochs per fold (0: unknown, a script campaign)


@dataclass(frozen=True)
class Verdict:
    """Prune: ``value`` is stored as the pruned trial's value (what it reached), and
    ``reason`` says why, in words a user reads on the trial's page."""

    value: float
    reason: str


class Pruner(ABC):
    #: The options this pruner accepts (anything else is refused by name).
    OPTIONS: ClassVar[dict[str, Option]] = {}

    def __init__(self, problem: PrunerProblem):
        self.problem = problem
        self.sign = 1.0 if problem.direction == "minimize" else -1.0
        unknown(problem.options, self.OPTIONS, "options", "this pruner")

    def loss(self, value: float) -> float:
        return self.sign * value

    def option(self, name: str, default: Any = None) -> Any:
        """``pruner.options[name]`` checked against the class's declaration (or its
        default; ``default`` where the declaration's is worked out from the campaign)."""
        return read_option(self.problem.options, self.OPTIONS, name, default)

    @abstractmethod
    def at_step(self, history: History, trial: d.Trial, fold: int, step: int, value: float) -> Verdict | None:
        """After the trial reported ``value`` at (fold, step), stored already."""

    def at_fold(self, history: History, trial: d.Trial) -> Verdict | None:
        """After one of the trial's folds finished (``trial.folds`` includes it), while
        others remain."""
        return None


class NoPruner(Pruner):
    """``pruner: none`` (the default): every trial trains all its folds and epochs."""

    def at_step(self, history: History, trial: d.Trial, fold: int, step: int, value: float) -> Verdict | None:
        return None


def fmt(value: float) -> str:
    return f"{value:.4g}"
