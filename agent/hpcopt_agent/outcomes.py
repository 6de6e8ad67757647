"""The agent's decisions and outcomes, each an enum rather than a bare int or string.

- :class:`Verdict`: a fold group's agreement after each stage (an MPI ``MAX`` over its
  ranks, so one failing rank fails the fold, and a preemption beats going on).
- :class:`Decision`: what a trial group's leader decides before each trial and
  broadcasts to its group.
- :class:`Outcome`: how a fold ended, and what a report's answer means for it. The
  server's answers (:class:`hpcopt.Action`) map onto it with :meth:`Outcome.of`.

The string enums compare equal to their values, so a log line or a test that reads
``"completed"`` reads the same as before."""

from __future__ import annotations

from enum import IntEnum, StrEnum

from hpcopt import Action


class Verdict(IntEnum):
    """A fold group's agreement: the ranks' maximum (failure > preemption > ok)."""

    OK = 0
    PREEMPT = 1
    FAILED = 2


class Decision(StrEnum):
    """A trial group leader's decision before a trial."""

    #: Run the trial acquired (the payload is the grant).
    TRIAL = "trial"
    #: Nothing to run now (the parallel budget is in use, or the campaign paused): ask again.
    WAIT = "wait"
    #: A normal end: the campaign is done, a signal, ``--max-trials``, the walltime.
    STOP = "stop"
    #: The server failed us: the agent ends with an error.
    ERROR = "error"
    #: Leave the layout at this trial boundary and plan the world again.
    REPLAN = "replan"
    #: Compute the analysis of a finished trial a user asked for (the payload says which).
    ANALYSE = "analyse"

    @property
    def ends(self) -> bool:
        """Whether the group leaves its trial loop on it."""
        return self in (Decision.STOP, Decision.ERROR, Decision.REPLAN)


class Outcome(StrEnum):
    """How a fold ended on this rank, or what the answer to its last report means."""

    #: The server's answer to a report: go on training.
    CONTINUE = "continue"
    COMPLETED = "completed"
    PREEMPTED = "preempted"
    FAILED = "failed"
    #: The server's pruner stopped the trial.
    PRUNED = "pruned"
    #: A user cancelled the trial or its campaign.
    CANCELLED = "cancelled"
    #: The lease is gone (expired or taken over), or the server is unreachable past the
    #: retries: the server requeues the trial.
    LOST = "lost"

    @classmethod
    def of(cls, action: Action) -> Outcome:
        """The server's answer to a report or a heartbeat."""
        return cls(action.value)
