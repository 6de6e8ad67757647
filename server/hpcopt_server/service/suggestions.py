"""Per-campaign optimizer state, cached in the server and rebuilt from SQL.

SQL is the truth. The cache remembers which finished trials each optimizer has seen;
before a suggestion it asks storage for the finished trials it has not seen (another
replica, or this server before a restart, may have finished them) and feeds only those
to ``observe``. So a cold cache rebuilds from the whole history once and a warm one
catches up incrementally.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.optimizers import REGISTRY, Optimizer, SearchSpace
from hpcopt_server.storage.repository import Tx


@dataclass
class _Entry:
    optimizer: Optimizer
    seen: set[int] = field(default_factory=set)


class OptimizerCache:
    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._lock = threading.Lock()

    def suggest(self, tx: Tx, campaign: d.Campaign, n: int = 1) -> list[d.Params]:
        """``n`` suggestions for the campaign; call with the campaign row locked."""
        entry = self._entry(campaign)
        trials, _ = tx.list_trials(campaign.id, with_folds=False)
        new = [t for t in trials if t.state.finished and t.id not in entry.seen]
        new.sort(key=lambda t: (t.finished_at or t.created_at, t.id))
        entry.optimizer.observe(new)
        entry.seen.update(t.id for t in new)
        pending = [t.params for t in trials if t.state in (d.TrialState.QUEUED, d.TrialState.RUNNING)]
        return entry.optimizer.suggest(n, pending)

    def forget(self, campaign_id: int) -> None:
        with self._lock:
            self._entries.pop(campaign_id, None)

    def _entry(self, campaign: d.Campaign) -> _Entry:
        with self._lock:
            entry = self._entries.get(campaign.id)
            if entry is None:
                entry = _Entry(build_optimizer(campaign))
                self._entries[campaign.id] = entry
            return entry


def build_optimizer(campaign: d.Campaign) -> Optimizer:
    algo = campaign.spec["algorithm"]
    factory = REGISTRY.get(algo["name"])
    if factory is None:
        raise InvalidArgument(
            f"algorithm.name: {algo['name']!r} is not available on this server; allowed: {sorted(REGISTRY)}",
            [("algorithm.name", f"must be one of {sorted(REGISTRY)}")],
        )
    seed = algo.get("seed")
    if seed is None:
        seed = zlib.crc32(f"{campaign.id}:{campaign.name}".encode())
    return factory(SearchSpace(campaign.spec["space"]), campaign.direction, int(seed), dict(algo["options"]))
