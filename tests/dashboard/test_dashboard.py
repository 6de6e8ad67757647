"""The dashboard in a real browser: every page, plot, table interaction and live update."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.service.agents import Lease
from tests.helpers import web
from tests.helpers.dashboard import ARTIFACTS, Page, Seeded, assert_calm, make_page

pytestmark = pytest.mark.timeout(180)


def test_the_campaign_list_shows_every_campaign_and_sorts(page: Page, seeded: Seeded) -> None:
    page.open("/")
    rows = page.page.locator("#campaigns tbody tr")
    rows.first.wait_for()
    page.page.wait_for_function("() => document.querySelectorAll('#campaigns tbody tr[data-id]').length === 3")
    names = rows.locator("td:nth-child(2)").all_inner_texts()
    assert sorted(names) == ["big-10k", "mlp-small", "to-cancel"]
    small = page.page.locator(f"#campaigns tr[data-id='{seeded.small}']")
    assert "60" in small.inner_text() and "failed 3" in small.inner_text() and "queued 2" in small.inner_text()
    cells = "#campaigns tbody td:nth-child(2)"
    shown = f"(w) => [...document.querySelectorAll('{cells}')].map(t => t.innerText).join() === w"
    page.page.click("#campaigns th[data-sort=name]")  # sorted on the server
    page.page.wait_for_function(shown, arg="big-10k,mlp-small,to-cancel")
    page.page.click("#campaigns th[data-sort=name]")
    page.page.wait_for_function(shown, arg="to-cancel,mlp-small,big-10k")
    # The sort survives the live refresh.
    page.page.wait_for_timeout(2500)
    assert rows.locator("td:nth-child(2)").all_inner_texts() == ["to-cancel", "mlp-small", "big-10k"]


def test_a_campaign_page_renders_every_plot_with_the_right_number_of_points(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    history = page.wait_plot("plot-history")
    assert len(history[0]["x"]) == 60 and len(history[0]["error_y"]["array"]) == 60
    best = [v for v in history[1]["y"]]
    assert best == sorted(best, reverse=True), "the best-so-far line only goes down when minimizing"
    # Plots are drawn one per frame after the tables: wait for each.
    parcoords = page.wait_plot("plot-parcoords")[0]
    assert [dim["label"] for dim in parcoords["dimensions"]] == ["lr", "width", "act", "loss"]
    assert all(len(dim["values"]) == 60 for dim in parcoords["dimensions"])
    for name in ("lr", "width", "act"):
        assert len(page.wait_plot(f"slice-{name}")[0]["x"]) == 60
    layout_type = page.page.evaluate("() => document.getElementById('slice-lr').layout.xaxis.type")
    assert layout_type == "log"
    curves = page.wait_plot("plot-curves")
    assert len(curves) == 5 * 3 and all(len(t["x"]) == 4 for t in curves), "the 5 best trials, 3 folds, 4 epochs"
    assert page.page.locator("#trials tbody tr").count() == 25
    assert "page 1 of 3 · 65 trials" in page.page.inner_text("#page-info")


def test_the_trials_table_sorts_and_filters_on_the_server(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    page.page.locator("#trials tbody tr[data-trial]").first.wait_for()
    _wait_sorted(page, "ascending")  # best first (minimizing) by default
    values = _values(page)
    assert values == sorted(values) and len(values) == 25
    with seeded.service.ctx.storage.read() as tx:
        all_values = sorted(v for _, _, v, _, _ in tx.results.completed_points(seeded.small))
    assert values[0] == pytest.approx(all_values[0], rel=1e-3), "sorted over all pages, not just this one"
    page.page.click("#trials th[data-sort=value]")
    _wait_sorted(page, "descending")
    assert "desc" in (page.page.get_attribute("#trials th[data-sort=value]", "class") or "")
    page.page.check("#state-filter input[data-state=FAILED]")
    page.page.wait_for_function("() => (document.getElementById('page-info')?.textContent ?? '').includes('3 trials')")
    states = page.page.locator("#trials tbody td:nth-child(3)").all_inner_texts()
    assert states == ["FAILED"] * 3
    # The filter and sort outlive the 2 s refresh.
    page.page.wait_for_timeout(2500)
    assert page.page.locator("#trials tbody td:nth-child(3)").all_inner_texts() == ["FAILED"] * 3
    assert page.page.is_checked("#state-filter input[data-state=FAILED]")


def _wait_sorted(page: Page, way: str) -> None:
    """Until the table shows 25 values sorted that way (refreshes are asynchronous)."""
    ok = "a <= b" if way == "ascending" else "a >= b"
    page.page.wait_for_function(
        "() => { const v = [...document.querySelectorAll('#trials tbody td:nth-child(4)')]"
        ".map(td => parseFloat(td.textContent.split('±')[0]));"
        f" return v.length === 25 && v.every((b, i) => i === 0 || ((a, b) => {ok})(v[i - 1], b)); }}"
    )


def _values(page: Page) -> list[float]:
    return [float(t.split("±")[0]) for t in page.page.locator("#trials tbody td:nth-child(4)").all_inner_texts()]


def test_a_trial_that_completes_while_the_page_is_open_appears_without_a_reload(page: Page, seeded: Seeded) -> None:
    service = seeded.service
    page.open(f"/campaign/{seeded.small}")
    before = len(page.wait_plot("plot-history")[0]["x"])
    page.page.click("#trials th[data-sort=attempt]")  # a user choice the update must keep
    page.page.click("#trials th[data-sort=value]")  # and back to best first
    page.page.evaluate("() => { window.__marker = 'same page'; }")
    reg = service.agents.register(host="live-test", ranks=1, gpus=0, campaign_id=seeded.small)
    got = service.agents.acquire(reg.agent_id, seeded.small)
    assert got.trial is not None
    lease = Lease(reg.agent_id, got.trial.id, got.lease_id)
    for k in range(3):
        service.agents.report_fold(lease, k, 0.01 + 0.001 * k)
    service.agents.complete(lease)
    page.wait_plot("plot-history", f"d => d[0].x.length === {before + 1}")
    assert page.page.evaluate("() => window.__marker") == "same page", "the page reloaded"
    assert "sorted" in (page.page.get_attribute("#trials th[data-sort=value]", "class") or "")
    # The new trial is the best: it leads the value-sorted table and the summary.
    page.page.wait_for_function(
        f"() => document.querySelector('#trials tbody tr[data-trial]')?.dataset.trial === '{got.trial.id}'"
    )
    assert f"trial #{got.trial.number}" in page.page.inner_text("#summary")
    # Its agent shows up with the trial it last held.
    agents = page.page.inner_text("#agents")
    assert "live-test" in agents


def test_a_bad_spec_shows_its_field_error_next_to_the_field(page: Page, seeded: Seeded) -> None:
    page.open("/new")
    bad = (
        "name: broken\nobjective: {metric: loss}\nspace:\n  lr: {type: real, low: 0.0, high: 1.0, scale: log}\n"
        "budget: {max_trials: 5}\ntraining: {task: t.py:T}\n"
    )
    page.page.fill("#spec-text", bad)
    page.page.click("#submit")
    error = page.page.locator(".field-error[data-field='space.lr']")
    error.wait_for()
    assert "must be > 0 for scale: log" in error.inner_text()
    # It sits right under the line that defines lr.
    previous = error.evaluate("e => e.previousElementSibling.textContent")
    assert "lr: {type: real, low: 0.0" in previous
    assert page.page.locator("#annotated .line.bad").count() == 1
    page.page.screenshot(path=str(ARTIFACTS / "new-campaign-field-error.png"), full_page=True)
    # A good spec is submitted and opens its page.
    good = bad.replace("low: 0.0", "low: 0.001").replace("name: broken", "name: from-the-ui")
    page.page.fill("#spec-text", good)
    page.page.click("#submit")
    page.page.wait_for_function("() => location.hash.startsWith('#/campaign/')")
    page.page.wait_for_function(
        "() => (document.getElementById('campaign-title')?.textContent ?? '') === 'from-the-ui'"
    )


def test_cancel_asks_for_confirmation_and_works(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.spare}")
    button = page.page.locator("#cancel")
    page.page.wait_for_function("() => document.getElementById('cancel')?.disabled === false")
    browser_boxes: list[str] = []
    page.page.on("dialog", lambda dialog: (browser_boxes.append(dialog.message), dialog.dismiss()))
    button.click()
    asked = page.answer("cancel-dialog", accept=False)
    assert "Cancel campaign" in asked and "finished trials and folds keep their values" in asked, asked
    page.page.wait_for_function("() => !document.getElementById('cancel-dialog')")
    assert seeded.service.campaigns.get(seeded.spare).campaign.state == d.CampaignState.RUNNING
    button.click()
    page.answer("cancel-dialog")
    page.page.wait_for_function("() => document.querySelector('#summary .badge')?.textContent === 'CANCELLED'")
    assert seeded.service.campaigns.get(seeded.spare).campaign.state == d.CampaignState.CANCELLED
    page.page.wait_for_function("() => document.getElementById('cancel')?.disabled === true")
    assert browser_boxes == [], "the page asks in its own dialog, never the browser's confirm()"


def test_exports_download_json_and_csv(page: Page, seeded: Seeded) -> None:
    page.open(f"/campaign/{seeded.small}")
    page.page.locator("#trials tbody tr[data-trial]").first.wait_for()
    with page.page.expect_download() as got:
        page.page.click("#export-csv")
    rows = list(csv.DictReader(io.StringIO(got.value.path().read_text())))
    assert len(rows) >= 65 and {"trial_id", "state", "loss", "loss_std", "param_lr"} <= set(rows[0])
    with page.page.expect_download() as got:
        page.page.click("#export-json")
    assert got.value.suggested_filename == f"campaign-{seeded.small}.json"


def test_a_trial_page_shows_folds_curves_and_the_attempt_history(page: Page, seeded: Seeded) -> None:
    with seeded.service.ctx.storage.read() as tx:
        trials, _ = tx.trials.page(seeded.small, states=[d.TrialState.FAILED], limit=1)
        ok, _ = tx.trials.page(seeded.small, states=[d.TrialState.COMPLETED], limit=1)
    page.open(f"/campaign/{seeded.small}/trial/{ok[0].number}")
    curves = page.wait_plot("plot-trial-curves")
    assert len(curves) == 3 and all(len(t["x"]) == 4 for t in curves)
    assert page.page.locator("#folds tbody tr").count() == 3
    assert "file:///ckpt/" in page.page.inner_text("#folds")
    assert "COMPLETED" in page.page.inner_text("#events")
    page.open(f"/trial/{trials[0].id}")  # a global id (older links): redirected to the number
    page.page.locator("#trial-error").wait_for()
    assert page.page.evaluate("() => location.hash") == f"#/campaign/{seeded.small}/trial/{trials[0].number}"
    assert "RuntimeError: boom" in page.page.inner_text("#trial-error")
    assert "FAILED" in page.page.inner_text("#events")


def test_a_campaign_with_10000_trials_gets_downsampled_plots_and_a_server_side_table(
    page: Page, seeded: Seeded
) -> None:
    # How fast it opens is measured by benchmarks/dashboard_open.py, not asserted here.
    page.open(f"/campaign/{seeded.big}")
    history = page.wait_plot("plot-history", "d => d[0].x.length > 0")
    assert len(history[0]["x"]) <= 1000, "the server downsamples"
    assert "Drawn: 1000 of 10000 completed trials" in page.page.inner_text("#history-note")
    best = page.plot("plot-history")[1]
    with seeded.service.ctx.storage.read() as tx:
        overall = min(v for _, _, v, _, _ in tx.results.completed_points(seeded.big))
    assert min(best["y"]) == pytest.approx(overall), "the best line covers all trials, not the sample"
    slices = page.wait_plot("slice-act")
    assert len(slices[0]["x"]) == len(history[0]["x"])
    page.page.locator("#trials tbody tr[data-trial]").first.wait_for()
    assert page.page.locator("#trials tbody tr").count() == 25
    assert "page 1 of 400 · 10000 trials" in page.page.inner_text("#page-info")
    page.page.click("#trials th[data-sort=number]")
    page.page.wait_for_function("() => document.querySelector('#trials tbody tr[data-trial]')?.dataset.number === '0'")
    page.page.click("#next")
    page.page.wait_for_function(
        "() => (document.getElementById('page-info')?.textContent ?? '').startsWith('page 2 of')"
    )
    # The page shown is the page the pager says: trials #25.. by number.
    page.page.wait_for_function("() => document.querySelector('#trials tbody tr[data-trial]')?.dataset.number === '25'")
    assert page.page.locator("#trials tbody tr[data-trial] td:nth-child(2)").first.inner_text() == "#25"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str], int]]:
    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage
    from tests.helpers.live import run_live_server
    from tests.helpers.seed import seed_campaign

    url = f"sqlite:///{tmp_path_factory.mktemp('dash-auth') / 'hpcopt.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    cid = seed_campaign(service, name="guarded", completed=8, queued=1)
    tokens = {scope: service.tokens.create(f"{scope}-ui", [scope])[1] for scope in ("read", "submit")}
    for server in run_live_server(service):
        yield server, tokens, cid
    storage.close()


@pytest.fixture
def secured_page(
    browser: Any, secured: tuple[Any, dict[str, str], int], request: pytest.FixtureRequest
) -> Iterator[Page]:
    yield from make_page(browser, secured[0].http_url, request)


def test_with_auth_on_a_read_token_can_view_but_not_cancel(
    secured_page: Page, secured: tuple[Any, dict[str, str], int]
) -> None:
    server, tokens, cid = secured
    page = secured_page
    page.page.on("console", lambda m: None)
    page.open(f"/campaign/{cid}")
    page.page.locator("#token-dialog[open]").wait_for()
    page.page.fill("#token-input", tokens["read"])
    page.page.click("#token-form button[type=submit]")
    page.wait_plot("plot-history", "d => d[0].x.length === 8")
    assert "can read but not submit" in page.page.inner_text("#banner")
    for button in ("#cancel", "#pause", "#raise-budget"):  # steering needs the submit scope too
        assert page.page.is_disabled(button), button
        assert "no submit scope" in (page.page.get_attribute(button, "title") or ""), button
    assert page.page.is_hidden("#nav-new")
    assert "read-ui" in page.page.inner_text("#whoami")
    page.page.screenshot(path=str(ARTIFACTS / "read-only-token.png"), full_page=True)
    # The API agrees: the same token cannot cancel.
    denied = web.post(
        f"{server.http_url}/api/v1/campaigns/{cid}/cancel", headers={"authorization": f"Bearer {tokens['read']}"}
    )
    assert denied.status_code == 403
    # A submit token may.
    page.page.evaluate("(t) => localStorage.setItem('hpcopt.token', t)", tokens["submit"])
    page.page.reload()
    page.page.wait_for_function("() => document.getElementById('cancel')?.disabled === false")
    assert page.page.is_hidden("#banner")
    assert page.page.is_enabled("#pause") and page.page.is_enabled("#raise-budget")


def test_a_scheme_search_is_coloured_by_scheme_and_the_trial_page_names_its_knobs(page: Page, seeded: Seeded) -> None:
    from tests.helpers.specs import make_spec

    service = seeded.service
    spec = make_spec(
        name="scheme-search",
        space={"lr": {"type": "real", "low": 1e-3, "high": 0.1, "scale": "log"}},
        algorithm={"name": "grid", "options": {"points": 2}},
        budget={"max_trials": 6, "max_parallel": 1},
        folds=1,
        training={
            "task": "t.py:task",
            "ranks_per_fold": 4,
            "scheme": {
                "search": {
                    "allreduce": {},
                    "easgd": {"tau": {"type": "int", "low": 1, "high": 8}},
                    "daso": {"max_global_skips": {"type": "categorical", "choices": [4, 8]}},
                }
            },
            "options": {"daso": {"node_size": 2}},
        },
    )
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="h", ranks=4, gpus=0).agent_id
    by_scheme: dict[str, int] = {}
    for _ in range(6):
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        by_scheme.setdefault(str(got.trial.params["scheme"]), got.trial.id)
        service.agents.report_fold(lease, 0, float(got.trial.params["lr"]))
        service.agents.complete(lease)
    page.open(f"/campaign/{cid}")
    history = page.wait_plot("plot-history", "d => d.length === 4")
    assert [t["name"] for t in history[:3]] == ["allreduce", "easgd", "daso"]
    assert sum(len(t["x"]) for t in history[:3]) == 6 and len({t["marker"]["color"] for t in history[:3]}) == 3
    tau = page.wait_plot("slice-easgd.tau", "d => d.length === 3")
    assert [len(t["x"]) for t in tau] == [0, 2, 0], "only easgd's trials have an easgd.tau"
    page.open(f"/trial/{by_scheme['easgd']}")
    page.page.locator("#trial-scheme").wait_for()
    assert page.page.inner_text("#trial-scheme").startswith("easgd (tau=")
    page.open(f"/trial/{by_scheme['daso']}")
    page.page.wait_for_function("() => (document.getElementById('trial-scheme') || {}).textContent?.startsWith('daso')")
    text = page.page.inner_text("#trial-scheme")
    assert "max_global_skips=" in text and "node_size=2" in text, text


def test_a_pruned_trial_page_says_why_and_the_campaign_names_its_pruner_and_warm_start(
    page: Page, seeded: Seeded
) -> None:
    from tests.helpers.specs import make_spec

    service = seeded.service
    spec = make_spec(name="pruned", folds=2, pruner={"name": "asha", "options": {"reduction_factor": 2}})
    cid = service.campaigns.create(spec).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    leases = []
    for value in (1.0, 2.0):
        got = service.agents.acquire(agent, cid)
        leases.append(Lease(agent, got.trial.id, got.lease_id))
        service.agents.report_intermediate(leases[-1], 0, 1, value)
    page.open(f"/trial/{leases[1].trial_id}")
    page.page.locator("#trial-pruned").wait_for()
    assert "asha: loss 2 at rung 0 (fold 0, epoch 1)" in page.page.inner_text("#trial-pruned")
    assert "Value when pruned" in page.page.inner_text("#trial-params")
    assert "PRUNED" in page.page.inner_text("#events")
    page.open(f"/campaign/{cid}")
    page.page.locator("#campaign-pruner").wait_for()
    assert page.page.inner_text("#campaign-pruner") == "asha"
    warm = service.campaigns.create(make_spec(name="warm", warm_start={"campaigns": [cid]})).id
    page.open(f"/campaign/{warm}")
    page.page.locator("#campaign-warm-start").wait_for()
    assert f"campaign {cid}" in page.page.inner_text("#campaign-warm-start")
    assert page.page.get_attribute("#campaign-warm-start a", "href") == f"#/campaign/{cid}"


def test_a_multi_objective_campaign_plots_its_pareto_front_and_a_trial_shows_its_objectives(
    page: Page, seeded: Seeded
) -> None:
    from tests.helpers.specs import make_spec

    service = seeded.service
    objectives = [{"metric": "loss", "direction": "minimize"}, {"metric": "seconds", "direction": "minimize"}]
    cid = service.campaigns.create(make_spec(name="two-objectives", folds=1, objectives=objectives)).id
    agent = service.agents.register(host="h", ranks=1, gpus=0).agent_id
    ids, numbers = [], []
    for loss, seconds in ((0.1, 9.0), (0.2, 5.0), (0.3, 6.0), (0.5, 1.0)):  # (0.3, 6) is dominated
        got = service.agents.acquire(agent, cid)
        lease = Lease(agent, got.trial.id, got.lease_id)
        service.agents.report_fold(lease, 0, loss, {"seconds": seconds})
        ids.append(service.agents.complete(lease).id)
        numbers.append(got.trial.number)
    page.open(f"/campaign/{cid}")
    front = page.wait_plot("plot-front")
    assert sorted(front[1]["customdata"]) == sorted([numbers[0], numbers[1], numbers[3]])
    assert front[0]["customdata"] == [numbers[2]], "points are named by trial number"
    assert "3 of 4 completed trials are on the front" in page.page.inner_text("#front-note")
    assert page.page.inner_text("#campaign-objectives") == "minimize loss, minimize seconds"
    page.open(f"/trial/{ids[1]}")
    page.page.locator("#trial-values").wait_for()
    assert page.page.inner_text("#trial-values") == "0.2, 5"
    # A single-objective campaign has no front card.
    page.open(f"/campaign/{seeded.small}")
    page.wait_plot("plot-history")
    assert page.page.locator("#card-front").is_hidden()


def test_a_10000_trial_campaign_left_open_redraws_nothing_until_a_trial_finishes(page: Page, seeded: Seeded) -> None:
    assert_calm(page, seeded.service, seeded.big, wait_ms=4500, folds=1)  # two polls at 2 s


def test_another_users_campaign_is_read_only_in_the_dashboard(
    secured_page: Page, secured: tuple[Any, dict[str, str], int]
) -> None:
    from tests.helpers.specs import make_spec

    server, tokens, _ = secured
    owner, _ = server.service.tokens.create("owner-ui", ["submit"])
    cid = server.service.campaigns.create(make_spec(name="owned"), owner).id
    page = secured_page
    page.open(f"/campaign/{cid}")
    page.page.locator("#token-dialog[open]").wait_for()
    page.page.fill("#token-input", tokens["submit"])  # submit-ui: not the owner
    page.page.click("#token-form button[type=submit]")
    page.page.wait_for_function("() => document.getElementById('campaign-owner')?.textContent === 'owner-ui'")
    for button in ("#cancel", "#pause", "#raise-budget"):
        assert page.page.is_disabled(button), button
        assert "belongs to owner-ui" in (page.page.get_attribute(button, "title") or ""), button
    page.page.wait_for_function(
        "() => (document.getElementById('note-body')?.textContent || '').includes('belongs to owner-ui')"
    )
    assert page.page.locator("#note-edit").count() == 0
    # The server agrees, whatever the page shows.
    denied = web.post(
        f"{server.http_url}/api/v1/campaigns/{cid}/pause", headers={"authorization": f"Bearer {tokens['submit']}"}
    )
    assert denied.status_code == 403 and "owner-ui" in denied.json()["detail"]
