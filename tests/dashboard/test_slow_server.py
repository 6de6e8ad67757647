"""The dashboard against a deliberately slow server: every REST answer is delayed by a
seeded random 0.15 to 0.6 s, so answers arrive late and out of order. A user who leaves a
page (or acts on it) while its answers are still on the way must get no page error, and
the page they land on must draw (issue 31, item 11). The ``page`` fixture fails a test
on any console or page error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hpcopt_server import domain as d
from tests.helpers.dashboard import LOADED, Page, Seeded, make_page, seed_and_serve
from tests.helpers.env import scaled

pytestmark = pytest.mark.timeout(240)

SLOW = (0.15, 0.6)
#: The page's handlers of an answer have run: two frames after it arrived.
SETTLED = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 0))))"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False, slow=SLOW)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


def _leave_while(page: Page, wanted: Callable[[Any], bool], act: Callable[[], None], to: str = "/") -> None:
    """Starts the request ``act`` provokes (or waits for the page to make it), leaves
    for ``to`` before its answer arrives, and waits until that answer was handled."""
    with page.page.expect_request(wanted, timeout=scaled(30_000)) as got:
        act()
    page.page.evaluate("(hash) => { location.hash = hash; }", f"#{to}")
    got.value.response()  # the late answer, arriving on the next page
    page.page.evaluate(SETTLED)


def _list_drawn(page: Page) -> None:
    page.page.locator("#campaigns tbody tr[data-id]").first.wait_for(timeout=scaled(30_000))


@pytest.mark.parametrize("late", ["/importance", "/timeline", "/curves", "/plot?", "/running"])
def test_leaving_the_campaign_page_while_an_answer_is_late_raises_no_error(
    page: Page, seeded: Seeded, late: str
) -> None:
    _leave_while(page, lambda r: late in r.url, lambda: page.open(f"/campaign/{seeded.small}"))
    _list_drawn(page)


def test_a_sort_or_a_curve_choice_then_leaving_raises_no_error(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    page.page.wait_for_function(LOADED, timeout=scaled(60_000))
    sort = page.page.locator("#trials thead th[data-sort=number]")
    _leave_while(page, lambda r: "/trials?" in r.url and "sort=number" in r.url, sort.click)
    _list_drawn(page)
    page.open(f"/campaign/{seeded.small}")
    page.page.wait_for_function(LOADED, timeout=scaled(60_000))
    box = page.page.locator("#trials tbody input.pick").first
    _leave_while(page, lambda r: "/curves?number=" in r.url, box.check)
    _list_drawn(page)


def test_a_trial_page_left_before_it_loads_and_the_campaign_page_after_it_draw(page: Page, seeded: Seeded) -> None:
    with seeded.service.ctx.storage.read() as tx:
        trials, _ = tx.trials.page(seeded.small, states=[d.TrialState.COMPLETED], limit=1)
    number = trials[0].number
    trial_page = f"/campaign/{seeded.small}/trial/{number}"
    _leave_while(
        page, lambda r: f"/trials/{number}" in r.url, lambda: page.open(trial_page), to=f"/campaign/{seeded.small}"
    )
    page.page.wait_for_function(LOADED, timeout=scaled(60_000))
    assert page.page.inner_text("#campaign-title") == "mlp-small"
    assert page.page.locator("#trial-title").count() == 0, "the late trial answer drew nothing"


def test_a_global_trial_link_left_before_it_resolves_does_not_pull_the_reader_back(page: Page, seeded: Seeded) -> None:
    with seeded.service.ctx.storage.read() as tx:
        trials, _ = tx.trials.page(seeded.small, states=[d.TrialState.COMPLETED], limit=1)
    _leave_while(page, lambda r: r.url.endswith(f"/trials/{trials[0].id}"), lambda: page.open(f"/trial/{trials[0].id}"))
    _list_drawn(page)
    assert page.page.evaluate("() => location.hash") == "#/"
    assert page.page.locator("#trial-title").count() == 0


def test_cancel_confirmed_then_leaving_before_the_answer_cancels_and_raises_no_error(
    page: Page, seeded: Seeded
) -> None:
    page.open(f"/campaign/{seeded.spare}")
    page.page.wait_for_function("() => document.getElementById('cancel')?.disabled === false", timeout=scaled(60_000))
    page.page.locator("#cancel").click()
    _leave_while(page, lambda r: r.url.endswith("/cancel") and r.method == "POST", lambda: page.answer("cancel-dialog"))
    _list_drawn(page)
    state = f"#campaigns tbody tr[data-id='{seeded.spare}'] td:nth-child(3) .badge"
    row = page.page.locator(state)
    page.page.wait_for_function(
        "(sel) => document.querySelector(sel)?.textContent === 'CANCELLED'", arg=state, timeout=scaled(30_000)
    )
    assert row.inner_text() == "CANCELLED"
    assert seeded.service.campaigns.get(seeded.spare).campaign.state == d.CampaignState.CANCELLED
