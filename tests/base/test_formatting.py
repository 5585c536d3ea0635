"""Numbers as the summaries print them (qkenergy.base.formatting)."""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.console import Console

from qkenergy.base.formatting import (
    MISSING,
    _plain_lines,
    _print_at_natural_width,
    format_fixed,
    format_number,
    format_p,
    json_safe,
    print_table,
    rich_table,
)


def test_numbers_of_every_magnitude() -> None:
    assert format_fixed(0.123456) == "0.1235" and format_fixed(float("nan")) == MISSING
    assert format_number(0.5, 2) == "0.5" and format_number(2.5e-7, 2) == "2.500e-07"
    assert format_number(0.0) == "0" and format_number(None) == MISSING


def test_a_p_value_that_underflowed_is_not_printed_as_zero() -> None:
    # A BH-adjusted tail probability below double precision (a head at z ~ 200) is stored as 0.0.
    assert format_p(0.0) == "<5e-324"
    assert format_p(np.float64(3e-12)) == "3.000e-12" and format_p(0.04) == "0.04"
    assert format_p(float("nan")) == MISSING


def test_json_safe_has_no_nan() -> None:
    value = json_safe({"a": np.array([1.0, np.nan]), "b": (np.float32(2), math.inf)})
    assert value == {"a": [1.0, None], "b": [2.0, None]}


def _printed(print_to: Callable[[Console], None]) -> str:
    buffer = io.StringIO()
    print_to(Console(file=buffer, width=80, force_terminal=False, color_system=None))
    return buffer.getvalue()


def _table(
    title: str, columns: list[str | tuple[str, str]], rows: list[list[str]], *, bare: bool = False
) -> Any:
    table = rich_table(title, columns, title_justify="left")
    for i, row in enumerate(rows):
        table.add_row(*row, end_section=i == 1)
    if bare:  # as print_table sets a table up off a terminal
        table.box, table.show_edge, table.pad_edge = None, False, False
    return table


def test_plain_tables_print_as_rich_lays_them_out() -> None:
    # Off a terminal, a table of plain text is laid out without rich; the text must be rich's,
    # byte for byte (trailing spaces included), for any widths, justifications and missing cells.
    rng = np.random.default_rng(7)
    pool = ["0", "12", "0.5636", "-1.1", MISSING, "", "most symmetric", "I+", "<5e-324", "encoder 3", "a·b"]
    laid_out = 0
    for _ in range(300):
        columns: list[str | tuple[str, str]] = [
            (str(rng.choice(["layer", "s", "", "median s", "p_bh"])), str(rng.choice(["left", "right"])))
            for _ in range(int(rng.integers(1, 7)))
        ]
        title = str(rng.choice(["Heads worth a look", "T", "Symmetric energy per layer, a long title here"]))
        rows = [[str(rng.choice(pool)) for _ in columns] for _ in range(int(rng.integers(0, 6)))]
        plain = _printed(functools.partial(print_table, table=_table(title, columns, rows)))
        by_rich = _printed(
            functools.partial(_print_at_natural_width, table=_table(title, columns, rows, bare=True))
        )
        assert plain == by_rich, (title, columns, rows)
        laid_out += _plain_lines(_table(title, columns, rows, bare=True)) is not None
    assert laid_out > 150  # most of them took the plain route (long titles and empty columns do not)


def test_tables_rich_must_render_are_left_to_it() -> None:
    for cell in ("[bold]x[/bold]", ":smile:", "two\nlines", " padded", "日本"):
        assert _plain_lines(_table("t", ["a"], [[cell]], bare=True)) is None, cell
    captioned = rich_table("t", ["a"], caption="why")
    captioned.add_row("1")
    assert _plain_lines(captioned) is None
