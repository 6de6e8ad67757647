"""Population-based training (Jaderberg et al. 2017, "Population Based Training of
Neural Networks", arXiv:1711.09846): a population of ``population`` members trains in
parallel; every ``interval`` epochs a member reports, and one in the bottom
``quantile`` of the members that have reached that epoch copies the weights of one in
the top ``quantile`` (exploit) and perturbs the copied hyper-parameters (explore).

Here every interval of a member is a trial of its own, whose lineage
(:class:`hpcopt_server.domain.Lineage`) is stored with it in SQL: the member, its
epochs, the trial whose checkpoint it starts from, its own previous interval, and what
the explore step changed. The agent starts an interval from the parent's fold
checkpoints and trains it to ``stop_epoch``; the server accepts a PBT fold only with its
checkpoint, so a parent is always a COMPLETED interval whose every fold wrote one. A
preempted interval resumes from its own checkpoints, as any trial does.

The decision is asynchronous (as in the paper and Ray Tune's PBT): at its report a
member is ranked by the latest score of every member, so fast members never wait; it
copies a member that has a checkpoint at its own epoch, so every member trains its
epochs in the same number of intervals (and the campaign's budget is exact).
Everything is derived from the trials themselves (nothing else is kept), so a
restarted server or a replica makes the same decisions, and one seed gives one
campaign for one order of reports.

- **A member is continued** (same params, its own checkpoint) unless it is in the
  bottom ``quantile`` of the population's latest scores (two members at least) and a
  member in the top ``quantile`` (or, failing one, any that did better) has a
  checkpoint at its epoch.
- **Explore** changes each ``mutable`` parameter: with ``resample_probability`` it is
  drawn afresh from the space; otherwise a number is multiplied by ``1 ± perturb``
  (clipped to its bounds; an integer moves by at least one) and a categorical moves to
  a neighbouring choice. Parameters not in ``mutable`` are copied from the parent with
  its weights (a parameter that shapes the model must stay there; the agent refuses a
  campaign that lists one, with the parameter named).
- **A failed interval** (or one pruned or cancelled) restarts its member from the best
  interval that reached its start epoch (or from a fresh draw at epoch 0). It counts
  against ``max_trials`` like any failed trial, so a campaign with failures may end
  before every member trained all its epochs.
- **A parent that cannot be read** (an agent found its checkpoint files missing,
  refused or unreadable: ``Lineage.unreadable`` of the interval that tried) is never
  offered again: the interval is re-planned in place (:meth:`replan`) as if that
  parent had no checkpoints, so it copies the next-best member or goes on from its own
  previous interval. A member whose own last interval cannot be read (or reported no
  checkpoints) copies the best readable one at that epoch. Only the unreadable
  interval's work is lost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hpcopt.core.options import Option
from hpcopt.errors import OptionError
from hpcopt_server import domain as d
from hpcopt_server.optimizers import pb2
from hpcopt_server.optimizers.base import Optimizer, Problem, to_minimize
from hpcopt_server.optimizers.space import Dimension


class PopulationBasedTraining(Optimizer):
    plans = True
    OPTIONS = {
        "population": Option(
            None, int, low=2, high=10_000, derived="budget.max_parallel", doc="members trained side by side"
        ),
        "interval": Option(
            None,
            int,
            low=1,
            high=1_000_000,
            derived="training.epochs / 5 (at least 1)",
            doc="epochs a member trains between two reports (each interval is a trial)",
        ),
        "quantile": Option(
            0.25,
            float,
            low=0.0,
            high=0.5,
            open_low=True,
            doc="the bottom share that copies the top share",
        ),
        "perturb": Option(0.2, float, low=0.0, high=0.9, open_low=True, doc="numbers move by a factor 1 ± perturb"),
        "resample_probability": Option(
            0.25, float, low=0.0, high=1.0, doc="chance that explore draws a parameter afresh"
        ),
        "mutable": Option(
            None,
            list,
            optional=True,
            derived="every parameter",
            doc="the parameters explore may change (the others are copied with the weights)",
        ),
        "explore": Option(
            "perturb",
            str,
            choices=("perturb", "pb2"),
            doc="how new hyper-parameters are chosen: random perturbation, or PB2's GP bandit",
        ),
    }

    def __init__(self, problem: Problem):
        super().__init__(problem)
        # Every option first (each refusal names its own field), then what they must fit.
        self.epochs = problem.epochs
        self.population = int(self.option("population", problem.max_parallel or 2))
        self.interval = int(self.option("interval", max(1, self.epochs // 5)))
        self.quantile = float(self.option("quantile"))
        self.perturb = float(self.option("perturb"))
        self.resample = float(self.option("resample_probability"))
        self.explore = str(self.option("explore"))
        names = [dim.name for dim in self.space.dims]
        mutable = self.option("mutable")
        if mutable is None:
            mutable = names
        for i, name in enumerate(mutable):
            if name not in names:
                raise OptionError(f"options.mutable[{i}]", f"{name!r} is not a parameter of the space; known: {names}")
        self.mutable = frozenset(mutable)
        if problem.multi_objective:
            raise OptionError("algorithm.name", "pbt optimizes one objective; use bo, ea or random")
        if problem.epochs <= 0:
            raise OptionError(
                "training",
                "pbt trains its members itself: the campaign needs a training section (agents resume members from "
                "their checkpoints)",
            )
        if problem.pruner != "none":
            raise OptionError("pruner", "pbt decides itself which members go on; use pruner: none")
        if self.population > problem.max_parallel:
            raise OptionError(
                "options.population",
                f"{self.population} members need max_parallel >= {self.population} (it is {problem.max_parallel}): "
                "every member trains at once",
            )
        if self.interval >= self.epochs:
            raise OptionError(
                "options.interval",
                f"must be less than training.epochs ({self.epochs}): a member reports at least once before its end",
            )
        self.generations = math.ceil(self.epochs / self.interval)
        need = self.population * self.generations
        if problem.budget != need:
            raise OptionError(
                "budget.max_trials",
                f"must be {need} for pbt: {self.population} members x {self.generations} intervals (training.epochs "
                f"{self.epochs} in intervals of {self.interval}); each interval is a trial",
            )
        self._finished: dict[int, d.Trial] = {}  # by number: every finished PBT interval
        self._unreadable: set[int] = set()  # numbers of intervals whose checkpoints an agent could not read

    # -- what the server feeds -----------------------------------------------------------

    def observe(self, trials: Sequence[d.Trial]) -> None:
        for trial in trials:
            if trial.lineage is not None:
                self._finished[trial.number] = trial
                self._unreadable.update(trial.lineage.unreadable)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        raise NotImplementedError("pbt suggests through plan(): each suggestion carries its lineage")

    def plan(self, n: int, pending: Sequence[d.Trial]) -> list[d.Suggestion]:
        self._note_unreadable(pending)
        latest: dict[int, d.Trial] = {}
        for trial in [*self._finished.values(), *pending]:
            if trial.lineage is None:
                continue
            held = latest.get(trial.lineage.member)
            if held is None or trial.number > held.number:
                latest[trial.lineage.member] = trial
        ready: list[tuple[int, int, d.Suggestion]] = []  # (start epoch, member, interval)
        for member in range(self.population):
            last = latest.get(member)
            if last is None:
                nxt: d.Suggestion | None = self._first(member)
            elif last.state.finished:
                nxt = self._next(last, pending)
            else:
                continue  # its interval is still training
            if nxt is not None:
                assert nxt.lineage is not None
                ready.append((nxt.lineage.start_epoch, member, nxt))
        # The member furthest behind goes first (Ray Tune's order too): with fewer trials
        # at once than members, offering them in index order trained the population in
        # waves, the first members finishing every epoch before the last had started, so
        # late members were ranked against finished ones and copied stale checkpoints.
        return [s for _, _, s in sorted(ready, key=lambda r: r[:2])[:n]]

    # -- decisions -----------------------------------------------------------------------

    def _stop(self, start: int) -> int:
        return min(start + self.interval, self.epochs)

    def _first(self, member: int, draw: int = 0) -> d.Suggestion:
        rng = np.random.default_rng([self.seed, member, draw])
        params = self.space.decode(rng.random(len(self.space)))
        return d.Suggestion(params, d.Lineage(member, 0, self._stop(0)))

    def _next(self, last: d.Trial, pending: Sequence[d.Trial]) -> d.Suggestion | None:
        """What follows a member's finished interval ``last``: None when the member is
        done, or must wait for another member to reach its epoch; else its continuation,
        an exploit, or (after a failure) a restart. ``pending``: the campaign's QUEUED
        and RUNNING intervals."""
        assert last.lineage is not None
        lin = last.lineage
        if last.state == d.TrialState.COMPLETED and lin.stop_epoch >= self.epochs:
            return None
        if self._can_parent(last):
            at = lin.stop_epoch
            donors = self._donors(last)
            if not donors:
                return d.Suggestion(
                    dict(last.params),
                    d.Lineage(lin.member, at, self._stop(at), last.number, last.number, {}, last.id),
                )
            rng = np.random.default_rng([self.seed, last.number, 1])
            donor = donors[int(rng.integers(len(donors)))]
            return self._exploit(donor, last, at, rng)
        if last.state == d.TrialState.COMPLETED and last.value is not None:
            # It trained, but its checkpoints cannot be read: the member copies the best
            # readable interval at that epoch, and keeps its schedule.
            ranked = self._ranked(lin.stop_epoch)
            if ranked:
                rng = np.random.default_rng([self.seed, last.number, 3])
                return self._exploit(ranked[0], last, lin.stop_epoch, rng)
            if self._coming(lin.stop_epoch, lin.member, pending):
                return None  # another member will reach that epoch: copy it then
        # A failed (pruned, cancelled) interval, or one nothing can start from and no
        # readable one at its epoch: start the member again where it started.
        at = lin.start_epoch
        ranked = self._ranked(at) if at > 0 else []
        if not ranked:
            first = self._first(lin.member, draw=last.number + 1)
            assert first.lineage is not None
            return d.Suggestion(first.params, d.Lineage(lin.member, 0, self._stop(0), None, last.number))
        rng = np.random.default_rng([self.seed, last.number, 2])
        return self._exploit(ranked[0], last, at, rng)

    def _loss(self, t: d.Trial) -> float:
        return to_minimize(t, self.direction) or 0.0

    def _donors(self, last: d.Trial) -> list[d.Trial]:
        """Whom ``last`` copies (empty: it goes on). As in the paper and in Ray Tune, the
        population is ranked by each member's latest score (``last`` among them); a
        member in the bottom ``quantile`` copies one in the top ``quantile`` that has a
        checkpoint at ``last``'s epoch, else one at that epoch that did better (so every
        member trains its epochs in the same number of intervals)."""
        latest: dict[int, d.Trial] = {}
        for t in self._finished.values():
            if t.lineage is not None and self._can_parent(t):
                held = latest.get(t.lineage.member)
                if held is None or t.number > held.number:
                    latest[t.lineage.member] = t
        pool = sorted(latest.values(), key=lambda t: (self._loss(t), t.number))
        cut = min(math.ceil(self.quantile * len(pool)), len(pool) // 2)
        if not cut or last.number not in {t.number for t in pool[len(pool) - cut :]}:
            return []
        assert last.lineage is not None
        at = last.lineage.stop_epoch
        top = [t for t in pool[:cut] if t.lineage is not None and t.lineage.stop_epoch == at]
        if top:
            return top
        better = [t for t in self._ranked(at) if self._loss(t) < self._loss(last)]
        return better[:cut]

    def _ranked(self, epoch: int) -> list[d.Trial]:
        """The COMPLETED intervals that ended at ``epoch`` with a checkpoint of every
        fold, best first (one per member, its latest; ties by number)."""
        best: dict[int, d.Trial] = {}
        for t in self._finished.values():
            lin = t.lineage
            if lin is None or lin.stop_epoch != epoch or not self._can_parent(t):
                continue
            held = best.get(lin.member)
            if held is None or t.number > held.number:
                best[lin.member] = t
        return sorted(best.values(), key=lambda t: (self._loss(t), t.number))

    def replan(self, trial: d.Trial, pending: Sequence[d.Trial]) -> d.Suggestion | None:
        """What the running interval ``trial`` trains instead, now that its agent could
        not read the parents in ``trial.lineage.unreadable`` (its current parent last):
        the member's next step decided again without them, keeping that list. None
        when it must wait: its member's own last interval is the unreadable one and no
        readable interval has reached that epoch yet, but another member will (asked
        again, it copies that one, so the member keeps its schedule and the budget
        stays exact)."""
        lin = trial.lineage
        if lin is None or lin.previous is None:
            return None
        self._note_unreadable([*pending, trial])
        last = self._finished.get(lin.previous)
        made = None if last is None else self._next(last, pending)
        if made is None or made.lineage is None:
            return None
        return replace(made, lineage=replace(made.lineage, unreadable=lin.unreadable))

    def _coming(self, epoch: int, member: int, pending: Sequence[d.Trial]) -> bool:
        """Whether another member than ``member`` is training toward ``epoch`` (an
        interval of it is pending) or, with budget left, will be (its latest interval
        ended before ``epoch``, or it has none yet)."""
        latest: dict[int, d.Trial] = {}
        for t in [*self._finished.values(), *pending]:
            if t.lineage is not None and t.lineage.member != member:
                held = latest.get(t.lineage.member)
                if held is None or t.number > held.number:
                    latest[t.lineage.member] = t
        room = len(self._finished) + len(pending) < self.problem.budget
        if room and len(latest) < self.population - 1:
            return True
        for t in latest.values():
            lin = t.lineage
            assert lin is not None
            if not t.state.finished and lin.start_epoch < epoch <= lin.stop_epoch:
                return True
            if room and lin.stop_epoch < epoch:
                return True
        return False

    def _note_unreadable(self, trials: Sequence[d.Trial]) -> None:
        for t in trials:
            if t.lineage is not None:
                self._unreadable.update(t.lineage.unreadable)

    def _can_parent(self, trial: d.Trial) -> bool:
        return trial.number not in self._unreadable and _parent_ok(trial, self.problem.folds)

    def _exploit(self, donor: d.Trial, last: d.Trial, at: int, rng: np.random.Generator) -> d.Suggestion:
        assert last.lineage is not None
        params = None
        if self.explore == "pb2":
            params = self._pb2(dict(donor.params), at, last.number)
        if params is None:
            params = self._explore(dict(donor.params), rng)
        changed = {k: [donor.params.get(k, ""), v] for k, v in params.items() if donor.params.get(k) != v}
        lineage = d.Lineage(last.lineage.member, at, self._stop(at), donor.number, last.number, changed, donor.id)
        return d.Suggestion(params, lineage)

    def _pb2(self, params: d.Params, at: int, draw: int) -> d.Params | None:
        """PB2's choice of the numeric mutable parameters (``pb2.py``); None: too few data."""
        dims = [dim for dim in self.space.dims if dim.name in self.mutable and dim.type != "categorical"]
        data = []
        for t in self._finished.values():
            lin = t.lineage
            parent = self._finished.get(lin.parent) if lin is not None and lin.parent is not None else None
            if lin is None or parent is None or t.state != d.TrialState.COMPLETED or parent.value is None:
                continue
            data.append((t.params, lin.start_epoch / self.epochs, self._loss(parent) - self._loss(t)))
        chosen = pb2.choose(dims, data, params, at / self.epochs, self.seed, draw)
        return None if chosen is None else self.space.active({**params, **chosen})

    def _explore(self, params: d.Params, rng: np.random.Generator) -> d.Params:
        out = dict(params)
        for dim in self.space.dims:
            if dim.name not in self.mutable or dim.name not in out:
                continue
            if rng.random() < self.resample:
                out[dim.name] = dim.decode(rng.random())
            else:
                out[dim.name] = self._perturbed(dim, out[dim.name], rng)
        # A changed parent may switch conditional parameters on (drawn afresh) or off.
        for dim in self.space.dims:
            if dim.name not in out and dim.active(out):
                out[dim.name] = dim.decode(rng.random())
        return self.space.active(out)

    def _perturbed(self, dim: Dimension, value: d.ParamValue, rng: np.random.Generator) -> d.ParamValue:
        up = bool(rng.random() < 0.5)
        if dim.type == "categorical":
            i = dim.choices.index(value) if value in dim.choices else 0
            return dim.choices[min(max(i + (1 if up else -1), 0), len(dim.choices) - 1)]
        x = float(value)
        factor = 1 + self.perturb if up else 1 - self.perturb
        moved = x * factor if x != 0 else (1 if up else -1) * self.perturb * (dim.high - dim.low)
        if dim.type == "int":
            step = round(moved) - int(x)
            moved = int(x) + (step if step != 0 else (1 if up else -1))
            return int(min(max(moved, dim.low), dim.high))
        return float(min(max(moved, dim.low), dim.high))


def _parent_ok(trial: d.Trial, folds: int) -> bool:
    """Whether an interval can be a parent: COMPLETED with a value and a checkpoint
    reported for each of its ``folds`` folds."""
    if trial.state != d.TrialState.COMPLETED or trial.value is None:
        return False
    written = {f.index for f in trial.folds if f.finished and f.checkpoint_uri}
    return written.issuperset(range(folds))
