"""The documented columns of qkenergy's result tables, and the checks a table read back must pass.

A results file given to ``qkenergy plot`` or ``qkenergy report`` is input like
any other: every column docs/columns.md names is checked for its kind before
anything uses it (an index is a finite integer, a share lies in [0, 1], a
p-value too, a lobe is a list of numbers, ...), and a failure is one line that
names the file, the column and the first bad row. A column the page does not
name (a newer qkenergy's, or one a user added) is read as numbers when every
cell is one, else as text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe, parse_value

__all__ = [
    "KINDS",
    "MAX_CELL_CHARS",
    "MAX_COLUMNS",
    "MAX_LIST_LENGTH",
    "MAX_ROWS",
    "MAX_TABLE_BYTES",
    "MAX_UNPACKED_BYTES",
    "TEXT_COLUMNS",
    "check_cells",
    "check_numbers",
    "column_kind",
]

MAX_COLUMNS = 1024
"""Most columns a table may have (analyze writes about 70)."""
MAX_ROWS = 1_000_000
"""Most rows a table may have (every head of some twenty 70B-sized models, one table each is 5120)."""
MAX_TABLE_BYTES = 128 << 20
"""Largest CSV or JSON table read (a 400-layer, 128-head model's head table is some 70 MB)."""
MAX_UNPACKED_BYTES = 1 << 30
"""Largest Parquet table once decompressed, as its metadata states it (checked before reading)."""
MAX_CELL_CHARS = 1 << 20
"""Longest cell (text, or a lobe as JSON array text) of a CSV table."""
MAX_LIST_LENGTH = 1 << 17
"""Longest lobe (alpha, beta): a layer form's eigenvalues, far beyond any residual width."""

# Kinds: what a cell may hold.
#   text: any text (missing: "");   flag: true / false;
#   index: an integer >= 0;   size: an integer >= 1;   offset: any integer;   (never missing)
#   count: an integer >= 0 or missing;   share: a number in [0, 1] or missing;
#   number: a finite number or missing;   ratio: a number >= 0, +inf, or missing;
#   score: any number, infinities included, or missing;   lobe: a list of finite numbers.
KINDS = ("text", "flag", "index", "size", "offset", "count", "share", "number", "ratio", "score", "lobe")

TEXT_COLUMNS = (
    "model", "stack", "positional", "quantization", "head_type", "reason", "route", "null_route",
    "null_note", "group", "source", "revision",
)  # fmt: skip
_NAMED = {
    **dict.fromkeys(TEXT_COLUMNS, "text"),
    "qk_norm": "flag",
    **dict.fromkeys(("layer", "head", "kv_head"), "index"),
    **dict.fromkeys(("n", "N", "n_heads", "n_kv_heads"), "size"),
    "offset": "offset",
    **dict.fromkeys(("n_pos", "n_neg", "n_zero", "step"), "count"),
    **dict.fromkeys(
        (
            "symmetric_energy",
            "a",
            "b",
            "c",
            "d",
            "b_sym",
            "c_sym",
            "d_sym",
            "balance",
            "leading_share",
            "limit_b_sym",
            "limit_c_sym",
            "limit_d_sym",
            "symmetric_energy_baseline",
        ),
        "share",
    ),
    **dict.fromkeys(
        (
            "pairing",
            "pairing_bound",
            "pairing_gap",
            "lobe_departure",
            "trace_ratio",
            "participation_ratio",
            "stable_rank",
            "limit_distance",
            "symmetry_score",
            "directionality",
            "directionality_raw",
            "imbalance",
            "lobe_imbalance",
            "lobe_overlap",
            "moment_O",
            "moment_E",
            "moment_R",
        ),
        "number",
    ),
    "rho": "ratio",
    **dict.fromkeys(("alpha", "beta"), "lobe"),
}
# Families of columns, by the end of their name (the null-law columns of every statistic).
_SUFFIXES = (("_p", "share"), ("_p_tail", "share"), ("_p_bh", "share"), ("_z", "score"),
             ("_null_mean", "number"), ("_null_sd", "number"))  # fmt: skip
_SLACK = 1e-9  # rounding: a share computed as 1 - x may come out a hair outside [0, 1]


def column_kind(name: str) -> str | None:
    """The kind of a documented column (see :data:`KINDS`); None for a column docs/columns.md does not name.

    Parameters
    ----------
    name : str
        The column's name.

    Returns
    -------
    str or None
        Its kind.
    """
    return _NAMED.get(name) or next((k for suffix, k in _SUFFIXES if name.endswith(suffix)), None)


def _fail(where: str, name: str, row: int, value: object, expected: str) -> QKEnergyError:
    return QKEnergyError(
        f"{where}: column {show_name(name, 60)} row {row + 1}: {describe(value)} is not {expected}"
    )


_EXPECTED = {
    "index": "an integer >= 0",
    "size": "an integer >= 1",
    "offset": "an integer",
    "count": "an integer >= 0 or empty",
    "share": "a number in [0, 1] or empty",
    "number": "a finite number or empty",
    "ratio": "a number >= 0 (or +inf) or empty",
    "score": "a number or empty",
}


def _numbers(cells: Sequence[Any], name: str, where: str, kind: str, source: str) -> np.ndarray:
    """Cells as float64 (NaN for missing), by the rules of the file's format ``source``."""
    if source == "csv":
        text = np.asarray(cells, dtype=str)
        try:  # all at once; cell by cell below only to find the bad one
            return np.where(text == "", "nan", text).astype(np.float64)
        except ValueError:
            pass
    out = np.empty(len(cells), np.float64)
    expected = _EXPECTED.get(kind, "a number")
    for i, cell in enumerate(cells):
        if cell is None or (source == "csv" and cell == ""):
            out[i] = math.nan
        elif source != "csv" and (
            isinstance(cell, bool) or not isinstance(cell, int | float | np.integer | np.floating)
        ):
            raise _fail(where, name, i, cell, expected)
        else:
            try:
                out[i] = float(cell)
            except (ValueError, OverflowError):  # CSV text that is no number; an integer beyond a double
                raise _fail(where, name, i, cell, expected) from None
    return out


def _check_numbers(values: np.ndarray, name: str, where: str, kind: str) -> np.ndarray:
    """``values`` checked against ``kind``: the column as float64 or int64."""
    missing = np.isnan(values)
    finite = np.isfinite(values)
    if kind in ("index", "size", "offset"):
        lowest = {"index": 0, "size": 1}.get(kind, -(2**53))
        bad = ~finite | (values != np.round(values)) | (values < lowest) | (np.abs(values) > 2**53)
    elif kind == "count":
        bad = ~missing & (~finite | (values != np.round(values)) | (values < 0) | (values > 2**53))
    elif kind == "share":
        bad = ~missing & ~((values >= -_SLACK) & (values <= 1 + _SLACK))
    elif kind == "number":
        bad = ~missing & ~finite
    elif kind == "ratio":
        bad = ~missing & ~(values >= 0)
    else:
        bad = np.zeros(len(values), bool)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _fail(where, name, row, float(values[row]), _EXPECTED[kind])
    return values.astype(np.int64) if kind in ("index", "size", "offset") else values


def _texts(cells: Sequence[Any], name: str, where: str, source: str) -> list[str]:
    out = []
    for i, cell in enumerate(cells):
        if cell is None or (source == "parquet" and isinstance(cell, float) and math.isnan(cell)):
            out.append("")
        elif isinstance(cell, str):
            if len(cell) > MAX_CELL_CHARS:
                raise QKEnergyError(
                    f"{where}: column {show_name(name, 60)} row {i + 1}: text longer than {MAX_CELL_CHARS} characters"
                )
            out.append(cell)
        else:
            raise _fail(where, name, i, cell, "text")
    return out


def _flags(cells: Sequence[Any], name: str, where: str, source: str) -> np.ndarray:
    out = np.empty(len(cells), bool)
    for i, cell in enumerate(cells):
        if source == "csv" and cell in ("True", "False"):
            out[i] = cell == "True"
        elif source != "csv" and isinstance(cell, bool | np.bool_):
            out[i] = bool(cell)
        else:
            raise _fail(where, name, i, cell, "True or False")
    return out


def _lobes(cells: Sequence[Any], name: str, where: str, source: str) -> list[list[float]]:
    out = []
    expected = "a list of finite numbers"
    for i, cell in enumerate(cells):
        if source == "csv":
            if len(cell) > MAX_CELL_CHARS:
                raise QKEnergyError(
                    f"{where}: column {show_name(name, 60)} row {i + 1}: a cell longer than {MAX_CELL_CHARS} characters"
                )
            if cell.strip() == "":
                cell = []
            else:
                try:
                    # a flat array (what qkenergy writes) parses at once; anything else with the bounds
                    flat = cell.startswith("[") and cell.count("[") == 1 and "{" not in cell
                    cell = json.loads(cell) if flat else parse_value(cell.encode(), where, "a cell")
                except (QKEnergyError, ValueError):
                    raise _fail(where, name, i, cell, expected + " (JSON array text)") from None
        if cell is None:
            cell = []
        if isinstance(cell, np.ndarray):
            cell = cell.tolist()
        if not isinstance(cell, list) or len(cell) > MAX_LIST_LENGTH:
            raise _fail(where, name, i, cell, expected + f" (at most {MAX_LIST_LENGTH})")
        values = []
        for x in cell:
            if x is None:
                values.append(math.nan)  # NaN written as null
            elif isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
                raise _fail(where, name, i, cell, expected)
            else:
                values.append(float(x))
        out.append(values)
    return out


def check_numbers(values: np.ndarray, name: str, where: str) -> np.ndarray:
    """A numeric column read as float64 (NaN for missing: Parquet) checked against its kind.

    Parameters
    ----------
    values : ndarray, shape (rows,)
        The column.
    name : str
        The column's name.
    where : str
        The file as errors show it.

    Returns
    -------
    ndarray, shape (rows,)
        The column, as float64 or its kind's dtype.

    Raises
    ------
    QKEnergyError
        The column's kind is not numeric, or a value does not fit it.
    """
    kind = column_kind(name) or "score"
    if kind not in _EXPECTED:
        raise QKEnergyError(f"{where}: column {show_name(name, 60)} holds numbers; expected {_WANTS[kind]}")
    return _check_numbers(np.asarray(values, np.float64), name, where, kind)


_WANTS = {"text": "text", "flag": "True or False", "lobe": "a list of numbers per row"}


def check_cells(cells: Sequence[Any], name: str, where: str, source: str) -> Any:
    """One column's cells (CSV text, JSON values, or Parquet values as Python objects) checked
    against the column's kind; returns the column's values (float64 / int64 / bool array, list of
    str, or list of lists). ``source``: 'csv', 'json' or 'parquet'.

    Parameters
    ----------
    cells : sequence
        The column's cells.
    name : str
        The column's name.
    where : str
        The file as errors show it.
    source : {"csv", "json", "parquet"}
        The format the cells were read from.

    Returns
    -------
    ndarray or list
        The column's values.

    Raises
    ------
    QKEnergyError
        A cell does not fit the column's kind.
    """
    kind = column_kind(name)
    if kind is None:  # undocumented: numbers when every cell is one, else text
        try:
            return _numbers(cells, name, where, "score", source)
        except QKEnergyError:
            texts = [str(c) if c is not None and not isinstance(c, str) else c for c in cells]
            return _texts(texts, name, where, source)
    read = {"text": _texts, "flag": _flags, "lobe": _lobes}.get(kind)
    if read is not None:
        return read(cells, name, where, source)
    return _check_numbers(_numbers(cells, name, where, kind, source), name, where, kind)
