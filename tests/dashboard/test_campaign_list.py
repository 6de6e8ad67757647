"""The campaign list searches, filters and sorts on the server, across pages (issue 65,
defect 8): 130 campaigns, a page of 100; the view is in the URL and survives a reload."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(240)
NAMES = "() => [...document.querySelectorAll('#campaigns tbody tr[data-id] td:nth-child(2)')].map(t => t.innerText)"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    for s in seed_and_serve(tmp_path_factory, big=False):
        for i in range(128):  # with the fixture's small and spare campaigns: 130
            name = f"{'resnet' if i % 3 == 0 else 'mlp'}-{i:03d}"
            cid = s.service.campaigns.create(make_spec(name=name)).id
            if i in (4, 5):
                s.service.campaigns.cancel(cid)
        yield s


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request)


def _names(page: Page) -> list[str]:
    names: list[str] = page.page.evaluate(NAMES)
    return names


def test_a_sort_orders_every_campaign_not_just_the_page(page: Page, seeded: Seeded) -> None:
    page.open("/")
    page.page.wait_for_function(f"() => ({NAMES})().length === 100")
    assert "page 1 of 2 · 130 campaigns" in page.page.inner_text("#campaign-page-info")
    every = sorted((c.campaign.name for c in seeded.service.campaigns.page(0, 1000)[0]), key=str.lower)
    page.page.click("#campaigns th[data-sort=name]")
    page.page.wait_for_function(f"() => ({NAMES})()[0] === {every[0]!r}")
    assert _names(page) == every[:100], "the first 100 of all 130 by name"
    page.page.click("#older")
    page.page.wait_for_function(f"() => ({NAMES})().length === 30")
    assert _names(page) == every[100:]
    assert "sort=name" in page.page.evaluate("() => location.hash") and "page=2" in page.page.evaluate(
        "() => location.hash"
    )
    page.page.reload()
    page.page.wait_for_function(f"() => ({NAMES})().length === 30")
    assert _names(page) == every[100:], "the view survives a reload"


def test_search_and_state_filter_the_whole_list(page: Page, seeded: Seeded) -> None:
    page.open("/")
    page.page.wait_for_function(f"() => ({NAMES})().length === 100")
    page.page.fill("#campaign-search", "RESNET")
    page.page.wait_for_function(f"() => ({NAMES})().length === 43")
    assert all(n.startswith("resnet-") for n in _names(page))
    assert page.page.inner_text("#campaign-count") == "43 matches"
    assert page.page.locator("#campaign-pager button").count() == 0, "one page"
    page.page.select_option("#campaign-state", "CANCELLED")
    page.page.wait_for_function(f"() => ({NAMES})().length === 0 || ({NAMES})().length === 1")
    page.page.fill("#campaign-search", "")
    page.page.wait_for_function(f"() => ({NAMES})().length === 2")
    assert sorted(_names(page)) == ["mlp-004", "mlp-005"]
    assert "state=CANCELLED" in page.page.evaluate("() => location.hash")
    page.page.fill("#campaign-search", "no-such-campaign")
    empty = "() => document.querySelector('#campaigns tbody').innerText.includes('No campaign matches')"
    page.page.wait_for_function(empty)
