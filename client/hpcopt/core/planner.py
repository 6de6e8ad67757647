"""The allocation planner: how an allocation's ranks are laid out as trial groups x fold
groups x ranks per fold, chosen from measured throughput.

Pure functions, shared by the agent (``--groups auto``, re-planning between trials),
the server (the model it shows over REST) and ``hpcopt plan``.

**The throughput model.** A fold group of ``r`` ranks spanning ``n`` nodes trains
``samples_per_second(r, n)`` samples a second, measured while every rank of the
allocation trains (so sharing a node's cores and memory bandwidth is in the figure).
Its inverse, seconds per sample, is fitted as

    t(r, n) = compute / r + comm * (1 - 1/r) + link * (1 - 1/n)

with non-negative coefficients: the compute shared out over the ranks, a collective
cost that grows towards a ring's asymptote as ranks join, and a further cost once the
fold group spans nodes (the network between them). With points at one rank count only,
``comm`` is 0 (nothing says otherwise) and :attr:`Scaling.assumptions` says so.

**A plan's prediction.** A fold trains ``epochs x train_samples`` samples at ``t(r, n)``
plus evaluation (a forward pass over a (K-1)-times smaller share, about a third of a
training step's cost per sample) and a fixed ``fold_overhead``; a trial trains its K
folds in ``ceil(K / fold_groups)`` rounds plus ``trial_overhead``. A trial of an ``mf``
campaign is a configuration climbing its ladder (:mod:`hpcopt.core.fidelity`): each
climb is a lease of its own, of the folds and epochs it adds, weighted by the share of
configurations that make it (``eta ** -rung``). Most of that work is one fold, so a
layout whose trial groups have several fold groups leaves them idle on it, and the
planner lays out narrow groups unless there are fewer configurations than groups. At most
``min(groups, max_parallel)`` trials train at once, in waves. Plans are ranked by trials
completed by the deadline, then by time to finish the campaign; within 2 % the plan
with more trials in parallel wins. For a search that learns from results (bo, ea, skopt,
mf) plans within 5 % are equal and the one whose trials finish first wins: its results
come back sooner, in more waves (:data:`FEEDBACK`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hpcopt.core.fidelity import ladder_of
from hpcopt.errors import PlanError

#: Plans whose figures are within this fraction of each other are a tie.
TIE = 0.02
#: For a search that learns from results, plans within this fraction of the fastest are
#: a tie too, and of those the one whose trials finish first wins: results come back
#: sooner and in more waves, and a wave of every trial at once is a random search
#: (chosen by ``benchmarks/training/planner_feedback.py``; docs "Laying out the allocation").
FEEDBACK = 0.05
#: The algorithms that learn from finished trials (``Work.learns``). ``pbt`` is not one
#: here: its members learn from each other as they train, so all of them at once is best.
LEARNING = ("bo", "ea", "skopt", "mf")
#: A fold group more than this many times wider (or narrower) than every measured one
#: is *extrapolated*: its figure rests on the model's form, not on a measurement.
EXTRAPOLATE = 2
#: The throughput of one rank a measurement may claim, in samples per second: from one
#: sample in 11 days to a billion a second. Outside it a point is refused when reported
#: and left out of every fit (a stored 1e308 made the model divide by zero).
MIN_RATE_PER_RANK, MAX_RATE_PER_RANK = 1e-6, 1e9


@dataclass(frozen=True)
class Point:
    """One measured throughput: a fold group of ``ranks`` ranks over ``nodes`` nodes."""

    ranks: int
    nodes: int
    samples_per_second: float
    scheme: str = "allreduce"
    source: str = "fold"  # "fold" (trained folds' median) or "probe"
    #: How many measurements the figure is the median of.
    count: int = 1

    def as_dict(self) -> dict[str, object]:
        return {
            "scheme": self.scheme,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "samples_per_second": self.samples_per_second,
            "source": self.source,
            "count": self.count,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, object]) -> Point:
        """The inverse of :meth:`as_dict`; :class:`PlanError` naming a bad field."""
        try:
            ranks, nodes, rate = int(doc["ranks"]), int(doc["nodes"]), float(doc["samples_per_second"])  # type: ignore[call-overload, arg-type]
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"a throughput point needs ranks, nodes and samples_per_second: {exc}") from None
        if ranks < 1 or nodes < 1 or not (rate > 0 and math.isfinite(rate)):
            raise PlanError(f"a throughput point has ranks {ranks}, nodes {nodes}, samples_per_second {rate}")
        count = int(doc.get("count", 1))  # type: ignore[call-overload]
        return cls(ranks, nodes, rate, str(doc.get("scheme", "allreduce")), str(doc.get("source", "fold")), count)


def plausible(p: Point) -> bool:
    """Whether the point's rate per rank lies in [MIN_RATE_PER_RANK, MAX_RATE_PER_RANK]."""
    per_rank = p.samples_per_second / max(p.ranks, 1)
    return math.isfinite(per_rank) and MIN_RATE_PER_RANK <= per_rank <= MAX_RATE_PER_RANK


def points_from_folds(rows: Iterable[tuple[dict[str, Any], dict[str, Any]]], spec: dict[str, Any]) -> list[Point]:
    """The measured points of a campaign from its folds' (trial params, metrics): one
    per (scheme, ranks, nodes), the median of the folds' ``samples_per_second`` measured
    there (``ranks_per_fold`` and ``fold_nodes`` say where). A fold's scheme is its
    trial's ``scheme`` parameter under ``scheme: search``. The server and ``hpcopt plan
    --campaign`` both read points this way."""
    training = spec.get("training") or {}
    fixed = str(training.get("scheme", "allreduce"))
    seen: dict[tuple[str, int, int], list[float]] = {}
    for params, metrics in rows:
        values = [metrics.get(k) for k in ("samples_per_second", "ranks_per_fold", "fold_nodes")]
        if not all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in values):
            continue
        rate, ranks, nodes = (float(v) for v in values)  # type: ignore[arg-type]
        scheme = str(params.get("scheme", fixed)) if fixed == "search" else fixed
        seen.setdefault((scheme, int(ranks), int(nodes)), []).append(rate)
    return [
        Point(r, n, statistics.median(rates), scheme, "fold", len(rates))
        for (scheme, r, n), rates in sorted(seen.items())
    ]


def points_from_probes(rows: Iterable[tuple[str, int, int, float]]) -> list[Point]:
    """The probe's points from its stored measurements (scheme, ranks, nodes, samples
    per second): one per width, the median of the probes that measured it."""
    seen: dict[tuple[str, int, int], list[float]] = {}
    for scheme, ranks, nodes, rate in rows:
        seen.setdefault((scheme, ranks, nodes), []).append(rate)
    return [
        Point(r, n, statistics.median(rates), scheme, "probe", len(rates))
        for (scheme, r, n), rates in sorted(seen.items())
    ]


def merge_points(measured: Iterable[Point], earlier: Iterable[Point]) -> list[Point]:
    """``measured`` and, at widths (scheme, ranks, nodes) it lacks, ``earlier``: the
    folds' figures replace a probe's width by width, as they come in."""
    first = list(measured)
    have = {(p.scheme, p.ranks, p.nodes) for p in first}
    rest = [p for p in earlier if (p.scheme, p.ranks, p.nodes) not in have]
    return sorted(first + rest, key=lambda p: (p.scheme, p.ranks, p.nodes))


def train_samples_of(rows: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> int | None:
    """The median of the folds' ``train_samples`` (samples trained per epoch), if any reported it."""
    got = [
        float(m["train_samples"])
        for _, m in rows
        if isinstance(m.get("train_samples"), int | float) and m["train_samples"] > 0
    ]
    return int(statistics.median(got)) if got else None


@dataclass(frozen=True)
class Scaling:
    """Seconds per sample of a fold group: ``compute / r + comm (1 - 1/r) + link (1 - 1/n)``."""

    compute: float
    comm: float = 0.0
    link: float = 0.0
    points: tuple[Point, ...] = ()
    assumptions: tuple[str, ...] = ()

    def seconds_per_sample(self, ranks: int, nodes: int = 1) -> float:
        return self.compute / ranks + self.comm * (1 - 1 / ranks) + self.link * (1 - 1 / max(nodes, 1))

    def samples_per_second(self, ranks: int, nodes: int = 1) -> float:
        return 1.0 / self.seconds_per_sample(ranks, nodes)

    def error(self) -> float:
        """The median relative error of the fit on its points (0 with none)."""
        errs = sorted(abs(self.samples_per_second(p.ranks, p.nodes) / p.samples_per_second - 1) for p in self.points)
        return errs[len(errs) // 2] if errs else 0.0

    def extrapolated(self, ranks: int) -> bool:
        """Whether a fold group of ``ranks`` ranks lies far outside the measured widths:
        wider than :data:`EXTRAPOLATE` times the widest point, or narrower than the
        narrowest over it (a model without points extrapolates everywhere)."""
        widths = [p.ranks for p in self.points]
        if not widths:
            return True
        return ranks > EXTRAPOLATE * max(widths) or ranks * EXTRAPOLATE < min(widths)

    @property
    def confirmed(self) -> bool:
        """Whether a trained fold measured any of its points (not only probes)."""
        return any(p.source == "fold" for p in self.points)

    def as_dict(self) -> dict[str, object]:
        return {
            "seconds_per_sample": {"compute": self.compute, "comm": self.comm, "link": self.link},
            "formula": "t(r, n) = compute / r + comm * (1 - 1/r) + link * (1 - 1/n)",
            "confirmed": self.confirmed,
            "median_relative_error": self.error(),
            "assumptions": list(self.assumptions),
            "points": [p.as_dict() for p in self.points],
        }


def _solve(rows: list[list[float]], rhs: list[float], cols: list[int]) -> list[float] | None:
    """Least squares on the chosen columns (normal equations, Gaussian elimination)."""
    k = len(cols)
    a = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
    b = [sum(r[i] * y for r, y in zip(rows, rhs, strict=True)) for i in cols]
    for c in range(k):
        pivot = max(range(c, k), key=lambda i: abs(a[i][c]))
        if abs(a[pivot][c]) < 1e-300:
            return None
        a[c], a[pivot], b[c], b[pivot] = a[pivot], a[c], b[pivot], b[c]
        for i in range(k):
            if i != c:
                f = a[i][c] / a[c][c]
                a[i] = [x - f * y for x, y in zip(a[i], a[c], strict=True)]
                b[i] -= f * b[c]
    return [b[i] / a[i][i] for i in range(k)]


def fit(points: Iterable[Point]) -> Scaling:
    """The model through these points: non-negative least squares on relative error
    (every subset of the three terms is tried; the best non-negative one with a positive
    compute term is kept, so every width has a positive, finite time per sample). Points
    that are not :func:`plausible` are left out."""
    given = list(points)
    pts = tuple(p for p in given if plausible(p))
    if not pts:
        if given:
            raise PlanError(
                f"no plausible throughput measured: {len(given)} point(s), each outside {MIN_RATE_PER_RANK:g} to "
                f"{MAX_RATE_PER_RANK:g} samples per second per rank"
            )
        raise PlanError("no throughput measured yet: a probe or a trained fold gives the first point")
    # Rows divided by the observed time: each point weighs by its relative error.
    rows, rhs = [], []
    for p in pts:
        t = 1.0 / p.samples_per_second
        rows.append([1 / p.ranks / t, (1 - 1 / p.ranks) / t, (1 - 1 / max(p.nodes, 1)) / t])
        rhs.append(1.0)
    ranks = {p.ranks for p in pts}
    nodes = {p.nodes for p in pts}
    usable = [0] + ([1] if len(ranks) > 1 else []) + ([2] if len(nodes) > 1 else [])
    best: tuple[float, list[float]] | None = None
    for mask in range(1, 1 << len(usable)):
        cols = [usable[i] for i in range(len(usable)) if mask >> i & 1]
        if 0 not in cols:
            continue
        coef = _solve(rows, rhs, cols)
        if coef is None or min(coef) < 0 or coef[0] <= 0 or not all(math.isfinite(c) for c in coef):
            continue
        full = [0.0, 0.0, 0.0]
        for c, v in zip(cols, coef, strict=True):
            full[c] = v
        resid = sum((sum(r[i] * full[i] for i in range(3)) - y) ** 2 for r, y in zip(rows, rhs, strict=True))
        if best is None or resid < best[0] - 1e-15:
            best = (resid, full)
    if best is None:  # cannot happen with a positive point; kept for the type checker
        raise PlanError("the throughput points admit no model")
    compute, comm, link = best[1]
    notes = []
    if len(ranks) == 1:
        notes.append(f"measured at {next(iter(ranks))} rank(s) per fold only: no collective cost is assumed")
    if len(nodes) == 1:
        notes.append(f"measured on {next(iter(nodes))} node(s) per fold only: no cost is assumed for spanning nodes")
    if not any(p.source == "fold" for p in pts):
        notes.append("probe measurements only: no trained fold has confirmed this model yet")
    if len(pts) < len(given):
        notes.append(f"{len(given) - len(pts)} implausible point(s) left out")
    return Scaling(compute, comm, link, pts, tuple(notes))


def epochs_per_trial(spec: dict[str, Any]) -> int:
    """The epochs one trial of the campaign trains: ``training.epochs``, or for
    ``algorithm: pbt`` one interval (each interval is a trial)."""
    training = spec.get("training") or {}
    epochs = int(training.get("epochs", 10))
    algorithm = spec.get("algorithm") or {}
    if algorithm.get("name") != "pbt":
        return epochs
    interval = (algorithm.get("options") or {}).get("interval")
    return min(epochs, int(interval) if interval else max(1, epochs // 5))


@dataclass(frozen=True)
class Allocation:
    world: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        if self.world < 1:
            raise PlanError(f"the allocation needs at least one rank; got {self.world}")
        if self.ranks_per_node < 1:
            raise PlanError(f"--ranks-per-node must be >= 1, got {self.ranks_per_node}")

    @property
    def nodes(self) -> int:
        return -(-self.world // self.ranks_per_node)


@dataclass(frozen=True)
class Unit:
    """One lease of a trial: ``folds`` folds trained ``epochs`` epochs, taken by ``share``
    of the trials."""

    folds: int
    epochs: int
    share: float = 1.0


def learns_of(spec: dict[str, Any]) -> bool:
    """Whether the campaign's algorithm learns from finished trials (:data:`LEARNING`)."""
    algorithm = spec.get("algorithm") or {}
    name = algorithm if isinstance(algorithm, str) else algorithm.get("name", "random")
    return name in LEARNING


def units_of(spec: dict[str, Any]) -> tuple[Unit, ...]:
    """The leases one trial of the campaign takes: for ``algorithm: mf`` the climbs of its
    ladder, each by the share of configurations that reach it; otherwise () (one lease
    of all folds and epochs)."""
    found = ladder_of(spec)
    if found is None:
        return ()
    return tuple(Unit(c.folds, c.epochs, c.reach) for c in found.climbs() if c.folds and c.epochs)


@dataclass(frozen=True)
class Work:
    """What is left to train."""

    trials: int
    folds: int
    epochs: int
    #: Samples a fold trains per epoch (the (K-1)/K share of the dataset).
    train_samples: int
    max_parallel: int | None = None
    #: Seconds until the allocation ends (None: no deadline).
    deadline: float | None = None
    #: The leases one trial takes (default: one, all ``folds`` to all ``epochs``): for
    #: ``mf``, the climbs of its ladder (:func:`units_of`).
    units: tuple[Unit, ...] = ()
    fold_overhead: float = 2.0
    trial_overhead: float = 1.0
    #: The search learns from finished trials (bo, ea, skopt, mf: :func:`learns_of`): the
    #: planner then pays up to :data:`FEEDBACK` of time for results that come back sooner.
    learns: bool = False

    def __post_init__(self) -> None:
        for name in ("folds", "epochs", "train_samples"):
            if getattr(self, name) < 1:
                raise PlanError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.trials < 0:
            raise PlanError(f"trials must be >= 0, got {self.trials}")
        if self.max_parallel is not None and self.max_parallel < 1:
            raise PlanError(f"budget.max_parallel must be >= 1, got {self.max_parallel}")
        if self.deadline is not None and self.deadline <= 0:
            raise PlanError(f"the deadline is {-self.deadline:.0f} s in the past: check --deadline or --hours")

    @property
    def eval_fraction(self) -> float:
        return 1.0 / (3.0 * max(self.folds - 1, 1))


@dataclass(frozen=True)
class Layout:
    """How an allocation of ``world`` ranks is split: ``groups`` trial groups, each of
    fold groups of ``ranks_per_fold`` ranks, for a campaign of ``folds`` folds. The one
    layout type: the planner ranks these, and the agent runs the one it chose."""

    world: int
    groups: int
    ranks_per_fold: int
    folds: int

    @property
    def group_size(self) -> int:
        return self.world // self.groups

    @property
    def fold_groups(self) -> int:
        """Fold groups per trial group: how many folds train at once."""
        return self.group_size // self.ranks_per_fold

    def group_of(self, rank: int) -> int:
        return rank // self.group_size

    def fold_group_of(self, rank: int) -> int:
        return (rank % self.group_size) // self.ranks_per_fold

    def fold_ranks(self, group: int, fold_group: int) -> list[int]:
        """World ranks of one fold group."""
        first = group * self.group_size + fold_group * self.ranks_per_fold
        return list(range(first, first + self.ranks_per_fold))

    def folds_for(self, fold_group: int, remaining: list[int]) -> list[int]:
        """The folds (of those still to train) that one fold group trains, in order."""
        return remaining[fold_group :: self.fold_groups]

    def shape(self) -> str:
        return (
            f"{self.groups} trial group(s) x {self.fold_groups} fold group(s) x {self.ranks_per_fold} rank(s) per fold"
        )

    def describe(self) -> str:
        rounds = -(-self.folds // self.fold_groups)
        return f"{self.world} ranks = {self.shape()}; {self.folds} folds in {rounds} round(s)"


def nodes_spanned(ranks: int, ranks_per_node: int, world: int) -> int:
    """The most nodes one fold group spans (fold groups are contiguous runs of ranks)."""
    worst = 1
    for start in range(0, world - ranks + 1, ranks):
        worst = max(worst, (start + ranks - 1) // ranks_per_node - start // ranks_per_node + 1)
        if start >= ranks_per_node * ranks:  # the pattern repeats
            break
    return worst


def candidates(
    world: int,
    folds: int,
    *,
    pinned_ranks: int | None = None,
    groups: int | None = None,
    valid_ranks: Callable[[int], bool] | None = None,
) -> list[Layout]:
    """Every layout of ``world`` ranks: groups divide the world, ranks per fold divide a
    group, and no trial group has more fold groups than the campaign has folds."""
    out = []
    for g in range(1, world + 1):
        if world % g or (groups is not None and g != groups):
            continue
        size = world // g
        for r in range(1, size + 1):
            if size % r or size // r > folds:
                continue
            if pinned_ranks is not None and r != pinned_ranks:
                continue
            if valid_ranks is not None and not valid_ranks(r):
                continue
            out.append(Layout(world, g, r, folds))
    return out


@dataclass(frozen=True)
class Prediction:
    layout: Layout
    fold_seconds: float
    trial_seconds: float
    #: Trials training at once (``groups``, capped by the budget's ``max_parallel``).
    active: int
    #: Seconds until every remaining trial is done.
    makespan: float
    #: Trials done by the deadline (all of them without one).
    by_deadline: int
    trials_per_hour: float
    #: Busy rank-seconds over the allocation's rank-seconds until the makespan.
    utilisation: float
    #: Its width is far outside the measured ones (:meth:`Scaling.extrapolated`).
    extrapolated: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "groups": self.layout.groups,
            "fold_groups": self.layout.fold_groups,
            "ranks_per_fold": self.layout.ranks_per_fold,
            "fold_seconds": self.fold_seconds,
            "trial_seconds": self.trial_seconds,
            "trials_at_once": self.active,
            "makespan_seconds": self.makespan,
            "trials_by_deadline": self.by_deadline,
            "trials_per_hour": self.trials_per_hour,
            "utilisation": self.utilisation,
            "extrapolated": self.extrapolated,
        }


def fold_seconds(layout: Layout, alloc: Allocation, work: Work, model: Scaling, epochs: int | None = None) -> float:
    """Seconds one fold takes to train ``epochs`` (default: all ``work.epochs``) on the layout."""
    n = nodes_spanned(layout.ranks_per_fold, alloc.ranks_per_node, alloc.world)
    per_sample = model.seconds_per_sample(layout.ranks_per_fold, n)
    e = work.epochs if epochs is None else epochs
    return e * work.train_samples * per_sample * (1 + work.eval_fraction) + work.fold_overhead


def trial_work(layout: Layout, alloc: Allocation, work: Work, model: Scaling) -> tuple[float, float]:
    """One trial's (seconds on its trial group, busy rank-seconds): each lease trains its
    folds in ``ceil(folds / fold_groups)`` rounds, weighted by its share."""
    seconds = busy = 0.0
    for u in work.units or (Unit(work.folds, work.epochs),):
        fold = fold_seconds(layout, alloc, work, model, u.epochs)
        seconds += u.share * (-(-u.folds // layout.fold_groups) * fold + work.trial_overhead)
        busy += u.share * u.folds * layout.ranks_per_fold * fold
    return seconds, busy


def predict(layout: Layout, alloc: Allocation, work: Work, model: Scaling) -> Prediction:
    fold = fold_seconds(layout, alloc, work, model)
    trial, busy_per_trial = trial_work(layout, alloc, work, model)
    active = min(layout.groups, work.max_parallel or layout.groups, max(work.trials, 1))
    waves = -(-work.trials // active) if work.trials else 0
    makespan = waves * trial
    by_deadline = work.trials if work.deadline is None else min(work.trials, int(work.deadline // trial) * active)
    busy = work.trials * busy_per_trial
    util = busy / (alloc.world * makespan) if makespan > 0 else 0.0
    far = model.extrapolated(layout.ranks_per_fold)
    return Prediction(layout, fold, trial, active, makespan, by_deadline, 3600.0 * active / trial, util, far)


def _key(p: Prediction) -> tuple[float, float, float]:
    return (-p.by_deadline, p.makespan if p.makespan > 0 else 0.0, -p.layout.groups)


def ranked(preds: Sequence[Prediction], *, learns: bool = False) -> list[Prediction]:
    """Best first: most trials by the deadline, then the shortest time to finish; plans
    within :data:`TIE` of the best time count as equal, and more trials at once wins.
    For a search that learns from results (``learns``) plans within :data:`FEEDBACK` are
    equal, and the one whose trials finish soonest wins (then more trials at once).
    Plans at widths far outside the measured ones (``extrapolated``) come after every
    plan the measurements cover: their figures rest on the model's form alone."""
    near = [p for p in preds if not p.extrapolated]
    if near and len(near) < len(preds):
        return _ranked(near, learns) + _ranked([p for p in preds if p.extrapolated], learns)
    return _ranked(preds, learns)


def _ranked(preds: Sequence[Prediction], learns: bool) -> list[Prediction]:
    if not preds:
        return []
    order = sorted(preds, key=_key)
    window = FEEDBACK if learns else TIE
    out: list[Prediction] = []
    rest = list(order)
    while rest:
        lead = rest[0]
        tied = [
            p for p in rest if p.by_deadline == lead.by_deadline and p.makespan <= lead.makespan * (1 + window) + 1e-9
        ]
        if learns:
            tied.sort(key=lambda p: (p.trial_seconds, -p.active, p.makespan))
        else:
            tied.sort(key=lambda p: (-p.layout.groups, p.makespan, -p.layout.fold_groups))
        out += tied
        rest = [p for p in rest if p not in tied]
    return out


@dataclass(frozen=True)
class Plan:
    best: Prediction
    runner_up: Prediction | None
    table: list[Prediction] = field(default_factory=list)

    def describe(self, alloc: Allocation) -> str:
        b = self.best
        text = (
            f"{alloc.world} ranks = {b.layout.shape()}; predicted {b.trials_per_hour:.3g} trials/h, "
            f"{b.utilisation:.0%} of the ranks busy"
        )
        if self.runner_up is not None:
            r = self.runner_up
            text += f"; runner-up {r.layout.shape()} ({r.trials_per_hour:.3g} trials/h)"
        return text


def plan(
    alloc: Allocation,
    work: Work,
    model: Scaling,
    *,
    pinned_ranks: int | None = None,
    groups: int | None = None,
    valid_ranks: Callable[[int], bool] | None = None,
) -> Plan:
    """The best layout for what is left, and the runner-up; :class:`PlanError` when no
    layout fits (naming the pinned ``training.ranks_per_fold`` or ``--groups``)."""
    if pinned_ranks is not None and pinned_ranks < 1:
        raise PlanError(f"training.ranks_per_fold must be >= 1, got {pinned_ranks}")
    layouts = candidates(alloc.world, work.folds, pinned_ranks=pinned_ranks, groups=groups, valid_ranks=valid_ranks)
    if not layouts:
        what = []
        if pinned_ranks is not None:
            what.append(f"training.ranks_per_fold={pinned_ranks}")
        if groups is not None:
            what.append(f"--groups {groups}")
        fits = [r for r in range(1, alloc.world + 1) if candidates(alloc.world, work.folds, pinned_ranks=r)]
        if valid_ranks is not None:
            fits = [r for r in fits if valid_ranks(r)]
        raise PlanError(
            f"no layout of {alloc.world} ranks fits {' and '.join(what) or 'the campaign'} with {work.folds} folds; "
            f"ranks per fold that fit this allocation: {', '.join(map(str, fits)) or 'none'}"
        )
    table = ranked([predict(lay, alloc, work, model) for lay in layouts], learns=work.learns)
    return Plan(table[0], table[1] if len(table) > 1 else None, table)


def may_start(remaining: float | None, to_checkpoint: float, reserve: float) -> bool:
    """Whether a trial may start with ``remaining`` seconds of walltime: only if it is
    predicted to reach its first checkpoint (``to_checkpoint`` seconds) before the last
    ``reserve`` seconds, which are kept for checkpointing and giving trials back."""
    if remaining is None:
        return True
    return remaining - reserve >= to_checkpoint


@dataclass(frozen=True)
class Simulation:
    """A campaign played out in waves under a planner (re-planning or not)."""

    makespan: float
    completed_by_deadline: int
    busy_rank_seconds: float
    #: Idle rank-seconds in the last 20 % of the makespan.
    idle_tail: float
    layouts: tuple[Layout, ...]
    #: Waves of trials: the rounds of results a search that learns gets.
    waves: int = 0
    #: Seconds until the first trials finish (the first results a search sees).
    first_results: float = 0.0

    def utilisation(self, world: int) -> float:
        return self.busy_rank_seconds / (world * self.makespan) if self.makespan else 0.0


def simulate(
    alloc: Allocation,
    work: Work,
    model: Scaling,
    *,
    fixed: Layout | None = None,
    pinned_ranks: int | None = None,
    valid_ranks: Callable[[int], bool] | None = None,
) -> Simulation:
    """Plays out ``work.trials`` trials wave by wave. With ``fixed`` the layout stays;
    without, the planner plans for all of them and re-plans for what is left whenever
    fewer trials remain than trial groups, as the agent does under ``--groups auto``.
    Each wave starts ``active`` trials and lasts one trial's time; the idle ranks of a
    partial wave are counted."""
    t, left, busy, done_by = 0.0, work.trials, 0.0, 0
    spans: list[tuple[float, float, float]] = []  # (start, end, busy ranks)
    used: list[Layout] = []
    layout = fixed
    while left > 0:
        w = replace(work, trials=left)
        if fixed is None and (layout is None or left < layout.groups):
            layout = plan(alloc, w, model, pinned_ranks=pinned_ranks, valid_ranks=valid_ranks).best.layout
        assert layout is not None
        p = predict(layout, alloc, w, model)
        start = min(p.active, left)
        ranks_busy = start * trial_work(layout, alloc, w, model)[1] / p.trial_seconds
        spans.append((t, t + p.trial_seconds, ranks_busy))
        busy += ranks_busy * p.trial_seconds
        t += p.trial_seconds
        if work.deadline is None or t <= work.deadline:
            done_by += start
        left -= start
        if not used or used[-1] != layout:
            used.append(layout)
    tail_from = 0.8 * t
    idle = sum((alloc.world - b) * (e - max(s, tail_from)) for s, e, b in spans if e > tail_from)
    first = spans[0][1] if spans else 0.0
    return Simulation(t, done_by, busy, idle, tuple(used), len(spans), first)
