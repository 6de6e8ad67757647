"""Per-campaign optimizer state, cached in the server and rebuilt from SQL.

SQL is the truth. Every trial that reaches a final state gets the next ``finish_seq`` of
its campaign, handed out under the campaign row lock. The cache remembers the highest
sequence each optimizer has seen; before a suggestion it reads only the trials finished
after it (another replica, or this server before a restart, may have finished them) and
feeds those to ``observe``. A cold cache rebuilds from the whole history once; a warm
one catches up in O(new trials). At start, :meth:`OptimizerCache.warm` rebuilds the
running campaigns' optimizers in the background, so the first acquisition after a
restart does not (5 s for a ``bo`` campaign of 100,000 trials); one that arrives while
its campaign is being rebuilt waits for it rather than rebuilding it again.
"""

from __future__ import annotations

import logging
import math
import threading
import zlib
from dataclasses import dataclass, replace
from typing import Any

from hpcopt.errors import OptionError
from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument
from hpcopt_server.optimizers import REGISTRY, Optimizer, Problem, SearchSpace
from hpcopt_server.optimizers.feasibility import SCREEN_AT, screen
from hpcopt_server.service.warmstart import warm_trials
from hpcopt_server.storage.repository import Tx

log = logging.getLogger(__name__)
#: The most suggestions one acquisition makes in place of ones refused before launch.
MAX_REFUSED = 8


@dataclass
class _Entry:
    optimizer: Optimizer
    budget: Any  # the spec's budget it was built for: a raised budget rebuilds it
    seen_seq: int = 0  # the highest trials.finish_seq fed to observe()


class OptimizerCache:
    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._building: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def settle(self) -> None:
        """Waits for the background work of every cached optimizer (a GP refit)."""
        with self._lock:
            optimizers = [e.optimizer for e in self._entries.values()]
        for optimizer in optimizers:
            optimizer.settle()

    def reserve(self, campaign_ids: list[int]) -> None:
        """Marks campaigns whose optimizers :meth:`warm` is about to build: a suggestion
        for one waits for it."""
        with self._lock:
            for cid in campaign_ids:
                if cid not in self._entries:
                    self._building.setdefault(cid, threading.Event())

    def warm(self, tx: Tx, campaign: d.Campaign) -> None:
        """Builds the campaign's optimizer and feeds it the whole finished history (off
        the request path), unless it is built already; releases a :meth:`reserve`."""
        with self._lock:
            built = campaign.id in self._entries
        try:
            if not built:
                entry = self._new_entry(tx, campaign)
                new = _finished_after(tx, campaign.id, entry)
                entry.optimizer.feed(new)
                entry.seen_seq = (new[-1].finish_seq or 0) if new else 0
                with self._lock:
                    self._entries.setdefault(campaign.id, entry)
        finally:
            self.release(campaign.id)

    def release(self, campaign_id: int) -> None:
        """Ends a :meth:`reserve`: suggestions waiting for it go on (building the
        optimizer themselves if :meth:`warm` did not)."""
        with self._lock:
            done = self._building.pop(campaign_id, None)
        if done is not None:
            done.set()

    def suggest(self, tx: Tx, campaign: d.Campaign, n: int = 1, *, active: int | None = None) -> list[d.Suggestion]:
        """At most ``n`` suggestions for the campaign (fewer only when its optimizer has
        fewer ready: PBT); call with the campaign row locked. ``active``: the campaign's
        QUEUED + RUNNING count, if the caller has just read it."""
        optimizer = self._caught_up(tx, campaign)
        if optimizer.plans:
            made = skip_infeasible(optimizer.plan(n, _active(tx, campaign.id, paused=optimizer.pauses)), optimizer)
        else:
            pending: list[d.Params]
            if optimizer.pending_params:
                pending = [t.params for t in _active(tx, campaign.id)]
            else:  # only how many are pending matters: no need to read a thousand rows
                pending = [{}] * (tx.trials.count_active(campaign.id) if active is None else active)
            made = [d.Suggestion(params) for params in self._screened(optimizer, n, pending)]
            room = campaign.max_trials - campaign.trials_created - n
            made = self._prelaunch(optimizer, made, pending, min(room, MAX_REFUSED))
        return [replace(m, params=_finite(campaign.id, m.params)) for m in made]

    @staticmethod
    def _prelaunch(
        optimizer: Optimizer, made: list[d.Suggestion], pending: list[d.Params], spare: int
    ) -> list[d.Suggestion]:
        """Hard limits before launch: a suggestion predicted to break a resource
        constraint (``Feasibility.refuse``) is marked ``refused``, to be recorded as a
        FAILED trial that never started (its budget spent, the search told), and while
        ``spare`` trials of the budget allow, another is asked for in its place (the
        refused ones pending), so that the agent waits for none."""
        model = optimizer.feasibility
        if model is None:
            return made
        out = [replace(m, refused=model.refuse(m.params)) for m in made]
        missing = sum(m.refused is not None for m in out)
        while missing and spare > 0:
            [params] = optimizer.suggest(1, [*pending, *(m.params for m in out)])
            m = d.Suggestion(params, refused=model.refuse(params))
            out.append(m)
            missing -= m.refused is None
            spare -= 1
        return out

    @staticmethod
    def _screened(optimizer: Optimizer, n: int, pending: list[d.Params]) -> list[d.Params]:
        """``n`` suggestions; from an algorithm without a constraint model of its own,
        each one the constraint models deem likely infeasible is replaced by a likelier
        one it makes next (``feasibility.screen``)."""
        made = optimizer.suggest(n, pending)
        if optimizer.models_constraints:
            return made

        def again(k: int) -> d.Params:
            return optimizer.alternative(k, [*pending, *made])

        return screen(made, optimizer.feasibility, again)

    def replan(self, tx: Tx, campaign: d.Campaign, trial: d.Trial) -> d.Suggestion | None:
        """What the running PBT interval ``trial`` trains instead of starting from a
        parent its agent could not read (``Optimizer.replan``); call with the campaign
        row locked."""
        optimizer = self._caught_up(tx, campaign)
        made = optimizer.replan(trial, [t for t in _active(tx, campaign.id) if t.id != trial.id])
        return None if made is None else replace(made, params=_finite(campaign.id, made.params))

    def _caught_up(self, tx: Tx, campaign: d.Campaign) -> Optimizer:
        """The campaign's optimizer, fed every trial finished since it last looked."""
        entry = self._entry(tx, campaign)
        new = _finished_after(tx, campaign.id, entry)
        entry.optimizer.feed(new)
        if new:
            entry.seen_seq = new[-1].finish_seq or entry.seen_seq
        return entry.optimizer

    def forget(self, campaign_id: int) -> None:
        with self._lock:
            self._entries.pop(campaign_id, None)

    def _entry(self, tx: Tx, campaign: d.Campaign) -> _Entry:
        with self._lock:
            building = self._building.get(campaign.id)
        if building is not None:
            building.wait(timeout=600)
        with self._lock:
            entry = self._entries.get(campaign.id)
            if entry is None or entry.budget != campaign.spec.get("budget"):
                entry = self._entries[campaign.id] = self._new_entry(tx, campaign)
            return entry

    @staticmethod
    def _new_entry(tx: Tx, campaign: d.Campaign) -> _Entry:
        entry = _Entry(build_optimizer(campaign), campaign.spec.get("budget"))
        # Earlier campaigns' trials first (warm_start), then this one's.
        warm = warm_trials(tx, campaign)
        if warm:
            entry.optimizer.feed(warm)
        return entry


def skip_infeasible(made: list[d.Suggestion], optimizer: Optimizer) -> list[d.Suggestion]:
    """A planning algorithm's suggestions without the new configurations the constraint
    models deem likely infeasible (the multi-fidelity searcher counts one it made and
    never saw created as cut, and makes others); all of them if none would be left."""
    model = optimizer.feasibility
    if model is None or optimizer.models_constraints or not model.ready():
        return made
    kept = [m for m in made if m.promote is not None or m.lineage is not None or model.pof(m.params) >= SCREEN_AT]
    return kept or made


def _active(tx: Tx, campaign_id: int, *, paused: bool = False) -> list[d.Trial]:
    """The campaign's QUEUED and RUNNING trials (without folds); and PAUSED ones with
    ``paused``."""
    states = (d.TrialState.QUEUED, d.TrialState.RUNNING) + ((d.TrialState.PAUSED,) if paused else ())
    return tx.trials.page(campaign_id, states=states, with_folds=False)[0]


def _finished_after(tx: Tx, campaign_id: int, entry: _Entry) -> list[d.Trial]:
    """The campaign's trials finished after those ``entry`` has seen; with their folds
    for an optimizer that plans (PBT starts an interval only from a checkpoint each fold
    reported)."""
    new = tx.results.finished_after(campaign_id, entry.seen_seq)
    if not entry.optimizer.plans or not new:
        return new
    by_id = {t.id: t for t in tx.trials.by_ids([t.id for t in new], with_folds=True)}
    return [by_id.get(t.id, t) for t in new]


def build_optimizer(campaign: d.Campaign) -> Optimizer:
    return make_optimizer(campaign.spec, campaign.id)


def make_optimizer(spec: dict[str, Any], campaign_id: int = 0) -> Optimizer:
    """The optimizer a validated spec asks for; InvalidArgument naming a bad option."""
    algo = spec["algorithm"]
    factory = REGISTRY.get(algo["name"])
    if factory is None:
        raise InvalidArgument(
            f"algorithm.name: {algo['name']!r} is not available on this server; allowed: {sorted(REGISTRY)}",
            [("algorithm.name", f"must be one of {sorted(REGISTRY)}")],
        )
    seed = algo.get("seed")
    if seed is None:
        seed = zlib.crc32(f"{campaign_id}:{spec['name']}".encode())
    objectives = d.objectives_of(spec)
    directions = tuple(direction for _, direction in objectives) if len(objectives) > 1 else ()
    training = spec.get("training") or {}
    problem = Problem(
        SearchSpace(spec["space"]),
        spec["objective"]["direction"],
        int(seed),
        dict(algo["options"]),
        int(spec["folds"]),
        int(spec["budget"]["max_trials"]),
        directions,
        epochs=int(training.get("epochs") or 0),
        max_parallel=int(spec["budget"]["max_parallel"]),
        pruner=str((spec.get("pruner") or {}).get("name", "none")),
        constraints=tuple(dict(c) for c in spec.get("constraints") or ()),
    )
    try:
        return factory(problem)
    except (ValueError, ImportError) as exc:
        field = option_field(exc)
        message = exc.message if isinstance(exc, OptionError) else str(exc)
        # An option checked against the rest of the spec may name that field instead.
        path = field if field.split(".", 1)[0] in ("budget", "training", "pruner", "space") else f"algorithm.{field}"
        raise InvalidArgument(f"{path}: {message}", [(path, message)]) from None


def option_field(exc: BaseException) -> str:
    """The ``options.<name>`` an optimizer's or a pruner's refusal names ("options" when
    it names none)."""
    if isinstance(exc, OptionError):
        return exc.field
    head = str(exc).split(" ", 1)[0].rstrip(":")
    return head if head.startswith("options.") else "options"


def _finite(campaign_id: int, params: d.Params) -> d.Params:
    """The suggestion, if every number in it is finite: a NaN or infinity stored as a
    trial's parameter broke the campaign's export and sorting for good (the spec's check
    of each span is the first guard; this one keeps any optimizer's slip out of SQL)."""
    for name, value in params.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise FailedPrecondition(
                f"campaign {campaign_id}'s optimizer suggested {value} for {name!r}; nothing was stored. Check the "
                "space's bounds, or use another algorithm"
            )
    return params
