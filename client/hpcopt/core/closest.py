"""The "did you mean" of every error that names an unknown key: a spec field, an
optimizer's or a scheme's option, a trial parameter. One rule, so that the same slip
reads the same wherever it is made."""

from __future__ import annotations

from collections.abc import Iterable


def _distance(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: insertions, deletions, substitutions and swaps of two
    neighbours (the optimal string alignment distance)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a slip for: the same but for case, ``-``
    for ``_``, an abbreviation of one name (3 letters or more), or one edit away (two
    for names of 7 letters or more); None when no name is that close, or two are."""
    folded = {str(k).lower().replace("-", "_"): str(k) for k in known}
    key = name.lower().replace("-", "_")
    if key in folded:
        return folded[key]
    starts = [k for k in folded if len(key) >= 3 and k.startswith(key)]
    if len(starts) == 1:  # an abbreviation: max for maximize
        return folded[starts[0]]
    if len(key) < 3 or len(key) > 100:
        return None
    limit = 1 if len(key) < 7 else 2
    near = sorted((_distance(key, k), k) for k in folded if abs(len(k) - len(key)) <= limit)
    near = [(n, k) for n, k in near if n <= limit]
    if not near or (len(near) > 1 and near[1][0] == near[0][0]):
        return None
    return folded[near[0][1]]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'scale'?"`` for a slip, or ``""``: appended to an error's message."""
    guess = closest(name, known)
    return f"; did you mean {guess!r}?" if guess is not None and guess != name else ""
