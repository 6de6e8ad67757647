"""Which of a trial's parameters the task reads. A name the task never reads is most
often a slip (``--params lrr=0.1``, a space parameter the task spells otherwise), and
the search then spends a dimension on nothing; a name it asks for that the trial lacks
(``params.get("lr", 0.01)``) means it trained on its own default. The fold trainer hands
the task a :class:`ReadParams`; at the end of a trial's fold 0 what it saw becomes a
warning in the log and a ``params_unread`` event on the trial (``hpcopt trial``, the
dashboard, and ``hpcopt-agent try``, which refuses the run)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hpcopt.core.closest import closest
from hpcopt.core.schemes import KNOBS

#: Names listed in one note, at most (the rest are counted).
MAX_NAMED = 10


class ReadParams(dict[str, Any]):
    """A trial's parameters, noting the names the task reads and the names it asks for
    that are not there. Whatever hands on the whole mapping (iterating it, ``items()``,
    ``**params``, a copy) counts as reading every name: no false alarm."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.read: set[str] = set()
        self.asked: set[str] = set()

    def _note(self, key: Any) -> None:
        if isinstance(key, str):
            (self.read if dict.__contains__(self, key) else self.asked).add(key)

    def _all(self) -> None:
        self.read.update(dict.keys(self))

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return dict.__contains__(self, key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return dict.setdefault(self, key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self._note(key)
        return dict.pop(self, key, *default)

    def __iter__(self) -> Iterator[str]:
        self._all()
        return dict.__iter__(self)

    def keys(self) -> Any:
        self._all()
        return dict.keys(self)

    def values(self) -> Any:
        self._all()
        return dict.values(self)

    def items(self) -> Any:
        self._all()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self._all()
        return dict(dict.items(self))

    def __reduce__(self) -> Any:  # pickles (and checkpoints) as the plain dict it holds
        self._all()
        return (dict, (dict(dict.items(self)),))


def agents_own(name: str) -> bool:
    """A parameter the agent reads, not the task: the searched ``scheme`` and its knobs
    (``easgd.tau``)."""
    head, dot, _ = name.partition(".")
    return name == "scheme" or (bool(dot) and head in KNOBS)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def unread_note(params: ReadParams) -> str:
    """What the task did not read of ``params`` and what it asked for in vain, with the
    likely slip; "" when it read every parameter of its own."""
    unread = sorted(k for k in dict.keys(params) if k not in params.read and not agents_own(k))
    if not unread:
        return ""
    text = f"the task never read parameter(s) {_names(unread)}"
    asked = sorted(params.asked)
    if asked:
        text += f"; it asked for {_names(asked)}, which the trial does not have"
    guesses = [f"{k!r} for {g!r}" for k in unread if (g := closest(k, asked)) is not None]
    if guesses:
        text += f" (a slip? {', '.join(guesses[:MAX_NAMED])})"
    return text
