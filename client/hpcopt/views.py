"""What the CLI prints: the records of ``hpcopt.records`` as rich tables that fit the
terminal, or as JSON (``--json``: the same fields, typed)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from hpcopt.records import Campaign, Trial


def num(value: float | None, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def param(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def when(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def table(*columns: str, title: str | None = None, **kw: Any) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, **kw)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def campaigns_table(rows: list[Campaign]) -> Table:
    t = table("id", "name", "state", "algorithm", "done", "best")
    for x in rows:
        t.add_row(str(x.id), x.name, x.state, x.algorithm, f"{x.finished}/{x.max_trials}", num(x.best_value))
    return t


def trials_table(rows: list[Trial], order: list[str], title: str | None = None) -> Table:
    t = table("#", "state", "attempt", "value", "± std", *order, title=title)
    for x in rows:
        cells = [str(x.number), x.state, str(x.attempt), num(x.value), num(x.value_std)]
        t.add_row(*cells, *(param(x.params.get(k, "")) for k in order))
    return t


def front_table(rows: list[Trial], order: list[str], objectives: list[str]) -> Table:
    title = f"Pareto front: {len(rows)} trial(s)"
    t = table("#", *objectives, *order, title=title)
    for x in rows:
        t.add_row(str(x.number), *(num(v) for v in x.values), *(param(x.params.get(k, "")) for k in order))
    return t


def campaign_text(c: Campaign) -> RenderableType:
    counts = ", ".join(f"{s} {n}" for s, n in c.trial_counts.items()) or "none yet"
    lines = [
        f"campaign {c.id} {c.name!r}: {c.state}",
        f"  algorithm  {c.algorithm}; {c.direction} {c.metric}; {c.folds} fold(s)",
        f"  trials     {c.finished}/{c.max_trials} finished ({counts})",
    ]
    if len(c.objectives) > 1:
        lines[1] = f"  algorithm  {c.algorithm}; objectives {', '.join(c.objectives)}; {c.folds} fold(s)"
    if c.best_value is not None:
        lines.append(f"  best       {num(c.best_value)} (trial #{c.best_trial_number})")
    if c.spec:
        lines.append("  space      " + ", ".join(c.spec.get("space", {})))
        training = c.spec.get("training")
        lines.append(f"  training   {training['task']}" if training else "  training   none: driven by a script")
    return Text("\n".join(lines))


def trial_text(t: Trial) -> RenderableType:
    head = [
        f"trial #{t.number} of campaign {t.campaign_id}: {t.state}, attempt {t.attempt} (id {t.id})",
        f"  value   {num(t.value)} ± {num(t.value_std)}",
    ]
    if t.values:
        head.append("  values  " + ", ".join(num(v) for v in t.values))
    head += [f"  {k:<{max(map(len, t.params))}}  {param(v)}" for k, v in t.params.items()] if t.params else []
    if t.error:
        head.append(f"  error   {t.error}")
    parts: list[RenderableType] = [Text("\n".join(head))]
    if t.folds:
        folds = table("fold", "value", "status", "attempt", "metrics", "checkpoint", title="folds")
        for f in t.folds:
            metrics = " ".join(f"{k}={v:.4g}" for k, v in f.metrics.items())
            status = "finished" if f.finished else "in progress"
            folds.add_row(str(f.index), num(f.value), status, str(f.attempt), metrics, f.checkpoint_uri or "-")
        parts.append(folds)
    if t.curves:
        curves = table("fold", "points", "steps", "first", "last", "best", title="learning curves")
        for fold in sorted({p.fold for p in t.curves}):
            pts = [p for p in t.curves if p.fold == fold]
            values = [p.value for p in pts]
            steps = f"{pts[0].step}..{pts[-1].step}"
            curves.add_row(str(fold), str(len(pts)), steps, num(values[0]), num(values[-1]), num(min(values)))
        parts.append(curves)
    if t.events:
        events = table("at", "attempt", "event", "agent", "reason", title="history")
        for e in t.events:
            events.add_row(when(e.at), str(e.attempt), e.kind, e.agent_id[:8], e.reason)
        parts.append(events)
    return Group(*parts)


class Output:
    """Prints records as text or JSON, whichever the command line asked for."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=False)

    def json(self, data: Any) -> None:
        print(json.dumps(data, indent=2))

    def emit(self, record: Campaign | Trial, text: str) -> None:
        if self.as_json:
            self.json(record.as_json())
        else:
            print(text)

    def campaigns(self, rows: list[Campaign]) -> None:
        if self.as_json:
            self.json([x.as_json() for x in rows])
        else:
            self.console.print(campaigns_table(rows))

    def campaign(self, c: Campaign) -> None:
        if self.as_json:
            self.json(c.as_json())
        else:
            self.console.print(campaign_text(c))

    def trials(self, rows: list[Trial], order: list[str]) -> None:
        if self.as_json:
            self.json([x.as_json() for x in rows])
        else:
            self.console.print(trials_table(rows, order))

    def front(self, rows: list[Trial], order: list[str], objectives: list[str]) -> None:
        if self.as_json:
            self.json([x.as_json() for x in rows])
        else:
            self.console.print(front_table(rows, order, objectives))

    def trial(self, t: Trial) -> None:
        if self.as_json:
            self.json(t.as_json())
        else:
            self.console.print(trial_text(t))
