"""How the CLI prints a table: sized to the terminal, one record per row where the terminal is
too narrow for the table, and plain text (no colour, no box drawing, no folded cells) when
stdout is a pipe or a file, for ``grep`` and ``cut``.

Borrowed behaviour: like ``git`` and ``ls``, decoration only for a person at a terminal.
``--format json`` stays the interface for programs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["FOLD_MIN_WIDTH", "print_table", "stdout_console"]

FOLD_MIN_WIDTH = 12  # a folded column narrower than this is unreadable: records instead
_PLAIN_WIDTH = 1 << 16  # a pipe has no width: lines are as long as their content


def stdout_console() -> Console:
    """A console on the current ``sys.stdout`` (built per call: tests swap it): rich at the
    terminal's width, or plain and unbounded when stdout is no terminal."""
    from rich.console import Console

    console = Console(highlight=False, markup=False)  # data is printed as written
    if console.is_terminal:
        return console
    return Console(highlight=False, markup=False, no_color=True, width=_PLAIN_WIDTH,
                   soft_wrap=True)


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console`` as the console's kind asks (see the module docstring).

    Args:
        console: from :func:`stdout_console` (or any rich console).
        table: the table; its folding columns should set ``min_width`` (``FOLD_MIN_WIDTH``),
            so that a terminal too narrow for them gets records instead of a column of
            single letters.
    """
    if not console.is_terminal:
        table.box = None  # columns split on spaces, a header line, then the rows
        table.show_edge = False
        table.pad_edge = False
        with console.capture() as captured:
            console.print(table)
        console.file.write("".join(f"{line.rstrip()}\n" for line in
                                   captured.get().splitlines()))
        return
    if _least_width(console, table) > console.width:
        _print_records(console, table)
        return
    console.print(table)


def _least_width(console: Console, table: Table) -> int:
    """The narrowest the table can be and stay readable: each column that does not wrap as
    wide as its widest cell, each folding column its ``min_width``, plus padding and rules."""
    from rich.measure import Measurement

    total = len(table.columns) + 1  # the vertical rules
    for column in table.columns:
        if column.no_wrap:
            cells = [column.header, *column.cells]
            total += max(Measurement.get(console, console.options, cell).maximum
                         for cell in cells)
        else:
            total += column.min_width or 1
        total += 2  # the padding either side
    return total


def _print_records(console: Console, table: Table) -> None:
    """One block per row, one ``header: value`` line per cell that has a value."""
    from rich.text import Text

    if table.title:
        console.print(Text(str(table.title), style="bold"))
    columns = table.columns
    for row in zip(*(list(column.cells) for column in columns), strict=True):
        for column, cell in zip(columns, row, strict=True):
            value = cell.plain if isinstance(cell, Text) else str(cell)
            if value:
                console.print(Text.assemble((f"{column.header}: ", "bold"), value))
        console.print()
