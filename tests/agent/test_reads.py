"""What the task reads of a trial's parameters (``hpcopt_agent.reads``): names read by
key, by ``in`` and by ``get``; a hand-on of the whole mapping counts as reading all."""

from __future__ import annotations

import pickle
from typing import Any

from hpcopt_agent.reads import MAX_NAMED, ReadParams, agents_own, unread_note


def _build(lr: float, width: int = 16) -> tuple[float, int]:
    return lr, width


def test_names_read_one_by_one_are_told_apart_from_names_asked_for_in_vain() -> None:
    p = ReadParams({"lr": 0.1, "widht": 32, "scheme": "easgd", "easgd.tau": 4})
    assert p["lr"] == 0.1 and p.get("width", 16) == 16 and "depth" not in p
    assert p.read == {"lr"} and p.asked == {"width", "depth"}
    # The agent's own parameters (the searched scheme and its knobs) are not the task's.
    assert agents_own("scheme") and agents_own("easgd.tau") and not agents_own("my.lr")
    assert unread_note(p) == (
        "the task never read parameter(s) widht; it asked for depth, width, which the trial does not have "
        "(a slip? 'widht' for 'width')"
    )


def test_a_hand_on_of_the_whole_mapping_reads_every_name() -> None:
    ways: list[Any] = [
        lambda p: _build(**p),
        lambda p: dict(p),
        lambda p: {**p},
        lambda p: list(p.items()),
        lambda p: p.copy(),
        lambda p: [k for k in p],
        lambda p: pickle.loads(pickle.dumps(p)),
    ]
    for way in ways:
        p = ReadParams({"lr": 0.1, "width": 8})
        way(p)
        assert unread_note(p) == "", way
    # Pickled (MPI, a checkpoint), it is the plain mapping: nothing of the agent to import.
    assert type(pickle.loads(pickle.dumps(ReadParams({"lr": 1})))) is dict


def test_a_task_that_reads_everything_gets_no_note_and_a_long_list_is_cut() -> None:
    p = ReadParams({"lr": 0.1})
    assert p["lr"] and unread_note(p) == ""
    many = ReadParams({f"p{i:02d}": i for i in range(MAX_NAMED + 5)})
    note = unread_note(many)
    assert note.startswith("the task never read parameter(s) p00, p01,") and note.endswith("and 5 more"), note
