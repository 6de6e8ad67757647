"""``algorithm: mf``: the multi-fidelity searcher (``multifidelity.py``) as a campaign's
optimizer.

A trial is a configuration. It starts on one fold and a few epochs (its ``fidelity``);
when its agent completes that unit of work the server PAUSES it with the rung's value
(``storage/agent_calls/ending.py``). The searcher then promotes it (the same trial,
RUNNING again with more epochs or more folds: its agent resumes each fold from its own
checkpoint and trains only the new fold-epochs) or leaves it waiting; once the campaign's
``max_trials`` configurations exist and nothing can climb, the waiting ones are stopped
(PRUNED, "not promoted past rung r"). Only the top rung, all K folds and all epochs,
COMPLETES a trial: the campaign's best and its Pareto members are always K-fold results.

The searcher's state is rebuilt from the trials alone (their ``fidelity.history``: each
finished rung's fold values and seconds), so a server restart, or another replica that
created trials, loses nothing: every plan call first brings it up to date with what the
trials say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from hpcopt.core.fidelity import ETA, FOLD_PROMOTION, MIN_EPOCHS
from hpcopt.core.options import Option
from hpcopt.errors import OptionError
from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem
from hpcopt_server.optimizers.fidelity import Config
from hpcopt_server.optimizers.multifidelity import MultiFidelitySearch, Work

#: The states in which a trial's unit is on its way (resumed by the queue first).
_UNDER_WAY = (d.TrialState.RUNNING, d.TrialState.QUEUED)


class MultiFidelity(Optimizer):
    plans = True
    pauses = True

    OPTIONS: ClassVar[dict[str, Option]] = {
        "min_epochs": Option(MIN_EPOCHS, int, low=1, high=1_000_000, doc="epochs of a new configuration's first rung"),
        "eta": Option(
            ETA,
            float,
            low=1.5,
            high=10.0,
            doc="each rung has eta times the epochs (then folds) of the one below; the best 1/eta of a rung climbs",
        ),
        "fold_promotion": Option(
            FOLD_PROMOTION,
            bool,
            doc="folds are rungs of their own (1, eta, ..., K at all epochs); false: from one fold straight to K",
        ),
        "p_more_folds": Option(
            0.05,
            float,
            low=0.0,
            high=1.0,
            doc="the least chance of beating the incumbent on all folds for a configuration to get more folds",
        ),
        "stable_rank": Option(
            0.9,
            float,
            low=-1.0,
            high=1.0,
            doc="the Spearman correlation of the top two rungs above which the top rung is kept for challengers",
        ),
        "patience": Option(3, int, low=1, high=1000, doc="arrivals at the top with the same incumbent for stability"),
        "min_rank": Option(
            0.5,
            float,
            low=-1.0,
            high=1.0,
            doc="an epoch rung whose ranking the next rung confirms less than this is skipped by new configurations",
        ),
        "n_initial": Option(10, int, low=1, high=10_000, doc="configurations drawn at random before the model"),
        "candidates": Option(512, int, low=16, high=100_000, doc="random candidates scored per new configuration"),
        "max_points": Option(
            2000, int, low=50, high=20_000, doc="rungs in the GP (a seeded subset beyond, the best kept)"
        ),
    }

    def __init__(self, problem: Problem):
        super().__init__(problem)
        opts = {name: self.option(name) for name in self.OPTIONS}
        if problem.multi_objective:
            raise OptionError("algorithm.name", "mf optimizes one objective; use bo, ea or random")
        if problem.epochs <= 0:
            raise OptionError(
                "training",
                "mf gives trials epochs and folds itself: the campaign needs a training section (agents resume each "
                "fold from its checkpoint)",
            )
        if problem.pruner != "none":
            raise OptionError("pruner", "mf decides itself which trials train on; use pruner: none")
        if opts["fold_promotion"] and problem.folds < 2 and "fold_promotion" in self.options:
            raise OptionError("options.fold_promotion", "needs folds >= 2: with one fold there is no fold to promote")
        if opts["min_epochs"] > problem.epochs:
            raise OptionError(
                "options.min_epochs", f"must be at most training.epochs ({problem.epochs}); got {opts['min_epochs']}"
            )
        # Every option is a keyword of the searcher, by the same name.
        self.search = MultiFidelitySearch(
            self.space, folds=problem.folds, epochs=problem.epochs, seed=problem.seed, **opts
        )
        self.rungs = self.search.rungs
        self.budget = problem.budget
        self._by_trial: dict[int, int] = {}  # trial id -> configuration
        self._trial_of: dict[int, d.Trial] = {}  # configuration -> its trial, as last seen
        self._told: dict[int, int] = {}  # configuration -> rungs of its history told
        self._made: dict[int, d.Params] = {}  # configurations suggested, with no trial yet

    # -- the trials, read back ------------------------------------------------------------

    def observe(self, trials: Sequence[d.Trial]) -> None:
        self._sync(trials)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        raise NotImplementedError("mf suggests through plan(): each suggestion carries its folds and epochs")

    def _sync(self, trials: Sequence[d.Trial]) -> None:
        """Brings the searcher up to date with ``trials`` (any states): each one's
        finished rungs told once, in order; what it runs now marked running."""
        for t in sorted(trials, key=lambda t: t.number):
            if t.fidelity is None:
                continue  # not a multi-fidelity trial (a warm start's)
            ci = self._config_of(t)
            c = self.search.configs[ci]
            self._trial_of[ci] = t
            history = t.fidelity.history
            seconds = history[self._told[ci] - 1].seconds if self._told[ci] else 0.0
            for r in history[self._told[ci] :]:
                if c.failed or r.rung != c.next_rung or not 0 <= r.rung < len(self.rungs):
                    break  # a history this ladder cannot follow: it climbs no further
                self.search.tell(ci, r.rung, list(r.values), max(0.0, r.seconds - seconds))
                seconds = r.seconds
                self._told[ci] += 1
            if t.state in _UNDER_WAY:
                c.running = t.fidelity.rung
            elif t.state == d.TrialState.PAUSED:
                c.running = None
            else:  # COMPLETED at the top, or stopped (pruned, failed, cancelled)
                c.running = None
                if c.done < self.search.rules.top:
                    c.failed = True

    def _config_of(self, t: d.Trial) -> int:
        ci = self._by_trial.get(t.id)
        if ci is not None:
            return ci
        assert t.fidelity is not None
        match = next((i for i, p in self._made.items() if p == t.params), None)
        if match is not None:
            del self._made[match]
            ci = match
        else:  # a trial this instance did not suggest (a restart, another replica)
            first = t.fidelity.history[0].rung if t.fidelity.history else t.fidelity.rung
            x = self.search.encoder.encode(t.params)
            ci = len(self.search.configs)
            self.search.configs.append(Config(ci, x, dict(t.params), start=first))
        self._by_trial[t.id] = ci
        self._told[ci] = 0
        return ci

    # -- plans ------------------------------------------------------------------------

    def plan(self, n: int, pending: Sequence[d.Trial]) -> list[d.Suggestion]:
        """Up to ``n`` units: promotions of PAUSED trials first, then new configurations
        while ``max_trials`` allows; with the budget spent and nothing under way or able
        to climb, the end of every PAUSED trial. ``pending``: the campaign's QUEUED,
        RUNNING and PAUSED trials."""
        self._sync(pending)
        for ci in self._made:  # suggested last time, never created (an acquisition cut it)
            c = self.search.configs[ci]
            c.running, c.failed = None, True
        self._made.clear()
        created = len(self._by_trial)
        out: list[d.Suggestion] = []
        for _ in range(n):
            new = created < self.budget
            drained = not new and self.search.incumbent() is None
            work = self.search.next(new=new, drained=drained)
            if work is None:
                break
            out.append(self._suggestion(work))
            if work.config not in self._trial_of:
                created += 1
        if not out and created >= self.budget and not any(t.state in _UNDER_WAY for t in pending):
            out += self._retire(pending)
        return out

    def _suggestion(self, work: Work) -> d.Suggestion:
        trial = self._trial_of.get(work.config)
        rung = work.rung
        if trial is None:
            self._made[work.config] = dict(work.params)
            return d.Suggestion(dict(work.params), fidelity=d.Fidelity(rung.index, rung.folds, rung.epochs, work.why))
        assert trial.fidelity is not None
        fidelity = d.Fidelity(rung.index, rung.folds, rung.epochs, work.why, trial.fidelity.history)
        return d.Suggestion(dict(trial.params), fidelity=fidelity, promote=trial.id)

    def _retire(self, pending: Sequence[d.Trial]) -> list[d.Suggestion]:
        inc = self.search.incumbent()
        best = "" if inc is None else f"; trial #{self._trial_of[inc.index].number} is the best on all folds"
        out = []
        for t in pending:
            if t.state != d.TrialState.PAUSED or t.fidelity is None:
                continue
            rung = self.rungs[t.fidelity.rung] if 0 <= t.fidelity.rung < len(self.rungs) else None
            where = rung.label() if rung is not None else f"rung {t.fidelity.rung}"
            value = "" if t.value is None or not math.isfinite(t.value) else f" ({t.value:.6g} there)"
            why = f"not promoted past {where}{value}: the budget's configurations are all made{best}"
            out.append(d.Suggestion(dict(t.params), promote=t.id, retire=why))
        return out
