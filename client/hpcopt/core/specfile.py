"""Read campaign spec files (YAML or JSON) with errors that point into the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hpcopt.core.documents import parse_document
from hpcopt.core.schemes import TRAITS, Traits
from hpcopt.core.spec import CampaignSpec, parse_spec
from hpcopt.core.taskfile import own_method
from hpcopt.errors import DocumentError, SpecError

#: A spec file larger than this is refused before it is parsed (the server's limit too).
MAX_SPEC_FILE_BYTES = 1024 * 1024


def load_document(path: str | Path) -> tuple[Any, str]:
    """Returns the parsed document and its text. Raises SpecError on a syntax error, a
    YAML alias, too deep nesting, NaN/Infinity or NUL characters (see hpcopt.core.documents)."""
    text = Path(path).read_text()
    try:
        data = parse_document(
            text,
            yaml_syntax=not str(path).endswith(".json"),
            max_bytes=MAX_SPEC_FILE_BYTES,
            what="file",
            source=str(path),
        )
    except DocumentError as exc:
        raise SpecError(exc.errors) from None
    return data, text


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


def check_task_file(spec: CampaignSpec) -> None:
    """What the task file (when this machine can read it) says cannot train under the
    campaign's scheme(s), refused before submission: a pipeline runs ``Task.loss``
    through its schedule, so a task with its own ``train_step`` cannot use it."""
    training = spec.training
    if training is None:
        return
    schemes: list[str] = [training.scheme]
    if training.scheme == "search" and "scheme" in spec.space:
        schemes = [str(c) for c in getattr(spec.space["scheme"], "choices", [])]
    staged = [s for s in schemes if TRAITS.get(s, Traits()).own_step]
    if not staged or not isinstance(training.task, str):  # a script trains with allreduce alone
        return
    found = own_method(training.task, "train_step")
    if found is not None:
        cls, line = found
        searched = training.scheme not in staged
        how = f"the scheme search includes {staged[0]}" if searched else f"training.scheme is {staged[0]}"
        raise SpecError(
            [
                (
                    "training.task",
                    f"{how}, which runs the task's loss through its schedule, so it cannot use the custom "
                    f"train_step of {cls} (line {line} of the task file); drop the override (the default step is "
                    "forward, loss, backward, step) or use another scheme",
                )
            ]
        )


def load_spec_file(path: str | Path) -> CampaignSpec:
    """Loads and validates a spec file; errors carry ``file:line:col`` where known. The
    task file, where this machine can read it, is checked against the scheme too
    (:func:`check_task_file`)."""
    data, text = load_document(path)
    try:
        spec = parse_spec(data)
        check_task_file(spec)
        return spec
    except SpecError as exc:
        located = []
        for field, msg in exc.errors:
            pos = locate(text, field)
            where = f"{path}:{pos[0]}:{pos[1]}" if pos else str(path)
            located.append((field, f"{msg} ({where})"))
        raise SpecError(located) from None
