"""The campaign spec: what a user submits, validated in one place for every front door.

A spec is a YAML or JSON document::

    name: digits-mlp
    objective: {metric: val_loss, direction: minimize}
    # or, for a multi-objective campaign (the first one is also `objective`):
    # objectives: [{metric: val_loss}, {metric: train_seconds, direction: minimize}]
    space:
      lr:      {type: real, low: 1.0e-4, high: 0.1, scale: log}
      width:   {type: int, low: 16, high: 256, scale: log}
      act:     {type: categorical, choices: [relu, tanh]}
    algorithm: {name: random, seed: 0}
    pruner: {name: fold, options: {within: {name: asha}}}
    warm_start: {campaigns: [3]}
    budget: {max_trials: 50, max_parallel: 4}
    folds: 5
    training: {task: "examples/digits/task.py:task", scheme: allreduce,
               ranks_per_fold: 1, epochs: 20, options: {}}
    max_attempts: 3

The REST API, the gRPC API and the CLI all call :func:`parse_spec`, so a bad spec gets
the same error everywhere: a list of ``(field path, message)`` pairs such as
``("space.lr.low", "must be > 0 for a log scale")``.
"""

from __future__ import annotations

import json
import math
import re
import string
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, get_args

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from hpcopt.core import analysis
from hpcopt.core.closest import did_you_mean
from hpcopt.core.constraints import MAX_CONSTRAINTS, RESOURCES
from hpcopt.core.documents import UNSAFE_CHARS, check_values, clip
from hpcopt.core.names import ALGORITHMS, PRUNERS, SCHEME_CHOICES
from hpcopt.core.schemes import TRAITS, Traits, check_space_knobs, expand_search, may_run_as
from hpcopt.core.target import METRICS as TARGET_METRICS
from hpcopt.core.taskref import parse_script_path, parse_task_ref
from hpcopt.core.training import check_options
from hpcopt.errors import DocumentError, OptionError, SpecError

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$"

if TYPE_CHECKING:
    AlgorithmName: TypeAlias = str
    PrunerName: TypeAlias = str
    SchemeName: TypeAlias = str
else:  # literals built from the one list of each (hpcopt.core.names): the same checks and messages
    AlgorithmName = Literal[ALGORITHMS]
    PrunerName = Literal[PRUNERS]
    SchemeName = Literal[SCHEME_CHOICES]

# Limits that bound what one campaign costs the server (README: "Security and limits").
#: Parameters in a space: each one is a coordinate of every GP and EA computation.
MAX_DIMENSIONS = 100
#: Choices of one categorical parameter (each is a one-hot coordinate for the GP).
MAX_CHOICES = 1000
#: Longest string choice, metric, task reference.
MAX_TEXT = 256
#: Integer bounds stay exactly representable as floats (the optimizers work in floats).
MAX_INT = 2**53
#: The canonical JSON of a whole spec; it is stored once and sent with every Acquire.
MAX_SPEC_BYTES = 64 * 1024

ParamName = Annotated[str, Field(pattern=NAME_PATTERN)]


def _plain(text: str) -> str:
    """Refuses control characters (ANSI escapes, CR/LF, bidirectional overrides): the
    text reaches terminals, logs and the dashboard."""
    bad = UNSAFE_CHARS.search(text)
    if bad:
        raise ValueError(
            f"must not contain control characters (found U+{ord(bad.group()):04X}: C0/C1 controls, DEL and "
            "bidirectional overrides are refused)"
        )
    return text


PlainText = Annotated[str, AfterValidator(_plain)]
Choice = (
    bool | Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)] | float | Annotated[PlainText, Field(max_length=MAX_TEXT)]
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Param(_Strict):
    #: Active only when every named categorical parameter takes one of the listed values
    #: (``when: {optimizer: [sgd]}``); an inactive parameter is absent from the trial.
    when: dict[ParamName, list[Choice]] | None = Field(default=None, min_length=1, max_length=8)


class RealParam(_Param):
    """A float in [low, high]; ``scale: log`` searches log(low)..log(high)."""

    type: Literal["real"]
    low: float
    high: float
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _bounds(self) -> RealParam:
        _check_bounds(self.low, self.high, self.scale)
        return self


class IntParam(_Param):
    """An integer in [low, high], both included."""

    type: Literal["int"]
    low: int = Field(ge=-MAX_INT, le=MAX_INT)
    high: int = Field(ge=-MAX_INT, le=MAX_INT)
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _bounds(self) -> IntParam:
        _check_bounds(self.low, self.high, self.scale)
        return self


class CategoricalParam(_Param):
    """One of ``choices`` (strings, numbers or booleans; no duplicates)."""

    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1, max_length=MAX_CHOICES)

    @field_validator("choices", mode="before")
    @classmethod
    def _plain_strings(cls, value: Any) -> Any:
        if isinstance(value, list):  # checked before the union, whose errors would bury this one
            for c in value:
                if isinstance(c, str):
                    _plain(c)
        return value

    @model_validator(mode="after")
    def _unique(self) -> CategoricalParam:
        keys = [(type(c).__name__, c) for c in self.choices]
        if len(set(keys)) != len(keys):
            raise ValueError("choices must be distinct")
        return self


Param = Annotated[RealParam | IntParam | CategoricalParam, Field(discriminator="type")]


def _check_bounds(low: float, high: float, scale: str) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("low and high must be finite numbers")
    if low >= high:
        raise ValueError(f"low ({low}) must be smaller than high ({high})")
    if not math.isfinite(float(high) - float(low)):  # -1e308..1e308: the optimizers' arithmetic overflows
        raise ValueError(f"high - low must be a finite number, got {high} - ({low}), which overflows")
    if scale == "log" and low <= 0:
        raise ValueError(f"low ({low}) must be > 0 for scale: log")


class Objective(_Strict):
    """The figure of merit the agents report, and which way is better."""

    metric: PlainText = Field(min_length=1, max_length=MAX_TEXT)
    direction: Literal["minimize", "maximize"] = "minimize"


#: Objectives of one campaign: each is a dimension of the Pareto front.
MAX_OBJECTIVES = 4
#: Trials of a campaign with 3 or more objectives: its front costs O(n f) to compute
#: (f: the front's size), 0.6 s at 10,000 trials with 2,300 on the front, 2 s with all of
#: them; two objectives cost O(n log n) and have no such limit.
MAX_TRIALS_MANY_OBJECTIVES = 10_000


class Algorithm(_Strict):
    """The optimizer; ``options`` are passed to it (each optimizer documents its own)."""

    name: AlgorithmName = "random"
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    options: dict[str, Any] = Field(default_factory=dict)


class Budget(_Strict):
    """How many trials in all, and how many may run at once."""

    max_trials: int = Field(ge=1, le=1_000_000)
    max_parallel: int = Field(default=8, ge=1, le=100_000)
    curve_points_per_fold: int = Field(default=1000, ge=16, le=10_000)
    """Learning-curve points the server keeps per fold; past it, it thins the curve to
    about half (keeping its first, last and best points and its shape), so an agent that
    reports every step costs bounded storage and reads."""


class Pruner(_Strict):
    """Early stopping, decided by the server where intermediate values and fold results
    arrive; ``options`` are the pruner's own (each documents them; the server checks)."""

    name: PrunerName = "none"
    options: dict[str, Any] = Field(default_factory=dict)


class WarmStart(_Strict):
    """Earlier campaigns whose completed trials seed the optimizer (not the budget)."""

    campaigns: list[Annotated[int, Field(ge=1, le=2**31 - 1)]] = Field(min_length=1, max_length=100)


def _task_ref(text: str) -> str:
    parse_task_ref(text)
    return text


#: Arguments of a script task: at most this many, each at most MAX_TEXT characters.
MAX_SCRIPT_ARGS = 200
#: What a script's arguments may name besides the space's parameters (``{fold}``...).
SCRIPT_FIELDS = ("trial", "fold", "folds", "epochs", "params_file", "checkpoint_dir")


def _script_path(text: str) -> str:
    return parse_script_path(text)


def template_fields(arg: str) -> list[str]:
    """The ``{name}`` fields of one script argument (``{{`` and ``}}`` are literal
    braces); a ValueError for a field that is not a plain name (``{lr.real}``,
    ``{lr[0]}``, ``{lr!r}``, ``{lr:.3f}``) or unbalanced braces."""
    try:
        parts = list(string.Formatter().parse(arg))
    except ValueError as exc:
        raise ValueError(f"{arg!r}: {exc} (write {{{{ and }}}} for literal braces)") from None
    names = []
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ValueError(
                f"{arg!r}: a field is a plain name such as {{lr}}, got {{{name}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}}"
            )
        names.append(name)
    return names


def _script_arg(text: str) -> str:
    _plain(text)
    template_fields(text)
    return text


class ScriptTask(_Strict):
    """A training script the agent starts once per fold on the fold group's ranks, with
    the environment ``torchrun`` sets (docs: "Tune the code you already have")."""

    #: A ``.py`` file relative to the agent's task root (``--task-root``).
    script: Annotated[str, AfterValidator(_script_path)] = Field(min_length=1, max_length=MAX_TEXT)
    #: Its command-line arguments; ``{name}`` is filled with the trial's parameter (or
    #: one of :data:`SCRIPT_FIELDS`), ``{{``/``}}`` are literal braces.
    args: list[Annotated[str, AfterValidator(_script_arg)]] = Field(default_factory=list, max_length=MAX_SCRIPT_ARGS)


def _task_kind(value: Any) -> str:
    return "script" if isinstance(value, dict | ScriptTask) else "ref"


class Target(_Strict):
    """``training.target``: the value of a validation metric a fold must reach; the agent
    then reports how long it took (``hpcopt.core.target``)."""

    metric: PlainText = Field(min_length=1, max_length=MAX_TEXT)
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> Target:
        given = [b for b in (self.at_least, self.at_most) if b is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of at_least (a metric to raise, such as an accuracy) or at_most (one to "
                "lower, such as a loss)"
            )
        if not math.isfinite(given[0]):
            raise ValueError(f"the bound must be a finite number, got {given[0]}")
        if self.metric in TARGET_METRICS:
            raise ValueError(
                f"metric: {self.metric} is measured against the target; name a validation metric the task reports"
            )
        return self


class Constraint(_Strict):
    """One of ``constraints``: a bound on a metric's K-fold mean (``hpcopt.core.constraints``)."""

    metric: PlainText = Field(min_length=1, max_length=MAX_TEXT)
    max: float | None = None
    min: float | None = None
    #: The bound applies to mean + spread·std (max) or mean - spread·std (min) of the folds.
    spread: float = Field(default=0.0, ge=0.0, le=10.0)

    @model_validator(mode="after")
    def _one_bound(self) -> Constraint:
        given = [b for b in (self.max, self.min) if b is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of max (the metric must stay at or below it) or min (at or above it)")
        if not math.isfinite(given[0]):
            raise ValueError(f"the bound must be a finite number, got {given[0]}")
        return self


class Training(_Strict):
    """Settings the agent reads. The server checks the scheme's knobs and the layout
    they make (``hpcopt.core.schemes``) and stores the rest without interpreting it."""

    #: ``relative/path.py:Name`` (under the agent's task root) or ``package.module:Name``:
    #: a Task; or ``{script: train.py, args: [...]}``: a script. The agent runs either only
    #: if its owner allows it (``--task-root``, ``--allow-module``).
    task: Annotated[
        Annotated[Annotated[str, AfterValidator(_task_ref)], Field(min_length=1, max_length=MAX_TEXT), Tag("ref")]
        | Annotated[ScriptTask, Tag("script")],
        Discriminator(_task_kind),
    ]
    #: A scheme's name, or ``search``: the trial's ``scheme`` parameter picks it (what
    #: ``scheme: {search: {...}}`` is normalized into).
    scheme: SchemeName = "allreduce"
    #: Ranks that train one fold together; unset, the agent's planner chooses it from
    #: measured throughput (``--groups auto``); set, it is pinned.
    ranks_per_fold: int | None = Field(default=None, ge=1, le=1_000_000)
    epochs: int = Field(default=10, ge=1, le=1_000_000)
    options: dict[str, Any] = Field(default_factory=dict)
    #: A validation metric's value to reach: the agent reports each fold's seconds (and
    #: rank-seconds) to reach it, an objective like any metric; None: none.
    target: Target | None = None


class CampaignSpec(_Strict):
    """A whole campaign: the docs site's "Campaign spec" page explains each part."""

    name: Annotated[str, AfterValidator(_plain)] = Field(min_length=1, max_length=200)
    objective: Objective
    #: Two or more objectives: the campaign looks for their Pareto front. The first is
    #: also ``objective`` (what pruners, warm starts and single-value views use).
    objectives: list[Objective] | None = Field(default=None, min_length=2, max_length=MAX_OBJECTIVES)
    space: dict[ParamName, Param] = Field(min_length=1, max_length=MAX_DIMENSIONS)
    algorithm: Algorithm = Field(default_factory=Algorithm)
    pruner: Pruner = Field(default_factory=Pruner)
    warm_start: WarmStart | None = None
    budget: Budget
    folds: int = Field(default=1, ge=1, le=100)
    # None: the campaign is driven by a script (Client.trials); the MPI agent refuses it.
    training: Training | None = None
    max_attempts: int = Field(default=3, ge=1, le=100)
    #: After this many trials in a row failed the same way (the exception's type and the
    #: task's line, not the message), the server pauses the campaign and says why; 0:
    #: never. ``hpcopt resume`` goes on.
    pause_after_failures: int = Field(default=3, ge=0, le=1_000_000)
    #: The curvature and landscape of trained folds (``hpcopt.core.analysis``): Hessian
    #: eigenvalues and spectral density, loss surfaces; None: none.
    analysis: dict[str, Any] | None = None
    #: Bounds a trial's metrics must satisfy to be feasible (``hpcopt.core.constraints``).
    constraints: list[Constraint] = Field(default_factory=list, max_length=MAX_CONSTRAINTS)

    @model_validator(mode="before")
    @classmethod
    def _algorithm_shorthand(cls, data: Any) -> Any:
        # `algorithm: bo` and `pruner: asha` are accepted for `{name: bo}` and `{name: asha}`.
        if isinstance(data, dict) and isinstance(data.get("algorithm"), str):
            data = {**data, "algorithm": {"name": data["algorithm"]}}
        if isinstance(data, dict) and isinstance(data.get("pruner"), str):
            data = {**data, "pruner": {"name": data["pruner"]}}
        if isinstance(data, dict) and "objectives" in data and "objective" not in data:
            # `objectives` alone: the first is the objective (checked again after validation).
            listed = data["objectives"]
            if isinstance(listed, list) and listed:
                data = {**data, "objective": listed[0]}
        return data

    @model_validator(mode="after")
    def _objectives(self) -> CampaignSpec:
        if self.objectives is None:
            return self
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives: each metric may appear once")
        if self.objective != self.objectives[0]:
            raise ValueError("objective must be the first of objectives (or leave objective out)")
        if self.algorithm.name == "skopt":
            raise ValueError("algorithm.name: skopt optimizes one objective; use bo (ParEGO), ea (NSGA-II) or random")
        if self.pruner.name != "none":
            raise ValueError("pruner: a multi-objective campaign cannot prune (a pruned trial has no Pareto values)")
        if len(self.objectives) > 2 and self.budget.max_trials > MAX_TRIALS_MANY_OBJECTIVES:
            raise ValueError(
                f"budget.max_trials: a campaign with {len(self.objectives)} objectives may have at most "
                f"{MAX_TRIALS_MANY_OBJECTIVES:,} trials (its Pareto front costs O(trials x front) to compute); "
                "two objectives have no such limit"
            )
        return self


def _path(loc: tuple[int | str, ...]) -> str:
    # pydantic puts the union tag in the location (space.lr.real.low): drop it.
    if len(loc) > 2 and loc[0] == "space" and loc[2] in ("real", "int", "categorical"):
        loc = loc[:2] + loc[3:]
    if loc[:2] == ("training", "task") and len(loc) > 2 and loc[2] in ("ref", "script"):
        loc = loc[:2] + loc[3:]
    return ".".join(str(p) for p in loc)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through ``X | None`` and ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


_PARAMS: dict[str, type[BaseModel]] = {"real": RealParam, "int": IntParam, "categorical": CategoricalParam}


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The fields allowed where pydantic found an unknown one (``loc`` less its last part),
    for the error's "did you mean" and its list; [] where that cannot be said."""
    model: type[BaseModel] | None = CampaignSpec
    parts = list(loc[:-1])
    while parts and model is not None:
        head = parts.pop(0)
        if isinstance(head, int):  # an item of a list: the same model
            continue
        if model is CampaignSpec and head == "space":  # space.<name>.<type tag>
            if len(parts) < 2 or str(parts[1]) not in _PARAMS:
                return []
            model, parts = _PARAMS[str(parts[1])], parts[2:]
            continue
        if model is Training and head == "task":  # training.task.<tag>: a script's fields
            model, parts = ScriptTask, parts[1:]
            continue
        field = model.model_fields.get(str(head))
        model = None if field is None else _model_in(field.annotation)
    return [] if model is None else list(model.model_fields)


def parse_spec(data: Any) -> CampaignSpec:
    """Validates a spec document (already parsed from YAML/JSON).

    Raises :class:`SpecError` naming every offending field and what is allowed.
    """
    if not isinstance(data, dict):
        raise SpecError([("", f"a campaign spec must be a mapping, not {type(data).__name__}")])
    try:
        check_values(data, "spec")
        expanded = expand_search(data)
        spec = CampaignSpec.model_validate(expanded)
    except OptionError as exc:
        raise SpecError([(exc.field, exc.message)]) from None
    except DocumentError as exc:
        raise SpecError(exc.errors) from None
    except pydantic.ValidationError as exc:
        errors = []
        for err in exc.errors(include_url=False):
            msg = err["msg"]
            if err["type"] == "literal_error" and "expected" in err.get("ctx", {}):
                expected = str(err["ctx"]["expected"])
                msg = f"must be one of {expected}"
                if isinstance(err.get("input"), str):
                    msg += did_you_mean(err["input"], re.findall(r"'([^']*)'", expected))
            elif err["type"] == "extra_forbidden":
                known = _fields_at(err["loc"])
                msg = "unknown field" + (f"; allowed: {', '.join(known)}" if known else "")
                msg += did_you_mean(str(err["loc"][-1]), known)
            elif err["type"] == "union_tag_invalid":
                msg = "type must be one of 'real', 'int', 'categorical'"
            errors.append((_path(tuple(clip(str(p)) for p in err["loc"])), msg.removeprefix("Value error, ")))
        raise SpecError(errors) from None
    errors = _check_conditions(spec.space) + _check_script(spec) + _check_analysis(spec) + _check_target(spec)
    errors += _check_constraints(spec)
    if errors:
        raise SpecError(errors)
    # The whole size first: deeper checks then run on bounded input.
    size = len(json.dumps(spec_to_json_dict(spec)))
    if size > MAX_SPEC_BYTES:
        raise SpecError([("", f"the spec is {size} bytes as JSON; at most {MAX_SPEC_BYTES} are accepted")])
    space = {name: p.model_dump(mode="json") for name, p in spec.space.items()}
    if spec.training is not None:
        # The scheme's knobs, searched or fixed, and the rank layouts they make
        # (hpcopt.core.schemes), before any trial.
        t = spec.training
        try:
            check_space_knobs(space, t.scheme, t.options, t.ranks_per_fold)
            check_options(t.options, space["scheme"]["choices"] if t.scheme == "search" else [t.scheme])
        except OptionError as exc:
            field = exc.field
            if expanded is not data and field.startswith("space.") and field.count(".") == 2:
                field = "training.scheme.search." + field.removeprefix("space.")  # where the user wrote it
            raise SpecError([(field, exc.message)]) from None
    return spec


def _check_analysis(spec: CampaignSpec) -> list[tuple[str, str]]:
    """The analysis section's options and bounds; it needs the agent to hold the whole
    model: a ``Task`` (not a script), under a scheme that does not split it."""
    if spec.analysis is None:
        return []
    try:
        analysis.check(spec.analysis)
    except OptionError as exc:
        return [(exc.field, exc.message)]
    t = spec.training
    if t is None:
        return [("analysis", "needs training: the agent computes it on the folds it trains")]
    if isinstance(t.task, ScriptTask):
        return [("analysis", "needs a Task subclass: a script task (training.task.script) keeps its model to itself")]
    schemes = sorted(may_run_as(_schemes_of(spec), {}, ()))
    split = [s for s in schemes if TRAITS.get(s, Traits()).splits_model]
    if split:
        return [
            (
                "analysis",
                f"needs the whole model on each rank; scheme {split[0]} splits it into stages (take the "
                "analysis under allreduce, or leave it out)",
            )
        ]
    return []


def _check_target(spec: CampaignSpec) -> list[tuple[str, str]]:
    """An objective on the time to a target needs ``training.target``, and its direction
    is the one that is better (less time, more folds reaching it)."""
    listed = [(f"objectives.{i}", o) for i, o in enumerate(spec.objectives)] if spec.objectives else []
    errors = []
    for at, o in listed or [("objective", spec.objective)]:
        better = TARGET_METRICS.get(o.metric)
        if better is None:
            continue
        if spec.training is None or spec.training.target is None:
            errors.append(
                (
                    f"{at}.metric",
                    f"{o.metric} is measured against training.target, which is not set; add "
                    "training.target: {metric: <a validation metric>, at_least | at_most: <value>}",
                )
            )
        elif o.direction != better:
            errors.append(
                (
                    f"{at}.direction",
                    f"{o.metric} is better the {'less' if better == 'minimize' else 'more'}"
                    f": direction must be {better}",
                )
            )
    return errors


def _check_constraints(spec: CampaignSpec) -> list[tuple[str, str]]:
    """Each metric bounded once; a bound on a metric only a training run measures needs one."""
    errors = []
    seen: dict[str, int] = {}
    for i, c in enumerate(spec.constraints):
        if c.metric in seen:
            errors.append((f"constraints.{i}.metric", f"{c.metric} is already bounded by constraints.{seen[c.metric]}"))
        seen.setdefault(c.metric, i)
        if spec.training is None and c.metric in RESOURCES:
            errors.append(
                (
                    f"constraints.{i}.metric",
                    f"{c.metric} is measured by the agent that trains the trial, and this campaign has no "
                    "training section (its trials are told by a script): bound a metric the script reports",
                )
            )
    return errors


def _schemes_of(spec: CampaignSpec) -> tuple[str, ...]:
    t = spec.training
    if t is None:
        return ()
    if t.scheme != "search":
        return (t.scheme,)
    choices = spec.space.get("scheme")
    return tuple(str(c) for c in getattr(choices, "choices", ()))


def _check_script(spec: CampaignSpec) -> list[tuple[str, str]]:
    """A script task trains with allreduce, outside PBT, and its arguments name only the
    space's parameters and :data:`SCRIPT_FIELDS`."""
    t = spec.training
    if t is None or not isinstance(t.task, ScriptTask):
        return []
    errors = []
    if not TRAITS.get(t.scheme, Traits()).scripts:
        errors.append(
            (
                "training.scheme",
                f"a script task (training.task.script) trains with allreduce only, since the script owns its "
                f"training loop; got {t.scheme!r}. Write a Task subclass to use the other schemes",
            )
        )
    if spec.algorithm.name == "pbt":
        errors.append(
            (
                "algorithm.name",
                "pbt copies weights between trials through the agent's own checkpoints, which a script task "
                "(training.task.script) does not write; use a Task subclass, or another algorithm",
            )
        )
    known = [*spec.space, *SCRIPT_FIELDS]
    for i, arg in enumerate(t.task.args):
        for name in template_fields(arg):
            if name not in known:
                errors.append(
                    (
                        f"training.task.args.{i}",
                        f"{{{name}}} names no parameter of the space nor one of {', '.join(SCRIPT_FIELDS)}"
                        + did_you_mean(name, known),
                    )
                )
    return errors


def _check_conditions(space: dict[str, Any]) -> list[tuple[str, str]]:
    """``when`` names unconditional categorical parameters of the space and their choices
    (one level: a chain of conditions is not needed for scheme knobs or optimizer options
    and would make "active" a fixed point to compute)."""
    errors = []
    for name, p in space.items():
        for parent, values in (p.when or {}).items():
            at, q = f"space.{name}.when.{parent}", space.get(parent)
            if parent == name:
                errors.append((at, "a parameter cannot depend on itself"))
            elif q is None:
                errors.append((at, f"names no parameter of the space; parameters: {', '.join(space)}"))
            elif not isinstance(q, CategoricalParam):
                errors.append((at, f"must name a categorical parameter; {parent} is {q.type}"))
            elif q.when:
                errors.append(
                    (at, f"{parent} is itself conditional; conditions may name unconditional parameters only")
                )
            elif not values:
                errors.append((at, f"must list at least one of the choices of {parent}"))
            else:
                bad = [v for v in values if not any(type(v) is type(c) and v == c for c in q.choices)]
                if bad:
                    errors.append((at, f"{bad[0]!r} is not a choice of {parent}; choices: {q.choices}"))
    return errors


def spec_to_json_dict(spec: CampaignSpec) -> dict[str, Any]:
    """The canonical JSON form of a spec (defaults filled in; ``when`` only where set)."""
    out = spec.model_dump(mode="json")
    for p in out["space"].values():
        if p.get("when") is None:
            p.pop("when", None)
    if out.get("warm_start") is None:
        out.pop("warm_start", None)
    if out.get("objectives") is None:
        out.pop("objectives", None)
    if out.get("analysis") is None:
        out.pop("analysis", None)
    if not out.get("constraints"):
        out.pop("constraints", None)
    else:
        for c in out["constraints"]:
            for key in ("max", "min"):
                if c.get(key) is None:
                    c.pop(key, None)
    return out
