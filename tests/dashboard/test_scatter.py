"""A scatter of any two quantities and a multi-objective campaign's hypervolume by trial
(issue 65, defect 9), in a real browser against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpcopt_server.service.agents import Lease
from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request)


def _two_objectives(service: Any, values: list[tuple[float, float]]) -> int:
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "latency", "direction": "minimize"}]
    cid = service.campaigns.create(
        make_spec(name="hv", folds=1, objectives=objectives, budget={"max_trials": len(values)})
    ).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    for loss, latency in values:
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, loss, {"latency": latency})
        service.agents.complete(lease)
    return int(cid)


def test_the_scatter_plots_any_two_quantities_and_keeps_them_in_the_url(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    first = page.wait_plot("plot-scatter")[0]
    assert len(first["x"]) == 60
    page.page.select_option("#scatter-x", "param:width")
    page.page.select_option("#scatter-y", "param:lr")
    scatter = page.wait_plot("plot-scatter", "d => d[0].x.every(x => Number.isInteger(x))")[0]
    body = page.page.evaluate(f"() => fetch('api/v1/campaigns/{seeded.small}/plot').then(r => r.json())")
    want = {p["number"]: (p["params"]["width"], p["params"]["lr"]) for p in body["points"]}
    got = {n: (x, y) for n, x, y in zip(scatter["customdata"], scatter["x"], scatter["y"], strict=True)}
    assert got == want
    assert page.page.evaluate("() => document.getElementById('plot-scatter').layout.yaxis.type") == "log"
    assert "scatter=param%3Awidth%2Cparam%3Alr" in page.page.evaluate("() => location.hash")
    page.page.reload()
    page.wait_plot("plot-scatter", "d => d[0].x.every(x => Number.isInteger(x))")
    assert page.page.locator("#scatter-x").input_value() == "param:width"


def test_the_hypervolume_grows_with_each_trial_that_moves_the_front(page: Page, seeded: Seeded) -> None:
    """Exact 2-D hypervolume against the worst values (no outliers here): (3, 3) alone
    is 0; (1, 2) adds 2 x 1; (2, 1) adds 1 x 1; a dominated (2.5, 2.5) adds nothing."""
    values = [(3.0, 3.0), (1.0, 2.0), (2.5, 2.5), (2.0, 1.0), *[(3.0, 3.0)] * 16]
    cid = _two_objectives(seeded.service, values)
    page.open(f"/campaign/{cid}")
    hv = page.wait_plot("plot-hypervolume")[0]
    assert hv["y"][:5] == pytest.approx([0.0, 2.0, 2.0, 3.0, 3.0])
    assert hv["y"][-1] == pytest.approx(3.0)
    assert "reference point (3, 3)" in page.page.inner_text("#hypervolume-note")
    # The axis spans the positive hypervolumes (2 to 3, padded), not 0 to 3: the gain of
    # trial #3 is a third of the plot's height, not a step lost above a flat line from 0.
    low, high = page.page.evaluate("() => document.getElementById('plot-hypervolume').layout.yaxis.range")
    assert 1.9 <= low <= 2.0 and 3.0 <= high <= 3.1, (low, high)


def test_the_rank_plot_colours_by_place_so_a_diverged_run_does_not_wash_out_the_rest(
    page: Page, seeded: Seeded
) -> None:
    """Losses 0.1..0.9 and one diverged 1e6: by value every ordinary trial takes one end of
    the scale; by rank they spread evenly from 0 (best) to 1 (the diverged one), ties
    sharing the better place. A maximized objective ranks the other way."""
    losses = [0.1 * k for k in range(1, 10)] + [0.5, 1e6]  # 0.5 twice: a tie
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "acc", "direction": "maximize"}]
    cid = seeded.service.campaigns.create(
        make_spec(name="ranked", folds=1, objectives=objectives, budget={"max_trials": len(losses)})
    ).id
    agent = seeded.service.agents.register(host="h", ranks=1, gpus=0).agent_id
    for loss in losses:
        got = seeded.service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        seeded.service.agents.report_fold(lease, 0, loss, {"acc": -loss})
        seeded.service.agents.complete(lease)
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-scatter")
    page.page.check("#scatter-rank")
    scatter = page.wait_plot("plot-scatter", "d => d[0].marker.cmax === 1")[0]
    rank = dict(zip(scatter["customdata"], scatter["marker"]["color"], strict=True))
    n = len(losses) - 1
    assert rank[0] == 0 and rank[10] == 1  # the best, and the diverged run
    assert rank[4] == rank[9] == pytest.approx(4 / n)  # the tie at 0.5 shares the better place
    assert rank[5] == pytest.approx(6 / n)
    assert "colour=rank" in page.page.evaluate("() => location.hash")
    assert "coloured by their rank in loss" in page.page.inner_text("#scatter-note")
    # The second objective, maximized: acc = -loss ranks the same trials the same way.
    page.page.reload()
    page.page.locator("#scatter-rank:checked").wait_for()
    page.page.select_option("#objective-pick select", "1")
    again = page.wait_plot(
        "plot-scatter", "d => d[0].marker.cmax === 1 && d[0].marker.colorbar.title.text.includes('acc')"
    )[0]
    assert dict(zip(again["customdata"], again["marker"]["color"], strict=True)) == rank
