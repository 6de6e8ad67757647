"""What the dashboard shows, aggregated on the server so that a campaign with tens of
thousands of trials stays fast to open: downsampled plot data, the trials table (sorted
and filtered on the server), learning curves of chosen trials, the running trials with
their latest report, a timeline of attempts, agents with their current trial and
health, and a CSV of the trials."""

from __future__ import annotations

from hpcopt_server.service.insights.base import AgentView, Ran, RunningPage, TablePage, TrialDetail
from hpcopt_server.service.insights.plots import Plots
from hpcopt_server.service.insights.runs import Runs
from hpcopt_server.service.insights.table import Table


class InsightService(Plots, Table, Runs):
    """The dashboard's views, one module each: ``plots`` (plot data, curves), ``table``
    (the trials table and its CSV) and ``runs`` (a trial, running trials, the timeline,
    agents), over ``base``."""


__all__ = [
    "AgentView",
    "InsightService",
    "Ran",
    "RunningPage",
    "TablePage",
    "TrialDetail",
]
