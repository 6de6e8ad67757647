"""The agent calls' one writer: acquire, heartbeat, report, fold, complete, release, and
the requeue that an expired lease or an exiting agent causes.

Each call is one method with a typed result: what it changed, or :class:`Refused`
naming why it changed nothing. How a call reaches the database is decided here and
nowhere else:

- PostgreSQL answers a heartbeat, a report, a finished fold or a completion (after an
  unlocked read of the folds) in one statement that commits by itself, its guards in
  its WHERE (``agent_sql.PG_*``);
- SQLite runs the same guards as a few lean statements in one write transaction; one
  before 3.35, which has no ``RETURNING``, reads what a statement changed with a
  ``SELECT`` in that transaction (SQLite has one writer, so nothing changes between);
- when a guarded statement matches nothing, :meth:`AgentCalls._diagnose` reads the
  trial (read-only) and applies ``hpcopt_server.rules`` to name the reason: an expired
  lease, another agent's lease, a finished trial or fold, a replayed report (which is
  answered as the first was).

Lock order, as for every writer: the campaign row, then the trial row. Heartbeats,
reports and folds lock their trial row only. Campaign specs never change, so they are
cached per process.
"""

from __future__ import annotations

from hpcopt_server.storage.agent_calls.acquiring import Acquiring
from hpcopt_server.storage.agent_calls.base import DONE, PAUSED, WAIT, FoldDone, HeldLease, Refused, Reported, Suggest
from hpcopt_server.storage.agent_calls.ending import Ending
from hpcopt_server.storage.agent_calls.running import Running

__all__ = ["DONE", "PAUSED", "WAIT", "AgentCalls", "FoldDone", "HeldLease", "Refused", "Reported", "Suggest"]


class AgentCalls(Running, Acquiring, Ending):
    """The agent calls' one writer, one family of calls per module: ``running``
    (heartbeat, report, fold, event), ``acquiring``, ``ending`` (complete, release,
    prune, expire, deregister), over ``base`` (results, cache, requeue, diagnosis)."""
