"""What the CLI prints: the records of ``hpcopt.core.records`` as plain tables that fit the
terminal without splitting a value (``hpcopt.cli.tables``), or as JSON (``--json``: the
same fields, typed)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import datetime
from typing import Any

from hpcopt.cli.tables import Column, Table
from hpcopt.core.records import Campaign, Lineage, ParetoFront, Trial


def num(value: float | None, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def param(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def when(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def width() -> int | None:
    """The width to fit: ``COLUMNS`` when set, the terminal's when printing to one,
    else None (a file or a pipe gets every column in full)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _params(order: list[str]) -> list[Column]:
    return [Column(k, align="right", optional=True) for k in order]


def campaigns_table(rows: list[Campaign]) -> Table:
    t = Table(
        [
            Column("id", "right"),
            Column("name", flexible=True),
            Column("state"),
            Column("algorithm"),
            Column("done", "right"),
            Column("best", "right"),
        ]
    )
    for x in rows:
        t.add_row(str(x.id), x.name, x.state, x.algorithm, f"{x.finished}/{x.max_trials}", num(x.best_value))
    return t


def is_result(t: Trial) -> bool:
    """Whether the trial's value is a result (COMPLETED: the mean over its folds). Any
    other state's value is its latest report, never to be read, shown or sorted as one."""
    return t.state == "COMPLETED"


def lineage_text(x: Lineage) -> str:
    """Where a PBT interval starts: ``member 3, epochs 4-6, copied #12 (lr 0.01 -> 0.02)``,
    ``member 0, epochs 2-4, continues #5``, or ``member 1, epochs 0-2, fresh``."""
    text = f"member {x.member}, epochs {x.start_epoch}-{x.stop_epoch}, "
    if x.parent is None:
        text += "fresh"
    elif x.exploited:
        changed = ", ".join(f"{k} {param(a)} -> {param(b)}" for k, (a, b) in x.changed.items())
        text += f"copied #{x.parent}" + (f" ({changed})" if changed else "")
    else:
        text += f"continues #{x.parent}"
    if x.unreadable:
        text += f"; unreadable parent(s) {', '.join(f'#{n}' for n in x.unreadable)}"
    return text


def _from(x: Lineage) -> str:
    """The trials table's ``from`` cell: ``#12 copied``, ``#5`` or ``-``."""
    if x.parent is None:
        return "-"
    return f"#{x.parent} copied" if x.exploited else f"#{x.parent}"


def trials_table(rows: list[Trial], order: list[str], title: str | None = None) -> Table:
    fixed = [Column("#", "right"), Column("state"), Column("attempt", "right")]
    latest = any(x.value is not None and not is_result(x) for x in rows)
    extra = [Column("latest report", "right")] if latest else []
    pbt = any(x.lineage is not None for x in rows)  # a PBT campaign: each interval's place
    lineage = [Column("member", "right"), Column("epochs", "right"), Column("from", "right")] if pbt else []
    t = Table([*fixed, *lineage, Column("value", "right"), Column("± std", "right"), *extra, *_params(order)], title)
    for x in rows:
        result = is_result(x)
        cells = [str(x.number), x.state, str(x.attempt)]
        if pbt:
            lin = x.lineage
            cells += (
                ["-", "-", "-"] if lin is None else [str(lin.member), f"{lin.start_epoch}-{lin.stop_epoch}", _from(lin)]
            )
        cells += [num(x.value if result else None), num(x.value_std if result else None)]
        if latest:
            cells.append("" if result or x.value is None else num(x.value))
        t.add_row(*cells, *(param(x.params.get(k, "")) for k in order))
    return t


def front_table(front: ParetoFront, order: list[str]) -> Table:
    title = f"Pareto front: {len(front.trials)} trial(s)"
    t = Table([Column("#", "right"), *(Column(m, "right") for m in front.objectives), *_params(order)], title)
    for x in front.trials:
        t.add_row(str(x.number), *(num(v) for v in x.values), *(param(x.params.get(k, "")) for k in order))
    return t


def campaign_text(c: Campaign) -> str:
    counts = ", ".join(f"{s} {n}" for s, n in c.trial_counts.items()) or "none yet"
    lines = [
        f"campaign {c.id} {c.name!r}: {c.state}" + (f" ({c.pause_reason})" if c.pause_reason else ""),
        f"  algorithm  {c.algorithm}; {c.direction} {c.metric}; {c.folds} fold(s)",
        f"  trials     {c.finished}/{c.max_trials} finished ({counts})",
    ]
    if len(c.objectives) > 1:
        lines[1] = f"  algorithm  {c.algorithm}; objectives {', '.join(c.objectives)}; {c.folds} fold(s)"
    if c.best_value is not None:
        lines.append(f"  best       {num(c.best_value)} (trial #{c.best_trial_number})")
    if c.owner:
        lines.append(f"  owner      {c.owner} (it, or an admin token, may steer, cancel and note it)")
    if c.spec:
        lines.append("  space      " + ", ".join(c.spec.get("space", {})))
        training = c.spec.get("training")
        lines.append(f"  training   {training['task']}" if training else "  training   none: driven by a script")
    return "\n".join(lines)


def trial_text(t: Trial, fit: int | None = None) -> str:
    head = [
        f"trial #{t.number} of campaign {t.campaign_id}: {t.state}, attempt {t.attempt} (id {t.id})",
        f"  value   {num(t.value)} ± {num(t.value_std)}"
        if is_result(t) or t.value is None
        else f"  value   - (not a result; latest report {num(t.value)})",
    ]
    if t.values:
        head.append("  values  " + ", ".join(num(v) for v in t.values))
    if t.feasible is not None:
        head.append("  feasible yes" if t.feasible else f"  feasible NO: {t.broken}")
    if t.lineage is not None:
        head.append("  lineage " + lineage_text(t.lineage))
    head += [f"  {k:<{max(map(len, t.params))}}  {param(v)}" for k, v in t.params.items()] if t.params else []
    if t.error:
        head.append(f"  error   {t.error}")
    parts = ["\n".join(head)]
    if t.folds:
        folds = Table(
            [
                Column("fold", "right"),
                Column("value", "right"),
                Column("status"),
                Column("attempt", "right"),
                Column("checkpoint", flexible=True, keep_end=True),
            ],
            "folds",
        )
        for f in t.folds:
            status = "finished" if f.finished else "in progress"
            value = num(f.value) if f.finished else "-"  # an unfinished fold's value is no result
            folds.add_row(str(f.index), value, status, str(f.attempt), f.checkpoint_uri or "-")
        parts.append(folds.render(fit))
        names = sorted({k for f in t.folds for k in f.metrics})
        if names:
            # One row per metric, never cut: names of any length, a column per fold
            # (folds past the width are left out, and the table says which).
            shown = [f for f in t.folds if f.metrics]
            metrics = Table(
                [Column("metric"), *(Column(f"fold {f.index}", "right", optional=True) for f in shown)],
                "fold metrics",
            )
            for name in names:
                metrics.add_row(name, *(num(f.metrics[name], 4) if name in f.metrics else "-" for f in shown))
            parts.append(metrics.render(fit))
    if t.curves:
        cols = ["fold", "points", "steps", "first", "last", "best"]
        curves = Table([Column(c, "right") for c in cols], "learning curves")
        for fold in sorted({p.fold for p in t.curves}):
            pts = [p for p in t.curves if p.fold == fold]
            values = [p.value for p in pts]
            steps = f"{pts[0].step}..{pts[-1].step}"
            curves.add_row(str(fold), str(len(pts)), steps, num(values[0]), num(values[-1]), num(min(values)))
        parts.append(curves.render(fit))
    if t.events:
        events = Table(
            [
                Column("at"),
                Column("attempt", "right"),
                Column("event"),
                Column("agent"),
                Column("reason", flexible=True),
            ],
            "history",
        )
        for e in t.events:
            events.add_row(when(e.at), str(e.attempt), e.kind, e.agent_id[:8], e.reason)
        parts.append(events.render(fit))
    return "\n\n".join(parts)


def error_json(code: str, message: str, fields: list[dict[str, str]] | None = None) -> str:
    """An error as ``--json`` prints it: ``{"error": {"code", "message", "fields"}}``."""
    return json.dumps({"error": {"code": code, "message": message, "fields": fields or []}})


class Output:
    """Prints records as text or JSON, whichever the command line asked for."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.width = width()

    def json(self, data: Any) -> None:
        print(json.dumps(data, indent=2))

    def text(self, text: str) -> None:
        print(text, flush=True)

    def emit(self, record: Campaign | Trial, text: str) -> None:
        self.json(record.to_dict()) if self.as_json else self.text(text)

    def campaigns(self, rows: list[Campaign]) -> None:
        if self.as_json:
            self.json([x.to_dict() for x in rows])
        else:
            self.text(campaigns_table(rows).render(self.width))

    def campaign(self, c: Campaign) -> None:
        self.json(c.to_dict()) if self.as_json else self.text(campaign_text(c))

    def trials(self, rows: list[Trial], order: list[str]) -> None:
        if self.as_json:
            self.json([x.to_dict() for x in rows])
        else:
            self.text(trials_table(rows, order).render(self.width))

    def front(self, front: ParetoFront, order: list[str]) -> None:
        if self.as_json:
            self.json([x.to_dict() for x in front.trials])
        else:
            self.text(front_table(front, order).render(self.width))

    def trial(self, t: Trial) -> None:
        self.json(t.to_dict()) if self.as_json else self.text(trial_text(t, self.width))
