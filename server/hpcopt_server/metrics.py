"""Prometheus metrics for one server process (served at ``/metrics``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from hpcopt_server import domain as d
from hpcopt_server.service import Service


class _TrialStates(Collector):
    def __init__(self, service: Service):
        self.service = service

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("hpcopt_trials", "Trials by state, all campaigns", labels=["state"])
        counts = self.service.trials_by_state()
        for state in d.TrialState:
            g.add_metric([state.value], counts.get(state.value, 0))
        yield g


class Metrics:
    def __init__(self, service: Service):
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "hpcopt_http_requests", "REST requests", ["method", "route", "status"], registry=self.registry
        )
        self.grpc_requests = Counter("hpcopt_grpc_requests", "gRPC calls", ["method", "code"], registry=self.registry)
        self.grpc_latency = Histogram(
            "hpcopt_grpc_latency_seconds", "gRPC call latency", ["method"], registry=self.registry
        )
        self.acquire_latency = Histogram(
            "hpcopt_acquire_seconds",
            "Time to acquire a trial (transaction incl. suggestion)",
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.registry.register(_TrialStates(service))
        service.ctx.observe_acquire = self.acquire_latency.observe
