"""``AgentClient``: the AgentService calls, for the MPI agent and ask/tell."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hpcopt.core.planner import Point
from hpcopt.core.records import Action, Agent, Assignment, Fold, Lease, QueueState, Trial, action
from hpcopt.transport import Channel, state_value
from hpcopt.v1 import agent_pb2, agent_pb2_grpc


class AgentClient(Channel):
    """The AgentService calls, one method each; the MPI agent and ``Client.trials``
    build on this. Leases are ``hpcopt.Lease`` records from ``acquire``."""

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

    def resize(self, agent_id: str, ranks: int, gpus: int = 0) -> None:
        """Tells the server the agent's trial group has another size now (after a layout
        was chosen, or re-chosen), so the agents list counts its ranks right."""
        self._do(self._stub.Resize, agent_pb2.ResizeRequest(agent_id=agent_id, ranks=ranks, gpus=gpus))

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
        req = agent_pb2.ReleaseRequest(lease=lease.to_proto(), state=state_value(state), reason=reason)
        return Trial.from_proto(self._do(self._stub.Release, req), order)

    def report_event(self, lease: Lease, fold: int, kind: str, reason: str) -> None:
        """Adds an event to the trial's log; ``kind`` is ``"checkpoint_refused"``, ``"params_unread"``,
        ``"params_outside_space"`` (a define-by-run study's parameters outside its space, as JSON) or
        ``"analysis"`` (what a fold's analysis cost, or why it was not computed)."""
        req = agent_pb2.ReportEventRequest(lease=lease.to_proto(), fold=fold, kind=kind, reason=reason)
        self._do(self._stub.ReportEvent, req)

    def report_analysis(self, lease: Lease, fold: int, document: str) -> None:
        """Stores a fold's analysis (JSON of ``hpcopt.core.analysis_doc``) with the trial."""
        req = agent_pb2.ReportAnalysisRequest(lease=lease.to_proto(), fold=fold, document=document)
        self._do(self._stub.ReportAnalysis, req)

    def should_analyse(self, lease: Lease, fold: int, metrics: dict[str, float]) -> tuple[bool, str]:
        """Whether the fold, which has trained its last epoch with ``metrics``, is
        analysed under the spec's ``analysis.on: best``, and why."""
        req = agent_pb2.ShouldAnalyseRequest(lease=lease.to_proto(), fold=fold, metrics=metrics)
        reply = self._do(self._stub.ShouldAnalyse, req)
        return bool(reply.analyse), str(reply.reason)

    def acquire_analysis(
        self, agent_id: str, campaign_id: int, order: Iterable[str] = ()
    ) -> tuple[Trial, Lease] | None:
        """The campaign's oldest analysis of a finished trial that a user asked for,
        leased to this agent: (the trial with its folds, the lease); None when none is."""
        req = agent_pb2.AcquireAnalysisRequest(agent_id=agent_id, campaign_id=campaign_id)
        reply = self._do(self._stub.AcquireAnalysis, req)
        if not reply.HasField("trial"):
            return None
        return Trial.from_proto(reply.trial, order), Lease(agent_id, int(reply.trial.id), reply.lease_id)

    def finish_analysis(self, lease: Lease, error: str = "", summary: str = "") -> None:
        """Ends a requested analysis this agent holds: DONE, or FAILED saying why."""
        req = agent_pb2.FinishAnalysisRequest(lease=lease.to_proto(), error=error, summary=summary)
        self._do(self._stub.FinishAnalysis, req)

    def parent_unreadable(self, lease: Lease, parent_trial_id: int, fold: int, reason: str) -> Trial:
        """Says that the PBT interval's parent (``Lineage.parent_trial_id``) cannot be
        read; the server re-plans the interval and answers it as it now is (with the same
        parent when there was nothing else to start from)."""
        req = agent_pb2.ReportUnreadableParentRequest(
            lease=lease.to_proto(), parent_trial_id=parent_trial_id, fold=fold, reason=reason
        )
        return Trial.from_proto(self._do(self._stub.ReportUnreadableParent, req))

    def queue(self, agent_id: str, campaign_id: int, with_throughput: bool = False) -> QueueState:
        """What is left to start of the campaign (leases nothing); with
        ``with_throughput``, the campaign's measured fold throughput too."""
        req = agent_pb2.QueueRequest(agent_id=agent_id, campaign_id=campaign_id, with_throughput=with_throughput)
        return QueueState.from_proto(self._do(self._stub.Queue, req))

    def report_throughput(self, agent_id: str, campaign_id: int, points: Iterable[Point], train_samples: int) -> int:
        """Stores what the throughput probe measured for the campaign (the planner's
        points where no fold has trained yet); how many widths were stored."""
        req = agent_pb2.ReportThroughputRequest(
            agent_id=agent_id,
            campaign_id=campaign_id,
            points=[
                agent_pb2.ThroughputPoint(
                    scheme=p.scheme, ranks=p.ranks, nodes=p.nodes, samples_per_second=p.samples_per_second
                )
                for p in points
            ],
            train_samples=train_samples,
        )
        return int(self._do(self._stub.ReportThroughput, req).stored)

    def deregister(self, agent_id: str, reason: str = "") -> list[int]:
        """Ends the agent's registration (call it on exit; ``reason``: why, when it
        refused to work, as the campaign's agents list will show); the ids of the trials
        it held, now requeued."""
        resp = self._do(self._stub.Deregister, agent_pb2.DeregisterRequest(agent_id=agent_id, reason=reason))
        return [int(i) for i in resp.requeued_trial_ids]
