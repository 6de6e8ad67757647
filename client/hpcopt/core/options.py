"""One declaration of an option: its default, kind, bounds, choices and meaning.

The training schemes' knobs (``hpcopt.core.schemes``), the optimizers' ``algorithm.options``
and the pruners' ``pruner.options`` are all declared as :class:`Option` tables, on the
class they configure. The same declaration checks a value at submission (naming the
field), supplies the default when the value is absent, and writes the options reference
in the docs (``scripts/gen_docs.py``), so a default is written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpcopt.core.closest import did_you_mean
from hpcopt.errors import OptionError


@dataclass(frozen=True)
class Option:
    """``kind`` is bool, str (one of ``choices`` when given), int, float or dict (a
    mapping the class checks further)."""

    default: Any
    kind: type
    low: float | None = None
    high: float | None = None
    #: The low bound is excluded (a rate that must be > 0).
    open_low: bool = False
    choices: tuple[str, ...] = ()
    #: None is allowed and means "not set" (an unbounded staleness, a derived rate).
    optional: bool = False
    doc: str = ""
    #: Choices that hand the training to another scheme (allreduce's backend horovod).
    runs_as: tuple[tuple[str, str], ...] = ()
    #: The default in words where it is worked out from the campaign (``default`` None).
    derived: str = ""

    def check(self, field: str, value: Any) -> Any:
        """``value`` as this option's kind; OptionError naming ``field`` otherwise."""
        if value is None:
            if self.optional:
                return None
            raise OptionError(field, f"must be set ({self.describe()})")
        if self.kind is bool:
            if not isinstance(value, bool):
                raise OptionError(field, f"must be true or false, got {value!r}")
            return value
        if self.kind is str:
            if self.choices and value not in self.choices:
                hint = did_you_mean(value, self.choices) if isinstance(value, str) else ""
                raise OptionError(field, f"must be one of {', '.join(self.choices)}; got {value!r}{hint}")
            if not isinstance(value, str):
                raise OptionError(field, f"must be text, got {value!r}")
            return value
        if self.kind is dict:
            if not isinstance(value, dict):
                raise OptionError(field, f"must be a mapping, got {value!r}")
            return value
        if self.kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise OptionError(field, f"must be a list of names, got {value!r}")
            return list(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OptionError(field, f"must be {self.describe()}, got {value!r}")
        if self.kind is int and not (isinstance(value, int) or float(value).is_integer()):
            raise OptionError(field, f"must be an integer ({self.describe()}), got {value!r}")
        if not math.isfinite(value):
            raise OptionError(field, f"must be a finite number ({self.describe()}), got {value!r}")
        low_bad = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        if low_bad or (self.high is not None and value > self.high):
            raise OptionError(field, f"must be {self.describe()}, got {value!r}")
        return int(value) if self.kind is int else float(value)

    def describe(self) -> str:
        """What the option accepts, in words."""
        extra = ", or null" if self.optional else ""
        if self.kind is bool:
            return "true or false" + extra
        if self.kind is str:
            return ("one of " + ", ".join(self.choices) if self.choices else "text") + extra
        if self.kind is dict:
            return "a mapping" + extra
        if self.kind is list:
            return "a list of names" + extra
        what = "an integer" if self.kind is int else "a number"
        low = "" if self.low is None else f"{'>' if self.open_low else '>='} {_number(self.low)}"
        high = "" if self.high is None else f"<= {_number(self.high)}"
        bounds = " and ".join(b for b in (low, high) if b)
        return f"{what} {bounds}{extra}".strip()

    def shown_default(self) -> str:
        """The default as the docs show it."""
        if self.derived:
            return self.derived
        if self.default is None:
            return "null"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return _number(self.default) if isinstance(self.default, float) else str(self.default)


def _number(x: float) -> str:
    """1000000 rather than 1e+06; 0.2 as 0.2."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def unknown(given: dict[str, Any], declared: dict[str, Option], field: str, what: str) -> None:
    """OptionError naming the first option in ``given`` that ``declared`` lacks."""
    extra = sorted(set(given) - set(declared))
    if extra:
        known = ", ".join(declared) or "none"
        hint = did_you_mean(extra[0], declared)
        raise OptionError(f"{field}.{extra[0]}", f"is not an option of {what}; known: {known}{hint}")
