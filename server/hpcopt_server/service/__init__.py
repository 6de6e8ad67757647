"""The service layer: campaign and trial use cases, the state machine and leases.

Transports (``api/`` for REST, ``rpc/`` for gRPC) decode a request, call one method
here and encode the answer. Nothing here knows about HTTP, protobuf or ORM rows.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.rules import OPEN_STATES
from hpcopt_server.service.agents import AgentService
from hpcopt_server.service.analysis import AnalysisService
from hpcopt_server.service.campaigns import CampaignService
from hpcopt_server.service.context import Context, ServiceSettings
from hpcopt_server.service.export import export_campaign
from hpcopt_server.service.growing import SpaceGrowth
from hpcopt_server.service.importing import import_campaign
from hpcopt_server.service.insights import InsightService
from hpcopt_server.service.limits import RequestLimits
from hpcopt_server.service.notes import NoteService
from hpcopt_server.service.population import PopulationService
from hpcopt_server.service.reaper import LeaseReaper
from hpcopt_server.service.requested_analyses import RequestedAnalyses
from hpcopt_server.service.steering import SteeringService
from hpcopt_server.service.throughput import ThroughputService
from hpcopt_server.service.tokens import TokenService
from hpcopt_server.storage.repository import Storage


class Service:
    """Everything a transport needs, over one storage."""

    def __init__(
        self,
        storage: Storage,
        settings: ServiceSettings | None = None,
        *,
        require_auth: bool = False,
        reap_interval: float = 5.0,
        limits: RequestLimits | None = None,
    ):
        self.ctx = Context(storage, settings or ServiceSettings())
        self.limits = limits or RequestLimits()
        self.campaigns = CampaignService(self.ctx, self.limits)
        self.agents = AgentService(self.ctx)
        self.tokens = TokenService(self.ctx, require_auth=require_auth)
        self.insights = InsightService(self.ctx)
        self.analysis = AnalysisService(self.ctx)
        self.notes = NoteService(self.ctx)
        self.throughput = ThroughputService(self.ctx)
        self.population = PopulationService(self.ctx)
        self.steering = SteeringService(self.ctx)
        self.growth = SpaceGrowth(self.ctx)
        self.reaper = LeaseReaper(self.ctx, reap_interval)
        #: Analyses of finished trials, asked for after the fact.
        self.requested_analyses = RequestedAnalyses(self.ctx, self.agents)

    def warm_optimizers(self) -> threading.Thread:
        """Rebuilds the running campaigns' optimizers from SQL in a background thread
        (see ``suggestions.py``); the thread, started."""
        running: list[d.Campaign] = []
        with self.ctx.storage.read() as tx:
            offset = 0
            while True:
                page, total = tx.campaigns.page(offset, 500)
                running += [c for c in page if c.state in OPEN_STATES]
                offset += len(page)
                if not page or offset >= total:
                    break
        self.ctx.optimizers.reserve([c.id for c in running])

        def build() -> None:
            for c in running:
                try:
                    with self.ctx.storage.read() as tx:
                        self.ctx.optimizers.warm(tx, c)
                except Exception:  # the request path rebuilds it instead
                    logging.getLogger(__name__).exception("rebuilding campaign %d's optimizer failed", c.id)
                finally:
                    self.ctx.optimizers.release(c.id)

        thread = threading.Thread(target=build, name="optimizer-warmup", daemon=True)
        thread.start()
        return thread

    def export_campaign(self, campaign_id: int) -> dict[str, Any]:
        return export_campaign(self.ctx, campaign_id)

    def export_json(self, campaign_id: int) -> str:
        """The export document as JSON text, read and encoded in one of the slots for
        costly reads (``heavy.py``): 20,000 trials cost 20 s of CPU, and any read token
        may ask."""
        with self.ctx.heavy.slot("export"):
            return json.dumps(export_campaign(self.ctx, campaign_id), ensure_ascii=False, allow_nan=False)

    def import_campaign(self, document: Any, token: d.ApiToken | None = None) -> d.Campaign:
        """A campaign from an export document, imported by ``token`` (its quota applies)."""
        return import_campaign(self.ctx, document, self.limits, token)

    def health(self) -> dict[str, str]:
        """What ``/healthz`` answers (on the REST port and on ``--health-port``): it
        touches the database, so an unreachable one fails it."""
        from hpcopt import __version__

        with self.ctx.storage.read() as tx:
            tx.tokens.stored()
        return {"status": "ok", "version": __version__}

    def trials_by_state(self) -> dict[str, int]:
        """Trial counts by state over all campaigns (for /metrics)."""
        with self.ctx.storage.read() as tx:
            totals: dict[str, int] = {}
            for counts in tx.campaigns.trial_counts().values():
                for state, n in counts.items():
                    totals[state] = totals.get(state, 0) + n
            return totals


__all__ = ["RequestLimits", "Service", "ServiceSettings"]
