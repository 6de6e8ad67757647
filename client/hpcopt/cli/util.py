"""What the three command lines (``hpcopt``, ``hpcopt-server``, ``hpcopt-agent``) share:
``--version`` and help that shows every option's default."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with "(default: X)" after every option that has a default and
    whose help does not already give it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or not _shown(action.default):
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"
        return text


def distribution_version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def add_version(parser: argparse.ArgumentParser, dist: str) -> None:
    """``--version``: the distribution's version, and the client's when they differ."""
    mine, client = distribution_version(dist), distribution_version("hpcopt")
    text = f"{dist} {mine}" + ("" if dist == "hpcopt" else f" (hpcopt {client})")
    parser.add_argument("--version", action="version", version=text)


def finish(parser: argparse.ArgumentParser, dist: str) -> argparse.ArgumentParser:
    """Adds ``--version`` and gives the parser and every sub-command the help formatter
    that shows defaults; returns the parser."""
    add_version(parser, dist)
    todo = [parser]
    while todo:
        p = todo.pop()
        p.formatter_class = HelpFormatter
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
            elif action.help is None and action.option_strings and _shown(action.default):
                action.help = "(default: %(default)s)"
    return parser


def _shown(default: object) -> bool:
    return not (default is None or default is False or default is argparse.SUPPRESS or default == [])
