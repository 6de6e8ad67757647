"""A task that keeps failing stops itself: after ``pause_after_failures`` trials in a row
fail the same way (the exception's type and the task's line, not the message), the
server pauses the campaign and says why (the campaign's ``pause_reason``, the waiting
agents' acquisitions, ``hpcopt show``); a resume goes on. A failure's stored error is
the exception and the task's innermost frames; the whole traceback stays in its event."""

from __future__ import annotations

import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.failures import digest
from hpcopt_server.service import Service
from hpcopt_server.service.agents import AcquireStatus, Lease
from tests.helpers.env import scaled
from tests.helpers.live import LiveServer
from tests.helpers.specs import make_spec

TASK = """
import numpy as np


def forward(batch, lr):
    return layer(batch, lr)


def layer(batch, lr):
    return np.zeros(3) @ np.zeros((int(lr * 100) + 4, 2))  # the shapes never fit
"""


def _traceback(tmp: Path, lr: float, context: str = "fold 0, epoch 1") -> str:
    """A real traceback of a task that raises, with ``lr`` in its message, as an agent
    reports it."""
    task = tmp / "mytask.py"
    task.write_text(TASK)
    sys.path.insert(0, str(tmp))
    try:
        import mytask

        mytask.forward(None, lr)
    except Exception as exc:
        return f"{context}: " + "".join(traceback.format_exception(exc))
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("mytask", None)
    raise AssertionError("the task did not raise")


def test_the_signature_is_the_exception_and_the_tasks_line_not_the_message(tmp_path: Path) -> None:
    a, b = digest(_traceback(tmp_path, 0.01)), digest(_traceback(tmp_path, 0.5, "fold 1, setting up fold 1"))
    assert "(4,2)" in _traceback(tmp_path, 0.0) or "matmul" in _traceback(tmp_path, 0.0)
    assert a.signature == b.signature and a.signature.startswith("ValueError at mytask.py:")
    assert a.signature.endswith(" in layer")
    assert a.summary.startswith("fold 0, epoch 1: ValueError: ") and "mytask.py" in a.summary
    assert b.summary.startswith("fold 1, setting up fold 1: ValueError: ")
    assert len(a.summary) < 600 and "Traceback" not in a.summary and "numpy" not in a.summary
    # A traceback whose head was cut off (an agent keeps its end) has the same signature.
    full = _traceback(tmp_path, 0.01)
    assert digest("..." + full[len(full) // 3 :]).signature == a.signature
    # Not a traceback: the text, numbers masked.
    assert digest("lease expired on attempt 2 of 3").signature == digest("lease expired on attempt 3 of 3").signature
    assert digest("the objective returned None").summary == "the objective returned None"


def _campaign(service: Service, **spec: Any) -> d.Campaign:
    base = {"folds": 1, "budget": {"max_trials": 10, "max_parallel": 1}}
    return service.campaigns.create(make_spec(**{**base, **spec}))


def _fail(service: Service, agent: str, cid: int, reason: str) -> d.Trial:
    got = service.agents.acquire(agent, cid)
    assert got.status == AcquireStatus.GRANTED and got.trial is not None, got
    return service.agents.release(Lease(agent, got.trial.id, got.lease_id), d.TrialState.FAILED, reason)


def test_three_identical_failures_in_a_row_pause_the_campaign_and_resume_goes_on(
    service: Service, tmp_path: Path
) -> None:
    campaign = _campaign(service)
    agent = service.agents.register(host="n", ranks=1, gpus=0, campaign_id=campaign.id).agent_id
    for lr in (0.01, 0.2):
        failed = _fail(service, agent, campaign.id, _traceback(tmp_path, lr))
        assert service.campaigns.get(campaign.id).campaign.state == "RUNNING"
    assert failed.error.startswith("fold 0, epoch 1: ValueError: ") and len(failed.error) < 600
    full = [e.reason for e in service.campaigns.trial(failed.id).events if e.kind == "failed"]
    assert full and "Traceback (most recent call last)" in full[0] and "mytask.py" in full[0]  # all of it, kept
    _fail(service, agent, campaign.id, _traceback(tmp_path, 0.7))
    paused = service.campaigns.get(campaign.id).campaign
    assert paused.state == "PAUSED" and paused.pause_reason is not None
    assert "3 trials in a row failed the same way (ValueError at mytask.py:" in paused.pause_reason
    assert f"hpcopt resume {campaign.id}" in paused.pause_reason
    # Agents wait, and are told why.
    waiting = service.agents.acquire(agent, campaign.id)
    assert waiting.status == AcquireStatus.WAIT and waiting.wait_reason.startswith(
        f"campaign {campaign.id} is PAUSED: 3"
    )
    assert service.campaigns.get(campaign.id).trial_counts == {"FAILED": 3}  # the rest of the budget is kept
    resumed = service.steering.resume(campaign.id)
    assert resumed.state == "RUNNING" and resumed.pause_reason is None
    assert service.agents.acquire(agent, campaign.id).status == AcquireStatus.GRANTED


def test_different_failures_a_success_between_or_the_option_at_0_do_not_pause(service: Service, tmp_path: Path) -> None:
    other = _traceback(tmp_path, 0.1).replace("in layer", "in other_layer")
    mixed = _campaign(service)
    agent = service.agents.register(host="n", ranks=1, gpus=0, campaign_id=mixed.id).agent_id
    for reason in (_traceback(tmp_path, 0.1), other, _traceback(tmp_path, 0.3), "the objective returned None"):
        _fail(service, agent, mixed.id, reason)
    assert service.campaigns.get(mixed.id).campaign.state == "RUNNING"
    never = _campaign(service, pause_after_failures=0)
    agent = service.agents.register(host="n", ranks=1, gpus=0, campaign_id=never.id).agent_id
    for _ in range(5):
        _fail(service, agent, never.id, _traceback(tmp_path, 0.1))
    assert service.campaigns.get(never.id).campaign.state == "RUNNING"
    reset = _campaign(service, pause_after_failures=2)
    agent = service.agents.register(host="n", ranks=1, gpus=0, campaign_id=reset.id).agent_id
    _fail(service, agent, reset.id, _traceback(tmp_path, 0.1))
    got = service.agents.acquire(agent, reset.id)
    assert got.trial is not None
    lease = Lease(agent, got.trial.id, got.lease_id)
    service.agents.report_fold(lease, 0, 0.5)
    service.agents.complete(lease)
    _fail(service, agent, reset.id, _traceback(tmp_path, 0.2))
    assert service.campaigns.get(reset.id).campaign.state == "RUNNING"  # a success between
    _fail(service, agent, reset.id, _traceback(tmp_path, 0.4))
    assert service.campaigns.get(reset.id).campaign.state == "PAUSED"  # two in a row now


@pytest.mark.parametrize("value", [-1, 1_000_001, 1.5, "three"])
def test_a_bad_pause_after_failures_is_refused_by_name(service: Service, value: Any) -> None:
    from hpcopt_server.errors import InvalidArgument

    with pytest.raises(InvalidArgument) as err:
        service.campaigns.create(make_spec(pause_after_failures=value))
    assert "pause_after_failures" in [f for f, _ in err.value.errors]


def test_hpcopt_show_says_why_it_is_paused(live_server: LiveServer, service: Service, tmp_path: Path) -> None:
    campaign = _campaign(service)
    agent = service.agents.register(host="n", ranks=1, gpus=0, campaign_id=campaign.id).agent_id
    for lr in (0.01, 0.2, 0.5):
        _fail(service, agent, campaign.id, _traceback(tmp_path, lr))
    shown = subprocess.run(
        [sys.executable, "-m", "hpcopt.cli", "--server", live_server.grpc_target, "show", str(campaign.id)],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert "PAUSED (3 trials in a row failed the same way (ValueError at mytask.py:" in first, shown.stdout
