"""What researchers compare and record, in a real browser against a real server (issue
31, item 10): notes on campaigns and trials, 2 to 4 trials side by side, and a choice of
importance method."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.env import scaled
from tests.helpers.live import run_live_server
from tests.helpers.seed import run_truth_campaign, seed_campaign

pytestmark = pytest.mark.timeout(180)

TEXT = "lr above 1e-2 diverges.\n<b>not bold</b> & <script>x()</script>\nsecond line"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


def _write(page: Page, text: str) -> None:
    page.page.click("#note-edit")
    page.page.fill("#note-input", text)
    page.page.click("#note-save")


def test_a_campaign_note_is_saved_as_typed_and_is_there_after_a_reload(page: Page, seeded: Seeded) -> None:
    cid = seed_campaign(seeded.service, name="noted", completed=12, seed=5)
    page.open(f"/campaign/{cid}")
    page.page.locator("#note-edit").wait_for()
    assert page.page.inner_text("#note-text") == "No note on this campaign yet."
    _write(page, TEXT)
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent.startsWith('lr above')")
    assert page.page.evaluate("() => document.getElementById('note-text').textContent") == TEXT
    assert page.page.locator("#note-text b, #note-text script").count() == 0, "text, never HTML"
    note = seeded.service.notes.get(cid)
    assert (note.body, note.version) == (TEXT, 1)
    page.page.reload()
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent.startsWith('lr above')")
    assert page.page.inner_text("#note-meta").startswith("version 1, saved ")
    # Edited again: saved over version 1, the editor opened on the stored text.
    page.page.click("#note-edit")
    assert page.page.input_value("#note-input") == TEXT
    page.page.fill("#note-input", "shorter")
    page.page.click("#note-save")
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent === 'shorter'")
    assert seeded.service.notes.get(cid).version == 2


def test_a_trial_note_saved_by_someone_else_meanwhile_is_shown_and_nothing_is_lost(page: Page, seeded: Seeded) -> None:
    cid = seed_campaign(seeded.service, name="two-editors", completed=6, seed=6)
    page.open(f"/campaign/{cid}/trial/3")
    page.page.locator("#note-edit").wait_for()
    page.page.click("#note-edit")
    page.page.fill("#note-input", "mine: curve flattens at epoch 2")
    seeded.service.notes.save(cid, 3, "theirs: rerun with seed 4", 0)  # a colleague, meanwhile
    page.page.click("#note-save")
    page.page.locator("#note-conflict").wait_for()
    # The browser logs the 409 it asked for; nothing else may be logged.
    page.errors[:] = [e for e in page.errors if "409 (Conflict)" not in e]
    assert "theirs: rerun with seed 4" in page.page.inner_text("#note-conflict")
    assert page.page.input_value("#note-input") == "mine: curve flattens at epoch 2", "the reader's text is kept"
    assert seeded.service.notes.get(cid, 3).body == "theirs: rerun with seed 4", "and theirs was not overwritten"
    page.page.fill("#note-input", "theirs: rerun with seed 4\nmine: curve flattens at epoch 2")
    page.page.click("#note-save")
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent.startsWith('theirs')")
    note = seeded.service.notes.get(cid, 3)
    assert note.version == 2 and note.body.endswith("mine: curve flattens at epoch 2")
    # Another trial's note is its own.
    page.open(f"/campaign/{cid}/trial/2")
    page.page.locator("#note-edit").wait_for()
    assert page.page.inner_text("#note-text") == "No note on this trial yet."


def test_the_history_keeps_the_text_a_save_replaced_and_restores_it(page: Page, seeded: Seeded) -> None:
    """The review: a second Save after the conflict message overwrote the other
    person's note, with no history. Now their text stays as a version, shown and
    restorable from the card."""
    cid = seed_campaign(seeded.service, name="history", completed=6, seed=7)
    page.open(f"/campaign/{cid}/trial/1")
    page.page.locator("#note-edit").wait_for()
    page.page.click("#note-edit")
    page.page.fill("#note-input", "mine")
    seeded.service.notes.save(cid, 1, "theirs, careful work", 0)  # a colleague, meanwhile
    page.page.click("#note-save")
    page.page.locator("#note-conflict").wait_for()
    page.errors[:] = [e for e in page.errors if "409 (Conflict)" not in e]
    assert "theirs stays in the history" in page.page.inner_text("#note-save")
    page.page.click("#note-save")  # the second Save, without merging
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent === 'mine'")
    page.page.click("#note-history-link")
    page.page.locator("#note-versions li").nth(1).wait_for()
    items = page.page.locator("#note-versions li").all_inner_texts()
    assert items[0].startswith("version 2") and items[1].startswith("version 1"), items
    page.page.click("#note-versions li[data-version='1'] a")
    page.page.wait_for_function(
        "() => (document.getElementById('note-version')?.textContent ?? '').includes('theirs, careful work')"
    )
    page.page.click("#note-restore")
    assert page.page.input_value("#note-input") == "theirs, careful work"
    page.page.click("#note-save")
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent === 'theirs, careful work'")
    note = seeded.service.notes.get(cid, 1)
    assert (note.version, note.body) == (3, "theirs, careful work")
    assert [v.version for v in seeded.service.notes.versions(cid, 1)[0]] == [3, 2, 1]


def test_a_note_saved_in_another_tab_shows_here_and_an_open_editor_is_told(page: Page, seeded: Seeded) -> None:
    cid = seed_campaign(seeded.service, name="other-tab", completed=6, seed=8)
    page.open(f"/campaign/{cid}")
    page.page.locator("#note-edit").wait_for()
    seeded.service.notes.save(cid, None, "from the other tab", 0)
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent === 'from the other tab'")
    page.page.click("#note-edit")
    page.page.fill("#note-input", "my edit")
    seeded.service.notes.save(cid, None, "their second save", 1)
    page.page.locator("#note-newer:not([hidden])").wait_for()
    assert "version 2" in page.page.inner_text("#note-newer")
    assert page.page.input_value("#note-input") == "my edit", "the editor keeps the reader's text"


def test_an_unsaved_note_asks_before_a_navigation_drops_it_and_its_draft_stays(page: Page, seeded: Seeded) -> None:
    cid = seed_campaign(seeded.service, name="draft", completed=6, seed=9)
    page.open(f"/campaign/{cid}")
    page.page.locator("#note-edit").wait_for()
    page.page.click("#note-edit")
    page.page.fill("#note-input", "half a thought")
    asked: list[str] = []

    def answer(dialog: Any, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.page.once("dialog", lambda d: answer(d, False))
    page.page.evaluate("() => { location.hash = '#/'; }")
    page.page.wait_for_function("() => location.hash.startsWith('#/campaign/')")
    assert asked and "not saved" in asked[0]
    assert page.page.input_value("#note-input") == "half a thought", "stayed: the editor is still open"
    page.page.once("dialog", lambda d: answer(d, True))
    page.page.evaluate("() => { location.hash = '#/'; }")
    page.page.locator("#campaigns").wait_for()
    assert len(asked) == 2
    # Back on the campaign: the draft is offered, and continues where it was.
    page.open(f"/campaign/{cid}")
    page.page.locator("#note-draft").wait_for()
    page.page.click("#note-draft-open")
    assert page.page.input_value("#note-input") == "half a thought"
    page.page.click("#note-save")
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent === 'half a thought'")
    assert page.page.locator("#note-draft").count() == 0, "saved: no draft left"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str], int]]:
    from hpcopt_server.service import Service
    from hpcopt_server.storage.migrate import upgrade
    from hpcopt_server.storage.repository import Storage

    url = f"sqlite:///{tmp_path_factory.mktemp('dash-notes') / 'hpcopt.db'}"
    upgrade(url)
    storage = Storage(url)
    service = Service(storage)
    cid = seed_campaign(service, name="guarded-notes", completed=4)
    service.notes.save(cid, None, "read me", 0)
    tokens = {scope: service.tokens.create(f"{scope}-ui", [scope])[1] for scope in ("read", "submit")}
    for server in run_live_server(service):
        yield server, tokens, cid
    storage.close()


@pytest.mark.parametrize("scope", ["read", "submit"])
def test_a_read_token_reads_notes_and_only_a_submit_token_edits_them(
    browser: Any, guarded: tuple[Any, dict[str, str], int], request: pytest.FixtureRequest, scope: str
) -> None:
    server, tokens, cid = guarded
    pages = make_page(browser, server.http_url, request)
    page = next(pages)
    page.page.context.add_init_script(f"localStorage.setItem('hpcopt.token', '{tokens[scope]}')")
    page.open(f"/campaign/{cid}")
    page.page.wait_for_function("() => document.getElementById('note-text')?.textContent.includes('read me')")
    if scope == "read":
        assert page.page.locator("#note-edit").count() == 0
        assert "needs the submit scope" in page.page.inner_text("#card-note")
    else:
        before = server.service.notes.get(cid).version
        _write(page, "read me\nchecked")
        page.page.wait_for_function("() => document.getElementById('note-text')?.textContent.endsWith('checked')")
        note = server.service.notes.get(cid)
        assert note.version == before + 1 and note.updated_by == "submit-ui"
        assert "by submit-ui" in page.page.inner_text("#note-meta")
    next(pages, None)


def test_trials_ticked_in_the_table_are_compared_side_by_side(page: Page, seeded: Seeded) -> None:
    service = seeded.service
    cid = seeded.small
    page.open(f"/campaign/{cid}")
    page.page.locator("#trials tbody tr[data-number]").first.wait_for()
    assert page.page.get_attribute("#compare", "aria-disabled") == "true"
    rows = page.page.locator("#trials tbody tr[data-number]")
    numbers = [int(rows.nth(i).get_attribute("data-number") or -1) for i in range(3)]
    for i in range(3):
        rows.nth(i).locator("input.pick").check()
    assert page.page.get_attribute("#compare", "aria-disabled") == "false"
    page.page.click("#compare")
    page.page.wait_for_function("() => location.hash.includes('/compare?trials=')")
    page.page.locator("#compare-table").wait_for()
    head = page.page.locator("#compare-table thead th").all_inner_texts()
    assert [h.strip() for h in head[1:]] == [f"#{n}" for n in numbers]
    trials = [service.insights.trial(campaign_id=cid, number=n).trial for n in numbers]
    for name in trials[0].params:
        row = page.page.locator(f"#compare-table tr[data-param='{name}']")
        differs = len({repr(t.params[name]) for t in trials}) > 1
        assert (row.get_attribute("class") == "differs") == differs, name
    folds = page.page.locator("#compare-fold-table tbody tr").count()
    assert folds == max(len(t.folds) for t in trials) == 3
    cell = page.page.inner_text("#compare-fold-table tr[data-fold='1'] td:nth-child(3)")  # the second trial's
    fold_one = next(f.value for f in trials[1].folds if f.index == 1)
    assert float(cell) == pytest.approx(fold_one, rel=1e-5), cell
    curves = page.wait_plot("plot-compare-curves")
    assert len(curves) == sum(len({p.fold for p in t.curves}) for t in trials) == 9
    assert sorted({c["name"] for c in curves}) == sorted(f"#{n}" for n in numbers)
    assert sum(1 for c in curves if c["showlegend"]) == 3, "one legend entry per trial"
    assert len({c["line"]["color"] for c in curves}) == 3
    # Back to the campaign with the same trials ticked.
    page.page.click("#compare-back")
    page.page.locator("#trials tbody tr[data-number]").first.wait_for()
    assert page.page.locator("#trials input.pick:checked").count() == 3


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("trials=4", "Pick 2 to 4"),
        ("trials=1,2,3,4,5", "Pick 2 to 4"),
        ("trials=1,x", "trial numbers"),
        ("", "Pick 2 to 4"),
    ],
)
def test_a_compare_link_with_the_wrong_trials_says_what_is_allowed(
    page: Page, seeded: Seeded, query: str, says: str
) -> None:
    page.open(f"/campaign/{seeded.small}/compare?{query}")
    page.page.locator("#not-found").wait_for()
    assert says in page.page.inner_text("#not-found")


def test_comparing_a_trial_that_does_not_exist_says_so(page: Page, seeded: Seeded) -> None:
    page.page.on("console", lambda m: None)
    page.open(f"/campaign/{seeded.small}/compare?trials=1,99999")
    page.page.locator("#not-found").wait_for()
    assert "#99999" in page.page.inner_text("#not-found")
    page.errors.clear()  # the 404 the page asked for is logged by the browser


def test_the_importance_method_can_be_chosen_and_the_link_keeps_it(page: Page, seeded: Seeded) -> None:
    cid = seeded.small
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-importance")
    assert "first-order share" in page.page.inner_text("#importance-note")
    first = page.plot("plot-importance")[0]
    page.page.select_option("#importance-method", "permutation")
    page.page.wait_for_function("() => document.getElementById('importance-note')?.textContent.includes('shuffled')")
    assert "importance=permutation" in page.page.evaluate("() => location.hash")
    perm = page.plot("plot-importance")[0]
    body = page.page.evaluate(
        f"() => fetch('api/v1/campaigns/{cid}/importance?method=permutation').then(r => r.json())"
    )
    assert list(reversed(perm["y"])) == [p["name"] for p in body["params"]]
    assert perm["x"] != first["x"], "another method, other numbers"
    page.page.reload()
    page.page.wait_for_function("() => document.getElementById('importance-note')?.textContent.includes('shuffled')")
    assert page.page.input_value("#importance-method") == "permutation"


def test_importance_bars_rank_a_conditional_campaign_as_the_truth_does(page: Page, seeded: Seeded) -> None:
    """The review's defect: sgd's momentum (moving the loss by at most 0.03) ranked first
    by permutation importance, the optimizer near 0. On a campaign with known effects run
    through the agent API, both methods' bars must follow the truth: lr, then the
    optimizer, and momentum far below it."""
    cid = run_truth_campaign(seeded.server.grpc_target, seeded.service, trials=300, momentum_weight=0.03, seed=0)
    page.open(f"/campaign/{cid}")
    for method, says in (("first-order", "first-order share"), ("permutation", "shuffled")):
        if method != "first-order":
            page.page.select_option("#importance-method", method)
        else:
            page.page.wait_for_function(
                "() => document.getElementById('importance-note')?.textContent.includes('where it is active')"
            )
        page.page.wait_for_function(
            f"() => document.getElementById('importance-note')?.textContent.includes({says!r})", timeout=scaled(60_000)
        )
        bars = page.wait_plot("plot-importance")[0]
        shares = dict(zip(bars["y"], bars["x"], strict=True))
        ranked = sorted(shares, key=lambda name: -shares[name])
        assert ranked[:2] == ["lr", "optimizer"], (method, shares)
        assert shares["momentum"] < 0.05 < 0.15 < shares["optimizer"], (method, shares)


def test_the_importance_note_says_when_first_order_shares_overlap(page: Page, seeded: Seeded) -> None:
    """Two parameters that moved together in every trial each explain the whole loss: the
    raw shares sum to about 200%, and the note says why instead of "100% explained"."""
    space = {"a": {"type": "real", "low": 0.0, "high": 1.0}, "b": {"type": "real", "low": 0.0, "high": 1.0}}

    def together(rng: random.Random) -> dict[str, Any]:
        x = rng.random()
        return {"a": x, "b": min(1.0, max(0.0, x + rng.gauss(0, 0.02)))}

    cid = seed_campaign(
        seeded.service,
        name="overlap",
        completed=120,
        folds=1,
        curves_for=0,
        space=space,
        draw=together,
        loss=lambda p: float(p["a"]),
    )
    page.open(f"/campaign/{cid}")
    page.wait_plot("plot-importance")
    note = page.page.inner_text("#importance-note")
    assert "more than all of it" in note and "100%" not in note, note
    raw = sum(
        p["raw"]
        for p in page.page.evaluate(f"() => fetch('api/v1/campaigns/{cid}/importance').then(r => r.json())")["params"]
    )
    assert raw > 1.5 and f"sum to {100 * raw:.0f}%" in note, (raw, note)
