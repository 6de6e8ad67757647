"""A trial's "Curvature and loss landscape" card in a real browser against a real
server: the λ_max trace per fold with the 2/lr line, each fold's spectral density, and
fold 0's loss surface as a contour with the trajectory on it; absent from a campaign
without an ``analysis``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.analysis import analysis_document
from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(180)
LR = 0.05


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


def _trial(service: Any, analysis: bool) -> tuple[int, int]:
    from hpcopt_server.service.agents import Lease

    spec = make_spec(name=f"curvature-{analysis}", folds=2, training={"task": "tests:task", "epochs": 3})
    spec["space"]["lr"] = {"type": "real", "low": LR, "high": LR * 1.000001}
    if analysis:
        spec["analysis"] = {"hessian": {"trace": True}, "landscape": {"grid": 3}}
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="node", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, cid)
    lease = Lease(agent, got.trial.id, got.lease_id)
    for k in range(2):
        if analysis:
            service.agents.report_analysis(lease, k, json.dumps(analysis_document(30.0 + k)))
        service.agents.report_fold(lease, k, 0.5, {"loss": 0.5, "hessian_eig_1": 30.0 + k})
    service.agents.complete(lease)
    return int(cid), int(got.trial.number)


def test_a_trial_shows_its_curvature_with_the_2_over_lr_line_and_its_surface(page: Page, seeded: Seeded) -> None:
    cid, number = _trial(seeded.service, analysis=True)
    page.open(f"/campaign/{cid}/trial/{number}")
    trace = page.wait_plot("plot-curvature-trace", "d => d.length === 3")
    folds = [t for t in trace if t["name"].startswith("fold ")]
    assert [t["y"] for t in folds] == [[5.0, 20.0, 30.0], [5.0, 20.0, 31.0]] and folds[0]["x"] == [1, 2, 3]
    [line] = [t for t in trace if t["name"].startswith("2/lr")]
    assert line["y"][0] == pytest.approx(2 / LR, rel=1e-4)
    # 5 to 40 is within a decade: a linear axis (a log one labels 20, 30, 40 as 2, 3, 4).
    layout = "() => document.getElementById('plot-curvature-trace').layout"
    assert page.page.evaluate(f"() => ({layout})().yaxis.type") == "linear"
    assert page.page.evaluate(f"() => ({layout})().xaxis.dtick") == 1
    spectrum = page.wait_plot("plot-curvature-spectrum", "d => d.length === 2")
    assert spectrum[0]["x"] == [0.0, 10.0, 20.0, 30.0]
    surface = page.wait_plot("plot-curvature-surface", "d => d.length === 2")
    assert surface[0]["type"] == "contour" and surface[0]["z"][1][1] == 0.5
    assert surface[1]["name"] == "trajectory" and surface[1]["x"] == [0.8, 0.3, 0.0]
    note = page.page.locator("#curvature-note").inner_text()
    assert "2 fold(s) analysed" in note and "not a score" in note
    assert not page.errors


def test_a_campaign_without_an_analysis_has_no_curvature_card(page: Page, seeded: Seeded) -> None:
    cid, number = _trial(seeded.service, analysis=False)
    page.open(f"/campaign/{cid}/trial/{number}")
    page.page.locator("#trial-folds table").wait_for()
    assert page.page.locator("#trial-curvature").count() == 0


def test_the_compare_page_overlays_two_trials_spectra(page: Page, seeded: Seeded) -> None:
    from hpcopt_server.service.agents import Lease

    cid, first = _trial(seeded.service, analysis=True)
    service = seeded.service
    agent = service.agents.register(host="node", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, cid)
    lease = Lease(agent, got.trial.id, got.lease_id)
    doc = analysis_document(30.0)
    doc["hessian"]["density"]["density"] = [0.5, 0.3, 0.1, 0.1]
    service.agents.report_analysis(lease, 0, json.dumps(doc))
    page.open(f"/campaign/{cid}/compare?trials={first},{got.trial.number}")
    traces = page.wait_plot("plot-compare-spectra", "d => d.length === 3")
    assert [t["name"] for t in traces] == [f"#{first} fold 0", f"#{first} fold 1", f"#{got.trial.number} fold 0"]
    assert traces[2]["y"] == [0.5, 0.3, 0.1, 0.1] and traces[0]["line"]["color"] != traces[2]["line"]["color"]
    note = page.page.locator("#compare-spectra-note").inner_text()
    assert f"#{first}: λ_max 30, 31" in note, note
    assert not page.errors


def test_a_finished_trial_without_an_analysis_asks_for_one_and_draws_it_when_an_agent_stored_it(
    page: Page, seeded: Seeded
) -> None:
    from hpcopt.core.checkpoints import relative
    from hpcopt_server.service.agents import Lease

    service = seeded.service
    spec = make_spec(name="curvature-asked", folds=2, training={"task": "tests:task", "epochs": 3})
    spec["analysis"] = {"hessian": {}}
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="node", ranks=1, gpus=0).agent_id
    got = service.agents.acquire(agent, cid)
    lease = Lease(agent, got.trial.id, got.lease_id)
    for k in range(2):
        uri = f"file:///ckpt/{relative(service.agents.server_id(), cid, got.trial.id, k)}"
        service.agents.report_fold(lease, k, 0.5, {"loss": 0.5}, uri)
    service.agents.complete(lease)
    page.open(f"/campaign/{cid}/trial/{got.trial.number}")
    ask = page.page.locator("#curvature-ask")
    ask.wait_for()
    assert "Not analysed" in page.page.locator("#curvature-note").inner_text()
    ask.click()
    page.page.locator("#curvature-request", has_text="QUEUED").wait_for()
    assert page.page.locator("#curvature-ask").count() == 0  # asked: no second button while it waits
    taken = service.requested_analyses.take(agent, cid)  # an agent takes it and stores fold 0's
    assert taken is not None and taken[0].id == got.trial.id
    held = Lease(agent, got.trial.id, taken[1])
    service.agents.report_analysis(held, 0, json.dumps(analysis_document(12.0)))
    service.requested_analyses.finish(held, "", "1 fold(s) analysed from their checkpoints")
    spectrum = page.wait_plot("plot-curvature-spectrum", "d => d.length === 1")  # the card polls until it ends
    assert spectrum[0]["x"] == [0.0, 10.0, 20.0, 30.0]
    page.page.locator("#curvature-request", has_text="DONE").wait_for()
    assert page.page.locator("#curvature-ask").inner_text() == "Compute it again"
    assert not page.errors
