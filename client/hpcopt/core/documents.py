"""Parse untrusted JSON and YAML documents at a bounded cost.

Every front door (REST bodies, gRPC ``*_json`` fields, spec files) parses through
:func:`parse_document`, so one set of rules holds everywhere:

- size: at most ``max_bytes`` of text;
- YAML aliases (``*name``) are refused: an alias bomb of a few hundred bytes expands to
  gigabytes in PyYAML (measured: 594 bytes took 27.6 s and 900 MB before this check);
- nesting: at most :data:`MAX_DEPTH` levels of mappings and lists, checked while the
  YAML events stream by and after JSON decoding (whose C scanner itself stops at
  Python's recursion limit);
- numbers: NaN and infinities are refused wherever they appear (a JSON column cannot
  store them on PostgreSQL and drops them on SQLite);
- text: NUL characters are refused in every key and string (PostgreSQL cannot store them).

Errors are :class:`DocumentError` with ``(field path, message)`` pairs, like spec errors.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

from hpcopt.errors import DocumentError

#: Deepest nesting of mappings and lists a document may have. A campaign spec needs 4,
#: an export document 5; 32 leaves room for ``training.options``.
MAX_DEPTH = 32
#: Longest key or string echoed back in a field path or message.
ECHO_CHARS = 64

#: Characters refused in identifiers (names, hosts, job ids, URIs): C0 and C1 controls
#: (ANSI escapes start with ESC; CR/LF forge log lines), DEL, and the bidirectional
#: overrides and marks that make a terminal or a page show text in another order than
#: it is stored.
UNSAFE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

_YAML_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marked when cut (for echoing input back)."""
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"


def parse_document(
    raw: bytes | str, *, yaml_syntax: bool, max_bytes: int, what: str = "document", source: str = ""
) -> Any:
    """The parsed JSON (or YAML) document ``raw``, checked as the module docstring says;
    ``source`` (a file name) prefixes the line:column of a syntax error."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise DocumentError([("", f"the {what} is {size} bytes; at most {max_bytes} are accepted")])
    text = raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace")
    if yaml_syntax:
        _check_yaml_events(text, what, source)
    try:
        data = yaml.load(text, Loader=_YAML_LOADER) if yaml_syntax else json.loads(text)
    except RecursionError:
        raise DocumentError([("", f"the {what} nests deeper than {MAX_DEPTH} levels")]) from None
    except (yaml.YAMLError, ValueError) as exc:
        kind = "YAML" if yaml_syntax else "JSON"
        problem = yaml_problem(exc, source) if isinstance(exc, yaml.YAMLError) else str(exc)
        raise DocumentError([("", f"the {what} is not valid {kind}: {clip(problem, 300)}")]) from None
    check_values(data, what)
    return data


def _check_yaml_events(text: str, what: str, source: str = "") -> None:
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_YAML_LOADER):
            if isinstance(event, yaml.AliasEvent):
                alias = clip(event.anchor or "")
                raise DocumentError([("", f"the {what} uses a YAML alias (*{alias}); aliases are not accepted")])
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise DocumentError([("", f"the {what} nests deeper than {MAX_DEPTH} levels")])
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise DocumentError([("", f"the {what} is not valid YAML: {clip(yaml_problem(exc, source), 300)}")]) from None


def yaml_problem(exc: yaml.YAMLError, source: str) -> str:
    """PyYAML's error with the document's name and line:column (its own text says
    ``in "<unicode string>"`` for a string)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return str(exc)
    mark = exc.problem_mark
    text = f"{exc.problem} at {source + ':' if source else 'line:column '}{mark.line + 1}:{mark.column + 1}"
    if exc.context and exc.context_mark is not None:
        ctx = exc.context_mark
        text += f" ({exc.context} that starts at {ctx.line + 1}:{ctx.column + 1})"
    elif exc.context:
        text += f" ({exc.context})"
    return text


def check_values(data: Any, what: str = "document") -> None:
    """Refuses depth beyond :data:`MAX_DEPTH`, non-finite numbers and NUL characters in
    an already parsed document (iteratively: a deep document cannot exhaust the stack).
    Only containers are stacked and a path is spelled only for an error, so a 31 MB array
    of numbers costs a pass over it, not a string and a tuple per element."""
    errors: list[tuple[str, str]] = []

    def scalar(value: Any, path: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            errors.append((path, f"must be a finite number, not {value}"))
        elif isinstance(value, str) and "\x00" in value:
            errors.append((path, "must not contain NUL characters"))

    if not isinstance(data, dict | list):
        scalar(data, "")
    stack: list[tuple[Any, str, int]] = [(data, "", 0)] if isinstance(data, dict | list) else []
    while stack and len(errors) < 10:
        node, path, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise DocumentError([("", f"the {what} nests deeper than {MAX_DEPTH} levels")])
        is_dict = isinstance(node, dict)
        for key, value in node.items() if is_dict else enumerate(node):
            if is_dict and isinstance(key, str) and "\x00" in key:
                errors.append((path, f"key {clip(key)!r} contains a NUL character"))
                continue
            kind = type(value)
            if kind is int or kind is bool or value is None:
                continue
            child = f"{path}.{clip(str(key))}" if path else clip(str(key))
            if kind is dict or kind is list:
                stack.append((value, child, depth + 1))
            else:
                scalar(value, child)
    if errors:
        raise DocumentError(sorted(errors))
