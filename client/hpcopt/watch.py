"""``hpcopt watch N``: the terminal's dashboard. A progress bar, the best trial so far,
the running trials with their agent, fold and epoch, and the latest finished trials,
redrawn in place until the campaign ends (or Ctrl-C)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hpcopt.client import Client
from hpcopt.records import Campaign, Trial
from hpcopt.views import num, param, table

#: Running trials fetched in full (folds and curves) per refresh; the rest are counted.
MAX_RUNNING = 12
RECENT = 8


@dataclass
class Snapshot:
    campaign: Campaign
    order: list[str]
    running: list[Trial]
    running_total: int
    recent: list[Trial]
    best: Trial | None
    elapsed: float

    def as_json(self) -> dict[str, object]:
        return {
            "campaign": self.campaign.as_json(),
            "running": [t.as_json() for t in self.running],
            "recent": [t.as_json() for t in self.recent],
            "best": self.best.as_json() if self.best else None,
        }


def snapshot(c: Client, campaign_id: int, t0: float) -> Snapshot:
    campaign = Campaign.from_proto(c.get_campaign(campaign_id))
    order = list((campaign.spec or {}).get("space", {}))
    page = c.list_trials(campaign_id, ["RUNNING"], 0, MAX_RUNNING)
    running = [Trial.from_proto(c.get_trial(t.id), order) for t in page.trials]
    final = ["COMPLETED", "PRUNED", "FAILED", "CANCELLED"]
    total = c.list_trials(campaign_id, final, 0, 1).total
    recent_page = c.list_trials(campaign_id, final, max(0, total - RECENT), RECENT).trials
    recent = [Trial.from_proto(t, order) for t in reversed(recent_page)]
    best = None
    if campaign.best_trial_id is not None:
        best = Trial.from_proto(c.get_best_trial(campaign_id), order)
    return Snapshot(campaign, order, running, int(page.total), recent, best, time.monotonic() - t0)


def _progress(s: Snapshot) -> RenderableType:
    c = s.campaign
    head = Table.grid(padding=(0, 2), expand=True)
    head.add_column(ratio=1)
    head.add_column(justify="right")
    head.add_row(
        Text(f"campaign {c.id} {c.name!r}: {c.state}", style="bold"),
        f"{c.algorithm}, {c.direction} {c.metric}, {c.folds} fold(s)   {s.elapsed:.0f} s",
    )
    bar = Table.grid(padding=(0, 2), expand=True)
    bar.add_column(ratio=1)
    bar.add_column(justify="right")
    counts = "  ".join(f"{k.lower()} {v}" for k, v in c.trial_counts.items())
    bar.add_row(ProgressBar(total=max(c.max_trials, 1), completed=c.finished), f"{c.finished}/{c.max_trials}  {counts}")
    lines: list[RenderableType] = [head, bar]
    if s.best is not None:
        params = "  ".join(f"{k}={param(v)}" for k, v in s.best.params.items())
        lines.append(Text(f"best: trial #{s.best.number}  {num(s.best.value)} ± {num(s.best.value_std)}  {params}"))
    return Group(*lines)


def _running(s: Snapshot) -> RenderableType:
    more = f" (showing {len(s.running)} of {s.running_total})" if s.running_total > len(s.running) else ""
    t = table("trial", "attempt", "agent", "folds done", "fold: epoch value", *s.order, title=f"running{more}")
    for x in s.running:
        done = sum(f.finished for f in x.folds)
        latest: dict[int, tuple[int, float]] = {}
        for p in x.curves:
            latest[p.fold] = (p.step, p.value)
        finished = {f.index for f in x.folds if f.finished}
        active = "  ".join(f"{k}: {st} {num(v, 4)}" for k, (st, v) in sorted(latest.items()) if k not in finished)
        cells = [f"#{x.number}", str(x.attempt), x.agent_id[:8], f"{done}/{s.campaign.folds}", active or "starting"]
        t.add_row(*cells, *(param(x.params.get(k, "")) for k in s.order))
    return t


def _recent(s: Snapshot) -> RenderableType:
    t = table("trial", "state", "value", "± std", "note", *s.order, title="latest finished")
    for x in s.recent:
        note = x.error.splitlines()[0][:60] if x.error else ""
        cells = [f"#{x.number}", x.state, num(x.value), num(x.value_std), note]
        t.add_row(*cells, *(param(x.params.get(k, "")) for k in s.order))
    return t


def render(s: Snapshot) -> RenderableType:
    return Group(_progress(s), _running(s), _recent(s))


def watch(c: Client, campaign_id: int, interval: float = 2.0, *, as_json: bool = False) -> int:
    """Redraws until the campaign is no longer RUNNING; 0 then, 130 on Ctrl-C."""
    t0 = time.monotonic()
    interval = max(interval, 0.2)
    if as_json:  # one JSON document per refresh (JSON Lines), the last when the campaign ends
        while True:
            s = snapshot(c, campaign_id, t0)
            print(json.dumps(s.as_json()), flush=True)
            if s.campaign.state != "RUNNING":
                return 0
            time.sleep(interval)
    console = Console(highlight=False)
    s = snapshot(c, campaign_id, t0)
    with Live(render(s), console=console, refresh_per_second=4, transient=False) as live:
        while s.campaign.state == "RUNNING":
            time.sleep(interval)
            s = snapshot(c, campaign_id, t0)
            live.update(render(s))
    return 0
