"""What a failed trial's reason says, short, and what identifies the failure.

Agents (and ask/tell clients) fail a trial with a reason that is usually a whole Python
traceback, after a short context (``fold 0, epoch 1: Traceback …``). The server keeps
the whole text in the trial's ``failed`` event, and shows as the trial's error a
:attr:`Failure.summary`: the context, the exception and the task's innermost frames.

:attr:`Failure.signature` identifies the failure regardless of its message: the
exception's type and the innermost frame of the task's own code (the last frame outside
the Python installation, site-packages and hpcopt's own packages), with its line. Two
trials that fail at the same line with the same exception have one signature whatever
the message says (the value, the shape or the name in it). A reason that is not a
traceback is its own signature, with its numbers masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

#: The longest signature and summary kept (characters).
MAX_SIGNATURE, MAX_SUMMARY = 300, 1000
#: Frames of the task shown in a summary, innermost last.
SUMMARY_FRAMES = 3

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|<frozen |/hpcopt_agent/|/hpcopt_server/|/hpcopt/)")
_START = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Failure:
    signature: str
    summary: str


def digest(reason: str) -> Failure:
    """The signature and the summary of a failure ``reason``."""
    text = reason.strip()
    lines = text.splitlines()
    first_frame = next((i for i, ln in enumerate(lines) if _FRAME.match(ln)), None)
    if first_frame is None:
        plain = " ".join(text.split())
        return Failure(re.sub(r"\d+(\.\d+)?", "N", plain)[:MAX_SIGNATURE], _clip(text, MAX_SUMMARY))
    # The last exception of a chain is the one raised; a traceback cut at its head (an
    # agent keeps its end) has frames but no header.
    start = text.rfind(_START)
    body = text[start + len(_START) :] if start >= 0 else "\n".join(lines[first_frame:])
    head = text.find(_START)
    context = (text[:head] if head >= 0 else "\n".join(lines[:first_frame])).strip().rstrip(":").strip()
    context = "" if context.startswith(("...", "…")) else context  # a cut-off head says nothing
    frames: list[tuple[str, str, str]] = []
    exception = ""
    for line in body.splitlines():
        frame = _FRAME.match(line)
        if frame:
            frames.append((frame["file"], frame["line"], frame["func"]))
            exception = ""
        elif line and not line.startswith((" ", "\t")) and _EXCEPTION.match(line.strip()):
            exception = exception or line.strip()
    if not exception:
        exception = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "an error")
    kind = (_EXCEPTION.match(exception) or _EXCEPTION.match("Error"))["type"]  # type: ignore[index]
    own = [f for f in frames if not _LIBRARY.search(f[0].replace("\\", "/"))] or frames[-1:]
    where = own[-1] if own else None
    signature = kind if where is None else f"{kind} at {PurePath(where[0]).name}:{where[1]} in {where[2]}"
    shown = "; ".join(f"{PurePath(f).name}:{n} in {fn}" for f, n, fn in own[-SUMMARY_FRAMES:])
    summary = f"{context}: {_clip(exception, 500)}" if context else _clip(exception, 500)
    if shown:
        summary += f" (at {shown})"
    return Failure(signature[:MAX_SIGNATURE], _clip(summary, MAX_SUMMARY))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
