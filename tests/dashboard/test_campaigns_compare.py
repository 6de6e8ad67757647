"""Comparing campaigns (issue 65, defect 9): tick 2 to 4 in the campaign list, Compare
opens them side by side — a table of what each is, each one's best value by trial and the
distribution of its values on one plot; a link with the wrong ids says what is allowed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.seed import seed_campaign

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request)


def test_two_campaigns_ticked_in_the_list_open_side_by_side(page: Page, seeded: Seeded) -> None:
    other = seed_campaign(seeded.service, name="mlp-other", completed=40, seed=9)
    page.open("/")
    page.page.locator(f"#campaigns tr[data-id='{other}']").wait_for()
    assert page.page.get_attribute("#compare-campaigns", "aria-disabled") == "true"
    page.page.check(f"#campaigns tr[data-id='{seeded.small}'] input.pick-campaign")
    page.page.check(f"#campaigns tr[data-id='{other}'] input.pick-campaign")
    assert page.page.get_attribute("#compare-campaigns", "aria-disabled") == "false"
    page.page.click("#compare-campaigns")
    page.page.wait_for_function("() => location.hash.startsWith('#/campaigns/compare?ids=')")
    best = page.wait_plot("plot-compare-best", "d => d.length === 2")
    for trace, cid in zip(best, (seeded.small, other), strict=True):
        body = page.page.evaluate(f"() => fetch('api/v1/campaigns/{cid}/plot').then(r => r.json())")
        assert trace["y"][: len(body["best"])] == [b["value"] for b in body["best"]]
        assert trace["y"] == sorted(trace["y"], reverse=True), "a best value only goes down when minimizing"
    edf = page.wait_plot("plot-compare-edf", "d => d.length === 2")
    assert all(t["y"][-1] == 1 for t in edf)
    table = page.page.inner_text("#compared-campaigns")
    assert "mlp-small" in table and "mlp-other" in table and "minimize loss" in table
    assert "compare directly" in page.page.inner_text("#compare-note")


@pytest.mark.parametrize("ids", ["1", "1,2,3,4,5", "1,x", "0,1"])
def test_a_compare_link_with_the_wrong_campaigns_says_what_is_allowed(page: Page, seeded: Seeded, ids: str) -> None:
    page.open(f"/campaigns/compare?ids={ids}")
    page.page.locator("#not-found").wait_for()
    text = page.page.inner_text("#not-found")
    assert "2 to 4" in text or "campaign ids" in text, text


def test_comparing_a_campaign_that_does_not_exist_says_so(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaigns/compare?ids={seeded.small},999999")
    page.page.locator("#not-found").wait_for()
    assert "999999" in page.page.inner_text("#not-found")
    page.errors.clear()  # the 404 the page asked for is logged by the browser
