"""Every list and record a `lakeshore` verb prints, fitted to the terminal without cutting a cell.

A table a person reads must read whole at 80 columns, the width of a default terminal and of
what a pipe or CI log is taken to be: a cell cut to `que…` tells nothing, and a line that wraps
mid-row scatters a row over several. So each verb names its columns once, marking as `wide` the
ones a glance can do without; by default those are left out, and `--wide` shows them all, one
line per row whatever the width (for `grep`; scripts still want `--json`, which is complete).

When even the default columns do not fit (long names, a free-text last column), nothing is
elided: a last column with room left folds its text onto lines of its own, under itself; else
each row is stacked, one `header  value` line per column. Kept without rich: its import costs
tens of milliseconds, more than a listing's whole work on an empty plane (issue 17, item 5), and
it reads `[...]` in a value as markup.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click

#: The fewest characters a folded last column may have; narrower, the rows are stacked.
MIN_FOLD = 16
#: The narrowest text a stacked value wraps to, however small the terminal says it is.
MIN_VALUE = 12
#: Between two columns.
GAP = "  "


@dataclass(frozen=True)
class Column:
    """One column: its title (unique within a table) and whether only `--wide` shows it."""

    header: str
    wide: bool = False


def wide_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--wide`: every column of the listing, one line per row, however long the lines get."""
    return click.option(
        "--wide",
        "wide",
        is_flag=True,
        help="Show every column, one line per row (the default fits 80 columns).",
    )(fn)


def terminal_width() -> int:
    """The width to fit: `COLUMNS`, else the terminal's, else 80 (a pipe, a CI log).

    `shutil.get_terminal_size`'s rule, without importing shutil (4 ms of a listing's start)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    try:
        return (stdout and os.get_terminal_size(stdout.fileno()).columns) or 80
    except (ValueError, OSError):
        return 80


def table_lines(
    columns: Sequence[Column],
    rows: Iterable[Sequence[object]],
    *,
    wide: bool = False,
    width: int | None = None,
) -> list[str]:
    """The lines of a table: aligned columns if they fit `width` (the terminal's by default),
    else the last one folded, else each row stacked (see the module doc). `rows` hold one value
    per column, in `columns` order, wide ones included; a value shows as `str` on one line."""
    headers = [c.header for c in columns]
    if len(set(headers)) != len(headers):
        raise ValueError(f"two columns share a title: {headers}")
    shown = [i for i, c in enumerate(columns) if wide or not c.wide]
    titles = [headers[i] for i in shown]
    cells = [[" ".join(str(row[i]).split()) for i in shown] for row in rows]
    lines = _aligned(titles, cells)
    if wide:
        return lines
    width = terminal_width() if width is None else width
    if max(len(line) for line in lines) <= width:
        return lines
    widths = _widths(titles, cells)
    room = width - sum(len(GAP) + w for w in widths[:-1])
    if len(titles) > 1 and room >= max(MIN_FOLD, len(titles[-1])):
        return _aligned(titles, cells, fold=room)
    return _stacked(titles, cells, width)


def print_table(
    columns: Sequence[Column], rows: Iterable[Sequence[object]], *, wide: bool = False
) -> None:
    """`table_lines` on stdout."""
    for line in table_lines(columns, rows, wide=wide):
        click.echo(line)


def pair_lines(pairs: Iterable[tuple[str, object]], *, width: int | None = None) -> list[str]:
    """One record as `key  value` lines, the keys aligned and each value folded under itself
    where it would pass `width` (the terminal's by default): `queues stats`, `queues show`."""
    items = [(key, " ".join(str(value).split())) for key, value in pairs]
    key = max((len(k) for k, _ in items), default=0)
    room = max(MIN_VALUE, (terminal_width() if width is None else width) - key - len(GAP))
    out: list[str] = []
    for title, value in items:
        first, *more = _wrap(value, room)
        out.append(f"{title.ljust(key)}{GAP}{first}".rstrip())
        out.extend(" " * (key + len(GAP)) + m for m in more)
    return out


def print_pairs(pairs: Iterable[tuple[str, object]]) -> None:
    """`pair_lines` on stdout."""
    for line in pair_lines(pairs):
        click.echo(line)


def _widths(titles: list[str], cells: list[list[str]]) -> list[int]:
    return [max(len(line[i]) for line in (titles, *cells)) for i in range(len(titles))]


def _aligned(titles: list[str], cells: list[list[str]], fold: int | None = None) -> list[str]:
    """Header first, columns two spaces apart; with `fold`, the last column's text wraps to
    that many characters, its further lines indented to where the column starts."""
    widths = _widths(titles, cells)
    if fold is not None:
        widths[-1] = fold
    lead = sum(len(GAP) + w for w in widths[:-1])
    out: list[str] = []
    for line in (titles, *cells):
        last = _wrap(line[-1], fold) if fold is not None else [line[-1]]
        cols = [cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=False)]
        out.append(GAP.join([*cols, last[0]]).rstrip())
        out.extend(" " * lead + more for more in last[1:])
    return out


def _stacked(titles: list[str], cells: list[list[str]], width: int) -> list[str]:
    """Each row as `header  value` lines (values wrapped to fit), a blank line between rows."""
    out: list[str] = []
    for n, line in enumerate(cells):
        if n:
            out.append("")
        out.extend(pair_lines(zip(titles, line, strict=True), width=width))
    return out


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width`, broken at spaces where it can; never elided."""
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
