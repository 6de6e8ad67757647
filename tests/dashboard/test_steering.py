"""Steering from the dashboard (issue 65, item 9): stop a running trial from "Running
now" and from its page, pause and resume a campaign, raise a finished campaign's budget.
The agent is on the real gRPC agent API and must see each change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpcopt_server import domain as d
from tests.helpers.dashboard import Page, Seeded, make_page, seed_and_serve
from tests.helpers.env import scaled
from tests.helpers.specs import make_spec

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    yield from seed_and_serve(tmp_path_factory, big=False)


@pytest.fixture
def page(browser: Any, seeded: Seeded, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from make_page(browser, seeded.server.http_url, request, poll_ms=500)


@pytest.fixture
def agent(seeded: Seeded) -> Iterator[Any]:
    from tests.helpers.clients import AgentClient

    with AgentClient(seeded.server.grpc_target) as client:
        yield client


def _campaign(seeded: Seeded, name: str, max_trials: int, folds: int = 1) -> int:
    spec = make_spec(name=name, folds=folds, budget={"max_trials": max_trials, "max_parallel": 4})
    return int(seeded.service.campaigns.create(spec).id)


@pytest.fixture(autouse=True)
def no_browser_boxes(page: Page) -> Iterator[None]:
    """Steering asks in the page's own dialogs: a prompt(), confirm() or alert() fails."""
    boxes: list[str] = []
    page.page.on("dialog", lambda dialog: (boxes.append(dialog.message), dialog.dismiss()))
    yield
    assert boxes == [], f"the browser's own dialog was used: {boxes}"


def test_stop_a_running_trial_from_running_now_and_its_agent_is_told(page: Page, seeded: Seeded, agent: Any) -> None:
    cid = _campaign(seeded, "stop-me", 5, folds=2)
    me = agent.register(host="gpu-node-7", campaign_id=cid).agent_id
    first, second = agent.acquire(me, cid), agent.acquire(me, cid)
    assert first.lease is not None and second.lease is not None
    agent.report_fold(first.lease, 0, 0.5)  # one of trial #0's 2 folds finished
    page.open(f"/campaign/{cid}")
    page.page.locator("#stop-0").wait_for()
    page.page.click("#stop-0")
    asked = page.answer("stop-dialog", accept=False)
    assert "Stop trial #0?" in asked and "counts against the budget" in asked, asked
    # What happens to its folds, from the trial as the server has it.
    assert "Of its 2 folds, 1 finished (their values stay in its history) and 1 stops at the agent's next" in asked
    assert agent.heartbeat(first.lease) == "continue"  # dismissed: nothing happened
    page.page.click("#stop-1")
    asked = page.answer("stop-dialog", "learning rate far too high")
    assert "Of its 2 folds, 0 finished (their values stay in its history) and 2 stop at the agent's next" in asked, (
        asked
    )
    page.page.wait_for_function("() => !document.getElementById('stop-1')")  # gone from Running now
    assert agent.heartbeat(second.lease) == "cancelled"
    assert agent.heartbeat(first.lease) == "continue"
    # The trial page says why; a running trial's page has a Stop button of its own.
    page.open(f"/campaign/{cid}/trial/1")
    page.page.locator("#trial-stopped").wait_for()
    assert page.page.inner_text("#trial-stopped") == "learning rate far too high"
    assert page.page.locator("#stop-trial").count() == 0
    page.open(f"/campaign/{cid}/trial/0")
    page.page.locator("#stop-trial").wait_for()
    page.page.click("#stop-trial")
    page.answer("stop-dialog", "")
    page.page.locator("#trial-stopped").wait_for()
    assert page.page.inner_text("#trial-stopped") == "stopped by a user"
    assert agent.heartbeat(first.lease) == "cancelled"


def test_pause_and_resume_from_the_campaign_page(page: Page, seeded: Seeded, agent: Any) -> None:
    cid = _campaign(seeded, "pause-me", 5)
    me = agent.register(host="gpu-node-8", campaign_id=cid).agent_id
    page.open(f"/campaign/{cid}")
    page.page.wait_for_function("() => document.getElementById('pause')?.disabled === false")
    assert page.page.inner_text("#pause") == "Pause"
    # A spec without ranks_per_fold leaves it to the agents' planner (it read "null rank(s)/fold").
    assert "ranks per fold: planned by the agents" in page.page.inner_text("#summary")
    page.page.click("#pause")
    # The answer of the POST shows Resume and the banner at once, not at the next poll.
    page.page.wait_for_function(
        "() => document.getElementById('pause').textContent === 'Resume'", timeout=scaled(5_000)
    )
    banner = page.page.inner_text("#paused-banner")
    assert "Agents get no new trial and wait, keeping their allocation; running trials go on" in banner, banner
    page.page.wait_for_function("() => document.querySelector('#summary .badge')?.textContent === 'PAUSED'")
    assert page.page.is_enabled("#cancel")  # a paused campaign can still be cancelled
    assert agent.acquire(me, cid).status == "wait"
    page.page.click("#pause")
    page.page.wait_for_function("() => document.getElementById('pause').textContent === 'Pause'", timeout=scaled(5_000))
    assert page.page.is_hidden("#paused-banner")
    page.page.wait_for_function("() => document.querySelector('#summary .badge')?.textContent === 'RUNNING'")
    assert agent.acquire(me, cid).status == "granted"


def test_raise_the_budget_of_a_completed_campaign_and_it_runs_again(page: Page, seeded: Seeded, agent: Any) -> None:
    cid = _campaign(seeded, "more-please", 1)
    me = agent.register(host="gpu-node-9", campaign_id=cid).agent_id
    got = agent.acquire(me, cid)
    assert got.lease is not None
    agent.report_fold(got.lease, 0, 0.25)
    agent.complete(got.lease)
    assert agent.acquire(me, cid).status == "done"
    page.open(f"/campaign/{cid}")
    page.page.wait_for_function("() => document.querySelector('#summary .badge')?.textContent === 'COMPLETED'")
    page.page.click("#raise-budget")
    page.page.locator("#raise-dialog[open]").wait_for()
    page.page.fill("#raise-dialog-input", "1")  # not a raise: refused in place, nothing sent
    assert "only be raised" in page.page.inner_text("#raise-dialog-error")
    assert page.page.is_disabled("#raise-dialog-ok")
    page.page.fill("#raise-dialog-input", "3")
    assert "Adds 2 trials: from 1 to 3." in page.page.inner_text("#raise-dialog-effect")
    assert page.page.is_hidden("#raise-dialog-error")
    assert seeded.service.campaigns.get(cid).campaign.max_trials == 1
    page.answer("raise-dialog")
    page.page.wait_for_function("() => document.querySelector('#summary .badge')?.textContent === 'RUNNING'")
    page.page.wait_for_function("() => document.getElementById('summary').innerText.includes('3 trials, 4 at once')")
    campaign = seeded.service.campaigns.get(cid).campaign
    assert (campaign.state, campaign.max_trials) == (d.CampaignState.RUNNING, 3)
    more = agent.acquire(me, cid)
    assert more.trial is not None and more.trial.number == 1
