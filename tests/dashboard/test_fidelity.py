"""A multi-fidelity campaign (``algorithm: mf``) in a real browser against a real
server: the trials table's rung column, a trial's rung, why it got it and the rungs it
finished (partial ones marked), and the history plot's partial results apart from the
K-fold ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpcopt_server import domain as d
from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.fidelity import Agents, mf_spec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


def _half_run(service: Any) -> tuple[int, list[d.Trial]]:
    """An mf campaign part of the way: some trials K-fold COMPLETED, others PAUSED."""
    cid = int(service.campaigns.create(mf_spec(name="mf-dash")).id)
    agents = Agents(service, cid)
    for _ in range(60):
        held = [h for h in (agents.acquire() for _ in range(3)) if h]
        for trial, lease in held:
            agents.train(trial, lease)
        trials = service.campaigns.trials(cid, limit=100)[0]
        states = {t.state for t in trials}
        if d.TrialState.COMPLETED in states and d.TrialState.PAUSED in states and len(trials) >= 12:
            return cid, trials
    raise AssertionError("no COMPLETED and PAUSED trials side by side")


def test_an_mf_campaign_shows_rungs_and_keeps_partial_results_apart(page: Page, seeded: Seeded) -> None:
    cid, trials = _half_run(seeded.service)
    paused = next(t for t in trials if t.state == d.TrialState.PAUSED)
    completed = [t for t in trials if t.state == d.TrialState.COMPLETED]
    page.open(f"/campaign/{cid}")
    page.page.wait_for_selector("#trials th:text('Rung')")
    cell = page.page.locator(f"#trials tr[data-trial='{paused.id}'] td.rung")
    assert paused.fidelity is not None
    assert cell.inner_text() == f"{paused.fidelity.rung} (1 fold, {paused.fidelity.epochs} ep.)"
    assert cell.get_attribute("title") == paused.fidelity.why
    assert "at its rung" in page.page.locator(f"#trials tr[data-trial='{paused.id}']").inner_text()
    # The history: K-fold results as points; the partial ones only on request, apart.
    history = page.wait_plot("plot-history")
    points = next(t for t in history if t.get("name") == "trial")
    assert sorted(points["customdata"]) == sorted(t.number for t in completed)
    page.page.check("#history-ended")
    history = page.wait_plot("plot-history", "d => d.some(t => t.name === 'partial (fewer folds or epochs)')")
    partial = next(t for t in history if t["name"] == "partial (fewer folds or epochs)")
    assert paused.number in partial["customdata"]
    assert not set(partial["customdata"]) & {t.number for t in completed}
    assert "Partial results" in page.page.inner_text("#history-note")
    # The paused trial's page: its rung, why, and its finished rungs marked partial.
    page.open(f"/campaign/{cid}/trial/{paused.number}")
    page.page.wait_for_selector("#trial-rungs")
    assert page.page.inner_text("#trial-rung").startswith(f"{paused.fidelity.rung}: 1 of 3 folds")
    assert page.page.inner_text("#trial-rung-why") == paused.fidelity.why
    rows = page.page.locator("#trial-rungs tbody tr")
    assert rows.count() == len(paused.fidelity.history)
    assert "(partial)" in rows.first.inner_text()
    # A completed trial's last rung is all folds and epochs: not marked partial.
    done = completed[0]
    page.open(f"/campaign/{cid}/trial/{done.number}")
    page.page.wait_for_selector("#trial-rungs")
    assert "(partial)" not in page.page.locator("#trial-rungs tbody tr").last.inner_text()
