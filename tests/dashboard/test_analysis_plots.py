"""The campaign page's analysis plots on data with outliers, pruned and failed trials and
two objectives, in a real browser against a real server (issue 31, items 1, 4, 5, 7).

One diverged trial (a loss of 1e6 among losses of 1 to 4) must not squeeze every value
axis into a band near 0: the history, the slices, the EDF, the parallel coordinates'
objective axis and the contour's colours stop at the robust limit by default, say how
many trials lie past it, and a toggle shows every value."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpcopt_server.service.agents import Lease
from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.seed import TRUTH_SPACE, run_truth_campaign, seed_campaign
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(180)

DIVERGED = 1e6
LAYOUT = "(id) => document.getElementById(id)?.layout"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


def _outlier_campaign(service: Any, name: str, direction: str = "minimize") -> int:
    """30 one-fold trials over lr, width and act, losses 1.0 .. 3.9, the 8th diverged."""
    spec = make_spec(
        name=name,
        folds=1,
        objective={"metric": "loss", "direction": direction},
        algorithm={"name": "random", "seed": 2},
        budget={"max_trials": 30},
    )
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    bad = DIVERGED if direction == "minimize" else -DIVERGED
    for k in range(30):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, bad if k == 7 else 1.0 + k / 10)
        service.agents.complete(lease)
    return int(cid)


def _limit(page: Page, cid: int) -> float:
    body = page.page.evaluate(f"() => fetch('api/v1/campaigns/{cid}/plot').then(r => r.json())")
    return float(body["objectives"][0]["limit"])


def test_one_diverged_trial_leaves_every_value_axis_readable_and_the_toggle_shows_it(
    page: Page, seeded: Seeded
) -> None:
    cid = _outlier_campaign(seeded.service, "diverged")
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-parcoords")
    limit = _limit(page, cid)
    assert 3.9 < limit < 100, limit
    # The history: the axis stops just past the limit; the diverged trial sits at its edge as a triangle.
    history = page.wait_plot("plot-history")
    top = page.page.evaluate(f"() => ({LAYOUT})('plot-history').yaxis.range[1]")
    assert 3.9 < top < 100
    trial = history[0]
    at = trial["customdata"].index(7)
    assert trial["marker"]["symbol"][at] == "triangle-up" and trial["y"][at] <= top, "drawn at the edge"
    assert trial["text"][at].startswith("1000000"), "its hover gives its value"
    # Every slice, the EDF and the contour's colours.
    for n in ("lr", "width"):
        assert 3.9 < page.page.evaluate(f"() => ({LAYOUT})('slice-{n}').yaxis.range[1]") < 100, n
    assert 3.9 < page.page.evaluate(f"() => ({LAYOUT})('plot-edf').xaxis.range[1]") < 100
    contour = page.wait_plot("plot-contour")[0]
    assert contour["zauto"] is False and contour["zmax"] == pytest.approx(limit)
    # The parallel coordinates' objective axis: the diverged value at the limit, labelled "≥".
    axis = page.wait_plot("plot-parcoords")[0]["dimensions"][-1]
    assert max(axis["values"]) == pytest.approx(limit) and axis["ticktext"][-1].startswith("≥")
    note = page.page.inner_text("#analysis-controls")
    assert "1 of 30 completed trials lie above" in note and "Q3 + 3 × IQR" in note, note  # noqa: RUF001
    assert "1 of 30 completed trials lie above" in page.page.inner_text("#history-note")
    # The toggle: every value, in the URL, for every plot.
    page.page.check("#show-all")
    page.page.wait_for_function(f"() => ({LAYOUT})('plot-history').yaxis.autorange === true")
    page.page.wait_for_function(
        "() => Math.max(...document.getElementById('plot-parcoords').data[0].dimensions.at(-1).values) > 1e5"
    )
    page.page.wait_for_function(
        f"() => ({LAYOUT})('slice-lr').yaxis.range?.[1] > 1e5 || ({LAYOUT})('slice-lr').yaxis.autorange"
    )
    assert "view=all" in page.page.evaluate("() => location.hash")
    assert "included" in page.page.inner_text("#analysis-controls")
    page.page.reload()
    page.wait_plot("plot-history")
    assert page.page.is_checked("#show-all"), "the choice survives a reload"


def test_a_brush_on_the_objective_axis_up_to_the_limit_keeps_the_off_scale_trials(page: Page, seeded: Seeded) -> None:
    cid = _outlier_campaign(seeded.service, "brush-limit")
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-parcoords")
    limit = _limit(page, cid)
    page.page.evaluate(
        "(hi) => Plotly.restyle(document.getElementById('plot-parcoords'),"
        " {'dimensions[3].constraintrange': [[3.5, hi]]})",
        limit,
    )
    page.page.wait_for_function(
        "() => (document.getElementById('page-info')?.textContent ?? '').includes('· 6 trials')"
    )
    assert "1000000" in page.page.inner_text("#trials tbody"), "the trial drawn at the limit is in the filtered table"


def test_a_maximized_objective_stops_its_axes_below(page: Page, seeded: Seeded) -> None:
    cid = _outlier_campaign(seeded.service, "maximized", direction="maximize")
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-parcoords")
    limit = _limit(page, cid)
    assert -100 < limit < 1.0
    bottom = page.page.evaluate(f"() => ({LAYOUT})('plot-history').yaxis.range[0]")
    assert -100 < bottom < 1.0
    axis = page.wait_plot("plot-parcoords")[0]["dimensions"][-1]
    assert min(axis["values"]) == pytest.approx(limit) and axis["ticktext"][0].startswith("≤")
    assert "lie below" in page.page.inner_text("#analysis-controls")


def test_the_best_lines_lie_on_top_and_axes_have_no_doubled_range_labels(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    trace = page.wait_plot("plot-parcoords")[0]
    losses, colours = trace["dimensions"][-1]["values"], trace["line"]["color"]
    # Plotly draws lines in the order of their colour value: the best trial has the highest.
    order = sorted(range(len(losses)), key=lambda i: colours[i])
    assert [losses[i] for i in order] == sorted((losses[i] for i in order), reverse=True)
    assert trace["line"]["reversescale"] is True, "the highest colour value is the best colour"
    assert trace["rangefont"]["color"] == "rgba(0,0,0,0)", "no range labels beside the ticks"
    width = trace["dimensions"][1]
    assert width["ticktext"][0] == "8" and width["ticktext"][-1] == "256", "the ends carry the range"


def test_the_history_shows_pruned_and_failed_trials_on_request(page: Page, seeded: Seeded) -> None:
    cid = seed_campaign(seeded.service, name="ended", completed=30, pruned=4, failed=3, seed=5)
    page.open(f"/campaign/{cid}")
    history = page.wait_plot("plot-history")
    assert not {"pruned", "failed"} & {t.get("name") for t in history}, "completed trials only by default"
    page.page.check("#history-ended")
    history = page.wait_plot("plot-history", "d => d.some(t => t.name === 'pruned')")
    pruned = next(t for t in history if t["name"] == "pruned")
    failed = next(t for t in history if t["name"] == "failed")
    assert sorted(pruned["customdata"]) == [30, 31, 32, 33] and all(isinstance(y, float) for y in pruned["y"])
    assert sorted(failed["customdata"]) == [34, 35, 36] and failed["yaxis"] == "y2"
    assert "view=ended" in page.page.evaluate("() => location.hash")
    assert "Pruned trials at the value they reached" in page.page.inner_text("#history-note")


def test_the_downsampled_history_says_so_where_it_is_read(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    page.wait_plot("plot-history")
    assert "Drawn:" not in page.page.inner_text("#history-note")
    assert not page.page.evaluate("() => document.getElementById('history-note').classList.contains('sampled')")


def test_every_analysis_plot_follows_the_chosen_objective(page: Page, seeded: Seeded) -> None:
    service = seeded.service
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "acc", "direction": "maximize"}]
    cid = service.campaigns.create(
        make_spec(name="two-plots", folds=1, objectives=objectives, budget={"max_trials": 24})
    ).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    accs = {}
    for k in range(24):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        accs[got.trial.number] = 0.5 + k / 100
        service.agents.report_fold(lease, 0, 2.0 - k / 20, {"acc": accs[got.trial.number]})
        service.agents.complete(lease)
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-parcoords")
    asked: list[str] = []
    page.page.on("request", lambda r: asked.append(r.url) if "/importance" in r.url else None)
    page.page.select_option("#objective", "1")
    page.wait_plot("plot-parcoords", "d => d[0].dimensions.at(-1).label === 'acc'")
    history = page.wait_plot("plot-history")
    assert dict(zip(history[0]["customdata"], history[0]["y"], strict=True)) == pytest.approx(accs)
    assert page.plot("slice-lr")[0]["y"] and set(page.plot("slice-lr")[0]["y"]) <= set(accs.values())
    assert page.page.evaluate(f"() => ({LAYOUT})('plot-edf').xaxis.title.text") == "acc"
    assert any("objective=1" in u for u in asked), "importance of the chosen objective"
    page.page.wait_for_function(
        "() => (document.getElementById('importance-note')?.textContent ?? '').includes(\"acc's rank\")"
    )
    assert "objective=1" in page.page.evaluate("() => location.hash")
    # A brush on the second objective's axis filters the table by it (on the server).
    dims = page.plot("plot-parcoords")[0]["dimensions"]
    page.page.evaluate(
        "(i) => Plotly.restyle(document.getElementById('plot-parcoords'),"
        " {[`dimensions[${i}].constraintrange`]: [[0.6, 0.655]]})",
        len(dims) - 1,
    )
    inside = sorted(n for n, a in accs.items() if 0.6 <= a <= 0.655)
    page.page.wait_for_function(
        f"() => (document.getElementById('page-info')?.textContent ?? '').includes('· {len(inside)} trials')"
    )
    shown = page.page.locator("#trials tbody tr[data-number]").evaluate_all("rs => rs.map(r => +r.dataset.number)")
    assert sorted(shown) == inside and 0 < len(inside) < 24
    # The campaign list gives a two-objective campaign the size of its front, not one best.
    front = len(service.campaigns.front(cid))
    page.open("/")
    cell = page.page.locator(f"#campaigns tr[data-id='{cid}'] td.front-size")
    cell.wait_for()
    assert cell.inner_text() == f"front of {front}" and "loss, acc" in (cell.get_attribute("title") or "")
    # A single-objective campaign has no selector.
    page.open(f"/campaign/{seeded.small}")
    page.wait_plot("plot-history")
    assert page.page.locator("#objective").count() == 0


def test_the_pareto_front_has_robust_axes_and_the_same_toggle(page: Page, seeded: Seeded) -> None:
    """The review: four diverged runs squeezed the front into about 5% of the width. Now
    each axis stops at its objective's robust limit, the diverged runs sit at the edge,
    and "show every value" spans them again."""
    service = seeded.service
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "latency", "direction": "minimize"}]
    cid = service.campaigns.create(
        make_spec(name="front-robust", folds=1, objectives=objectives, budget={"max_trials": 40})
    ).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    diverged = {5, 12, 20, 33}
    for k in range(40):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        loss = DIVERGED if k in diverged else 1.0 + (k % 10) / 10
        service.agents.report_fold(lease, 0, loss, {"latency": 10.0 + ((k * 7) % 40)})
        service.agents.complete(lease)
    page.open(f"/campaign/{cid}")
    front = page.wait_plot("plot-front")
    right = page.page.evaluate(f"() => ({LAYOUT})('plot-front').xaxis.range[1]")
    assert 1.9 < right < 100, right
    symbols = {
        n: s
        for trace in front
        for n, s, x in zip(trace["customdata"], trace["marker"]["symbol"], trace["x"], strict=True)
        if x <= right
    }
    assert len(symbols) == 40, "every trial is drawn inside the axis"
    assert {n for n, s in symbols.items() if s == "triangle-right"} == diverged
    note = page.page.inner_text("#front-note")
    assert "4 trials lie past the robust limit" in note, note
    page.page.locator("#show-all").wait_for()
    assert "Value axes and colours stop at" in page.page.inner_text("#analysis-controls")
    # With latency chosen (no outliers), the toggle stays for the front's loss axis.
    page.page.select_option("#objective", "1")
    page.page.wait_for_function(
        "() => document.getElementById('analysis-controls').innerText.includes(\"The Pareto front's loss axis stops\")"
    )
    page.page.check("#show-all")
    page.page.wait_for_function(f"() => ({LAYOUT})('plot-front').xaxis.autorange === true")
    assert max(x for trace in page.plot("plot-front") for x in trace["x"]) == DIVERGED


def test_a_conditional_parameter_has_an_axis_and_a_contour(page: Page, seeded: Seeded) -> None:
    """The review: conditional parameters silently vanished from the parallel coordinates
    and the contour pickers. Momentum (active under sgd) now has an axis whose
    "inactive" slot holds the other trials, and the contour offers it."""
    cid = run_truth_campaign(seeded.server.grpc_target, seeded.service, trials=60, momentum_weight=0.03, seed=3)
    page.open(f"/campaign/{cid}")
    dims = page.wait_plot("plot-parcoords")[0]["dimensions"]
    assert [d["label"] for d in dims[:4]] == list(TRUTH_SPACE)
    momentum = dims[2]
    slot = momentum["tickvals"][0]
    assert momentum["ticktext"][0] == "inactive" and slot < 0.0
    body = page.page.evaluate(f"() => fetch('api/v1/campaigns/{cid}/plot').then(r => r.json())")
    active = [p["params"].get("momentum") for p in body["points"]]
    assert any(v is None for v in active) and any(v is not None for v in active)
    assert momentum["values"] == [slot if v is None else v for v in active]
    # The contour: momentum is offered, with its condition, and drawn over sgd's trials.
    option = page.page.locator("#contour-x option[value='momentum']")
    assert option.inner_text() == "momentum (when optimizer ∈ {sgd})"
    page.page.select_option("#contour-x", "momentum")
    page.page.select_option("#contour-y", "lr")
    dots = page.wait_plot("plot-contour", "d => d[1].x.length > 0 && d[1].x.every(x => x >= 0)")[1]
    assert len(dots["x"]) == sum(v is not None for v in active)
