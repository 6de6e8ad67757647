"""House rules read from the tree: the fast tier the contributor guide documents is the
one ``make check`` runs and names only markers the suite declares (pytest's
``--strict-markers`` would not catch a misspelt one in ``-m``: it would just select
more), and no line is packed past the formatter."""

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


def test_no_line_is_packed_past_the_formatter() -> None:
    """The formatter's skip marker kept lines packed past its layout; the formatter decides."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, cwd=ROOT, check=True)
    marker = "fmt: " + "skip"
    packed = [f for f in listed.stdout.split() if marker in (ROOT / f).read_text()]
    assert not packed, f"{marker} in {packed}"
