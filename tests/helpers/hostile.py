"""Hostile inputs shared by the bad-input tests and benchmarks/request_cost.py."""

from __future__ import annotations

import itertools


def alias_bomb(levels: int = 9) -> str:
    """A valid spec whose ``training.options`` nest YAML aliases ``levels`` deep (about 500
    bytes): 9**levels strings once expanded. PyYAML shares the aliased lists; serializing
    the spec to JSON expanded them, which took the server 27.6 s and 900 MB before aliases
    were refused."""
    lines = [
        "name: bomb",
        "objective: {metric: loss}",
        "space: {x: {type: real, low: 0, high: 1}}",
        "budget: {max_trials: 1}",
        "training:",
        "  task: t:T",
        "  options:",
        '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for prev, name in itertools.pairwise("abcdefghi"[:levels]):
        lines.append(f"    {name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"
