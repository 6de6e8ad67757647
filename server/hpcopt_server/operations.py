"""Every operation the server offers, said once: its gRPC method, its REST route (by
operation id) and the scope a token needs for it. OSS Vizier keeps this pairing in its
contract (each RPC carries its HTTP route); here it is one table both transports read.

- gRPC's interceptor (``rpc/auth.py``) and REST's ``Caller`` dependency
  (``api/deps.py``) take the scope from this table and nowhere else.
- ``tests/server/test_operations.py`` holds the table to the transports: every RPC in
  the protos and every REST route is in it exactly once, every row names a method or a
  route that exists, and both transports refuse a token without the row's scope.
- A row with an RPC and a route is one operation with twins on both transports; a row
  with one of them says the other transport has none (an agent's calls are gRPC only;
  the dashboard's views are REST only).

Adding an operation: a row here, then the RPC (protos, servicer) and/or the route; the
test names what is missing."""

from __future__ import annotations

from dataclasses import dataclass

#: Who may call: ``None`` is open (health, the identity proof, whoami).
Scope = str | None

CAMPAIGN_SERVICE = "/hpcopt.v1.CampaignService/"
AGENT_SERVICE = "/hpcopt.v1.AgentService/"
IDENTITY_SERVICE = "/hpcopt.v1.IdentityService/"


@dataclass(frozen=True)
class Operation:
    """One thing a client can do, on one transport or both."""

    scope: Scope
    #: The gRPC method's full name (``/package.Service/Method``), or None (REST only).
    rpc: str | None = None
    #: The REST route's ``operation_id``, or None (gRPC only).
    rest: str | None = None


def _c(method: str) -> str:
    return CAMPAIGN_SERVICE + method


def _a(method: str) -> str:
    return AGENT_SERVICE + method


OPERATIONS: tuple[Operation, ...] = (
    # -- campaigns: both transports ---------------------------------------------------
    Operation("submit", _c("CreateCampaign"), "create_campaign"),
    Operation("read", _c("GetCampaign"), "get_campaign"),
    Operation("read", _c("ListCampaigns"), "list_campaigns"),
    Operation("read", _c("ListTrials"), "list_trials"),
    Operation("read", _c("GetTrial"), "get_trial"),
    Operation("read", _c("GetBestTrial"), "get_best_trial"),
    Operation("read", _c("GetParetoFront"), "get_pareto_front"),
    Operation("submit", _c("CancelCampaign"), "cancel_campaign"),
    Operation("read", _c("ExportCampaign"), "export_campaign"),
    Operation("submit", _c("ImportCampaign"), "import_campaign"),
    Operation("submit", _c("PauseCampaign"), "pause_campaign"),
    Operation("submit", _c("ResumeCampaign"), "resume_campaign"),
    Operation("submit", _c("RaiseBudget"), "raise_budget"),
    Operation("submit", _c("StopTrial"), "stop_trial"),
    Operation("submit", _c("RequestAnalysis"), "request_trial_analysis"),
    Operation("read", _c("GetThroughput"), "get_throughput"),
    # -- the agent's calls: gRPC only -------------------------------------------------
    Operation("agent", _a("Register")),
    Operation("agent", _a("Acquire")),
    Operation("agent", _a("Heartbeat")),
    Operation("agent", _a("ReportIntermediate")),
    Operation("agent", _a("ReportFold")),
    Operation("agent", _a("Complete")),
    Operation("agent", _a("Release")),
    Operation("agent", _a("ReportEvent")),
    Operation("agent", _a("Deregister")),
    Operation("agent", _a("Resize")),
    Operation("agent", _a("Queue")),
    Operation("agent", _a("ReportThroughput")),
    Operation("agent", _a("ReportUnreadableParent")),
    Operation("agent", _a("ReportAnalysis")),
    Operation("agent", _a("ShouldAnalyse")),
    Operation("agent", _a("AcquireAnalysis")),
    Operation("agent", _a("FinishAnalysis")),
    # The server proves it wrote the caller's connection file before a token is sent.
    Operation(None, IDENTITY_SERVICE + "Prove"),
    # -- the dashboard's and scripts' views: REST only --------------------------------
    Operation(None, rest="healthz"),
    Operation("read", rest="metrics"),
    Operation(None, rest="whoami"),
    Operation("read", rest="validate_campaign"),
    Operation("read", rest="get_trial_by_number"),
    Operation("read", rest="running_trials"),
    Operation("read", rest="timeline"),
    Operation("read", rest="param_importance"),
    Operation("read", rest="get_population"),
    Operation("read", rest="list_agents"),
    Operation("read", rest="plot_data"),
    Operation("read", rest="learning_curves"),
    Operation("read", rest="get_campaign_note"),
    Operation("submit", rest="save_campaign_note"),
    Operation("read", rest="campaign_note_versions"),
    Operation("read", rest="campaign_note_version"),
    Operation("read", rest="get_trial_note"),
    Operation("submit", rest="save_trial_note"),
    Operation("read", rest="trial_note_versions"),
    Operation("read", rest="trial_note_version"),
    Operation("read", rest="noted_trials"),
    Operation("read", rest="get_trial_analysis"),
)

#: The operations by gRPC method and by REST operation id.
BY_RPC: dict[str, Operation] = {op.rpc: op for op in OPERATIONS if op.rpc is not None}
BY_REST: dict[str, Operation] = {op.rest: op for op in OPERATIONS if op.rest is not None}

#: gRPC services open to anyone besides the table's rows: health checks and reflection,
#: so that load balancers and grpcurl can see the server.
OPEN_GRPC_PREFIXES = ("/grpc.health.", "/grpc.reflection.")


def rpc_scope(method: str) -> Scope:
    """The scope a gRPC method needs: the table's; open for health and reflection;
    ``admin`` for anything else (a method the table does not know is never open)."""
    op = BY_RPC.get(method)
    if op is not None:
        return op.scope
    return None if method.startswith(OPEN_GRPC_PREFIXES) else "admin"


def rest_scope(operation_id: str | None) -> Scope:
    """The scope a REST route needs, by its ``operation_id``; ``admin`` for a route the
    table does not know (the operations test fails on such a route first)."""
    op = BY_REST.get(operation_id or "")
    return "admin" if op is None else op.scope
