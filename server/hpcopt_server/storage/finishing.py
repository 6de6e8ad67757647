"""The one writer of the transitions that take a finish number.

Every trial that reaches a final state (COMPLETED, FAILED, PRUNED, CANCELLED) gets the
next ``finish_seq`` of its campaign, handed out under the campaign's row lock: the
optimizer cache reads "everything finished after n" by it and misses nothing
(``service/suggestions.py``). Completion, release, pruning, an expired lease's last
attempt, a cancel and an import's finished trials all take it here and nowhere else:

- :meth:`Finishing.finish`: any final state, in the caller's transaction (the campaign
  row locked first, the lock order);
- :meth:`Finishing.complete`: an agent's completion, guarded by its lease; a trial whose
  lease no longer holds changes nothing and takes no number;
- :meth:`Finishing.complete_alone`: PostgreSQL's completion in one statement that
  commits by itself (``agent_sql.PG_COMPLETE``), the campaign's lock held for that
  statement only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, update
from sqlalchemy.exc import DataError

from hpcopt_server import domain as d
from hpcopt_server.storage import agent_sql as S

#: A completion's constraint columns when it gives none (a campaign without constraints).
NO_OUTCOME = {"cvals": None, "violation": None, "broken": ""}


class Finishing:
    """``returning``: whether the database answers ``UPDATE … RETURNING``."""

    def __init__(self, returning: bool):
        self.returning = returning

    def take(self, c: Connection, campaign_id: int) -> tuple[int, str, int]:
        """Takes the campaign's row lock (to the commit) and its next finish number:
        (number, the campaign's state, its budget's ``max_trials`` now)."""
        p = {"cid": campaign_id}
        if self.returning:
            row = S.run(c, S.COUNT_FINISHED, p).one()
        else:
            S.run(c, S.COUNT_FINISHED_PLAIN, p)
            row = c.execute(S.FINISHED_COUNT, p).one()
        return int(row[0]), str(row[1]), int(row[2]["max_trials"])

    def finish(
        self, c: Connection, campaign_id: int, trial_id: int, state: d.TrialState, now: datetime, **columns: Any
    ) -> int:
        """The trial in ``state``, finished at ``now`` under the next number (returned),
        ``columns`` set and the others kept."""
        seq, _, _ = self.take(c, campaign_id)
        q = update(S.T).where(S.T.c.id == trial_id, S.T.c.campaign_id == campaign_id)
        c.execute(q.values(state=state.value, finished_at=now, finish_seq=seq, **columns))
        return seq

    def complete(self, c: Connection, p: dict[str, Any]) -> tuple[int, str, int] | None:
        """COMPLETED with ``p``'s value, spread, values and constraint columns
        (``rules.FoldSummary.constraint_columns``; none by default) if ``p``'s lease still holds
        the trial: (its number, the campaign's state, its ``max_trials``); None, and the
        caller rolls back (the number is not spent), if it does not."""
        taken = self.take(c, p["cid"])
        if not S.run(c, S.COMPLETE, {**NO_OUTCOME, **p, "seq": taken[0]}).rowcount:
            return None
        return taken

    @staticmethod
    def complete_alone(c: Connection, p: dict[str, Any]) -> int | None:
        """:meth:`complete`, its event and the campaign's end in one statement on an
        autocommit connection (PostgreSQL): the number, or None when the lease no
        longer held (nothing changed)."""
        try:
            row = c.execute(S.PG_COMPLETE, {**NO_OUTCOME, **p}).first()
        except DataError:  # the trial's guard failed under its lock: nothing was changed
            return None
        return None if row is None else int(row[0])
