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
    format_fixed,
    format_number,
    format_p,
    json_safe,
    output_console,
    plain_text,
    plural,
    print_table,
    rich_table,
)
from qkenergy.math.tails import resolved_floor


def test_numbers_of_every_magnitude() -> None:
    assert format_fixed(0.123456) == "0.1235" and format_fixed(float("nan")) == MISSING
    assert format_number(0.5, 2) == "0.5" and format_number(2.5e-7, 2) == "2.500e-07"
    assert format_number(0.0) == "0" and format_number(None) == MISSING


def test_p_values_have_two_digits_and_a_stated_floor() -> None:
    # Two significant digits at any depth; below the floor a bound, never digits the Beta
    # approximation cannot support (the old "2.227e-311") nor an underflow ("<5e-324").
    assert format_p(0.04) == "0.04" and format_p(0.0271) == "0.027" and format_p(1.0) == "1"
    assert format_p(np.float64(3.14e-12)) == "3.1e-12" and format_p(0.0009995) == "0.001"
    assert format_p(2.227e-311) == "<1e-300" and format_p(0.0) == "<1e-300"
    floor = resolved_floor(2000)
    assert format_p(1e-31, floor) == "1e-31" and format_p(9.9e-32, floor) == "<1e-31"
    assert format_p(0.0, floor) == "<1e-31"
    assert format_p(float("nan")) == MISSING


def test_plural() -> None:
    assert (plural(1, "model"), plural(0, "model"), plural(12, "head")) == ("1 model", "0 models", "12 heads")


def test_json_safe_has_no_nan() -> None:
    value = json_safe({"a": np.array([1.0, np.nan]), "b": (np.float32(2), math.inf)})
    assert value == {"a": [1.0, None], "b": [2.0, None]}


def _printed(print_to: Callable[[Console], None], width: int = 80) -> str:
    buffer = io.StringIO()
    print_to(output_console(buffer, width=width, force_terminal=False, color_system=None))
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


def _by_rich(table: Any, width: int) -> str:
    """What rich itself prints for ``table`` on a plain console, its trailing spaces removed."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None).print(table)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def test_plain_tables_print_as_rich_lays_them_out() -> None:
    # Off a terminal, a table of plain text that fits is laid out without rich (rich's public
    # Column.cells read, no private state); the text must be rich's, byte for byte once rich's
    # trailing spaces are gone, for any widths, justifications and missing cells.
    rng = np.random.default_rng(7)
    pool = ["0", "12", "0.5636", "-1.1", MISSING, "", "most symmetric", "I+", "<1e-31", "encoder 3", "a·b"]
    laid_out = 0
    for _ in range(300):
        columns: list[str | tuple[str, str]] = [
            (str(rng.choice(["layer", "s", "", "median s", "p_bh"])), str(rng.choice(["left", "right"])))
            for _ in range(int(rng.integers(1, 7)))
        ]
        title = str(rng.choice(["Heads worth a look", "T", "Symmetric energy per layer, a long title here"]))
        rows = [[str(rng.choice(pool)) for _ in columns] for _ in range(int(rng.integers(0, 6)))]
        plain = _printed(functools.partial(print_table, table=_table(title, columns, rows)))
        assert plain == _by_rich(_table(title, columns, rows, bare=True), 80), (title, columns, rows)
        assert not any(line.endswith(" ") for line in plain.splitlines())
        laid_out += _plain_lines(_table(title, columns, rows, bare=True)) is not None
    assert laid_out > 150  # most of them took the plain route (long titles and empty columns do not)


def test_tables_rich_must_render_are_left_to_it() -> None:
    for cell in ("[bold]x[/bold]", ":smile:", "two\nlines", " padded", "日本"):
        assert _plain_lines(_table("t", ["a"], [[cell]], bare=True)) is None, cell
    captioned = rich_table("t", ["a"], caption="why")
    captioned.add_row("1")
    assert _plain_lines(captioned) is None


def test_a_wide_table_is_fitted_to_the_width_off_a_terminal() -> None:
    # 289-character lines of `qkenergy layouts` in a pipe: now wrapped within 80 (or COLUMNS) columns.
    rows = [["llama", "Llama 1-3, CodeLlama, TinyLlama " * 3, "transformers LlamaForCausalLM"]]
    for width in (80, 60):
        text = plain_text(lambda c: print_table(c, _table("wide", ["a", "b", "c"], rows)), width)
        lines = text.splitlines()
        assert max(map(len, lines)) <= width and len(lines) > 3, text
        assert not any(line.endswith(" ") for line in lines)
        assert "".join(text.split()).count("TinyLlama") == 3  # wrapped, nothing cut


def test_output_console_drops_trailing_spaces_off_a_terminal() -> None:
    buffer = io.StringIO()
    console = output_console(buffer, width=30)
    assert not console.is_terminal
    console.print("a sentence long enough to be wrapped by rich at thirty columns")
    console.print("x   ", end="")
    console.print("y")
    text = buffer.getvalue()
    assert text.splitlines()[0] == "a sentence long enough to be" and text.endswith("x   y\n")
    assert not any(line.endswith(" ") for line in text.splitlines())
