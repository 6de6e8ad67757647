"""The Python client: ``Client`` for scripts (CampaignService) and ``AgentClient`` for
agents (AgentService), both over gRPC.

    from hpcopt import Client
    with Client("127.0.0.1:50051", token=None) as c:
        campaign = c.create_campaign("campaign.yaml")
        print(c.get_best_trial(campaign.id).value)

Every call raises :class:`ApiError` on failure, with the gRPC status code name, the
server's message and, for invalid input, the offending fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from hpcopt.agent_client import AgentClient
from hpcopt.asktell import ActiveTrial, trials
from hpcopt.core.records import (
    AnalysisRequest,
    Campaign,
    Page,
    ParetoFront,
    Trial,
)
from hpcopt.core.serverfile import DEFAULT_SERVER
from hpcopt.core.spec import CampaignSpec
from hpcopt.errors import ApiError
from hpcopt.transport import Channel, state_value, wait_for_server
from hpcopt.v1 import campaign_pb2, campaign_pb2_grpc, common_pb2

__all__ = ["DEFAULT_SERVER", "AgentClient", "ApiError", "Client"]
R = TypeVar("R")


class Client(Channel):
    """Submit and watch campaigns. Every getter returns the client's own records
    (``hpcopt.Campaign``, ``hpcopt.Trial``, ...; see ``hpcopt.core.records``) with
    parameters as a dict in the order of the campaign's space."""

    def __init__(
        self,
        target: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        channel: Any = None,
        server_file: str | Path | None = None,
    ):
        super().__init__(target, token, timeout, channel=channel, server_file=server_file)
        self._stub = campaign_pb2_grpc.CampaignServiceStub(self.channel)
        self._orders: dict[int, list[str]] = {}  # campaign id -> its space's order (a spec never changes)

    def _campaign(self, msg: common_pb2.Campaign) -> Campaign:
        campaign = Campaign.from_proto(msg)
        if campaign.spec is not None:
            self._orders[campaign.id] = campaign.space
        return campaign

    def _order(self, campaign_id: int) -> list[str]:
        if campaign_id not in self._orders:
            self.get_campaign(campaign_id)
        return self._orders.get(campaign_id, [])

    def _trial(self, msg: common_pb2.Trial) -> Trial:
        return Trial.from_proto(msg, self._order(int(msg.campaign_id)))

    def create_campaign(self, spec: CampaignSpec | dict[str, Any] | str | Path) -> Campaign:
        """Submits a spec: a model, a dict, or the path of a YAML/JSON file."""
        if isinstance(spec, str | Path):
            from hpcopt.core.specfile import load_spec_file

            spec = load_spec_file(spec)
        document = spec.model_dump(mode="json") if isinstance(spec, CampaignSpec) else spec
        req = campaign_pb2.CreateCampaignRequest(spec_json=json.dumps(document))
        return self._campaign(self._do(self._stub.CreateCampaign, req))

    def get_campaign(self, campaign_id: int) -> Campaign:
        """One campaign, with its spec."""
        req = campaign_pb2.GetCampaignRequest(campaign_id=campaign_id)
        return self._campaign(self._do(self._stub.GetCampaign, req))

    def campaign_page(self, offset: int = 0, limit: int = 100) -> Page[Campaign]:
        """A page of campaigns, newest first (``limit`` at most 1000); ``total`` counts all.
        Listed campaigns carry no spec (``spec`` is None): ``get_campaign`` has it."""
        req = campaign_pb2.ListCampaignsRequest(offset=offset, limit=limit)
        resp = self._do(self._stub.ListCampaigns, req)
        return Page([Campaign.from_proto(c) for c in resp.campaigns], int(resp.total), offset, limit)

    def list_campaigns(self, offset: int = 0, limit: int | None = None) -> list[Campaign]:
        """Campaigns, newest first: all of them (paged through), or ``limit`` from ``offset``."""
        return _collect(self.campaign_page, offset, limit)

    def trial_page(
        self, campaign_id: int, states: Iterable[str] = (), offset: int = 0, limit: int = 100
    ) -> Page[Trial]:
        """A page of a campaign's trials by number; ``states`` are names like ``"COMPLETED"``."""
        req = campaign_pb2.ListTrialsRequest(
            campaign_id=campaign_id, states=[state_value(s) for s in states], offset=offset, limit=limit
        )
        resp = self._do(self._stub.ListTrials, req)
        order = self._order(campaign_id)
        return Page([Trial.from_proto(t, order) for t in resp.trials], int(resp.total), offset, limit)

    def list_trials(
        self, campaign_id: int, states: Iterable[str] = (), offset: int = 0, limit: int | None = None
    ) -> list[Trial]:
        """A campaign's trials by number: all of them (paged through), or ``limit`` from
        ``offset``; ``states`` are names like ``"COMPLETED"`` (or ``hpcopt.TrialState``s)."""
        states = list(states)
        return _collect(lambda o, n: self.trial_page(campaign_id, states, o, n), offset, limit)

    def trials_dataframe(self, campaign_id: int, states: Iterable[str] = ()) -> Any:
        """The campaign's trials as a ``pandas.DataFrame``, one row per trial: ``number``,
        ``state``, ``value``, ``value_std``, ``params_<name>`` in the spec's order, the
        times and ``duration`` (Optuna's ``study.trials_dataframe()`` shape). Needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("trials_dataframe needs pandas: pip install pandas") from None
        order = self._order(campaign_id)
        rows = []
        for t in self.list_trials(campaign_id, states):
            row: dict[str, Any] = {"number": t.number, "state": str(t.state), "value": t.value}
            row["value_std"] = t.value_std
            row.update({f"values_{i}": v for i, v in enumerate(t.values)})
            row.update({f"params_{k}": t.params.get(k) for k in order})
            row.update(datetime_start=t.started_at, datetime_complete=t.finished_at, attempt=t.attempt)
            done = t.finished_at is not None and t.started_at is not None
            row["duration"] = (t.finished_at - t.started_at) if done else None  # type: ignore[operator]
            rows.append(row)
        return pd.DataFrame(rows)

    def get_trial(self, trial_id: int) -> Trial:
        """A trial by its global id (``Trial.id``), with folds, curves and events."""
        return self._trial(self._do(self._stub.GetTrial, campaign_pb2.GetTrialRequest(trial_id=trial_id)))

    def get_trial_by_number(self, campaign_id: int, number: int) -> Trial:
        """A trial by its campaign-local number (``#27``: what the CLI and dashboard show)."""
        req = campaign_pb2.GetTrialRequest(campaign_id=campaign_id, number=number)
        return self._trial(self._do(self._stub.GetTrial, req))

    def get_best_trial(self, campaign_id: int) -> Trial:
        """The best completed trial. Raises ``ApiError`` (``NOT_FOUND``) while no trial
        has completed; ``Campaign.best_trial_id`` is None until then."""
        req = campaign_pb2.GetCampaignRequest(campaign_id=campaign_id)
        return self._trial(self._do(self._stub.GetBestTrial, req))

    def get_pareto_front(self, campaign_id: int) -> ParetoFront:
        """The non-dominated completed trials of a multi-objective campaign (the best
        trial of a single-objective one), best first in the first objective."""
        campaign = self.get_campaign(campaign_id)
        resp = self._do(self._stub.GetParetoFront, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))
        trials = [Trial.from_proto(t, campaign.space) for t in resp.trials]
        return ParetoFront(campaign_id, campaign.objectives, campaign.directions, trials)

    def cancel_campaign(self, campaign_id: int) -> Campaign:
        req = campaign_pb2.GetCampaignRequest(campaign_id=campaign_id)
        return self._campaign(self._do(self._stub.CancelCampaign, req))

    def pause_campaign(self, campaign_id: int) -> Campaign:
        """RUNNING -> PAUSED: agents get no new trial (they wait); running trials go on."""
        req = campaign_pb2.GetCampaignRequest(campaign_id=campaign_id)
        return self._campaign(self._do(self._stub.PauseCampaign, req))

    def resume_campaign(self, campaign_id: int) -> Campaign:
        """PAUSED -> RUNNING."""
        req = campaign_pb2.GetCampaignRequest(campaign_id=campaign_id)
        return self._campaign(self._do(self._stub.ResumeCampaign, req))

    def raise_budget(self, campaign_id: int, max_trials: int) -> Campaign:
        """Raises ``budget.max_trials`` (a COMPLETED campaign runs again)."""
        req = campaign_pb2.RaiseBudgetRequest(campaign_id=campaign_id, max_trials=max_trials)
        return self._campaign(self._do(self._stub.RaiseBudget, req))

    def stop_trial(self, campaign_id: int, number: int, reason: str = "") -> Trial:
        """Cancels trial ``number`` (QUEUED, RUNNING or PAUSED); its agent stops at its next heartbeat."""
        req = campaign_pb2.StopTrialRequest(campaign_id=campaign_id, number=number, reason=reason)
        return self._trial(self._do(self._stub.StopTrial, req))

    def request_analysis(self, trial_id: int) -> AnalysisRequest:
        """Asks for the curvature and landscape of a COMPLETED trial (of a campaign with
        an ``analysis`` section): the campaign's next agent computes it from the folds'
        checkpoints. Asking again for one queued or running answers it."""
        req = campaign_pb2.GetTrialRequest(trial_id=trial_id)
        return AnalysisRequest.from_proto(self._do(self._stub.RequestAnalysis, req))

    def export_campaign(self, campaign_id: int) -> dict[str, Any]:
        """Everything needed to re-import the campaign, as a JSON document."""
        resp = self._do(self._stub.ExportCampaign, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))
        document: dict[str, Any] = json.loads(resp.document_json)
        return document

    def get_throughput(self, campaign_id: int) -> dict[str, Any]:
        """The campaign's measured fold throughput and the planner's model of it, as
        REST's ``GET /campaigns/{id}/throughput`` serves it: ``points`` (what agents plan
        from under ``--groups auto``), ``models`` by scheme, and ``train_samples``."""
        resp = self._do(self._stub.GetThroughput, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))
        document: dict[str, Any] = json.loads(resp.document_json)
        return document

    def import_campaign(self, document: dict[str, Any]) -> Campaign:
        """Imports an exported document as a new campaign."""
        req = campaign_pb2.ImportCampaignRequest(document_json=json.dumps(document))
        return self._campaign(self._do(self._stub.ImportCampaign, req))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Waits until the server answers (a health check), up to ``timeout`` seconds;
        raises ``ApiError`` (``UNAVAILABLE``) naming the address if it never does."""
        wait_for_server(self.channel, self._where, timeout)

    def agent(self) -> AgentClient:
        """An ``AgentClient`` over this client's channel and token (closing it leaves the
        channel open)."""
        return AgentClient(self.target, self._token, self.timeout, channel=self.channel)

    def trials(
        self, campaign_id: int, *, max_trials: int | None = None, host: str | None = None
    ) -> Iterator[ActiveTrial]:
        """Ask/tell: yields the campaign's trials one at a time, each held under a lease
        that a background thread renews, until the campaign is done (or ``max_trials``
        were handed out). Call ``trial.report(step, value)`` for intermediate values and
        ``trial.complete(value)`` (or ``folds=[...]``) at the end; see ``hpcopt.asktell``."""
        agent = self.agent()
        try:
            yield from trials(agent, campaign_id, host=host, max_trials=max_trials)
        finally:
            agent.close()


def _collect(page: Callable[[int, int], Page[R]], offset: int, limit: int | None) -> list[R]:
    """Pages through a listing from ``offset``: ``limit`` items, or all when None."""
    out: list[R] = []
    while limit is None or len(out) < limit:
        want = 1000 if limit is None else min(1000, limit - len(out))
        got = page(offset + len(out), want)
        out.extend(got.items)
        if not got.items or offset + len(out) >= got.total:
            break
    return out
