"""Comparing campaigns (issue 65, defect 9): tick 2 to 4 in the campaign list, Compare
opens them side by side — a table of what each is, each one's best value by trial and the
distribution of its values on one plot; a link with the wrong ids says what is allowed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.seed import run_mixed_campaign, seed_campaign

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


def test_the_compared_distributions_leave_out_diverged_runs_as_every_other_plot_does(
    page: Page, seeded: Seeded
) -> None:
    """The review: one diverged run (loss 1,000 to 10,000 here) stretched the shared
    value axis so that both curves sat in its left 5%. The axes stop at the campaigns'
    robust limits, the note says how many trials of which campaign lie beyond, and
    *every value* spans them all."""
    wild = seed_campaign(seeded.service, name="mlp-wild", completed=40, seed=3, diverged=0.1)
    tame = seed_campaign(seeded.service, name="mlp-tame", completed=40, seed=4)
    page.open(f"/campaigns/compare?ids={wild},{tame}")
    edf = page.wait_plot("plot-compare-edf", "d => d.length === 2")
    highest = max(max(t["x"]) for t in edf)
    assert highest >= 1000, "the seed has diverged runs"
    x_range = page.page.evaluate("() => document.getElementById('plot-compare-edf')._fullLayout.xaxis.range")
    tame_values = next(t["x"] for t in edf if "mlp-tame" in t["name"])
    assert x_range[1] < 100 and x_range[1] >= max(tame_values), (x_range, max(tame_values))
    y_range = page.page.evaluate("() => document.getElementById('plot-compare-best')._fullLayout.yaxis.range")
    assert y_range == x_range
    note = page.page.inner_text("#compare-note")
    off = sum(v >= 1000 for v in next(t["x"] for t in edf if "mlp-wild" in t["name"]))
    assert f"{off} trials of mlp-wild lie beyond" in note, note
    page.page.check("#compare-all")
    page.page.wait_for_function(
        f"() => document.getElementById('plot-compare-edf')._fullLayout.xaxis.range[1] >= {highest}"
    )
    assert "lie beyond" not in page.page.inner_text("#compare-note")


def test_a_one_and_a_two_objective_campaign_are_not_said_to_share_their_objective(page: Page, seeded: Seeded) -> None:
    """The review: the note claimed "the same objective" for a campaign minimizing loss
    and one minimizing loss and latency. The lines show the shared first objective and
    the note says the second campaign trades it against another."""
    one = run_mixed_campaign(seeded.server.grpc_target, seeded.service, name="loss-only")
    two = run_mixed_campaign(seeded.server.grpc_target, seeded.service, name="loss-latency", two_objectives=True)
    page.open(f"/campaigns/compare?ids={one},{two}")
    page.wait_plot("plot-compare-edf", "d => d.length === 2")
    note = page.page.inner_text("#compare-note")
    assert "same objective" not in note and "compare directly" not in note, note
    assert "loss-latency trades it against another" in note and "loss-latency: minimize loss, minimize latency" in note
    title = page.page.evaluate("() => document.getElementById('plot-compare-edf')._fullLayout.xaxis.title.text")
    assert title == "loss"
