"""Values that are not results never pass for results (issue 65, defect 5): on a campaign
driven through the real agent API, the trials table shows no value for running and
failed trials, marks a pruned trial's value reached and sorts it after every result;
the trial page shows an unfinished fold's latest point as such, not as its value; a
two-objective campaign's table has a column for the second objective."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.seed import MIXED_RESULTS, run_mixed_campaign

pytestmark = pytest.mark.timeout(240)
NONE = "\u2013"  # the dashboard's en dash: no value

ROWS = """() => [...document.querySelectorAll('#trials tbody tr')].map(tr => {
  const cells = [...tr.querySelectorAll('td')];
  return { state: cells[2].innerText.trim(), value: cells[3].innerText.trim(),
           reached: cells[3].classList.contains('reached'), cells: cells.map(c => c.innerText.trim()) };
})"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request)


def _rows(page: Page, count: int) -> list[dict[str, Any]]:
    page.page.wait_for_function(f"() => document.querySelectorAll('#trials tbody tr[data-trial]').length === {count}")
    rows: list[dict[str, Any]] = page.page.evaluate(ROWS)
    return rows


def test_the_table_shows_results_only_and_sorts_the_value_reached_after_them(page: Page, seeded: Seeded) -> None:
    cid = run_mixed_campaign(seeded.server.grpc_target, seeded.service, name="values-table")
    page.open(f"/campaign/{cid}")
    rows = _rows(page, 6)
    # By value, best first (the default): the three results, then the value reached.
    assert [r["state"] for r in rows[:4]] == ["COMPLETED"] * 3 + ["PRUNED"]
    assert [float(r["value"].split(" ")[0]) for r in rows[:3]] == sorted(loss for loss, _ in MIXED_RESULTS)
    assert rows[3]["reached"] and rows[3]["value"] == "0.05 when pruned"
    assert not any(r["reached"] for r in rows[:3])
    assert {r["state"]: r["value"] for r in rows[4:]} == {"RUNNING": NONE, "FAILED": NONE}
    # Worst first: the results reversed, and still the value reached after them.
    page.page.locator("#trials thead th", has_text="loss").click()
    page.page.wait_for_function("() => location.hash.includes('order=desc')")
    page.page.wait_for_function(
        "() => document.querySelector('#trials tbody tr td:nth-child(4)').innerText.startsWith('0.9')"
    )
    rows = _rows(page, 6)
    assert [r["state"] for r in rows[:4]] == ["COMPLETED"] * 3 + ["PRUNED"]
    worst_first = sorted((loss for loss, _ in MIXED_RESULTS), reverse=True)
    assert [float(r["value"].split(" ")[0]) for r in rows[:3]] == worst_first


def test_an_unfinished_fold_shows_its_latest_point_as_such(page: Page, seeded: Seeded) -> None:
    cid = run_mixed_campaign(seeded.server.grpc_target, seeded.service, name="values-folds")
    page.open(f"/campaign/{cid}/trial/5")  # the running trial
    page.page.locator("#folds tbody tr").nth(1).wait_for()
    folds = page.page.evaluate(
        "() => [...document.querySelectorAll('#folds tbody tr')].map(tr => [...tr.querySelectorAll('td')]"
        ".slice(0, 3).map(td => td.innerText.trim()))"
    )
    assert folds == [["0", "no", f"{NONE} (latest 0.64, epoch 2)"], ["1", "yes", "0.03"]]
    assert page.page.inner_text("#trial-value") == NONE
    assert "reached" in (page.page.locator("#folds tbody tr").first.locator("td").nth(2).get_attribute("class") or "")


def test_a_two_objective_table_has_a_column_per_objective(page: Page, seeded: Seeded) -> None:
    cid = run_mixed_campaign(seeded.server.grpc_target, seeded.service, name="values-two", two_objectives=True)
    page.open(f"/campaign/{cid}")
    rows = _rows(page, 6)
    heads = page.page.evaluate("() => [...document.querySelectorAll('#trials thead th')].map(t => t.innerText.trim())")
    assert heads[3].startswith("loss") and heads[4] == "latency"
    latency = {float(r["cells"][3].split(" ")[0]): r["cells"][4] for r in rows[:3]}
    assert latency == {loss: f"{lat:g}" for loss, lat in MIXED_RESULTS}
    assert {r["state"]: r["cells"][4] for r in rows[3:]} == {"PRUNED": NONE, "RUNNING": NONE, "FAILED": NONE}


def test_the_csv_of_the_table_holds_its_selection_in_its_order(page: Page, seeded: Seeded) -> None:
    """Defect 9: a CSV of the filtered table. With the state filter and the order the
    reader chose, the download holds those trials in that order."""
    cid = run_mixed_campaign(seeded.server.grpc_target, seeded.service, name="values-csv")
    page.open(f"/campaign/{cid}?state=COMPLETED,PRUNED&order=desc")
    _rows(page, 4)
    with page.page.expect_download() as got:
        page.page.click("#export-table")
    text = Path(got.value.path()).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["state"] for r in rows] == ["COMPLETED"] * 3 + ["PRUNED"]
    assert [float(r["loss"]) for r in rows[:3]] == sorted((loss for loss, _ in MIXED_RESULTS), reverse=True)
    assert [float(r["fold_1_latency"]) for r in rows[:3]] == [lat for _, lat in sorted(MIXED_RESULTS, reverse=True)]
    # The review: the columns the reader hides in the chooser stay out of the CSV too.
    page.page.locator("#table-tools summary").click()
    for key in ("param:batch", "agent"):
        page.page.uncheck(f"input[data-column='{key}']")
    page.page.wait_for_function("() => !document.querySelector('#trials thead').innerText.includes('Agent')")
    with page.page.expect_download() as got:
        page.page.click("#export-table")
    header = Path(got.value.path()).read_text().splitlines()[0].split(",")
    assert "param_lr" in header and "fold_0_loss" in header, header
    assert not {"param_batch", "agent_id", "agent_host"} & set(header), header
    assert got.value.suggested_filename == f"campaign-{cid}-trials-selected.csv"


def test_a_campaign_with_constraints_marks_its_infeasible_trials_and_colours_them(page: Page, seeded: Seeded) -> None:
    """Constraints (issue 82): the table ranks feasible results first and says what an
    infeasible one broke; the history plot draws the two apart, with what was broken in
    the hover; parallel coordinates draw infeasible lines as the worst (grey, beneath)."""
    from hpcopt_server.service.agents import Lease
    from tests.helpers.specs import make_spec

    service = seeded.service
    spec = make_spec(name="constrained", folds=1, constraints=[{"metric": "mem", "max": 100.0}])
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="n", ranks=1, gpus=0).agent_id
    for loss, mem in ((0.1, 250.0), (0.5, 90.0), (0.3, 99.0)):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, loss, {"mem": mem})
        service.agents.complete(lease)
    page.open(f"/campaign/{cid}")
    rows = _rows(page, 3)
    assert [r["value"].split()[0] for r in rows] == ["0.3", "0.5", "0.1"], rows  # feasible first, then by value
    assert rows[2]["value"].endswith("✗ mem 250 > 100"), rows[2]
    history = page.wait_plot("plot-history", "d => d.some(t => t.name === 'infeasible')")
    traces = {t["name"]: t for t in history}
    assert len(traces["feasible"]["x"]) == 2 and len(traces["infeasible"]["x"]) == 1
    assert traces["infeasible"]["hovertext"] == ["broke mem 250 &gt; 100"]  # escaped: Plotly reads HTML
    assert next(b for b in history if b["name"].startswith("best"))["y"][-1] == 0.3, "the best-so-far line is feasible"
    line = page.wait_plot("plot-parcoords")[0]["line"]
    worst = min(line["color"])
    values = page.wait_plot("plot-parcoords")[0]["dimensions"][-1]["values"]
    assert line["color"][values.index(0.1)] == worst and sorted(line["color"]).count(worst) == 1
