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
        if "default" in text or "%(default)" in text or action.default in (None, False, argparse.SUPPRESS, []):
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
