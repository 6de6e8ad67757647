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
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc

from hpcopt.spec import CampaignSpec
from hpcopt.v1 import agent_pb2, agent_pb2_grpc, campaign_pb2, campaign_pb2_grpc, common_pb2

if TYPE_CHECKING:
    from hpcopt.asktell import ActiveTrial

DEFAULT_SERVER = "127.0.0.1:50051"
T = TypeVar("T")


class ApiError(Exception):
    """A failed call: ``code`` is the gRPC status name (``"INVALID_ARGUMENT"``, ...)."""

    def __init__(self, code: str, message: str, field_errors: list[dict[str, str]] | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.field_errors = field_errors or []


def _call(fn: Callable[..., T], request: Any, metadata: tuple[tuple[str, str], ...], timeout: float) -> T:
    try:
        return fn(request, metadata=metadata, timeout=timeout)
    except grpc.RpcError as exc:
        call = cast(grpc.Call, exc)  # every RpcError of a unary call is also a Call
        code = call.code().name if call.code() is not None else "UNKNOWN"
        details = call.details() or code
        fields: list[dict[str, str]] = []
        for key, value in call.trailing_metadata() or ():
            if key == "hpcopt-field-errors":
                fields = json.loads(value)
        raise ApiError(code, details, fields) from None


class _Base:
    def __init__(self, target: str | None = None, token: str | None = None, timeout: float = 30.0):
        self.target = target or os.environ.get("HPCOPT_SERVER", DEFAULT_SERVER)
        token = token if token is not None else os.environ.get("HPCOPT_TOKEN")
        self._token = token
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        self.channel = grpc.insecure_channel(
            self.target, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        )

    def close(self) -> None:
        self.channel.close()

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, fn: Callable[..., T], request: Any) -> T:
        return _call(fn, request, self._metadata, self.timeout)


class Client(_Base):
    """Submit and watch campaigns."""

    def __init__(self, target: str | None = None, token: str | None = None, timeout: float = 30.0):
        super().__init__(target, token, timeout)
        self._stub = campaign_pb2_grpc.CampaignServiceStub(self.channel)

    def create_campaign(self, spec: CampaignSpec | dict[str, Any] | str | Path) -> common_pb2.Campaign:
        """Submits a spec: a model, a dict, or the path of a YAML/JSON file."""
        if isinstance(spec, str | Path):
            from hpcopt.specfile import load_spec_file

            spec = load_spec_file(spec)
        document = spec.model_dump(mode="json") if isinstance(spec, CampaignSpec) else spec
        return self._do(self._stub.CreateCampaign, campaign_pb2.CreateCampaignRequest(spec_json=json.dumps(document)))

    def get_campaign(self, campaign_id: int) -> common_pb2.Campaign:
        return self._do(self._stub.GetCampaign, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))

    def campaign_page(self, offset: int = 0, limit: int = 100) -> campaign_pb2.ListCampaignsResponse:
        """A page of campaigns, newest first (``limit`` at most 1000); ``total`` counts all."""
        return self._do(self._stub.ListCampaigns, campaign_pb2.ListCampaignsRequest(offset=offset, limit=limit))

    def list_campaigns(self, offset: int = 0, limit: int = 100) -> list[common_pb2.Campaign]:
        """A page of campaigns, newest first (the newest 100 by default)."""
        return list(self.campaign_page(offset, limit).campaigns)

    def iter_campaigns(self, page: int = 1000) -> list[common_pb2.Campaign]:
        """Every campaign, newest first (pages through ListCampaigns)."""
        out: list[common_pb2.Campaign] = []
        while True:
            resp = self.campaign_page(len(out), page)
            out.extend(resp.campaigns)
            if len(out) >= resp.total or not resp.campaigns:
                return out

    def list_trials(
        self, campaign_id: int, states: Iterable[str] = (), offset: int = 0, limit: int = 100
    ) -> campaign_pb2.ListTrialsResponse:
        """A page of trials; ``states`` are names like ``"COMPLETED"``."""
        req = campaign_pb2.ListTrialsRequest(
            campaign_id=campaign_id,
            states=[common_pb2.TrialState.Value(f"TRIAL_STATE_{s.upper()}") for s in states],
            offset=offset,
            limit=limit,
        )
        return self._do(self._stub.ListTrials, req)

    def iter_trials(self, campaign_id: int, states: Iterable[str] = (), page: int = 1000) -> list[common_pb2.Trial]:
        """Every trial of the campaign (pages through ListTrials)."""
        out: list[common_pb2.Trial] = []
        states = list(states)
        while True:
            resp = self.list_trials(campaign_id, states, len(out), page)
            out.extend(resp.trials)
            if len(out) >= resp.total or not resp.trials:
                return out

    def get_trial(self, trial_id: int) -> common_pb2.Trial:
        """A trial by its global id (``Trial.id``)."""
        return self._do(self._stub.GetTrial, campaign_pb2.GetTrialRequest(trial_id=trial_id))

    def get_trial_by_number(self, campaign_id: int, number: int) -> common_pb2.Trial:
        """A trial by its campaign-local number (``#27``: what the CLI and dashboard show)."""
        req = campaign_pb2.GetTrialRequest(campaign_id=campaign_id, number=number)
        return self._do(self._stub.GetTrial, req)

    def get_best_trial(self, campaign_id: int) -> common_pb2.Trial:
        return self._do(self._stub.GetBestTrial, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))

    def get_pareto_front(self, campaign_id: int) -> list[common_pb2.Trial]:
        """The non-dominated completed trials of a multi-objective campaign (the best
        trial of a single-objective one), best first in the first objective."""
        resp = self._do(self._stub.GetParetoFront, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))
        return list(resp.trials)

    def cancel_campaign(self, campaign_id: int) -> common_pb2.Campaign:
        return self._do(self._stub.CancelCampaign, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))

    def export_campaign(self, campaign_id: int) -> dict[str, Any]:
        resp = self._do(self._stub.ExportCampaign, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))
        document: dict[str, Any] = json.loads(resp.document_json)
        return document

    def import_campaign(self, document: dict[str, Any]) -> common_pb2.Campaign:
        req = campaign_pb2.ImportCampaignRequest(document_json=json.dumps(document))
        return self._do(self._stub.ImportCampaign, req)

    def trials(
        self, campaign_id: int, *, max_trials: int | None = None, host: str | None = None
    ) -> Iterator[ActiveTrial]:
        """Ask/tell: yields the campaign's trials one at a time, each held under a lease
        that a background thread renews, until the campaign is done (or ``max_trials``
        were handed out). Call ``trial.report(step, value)`` for intermediate values and
        ``trial.complete(value)`` (or ``folds=[...]``) at the end; see ``hpcopt.asktell``."""
        from hpcopt.asktell import trials

        agent = AgentClient(self.target, self._token, self.timeout)
        try:
            yield from trials(agent, campaign_id, host=host, max_trials=max_trials)
        finally:
            agent.close()


class AgentClient(_Base):
    """The AgentService calls, one method each; the MPI agent builds on this."""

    def __init__(self, target: str | None = None, token: str | None = None, timeout: float = 30.0):
        super().__init__(target, token, timeout)
        self._stub = agent_pb2_grpc.AgentServiceStub(self.channel)

    def register(
        self,
        *,
        host: str,
        ranks: int = 1,
        gpus: int = 0,
        slurm_job_id: str = "",
        campaign_id: int = 0,
        pid: int = 0,
        version: str = "",
    ) -> agent_pb2.RegisterResponse:
        req = agent_pb2.RegisterRequest(
            host=host,
            ranks=ranks,
            gpus=gpus,
            slurm_job_id=slurm_job_id,
            campaign_id=campaign_id,
            pid=pid or os.getpid(),
            version=version,
        )
        return self._do(self._stub.Register, req)

    def acquire(self, agent_id: str, campaign_id: int) -> agent_pb2.AcquireResponse:
        return self._do(self._stub.Acquire, agent_pb2.AcquireRequest(agent_id=agent_id, campaign_id=campaign_id))

    def heartbeat(self, lease: agent_pb2.TrialLease) -> agent_pb2.HeartbeatResponse:
        return self._do(self._stub.Heartbeat, agent_pb2.HeartbeatRequest(lease=lease))

    def report_intermediate(
        self, lease: agent_pb2.TrialLease, fold: int, step: int, value: float, checkpoint_uri: str = ""
    ) -> agent_pb2.HeartbeatResponse:
        req = agent_pb2.ReportIntermediateRequest(
            lease=lease, fold=fold, step=step, value=value, checkpoint_uri=checkpoint_uri
        )
        return self._do(self._stub.ReportIntermediate, req)

    def report_fold(
        self,
        lease: agent_pb2.TrialLease,
        fold: int,
        value: float,
        metrics: dict[str, float] | None = None,
        checkpoint_uri: str = "",
    ) -> common_pb2.Fold:
        req = agent_pb2.ReportFoldRequest(
            lease=lease, fold=fold, value=value, metrics=metrics or {}, checkpoint_uri=checkpoint_uri
        )
        return self._do(self._stub.ReportFold, req)

    def complete(self, lease: agent_pb2.TrialLease) -> common_pb2.Trial:
        return self._do(self._stub.Complete, lease)

    def release(self, lease: agent_pb2.TrialLease, state: str, reason: str = "") -> common_pb2.Trial:
        """``state`` is ``"FAILED"``, ``"PREEMPTED"`` or ``"PRUNED"``."""
        req = agent_pb2.ReleaseRequest(
            lease=lease, state=common_pb2.TrialState.Value(f"TRIAL_STATE_{state.upper()}"), reason=reason
        )
        return self._do(self._stub.Release, req)

    def report_event(self, lease: agent_pb2.TrialLease, fold: int, kind: str, reason: str) -> None:
        """Adds an event to the trial's log; ``kind`` is ``"checkpoint_refused"``."""
        req = agent_pb2.ReportEventRequest(lease=lease, fold=fold, kind=kind, reason=reason)
        self._do(self._stub.ReportEvent, req)

    def deregister(self, agent_id: str) -> agent_pb2.DeregisterResponse:
        """Ends the agent's registration (call it on a normal exit)."""
        return self._do(self._stub.Deregister, agent_pb2.DeregisterRequest(agent_id=agent_id))


def lease_of(resp: agent_pb2.AcquireResponse, agent_id: str) -> agent_pb2.TrialLease:
    """The lease to quote in reports for a granted acquisition."""
    return agent_pb2.TrialLease(agent_id=agent_id, trial_id=resp.trial.id, lease_id=resp.lease_id)


def param_values(trial: common_pb2.Trial, order: Iterable[str] = ()) -> dict[str, bool | int | float | str]:
    """A trial's params as plain Python values, in ``order`` (give the spec's space: a
    protobuf map has no order), then any others by name."""
    from hpcopt.records import ordered_params

    return ordered_params(trial, order)


def trial_state(state: int) -> str:
    """``TRIAL_STATE_COMPLETED`` (as a number) -> ``"COMPLETED"``."""
    return common_pb2.TrialState.Name(state).removeprefix("TRIAL_STATE_")  # type: ignore[arg-type]


def campaign_state(state: int) -> str:
    """``CAMPAIGN_STATE_RUNNING`` (as a number) -> ``"RUNNING"``."""
    return common_pb2.CampaignState.Name(state).removeprefix("CAMPAIGN_STATE_")  # type: ignore[arg-type]
