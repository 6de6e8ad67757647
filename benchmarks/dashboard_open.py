"""How the dashboard behaves on a big campaign, in Debian's chromium (headless).

    python benchmarks/dashboard_open.py [--trials 10000] [--reps 7] [--idle 30] [--live 2] [--running 4]
        [--live-window 180] [--live-reps 7] [--busy 2]

Seeds a campaign like a real one: N completed trials with 5 folds each (1% of them
diverged, loss 1,000 to 10,000; curves for the first 500), 5% pruned ones with their curves, 2%
failed ones with a traceback; over a log-scale, an integer and a categorical parameter.
``--running`` trials are held throughout by agents that heartbeat as real ones do and
never finish. While it measures the interactions, one more trial completes every
``--live`` seconds (0: none), so polls bring new plot data, as on a running campaign.
It serves the campaign and measures in one browser page, from the page's own
performance marks:

- opening it: from the hash change in an already loaded page until the tables are
  usable, each plot is drawn, and the page is complete (the timeline is last);
- interactions, with Playwright's real mouse: sorts, next page, the state filter, a
  drag along a numeric and along a categorical parallel-coordinates axis; each from
  the mouse release (the event's time stamp) until the table shows the answer; target
  < 300 ms;
- idle: the share of main-thread time busy over ``--idle`` seconds while the running
  trials run and nothing completes (Chrome's TaskDuration via the DevTools protocol),
  target < 5%, and how many plots were redrawn meanwhile (should be 0); then the same
  share over ``--live-window`` seconds while a trial completes every ``--live`` seconds
  (long enough to hold the plots' redraws, which wait in proportion to their cost),
  target < 5%, and how long the history lagged behind each completion meanwhile: from
  the commit to the first drawn history that counts it (bound: 60 s, however slow the
  machine);
- ``--busy N`` runs N busy loops (one core each) from the seeding's end to the last
  measurement, the way a shared login node or a loaded laptop is busy;
- the REST calls of one refresh, cold and conditional (If-None-Match → 304).

Interactions run --reps times each, interleaved (a round does every interaction once);
the table shows the median and the spread (min-max).
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--enable-unsafe-swiftshader"]
MARKS = "() => Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime]))"
DRAWS = "() => performance.getEntriesByType('mark').filter(m => m.name.startsWith('hpcopt:draw:')).length"

# name -> what a reader does, with a real mouse: ("click", selector) or ("drag", axis,
# top, bottom) along a parallel-coordinates axis (fractions of its height from the top).
INTERACTIONS: dict[str, tuple[object, ...]] = {
    "sort (by number)": ("click", "#trials th[data-sort=number]"),
    "sort (by a parameter)": ("click", '#trials th[data-sort="param:lr"]'),
    "sort (by duration)": ("click", "#trials th[data-sort=duration]"),
    "sort (by a categorical)": ("click", '#trials th[data-sort="param:act"]'),
    "next page": ("click", "#next"),
    "state filter": ("click", "#state-filter input[data-state=COMPLETED]"),
    "brush (parallel coords)": ("drag", 0, 0.25, 0.6),
    "brush (a categorical axis)": ("drag", 2, 0.02, 0.2),
}
# ... and what puts the page back, so that every round measures the same change.
UNDO: dict[str, tuple[object, ...]] = {
    "sort (by number)": ("click", "#trials th[data-sort=value]"),
    "sort (by a parameter)": ("click", "#trials th[data-sort=value]"),
    "sort (by duration)": ("click", "#trials th[data-sort=value]"),
    "sort (by a categorical)": ("click", "#trials th[data-sort=value]"),
    "next page": ("click", "#prev"),
    "state filter": ("click", "#state-filter input[data-state=COMPLETED]"),
    "brush (parallel coords)": ("click", "#clear-brush"),
    "brush (a categorical axis)": ("click", "#clear-brush"),
}
# Every mouse release marks "input" at the event's own time stamp (capture phase, before
# any handler of the page): an interaction counts from there.
INPUT_MARK = (
    "() => window.addEventListener('mouseup', (e) => performance.mark('input', { startTime: e.timeStamp }), true)"
)
BRUSH_BOX = (
    "(i) => { const r = document.querySelectorAll('#plot-parcoords .y-axis .axis-brush rect.background')[i];"
    " const b = r.getBoundingClientRect(); return [b.x + b.width / 2, b.y, b.height]; }"
)


def act(page: object, action: tuple[object, ...]) -> None:
    """Does ``action`` with Playwright's real mouse (input events through the browser)."""
    p: Any = page
    if action[0] == "click":
        p.click(str(action[1]))
        return
    _, axis, top, bottom = action
    p.locator("#plot-parcoords").scroll_into_view_if_needed()
    x, y0, h = p.evaluate(BRUSH_BOX, axis)
    p.mouse.move(x, y0 + float(top) * h)  # type: ignore[arg-type]
    p.mouse.down()
    for k in range(1, 6):
        p.mouse.move(x, y0 + (float(top) + (float(bottom) - float(top)) * k / 5) * h)  # type: ignore[arg-type]
    p.mouse.up()


class Running:
    """``n`` trials held by agents that heartbeat as real ones do (every quarter of the
    lease) and never finish: a live campaign between completions."""

    def __init__(self, service: Any, cid: int, n: int):
        from hpcopt_server.service.agents import Lease

        self._stop = threading.Event()
        self.leases = []
        for k in range(n):
            agent = service.agents.register(host=f"gpu{k:02d}", ranks=4, gpus=4, slurm_job_id="9001", campaign_id=cid)
            got = service.agents.acquire(agent.agent_id, cid)
            lease = Lease(agent.agent_id, got.trial.id, got.lease_id)
            service.agents.report_intermediate(lease, 0, 1, 2.0 + k / 10)
            self.leases.append(lease)
        period = service.ctx.settings.lease_seconds / 4

        def run() -> None:
            while not self._stop.wait(period):
                for lease in self.leases:
                    service.agents.heartbeat(lease)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Live:
    """One more completed trial every ``period`` seconds (none for 0), until stopped;
    ``made`` lists each one's commit (epoch seconds) and the campaign's completed count
    after it, from ``completed`` before the first."""

    def __init__(self, service: object, cid: int, period: float, completed: int):
        from tests.helpers.seed import add_completed

        self.added, self._stop = 0, threading.Event()
        self.made: list[tuple[float, int]] = []

        def run() -> None:
            rng = random.Random(cid + completed)
            while period and not self._stop.wait(period):
                add_completed(service, cid, rng, folds=5)
                self.added += 1
                self.made.append((time.time(), completed + self.added))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Busy:
    """``n`` busy loops, one process each, until stopped (or the run ends)."""

    def __init__(self, n: int):
        self._procs = [subprocess.Popen(["bash", "-c", "while :; do :; done"]) for _ in range(n)]
        atexit.register(self.stop)

    def stop(self) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()
        self._procs = []


# Each drawn history: when (epoch ms) and how many completed trials it counts
# (campaign.js marks "hpcopt:history-of" with the count).
HISTORIES = (
    "() => performance.getEntriesByName('hpcopt:history-of')"
    ".map(m => [(performance.timeOrigin + m.startTime) / 1000, m.detail])"
)


def history_lags(made: list[tuple[float, int]], drawn: list[tuple[float, int]], end: float) -> tuple[list[float], int]:
    """For each completion (commit time, count after it), the seconds until the first
    history drawn after it that counts it; and how many none showed before ``end``."""
    lags, missed = [], 0
    for at, count in made:
        shown = [t for t, n in drawn if n >= count and t >= at]
        if shown:
            lags.append(min(shown) - at)
        elif end - at > 60:  # a completion in the window's last minute may still show
            missed += 1
    return lags, missed


def task_seconds(cdp: object) -> float:
    """Chrome's cumulative main-thread task time (seconds) of the page."""
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}  # type: ignore[attr-defined]
    return float(metrics["TaskDuration"])


def spread(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:>8.0f} {min(values) * 1000:>7.0f}-{max(values) * 1000:<7.0f}"


def main() -> int:
    from playwright.sync_api import sync_playwright

    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage
    from tests.helpers.live import run_live_server
    from tests.helpers.seed import seed_campaign

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle to measure the busy share over")
    ap.add_argument("--live", type=float, default=2.0, help="a trial completes every this many seconds (0: none)")
    ap.add_argument(
        "--live-window",
        type=float,
        default=180.0,
        help="seconds to measure the busy share over while trials complete: long enough for the plots' redraws, "
        "which wait in proportion to their cost",
    )
    ap.add_argument(
        "--live-reps",
        type=int,
        default=1,
        help="consecutive live windows: the share's median and spread over them (a figure near its target needs 7)",
    )
    ap.add_argument("--running", type=int, default=4, help="trials held by heartbeating agents throughout (<= 4)")
    ap.add_argument("--busy", type=int, default=0, help="busy loops (one core each) beside the measurement")
    args = ap.parse_args()
    if (
        args.trials < 100
        or args.reps < 1
        or args.idle <= 0
        or args.live_window <= 0
        or args.live < 0
        or not 0 <= args.running <= 4
        or args.live_reps < 1
        or not 0 <= args.busy <= 64
    ):
        ap.error(
            "--trials must be at least 100, --reps and --live-reps at least 1, --idle positive, --live >= 0, "
            "--running in 0..4, --busy in 0..64"
        )
    tmp = Path(tempfile.mkdtemp(prefix="hpcopt-dash-"))
    atexit.register(shutil.rmtree, tmp, True)  # the seeded database, gone when the run ends
    url = f"sqlite:///{tmp / 'bench.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    t0 = time.perf_counter()
    n = args.trials
    cid = seed_campaign(
        service,
        name="big",
        completed=n,
        pruned=n // 20,
        failed=n // 50,
        queued=args.running + 4,
        folds=5,
        curves_for=500,
        diverged=0.01,
    )
    running = Running(service, cid, args.running)
    print(f"seeded {args.trials} trials in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    busy_loops = Busy(args.busy)
    completed = n
    parts = ("tables", "history", "curves", "importance", "edf", "slices", "contour", "parcoords", "timeline")
    opened: dict[str, list[float]] = {p: [] for p in parts}
    acted: dict[str, list[float]] = {k: [] for k in INTERACTIONS}
    lost = dict.fromkeys(INTERACTIONS, 0)
    for server in run_live_server(service):
        base = server.http_url
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/#/")
            page.wait_for_selector("#campaigns tbody tr[data-id]")
            for rep in range(args.reps):
                print(f"open {rep + 1}/{args.reps}", file=sys.stderr)
                page.evaluate("() => { location.hash = '#/'; }")
                page.wait_for_selector("#campaigns tbody tr[data-id]")
                go = f"location.hash = '#/campaign/{cid}'"
                page.evaluate(f"() => {{ performance.clearMarks(); performance.mark('start'); {go}; }}")
                page.wait_for_function(
                    "() => performance.getEntriesByName('hpcopt:timeline').length > 0", timeout=60_000
                )
                marks = page.evaluate(MARKS)
                for part in parts:
                    opened[part].append((marks[f"hpcopt:{part}"] - marks["start"]) / 1000)
            # Idle first, before any trial completes: nothing changes on the server but the
            # running trials' heartbeats; the page keeps polling (every 2 s, slower when
            # quiet). Once trials complete, a live redraw may wait minutes (campaign.js
            # LIVE_SHARE), and it belongs to the live share, not to idle.
            page.wait_for_timeout(3000)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.evaluate("() => performance.clearMarks()")
            busy0, wall0 = task_seconds(cdp), time.perf_counter()
            page.wait_for_timeout(args.idle * 1000)
            busy, wall = task_seconds(cdp) - busy0, time.perf_counter() - wall0
            redraws = page.evaluate(DRAWS)
            page.evaluate(INPUT_MARK)
            live = Live(service, cid, args.live, completed)
            for rep in range(args.reps):
                print(f"interactions {rep + 1}/{args.reps}", file=sys.stderr)
                for name, action in INTERACTIONS.items():
                    for step in (action, UNDO[name]):
                        page.evaluate("() => performance.clearMarks()")
                        act(page, step)
                        try:
                            page.wait_for_function(
                                "() => performance.getEntriesByName('hpcopt:table').length > 0", timeout=30_000
                            )
                        except Exception:  # the page never answered: counted, not timed
                            lost[name] += 1
                            print(f"  {name}: no answer to {step}", file=sys.stderr)
                            break
                        if step is action:
                            marks = page.evaluate(MARKS)
                            # From the mouse release (a drag redraws the axes as it goes).
                            acted[name].append((marks["hpcopt:table"] - marks["input"]) / 1000)
            live.stop()
            completed += live.added
            # The same while trials complete: every change redraws, at most as often as it allows.
            live = Live(service, cid, args.live, completed)
            shares: list[float] = []  # one per consecutive window
            page.evaluate("() => performance.clearMarks()")
            lwall0 = time.perf_counter()
            for _ in range(args.live_reps if args.live else 0):
                busy0, wall0 = task_seconds(cdp), time.perf_counter()
                page.wait_for_timeout(args.live_window * 1000)
                shares.append((task_seconds(cdp) - busy0) / max(1e-9, time.perf_counter() - wall0))
                print(f"live window {len(shares)}/{args.live_reps}: {100 * shares[-1]:.2f}%", file=sys.stderr)
            lwall = time.perf_counter() - lwall0
            ldraws = page.evaluate(DRAWS)
            live.stop()
            lags, unshown = history_lags(live.made, page.evaluate(HISTORIES), time.time())
            browser.close()
        calls = {
            "campaign": f"/api/v1/campaigns/{cid}",
            "plot data (1000 points)": f"/api/v1/campaigns/{cid}/plot?max_points=1000",
            "trials page (25, best first)": f"/api/v1/campaigns/{cid}/trials?sort=value&limit=25",
            "curves (best 5)": f"/api/v1/campaigns/{cid}/curves?limit=5",
            "agents": f"/api/v1/campaigns/{cid}/agents",
            "running": f"/api/v1/campaigns/{cid}/running",
            "importance": f"/api/v1/campaigns/{cid}/importance",
            "timeline (2000 spans)": f"/api/v1/campaigns/{cid}/timeline?limit=2000",
        }
        cold: dict[str, list[float]] = {k: [] for k in calls}
        warm: dict[str, list[float]] = {k: [] for k in calls}
        with httpx.Client(base_url=base) as client:
            for _ in range(args.reps):
                for name, path in calls.items():
                    t = time.perf_counter()
                    r = client.get(path)
                    r.raise_for_status()
                    cold[name].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    again = client.get(path, headers={"if-none-match": r.headers["etag"]})
                    warm[name].append(time.perf_counter() - t)
                    assert again.status_code == 304, (name, again.status_code)
    busy_loops.stop()
    running.stop()
    storage.close()
    print(
        f"\ndashboard, campaign of {args.trials} completed trials, {os.cpu_count()} cores, "
        f"{args.busy} busy loop(s) beside it, chromium headless (software GL)"
    )
    print(f"\nopening it ({args.reps} opens): ms from the hash change until each part is drawn")
    print(f"{'':30} {'median':>8} {'min-max':^15}")
    for name, values in opened.items():
        print(f"{name:30} {spread(values)}")
    print(
        f"\ninteractions ({args.reps} each, interleaved; a trial completes every {args.live:g} s): "
        "ms from the click until the table shows the answer"
    )
    print(f"{'':30} {'median':>8} {'min-max':^15} target < 300 ms")
    for name, values in acted.items():
        verdict = "met" if values and statistics.median(values) < 0.3 and not lost[name] else "NOT met"
        missed = f" ({lost[name]} got no answer)" if lost[name] else ""
        print(f"{name:30} {spread(values) if values else 'no answer':>24} {verdict}{missed}")
    share = busy / wall
    print(
        f"\nidle {wall:.0f} s: main thread busy {busy * 1000:.0f} ms = {100 * share:.2f}% "
        f"(target < 5%: {'met' if share < 0.05 else 'NOT met'}); plots redrawn meanwhile: {redraws}"
    )
    if args.live:
        mid = statistics.median(shares)
        verdict = "met" if max(shares) < 0.05 else "NOT met" if mid >= 0.05 else "median met, not every window"
        print(
            f"while a trial completes every {args.live:g} s ({live.added} in {lwall:.0f} s, {len(shares)} windows of "
            f"{args.live_window:g} s): main thread busy {100 * mid:.2f}% median, {100 * min(shares):.2f}-"
            f"{100 * max(shares):.2f}% (target < 5%: {verdict}); plots redrawn: {ldraws}"
        )
        if lags:
            lags.sort()
            p90 = lags[min(len(lags) - 1, round(0.9 * (len(lags) - 1)))]
            bound = "met" if lags[-1] <= 60 and not unshown else "NOT met"
            print(
                f"history's lag behind a completion, s ({len(lags)} shown): median {statistics.median(lags):.1f}, "
                f"p90 {p90:.1f}, max {lags[-1]:.1f} (bound 60 s: {bound})"
                + (f"; {unshown} never shown" if unshown else "")
            )
        else:
            print(f"history's lag: no completion was shown ({unshown} missed)")
    print(f"\nREST calls of one refresh, ms ({args.reps} each): cold, and conditional (304)")
    print(f"{'':30} {'cold':>8} {'min-max':^15} {'304':>8} {'min-max':^15}")
    for name in calls:
        print(f"{name:30} {spread(cold[name])} {spread(warm[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
