"""Column tables: a table as an ordered mapping of equal-length 1-D numpy arrays.

The analysis assembles its head table this way and writes CSV from it with
the standard csv module, so a command-line run never imports pandas unless
it must: importing pandas costs about 0.25 s, as much as the whole analysis
of a gpt2-sized model. A DataFrame is built only when one is asked for
(``Analysis.heads``, parquet and json files, the summary, the plots), by
:func:`to_frame`; :func:`write_csv` writes exactly the bytes pandas'
``to_csv(index=False)`` writes for that frame.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qkenergy.base.extras import require
from qkenergy.base.formatting import json_safe

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "COUNT_COLUMNS",
    "LIST_COLUMNS",
    "Columns",
    "broadcast",
    "column_records",
    "concat",
    "csv_cell",
    "csv_text",
    "frame_columns",
    "json_list",
    "list_column",
    "row_count",
    "to_frame",
    "with_integer_counts",
    "write_csv",
]

Columns = dict[str, np.ndarray]
"""Column name -> 1-D array (object arrays for text and lists), every column the same length."""

LIST_COLUMNS = ("alpha", "beta")
COUNT_COLUMNS = ("n_pos", "n_neg", "n_zero")
# A text cell that a spreadsheet could take for a formula starts with one of these (OWASP's list),
# or with the quote that neutralises them (so that neutralising can be undone exactly).
CSV_TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_cell(text: str) -> str:
    """A text cell for a CSV file: a leading ``= + - @``, tab or CR gets a ``'`` before it.

    Names are data: a model called ``=HYPERLINK(...)`` must not become a formula
    when a spreadsheet opens the table (OWASP, "CSV injection"). A leading
    ``'`` is doubled too, so that :func:`csv_text` gives back exactly the text.

    Parameters
    ----------
    text : str
        The cell's text.

    Returns
    -------
    str
        The text as written.
    """
    return "'" + text if text.startswith(CSV_TRIGGERS) else text


def csv_text(cell: str) -> str:
    """The text that :func:`csv_cell` wrote as ``cell``.

    Parameters
    ----------
    cell : str
        The cell as read.

    Returns
    -------
    str
        The text.
    """
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(CSV_TRIGGERS) else cell


def broadcast(values: Mapping[str, Any], rows: int) -> Columns:
    """Each value as a column of ``rows`` entries: arrays as given, scalars repeated (text as objects).

    Parameters
    ----------
    values : mapping
        Column name -> an array of ``rows`` entries or a scalar.
    rows : int
        The number of rows.

    Returns
    -------
    Columns
        Name -> 1-D array of ``rows`` entries.
    """
    out: Columns = {}
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            out[name] = value.reshape(-1)
        else:
            out[name] = np.full(rows, value, dtype=object if isinstance(value, str) else None)
    return out


def list_column(rows: Iterable[list[float]]) -> np.ndarray:
    """A column whose cells are lists (the lobes): an object array, never a 2-D array.

    Parameters
    ----------
    rows : iterable of list of float
        One list per row.

    Returns
    -------
    ndarray of object, shape (rows,)
        The lists.
    """
    cells = list(rows)
    column = np.empty(len(cells), dtype=object)
    column[:] = cells
    return column


def row_count(columns: Columns) -> int:
    """The number of rows of a column table (0 without columns).

    Parameters
    ----------
    columns : Columns
        The column table.

    Returns
    -------
    int
        Its rows.
    """
    return len(next(iter(columns.values()))) if columns else 0


def concat(parts: Sequence[Columns]) -> Columns:
    """The rows of ``parts`` one after another; a column a part lacks is NaN there (as ``pandas.concat``).

    Parameters
    ----------
    parts : sequence of Columns
        The column tables.

    Returns
    -------
    Columns
        Every column of any part, over all their rows.
    """
    names = dict.fromkeys(name for part in parts for name in part)
    return {
        name: np.concatenate(
            [part[name] if name in part else np.full(row_count(part), np.nan) for part in parts]
        )
        for name in names
    }


def with_integer_counts(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with n_pos, n_neg, n_zero as nullable integers (Int64; undefined heads are <NA>).

    Parameters
    ----------
    df : DataFrame
        A head table, changed in place.

    Returns
    -------
    DataFrame
        ``df``.
    """
    import pandas as pd

    for col in COUNT_COLUMNS:
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce").round().astype("Int64")
    return df


def to_frame(columns: Columns) -> pd.DataFrame:
    """The table as a pandas DataFrame, the counts as nullable integers.

    Parameters
    ----------
    columns : Columns
        The column table.

    Returns
    -------
    DataFrame
        The same rows and columns.
    """
    require("pandas", "pandas", "the tables as DataFrames")
    import pandas as pd

    return with_integer_counts(pd.DataFrame(columns))


def column_records(columns: Columns) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts, as ``records(to_frame(columns))`` gives them, without pandas.

    Counts are integers (None where undefined), NaN is None, list cells are lists: the JSON
    table of a command-line run needs no pandas (tests/formats/test_columns_json.py compares).

    Parameters
    ----------
    columns : Columns
        The column table.

    Returns
    -------
    list of dict
        One dict per row.
    """
    cells: dict[str, list[Any]] = {}
    for name, column in columns.items():
        if name in COUNT_COLUMNS:
            counts = np.round(np.asarray(column, dtype=np.float64)).tolist()
            cells[name] = [None if math.isnan(x) else int(x) for x in counts]
        else:
            cells[name] = column.tolist()
    rows = [dict(zip(cells, row, strict=True)) for row in zip(*cells.values(), strict=True)]
    return cast(list[dict[str, Any]], json_safe(rows))


def json_list(values: Any) -> str:
    """A list cell as JSON array text (NaN as null); plain finite floats skip the item-by-item json_safe.

    Parameters
    ----------
    values : iterable
        The cell's items.

    Returns
    -------
    str
        JSON array text.
    """
    values = list(values)
    try:
        return json.dumps(values, allow_nan=False)
    except (TypeError, ValueError):  # numpy scalars, NaN or infinities
        return json.dumps(json_safe(values))


def _cells(name: str, column: np.ndarray) -> list[str]:
    """One column's CSV cells, as pandas writes them: floats by repr, a missing value empty."""
    if name in LIST_COLUMNS:
        return [json_list(v) for v in column]
    if name in COUNT_COLUMNS:
        counts = np.asarray(column, dtype=np.float64)
        return ["" if math.isnan(x) else str(int(x)) for x in np.round(counts).tolist()]
    if column.dtype.kind == "f":
        return ["" if math.isnan(x) else repr(x) for x in column.tolist()]
    values = column.tolist()
    if column.dtype.kind in "biu":
        return [str(x) for x in values]
    return ["" if x is None or (isinstance(x, float) and math.isnan(x)) else csv_cell(str(x)) for x in values]


def _fields(name: str, column: np.ndarray) -> list[str]:
    """One column's cells as csv.writer writes them in a row of several fields (quoted where needed).

    Numbers never need quotes. A list cell is a JSON array of numbers: quoted
    exactly when it holds a comma, with no quote character inside to double, so
    the long lobe cells are not scanned character by character as csv.writer
    would (a third of the time of writing a llama-sized table). Text goes
    through csv.writer itself, once per distinct value.
    """
    cells = _cells(name, column)
    if name in LIST_COLUMNS:
        return [f'"{cell}"' if "," in cell else cell for cell in cells]
    if name in COUNT_COLUMNS or column.dtype.kind in "fbiu":
        return cells
    quoted: dict[str, str] = {}
    for cell in cells:
        if cell not in quoted:
            line = io.StringIO()
            csv.writer(line, lineterminator="\n").writerow([cell, ""])
            field = line.getvalue()[:-2]  # without the empty second field's "," and the "\n"
            if "\r" in cell and not field.startswith('"'):
                # csv.writer quotes only its line terminator ("\n"); a bare CR would end the row for a reader
                field = '"' + cell.replace('"', '""') + '"'
            quoted[cell] = field
    return [quoted[cell] for cell in cells]


def frame_columns(df: pd.DataFrame) -> Columns:
    """A DataFrame as a column table that :func:`write_csv` writes as ``df.to_csv(index=False)`` would.

    Parameters
    ----------
    df : DataFrame
        The table.

    Returns
    -------
    Columns
        Name -> 1-D array (numbers as numbers, the rest as objects, missing as None).
    """
    out: Columns = {}
    for name in df.columns:
        series = df[name]
        if series.dtype.kind in "fbiu" and not hasattr(series.dtype, "na_value"):
            out[str(name)] = series.to_numpy()
        elif str(name) in COUNT_COLUMNS:
            out[str(name)] = series.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            out[str(name)] = np.asarray(series.astype(object).where(series.notna(), None), dtype=object)
    return out


def write_csv(columns: Columns, path: str | os.PathLike[str]) -> None:
    """Write the table as CSV: the bytes of ``to_frame(columns).to_csv(path, index=False)``.

    The list columns (alpha, beta) hold JSON array text, as report.write_table writes them.

    Parameters
    ----------
    columns : Columns
        The column table.
    path : str or path-like
        The file to write (the caller makes the write atomic).
    """
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        if len(columns) < 2:  # csv.writer quotes a lone empty field, so that the row is not blank
            writer.writerows(zip(*(_cells(name, column) for name, column in columns.items())))
            return
        fields = [_fields(name, column) for name, column in columns.items()]
        fh.write("".join([",".join(row) + "\n" for row in zip(*fields, strict=True)]))
