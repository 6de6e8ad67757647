"""Where fold checkpoints live, and which checkpoint URIs anyone accepts.

A fold checkpoint is one file, ``ROOT/<server_id>/<campaign>/<trial>/fold<k>.pt``, under
an agent's checkpoint root (a script task's is the folder ``.../fold<k>/`` beside it,
which the script fills), named to the server by a ``file:///absolute/path`` URI. The
rule is shared by both sides so that it is one rule:

- the server stores a reported URI only if it has that form and ends in *its own*
  server id, a campaign number, the *reporting lease's* trial and the reported fold
  (:func:`check_reported`), so a URI planted for another trial, a traversal
  (``..``), another scheme (``http:``, a plain path) or a control character never
  reaches another agent;
- an agent opens one only if its resolved path, symbolic links followed, is exactly the
  file it would have written for that server, campaign, trial and fold under its *own*
  root (:func:`local_path`), and then reads it without unpickling code
  (``hpcopt_agent.checkpoint``).

The server id is a random hex string stored once per database (replicas share it), so
two servers whose campaign 1 trial 5 are different trials never share a checkpoint.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from hpcopt.core.documents import UNSAFE_CHARS
from hpcopt.errors import CheckpointRefused

SERVER_ID = re.compile(r"[0-9a-f]{32}")
_FOLD_FILE = re.compile(r"fold(\d+)\.pt")


def relative(server_id: str, campaign_id: int, trial_id: int, fold: int) -> PurePosixPath:
    """The checkpoint's path below an agent's checkpoint root."""
    if not SERVER_ID.fullmatch(server_id):
        raise CheckpointRefused(f"server id {server_id!r} is not 32 hex digits")
    return PurePosixPath(server_id, str(campaign_id), str(trial_id), f"fold{fold}.pt")


def uri_path(uri: str) -> PurePosixPath:
    """The absolute path a ``file://`` URI names, refusing anything else: other schemes
    and plain paths, a host other than localhost, a query or fragment, control
    characters, and ``.``, ``..`` or empty path segments."""
    bad = UNSAFE_CHARS.search(uri)
    if bad:
        raise CheckpointRefused(f"the URI holds the control character U+{ord(bad.group()):04X}")
    try:
        parts = urlsplit(uri)
    except ValueError as exc:
        raise CheckpointRefused(f"not a URI: {exc}") from None
    if parts.scheme != "file":
        raise CheckpointRefused(f"only file:// URIs are accepted, not {parts.scheme or 'a plain path'}")
    if parts.netloc not in ("", "localhost"):
        raise CheckpointRefused(f"a file:// URI on another host ({parts.netloc[:64]!r}) is not accepted")
    if parts.query or parts.fragment:
        raise CheckpointRefused("a checkpoint URI has no query or fragment")
    text = unquote(parts.path)
    if UNSAFE_CHARS.search(text):
        raise CheckpointRefused("the URI's path holds an encoded control character")
    if not text.startswith("/"):
        raise CheckpointRefused("the URI's path is not absolute")
    segments = text[1:].split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise CheckpointRefused("the URI's path has '.', '..' or empty segments")
    return PurePosixPath(text)


def check_reported(uri: str, server_id: str, trial_id: int, fold: int) -> None:
    """What the server accepts from the lease holder of ``trial_id``: empty (no
    checkpoint), or a file URI ending in ``<server_id>/<campaign>/<trial_id>/fold<fold>.pt``
    (or ``.../fold<fold>``, a script task's checkpoint folder)."""
    if not uri:
        return
    path = uri_path(uri)
    tail = path.parts[-4:]
    expected = f".../{server_id}/<campaign>/{trial_id}/fold{fold}.pt"
    if (
        len(path.parts) < 5
        or tail[0] != server_id
        or not tail[1].isdigit()
        or tail[2] != str(trial_id)
        or tail[3] not in (f"fold{fold}.pt", f"fold{fold}")
    ):
        raise CheckpointRefused(
            f"a checkpoint of trial {trial_id} fold {fold} must be a file named {expected} (or a script's folder "
            f"named fold{fold})"
        )


def local_path(uri: str, root: Path, server_id: str, campaign_id: int, trial_id: int, fold: int) -> Path:
    """The file to resume ``fold`` of ``trial_id`` from, if ``uri`` names the one this
    agent would have written under ``root``: the same path, and the same once every
    symbolic link is resolved (so a link cannot lead out of the root)."""
    path = Path(uri_path(uri))
    expected = root.resolve() / relative(server_id, campaign_id, trial_id, fold)
    if path != expected:
        raise CheckpointRefused(f"it is not this agent's checkpoint file for the fold ({expected})")
    if path.resolve() != expected:
        raise CheckpointRefused(f"a symbolic link leads it out of the checkpoint root ({path.resolve()})")
    return path
