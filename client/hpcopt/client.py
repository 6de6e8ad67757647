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
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc

from hpcopt.records import (
    Action,
    Agent,
    Assignment,
    Campaign,
    Fold,
    Lease,
    Page,
    ParetoFront,
    Trial,
    TrialState,
    action,
)
from hpcopt.spec import CampaignSpec
from hpcopt.v1 import agent_pb2, agent_pb2_grpc, campaign_pb2, campaign_pb2_grpc, common_pb2

if TYPE_CHECKING:
    from hpcopt.asktell import ActiveTrial

DEFAULT_SERVER = "127.0.0.1:50051"
T = TypeVar("T")
R = TypeVar("R")
_HINT = "; start one with `hpcopt-server serve`, or give its address with --server or HPCOPT_SERVER"


class ApiError(Exception):
    """A failed call: ``code`` is the gRPC status name (``"INVALID_ARGUMENT"``, ...)."""

    def __init__(self, code: str, message: str, field_errors: list[dict[str, str]] | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.field_errors = field_errors or []


def _call(fn: Callable[..., T], request: Any, metadata: tuple[tuple[str, str], ...], timeout: float, target: str) -> T:
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
        raise ApiError(code, _explain(code, details, target, bool(metadata)), fields) from None


def _explain(code: str, details: str, target: str, has_token: bool) -> str:
    """The server's message, or for the two errors a user's setup causes, what to do."""
    if code == "UNAVAILABLE" and ("connect" in details.lower() or "resolve" in details.lower()):
        reason = details.rsplit(": ", 1)[-1].strip()
        return f"no hpcopt server answers at {target} ({reason}){_HINT}"
    if code == "UNAUTHENTICATED":
        given = "the token given was refused" if has_token else "no token was given"
        return f"{details} ({given}: pass one with --token or set HPCOPT_TOKEN)"
    return details


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
        return _call(fn, request, self._metadata, self.timeout, self.target)


class Client(_Base):
    """Submit and watch campaigns. Every getter returns the client's own records
    (``hpcopt.Campaign``, ``hpcopt.Trial``, ...; see ``hpcopt.records``) with
    parameters as a dict in the order of the campaign's space."""

    def __init__(self, target: str | None = None, token: str | None = None, timeout: float = 30.0):
        super().__init__(target, token, timeout)
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
            from hpcopt.specfile import load_spec_file

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
            campaign_id=campaign_id, states=[_state_value(s) for s in states], offset=offset, limit=limit
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

    def export_campaign(self, campaign_id: int) -> dict[str, Any]:
        """Everything needed to re-import the campaign, as a JSON document."""
        resp = self._do(self._stub.ExportCampaign, campaign_pb2.GetCampaignRequest(campaign_id=campaign_id))
        document: dict[str, Any] = json.loads(resp.document_json)
        return document

    def import_campaign(self, document: dict[str, Any]) -> Campaign:
        """Imports an exported document as a new campaign."""
        req = campaign_pb2.ImportCampaignRequest(document_json=json.dumps(document))
        return self._campaign(self._do(self._stub.ImportCampaign, req))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Waits until the server answers (a health check), up to ``timeout`` seconds;
        raises ``ApiError`` (``UNAVAILABLE``) naming the address if it never does."""
        wait_for_server(self.channel, self.target, timeout)

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
    """The AgentService calls, one method each; the MPI agent and ``Client.trials``
    build on this. Leases are ``hpcopt.Lease`` records from ``acquire``."""

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
    ) -> Agent:
        req = agent_pb2.RegisterRequest(
            host=host,
            ranks=ranks,
            gpus=gpus,
            slurm_job_id=slurm_job_id,
            campaign_id=campaign_id,
            pid=pid or os.getpid(),
            version=version,
        )
        return Agent.from_proto(self._do(self._stub.Register, req))

    def acquire(self, agent_id: str, campaign_id: int) -> Assignment:
        req = agent_pb2.AcquireRequest(agent_id=agent_id, campaign_id=campaign_id)
        return Assignment.from_proto(self._do(self._stub.Acquire, req), agent_id)

    def heartbeat(self, lease: Lease) -> Action:
        """Renews the lease; the answer says whether the trial goes on."""
        return action(self._do(self._stub.Heartbeat, agent_pb2.HeartbeatRequest(lease=lease.to_proto())))

    def report_intermediate(self, lease: Lease, fold: int, step: int, value: float, checkpoint_uri: str = "") -> Action:
        req = agent_pb2.ReportIntermediateRequest(
            lease=lease.to_proto(), fold=fold, step=step, value=value, checkpoint_uri=checkpoint_uri
        )
        return action(self._do(self._stub.ReportIntermediate, req))

    def report_fold(
        self,
        lease: Lease,
        fold: int,
        value: float,
        metrics: dict[str, float] | None = None,
        checkpoint_uri: str = "",
    ) -> Fold:
        req = agent_pb2.ReportFoldRequest(
            lease=lease.to_proto(), fold=fold, value=value, metrics=metrics or {}, checkpoint_uri=checkpoint_uri
        )
        return Fold.from_proto(self._do(self._stub.ReportFold, req))

    def complete(self, lease: Lease, order: Iterable[str] = ()) -> Trial:
        """Completes the trial from its folds; ``order`` is the space's (for ``params``)."""
        return Trial.from_proto(self._do(self._stub.Complete, lease.to_proto()), order)

    def release(self, lease: Lease, state: str, reason: str = "", order: Iterable[str] = ()) -> Trial:
        """``state`` is ``"FAILED"``, ``"PREEMPTED"`` or ``"PRUNED"``."""
        req = agent_pb2.ReleaseRequest(lease=lease.to_proto(), state=_state_value(state), reason=reason)
        return Trial.from_proto(self._do(self._stub.Release, req), order)

    def report_event(self, lease: Lease, fold: int, kind: str, reason: str) -> None:
        """Adds an event to the trial's log; ``kind`` is ``"checkpoint_refused"``."""
        req = agent_pb2.ReportEventRequest(lease=lease.to_proto(), fold=fold, kind=kind, reason=reason)
        self._do(self._stub.ReportEvent, req)

    def deregister(self, agent_id: str) -> list[int]:
        """Ends the agent's registration (call it on a normal exit); the ids of the
        trials it held, now requeued."""
        resp = self._do(self._stub.Deregister, agent_pb2.DeregisterRequest(agent_id=agent_id))
        return [int(i) for i in resp.requeued_trial_ids]


def _state_value(name: str) -> common_pb2.TrialState.ValueType:
    try:
        return common_pb2.TrialState.Value(f"TRIAL_STATE_{str(name).upper()}")
    except ValueError:
        allowed = ", ".join(s for s in TrialState if s != "UNSPECIFIED")
        raise ValueError(f"state: {name!r} is not a trial state (one of {allowed})") from None


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


def wait_for_server(channel: grpc.Channel, target: str, timeout: float) -> None:
    """Blocks until ``channel`` connects and the server's health check says SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    stub = health_pb2_grpc.HealthStub(channel)
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ApiError("UNAVAILABLE", f"no hpcopt server answered at {target} within {timeout:g} s{last}{_HINT}")
        try:
            grpc.channel_ready_future(channel).result(timeout=min(left, 5.0))
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=min(left, 5.0))
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = " (it is starting)"
        except grpc.FutureTimeoutError:
            pass
        except grpc.RpcError as exc:
            last = f" ({cast(grpc.Call, exc).code().name})"
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
