"""Answers that cost seconds on a big campaign, computed once and shared by every tab.

On a campaign of 100,000 trials the plot data, the parameter importance and the
timeline each cost 0.9 to 1.7 s of the server's CPU, and while agents finish trials every
second each open dashboard tab would ask for all three on every poll: a few tabs would
take the whole process (and, through the interpreter's lock, the agents' calls with
it). Here each answer is kept with the campaign's revision it was computed at and what
it cost. It is recomputed when the revision changed *and* ``factor`` times its cost has
passed since it was computed, so a view that costs c seconds takes at most 1/factor of
one core however many tabs poll it, and is at most ``factor * c`` seconds stale (15 s
for the plot data of 100,000 trials; a few milliseconds, so always fresh, on a campaign
of hundreds). One computation at a time per answer: tabs asking together wait for it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class _Entry:
    revision: str
    value: Any
    at: float
    cost: float


class SharedAnswers:
    def __init__(self, factor: float = 10.0, size: int = 64, clock: Callable[[], float] = time.monotonic):
        self.factor, self.size, self.clock = factor, size, clock
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._locks: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    def _fresh(self, entry: _Entry | None, revision: str) -> bool:
        if entry is None:
            return False
        return entry.revision == revision or self.clock() - entry.at < self.factor * entry.cost

    def served(self, key: Hashable, revision: str) -> str:
        """The revision :meth:`get` would answer with now (for an ETag checked before work)."""
        with self._lock:
            entry = self._entries.get(key)
        return entry.revision if entry is not None and self._fresh(entry, revision) else revision

    def get(self, key: Hashable, revision: str, compute: Callable[[], T]) -> tuple[str, T]:
        """(revision, answer): the kept answer while it is fresh enough, else ``compute()``."""
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                entry = self._entries.get(key)
            if entry is not None and self._fresh(entry, revision):
                return entry.revision, entry.value
            t0 = self.clock()
            value = compute()
            with self._lock:
                self._entries[key] = _Entry(revision, value, self.clock(), self.clock() - t0)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    old, _ = self._entries.popitem(last=False)
                    self._locks.pop(old, None)
            return revision, value
