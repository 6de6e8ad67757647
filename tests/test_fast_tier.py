"""The fast tier the contributor guide documents is the one ``make check`` runs, and it
names only markers the suite declares (pytest's ``--strict-markers`` would not catch a
misspelt one in ``-m``: it would just select more)."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import PARTS, ROOT


def test_the_documented_fast_tier_is_make_checks() -> None:
    documented = re.findall(r'-m "([^"]+)"', (ROOT / "docs/development.md").read_text())
    made = re.search(r"^FAST = (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert made is not None and documented == [made.group(1)], (documented, made)
    declared = {
        m.split(":")[0]
        for m in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    }
    named = set(re.findall(r"not (\w+)", made.group(1)))
    assert named == set(PARTS) | {"slow"} and named <= declared, (named, declared)
