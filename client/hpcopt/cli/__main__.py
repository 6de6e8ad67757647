"""``python -m hpcopt.cli``: the ``hpcopt`` command."""

from hpcopt.cli import entry

entry()
