"""The "Population (PBT)" card in a real browser against a real server: members over
their epochs, the copies drawn from the member copied, the best member's ancestry and
the schedule of each hyper-parameter along it; hidden for other algorithms."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


def _pbt_campaign(service: Any) -> int:
    from hpcopt_server.service.agents import AcquireStatus, Lease

    spec = make_spec(
        name="pbt-population",
        space={
            "lr": {"type": "real", "low": 1e-4, "high": 1.0, "scale": "log"},
            "dropout": {"type": "real", "low": 0.0, "high": 0.5},
        },
        algorithm={"name": "pbt", "seed": 3, "options": {"population": 4, "interval": 2}},
        budget={"max_trials": 12, "max_parallel": 4},
        folds=2,
        training={"task": "tests:task", "epochs": 6},
    )
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="node", ranks=4, gpus=0).agent_id
    sid = service.agents.server_id()
    for values in ([0.4, 0.3, 0.2, 0.9], [0.3, 0.2, 0.1, 0.5], [0.2, 0.1, 0.05, 0.4]):
        held = []
        for _ in range(4):
            got = service.agents.acquire(agent, cid)
            assert got.status == AcquireStatus.GRANTED
            held.append((got.trial, Lease(agent, got.trial.id, got.lease_id)))
        for t, lease in held:
            v = values[t.lineage.member]
            for k in range(2):
                service.agents.report_fold(lease, k, v, {"loss": v}, checkpoint_uri(sid, cid, t.id, k))
            service.agents.complete(lease)
    return int(cid)


def test_a_pbt_campaign_shows_its_population_copies_and_the_best_schedule(page: Page, seeded: Seeded) -> None:
    cid = _pbt_campaign(seeded.service)
    doc = seeded.service.population.document(cid)
    page.open(f"/campaign/{cid}")
    traces = page.wait_plot("plot-population", "d => d.length >= 6")
    members = [t for t in traces if str(t.get("name", "")).startswith("member ")]
    assert sorted(t["name"] for t in members) == [f"member {m}" for m in range(4)]
    copies = next(t for t in traces if t["name"] == "copied weights")
    exploited = [i for i in doc["intervals"] if i["exploited"]]
    assert exploited and len([x for x in copies["x"] if x is not None]) == 2 * len(exploited)
    best = next(t for t in traces if t["name"] == "best member's ancestry")
    assert best["x"][-1] == 6 and best["y"][-1] == pytest.approx(0.05)
    # One schedule plot per parameter, a step per interval of the ancestry.
    for k, name in enumerate(("lr", "dropout")):
        steps = page.wait_plot(f"pbt-schedule-{k}")
        assert steps[0]["y"][::2] == pytest.approx([s["value"] for s in doc["schedule"][name]])
    note = page.page.locator("#population-note").inner_text()
    assert f"{len(exploited)} copies" in note and "4 members, 12 intervals" in note
    # The review's case: lr (a log parameter) on a log axis; the loss and the schedules
    # over the same epochs, 0 to the last; the legend clear of the x title.
    axes = page.page.evaluate(
        "() => ['plot-population', 'pbt-schedule-0', 'pbt-schedule-1'].map((id) => {"
        " const gd = document.getElementById(id); return [gd._fullLayout.xaxis.range, gd._fullLayout.yaxis.type]; })"
    )
    assert axes[1][1] == "log" and axes[2][1] == "linear", axes
    for x_range, _ in axes:
        assert x_range == pytest.approx([0, 6], abs=0.01), axes
    legend, title = page.page.evaluate(
        "() => { const box = (s) => document.querySelector(`#plot-population ${s}`).getBoundingClientRect();"
        " const r = [box('.legend'), box('.xtitle')]; return r.map((b) => [b.top, b.bottom]); }"
    )
    assert legend[1] <= title[0] or title[1] <= legend[0], f"the legend {legend} overlaps the x title {title}"


def test_the_population_card_stays_hidden_for_other_algorithms(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    page.page.wait_for_function("() => performance.getEntriesByType('mark').some(m => m.name === 'hpcopt:tables')")
    assert page.page.locator("#card-population").is_hidden()
