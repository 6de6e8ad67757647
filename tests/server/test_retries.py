"""An agent whose reply was lost can call again: Complete and ReportFold repeated under
the same lease with the same content answer as the first call and change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition
from hpcopt_server.service.agents import Lease
from tests.helpers.seed import checkpoint_uri
from tests.helpers.specs import make_spec


def _running(service: Any, folds: int = 2) -> Lease:
    cid = service.campaigns.create(make_spec(folds=folds, budget={"max_trials": 2, "max_parallel": 2})).id
    reg = service.agents.register(host="h", ranks=1, gpus=0, campaign_id=cid)
    got = service.agents.acquire(reg.agent_id, cid)
    return Lease(reg.agent_id, got.trial.id, got.lease_id)


def _events(service: Any, trial_id: int) -> list[str]:
    return [e.kind for e in service.campaigns.trial(trial_id).events]


def test_complete_retried_under_the_same_lease_returns_the_same_trial(service: Any) -> None:
    lease = _running(service)
    for k in range(2):
        service.agents.report_fold(lease, k, 0.5 + k)
    first = service.agents.complete(lease)
    again = service.agents.complete(lease)
    assert again.state == d.TrialState.COMPLETED and again.value == first.value == 1.0
    assert again.finish_seq == first.finish_seq
    assert _events(service, lease.trial_id).count("completed") == 1
    with service.ctx.storage.read() as tx:
        assert tx.campaigns.get(first.campaign_id).trials_finished == 1  # counted once


def test_report_fold_retried_with_the_same_content_is_a_no_op(service: Any) -> None:
    lease = _running(service)
    with service.ctx.storage.read() as tx:
        cid = tx.trials.get(lease.trial_id).campaign_id
    uri = checkpoint_uri(service.agents.server_id(), cid, lease.trial_id, 0)
    first = service.agents.report_fold(lease, 0, 0.25, {"acc": 0.9}, uri)
    assert service.agents.report_fold(lease, 0, 0.25, {"acc": 0.9}, uri) == first
    assert service.agents.report_fold(lease, 0, 0.25, {"acc": 0.9}) == first  # the URI may be left out
    for value, metrics in ((0.3, {"acc": 0.9}), (0.25, {"acc": 0.8})):
        with pytest.raises(FailedPrecondition, match="a retry must repeat the same value"):
            service.agents.report_fold(lease, 0, value, metrics)
    service.agents.report_fold(lease, 1, 0.75)
    service.agents.complete(lease)
    # After the completion, a late retry of a fold report still gets its answer.
    assert service.agents.report_fold(lease, 1, 0.75).value == 0.75


def test_a_retry_under_another_lease_is_still_refused(service: Any) -> None:
    lease = _running(service, folds=1)
    service.agents.report_fold(lease, 0, 0.5)
    service.agents.complete(lease)
    stranger = Lease(lease.agent_id, lease.trial_id, "0" * 32)
    with pytest.raises(FailedPrecondition, match="is not held by agent"):
        service.agents.complete(stranger)
    with pytest.raises(FailedPrecondition, match="is not held by agent"):
        service.agents.report_fold(stranger, 0, 0.5)
