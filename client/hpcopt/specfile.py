"""Read campaign spec files (YAML or JSON) with errors that point into the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from hpcopt.spec import CampaignSpec, SpecError, parse_spec


def load_document(path: str | Path) -> tuple[Any, str]:
    """Returns the parsed document and its text. Raises SpecError on a syntax error."""
    text = Path(path).read_text()
    try:
        if str(path).endswith(".json"):
            return json.loads(text), text
        return yaml.safe_load(text), text
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise SpecError([("", f"{path}: not valid YAML/JSON: {exc}")]) from None


def locate(text: str, path: str) -> tuple[int, int] | None:
    """1-based (line, column) of the node at a dotted field path in a YAML/JSON text.

    Returns the deepest node found along the path (the parent of a missing field).
    """
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    found = node
    for part in [p for p in path.split(".") if p]:
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    nxt = value
                    break
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            nxt = node.value[int(part)]
        if nxt is None:
            break
        node = found = nxt
    return found.start_mark.line + 1, found.start_mark.column + 1


def load_spec_file(path: str | Path) -> CampaignSpec:
    """Loads and validates a spec file; errors carry ``file:line:col`` where known."""
    data, text = load_document(path)
    try:
        return parse_spec(data)
    except SpecError as exc:
        located = []
        for field, msg in exc.errors:
            pos = locate(text, field)
            where = f"{path}:{pos[0]}:{pos[1]}" if pos else str(path)
            located.append((field, f"{msg} ({where})"))
        raise SpecError(located) from None
