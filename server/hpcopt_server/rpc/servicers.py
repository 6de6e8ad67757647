"""gRPC servicers: decode, call one service method, encode."""

from __future__ import annotations

import json
from typing import Any, TypeAlias

import grpc

from hpcopt.core.documents import parse_document
from hpcopt.errors import DocumentError
from hpcopt.v1 import agent_pb2, agent_pb2_grpc, campaign_pb2, campaign_pb2_grpc, common_pb2
from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.rpc import convert
from hpcopt_server.rpc.auth import bearer, caller
from hpcopt_server.rpc.errors import handles_errors
from hpcopt_server.service import Service
from hpcopt_server.service.agent_messages import Lease

Ctx: TypeAlias = grpc.ServicerContext


def _json(field: str, text: str, max_bytes: int) -> Any:
    try:
        return parse_document(text, yaml_syntax=False, max_bytes=max_bytes, what=field)
    except DocumentError as exc:
        raise InvalidArgument(str(exc), [(field, m) for _, m in exc.errors]) from None


def _lease(msg: agent_pb2.TrialLease) -> Lease:
    return Lease(agent_id=msg.agent_id, trial_id=msg.trial_id, lease_id=msg.lease_id)


class CampaignServicer(campaign_pb2_grpc.CampaignServiceServicer):
    def __init__(self, service: Service):
        self.svc = service

    def _token(self, context: Ctx) -> d.ApiToken | None:
        """The submit token the call presented (None with auth off)."""
        return self.svc.tokens.authorize(bearer(context.invocation_metadata()), "submit")

    @handles_errors
    def CreateCampaign(self, request: campaign_pb2.CreateCampaignRequest, context: Ctx) -> common_pb2.Campaign:
        document = _json("spec_json", request.spec_json, self.svc.limits.spec_bytes)
        created = self.svc.campaigns.create(document, self._token(context))
        return convert.campaign(self.svc.campaigns.get(created.id))

    @handles_errors
    def GetCampaign(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> common_pb2.Campaign:
        return convert.campaign(self.svc.campaigns.get(request.campaign_id))

    @handles_errors
    def ListCampaigns(
        self, request: campaign_pb2.ListCampaignsRequest, context: Ctx
    ) -> campaign_pb2.ListCampaignsResponse:
        page, total = self.svc.campaigns.page(request.offset, request.limit or 100)
        return campaign_pb2.ListCampaignsResponse(
            campaigns=[convert.campaign(s, with_spec=False) for s in page], total=total
        )

    @handles_errors
    def ListTrials(self, request: campaign_pb2.ListTrialsRequest, context: Ctx) -> campaign_pb2.ListTrialsResponse:
        states = [convert.TRIAL_STATES_BACK[s] for s in request.states if s in convert.TRIAL_STATES_BACK]
        trials, total = self.svc.campaigns.trials(request.campaign_id, states, request.offset, request.limit or 100)
        return campaign_pb2.ListTrialsResponse(trials=[convert.trial(t) for t in trials], total=total)

    @handles_errors
    def GetTrial(self, request: campaign_pb2.GetTrialRequest, context: Ctx) -> common_pb2.Trial:
        if request.HasField("number"):
            detail = self.svc.insights.trial(campaign_id=request.campaign_id, number=request.number)
            return convert.trial(detail.trial)
        return convert.trial(self.svc.campaigns.trial(request.trial_id))

    @handles_errors
    def RequestAnalysis(self, request: campaign_pb2.GetTrialRequest, context: Ctx) -> campaign_pb2.AnalysisRequest:
        trial_id = request.trial_id
        if request.HasField("number"):
            trial_id = self.svc.insights.trial(campaign_id=request.campaign_id, number=request.number).trial.id
        return convert.analysis_request(self.svc.requested_analyses.request(trial_id))

    @handles_errors
    def GetBestTrial(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> common_pb2.Trial:
        return convert.trial(self.svc.campaigns.best(request.campaign_id))

    @handles_errors
    def GetParetoFront(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> campaign_pb2.ListTrialsResponse:
        front = self.svc.campaigns.front(request.campaign_id)
        return campaign_pb2.ListTrialsResponse(trials=[convert.trial(t) for t in front], total=len(front))

    @handles_errors
    def CancelCampaign(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> common_pb2.Campaign:
        return convert.campaign(self.svc.campaigns.cancel(request.campaign_id, self._token(context)))

    @handles_errors
    def PauseCampaign(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> common_pb2.Campaign:
        self.svc.steering.pause(request.campaign_id, self._token(context))
        return convert.campaign(self.svc.campaigns.get(request.campaign_id))

    @handles_errors
    def ResumeCampaign(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> common_pb2.Campaign:
        self.svc.steering.resume(request.campaign_id, self._token(context))
        return convert.campaign(self.svc.campaigns.get(request.campaign_id))

    @handles_errors
    def RaiseBudget(self, request: campaign_pb2.RaiseBudgetRequest, context: Ctx) -> common_pb2.Campaign:
        self.svc.steering.raise_budget(request.campaign_id, request.max_trials, self._token(context))
        return convert.campaign(self.svc.campaigns.get(request.campaign_id))

    @handles_errors
    def StopTrial(self, request: campaign_pb2.StopTrialRequest, context: Ctx) -> common_pb2.Trial:
        return convert.trial(
            self.svc.steering.stop_trial(request.campaign_id, request.number, self._token(context), request.reason)
        )

    @handles_errors
    def ExportCampaign(
        self, request: campaign_pb2.GetCampaignRequest, context: Ctx
    ) -> campaign_pb2.ExportCampaignResponse:
        return campaign_pb2.ExportCampaignResponse(document_json=self.svc.export_json(request.campaign_id))

    @handles_errors
    def GetThroughput(self, request: campaign_pb2.GetCampaignRequest, context: Ctx) -> campaign_pb2.ThroughputResponse:
        document = self.svc.throughput.document(request.campaign_id)
        return campaign_pb2.ThroughputResponse(document_json=json.dumps(document))

    @handles_errors
    def ImportCampaign(self, request: campaign_pb2.ImportCampaignRequest, context: Ctx) -> common_pb2.Campaign:
        document = _json("document_json", request.document_json, self.svc.limits.import_bytes)
        created = self.svc.import_campaign(document, self._token(context))
        return convert.campaign(self.svc.campaigns.get(created.id))


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, service: Service):
        self.svc = service

    def _caller(self, context: Ctx) -> int | None:
        return caller(self.svc.tokens, context, "agent")

    @handles_errors
    def Register(self, request: agent_pb2.RegisterRequest, context: Ctx) -> agent_pb2.RegisterResponse:
        reg = self.svc.agents.register(
            host=request.host,
            ranks=request.ranks,
            gpus=request.gpus,
            slurm_job_id=request.slurm_job_id,
            campaign_id=request.campaign_id or None,
            pid=request.pid,
            version=request.version,
            caller=self._caller(context),
        )
        return agent_pb2.RegisterResponse(
            agent_id=reg.agent_id,
            lease_seconds=reg.lease_seconds,
            heartbeat_seconds=reg.heartbeat_seconds,
            server_id=reg.server_id,
            campaign_spec_json=json.dumps(reg.campaign_spec) if reg.campaign_spec else "",
            throughput_json=json.dumps(list(reg.throughput)) if reg.throughput else "",
        )

    @handles_errors
    def Deregister(self, request: agent_pb2.DeregisterRequest, context: Ctx) -> agent_pb2.DeregisterResponse:
        requeued = self.svc.agents.deregister(request.agent_id, request.reason, caller=self._caller(context))
        return agent_pb2.DeregisterResponse(requeued_trial_ids=requeued)

    @handles_errors
    def Resize(self, request: agent_pb2.ResizeRequest, context: Ctx) -> agent_pb2.ResizeResponse:
        self.svc.agents.resize(request.agent_id, request.ranks, request.gpus, caller=self._caller(context))
        return agent_pb2.ResizeResponse()

    @handles_errors
    def Queue(self, request: agent_pb2.QueueRequest, context: Ctx) -> agent_pb2.QueueResponse:
        q = self.svc.agents.queue_state(
            request.agent_id, request.campaign_id, with_throughput=request.with_throughput, caller=self._caller(context)
        )
        return agent_pb2.QueueResponse(
            unstarted=q.unstarted,
            running=q.running,
            max_parallel=q.max_parallel,
            done=q.done,
            throughput_json=json.dumps(list(q.throughput)) if q.throughput else "",
        )

    @handles_errors
    def ReportThroughput(
        self, request: agent_pb2.ReportThroughputRequest, context: Ctx
    ) -> agent_pb2.ReportThroughputResponse:
        points = [(p.scheme, p.ranks, p.nodes, p.samples_per_second) for p in request.points]
        stored = self.svc.agents.report_throughput(
            request.agent_id, request.campaign_id, points, request.train_samples, caller=self._caller(context)
        )
        return agent_pb2.ReportThroughputResponse(stored=stored)

    @handles_errors
    def Acquire(self, request: agent_pb2.AcquireRequest, context: Ctx) -> agent_pb2.AcquireResponse:
        return convert.acquisition(
            self.svc.agents.acquire(request.agent_id, request.campaign_id, caller=self._caller(context))
        )

    @handles_errors
    def Heartbeat(self, request: agent_pb2.HeartbeatRequest, context: Ctx) -> agent_pb2.HeartbeatResponse:
        return convert.heartbeat(self.svc.agents.heartbeat(_lease(request.lease), caller=self._caller(context)))

    @handles_errors
    def ReportIntermediate(
        self, request: agent_pb2.ReportIntermediateRequest, context: Ctx
    ) -> agent_pb2.HeartbeatResponse:
        reply = self.svc.agents.report_intermediate(
            _lease(request.lease),
            request.fold,
            request.step,
            request.value,
            request.checkpoint_uri,
            caller=self._caller(context),
        )
        return convert.heartbeat(reply)

    @handles_errors
    def ReportFold(self, request: agent_pb2.ReportFoldRequest, context: Ctx) -> common_pb2.Fold:
        fold = self.svc.agents.report_fold(
            _lease(request.lease),
            request.fold,
            request.value,
            dict(request.metrics),
            request.checkpoint_uri,
            caller=self._caller(context),
        )
        return convert.fold(fold)

    @handles_errors
    def Complete(self, request: agent_pb2.TrialLease, context: Ctx) -> common_pb2.Trial:
        return convert.trial(self.svc.agents.complete(_lease(request), caller=self._caller(context)))

    @handles_errors
    def ReportEvent(self, request: agent_pb2.ReportEventRequest, context: Ctx) -> agent_pb2.ReportEventResponse:
        lease = _lease(request.lease)
        self.svc.agents.report_event(lease, request.fold, request.kind, request.reason, caller=self._caller(context))
        return agent_pb2.ReportEventResponse()

    @handles_errors
    def ReportAnalysis(
        self, request: agent_pb2.ReportAnalysisRequest, context: Ctx
    ) -> agent_pb2.ReportAnalysisResponse:
        lease = _lease(request.lease)
        self.svc.agents.report_analysis(lease, request.fold, request.document, caller=self._caller(context))
        return agent_pb2.ReportAnalysisResponse()

    @handles_errors
    def AcquireAnalysis(
        self, request: agent_pb2.AcquireAnalysisRequest, context: Ctx
    ) -> agent_pb2.AcquireAnalysisResponse:
        got = self.svc.requested_analyses.take(request.agent_id, request.campaign_id, caller=self._caller(context))
        if got is None:
            return agent_pb2.AcquireAnalysisResponse()
        trial, lease_id = got
        return agent_pb2.AcquireAnalysisResponse(trial=convert.trial(trial), lease_id=lease_id)

    @handles_errors
    def FinishAnalysis(
        self, request: agent_pb2.FinishAnalysisRequest, context: Ctx
    ) -> agent_pb2.FinishAnalysisResponse:
        lease = _lease(request.lease)
        self.svc.requested_analyses.finish(lease, request.error, request.summary, caller=self._caller(context))
        return agent_pb2.FinishAnalysisResponse()

    @handles_errors
    def ShouldAnalyse(self, request: agent_pb2.ShouldAnalyseRequest, context: Ctx) -> agent_pb2.ShouldAnalyseResponse:
        lease = _lease(request.lease)
        analyse, reason = self.svc.agents.should_analyse(
            lease, request.fold, dict(request.metrics), caller=self._caller(context)
        )
        return agent_pb2.ShouldAnalyseResponse(analyse=analyse, reason=reason)

    @handles_errors
    def ReportUnreadableParent(
        self, request: agent_pb2.ReportUnreadableParentRequest, context: Ctx
    ) -> common_pb2.Trial:
        lease = _lease(request.lease)
        return convert.trial(
            self.svc.agents.parent_unreadable(
                lease, request.parent_trial_id, request.fold, request.reason, caller=self._caller(context)
            )
        )

    @handles_errors
    def Release(self, request: agent_pb2.ReleaseRequest, context: Ctx) -> common_pb2.Trial:
        state = convert.TRIAL_STATES_BACK.get(request.state)
        if state is None:
            raise InvalidArgument(
                "state must be TRIAL_STATE_FAILED, TRIAL_STATE_PREEMPTED or TRIAL_STATE_PRUNED",
                [("state", "must be FAILED, PREEMPTED or PRUNED")],
            )
        lease = _lease(request.lease)
        return convert.trial(self.svc.agents.release(lease, state, request.reason, caller=self._caller(context)))
