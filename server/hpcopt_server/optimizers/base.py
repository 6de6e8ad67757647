"""The optimizer interface every algorithm implements.

Life cycle, per campaign, inside the server's optimizer cache
(``service/suggestions.py``):

1. ``factory(problem)`` builds the optimizer when a campaign first needs a suggestion
   (or after a server restart). It raises ``ValueError`` naming a bad option
   (``"options.n_initial must be >= 1"``); campaign creation builds one to check.
2. ``observe(trials)`` feeds finished trials the optimizer has not seen yet, in the order
   they finished. It is called with every new batch, possibly empty; a stateful
   optimizer (GP, EA) updates its state incrementally here.
3. ``suggest(n, pending)`` returns ``n`` parameter sets. ``pending`` holds the
   parameters of trials that are queued or running, so concurrent suggestions can be
   kept apart. The optimizer must not assume it sees every suggestion it made come back:
   trials can be cancelled, and another server replica may have made suggestions.

Both are called with the campaign's row lock held, so one optimizer instance is never
used by two threads at once. Example::

    opt = RandomSearch(Problem(space, "minimize", seed=0, options={}))
    opt.observe(finished_trials)
    [params] = opt.suggest(1, pending=[t.params for t in running])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hpcopt.core.options import Option, unknown
from hpcopt_server import domain as d
from hpcopt_server.optimizers.encoding import Encoder
from hpcopt_server.optimizers.feasibility import Feasibility
from hpcopt_server.optimizers.space import SearchSpace


@dataclass(frozen=True)
class Problem:
    """What an optimizer is built from."""

    space: SearchSpace
    direction: str  # "minimize" | "maximize"
    seed: int
    options: dict[str, Any] = field(default_factory=dict)
    folds: int = 1  # K: a trial's value_std / sqrt(K) is the standard error of its value
    budget: int = 0  # the campaign's max_trials (0: unknown), for schedules that end with it
    #: The direction of each objective of a multi-objective campaign (empty: one
    #: objective, ``direction``). Trials then carry ``values``, one per objective.
    directions: tuple[str, ...] = ()
    #: ``training.epochs`` (0: the campaign has no training section: trials are
    #: evaluated by the client, ask/tell), ``budget.max_parallel`` and the pruner's name,
    #: for algorithms that schedule training themselves (PBT).
    epochs: int = 0
    max_parallel: int = 0
    pruner: str = "none"
    #: The spec's ``constraints`` (``hpcopt.core.constraints``): the optimizer's
    #: ``feasibility`` models them (empty: none).
    constraints: tuple[dict[str, Any], ...] = ()

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1


class Optimizer(ABC):
    pending_params = True
    """Whether ``suggest`` looks at the pending trials' parameters; False: only at how
    many there are (the server then passes that many empty dicts)."""

    plans = False
    """Whether the server calls :meth:`plan` (with the pending trials themselves, lineage
    included) instead of ``suggest``: an algorithm that continues trials (PBT)."""

    pauses = False
    """With ``plans``: whether :meth:`plan` also gets the campaign's PAUSED trials (a
    multi-fidelity searcher promotes them)."""

    models_constraints = False
    """Whether ``suggest`` weighs the constraint models itself (bo's constrained EI);
    False: the server screens its suggestions (``feasibility.screen``)."""

    #: The options this algorithm accepts (anything else is refused by name). Every
    #: numeric option has a ``high`` bound too where its cost grows with it: a request
    #: must not buy unbounded work.
    OPTIONS: ClassVar[dict[str, Option]] = {}

    def __init__(self, problem: Problem):
        self.problem = problem
        self.space = problem.space
        self.direction = problem.direction
        self.seed = problem.seed
        self.options = dict(problem.options)
        unknown(self.options, self.OPTIONS, "options", "this algorithm")
        #: The constraint models (None without constraints), fed by :meth:`feed`.
        self.feasibility = (
            Feasibility(Encoder(self.space), problem.constraints, problem.seed) if problem.constraints else None
        )

    def feed(self, trials: Sequence[d.Trial]) -> None:
        """Finished trials to the constraint models, then to :meth:`observe`: what the
        server calls."""
        if self.feasibility is not None:
            self.feasibility.observe(trials)
        self.observe(trials)

    def option(self, name: str, default: Any = None) -> Any:
        """``algorithm.options[name]`` checked against the class's declaration (or its
        default; ``default`` where the declaration's is worked out from the campaign)."""
        return read_option(self.options, self.OPTIONS, name, default)

    def settle(self) -> None:  # noqa: B027 - a hook with nothing to do by default
        """Waits for work this optimizer runs in the background (none unless it says so):
        the embedded mode leaves no thread behind when it closes."""

    @abstractmethod
    def observe(self, trials: Sequence[d.Trial]) -> None:
        """Takes finished trials (any finished state; ``value`` set for COMPLETED)."""

    @abstractmethod
    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        """Returns ``n`` parameter sets, valid in the search space."""

    def alternative(self, k: int, pending: Sequence[d.Params]) -> d.Params:
        """The ``k``-th configuration to try in place of a suggestion the constraint
        models deem likely infeasible (``feasibility.screen``), given the pending ones
        (the suggestions made so far among them). It draws from a stream of its own, so
        the next suggestion does not repeat it."""
        return self.suggest(1, [*pending, *([{}] * (k + 1))])[0]

    def plan(self, n: int, pending: Sequence[d.Trial]) -> list[d.Suggestion]:
        """With ``plans``: at most ``n`` suggestions, each with its lineage, given the
        campaign's QUEUED and RUNNING trials; fewer (or none) when nothing is ready."""
        return [d.Suggestion(p) for p in self.suggest(n, [t.params for t in pending])]

    def replan(self, trial: d.Trial, pending: Sequence[d.Trial]) -> d.Suggestion | None:
        """With ``plans``: what the running ``trial`` trains instead, now that its agent
        could not read the parents in its lineage's ``unreadable``; None: nothing else."""
        return None


OptimizerFactory = Callable[[Problem], Optimizer]


def read_option(options: dict[str, Any], declared: dict[str, Option], name: str, default: Any = None) -> Any:
    """``options[name]`` (or the default) checked by its declaration; OptionError
    ("options.<name>: must be ...") otherwise. Optimizers and pruners use it."""
    option = declared[name]
    value = options.get(name, option.default if default is None else default)
    return option.check(f"options.{name}", value)


def exhausted(trial: d.Trial) -> bool:
    """A trial that failed (or was never started) because it exhausted a constrained
    resource: infeasible, and no evidence about the objective."""
    return trial.state == d.TrialState.FAILED and trial.violation is not None and trial.violation > 0


def to_minimize(trial: d.Trial, direction: str) -> float | None:
    """A COMPLETED trial's value as a loss (negated when maximizing); None otherwise."""
    if trial.state != d.TrialState.COMPLETED or trial.value is None:
        return None
    return trial.value if direction == "minimize" else -trial.value


def loss_vector(trial: d.Trial, directions: Sequence[str]) -> list[float] | None:
    """A COMPLETED multi-objective trial's values as losses (maximized ones negated);
    None otherwise."""
    if trial.state != d.TrialState.COMPLETED or trial.values is None or len(trial.values) != len(directions):
        return None
    return [v if dr == "minimize" else -v for v, dr in zip(trial.values, directions, strict=True)]


def pruned_loss(trial: d.Trial, direction: str) -> float | None:
    """A PRUNED trial's value (what it reached when it was stopped) as a loss; None
    otherwise. It is an optimistic reading for a trial the pruner judged bad: each
    optimizer documents how it uses it."""
    if trial.state != d.TrialState.PRUNED or trial.value is None:
        return None
    return trial.value if direction == "minimize" else -trial.value
