"""hpcopt's dashboard against optuna-dashboard (the peer a researcher would open) on the
same campaign, in Debian's chromium (headless).

    python benchmarks/dashboard_vs_optuna.py [--trials 10000] [--reps 7] [--idle 30]

Both get N completed trials over the same space (lr log, width int, act categorical)
with the same objective and parameters (tests.helpers.seed); optuna-dashboard reads an Optuna
RDB study on SQLite, hpcopt its own SQLite database. For each, --reps full page loads
(a fresh tab each, interleaved hpcopt / optuna-dashboard): seconds until the history plot
holds its points and until every plot of the page is drawn (hpcopt: history, curves,
importance, EDF, slices, contour, parallel coordinates, timeline; optuna-dashboard's
study page: history, importance, timeline, intermediate values). Then, after a load,
the main thread's busy share over --idle seconds while nothing changes (Chrome's
TaskDuration via the DevTools protocol). Ratios are hpcopt / optuna-dashboard.
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
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--enable-unsafe-swiftshader"]
HAS_DATA = (
    "(ids) => ids.every(id => { const gd = document.getElementById(id);"
    " return !!(gd && gd.data && gd.data.some(t => {"
    " const v = t.x || t.y || (t.dimensions && t.dimensions[0] && t.dimensions[0].values);"
    " return !!(v && v.length); })); })"
)
OURS_ALL = ["plot-history", "plot-importance", "plot-edf", "plot-contour", "plot-parcoords", "plot-timeline"]
PEER_ALL = ["plot-history", "graph-hyperparameter-importances", "graph-timeline", "graph-intermediate-values"]


def optuna_study(path: Path, trials: int) -> None:
    """An Optuna study with the seed's parameters and objective (learning curves for the
    first 50 trials, as hpcopt's seed has)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from tests.helpers.seed import objective

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{path}", study_name="big", direction="minimize")
    dists = {
        "lr": FloatDistribution(1e-4, 1.0, log=True),
        "width": IntDistribution(8, 256),
        "act": CategoricalDistribution(["relu", "tanh", "gelu"]),
    }
    rng = random.Random(0)
    batch = []
    for i in range(trials):
        params = {
            "lr": 10 ** rng.uniform(-4, 0),
            "width": rng.randint(8, 256),
            "act": rng.choice(["relu", "tanh", "gelu"]),
        }
        value = objective(params) + rng.gauss(0, 0.05)
        curve = {e: value + (4 - e) * 0.3 for e in range(1, 5)} if i < 50 else {}
        batch.append(
            optuna.trial.create_trial(params=params, distributions=dists, value=value, intermediate_values=curve)
        )
    study.add_trials(batch)


def load(browser: Any, url: str, first: list[str], every: list[str]) -> tuple[float, float]:
    """A fresh tab: seconds until the ``first`` plots and ``every`` plot have data."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_function(HAS_DATA, arg=first, polling=20, timeout=120_000)
    t_first = time.perf_counter() - t0
    try:
        page.wait_for_function(HAS_DATA, arg=every, polling=20, timeout=120_000)
    except Exception:
        missing = page.evaluate(f"(ids) => ids.filter(id => !({HAS_DATA})([id]))", every)
        raise RuntimeError(f"{url}: no data in {missing} after 120 s") from None
    t_every = time.perf_counter() - t0
    page.close()
    return t_first, t_every


def idle_share(browser: Any, url: str, every: list[str], seconds: float) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_function(HAS_DATA, arg=every, polling=100, timeout=120_000)
    page.wait_for_timeout(5000)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")

    def busy() -> float:
        return float({m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}["TaskDuration"])

    b0, w0 = busy(), time.perf_counter()
    page.wait_for_timeout(seconds * 1000)
    share = (busy() - b0) / (time.perf_counter() - w0)
    page.close()
    return share


def cell(values: list[float], median: float) -> str:
    return f"{median:.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    from playwright.sync_api import sync_playwright

    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage
    from tests.helpers.live import free_port, run_live_server
    from tests.helpers.seed import seed_campaign

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--idle", type=float, default=30.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hpcopt-dash-"))
    atexit.register(shutil.rmtree, tmp, True)  # both seeded databases, gone when the run ends
    url = f"sqlite:///{tmp / 'hpcopt.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    t0 = time.perf_counter()
    cid = seed_campaign(service, name="big", completed=args.trials, curves_for=50)
    optuna_study(tmp / "optuna.db", args.trials)
    print(f"seeded both in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    port = free_port()
    peer = subprocess.Popen(
        [str(Path(sys.executable).parent / "optuna-dashboard"), f"sqlite:///{tmp / 'optuna.db'}", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peer_url = f"http://127.0.0.1:{port}/dashboard/studies/1"
    ours: dict[str, list[float]] = {"history": [], "every plot": []}
    theirs: dict[str, list[float]] = {"history": [], "every plot": []}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/studies", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        for server in run_live_server(service):
            our_url = f"{server.http_url}/#/campaign/{cid}"
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
                for rep in range(args.reps):
                    print(f"loads {rep + 1}/{args.reps}", file=sys.stderr)
                    for got, target, every in ((ours, our_url, OURS_ALL), (theirs, peer_url, PEER_ALL)):
                        first, all_ = load(browser, target, ["plot-history"], every)
                        got["history"].append(first)
                        got["every plot"].append(all_)
                print("idle", file=sys.stderr)
                idle_ours = idle_share(browser, our_url, OURS_ALL, args.idle)
                idle_theirs = idle_share(browser, peer_url, PEER_ALL, args.idle)
                browser.close()
    finally:
        peer.terminate()
        peer.wait(10)
        storage.close()
    print(
        f"\n{args.trials} completed trials, {os.cpu_count()} cores, chromium headless (software GL), "
        f"{args.reps} loads each"
    )
    print("seconds from a fresh tab's navigation until ... (median, min-max)")
    print(f"{'':14} {'hpcopt':>20} {'optuna-dashboard':>20} {'ratio':>7}")
    for key in ours:
        a, b = statistics.median(ours[key]), statistics.median(theirs[key])
        print(f"{key:14} {cell(ours[key], a):>20} {cell(theirs[key], b):>20} {a / b:>6.2f}x")
    print(
        f"\nidle {args.idle:.0f} s after a load, main thread busy: hpcopt {100 * idle_ours:.2f}%, "
        f"optuna-dashboard {100 * idle_theirs:.2f}% (ratio {idle_ours / idle_theirs:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
