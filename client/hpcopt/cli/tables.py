"""Plain-text tables that fit a width without ever splitting a value.

Numbers, states and ids are printed whole on one line: a table too wide for the
terminal first shortens its free-text columns (names, notes, paths: cut with "…"),
then leaves out its optional columns from the right (parameters), and says which.
Nothing is fitted when the output is not a terminal (``width`` None): a file or a pipe
gets every column in full.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GAP = "  "
#: Free-text columns are not cut below this many characters before optional columns go.
FLEX_FLOOR = 12


@dataclass
class Column:
    header: str
    align: str = "left"  # "left" or "right"
    flexible: bool = False  # free text: may be cut with "…" to fit
    optional: bool = False  # may be left out (from the right) to fit
    keep_end: bool = False  # a flexible column cut at its start ("…/fold1.pt"): paths
    cells: list[str] = field(default_factory=list)

    def natural(self) -> int:
        return max([len(self.header), *(len(c) for c in self.cells)])


@dataclass
class Table:
    columns: list[Column]
    title: str | None = None

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        for column, cell in zip(self.columns, cells, strict=True):
            column.cells.append(" ".join(cell.split()))  # one line per cell

    def render(self, width: int | None = None) -> str:
        """The table as text at most ``width`` characters wide where that is possible
        without splitting a value; a last line names any columns left out."""
        columns = list(self.columns)
        widths = {id(c): c.natural() for c in columns}

        def total() -> int:
            return sum(widths[id(c)] for c in columns) + len(GAP) * max(len(columns) - 1, 0)

        dropped: list[str] = []
        if width is not None:
            for floor in (FLEX_FLOOR, None):
                for c in columns:
                    if c.flexible and total() > width:
                        low = max(len(c.header), 4) if floor is None else min(widths[id(c)], FLEX_FLOOR)
                        widths[id(c)] = max(low, widths[id(c)] - (total() - width))
                while floor is not None and total() > width and any(c.optional for c in columns):
                    last = max(i for i, c in enumerate(columns) if c.optional)
                    dropped.insert(0, columns.pop(last).header)
        lines = [] if self.title is None else [self.title]
        rows = len(columns[0].cells) if columns else 0
        lines.append(self._line([(c, c.header) for c in columns], widths))
        lines.append(self._line([(c, "-" * widths[id(c)]) for c in columns], widths))
        for r in range(rows):
            lines.append(self._line([(c, c.cells[r]) for c in columns], widths))
        if dropped:
            lines.append(
                f"({len(dropped)} column(s) left out to fit the terminal: {', '.join(dropped)}; --json has all)"
            )
        return "\n".join(lines)

    @staticmethod
    def _line(cells: list[tuple[Column, str]], widths: dict[int, int]) -> str:
        out = []
        for c, text in cells:
            w = widths[id(c)]
            if len(text) > w:
                text = "…" + text[len(text) - w + 1 :] if c.keep_end else text[: w - 1] + "…"
            out.append(text.rjust(w) if c.align == "right" else text.ljust(w))
        return GAP.join(out).rstrip()
