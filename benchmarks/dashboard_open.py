"""How the dashboard behaves on a big campaign, in Debian's chromium (headless).

    python benchmarks/dashboard_open.py [--trials 10000] [--reps 7] [--idle 30] [--live 2]

Seeds a campaign like a real one: N completed trials with 5 folds each (1% of them
diverged, loss 8 to 18; curves for the first 500), 5% pruned ones with their curves, 2%
failed ones with a traceback; over a log-scale, an integer and a categorical parameter.
While it measures, one more trial completes every ``--live`` seconds (0: none), so every
poll brings new plot data, as on a running campaign. It serves the campaign and
measures in one browser page, from the page's own performance marks:

- opening it: from the hash change in an already loaded page until the tables are
  usable, each plot is drawn, and the page is complete (the timeline is last);
- interactions: sort by number, next page, the state filter, a brush on the parallel
  coordinates (each: from the click, or Plotly's brush event, until the table shows
  the answer); targets < 300 ms;
- idle: the share of main-thread time busy over ``--idle`` seconds with nothing changing
  (Chrome's TaskDuration via the DevTools protocol), target < 5%, and how many plots
  were redrawn meanwhile (should be 0); then the same share while trials complete;
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
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--enable-unsafe-swiftshader"]
MARKS = "() => Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime]))"
DRAWS = "() => performance.getEntriesByType('mark').filter(m => m.name.startsWith('hpcopt:draw:')).length"

# name -> JavaScript that starts the interaction (after performance.mark('start')).
INTERACTIONS = {
    "sort (by number)": "document.querySelector('#trials th[data-sort=number]').click()",
    "sort (by a parameter)": "document.querySelector('#trials th[data-sort=\"param:lr\"]').click()",
    "sort (by duration)": "document.querySelector('#trials th[data-sort=duration]').click()",
    "sort (by a categorical)": "document.querySelector('#trials th[data-sort=\"param:act\"]').click()",
    "next page": "document.getElementById('next').click()",
    "state filter": "document.querySelector('#state-filter input[data-state=COMPLETED]').click()",
    "brush (parallel coords)": (
        "Plotly.restyle(document.getElementById('plot-parcoords'), {'dimensions[0].constraintrange': [[-3, -1.5]]})"
    ),
    "brush (a categorical axis)": (
        "Plotly.restyle(document.getElementById('plot-parcoords'), {'dimensions[2].constraintrange': [[-0.2, 0.2]]})"
    ),
}
# ... and what puts the page back, so that every round measures the same change.
UNDO = {
    "sort (by number)": "document.querySelector('#trials th[data-sort=value]').click()",
    "sort (by a parameter)": "document.querySelector('#trials th[data-sort=value]').click()",
    "sort (by duration)": "document.querySelector('#trials th[data-sort=value]').click()",
    "sort (by a categorical)": "document.querySelector('#trials th[data-sort=value]').click()",
    "next page": "document.getElementById('prev').click()",
    "state filter": "document.querySelector('#state-filter input[data-state=COMPLETED]').click()",
    "brush (parallel coords)": "document.getElementById('clear-brush').click()",
    "brush (a categorical axis)": "document.getElementById('clear-brush').click()",
}


class Live:
    """One more completed trial every ``period`` seconds (none for 0), until stopped."""

    def __init__(self, service: object, cid: int, period: float):
        from tests.seed import add_completed

        self.added, self._stop = 0, threading.Event()

        def run() -> None:
            rng = random.Random(cid)
            while period and not self._stop.wait(period):
                add_completed(service, cid, rng, folds=5)
                self.added += 1

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


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
    from tests.conftest import run_live_server
    from tests.seed import seed_campaign

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle to measure the busy share over")
    ap.add_argument("--live", type=float, default=2.0, help="a trial completes every this many seconds (0: none)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hpcopt-dash-"))
    atexit.register(shutil.rmtree, tmp, True)  # the seeded database, gone when the run ends
    url = f"sqlite:///{tmp / 'bench.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    t0 = time.perf_counter()
    n = args.trials
    cid = seed_campaign(
        service, name="big", completed=n, pruned=n // 20, failed=n // 50, folds=5, curves_for=500, diverged=0.01
    )
    print(f"seeded {args.trials} trials in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    parts = ("tables", "history", "curves", "importance", "edf", "slices", "contour", "parcoords", "timeline")
    opened: dict[str, list[float]] = {p: [] for p in parts}
    acted: dict[str, list[float]] = {k: [] for k in INTERACTIONS}
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
            page.wait_for_timeout(1000)
            live = Live(service, cid, args.live)
            for rep in range(args.reps):
                print(f"interactions {rep + 1}/{args.reps}", file=sys.stderr)
                for name, js in INTERACTIONS.items():
                    for script in (js, UNDO[name]):
                        page.evaluate(f"() => {{ performance.clearMarks(); performance.mark('start'); {script}; }}")
                        page.wait_for_function(
                            "() => performance.getEntriesByName('hpcopt:table').length > 0", timeout=30_000
                        )
                        if script == js:
                            marks = page.evaluate(MARKS)
                            # A brush counts from Plotly's brush event (a drag redraws the axes as it goes).
                            since = marks.get("hpcopt:brushed", marks["start"])
                            acted[name].append((marks["hpcopt:table"] - since) / 1000)
            live.stop()
            # Idle: nothing changes on the server; the page keeps polling every 2 s. First
            # let it settle: the last trials' redraw may be deferred by up to 5 polls
            # (campaign.js REDRAW_SHARE), which belongs to the live share, not to idle.
            page.wait_for_timeout(5 * 2000 + 3000)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.evaluate("() => performance.clearMarks()")
            busy0, wall0 = task_seconds(cdp), time.perf_counter()
            page.wait_for_timeout(args.idle * 1000)
            busy, wall = task_seconds(cdp) - busy0, time.perf_counter() - wall0
            redraws = page.evaluate(DRAWS)
            # The same while trials complete: every change redraws, at most as often as it allows.
            live = Live(service, cid, args.live)
            page.evaluate("() => performance.clearMarks()")
            lbusy0, lwall0 = task_seconds(cdp), time.perf_counter()
            page.wait_for_timeout(args.idle * 1000 if args.live else 0)
            lbusy, lwall = task_seconds(cdp) - lbusy0, max(1e-9, time.perf_counter() - lwall0)
            ldraws = page.evaluate(DRAWS)
            live.stop()
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
    storage.close()
    print(
        f"\ndashboard, campaign of {args.trials} completed trials, {os.cpu_count()} cores, "
        "chromium headless (software GL)"
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
        print(f"{name:30} {spread(values)} {'met' if statistics.median(values) < 0.3 else 'NOT met'}")
    share = busy / wall
    print(
        f"\nidle {wall:.0f} s: main thread busy {busy * 1000:.0f} ms = {100 * share:.2f}% "
        f"(target < 5%: {'met' if share < 0.05 else 'NOT met'}); plots redrawn meanwhile: {redraws}"
    )
    if args.live:
        print(
            f"while a trial completes every {args.live:g} s ({live.added} in {lwall:.0f} s): main thread busy "
            f"{lbusy * 1000:.0f} ms = {100 * lbusy / lwall:.2f}%; plots redrawn: {ldraws}"
        )
    print(f"\nREST calls of one refresh, ms ({args.reps} each): cold, and conditional (304)")
    print(f"{'':30} {'cold':>8} {'min-max':^15} {'304':>8} {'min-max':^15}")
    for name in calls:
        print(f"{name:30} {spread(cold[name])} {spread(warm[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
