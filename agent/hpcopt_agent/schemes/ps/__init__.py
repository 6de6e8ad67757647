"""The parameter-server family (MPI-Learn/NNLO): a master holds the central weights,
workers train blocks of the epoch and exchange with it; the rule of the exchange is
the scheme (downpour, EASGD, GEM).

- :mod:`.protocol`: tags, headers, how a message is sent and waited for;
- :mod:`.serving`: the master's and sub-masters' loop, clocks, the staleness bound;
- :mod:`.worker`: a worker's blocks and exchanges, and the overlapped exchange;
- :mod:`.rules` and :mod:`.gem`: the update rules, small objects with their own state;
- :mod:`.scheme`: the scheme's roles, consensus and checkpoints.
"""

from hpcopt.core.schemes import TRAITS
from hpcopt_agent.schemes.ps.gem import GemRule
from hpcopt_agent.schemes.ps.protocol import Halted
from hpcopt_agent.schemes.ps.rules import DownpourRule, EasgdRule
from hpcopt_agent.schemes.ps.scheme import ParameterServer


class Downpour(ParameterServer):
    name = "downpour"
    traits = TRAITS[name]
    rule_class = DownpourRule


class EASGD(ParameterServer):
    name = "easgd"
    traits = TRAITS[name]
    rule_class = EasgdRule


class GEM(ParameterServer):
    name = "gem"
    traits = TRAITS[name]
    rule_class = GemRule


__all__ = ["EASGD", "GEM", "Downpour", "Halted", "ParameterServer"]
