"""Limits on what one request may ask of the server, and the checks that apply them.

Every id, step and string that reaches SQL passes one of these first, so a value the
database cannot hold (an id past its 32-bit columns, a NUL in a PostgreSQL text column,
a string past its column's width) is an InvalidArgument naming the field, never an
INTERNAL error, and is the same answer on SQLite and PostgreSQL.

Widths chosen: ids, trial numbers, steps, folds and attempts are 32-bit signed columns
(``Integer``) on both databases. A campaign holds at most 1,000,000 trials and a run
reports a few thousand steps, so 2**31 - 1 leaves a wide margin; the proto fields are
64-bit so that the contract can widen later without a wire change.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hpcopt.core.documents import UNSAFE_CHARS, clip
from hpcopt.core.options import Option
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.settings import setting


@dataclass(frozen=True)
class RequestLimits:
    """Sizes of the documents a request may carry, and the creation quota
    (``hpcopt-server serve`` flags)."""

    spec_bytes: int = setting(
        Option(
            1024 * 1024,
            int,
            1,
            doc="largest campaign spec document as sent (REST body, gRPC spec_json; YAML or JSON); the spec "
            "itself, as canonical JSON, is further held to hpcopt.core.spec.MAX_SPEC_BYTES",
        ),
        name="max_spec_bytes",
    )
    import_bytes: int = setting(
        Option(
            32 * 1024 * 1024,
            int,
            1,
            doc="largest export document to import (JSON; a campaign of 10,000 trials with curves is ~10 MB)",
        ),
        name="max_import_bytes",
    )
    import_trials: int = setting(
        Option(
            20_000,
            int,
            1,
            doc="trials one import may hold (a bigger campaign is split, or imported by a server started with a "
            "larger limit)",
        ),
        name="max_import_trials",
    )
    import_curve_points: int = setting(
        Option(500_000, int, 1, doc="learning-curve points one import may hold, over all its trials"),
        name="max_import_curve_points",
    )
    import_events: int = setting(
        Option(200_000, int, 1, doc="attempt-history events one import may hold, over all its trials"),
        name="max_import_events",
    )
    campaigns_per_hour: int = setting(
        Option(
            200,
            int,
            0,
            doc="campaigns one token may create or import in any hour (429 / RESOURCE_EXHAUSTED past it, with when "
            "to retry); 0: no quota. Admin tokens, and calls with auth off, have none",
        ),
        name="max_campaigns_per_hour",
    )


#: The largest value of the database's integer columns (ids, numbers, steps).
MAX_ID = 2**31 - 1
#: Agent-given text stored in fixed-width columns.
MAX_HOST = 255
MAX_SHORT = 64
#: Free text: release reasons, error texts, checkpoint URIs.
MAX_REASON = 10_000
MAX_EXIT_REASON = 1_000
MAX_URI = 4096
#: A note on a campaign or trial (characters).
MAX_NOTE = 20_000
#: Metrics reported with one fold.
MAX_METRICS = 100
MAX_METRIC_NAME = 128
#: Parents a PBT interval may find unreadable (and be re-planned after) per interval.
MAX_UNREADABLE = 32


def require_id(field: str, value: int) -> int:
    """A row id (campaign, trial, token): 1..MAX_ID."""
    if not 1 <= value <= MAX_ID:
        raise InvalidArgument(f"{field} must be in 1..{MAX_ID}, got {value}", [(field, f"must be in 1..{MAX_ID}")])
    return value


def require_range(field: str, value: int, low: int, high: int = MAX_ID) -> int:
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be in {low}..{high}, got {value}", [(field, f"must be in {low}..{high}")])
    return value


#: The most trials one page of a listing holds.
MAX_PAGE = 10_000


def require_page(offset: int, limit: int, max_limit: int = MAX_PAGE) -> None:
    """A listing's ``offset`` (0..MAX_ID) and ``limit`` (1..max_limit)."""
    require_range("offset", offset, 0)
    require_range("limit", limit, 1, max_limit)


def require_text(field: str, value: str, max_chars: int) -> str:
    """Text without NUL characters, at most ``max_chars`` long (not silently cut)."""
    if "\x00" in value:
        raise InvalidArgument(f"{field} must not contain NUL characters", [(field, "must not contain NUL characters")])
    if len(value) > max_chars:
        raise InvalidArgument(
            f"{field} is {len(value)} characters long; at most {max_chars} are allowed",
            [(field, f"at most {max_chars} characters")],
        )
    return value


def require_safe_text(field: str, value: str, max_chars: int) -> str:
    """:func:`require_text` that also refuses control characters (ANSI escapes, CR/LF,
    C1 codes, bidirectional overrides): for identifiers that reach terminals and logs."""
    require_text(field, value, max_chars)
    bad = UNSAFE_CHARS.search(value)
    if bad:
        what = f"U+{ord(bad.group()):04X}"
        raise InvalidArgument(
            f"{field} must not contain control characters (found {what} at {bad.start()})",
            [(field, "must not contain control characters (C0/C1 controls, DEL, bidirectional overrides)")],
        )
    return value


#: Control characters a multi-line text may not hold: UNSAFE_CHARS but newline and tab.
_UNSAFE_IN_TEXT = re.compile(UNSAFE_CHARS.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))


def require_multiline_text(field: str, value: str, max_chars: int) -> str:
    """:func:`require_text` for prose (notes): newlines and tabs are kept, Windows line
    ends become newlines, and every other control character (ANSI escapes, a lone CR,
    C1 codes, bidirectional overrides) is refused. The text as it is to be stored."""
    value = value.replace("\r\n", "\n")
    require_text(field, value, max_chars)
    bad = _UNSAFE_IN_TEXT.search(value)
    if bad:
        raise InvalidArgument(
            f"{field} must not contain control characters (found U+{ord(bad.group()):04X} at {bad.start()})",
            [(field, "must not contain control characters but newlines and tabs")],
        )
    return value


def require_finite(field: str, value: float) -> float:
    if not math.isfinite(value):
        raise InvalidArgument(f"{field} must be a finite number, got {value}", [(field, "must be finite")])
    return float(value)


def require_metrics(field: str, metrics: dict[str, float]) -> dict[str, float]:
    """Named finite values, at most MAX_METRICS of them with names of MAX_METRIC_NAME."""
    if len(metrics) > MAX_METRICS:
        raise InvalidArgument(
            f"{field} has {len(metrics)} entries; at most {MAX_METRICS} are allowed",
            [(field, f"at most {MAX_METRICS} entries")],
        )
    out = {}
    for name, value in metrics.items():
        key = f"{field}.{clip(name)}"
        require_safe_text(key, name, MAX_METRIC_NAME)
        out[name] = require_finite(key, value)
    return out
