"""The parallelism schemes' knobs: names, defaults, allowed values and the rank layouts
they make. One table for both sides: the spec checks a campaign's ``training.options``
against it at submission (so a bad knob is refused before any trial), and the agent
reads the same defaults when it builds a trial's scheme.

A scheme's knobs live in ``training.options`` under the scheme's name, nested or
dotted::

    training:
      scheme: easgd
      ranks_per_fold: 4
      options: {easgd: {tau: 4, beta: 0.9}}      # or {"easgd.tau": 4, ...}

A trial's own parameters named ``<scheme>.<knob>`` (``easgd.tau`` in the space) win
over the campaign's options, so knobs can be searched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcopt.core.closest import did_you_mean
from hpcopt.core.options import Option
from hpcopt.errors import OptionError

_PS = {
    "sub_masters": Option(
        0, int, 0, 1024, doc="sub-masters between the master and the workers (each serves its share of workers)"
    ),
    "max_staleness": Option(
        None,
        int,
        0,
        1_000_000,
        optional=True,
        doc="bound on master updates between a worker's pull and its push (null: unbounded)",
    ),
    "order": Option(
        "arrival",
        str,
        choices=("arrival", "round_robin"),
        doc="round_robin serves workers in rank order: runs are reproducible bit for bit",
    ),
    "worker_ranks": Option(
        1,
        int,
        1,
        1024,
        doc="ranks per worker: a worker is a data-parallel group (DDP inside) whose first rank exchanges "
        "with the master (NNLO's N_GPU)",
    ),
}

_OVERLAP = Option(
    False,
    bool,
    doc="a worker's exchange runs on a communication thread while it trains its next block (Dean's downpour): "
    "each push is one block staler; a preempted run resumes without losing or repeating blocks, but not bit for bit",
)

_DASO = {
    "node_size": Option(
        None,
        int,
        1,
        1_000_000,
        optional=True,
        doc="ranks per node (null: ranks sharing a host); must divide ranks_per_fold",
    ),
    "max_global_skips": Option(8, int, 1, 1024, doc="batches between global syncs after a reset of the cycle"),
    "warmup_epochs": Option(
        None,
        int,
        0,
        1_000_000,
        optional=True,
        doc="epochs of full synchronous training first (null: min(4, epochs // 4))",
    ),
    "cooldown_epochs": Option(
        None, int, 0, 1_000_000, optional=True, doc="epochs of full synchronous training last (null: as warm-up)"
    ),
    "stability_level": Option(
        0.05, float, 0.0, 1.0, open_low=True, doc="relative loss change under which an epoch counts as stable"
    ),
    "patience": Option(
        2, int, 0, 1000, doc="stable checks (epochs, or checks_per_epoch of them) before the skips shrink"
    ),
    "local_skip_factor": Option(4, int, 1, 1024, doc="at a reset, S = local skip = max_global_skips // this"),
    "skip_reduction_factor": Option(2, int, 2, 1024, doc="the skips shrink by this factor when the loss is stable"),
    "checks_per_epoch": Option(
        None,
        int,
        1,
        1024,
        optional=True,
        doc="stability checks of the loss per epoch (null: about 16 over the cycling epochs, so short trials "
        "adapt their skips too; 1: HeAT's once per epoch)",
    ),
    "global_dtype": Option(
        "fp32",
        str,
        choices=("fp32", "bf16"),
        doc="the non-blocking global syncs in bf16 (HeAT's downcast: half the bytes across nodes) or fp32",
    ),
    "global_compression": Option(
        "none",
        str,
        choices=("none", "powersgd"),
        doc="powersgd: each non-blocking global sync sends PowerSGD factors of what the sender's weights moved since "
        "the last mean its peers agree on, with error feedback (blocking syncs stay exact; needs global_dtype fp32)",
    ),
    "global_powersgd_rank": Option(
        8,
        int,
        1,
        64,
        doc="global_compression powersgd: the rank of each weight matrix's approximation (weights move in more "
        "directions than one step's gradient: digits lost 7 points at rank 4, none at 8)",
    ),
    "local_skips": Option(
        False,
        bool,
        doc="HeAT's local skipping: between global syncs, a node's ranks sync gradients only every local-skip "
        "batches (1 after warm-up, max_global_skips // local_skip_factor after a reset, shrinking with the global "
        "skip) and drift apart until the next merge hands them the sender's weights",
    ),
}

_PIPELINE = {
    "stages": Option(
        None, int, 1, 1024, optional=True, doc="pipeline stages (null: ranks_per_fold); divides ranks_per_fold"
    ),
    "microbatches": Option(4, int, 1, 1024, doc="micro-batches per batch; must divide the batch size"),
    "schedule": Option("1f1b", str, choices=("gpipe", "1f1b"), doc="the pipeline schedule"),
    "recompute": Option(
        False, bool, doc="recompute each stage's activations in the backward pass instead of keeping them"
    ),
}

KNOBS: dict[str, dict[str, Option]] = {
    "allreduce": {
        "backend": Option(
            "ddp",
            str,
            choices=("ddp", "horovod"),
            doc="torch DDP, or Horovod (make horovod)",
            runs_as=(("horovod", "horovod"),),
        ),
        "compression": Option(
            "none",
            str,
            choices=("none", "bf16", "powersgd"),
            doc="DDP's gradient allreduce in full, in bf16 (half the bytes), or PowerSGD's low-rank factors "
            "with error feedback (Vogels et al. 2019; torch's comm hooks): fewer bytes on a slow link, more compute",
        ),
        "powersgd_rank": Option(
            2, int, 1, 64, doc="powersgd: the rank of each gradient matrix's approximation (bytes grow with it)"
        ),
        "powersgd_start": Option(
            10,
            int,
            2,
            1_000_000,
            doc="powersgd: steps of plain allreduce before the first compressed one (error feedback needs 2 at least)",
        ),
    },
    "horovod": {},
    "daso": _DASO,
    "pipeline": _PIPELINE,
    "downpour": {
        **_PS,
        "sync_every": Option(1, int, 1, 1_000_000, doc="batches between a worker's pushes of its mean gradient"),
        "synchronous": Option(False, bool, doc="the master waits for the workers and applies their mean gradient"),
        "sync_fraction": Option(
            0.95,
            float,
            0.0,
            1.0,
            open_low=True,
            doc="synchronous mode: the master applies a round once this fraction of the workers still training "
            "has pushed (rounded up; NNLO's 0.95); the others' pushes join the next round",
        ),
        "local_lr": Option(0.0, float, 0.0, 1e6, doc="plain SGD steps a worker takes between pushes (0: none)"),
        "overlap": _OVERLAP,
    },
    "easgd": {
        **_PS,
        "tau": Option(1, int, 1, 1_000_000, doc="worker steps between elastic exchanges"),
        "beta": Option(0.9, float, 0.0, 1.0, open_low=True, doc="elastic force; alpha = beta / workers"),
        "alpha": Option(None, float, 0.0, 1.0, open_low=True, optional=True, doc="the moving rate itself"),
        "momentum": Option(
            None,
            float,
            0.0,
            1.0,
            open_low=True,
            optional=True,
            doc="EAMSGD: workers step with Nesterov-momentum SGD at the task optimizer's lr and this momentum "
            "(null: the task's own optimizer)",
        ),
        "overlap": _OVERLAP,
    },
    "gem": {
        **_PS,
        "sync_every": Option(1, int, 1, 1_000_000, doc="batches between a worker's exchanges"),
        "lr": Option(
            None,
            float,
            0.0,
            1e6,
            open_low=True,
            optional=True,
            doc="null: a worker's step is what the task's optimizer moves it (any optimizer, its lr); "
            "set: the paper's plain SGD step with this lr",
        ),
        "momentum": Option(
            None,
            float,
            0.0,
            1.0,
            optional=True,
            doc="momentum of the proxy that sets the energy to match (null: 0.9 with gem.lr, else 0: the task's "
            "optimizer has its own)",
        ),
        "kappa": Option(
            None,
            float,
            0.0,
            100.0,
            open_low=True,
            optional=True,
            doc="energy factor (null: 2 with gem.lr, per the paper; else 1: one optimizer's steps)",
        ),
    },
}


@dataclass(frozen=True)
class Traits:
    """What a scheme is, as the checks on both sides need it (never its name): the spec
    and the agent ask these instead of comparing scheme names."""

    #: Fold rank 0 serves (a master, then sub-masters, then workers: :class:`PsLayout`).
    parameter_server: bool = False
    #: Runs the task's loss through its own schedule, so the task may not override
    #: ``train_step``; its stages would skip overflowing fp16 steps independently.
    own_step: bool = False
    #: Each rank holds a part of the model (a pipeline's stage), not all of it.
    splits_model: bool = False
    #: Knobs that must divide ``ranks_per_fold`` (ranks per node, stages).
    divides: tuple[str, ...] = ()
    #: Trains through Horovod, which the agent initializes once per job.
    horovod: bool = False
    #: A script task (``training.task: {script}``, its own loop) may train under it: the
    #: agent gives the script the fold group's ranks and rendezvous, nothing more.
    scripts: bool = False


_PS_TRAITS = Traits(parameter_server=True)

#: Every scheme's traits, by name (the agent's classes carry the same object).
TRAITS: dict[str, Traits] = {
    "allreduce": Traits(scripts=True),
    "horovod": Traits(horovod=True),
    "daso": Traits(divides=("node_size",)),
    "pipeline": Traits(own_step=True, splits_model=True, divides=("stages",)),
    "downpour": _PS_TRAITS,
    "easgd": _PS_TRAITS,
    "gem": _PS_TRAITS,
}


def runs_as(scheme: str, knobs: dict[str, Any]) -> str:
    """The scheme that trains ``scheme`` with these knobs: a knob choice may hand it to
    another (allreduce with ``backend: horovod`` trains as horovod). The one place that
    choice is made."""
    for knob, spec in KNOBS.get(scheme, {}).items():
        value = knobs.get(knob, spec.default)
        target = next((t for choice, t in spec.runs_as if choice == value), None)
        if target is not None:
            return target
    return scheme


def may_run_as(schemes: tuple[str, ...], options: dict[str, dict[str, Any]], searched: tuple[str, ...]) -> set[str]:
    """Every scheme a campaign's trials may train as: its schemes with the campaign's
    knobs, and every target of a knob the space searches (``allreduce.backend``)."""
    found = {runs_as(s, options.get(s, {})) for s in schemes}
    for s in schemes:
        for knob, spec in KNOBS.get(s, {}).items():
            if f"{s}.{knob}" in searched:
                found.update(target for _, target in spec.runs_as)
    return found


@dataclass(frozen=True)
class PsLayout:
    """The tree of a parameter-server fold group: fold rank 0 is the master, ranks
    1..M the sub-masters, then the workers, each ``worker_ranks`` consecutive ranks that
    train data-parallel; a worker's first rank (its leader) exchanges with its parent.
    Workers are dealt round-robin to the sub-masters."""

    ranks: int
    sub_masters: int
    worker_ranks: int = 1

    @property
    def servers(self) -> int:
        """The master and the sub-masters."""
        return 1 + self.sub_masters

    @property
    def workers(self) -> list[int]:
        """The workers' leaders (one per worker)."""
        return list(range(self.servers, self.ranks, self.worker_ranks))

    @property
    def training_ranks(self) -> list[int]:
        """Every rank of every worker."""
        return list(range(self.servers, self.ranks))

    def leader(self, rank: int) -> int | None:
        """The leader of ``rank``'s worker (None on a serving rank)."""
        if rank < self.servers:
            return None
        return rank - (rank - self.servers) % self.worker_ranks

    def members(self, leader: int) -> list[int]:
        """The ranks of the worker ``leader`` leads."""
        return list(range(leader, leader + self.worker_ranks))

    def parent(self, rank: int) -> int | None:
        """Who ``rank`` exchanges with: None on the master and on a worker's other ranks."""
        if rank == 0 or self.leader(rank) not in (None, rank):
            return None
        if rank <= self.sub_masters:
            return 0
        k = (rank - self.servers) // self.worker_ranks
        return 1 + k % self.sub_masters if self.sub_masters else 0

    def children(self, rank: int) -> list[int]:
        return [r for r in range(1, self.ranks) if self.parent(r) == rank]

    def fan_in(self) -> int:
        """The most children any serving rank has."""
        return max(len(self.children(r)) for r in range(self.servers))


def split_options(options: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``training.options`` as (scheme sections ``{scheme: {knob: value}}``, the other
    options). Both ``easgd: {tau: 4}`` and ``"easgd.tau": 4`` name a knob."""
    sections: dict[str, dict[str, Any]] = {}
    rest: dict[str, Any] = {}
    for key, value in options.items():
        head, dot, knob = str(key).partition(".")
        if head in KNOBS and not dot:
            if not isinstance(value, dict):
                raise OptionError(f"training.options.{head}", f"must be a mapping of knobs, got {value!r}")
            sections.setdefault(head, {}).update(value)
        elif head in KNOBS:
            sections.setdefault(head, {})[knob] = value
        else:
            rest[key] = value
    return sections, rest


def resolve(
    scheme: str, options: dict[str, Any], ranks_per_fold: int | None, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The knobs ``scheme`` runs with: its defaults, then the campaign's options, then
    a trial's ``<scheme>.<knob>`` parameters; each checked, and the layout checked
    against ``ranks_per_fold`` (None: not yet chosen, the planner picks one that fits).
    Raises :class:`OptionError` naming the field."""
    sections, _ = split_options(options)
    for name, given in sections.items():
        table = KNOBS[name]
        for knob in given:
            if knob not in table:
                raise unknown_knob(f"training.options.{name}.{knob}", name, knob)
    table = KNOBS.get(scheme, {})
    knobs: dict[str, Any] = {}
    for knob, spec in table.items():
        field, value = f"training.options.{scheme}.{knob}", spec.default
        if knob in sections.get(scheme, {}):
            value = sections[scheme][knob]
        if params is not None and f"{scheme}.{knob}" in params:
            field, value = f"params.{scheme}.{knob}", params[f"{scheme}.{knob}"]
        knobs[knob] = spec.check(field, value)
    target = runs_as(scheme, knobs)
    if knobs.get("compression", "none") != "none" and target != scheme:
        raise OptionError(
            f"training.options.{scheme}.compression",
            f"compresses DDP's allreduce; with these knobs the fold trains as {target}, which has its own "
            "exchange (use compression: none there)",
        )
    if knobs.get("global_compression", "none") != "none" and knobs.get("global_dtype") == "bf16":
        raise OptionError(
            f"training.options.{scheme}.global_compression",
            "powersgd sends fp32 factors of the weights' moves; global_dtype: bf16 would round them again: choose "
            "one (global_compression: none with global_dtype: bf16, or powersgd with fp32)",
        )
    check_layout(scheme, knobs, ranks_per_fold)
    return knobs


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_layout(scheme: str, knobs: dict[str, Any], ranks: int | None) -> None:
    """The rank layout a scheme's knobs make fits ``ranks`` ranks per fold (None: the
    planner has not chosen yet, and takes only ranks per fold that fit)."""
    if ranks is None:
        return
    traits = TRAITS.get(scheme, Traits())
    if traits.parameter_server:
        _check_ps_layout(scheme, knobs, ranks)
    for knob in traits.divides:
        value = knobs.get(knob)
        if value is not None and ranks % value:
            raise OptionError(
                f"training.options.{scheme}.{knob}",
                f"{knob}={value} does not divide ranks_per_fold={ranks}; values that fit: {_divisors(ranks)}",
            )
    if knobs.get("schedule") == "1f1b":  # a pipeline's: one micro-batch per stage at least
        stages = knobs["stages"] or ranks
        if knobs["microbatches"] < stages:
            raise OptionError(
                "training.options.pipeline.microbatches",
                f"the 1f1b schedule needs at least one micro-batch per stage: microbatches={knobs['microbatches']} "
                f"< {stages} stages; use microbatches >= {stages}, fewer stages, or schedule: gpipe",
            )


def _check_ps_layout(scheme: str, knobs: dict[str, Any], ranks: int) -> None:
    """A parameter-server layout that leaves every serving rank a worker, and a
    staleness bound the tree can keep."""
    m, g = knobs["sub_masters"], knobs["worker_ranks"]
    if ranks < 1 + g:
        raise OptionError(
            "training.ranks_per_fold",
            f"{scheme} needs at least {1 + g} ranks per fold (a master and a worker of worker_ranks={g}); got {ranks}",
        )
    if ranks < 1 + m + max(m, 1) * g:
        fits = (ranks - 1) // (1 + g)
        raise OptionError(
            f"training.options.{scheme}.sub_masters",
            f"{m} sub-masters need at least {1 + m + m * g} ranks per fold (a master, {m} sub-masters and a "
            f"worker{f' of {g} ranks' if g > 1 else ''} each); ranks_per_fold is {ranks}: use sub_masters <= {fits} "
            f"or ranks_per_fold >= {1 + m + m * g}",
        )
    if (ranks - 1 - m) % g:
        fits = [k for k in range(1, ranks) if (ranks - 1 - m) % k == 0 and (ranks - 1 - m) // k >= max(m, 1)]
        raise OptionError(
            f"training.options.{scheme}.worker_ranks",
            f"the {ranks - 1 - m} ranks left for workers (ranks_per_fold {ranks} - a master - {m} sub-masters) do "
            f"not split into workers of {g} ranks; values that fit: {', '.join(map(str, fits))}",
        )
    bound = knobs["max_staleness"]
    if bound is None:
        return
    if knobs.get("synchronous"):
        raise OptionError(
            f"training.options.{scheme}.max_staleness", "synchronous mode has no staleness; leave it null"
        )
    fan_in = PsLayout(ranks, m, g).fan_in()
    if bound < fan_in - 1:
        raise OptionError(
            f"training.options.{scheme}.max_staleness",
            f"{bound} cannot be kept: a master serving {fan_in} workers sees each push at least {fan_in - 1} "
            f"updates late once all have pushed; use >= {fan_in - 1}"
            + (", or synchronous: true" if "synchronous" in knobs else ""),
        )


def expand_search(data: Any) -> Any:
    """A spec document with ``training.scheme: {search: {scheme: {knob: parameter}}}``
    normalized into a categorical ``scheme`` parameter and conditional knob parameters
    (``easgd.tau`` with ``when: {scheme: [easgd]}``), and ``training.scheme: search``.
    Other documents come back as they are."""
    training = data.get("training") if isinstance(data, dict) else None
    if not isinstance(training, dict) or not isinstance(training.get("scheme"), dict):
        return data
    search = training["scheme"].get("search")
    if set(training["scheme"]) != {"search"} or not isinstance(search, dict) or not search:
        raise OptionError(
            "training.scheme", "must be a scheme's name or {search: {<scheme>: {<knob>: <parameter>}, ...}}"
        )
    space = data.get("space")
    if not isinstance(space, dict):
        return data  # the spec's own validation names it
    if "scheme" in space:
        raise OptionError("space.scheme", "is made by training.scheme.search; drop it from the space")
    out = {**space, "scheme": {"type": "categorical", "choices": list(search)}}
    for name, knobs in search.items():
        at = f"training.scheme.search.{name}"
        if name not in KNOBS:
            raise OptionError(at, f"unknown scheme; allowed: {', '.join(KNOBS)}{did_you_mean(name, KNOBS)}")
        if not isinstance(knobs, dict | None):
            raise OptionError(at, "must be a mapping of knob: parameter ({} to search the scheme with its defaults)")
        for knob, param in (knobs or {}).items():
            if knob not in KNOBS[name]:
                raise unknown_knob(f"{at}.{knob}", name, knob)
            if not isinstance(param, dict) or "when" in param:
                raise OptionError(f"{at}.{knob}", "must be a parameter such as {type: int, low: 1, high: 16} (no when)")
            out[f"{name}.{knob}"] = {**param, "when": {"scheme": [name]}}
    return {**data, "space": out, "training": {**training, "scheme": "search"}}


def unknown_knob(at: str, scheme: str, knob: str) -> OptionError:
    """The error for a knob ``scheme`` does not have, at field ``at``."""
    table = KNOBS[scheme]
    return OptionError(
        at, f"unknown knob for {scheme}; allowed: {', '.join(table) or 'none'}{did_you_mean(knob, table)}"
    )


def _probes(param: dict[str, Any]) -> list[Any]:
    """The values of a parameter that a knob check must see: every choice, every int of
    a short range, else the bounds."""
    if param["type"] == "categorical":
        return list(param["choices"])
    low, high = param["low"], param["high"]
    if param["type"] == "int" and high - low <= 256:
        return list(range(low, high + 1))
    return [low, high]


def check_space_knobs(
    space: dict[str, dict[str, Any]], scheme: str, options: dict[str, Any], ranks: int | None
) -> None:
    """The scheme(s) a campaign trains with, and every knob its space searches, checked
    against the knob table and ``ranks`` per fold: each value a parameter can take must
    be allowed and make a layout that fits. Raises :class:`OptionError` naming the field
    and the value (knobs searched together are checked one at a time; the agent checks
    each trial's combination again)."""
    schemes = [scheme]
    if scheme == "search":
        p = space.get("scheme")
        if p is None or p["type"] != "categorical" or p.get("when"):
            raise OptionError("space.scheme", "training.scheme: search needs an unconditional categorical `scheme`")
        bad = [c for c in p["choices"] if c not in KNOBS]
        if bad:
            raise OptionError("space.scheme.choices", f"{bad[0]!r} is not a scheme; allowed: {', '.join(KNOBS)}")
        schemes = list(p["choices"])
    searched: dict[str, dict[str, list[Any]]] = {s: {} for s in schemes}
    for name, p in space.items():
        head, dot, knob = name.partition(".")
        if not dot or head not in KNOBS:
            continue
        at = f"space.{name}"
        if knob not in KNOBS[head]:
            raise unknown_knob(at, head, knob)
        if head not in schemes:
            raise OptionError(at, f"{head} is not a scheme this campaign trains with ({', '.join(schemes)})")
        if scheme == "search" and (p.get("when") or {}).get("scheme") != [head]:
            raise OptionError(
                f"{at}.when", f"a knob of {head} must be active only under it: when: {{scheme: [{head}]}}"
            )
        searched[head][name] = _probes(p)
    for s in schemes:
        first = {name: values[0] for name, values in searched[s].items()}
        try:
            resolve(s, options, ranks, first)
        except OptionError as exc:
            if not exc.field.startswith("training."):
                raise OptionError(f"space.{exc.field.removeprefix('params.')}", exc.message) from None
            raise OptionError(
                exc.field, f"under scheme {s}: {exc.message}" if scheme == "search" else exc.message
            ) from None
        for name, values in searched[s].items():
            for value in values:
                try:
                    resolve(s, options, ranks, {**first, name: value})
                except OptionError as exc:
                    raise OptionError(f"space.{name}", f"{name}={value!r}: {exc.message}") from None


def fits_ranks(scheme: str, options: dict[str, Any], space: dict[str, dict[str, Any]], ranks: int) -> bool:
    """Whether ``ranks`` ranks per fold make a layout every scheme of the campaign (and
    every knob value its space searches) accepts: the widths the planner may choose."""
    try:
        check_space_knobs(space, scheme, options, ranks)
    except OptionError:
        return False
    return True
