"""The user docs keep explanations out of code lines that run off the page: a code block
line that carries a comment fits in 90 characters (the docs site shows about that many
before it scrolls). Generated reference pages and the benchmark notebook are exempt."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 90
COMMENT = re.compile(r"(^|\s)#\s")  # a shell, YAML or Python comment, not "#{n}" in a string


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if not {"reference", "benchmarks"} & set(p.parts) and p.name != "changelog.md"]


def test_no_commented_code_line_runs_off_the_page() -> None:
    long = []
    for page in _pages():
        inside = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("```"):
                inside = not inside
            elif inside and COMMENT.search(line) and len(line) > WIDTH:
                long.append(f"{page.relative_to(ROOT)}:{number}: {line}")
    assert not long, "\n".join(long)
