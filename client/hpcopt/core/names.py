"""The names a campaign spec may use, said once. A submission is checked against these
lists (the spec's ``algorithm.name``, ``pruner.name`` and ``training.scheme``), and
``tests/test_names.py`` ties each to the registry that runs it: the server's
optimizers and pruners, and the agent's schemes. A new optimizer, pruner or scheme is
added here and to its registry, or that test fails naming the one missing."""

from __future__ import annotations

from hpcopt.core.schemes import TRAITS

#: The server's optimizers (``hpcopt_server.optimizers.REGISTRY``).
ALGORITHMS: tuple[str, ...] = ("random", "sobol", "grid", "bo", "ea", "skopt", "pbt", "mf")
#: The server's pruners (``hpcopt_server.pruners.REGISTRY``); ``none`` prunes nothing.
PRUNERS: tuple[str, ...] = ("none", "median", "asha", "fold")
#: The agent's training schemes (``hpcopt_agent.schemes.SCHEMES``): the schemes' knob
#: and trait table is keyed by them.
SCHEMES: tuple[str, ...] = tuple(TRAITS)
#: What ``training.scheme`` may name: a scheme, or ``search`` (the trial's ``scheme``
#: parameter picks it; what ``scheme: {search: {...}}`` is normalized into).
SCHEME_CHOICES: tuple[str, ...] = (*SCHEMES, "search")
