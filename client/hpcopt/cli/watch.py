"""``hpcopt watch N``: the terminal's dashboard. On a terminal: a progress bar, the best
trial so far, the running trials with their agent, fold and epoch, and the latest
finished trials, redrawn in place until the campaign ends (or Ctrl-C). Into a file or
a pipe: one line per finished trial and per change of the best, as they happen."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from hpcopt.cli.tables import Column, Table
from hpcopt.cli.views import num, param, width
from hpcopt.client import Client
from hpcopt.core.records import Campaign, Trial

#: Running trials fetched in full (folds and curves) per refresh; the rest are counted.
MAX_RUNNING = 12
RECENT = 8
FINAL = ["COMPLETED", "PRUNED", "FAILED", "CANCELLED"]


@dataclass
class Snapshot:
    campaign: Campaign
    order: list[str]
    running: list[Trial]
    running_total: int
    recent: list[Trial]  # newest first
    finished_total: int
    best: Trial | None
    #: Seconds since the campaign was submitted, to its end once it ended (not since
    #: this watch started: a watch opened late says how long the campaign took).
    elapsed: float | None

    def to_dict(self) -> dict[str, object]:
        return {
            "campaign": self.campaign.to_dict(),
            "running": [t.to_dict() for t in self.running],
            "recent": [t.to_dict() for t in self.recent],
            "best": self.best.to_dict() if self.best else None,
        }


def campaign_seconds(c: Campaign, now: datetime | None = None) -> float | None:
    """From the campaign's submission to its end (or ``now`` while it runs)."""
    if c.created_at is None:
        return None
    end = c.finished_at or now or datetime.now(UTC)
    return max(0.0, (end - c.created_at).total_seconds())


def duration(seconds: float | None) -> str:
    """``8 min 46 s``, ``2 h 03 min``, ``37 s``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def snapshot(c: Client, campaign_id: int) -> Snapshot:
    campaign = c.get_campaign(campaign_id)
    page = c.trial_page(campaign_id, ["RUNNING"], 0, MAX_RUNNING)
    running = [c.get_trial(t.id) for t in page.items]
    total = c.trial_page(campaign_id, FINAL, 0, 1).total
    recent = c.trial_page(campaign_id, FINAL, max(0, total - RECENT), RECENT).items
    best = c.get_best_trial(campaign_id) if campaign.best_trial_id is not None else None
    return Snapshot(
        campaign, campaign.space, running, page.total, list(reversed(recent)), total, best, campaign_seconds(campaign)
    )


def _bar(done: int, total: int, size: int = 30) -> str:
    filled = size * min(done, total) // max(total, 1)
    return "[" + "#" * filled + " " * (size - filled) + "]"


def _params(t: Trial) -> str:
    return "  ".join(f"{k}={param(v)}" for k, v in t.params.items())


def _progress(s: Snapshot) -> list[str]:
    c = s.campaign
    counts = "  ".join(f"{k.lower()} {v}" for k, v in c.trial_counts.items())
    lines = [
        f"campaign {c.id} {c.name!r}: {c.state}   {c.algorithm}, {c.direction} {c.metric}, "
        f"{c.folds} fold(s)   {duration(s.elapsed)}",
        f"{_bar(c.finished, c.max_trials)} {c.finished}/{c.max_trials}  {counts}",
    ]
    if s.best is not None:
        b = s.best
        lines.append(f"best: trial #{b.number}  {num(b.value)} ± {num(b.value_std)}  {_params(b)}")
    return lines


def _running(s: Snapshot) -> Table:
    more = f" (showing {len(s.running)} of {s.running_total})" if s.running_total > len(s.running) else ""
    t = Table(
        [
            Column("trial", "right"),
            Column("attempt", "right"),
            Column("agent"),
            Column("folds done", "right"),
            Column("fold: epoch value", flexible=True),
            *(Column(k, "right", optional=True) for k in s.order),
        ],
        f"running{more}",
    )
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


def _recent(s: Snapshot) -> Table:
    t = Table(
        [
            Column("trial", "right"),
            Column("state"),
            Column("value", "right"),
            Column("± std", "right"),
            Column("note", flexible=True),
            *(Column(k, "right", optional=True) for k in s.order),
        ],
        "latest finished",
    )
    for x in s.recent:
        note = x.error.splitlines()[0][:60] if x.error else ""
        cells = [f"#{x.number}", x.state, num(x.value), num(x.value_std), note]
        t.add_row(*cells, *(param(x.params.get(k, "")) for k in s.order))
    return t


def render(s: Snapshot, fit: int | None = None) -> str:
    return "\n\n".join(["\n".join(_progress(s)), _running(s).render(fit), _recent(s).render(fit)])


def _follow(c: Client, campaign_id: int, interval: float) -> int:
    """Line by line, for a file or a pipe: each finished trial once (by number), and
    the best whenever it changes; flushed as it happens."""
    seen: set[int] = set()
    best: int | None = None
    s = snapshot(c, campaign_id)
    print(
        f"campaign {s.campaign.id} {s.campaign.name!r}: {s.campaign.state}, "
        f"{s.campaign.finished}/{s.campaign.max_trials} finished",
        flush=True,
    )
    while True:
        for t in reversed(s.recent):  # oldest first
            if t.number not in seen:
                seen.add(t.number)
                note = f"  {t.error.splitlines()[0][:80]}" if t.error else ""
                print(
                    f"trial #{t.number} {t.state} {num(t.value)} ± {num(t.value_std)}  {_params(t)}{note}  "
                    f"({s.campaign.finished}/{s.campaign.max_trials})",
                    flush=True,
                )
        if s.best is not None and s.best.number != best:
            best = s.best.number
            print(f"best: trial #{s.best.number} {num(s.best.value)} ± {num(s.best.value_std)}", flush=True)
        if s.campaign.state.ended:
            done = s.campaign
            took = duration(s.elapsed)
            print(
                f"campaign {done.id} {done.state}: {done.finished}/{done.max_trials} finished, "
                f"{took} after its submission",
                flush=True,
            )
            return 0
        time.sleep(interval)
        s = snapshot(c, campaign_id)


def watch(c: Client, campaign_id: int, interval: float = 2.0, *, as_json: bool = False) -> int:
    """Follows the campaign until it ends (COMPLETED or CANCELLED: a PAUSED one may
    resume); 0 then, 130 on Ctrl-C."""
    interval = max(interval, 0.2)
    if as_json:  # one JSON document per refresh (JSON Lines), the last when the campaign ends
        while True:
            s = snapshot(c, campaign_id)
            print(json.dumps(s.to_dict()), flush=True)
            if s.campaign.state.ended:
                return 0
            time.sleep(interval)
    if not sys.stdout.isatty():
        return _follow(c, campaign_id, interval)
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console(highlight=False)
    s = snapshot(c, campaign_id)
    with Live(Text(render(s, width())), console=console, refresh_per_second=4, transient=False) as live:
        while not s.campaign.state.ended:
            time.sleep(interval)
            s = snapshot(c, campaign_id)
            live.update(Text(render(s, width())))
    return 0
