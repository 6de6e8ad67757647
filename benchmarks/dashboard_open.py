"""How fast the dashboard opens a big campaign, in Debian's chromium (headless).

    python benchmarks/dashboard_open.py [--trials 10000] [--reps 5]

Seeds a campaign with N completed trials (3 folds each, curves for the first 50),
serves it, and times, from the hash change in an already loaded page, when each part of the campaign page
is drawn (the page's own performance marks): summary and tables, optimization history,
learning curves, slices, and parallel coordinates (last: WebGL, which headless chromium
renders in software); then the REST calls a refresh makes. Target: the page is complete in < 2 s at
10,000 trials.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--enable-unsafe-swiftshader"]
DRAWN = (
    "(id) => { const gd = document.getElementById(id); const t = gd && gd.data && gd.data[0]; if (!t) return false;"
    " const v = t.x || (t.dimensions && t.dimensions[0] && t.dimensions[0].values); return !!(v && v.length); }"
)


def main() -> int:
    from playwright.sync_api import sync_playwright

    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage
    from tests.conftest import run_live_server
    from tests.seed import seed_campaign

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    t0 = time.perf_counter()
    cid = seed_campaign(service, name="big", completed=args.trials, curves_for=50)
    print(f"seeded {args.trials} trials in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    parts = ("tables", "history", "curves", "slices", "parcoords")
    rows: dict[str, list[float]] = {p: [] for p in parts}
    for server in run_live_server(service):
        base = server.http_url
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/#/")
            page.wait_for_selector("#campaigns tbody tr[data-id]")
            for _ in range(args.reps):
                page.evaluate("() => { location.hash = '#/'; }")
                page.wait_for_selector("#campaigns tbody tr[data-id]")
                go = f"location.hash = '#/campaign/{cid}'"
                page.evaluate(f"() => {{ performance.clearMarks(); performance.mark('start'); {go}; }}")
                page.wait_for_function(DRAWN, arg="plot-parcoords", polling=50)
                marks = page.evaluate(
                    "() => Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime]))"
                )
                for part in parts:
                    rows[part].append((marks[f"hpcopt:{part}"] - marks["start"]) / 1000)
            browser.close()
        calls = {
            "campaign": f"/api/v1/campaigns/{cid}",
            "plot data (1000 points)": f"/api/v1/campaigns/{cid}/plot?max_points=1000",
            "trials page (25, by value)": f"/api/v1/campaigns/{cid}/trials?sort=value&limit=25",
            "curves (best 5)": f"/api/v1/campaigns/{cid}/curves?limit=5",
            "agents": f"/api/v1/campaigns/{cid}/agents",
        }
        api: dict[str, list[float]] = {k: [] for k in calls}
        with httpx.Client(base_url=base) as client:
            for _ in range(args.reps):
                for name, path in calls.items():
                    t = time.perf_counter()
                    client.get(path).raise_for_status()
                    api[name].append(time.perf_counter() - t)
    storage.close()
    print(
        f"\ndashboard, campaign of {args.trials} completed trials, {args.reps} opens: seconds until each part is drawn"
    )
    print(f"{'':28} {'median':>8} {'max':>8}")
    for name, values in rows.items():
        print(f"{name:28} {statistics.median(values):>8.3f} {max(values):>8.3f}")
    print("\nREST calls of one refresh (seconds)")
    for name, values in api.items():
        print(f"{name:28} {statistics.median(values):>8.3f} {max(values):>8.3f}")
    done = statistics.median(rows["parcoords"])
    print(f"\ncomplete page: {done:.2f} s (target < 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
