"""Driving the dashboard in chromium (Playwright) against a seeded live server."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hpcopt_server.service.agents import Lease
from tests.helpers.db import migrated_sqlite
from tests.helpers.env import IN_CI, ROOT, scaled
from tests.helpers.live import LiveServer, run_live_server
from tests.helpers.netlock import network_lock
from tests.helpers.seed import seed_campaign

CHROMIUM = "/usr/bin/chromium"


ARTIFACTS = ROOT / "artifacts" / "dashboard"


FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--enable-unsafe-swiftshader"]


def _missing(message: str) -> None:
    if IN_CI:
        pytest.fail(message + " (CI=true: the browser tests must run, not skip)")
    pytest.skip(message)


@dataclass
class Seeded:
    server: LiveServer
    small: int  # 60 completed, 3 failed, 2 queued; curves for all
    big: int  # 10,000 completed (-1 where the module seeds none)
    spare: int  # a campaign to cancel

    @property
    def service(self) -> Any:
        return self.server.service


def seed_and_serve(
    tmp_path_factory: pytest.TempPathFactory, *, big: bool = True, slow: tuple[float, float] | None = None
) -> Iterator[Seeded]:
    """A live server over a fresh database with the small, (big) and spare campaigns;
    ``slow``: its REST answers are delayed (``run_live_server``)."""
    from hpcopt_server.service import Service
    from hpcopt_server.storage.repository import Storage

    path = tmp_path_factory.mktemp("dash") / "hpcopt.db"
    if big:  # the same three campaigns every time: seeded once per run, then copied
        shutil.copyfile(_seeded_template(tmp_path_factory), path)
        url, (small, large, spare) = f"sqlite:///{path}", SEEDED_IDS
    else:
        url = migrated_sqlite(path)
    storage = Storage(url)
    service = Service(storage)
    if not big:
        small, large, spare = _seed(service, big=False)
    for server in run_live_server(service, slow=slow):
        yield Seeded(server, small, large, spare)
    storage.close()


#: The ids of the small, big and spare campaigns in the seeded template.
SEEDED_IDS = (1, 2, 3)


def _seed(service: Any, *, big: bool) -> tuple[int, int, int]:
    small = seed_campaign(service, name="mlp-small", completed=60, failed=3, queued=2, curves_for=60)
    large = seed_campaign(service, name="big-10k", completed=10_000, folds=1, curves_for=0, seed=1) if big else -1
    spare = seed_campaign(service, name="to-cancel", completed=5, queued=1, seed=2)
    return small, large, spare


def _seeded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The database with the small, big and spare campaigns, seeded once per run (its
    10,000 trials cost about a minute of CPU) in the directory the run's workers share
    (pytest-xdist's base temp), under a lock so that one worker seeds it and the others
    wait for it."""
    from hpcopt_server.service import Service
    from hpcopt_server.storage.repository import Storage

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's, not the last run's
    done = shared / "dashboard-seeded.db"
    with open(shared / "dashboard-seeded.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            work = shared / "dashboard-seeding" / "hpcopt.db"
            work.parent.mkdir(exist_ok=True)
            storage = Storage(migrated_sqlite(work))
            assert _seed(Service(storage), big=True) == SEEDED_IDS
            storage.close()
            assert [p.name for p in work.parent.iterdir()] == [work.name], list(work.parent.iterdir())
            work.rename(done)
    return done


@dataclass
class Page:
    """A browser page that records console errors and saves a screenshot at the end."""

    page: Any
    base: str
    errors: list[str] = field(default_factory=list)

    def open(self, route: str) -> None:
        self.page.goto(f"{self.base}/#{route}")

    def plot(self, element_id: str) -> Any:
        """The traces Plotly holds for a plot element (``gd.data``)."""
        return self.page.evaluate(
            "(id) => { const gd = document.getElementById(id);"
            " return gd && gd.data ? JSON.parse(JSON.stringify(gd.data)) : null; }",
            element_id,
        )

    def answer(self, dialog_id: str, value: str | None = None, *, accept: bool = True) -> str:
        """Answers the page's own steering dialog ``dialog_id`` (dialog.js) as a user:
        waits for it, types ``value`` into its field, presses OK (or Cancel); returns
        the text it showed, as shown before the answer (what will change, live)."""
        box = self.page.locator(f"#{dialog_id}[open]")
        box.wait_for(timeout=scaled(30_000))
        if value is not None:
            self.page.fill(f"#{dialog_id}-input", value)
        text = str(box.inner_text())
        self.page.click(f"#{dialog_id}-ok" if accept else f"#{dialog_id}-cancel")
        return text

    def wait_plot(self, element_id: str, predicate: str = "d => d.length > 0", timeout: float = scaled(30_000)) -> Any:
        self.page.wait_for_function(
            f"() => {{ const gd = document.getElementById({element_id!r});"
            f" return gd && gd.data && ({predicate})(gd.data); }}",
            timeout=timeout,
        )
        return self.plot(element_id)


def make_page(
    browser: Any,
    base: str,
    request: pytest.FixtureRequest,
    *,
    poll_ms: int | None = None,
    live_share: float | None = None,
    live_lag_ms: int | None = None,
) -> Iterator[Page]:
    """A page in a fresh context; ``poll_ms`` sets the dashboard's poll period,
    ``live_share`` the share of the page's time its live redraws may take and
    ``live_lag_ms`` the longest the history may wait for it (the others 5 times that;
    its localStorage knobs), so that tests of refreshes wait less, or wait for sure."""
    with network_lock(exclusive=False):  # no interface changes while the page is open
        yield from _page(browser, base, request, poll_ms, live_share, live_lag_ms)


def _page(
    browser: Any,
    base: str,
    request: pytest.FixtureRequest,
    poll_ms: int | None,
    live_share: float | None,
    live_lag_ms: int | None,
) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    # Playwright's fixed 30 s default for every wait and action, stretched like the rest.
    context.set_default_timeout(scaled(30_000))
    if poll_ms is not None:
        context.add_init_script(f"localStorage.setItem('hpcopt.pollMs', '{poll_ms}')")
    if live_share is not None:
        context.add_init_script(f"localStorage.setItem('hpcopt.liveShare', '{live_share}')")
    if live_lag_ms is not None:
        context.add_init_script(f"localStorage.setItem('hpcopt.liveLagMs', '{live_lag_ms}')")
    page = context.new_page()
    wrapped = Page(page, base)
    # A refresh that throws is logged as a warning by the page (core.js live()): here it is
    # an error too, as is every page error.
    page.on(
        "console",
        lambda m: (
            wrapped.errors.append(m.text)
            if m.type == "error" or (m.type == "warning" and m.text.startswith("refresh failed"))
            else None
        ),
    )
    page.on("pageerror", lambda e: wrapped.errors.append(f"page error: {e}"))
    yield wrapped
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    context.close()
    assert not wrapped.errors, f"console errors: {wrapped.errors}"


DRAWS = (
    "() => performance.getEntriesByType('mark')"
    ".filter(m => m.name.startsWith('hpcopt:draw:')).map(m => m.name.slice(12))"
)


LOADED = "() => performance.getEntriesByType('mark').some(m => m.name === 'hpcopt:timeline')"


def loaded(page: Page) -> None:
    """Until the campaign page drew every part once (the timeline is last). A condition,
    so the bound costs nothing when the page is quick: the 10,000-trial campaign's page
    took over 20 s to draw once in a CI run beside the other pytest worker (2026-11-28;
    the whole test took 36 s there and 25 s in the run before)."""
    page.page.wait_for_function(LOADED, timeout=scaled(90_000))


def finish_one(service: Any, cid: int, value: float, folds: int = 3) -> Any:
    reg = service.agents.register(host="finisher", ranks=1, gpus=0, campaign_id=cid)
    got = service.agents.acquire(reg.agent_id, cid)
    lease = Lease(reg.agent_id, got.trial.id, got.lease_id)
    for k in range(folds):
        service.agents.report_fold(lease, k, value)
    return service.agents.complete(lease)


def assert_calm(page: Page, service: Any, cid: int, wait_ms: int, folds: int = 3) -> None:
    """Idle: only 304s and no redraw; then a finished trial redraws the plots."""
    page.open(f"/campaign/{cid}")
    loaded(page)
    page.page.evaluate("() => { performance.clearMarks(); document.querySelector('#trials tbody tr').__kept = 1; }")
    statuses: list[int] = []
    page.page.on("response", lambda r: statuses.append(r.status) if "/api/v1/" in r.url else None)
    page.page.wait_for_timeout(wait_ms)  # several polls
    assert page.page.evaluate(DRAWS) == [], "no plot is redrawn while the data stays the same"
    assert statuses and set(statuses) == {304}, statuses
    assert page.page.evaluate("() => document.querySelector('#trials tbody tr').__kept") == 1, "rows kept"
    assert page.page.inner_text("#conn").startswith("updated ")
    # The check can fail: a trial that finishes redraws the plots of completed trials.
    finish_one(service, cid, 100.0, folds=folds)
    # (The first finished trial after the page opened redraws at once: campaign.js LIVE_SHARE.)
    page.page.wait_for_function(f"() => ({DRAWS})().includes('plot-history')", timeout=scaled(30_000))
    page.page.wait_for_function(f"() => ({DRAWS})().includes('plot-parcoords')", timeout=scaled(30_000))
