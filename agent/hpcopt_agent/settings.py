"""The training settings an agent reads from the campaign spec (``training`` and
``folds``), checked before any trial is taken."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcopt.core.analysis import check as check_analysis
from hpcopt.core.schemes import TRAITS, Traits, resolve, split_options
from hpcopt.core.training import check_options
from hpcopt.errors import OptionError


class SettingsError(ValueError):
    """A training setting the agent cannot use; names the field."""


@dataclass(frozen=True)
class TrainingSettings:
    task: str
    scheme: str
    #: None until the planner chooses it (``training.ranks_per_fold`` unset in the spec).
    ranks_per_fold: int | None
    epochs: int
    folds: int
    metric: str
    direction: str
    checkpoint_every: int = 1
    #: Every objective's metric (the first is ``metric``): a fold reports them all.
    objectives: tuple[str, ...] = ()
    stratified: bool = False
    #: ``sample`` or ``group`` (Task.groups() keeps each group within one fold).
    folds_by: str = "sample"
    fold_seed: int = 0
    seed: int = 0
    #: fp32, bf16 or fp16: autocast in every training step (fp16 with a GradScaler).
    precision: str = "fp32"
    #: local, node or global: BatchNorm as built, or SyncBatchNorm over the node's or
    #: the fold group's ranks (:mod:`hpcopt_agent.batchnorm`).
    batchnorm: str = "local"
    cudnn_benchmark: bool = False
    #: training.options.loader, merged over the defaults.
    loader: dict[str, Any] = field(default_factory=dict)
    #: The names of the campaign's space in the spec's order (how trials are logged).
    param_names: tuple[str, ...] = ()
    #: The schemes' knobs as given in training.options ({scheme: {knob: value}}).
    scheme_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    #: The schemes this campaign trains with (``scheme: search``: the choices of ``scheme``).
    schemes: tuple[str, ...] = ()
    #: ``training.task: {script, args}``: the script's path and argument templates
    #: (None: ``task`` names a Task).
    script: tuple[str, tuple[str, ...]] | None = None
    #: The campaign's ``analysis`` section with its defaults (``hpcopt.core.analysis``),
    #: or None.
    analysis: dict[str, Any] | None = None
    #: ``training.target`` ({metric, at_least | at_most}): the agent reports each fold's
    #: time to it (``hpcopt.core.target``); None: no target.
    target: dict[str, Any] | None = None

    def scheme_for(self, params: dict[str, Any]) -> str:
        """The scheme one trial trains with: its ``scheme`` parameter under ``scheme: search``."""
        if self.scheme != "search":
            return self.scheme
        name = params.get("scheme")
        if name not in self.schemes:
            raise SettingsError(f"params.scheme: {name!r} is not one of this campaign's schemes {list(self.schemes)}")
        return str(name)

    @property
    def ranks(self) -> int:
        """Ranks per fold, once chosen (the agent plans before any trial)."""
        if self.ranks_per_fold is None:
            raise SettingsError("training.ranks_per_fold is not chosen yet: the planner sets it before any trial")
        return self.ranks_per_fold

    def fits(self, ranks: int, space: dict[str, Any]) -> bool:
        """Whether every scheme of the campaign (and every knob value its space
        searches) makes a layout that fits ``ranks`` ranks per fold."""
        from hpcopt.core.schemes import fits_ranks

        return fits_ranks(self.scheme, self.scheme_options, space, ranks)

    def knobs(self, params: dict[str, Any]) -> dict[str, Any]:
        """The knobs of a trial's scheme (its params may set them: searched > options > defaults)."""
        try:
            return resolve(self.scheme_for(params), self.scheme_options, self.ranks_per_fold, params)
        except OptionError as exc:
            raise SettingsError(str(exc)) from None

    @classmethod
    def from_spec(cls, spec: dict[str, Any], task_override: str | None = None) -> TrainingSettings:
        training = spec.get("training") or {}
        if not training:
            raise SettingsError(
                "the campaign has no `training` section: it is driven by a script (hpcopt.Client.trials), "
                "not by agents; submit one with training.task to train it here"
            )
        objective = spec.get("objective") or {}
        scheme = str(training.get("scheme", "allreduce"))
        pinned = training.get("ranks_per_fold")
        ranks = None if pinned is None else int(pinned)
        schemes = [scheme]
        if scheme == "search":
            schemes = [str(c) for c in ((spec.get("space") or {}).get("scheme") or {}).get("choices", [])]
            if not schemes:
                raise SettingsError("training.scheme: search needs a categorical `scheme` parameter in the space")
        try:  # the server checked these at submission; an older server may not have
            sections, _ = split_options(dict(training.get("options") or {}))
            merged = check_options(dict(training.get("options") or {}), schemes)
            for name in schemes:
                resolve(name, sections, ranks)
            analysis = None if spec.get("analysis") is None else check_analysis(spec["analysis"])
        except OptionError as exc:
            raise SettingsError(str(exc)) from None
        task = training.get("task", "")
        script = None
        if isinstance(task, dict) and not task_override:
            if not TRAITS.get(scheme, Traits()).scripts:  # the server refuses it at submission; an older one may not
                raise SettingsError(
                    f"training.scheme: a script task (training.task.script) trains with allreduce only, since the "
                    f"script owns its training loop; got {scheme!r}"
                )
            script = (str(task.get("script", "")), tuple(str(a) for a in task.get("args") or ()))
        return cls(
            task=task_override or ("" if script else str(task)),
            script=script,
            scheme=scheme,
            ranks_per_fold=ranks,
            epochs=int(training.get("epochs", 10)),
            folds=int(spec.get("folds", 1)),
            metric=str(objective.get("metric", "")),
            direction=str(objective.get("direction", "minimize")),
            objectives=tuple(str(o.get("metric", "")) for o in spec.get("objectives") or [objective]),
            checkpoint_every=merged["checkpoint_every"],
            stratified=merged["stratified"],
            folds_by=merged["folds_by"],
            fold_seed=merged["fold_seed"],
            seed=merged["seed"],
            precision=merged["precision"],
            batchnorm=merged["batchnorm"],
            cudnn_benchmark=merged["cudnn_benchmark"],
            loader=merged["loader"],
            param_names=tuple(spec.get("space") or ()),
            scheme_options=sections,
            schemes=tuple(schemes),
            analysis=analysis,
            target=dict(training["target"]) if training.get("target") else None,
        )
