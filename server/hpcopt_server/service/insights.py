"""What the dashboard shows, aggregated on the server so that a campaign with tens of
thousands of trials stays fast to open: downsampled plot data, the trials table (sorted
and filtered on the server), learning curves of chosen trials, the running trials with
their latest report, a timeline of attempts, agents with their current trial and
health, and a CSV of the trials."""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, NotFound
from hpcopt_server.service.campaigns import front_ids
from hpcopt_server.service.context import Context, campaign_or_404, revisions
from hpcopt_server.service.limits import MAX_PAGE, require_id, require_page, require_range
from hpcopt_server.service.robust import robust_limit
from hpcopt_server.storage.repository import RESULT_SORTS, TRIAL_SORT_KEYS, Tx
from hpcopt_server.storage.views import Listed, Running, Span

MAX_PLOT_POINTS = 20_000
MAX_CURVE_TRIALS = 50
MAX_RANGES = 50
MAX_SPANS = 20_000
#: Sort keys the table computes in Python (besides the columns of TRIAL_SORT_KEYS):
#: the time a trial ran, its agent's host, and ``param:NAME``.
EXTRA_SORT_KEYS = ("duration", "agent")
#: Quantile points of the empirical distribution sent with the plot data.
EDF_POINTS = 200
_COMPLETED = d.TrialState.COMPLETED.value


@dataclass(frozen=True)
class Ran:
    """A trial's time on agents: ``seconds`` over its ended attempts, and the start of the
    attempt running now (None if none). The running attempt is left out of ``seconds`` so
    that an answer changes when something happens, not every second: a reader adds now -
    ``since`` (a dashboard ticks that itself; a poll of an unchanged campaign is a 304)."""

    seconds: float
    since: datetime | None = None


@dataclass(frozen=True)
class TablePage:
    trials: list[d.Trial]
    total: int
    #: Each trial's time on agents (absent: never started).
    ran: dict[int, Ran]
    #: {agent id: (host, Slurm job id)} of the agents on this page.
    agents: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class TrialDetail:
    trial: d.Trial
    #: Its time on agents (None: never started).
    ran: Ran | None
    #: {agent id: (host, Slurm job id)} of its last agent and of every agent in its events.
    agents: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class RunningPage:
    rows: list[Running]
    agents: dict[str, tuple[str, str]]
    folds: int
    #: Epochs per fold in the spec's training (0 when it does not say).
    epochs: int
    #: Each trial's time on agents (by trial id).
    ran: dict[int, Ran]


@dataclass(frozen=True)
class AgentView:
    agent: d.Agent
    current_trial_id: int | None
    lease_expires_at: datetime | None
    #: No heartbeat for two heartbeat periods: the lease is at risk.
    stale: bool
    #: Exited (said goodbye), or holds no trial and has been silent for two heartbeat
    #: periods: not coming back.
    gone: bool = False


class InsightService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def plot_data(self, campaign_id: int, max_points: int = 2000) -> dict[str, Any]:
        """Completed trials for the history, parallel-coordinate and slice plots.

        ``best`` is the best-so-far line over *all* completed trials (only the points
        where it changes). ``points`` holds every completed trial when there are at most
        ``max_points``; otherwise every trial that improved the best, the best tenth of
        the budget, and an even random sample of the rest (``downsampled`` says so).
        ``objectives`` gives each objective its own best line, empirical distribution and
        robust axis limit (:func:`robust_limit`); ``ended`` the PRUNED and FAILED trials
        (at most ``max_points``, evenly over their numbers; ``ended_total`` counts all).
        """
        if not 10 <= max_points <= MAX_PLOT_POINTS:
            raise InvalidArgument(
                f"max_points must be in 10..{MAX_PLOT_POINTS}", [("max_points", f"must be in 10..{MAX_PLOT_POINTS}")]
            )
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            rows = tx.results.completed_points_at(campaign_id)
            vectors = dict(tx.results.completed_values(campaign_id)) if len(campaign.objectives) > 1 else {}
            ended = tx.views.listed_trials(campaign_id, (d.TrialState.PRUNED, d.TrialState.FAILED))
        ended_total = len(ended)
        sign = 1.0 if campaign.direction == "minimize" else -1.0
        objectives = []
        for k, (metric, direction) in enumerate(campaign.objectives):
            column = [(r[0], r[1], vectors[r[0]][k] if vectors else r[2]) for r in rows]
            objectives.append({"metric": metric, "direction": direction, **_summary(column, direction)})
        best = objectives[0]["best"]
        # The first objective's improvements only: another objective's best is on the front,
        # which is always drawn, and its improvements can be every trial (no downsampling).
        improved = {b["trial_id"] for b in best}
        keep = rows
        if len(rows) > max_points:
            by_quality = sorted(rows, key=lambda r: sign * r[2])
            chosen = set(improved) | {r[0] for r in by_quality[: max_points // 10]}
            rest = [r[0] for r in rows if r[0] not in chosen]
            room = max(0, max_points - len(chosen))
            chosen |= set(random.Random(campaign_id).sample(rest, min(room, len(rest))))
            keep = [r for r in rows if r[0] in chosen]
        front = front_ids(campaign, list(vectors.items())) if vectors else []
        front_size = len(front)
        if len(front) > max_points // 2:  # evenly along the first objective
            front = [front[round(i * (len(front) - 1) / (max_points // 2 - 1))] for i in range(max_points // 2)]
        if len(keep) < len(rows) and front:  # the front is always drawn
            kept = {r[0] for r in keep} | set(front)
            keep = [r for r in rows if r[0] in kept]
        ended.sort(key=lambda r: r.number)
        if len(ended) > max_points:  # evenly over the trial numbers
            ended = [ended[round(i * (len(ended) - 1) / (max_points - 1))] for i in range(max_points)]
        return {
            "metric": campaign.metric,
            "direction": campaign.direction,
            "space": campaign.spec.get("space", {}),
            "completed": len(rows),
            "downsampled": len(keep) < len(rows),
            "ended": [
                {"trial_id": r.id, "number": r.number, "state": r.state, "value": r.value, "finished_at": r.finished_at}
                for r in ended
            ],
            "ended_total": ended_total,
            "points": [
                {
                    "trial_id": tid,
                    "number": n,
                    "value": v,
                    "value_std": s,
                    "params": p,
                    "values": vectors.get(tid),
                    "finished_at": at,
                }
                for tid, n, v, s, p, at in keep
            ],
            "edf": objectives[0]["edf"],
            "best": best,
            "objectives": objectives,
            "front": front,
            "front_size": front_size,
        }

    def plot_revision(self, campaign_id: int) -> str:
        """Changes whenever :meth:`plot_data`'s answer may (a trial reached a final
        state): one row read, so a poll of an unchanged campaign costs almost nothing."""
        return revisions(self.ctx, campaign_id)[0]

    def plot_served_revision(self, campaign_id: int, max_points: int) -> str:
        """The revision :meth:`plot` answers with now: the plot data's ETag, before work."""
        return self.ctx.shared.served(("plot", campaign_id, max_points), self.plot_revision(campaign_id))

    def plot(self, campaign_id: int, max_points: int = 2000) -> tuple[str, dict[str, Any]]:
        """(revision, :meth:`plot_data`), shared by every tab (``service/shared_answers.py``)."""
        revision = self.plot_revision(campaign_id)
        return self.ctx.shared.get(
            ("plot", campaign_id, max_points), revision, lambda: self._gated_plot(campaign_id, max_points)
        )

    def _gated_plot(self, campaign_id: int, max_points: int) -> dict[str, Any]:
        with self.ctx.heavy.slot("plot data"):
            return self.plot_data(campaign_id, max_points)

    def curves(
        self, campaign_id: int, trial_ids: list[int], limit: int = 5, numbers: Sequence[int] = ()
    ) -> list[dict[str, Any]]:
        """Learning curves (per fold) of the given trials (by id, or by campaign-local
        number), or of the ``limit`` best."""
        if len(trial_ids) + len(numbers) > MAX_CURVE_TRIALS or not 1 <= limit <= MAX_CURVE_TRIALS:
            raise InvalidArgument(
                f"at most {MAX_CURVE_TRIALS} trials at once", [("trial_id", f"at most {MAX_CURVE_TRIALS}")]
            )
        for t in trial_ids:
            require_id("trial_id", t)
        for n in numbers:
            require_range("number", n, 0)
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            by_number = (tx.views.trial_id_by_number(campaign_id, n) for n in numbers)
            trial_ids = [*trial_ids, *(t for t in by_number if t is not None and t not in trial_ids)]
            if not trial_ids and not numbers:
                trial_ids = tx.results.best_trial_ids(campaign_id, campaign.direction, limit)
            found = (tx.trials.get(t, folds=False) for t in trial_ids)
            trials = {t.id: t for t in found if t is not None and t.campaign_id == campaign_id}
            points = tx.results.curves_of(list(trials))
        return [
            {
                "trial_id": tid,
                "number": trials[tid].number,
                "value": trials[tid].value,
                "state": trials[tid].state.value,
                "points": [{"fold": p.fold, "step": p.step, "value": p.value} for p in pts],
            }
            for tid, pts in points.items()
        ]

    def agents(self, campaign_id: int) -> list[AgentView]:
        now = self.ctx.clock()
        at_risk = timedelta(seconds=2 * self.ctx.settings.heartbeat_seconds)
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            agents = tx.agents.registered(campaign_id)
            running = tx.agents.running_in(campaign_id)
        out = []
        for a in agents:
            trial_id, expires = running.get(a.id, (None, None))
            silent = now - a.last_seen_at > at_risk
            gone = a.exited_at is not None or (silent and trial_id is None)
            out.append(AgentView(a, trial_id, expires, trial_id is not None and silent, gone))
        return out

    def table(
        self,
        campaign_id: int,
        states: Iterable[d.TrialState] = (),
        offset: int = 0,
        limit: int = 25,
        sort: str = "number",
        descending: bool = False,
        ranges: Sequence[tuple[str, float, float]] = (),
    ) -> TablePage:
        """A page of the trials table. ``sort``: a trial column (TRIAL_SORT_KEYS),
        ``duration`` (time ran), ``agent`` (host), or ``param:NAME``; empty values last,
        ties by number. ``ranges``: (``value``, ``values.K`` for objective K of a
        multi-objective campaign, or a parameter; low, high), inclusive, all must hold; a
        categorical parameter's range is over its choices' positions in the spec (as the
        parallel-coordinates axis draws them)."""
        require_page(offset, limit)
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            space = campaign.spec.get("space", {})
            _check_sort(sort, space)
            tests = _range_tests(ranges, space, len(campaign.objectives))
            numeric = {n for n, p in space.items() if p.get("type") in ("int", "real")} | {"value"}
            # Categorical parameters whose choices are all strings: by position, in SQL too.
            strings = {
                n: list(p["choices"])
                for n, p in space.items()
                if p.get("choices") and all(isinstance(c, str) for c in p["choices"])
            }
            in_sql = sort in TRIAL_SORT_KEYS or (sort.startswith("param:") and sort[6:] in (numeric | set(strings)))
            if in_sql and all(name in numeric or name in strings for name, _, _ in ranges):
                # Sorting and filtering by columns, numeric and string-choice parameters: all in SQL.
                trials, total = tx.trials.page(
                    campaign_id,
                    states=states,
                    offset=offset,
                    limit=limit,
                    sort=sort,
                    descending=descending,
                    ranges=ranges,
                    choices=strings,
                )
            else:
                names = [n for n, _, _ in ranges if n in space] + ([sort[6:]] if sort.startswith("param:") else [])
                objectives = any(n.startswith("values.") for n, _, _ in ranges)
                listed = tx.views.listed_trials(campaign_id, states, names, with_values=objectives, numeric=numeric)
                rows = [r for r in listed if all(t(r) for t in tests)]
                ran_all = self._ran_of(tx, campaign_id, rows) if sort == "duration" else {}
                hosts = tx.agents.hosts(r.agent_id for r in rows) if sort == "agent" else {}
                ids = [r.id for r in _sorted(rows, sort, descending, space, ran_all, hosts)[offset : offset + limit]]
                trials, total = tx.trials.by_ids(ids, with_folds=True), len(rows)
            ids = [t.id for t in trials]
            ran = _ran(tx.views.spans(campaign_id, ids))
            agents = tx.agents.hosts(t.agent_id for t in trials)
        return TablePage(trials, total, ran, agents)

    def _ran_of(self, tx: Tx, campaign_id: int, rows: list[Listed]) -> dict[int, float]:
        """Seconds each row's trial ran. A first attempt's span is its started_at to its
        finished_at (or now): the times of its "acquired" and final events, so the event
        log is read only for requeued trials."""
        now = self.ctx.clock()
        out: dict[int, float] = {}
        again = [r.id for r in rows if r.attempt > 1]
        for r in rows:
            if r.attempt == 1 and r.started_at is not None:
                out[r.id] = max(0.0, ((r.finished_at or now) - r.started_at).total_seconds())
        for start in range(0, len(again), 500):
            ran = _ran(tx.views.spans(campaign_id, again[start : start + 500]))
            out.update({k: r.seconds + _since(r, now) for k, r in ran.items()})
        return out

    def trial(self, trial_id: int | None = None, *, campaign_id: int = 0, number: int = -1) -> TrialDetail:
        """A trial with its events and curves, by global id or by its campaign-local
        number (what the dashboard and CLI show)."""
        with self.ctx.storage.read() as tx:
            if trial_id is None:
                require_range("number", number, 0)
                campaign_or_404(tx, campaign_id)
                trial_id = tx.views.trial_id_by_number(campaign_id, number)
                if trial_id is None:
                    raise NotFound(f"campaign {campaign_id} has no trial #{number}")
            require_id("trial_id", trial_id)
            trial = tx.trials.get(trial_id, full=True)
            if trial is None:
                raise NotFound(f"trial {trial_id} does not exist")
            agents = tx.agents.hosts([trial.agent_id, *(e.agent_id for e in trial.events)])
            ran = _ran(tx.views.spans(trial.campaign_id, [trial.id])).get(trial.id)
        return TrialDetail(trial, ran, agents)

    def running(self, campaign_id: int) -> RunningPage:
        """The RUNNING trials with their folds done and latest report, and their agents."""
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            rows = tx.views.running_detail(campaign_id)
            agents = tx.agents.hosts(r.trial.agent_id for r in rows)
            ran = _ran(tx.views.spans(campaign_id, [r.trial.id for r in rows]))
        epochs = int((campaign.spec.get("training") or {}).get("epochs") or 0)
        return RunningPage(rows, agents, campaign.folds, epochs, ran)

    def timeline(self, campaign_id: int, limit: int = 2000) -> tuple[list[Span], int, dict[str, tuple[str, str]]]:
        """The latest ``limit`` attempt spans (by start), how many there are in all, and
        the agents they ran on."""
        if not 1 <= limit <= MAX_SPANS:
            raise InvalidArgument(f"limit must be in 1..{MAX_SPANS}", [("limit", f"must be in 1..{MAX_SPANS}")])
        revision = revisions(self.ctx, campaign_id)[1]
        key = ("timeline", campaign_id, limit)
        return self.ctx.shared.get(key, revision, lambda: self._timeline(campaign_id, limit))[1]

    def _timeline(self, campaign_id: int, limit: int) -> tuple[list[Span], int, dict[str, tuple[str, str]]]:
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            spans = tx.views.spans(campaign_id)
            shown = spans[-limit:]
            agents = tx.agents.hosts(s.agent_id for s in shown)
        return shown, len(spans), agents

    def trials_csv(
        self,
        campaign_id: int,
        states: Iterable[d.TrialState] = (),
        sort: str = "number",
        descending: bool = False,
        ranges: Sequence[tuple[str, float, float]] = (),
    ) -> str:
        """One row per trial that the table's ``states``, ``ranges`` and order select (all
        by number by default): ids, state, attempt, value ± std, params, times, agent (in
        one of the slots for costly reads, ``heavy.py``)."""
        with self.ctx.heavy.slot("CSV export"):
            return self._trials_csv(campaign_id, list(states), sort, descending, ranges)

    def _trials_csv(
        self,
        campaign_id: int,
        states: list[d.TrialState],
        sort: str,
        descending: bool,
        ranges: Sequence[tuple[str, float, float]],
    ) -> str:
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
        trials: list[d.Trial] = []
        while True:  # the table's pages, so that the CSV holds what the table lists
            page = self.table(campaign_id, states, len(trials), MAX_PAGE, sort, descending, ranges)
            trials.extend(page.trials)
            if not page.trials or len(trials) >= page.total:
                break
        names = list(campaign.spec.get("space", {}))
        others = [metric for metric, _ in campaign.objectives[1:]]  # a multi-objective campaign's
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(
            [
                "trial_id",
                "number",
                "state",
                "attempt",
                campaign.metric,
                f"{campaign.metric}_std",
                *others,
                *[f"param_{n}" for n in names],
                "started_at",
                "finished_at",
                "agent_id",
                "error",
            ]
        )
        for t in trials:
            values = [_num(v) for v in t.values[1:]] if t.values else [""] * len(others)
            writer.writerow(
                [
                    t.id,
                    t.number,
                    t.state.value,
                    t.attempt,
                    _num(t.value),
                    _num(t.value_std),
                    *values,
                    *[t.params.get(n, "") for n in names],
                    t.started_at.isoformat() if t.started_at else "",
                    t.finished_at.isoformat() if t.finished_at else "",
                    t.agent_id,
                    t.error.splitlines()[0] if t.error else "",
                ]
            )
        return out.getvalue()


def _num(v: float | None) -> str:
    return "" if v is None else repr(v)


def _summary(rows: list[tuple[int, int, float]], direction: str) -> dict[str, Any]:
    """One objective's best-so-far line, empirical distribution and robust axis limit over
    (trial id, number, value) rows in finishing order."""
    sign = 1.0 if direction == "minimize" else -1.0
    best, current = [], math.inf
    for tid, number, value in rows:
        if sign * value < current:
            current = sign * value
            best.append({"number": number, "value": value, "trial_id": tid})
    values = sorted(v for _, _, v in rows)
    limit = robust_limit(values, direction)
    off = 0 if limit is None else sum(1 for v in values if sign * v > sign * limit)
    return {"best": best, "edf": _quantiles(values), "limit": limit, "off_scale": off}


def _quantiles(values: list[float]) -> list[float]:
    """At most EDF_POINTS values spread evenly over the sorted ``values`` (all when fewer;
    the least and the greatest always): the empirical distribution of every completed
    trial, not of the plot's sample."""
    n = len(values)
    if n <= EDF_POINTS:
        return values
    return [values[round(i * (n - 1) / (EDF_POINTS - 1))] for i in range(EDF_POINTS)]


def _check_sort(sort: str, space: dict[str, Any]) -> None:
    if sort in TRIAL_SORT_KEYS or sort in EXTRA_SORT_KEYS:
        return
    if sort.startswith("param:") and sort[6:] in space:
        return
    allowed = ", ".join((*TRIAL_SORT_KEYS, *EXTRA_SORT_KEYS, "param:NAME"))
    raise InvalidArgument(
        f"sort must be one of {allowed} (NAME a parameter of the space), got {sort[:100]!r}",
        [("sort", f"one of {allowed}")],
    )


def _range_tests(
    ranges: Sequence[tuple[str, float, float]], space: dict[str, Any], objectives: int = 1
) -> list[Callable[[Listed], bool]]:
    if len(ranges) > MAX_RANGES:
        raise InvalidArgument(f"at most {MAX_RANGES} ranges", [("range", f"at most {MAX_RANGES}")])
    tests: list[Callable[[Listed], bool]] = []
    for name, low, high in ranges:
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise InvalidArgument(
                f"range of {name[:100]!r}: low and high must be finite numbers with low <= high",
                [("range", "finite low <= high")],
            )
        k = name[7:] if name.startswith("values.") and name not in space else None
        if name == "value":
            tests.append(_value_test(low, high))
        elif name in space:
            tests.append(_param_test(name, space[name].get("choices"), low, high))
        elif k is not None and k.isdigit() and 1 <= int(k) < objectives:
            tests.append(_objective_test(int(k), low, high))
        else:
            more = f", values.1 .. values.{objectives - 1}" if objectives > 1 else ""
            raise InvalidArgument(
                f"range: {name[:100]!r} is neither value{more} nor a parameter of the space",
                [("range", f"value{more} or a parameter name")],
            )
    return tests


def _value_test(low: float, high: float) -> Callable[[Listed], bool]:
    # Results only: a PRUNED trial's value reached is not one (as in ``trials.page``).
    return lambda r: r.state == _COMPLETED and r.value is not None and low <= r.value <= high


def _objective_test(k: int, low: float, high: float) -> Callable[[Listed], bool]:
    return lambda r: r.state == _COMPLETED and r.values is not None and len(r.values) > k and low <= r.values[k] <= high


def _param_test(name: str, choices: list[Any] | None, low: float, high: float) -> Callable[[Listed], bool]:
    return lambda r: _within(r.params.get(name), choices, low, high)


def _within(v: Any, choices: list[Any] | None, low: float, high: float) -> bool:
    if v is None:
        return False
    if choices is not None:
        return v in choices and low <= choices.index(v) <= high
    return isinstance(v, int | float) and not isinstance(v, bool) and low <= float(v) <= high


def _sorted(
    rows: list[Listed],
    sort: str,
    descending: bool,
    space: dict[str, Any],
    ran: dict[int, float],
    hosts: dict[str, tuple[str, str]],
) -> list[Listed]:
    """Rows (by number) by ``sort`` with empty values last whichever the order, ties by
    number."""
    key: Callable[[Listed], Any]
    if sort == "duration":
        key = lambda r: ran.get(r.id)  # noqa: E731
    elif sort == "agent":
        key = lambda r: hosts.get(r.agent_id)  # noqa: E731
    elif sort.startswith("param:"):
        name = sort[6:]
        choices = space[name].get("choices")
        if choices is not None:
            key = lambda r: choices.index(r.params[name]) if r.params.get(name) in choices else None  # noqa: E731
        else:
            key = lambda r: r.params.get(name)  # noqa: E731
    else:
        key = lambda r: getattr(r, sort, None)  # noqa: E731
    # ``rows`` come by number (listed_trials), and a sort is stable in either direction:
    # one sort by the key leaves ties by number.
    keyed = [(key(r), r) for r in rows]
    present = [kr for kr in keyed if kr[0] is not None]
    present.sort(key=itemgetter(0), reverse=descending)
    if sort in RESULT_SORTS:  # results first, then the PRUNED trials' values reached
        present.sort(key=lambda kr: kr[1].state != _COMPLETED)
    return [r for _, r in present] + [r for k, r in keyed if k is None]


def _ran(spans: list[Span]) -> dict[int, Ran]:
    """Each trial's time on agents: its ended attempts' seconds, and the start of the one
    running (``Ran``)."""
    seconds: dict[int, float] = {}
    since: dict[int, datetime] = {}
    for s in spans:
        seconds[s.trial_id] = seconds.get(s.trial_id, 0.0)
        if s.end is None:
            since[s.trial_id] = s.start
        else:
            seconds[s.trial_id] += max(0.0, (s.end - s.start).total_seconds())
    return {k: Ran(v, since.get(k)) for k, v in seconds.items()}


def _since(r: Ran, now: datetime) -> float:
    return max(0.0, (now - r.since).total_seconds()) if r.since is not None else 0.0
