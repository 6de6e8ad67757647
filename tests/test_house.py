"""House rules read from the tree: the fast tier the contributor guide documents is the
one ``make check`` runs and names only markers the suite declares (pytest's
``--strict-markers`` would not catch a misspelt one in ``-m``: it would just select
more), and no line is packed past the formatter."""

from __future__ import annotations

import re
import tomllib

from tests.helpers.env import PARTS, ROOT


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


#: What a test's wait, deadline or client timeout may not be written as: a fixed figure,
#: which a busy machine does not stretch (``tests/helpers/env.py``'s ``scaled``), or a
#: client whose fixed default it is (httpx's 5 s; use ``tests.helpers.web`` and
#: ``tests.helpers.clients``).
_FIXED_WAITS = {
    "a fixed timeout=": re.compile(r"\btimeout=([0-9]|[A-Z][A-Z0-9_]*\b)"),  # a figure, or a constant's
    "a fixed timeout default": re.compile(r"\w*timeout: float = [0-9]"),
    "a fixed deadline": re.compile(r"monotonic\(\) \+ [0-9]"),
    "httpx's fixed 5 s default": re.compile(r"\bhttpx\.(get|post|put|patch|delete|request|stream|Client)\("),
    "hpcopt's client with its fixed 30 s": re.compile(
        r"\bhpcopt\.(Agent)?Client\((?!.*timeout=)|from hpcopt import .*\b(Agent)?Client\b"
    ),
}
_STRETCHES = {"tests/helpers/env.py", "tests/helpers/web.py", "tests/helpers/clients.py", "tests/test_house.py"}


def test_every_wait_in_the_tests_stretches_with_the_load() -> None:
    """A fresh-clone run at a load of 4 to 44 failed three tests with ``httpx.ReadTimeout``
    at httpx's fixed 5 s while pytest's limits had stretched. Every timeout, deadline and
    client default in the tests is written ``scaled(seconds)``; a line may opt out only
    with a ``# fixed timeout:`` comment saying why (pytest's own ``mark.timeout`` is
    stretched by the conftest)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in _STRETCHES or rel == "tests/test_timeout_scale.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "mark.timeout" in line or "# fixed timeout:" in line:
                continue
            found += [f"{rel}:{number}: {what}: {line.strip()}" for what, rx in _FIXED_WAITS.items() if rx.search(line)]
    assert not found, "\n".join(found[:40])


def test_the_campaign_page_names_no_card_and_no_algorithm() -> None:
    """Optional cards go through ``static/js/cards.js``'s interface: the page that lays
    them out compares no algorithm's or scheme's name (it did, for pbt's population)."""
    static = ROOT / "server/hpcopt_server/static/js"
    for name in ("campaign.js", "campaign_layout.js", "campaign_tables.js"):
        text = (static / name).read_text()
        assert not re.search(r"algorithm\.name\s*===|scheme\s*===", text), name
    cards = (static / "cards.js").read_text()
    assert re.search(r"export const CARDS = \[", cards) and "wants:" in cards and "due:" in cards
