"""What the server writes for a reader when an agent call changes a trial or a
campaign: the words, given the facts the storage read in the same transaction
(``storage.agent_calls.Wording``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime

from hpcopt_server import domain as d


class ServiceWording:
    def pruned_by_agent(self, reason: str, last: d.CurvePoint | None, others: Sequence[float]) -> str:
        """The agent's reason, and where the trial stood: its latest learning-curve point
        (the value it is kept with, as the server's pruners keep theirs) against the
        median of the completed trials there (what the median pruner judges by)."""
        said = reason or "pruned by its agent (no reason given)"
        if last is None:
            return said
        median = (
            f"; the median of the {len(others)} completed trials there: {statistics.median(others):.4g}"
            if others
            else ""
        )
        return said + f" (at fold {last.fold}, epoch {last.step}: {last.value:.4g}{median})"

    def paused_for_failures(self, campaign_id: int, n: int, signature: str, now: datetime) -> str:
        return (
            f"{n} trials in a row failed the same way ({signature}); paused at "
            f"{now.isoformat(timespec='seconds')} so the rest of the budget is not spent on it. Fix the task, then "
            f"`hpcopt resume {campaign_id}` (or Resume in the dashboard); the trials' errors and events hold the "
            "tracebacks"
        )
