"""The storage interface: a unit of work (:class:`Tx`, one transaction) made of small
repositories, one per aggregate, whose methods speak domain objects.

Usage::

    storage = Storage("sqlite:///hpcopt.db")
    with storage.write() as tx:        # one transaction, committed on exit
        campaign = tx.campaigns.lock(7)
        trials, total = tx.trials.page(7, states=[TrialState.QUEUED])

===================  ==========================================================
``tx.campaigns``     campaign rows, their row lock, state and trial numbering
``tx.trials``        trial rows, folds, curve points, the event log; ``finish``
``tx.fidelity``      a multi-fidelity trial's rung: its pause and its promotion
``tx.agents``        agent rows, when each was heard from, the trials it holds
``tx.tokens``        API tokens (hashes only); ``tx.flags`` the server's flags
``tx.notes``         notes, saved with optimistic concurrency
``tx.analyses``      a fold's curvature and landscape (the spec's ``analysis``)
``tx.views``         the dashboard's read-only views
``tx.results``       read-only results: what optimizers, pruners, insights read
===================  ==========================================================

The agents' calls (acquire, heartbeat, report, complete, release) are not here: they
are :class:`hpcopt_server.storage.agent_calls.AgentCalls`, one method each, on the
connection of a unit of work (:meth:`Tx.connection`). Every transition that takes a
finish number goes through :mod:`hpcopt_server.storage.finishing`.

Contract for every implementation (the conformance suite in
``tests/server/test_storage.py`` runs it on SQLite, SQLite without ``RETURNING`` and
PostgreSQL, a test class per repository):

- Nothing is visible to other transactions before the ``with`` block exits cleanly; an
  exception rolls everything back.
- ``campaigns.lock`` serializes writers of one campaign across threads *and* processes
  (PostgreSQL ``FOR UPDATE``; SQLite's single writer).
- ``trials.expired`` never returns a row another open transaction has locked
  (PostgreSQL ``FOR UPDATE SKIP LOCKED``).
- Methods that look one thing up return ``None`` when it does not exist; methods that
  change one thing raise ``KeyError`` when it does not.
- ``views`` and ``results`` never write.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from hpcopt_server.storage.agents import AgentStore
from hpcopt_server.storage.analyses import AnalysisStore
from hpcopt_server.storage.campaigns import CAMPAIGN_SORT_KEYS, CampaignStore
from hpcopt_server.storage.db import Database
from hpcopt_server.storage.fidelity import FidelityStore
from hpcopt_server.storage.finishing import Finishing
from hpcopt_server.storage.notes import NoteStore
from hpcopt_server.storage.results import ResultStore
from hpcopt_server.storage.tokens import FlagStore, TokenStore
from hpcopt_server.storage.trials import RESULT_SORTS, TRIAL_SORT_KEYS, TrialStore
from hpcopt_server.storage.views import ViewStore

__all__ = ["CAMPAIGN_SORT_KEYS", "RESULT_SORTS", "TRIAL_SORT_KEYS", "Storage", "Tx"]


class Storage:
    """Opens transactions on one database."""

    def __init__(self, url: str, *, pool_size: int = 16):
        self.db = Database(url, pool_size=pool_size)

    @property
    def dialect(self) -> str:
        return self.db.dialect

    @property
    def returning(self) -> bool:
        """Whether the database answers ``INSERT/UPDATE … RETURNING`` (PostgreSQL; SQLite
        from 3.35); without it the agents' calls read back what they changed."""
        d = self.db.engine.dialect
        return bool(
            d.update_returning and d.insert_returning and d.insert_executemany_returning_sort_by_parameter_order
        )

    @functools.cached_property
    def finishing(self) -> Finishing:
        """The writer of the transitions that take a finish number."""
        return Finishing(self.returning)

    @contextmanager
    def write(self) -> Iterator[Tx]:
        with self.db.transaction(write=True) as session:
            yield Tx(session, self.finishing)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self.db.transaction(write=False) as session:
            yield Tx(session, self.finishing)

    def close(self) -> None:
        self.db.dispose()


class Tx:
    """One transaction and its repositories (see the table above)."""

    def __init__(self, session: Session, finishing: Finishing):
        self.s = session
        self.campaigns = CampaignStore(session)
        self.trials = TrialStore(session, finishing)
        self.fidelity = FidelityStore(session)
        self.agents = AgentStore(session)
        self.tokens = TokenStore(session)
        self.flags = FlagStore(session)
        self.notes = NoteStore(session)
        self.analyses = AnalysisStore(session)
        self.views = ViewStore(session)
        self.results = ResultStore(session)

    def connection(self) -> Connection:
        """The transaction's connection, for statements built elsewhere (the agents'
        calls): what they change commits or rolls back with the rest."""
        return self.s.connection()
