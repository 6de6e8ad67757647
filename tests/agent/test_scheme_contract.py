"""The scheme contract's shape, read from the code: a small core, hooks called from one
place, and no scheme named in a comparison (a scheme is asked for its traits instead).
The behaviour behind it runs under mpiexec in ``test_schemes.py``."""

from __future__ import annotations

import re
from pathlib import Path

from hpcopt.core.schemes import TRAITS
from tests.helpers.env import ROOT

#: The hooks only the epoch driver (``hpcopt_agent/epoch.py``) may call.
EPOCH_HOOKS = ("begin_epoch", "blocks", "after_step", "end_batches", "consensus", "end_epoch", "serve", "vote", "prime")


def _sources(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py") if "/v1/" not in str(p))


def test_the_scheme_core_stays_small() -> None:
    from hpcopt_agent.schemes import SCHEMES, Placement, Roles, Scheme

    public = sorted(n for n in dir(Scheme) if not n.startswith("_"))
    assert len(public) <= 15, f"Scheme has {len(public)} public members: {public}"
    # Every registered scheme carries the traits the spec's checks read, under its own name.
    assert set(SCHEMES) == set(TRAITS)
    for name, cls in SCHEMES.items():
        assert cls.name == name and cls.traits is TRAITS[name], name
    for facet in (Roles, Placement):
        assert len([n for n in dir(facet) if not n.startswith("_")]) <= 12, facet


def test_only_the_epoch_driver_calls_the_epoch_hooks() -> None:
    # A call on a scheme, its roles or its placement (not super(): a scheme's own override).
    call = re.compile(r"\b(scheme|roles|placement)\.(" + "|".join(EPOCH_HOOKS) + r")\(")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _sources("agent/hpcopt_agent", "tests", "benchmarks")
        if path.name != "epoch.py" and path != Path(__file__)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if call.search(line.split("#")[0])
    ]
    assert not found, "epoch hooks called outside hpcopt_agent/epoch.py:\n" + "\n".join(found)


def test_no_code_compares_a_scheme_name() -> None:
    names = "|".join(TRAITS)
    quoted = rf"""["']({names})["']"""
    compare = re.compile(rf"(==|!=)\s*{quoted}|{quoted}\s*(==|!=)")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _sources("agent/hpcopt_agent", "client/hpcopt", "tests")
        if path != Path(__file__)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if compare.search(line)
    ]
    assert not found, "compare traits (hpcopt.core.schemes.TRAITS), not scheme names:\n" + "\n".join(found)
