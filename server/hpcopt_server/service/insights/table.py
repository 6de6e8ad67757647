"""The trials table, sorted and filtered on the server, and its CSV."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from hpcopt.core.closest import did_you_mean
from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.context import campaign_or_404
from hpcopt_server.service.insights.base import (
    COMPLETED,
    EXTRA_SORT_KEYS,
    MAX_RANGES,
    InsightBase,
    Ran,
    TablePage,
    ran_by_trial,
)
from hpcopt_server.service.limits import MAX_PAGE, require_page
from hpcopt_server.storage.repository import RESULT_SORTS, TRIAL_SORT_KEYS, Tx
from hpcopt_server.storage.views import Listed


class Table(InsightBase):
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
            ran = ran_by_trial(tx.views.spans(campaign_id, ids))
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
            ran = ran_by_trial(tx.views.spans(campaign_id, again[start : start + 500]))
            out.update({k: r.seconds + _since(r, now) for k, r in ran.items()})
        return out

    def trials_csv(
        self,
        campaign_id: int,
        states: Iterable[d.TrialState] = (),
        sort: str = "number",
        descending: bool = False,
        ranges: Sequence[tuple[str, float, float]] = (),
        hide: Sequence[str] = (),
    ) -> str:
        """One row per trial that the table's ``states``, ``ranges`` and order select (all
        by number by default): ids, state, attempt, value ± std, params, times, the time
        ran, agent, and each fold's value and metrics (in one of the slots for costly
        reads, ``heavy.py``). ``hide``: the columns the table's chooser hides
        (``param:NAME``, ``attempt``, ``duration``, ``agent``), left out here too."""
        with self.ctx.storage.read() as tx:
            space = campaign_or_404(tx, campaign_id).spec.get("space", {})
        hidden = _hidden(hide, space)
        with self.ctx.heavy.slot("CSV export"):
            return self._trials_csv(campaign_id, list(states), sort, descending, ranges, hidden)

    def _trials_csv(
        self,
        campaign_id: int,
        states: list[d.TrialState],
        sort: str,
        descending: bool,
        ranges: Sequence[tuple[str, float, float]],
        hidden: set[str],
    ) -> str:
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
        trials: list[d.Trial] = []
        ran: dict[int, Ran] = {}
        agents: dict[str, tuple[str, str]] = {}
        while True:  # the table's pages, so that the CSV holds what the table lists
            page = self.table(campaign_id, states, len(trials), MAX_PAGE, sort, descending, ranges)
            trials.extend(page.trials)
            ran.update(page.ran)
            agents.update(page.agents)
            if not page.trials or len(trials) >= page.total:
                break
        names = [n for n in campaign.spec.get("space", {}) if f"param:{n}" not in hidden]
        others = [metric for metric, _ in campaign.objectives[1:]]  # a multi-objective campaign's
        folds = sorted({f.index for t in trials for f in t.folds})
        metrics = sorted({m for t in trials for f in t.folds for m in f.metrics})
        now = self.ctx.clock()
        # Each column: its header and its cell of a trial, in the table's order, those the
        # chooser hides left out; then each fold's value and metrics.
        columns: list[tuple[str, Callable[[d.Trial], object]]] = [
            ("trial_id", lambda t: t.id),
            ("number", lambda t: t.number),
            ("state", lambda t: t.state.value),
            ("attempt", lambda t: t.attempt),
            (campaign.metric, lambda t: _num(t.value)),
            (f"{campaign.metric}_std", lambda t: _num(t.value_std)),
            *[(m, _objective(k + 1)) for k, m in enumerate(others)],
            # Against the constraints, where the campaign has any: yes, no, or "" (no outcome).
            *(_FEASIBILITY if campaign.constraints else []),
            *[(f"param_{n}", _param(n)) for n in names],
            ("started_at", lambda t: t.started_at.isoformat() if t.started_at else ""),
            ("finished_at", lambda t: t.finished_at.isoformat() if t.finished_at else ""),
            ("duration_s", lambda t: _ran(ran.get(t.id), now)),
            ("agent_id", lambda t: t.agent_id),
            ("agent_host", lambda t: agents.get(t.agent_id, ("", ""))[0]),
            ("error", lambda t: t.error.splitlines()[0] if t.error else ""),
        ]
        gone = {c for key, cs in _HIDES.items() if key in hidden for c in cs}
        columns = [c for c in columns if c[0] not in gone]
        for k in folds:
            columns.append((f"fold_{k}_{campaign.metric}", _fold(k, None)))
            columns += [(f"fold_{k}_{m}", _fold(k, m)) for m in metrics if m != campaign.metric]
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([name for name, _ in columns])
        for t in trials:
            writer.writerow([cell(t) for _, cell in columns])
        return out.getvalue()


#: A constrained campaign's columns: whether each trial is feasible ("" without an
#: outcome) and what it broke.
_FEASIBILITY: list[tuple[str, Callable[[d.Trial], object]]] = [
    ("feasible", lambda t: "" if t.feasible is None else "yes" if t.feasible else "no"),
    ("broken", lambda t: t.broken),
]

#: The table's hideable columns other than parameters, as the CSV's columns.
_HIDES = {"attempt": ("attempt",), "duration": ("duration_s",), "agent": ("agent_id", "agent_host")}


def _hidden(hide: Sequence[str], space: dict[str, Any]) -> set[str]:
    """The ``hide`` keys, each one the table's chooser has; an unknown one is refused by name."""
    allowed = [*(f"param:{n}" for n in space), *_HIDES]
    for key in hide:
        if key not in allowed:
            raise InvalidArgument(
                f"hide: {key[:100]!r} is not a column the table can hide; allowed: {', '.join(allowed)}"
                + did_you_mean(key, allowed),
                [("hide", f"one of {', '.join(allowed)}")],
            )
    return set(hide)


def _objective(k: int) -> Callable[[d.Trial], object]:
    return lambda t: _num(t.values[k]) if t.values and len(t.values) > k else ""


def _param(name: str) -> Callable[[d.Trial], object]:
    return lambda t: t.params.get(name, "")


def _fold(index: int, metric: str | None) -> Callable[[d.Trial], object]:
    """A fold's value (``metric`` None) or one of its metrics; empty where it has none."""

    def cell(t: d.Trial) -> object:
        fold = next((f for f in t.folds if f.index == index), None)
        if fold is None:
            return ""
        return _num(fold.value if metric is None else fold.metrics.get(metric))

    return cell


def _ran(r: Ran | None, now: datetime) -> str:
    return "" if r is None else repr(round(r.seconds + _since(r, now), 3))


def _num(v: float | None) -> str:
    return "" if v is None else repr(v)


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
    return lambda r: r.state == COMPLETED and r.value is not None and low <= r.value <= high


def _objective_test(k: int, low: float, high: float) -> Callable[[Listed], bool]:
    return lambda r: r.state == COMPLETED and r.values is not None and len(r.values) > k and low <= r.values[k] <= high


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
        present.sort(key=lambda kr: kr[1].state != COMPLETED)
    return [r for _, r in present] + [r for k, r in keyed if k is None]


def _since(r: Ran, now: datetime) -> float:
    return max(0.0, (now - r.since).total_seconds()) if r.since is not None else 0.0
