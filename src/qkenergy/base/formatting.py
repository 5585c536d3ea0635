"""Numbers for people and for JSON, and rich tables: shared by cli, report and plots.

Kept free of pandas and matplotlib so that the light commands (``baseline``,
``lobes``, ``verify``) do not pay for importing them.
"""

from __future__ import annotations

import io
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypeGuard, cast

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

MISSING = "–"
"""How an undefined (NaN, None) value is shown."""


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None for None, NaN, infinities and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def plural(number: int, noun: str) -> str:
    """A count and its noun: '1 model', '12 models', '0 models'."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def format_fixed(value: Any, digits: int = 4) -> str:
    """Fixed-point text for values of order 1 (energies, shares, scores); MISSING when undefined."""
    number = _finite(value)
    return MISSING if number is None else f"{number:.{digits}f}"


def format_percent(value: Any) -> str:
    """A share in [0, 1] as a whole percentage; MISSING when undefined."""
    number = _finite(value)
    return MISSING if number is None else f"{100 * number:.0f}%"


def format_number(value: Any, digits: int = 6) -> str:
    """Text for a value of any magnitude: ``digits`` significant digits, scientific below 1e-3 or from 1e5."""
    number = _finite(value)
    if number is None:
        return MISSING
    if number == 0:
        return "0"
    if not 1e-3 <= abs(number) < 1e5:
        return f"{number:.3e}"
    return f"{number:.{digits}g}"


def format_p(value: Any, floor: float = 1e-300) -> str:
    """A probability to two significant digits (``0.027``, ``3.1e-05``); below ``floor``, ``<floor``.

    A p computed beyond what its law resolves reads as a bound, never as digits (``<1e-31``,
    not ``2.227e-311``); a tail that underflowed to 0 reads the same, since a tail probability
    is never exactly 0.

    Parameters
    ----------
    value : float
        The probability; MISSING when undefined.
    floor : float
        The smallest p shown as a number (the caller's honest floor, e.g.
        ``math.tails.resolved_floor``; by default 1e-300, near where float64 ends).

    Returns
    -------
    str
    """
    number = _finite(value)
    if number is None:
        return MISSING
    if number < floor:
        return f"<{floor:.0e}"
    return f"{number:.2g}"


def json_safe(value: Any) -> Any:
    """A JSON-ready copy of ``value``: numpy scalars and arrays become Python, NaN and infinities None.

    JSON has no NaN or infinity; dicts, lists and tuples are converted item by item.
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def rich_table(
    title: str, columns: Sequence[str | tuple[str, str]], *, caption: str | None = None, **options: Any
) -> Table:
    """A rich Table with these columns: a name (right-justified) or (name, justify)."""
    from rich.table import Table

    table = Table(title=title, caption=caption, **options)
    for column in columns:
        name, justify = (column, "right") if isinstance(column, str) else column
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    return table


def markdown_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """A GitHub markdown table of ``rows`` (dicts keyed by ``columns``), one line per row."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console``: boxed on a terminal, plain aligned text on a pipe or file.

    Text meant for ``grep``, ``awk`` or a log file gets no box-drawing characters; off a
    terminal the table is fitted to the console's width as on a terminal (80 columns unless
    COLUMNS says otherwise: rich wraps the widest cells, and breaks a word too long rather
    than cut it), its title and caption flush left.
    A table of plain text that fits as it is (every table of a run's summary) is laid out
    here as rich lays it out, reading only rich's public ``Column.cells``, without rich's
    measuring and rendering: measured on the embedded MiniLM's summary in a fresh interpreter
    (as benchmarks/bench_startup.py times the summary alone), median 117 ms with this route
    against 186 ms through rich, 7 runs each; warm, both take a few ms.
    """
    if not console.is_terminal:
        table.box = None
        table.show_edge = False
        table.pad_edge = False
        table.title_justify = table.caption_justify = "left"  # not centred over a table as wide as its cells
        for column in table.columns:  # a cell too wide is broken over lines, never cut with an ellipsis
            if column.overflow == "ellipsis":
                column.overflow = "fold"
        lines = _plain_lines(table)
        if lines is not None and max(map(len, lines)) <= console.width:
            console.out("\n".join(lines), highlight=False)
            return
    console.print(table)


# Characters rich prints as they are, one cell wide each: no markup ('['), escapes ('\\') or
# emoji codes (':'), no control characters; the dash of a missing value and the middle dot.
_PLAIN_CHARACTERS = frozenset(map(chr, range(0x20, 0x7F))) - set("[\\:") | set(MISSING + "\u00b7")


def _plain(text: object) -> TypeGuard[str]:
    return isinstance(text, str) and text == text.strip() and set(text) <= _PLAIN_CHARACTERS


def _plain_lines(table: Table) -> list[str] | None:
    """The lines rich prints off a terminal for ``table`` (as :func:`print_table` sets it up: no
    box, no edge padding, the width its cells need), without trailing spaces, or None when rich
    must lay it out: a text that is not plain, a caption, a title wider than the table, any
    setting but those used here."""
    columns = table.columns
    if (
        not columns
        or not table.show_header
        or any((table.show_footer, table.show_lines, table.leading, table.collapse_padding, table.expand))
        or any(setting is not None for setting in (table.caption, table.width, table.min_width))
        or tuple(table.padding) != (0, 1, 0, 1)
        or table.row_styles
        or any(row.style is not None for row in table.rows)
    ):
        return None
    title = table.title
    if title is not None and not _plain(title):
        return None
    cells = []
    for column in columns:
        texts = [column.header, *column.cells]
        plain = [text for text in texts if _plain(text)]
        sizes = (column.width, column.min_width, column.max_width, column.ratio)
        if len(plain) < len(texts) or column.justify not in ("left", "right") or sizes != (None,) * 4:
            return None
        cells.append(plain)
    widths = [max(map(len, texts)) for texts in cells]
    if not all(widths):
        return None
    width = sum(widths) + 2 * (len(widths) - 1)  # one space of padding each side, none at the edges
    if title is not None and len(title) > width:  # rich would wrap it
        return None
    lines = [] if title is None else [title]
    for row in zip(*cells, strict=True):
        parts = [
            text.rjust(size) if column.justify == "right" else text.ljust(size)
            for text, size, column in zip(row, widths, columns, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


class _TrimmedLines:
    """A text stream that writes each line to ``stream`` without its trailing spaces.

    rich pads a table's cells and keeps the space where it wraps a sentence: invisible on a
    terminal, but a pipe or a file would carry them (and ``diff`` and editors show them).
    A line is held until its newline; what :meth:`flush` finds unfinished is written as it is.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._line = ""

    def write(self, text: str) -> int:
        *lines, self._line = (self._line + text).split("\n")
        if lines:
            self._stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._line:
            self._stream.write(self._line)
            self._line = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"


def output_console(file: TextIO | None = None, **options: Any) -> Console:
    """A rich Console on ``file`` (default standard output): off a terminal, lines without trailing spaces.

    Parameters
    ----------
    file : text stream, optional
        Where to print (default ``sys.stdout``).
    **options
        Passed to ``rich.console.Console`` (``width``, ``color_system``, ...).

    Returns
    -------
    rich.console.Console
    """
    from rich.console import Console

    stream = sys.stdout if file is None else file
    terminal = options.get("force_terminal")
    if terminal is None:
        terminal = stream.isatty()
    if not terminal:  # no colours here: rich's highlighter would compile its regexes for nothing (15 ms)
        options.setdefault("highlight", False)
    return Console(file=stream if terminal else cast(TextIO, _TrimmedLines(stream)), **options)


def plain_text(print_to: Callable[[Console], None], width: int = 80) -> str:
    """What ``print_to(console)`` prints on a plain console ``width`` columns wide, as text.

    The ``summary()`` of the API's results: the same text their command prints in a pipe.
    """
    buffer = io.StringIO()
    print_to(output_console(buffer, width=width, force_terminal=False, color_system=None))
    return buffer.getvalue()


def progress_bar(text: str, *, remaining: bool = False, stderr: bool = False) -> Progress:
    """A transient rich progress bar: ``text`` (a rich column format), bar, count, time elapsed
    (and remaining); on stderr when ``stderr``, so that it never mixes with a table on stdout."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns: list[ProgressColumn] = [TextColumn(text), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    if remaining:
        columns.append(TimeRemainingColumn())
    return Progress(*columns, console=Console(stderr=True) if stderr else None, transient=True)
