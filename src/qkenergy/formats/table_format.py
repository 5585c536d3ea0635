"""What every table format module provides (:class:`TableFormat`) and the pieces they share.

A table format is one module with the same few names, as safetensors has one
module per framework with the same functions: :mod:`qkenergy.formats.csv_table`,
:mod:`~qkenergy.formats.parquet_table` and :mod:`~qkenergy.formats.json_table`.
:data:`qkenergy.formats.tables.FORMATS` maps a file extension to its module,
and ``write_table`` / ``read_table`` / ``provenance.read_settings`` dispatch
through it: adding a format is one module and one line there.

Reading is the same in every format: the module reads the file within the
bounds of :mod:`qkenergy.formats.schema` into column names and raw cells
(its own bounded part), and :func:`checked_frame` checks the names against the
table's required columns and every cell against its column's kind, then builds
the DataFrame. pandas is imported inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import numpy as np

from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import json_safe
from qkenergy.base.json_input import describe
from qkenergy.formats.columns import LIST_COLUMNS, Columns, list_column, to_frame, with_integer_counts
from qkenergy.formats.schema import MAX_COLUMNS, check_cells, check_numbers, column_kind

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "REQUIRED_COLUMNS",
    "STRING_COLUMNS",
    "TABLES",
    "TableFormat",
    "check_names",
    "checked_frame",
    "frame_of",
    "list_columns",
    "records",
    "text_column",
    "too_many",
]

TABLES = ("heads", "layers")
"""The tables of one run: ``read(path, table=...)`` reads one of them."""

STRING_COLUMNS = ("model", "stack", "positional", "quantization", "head_type", "reason")

REQUIRED_COLUMNS = ("model", "layer", "head", "n", "N", "symmetric_energy")
_REQUIRED_LAYER_COLUMNS = ("model", "layer")


@runtime_checkable
class TableFormat(Protocol):
    """One table format: a module with these names (checked by mypy for every entry of ``FORMATS``).

    ``write`` stages ``path`` (and any file beside it, as CSV's settings
    sidecar) in ``outputs`` and returns every file it staged, the table first;
    ``settings`` None writes none. ``layers``: the layer table, for a format
    that holds it in the head table's own file (:attr:`EMBEDS_LAYERS`); the
    others are given None and ``write_results`` writes the layer table as a
    table of its own. ``read`` is the bounded, checked inverse of ``write``:
    the frame (counts as nullable integers) and the settings (None for a table
    without). ``read_settings`` reads the settings alone.
    """

    NAME: str
    """The format's name in messages ("csv")."""
    EMBEDS_LAYERS: bool
    """True when the layer table goes inside the head table's file (json)."""

    def write(
        self,
        table: pd.DataFrame | Columns,
        path: Path,
        *,
        settings: dict[str, Any] | None,
        layers: pd.DataFrame | None,
        outputs: OutputTransaction,
    ) -> list[Path]: ...

    def read(self, path: Path, *, table: str = "heads") -> tuple[pd.DataFrame, dict[str, Any] | None]: ...

    def read_settings(self, path: Path) -> dict[str, Any] | None: ...


# ----------------------------------------------------------------------------- writing


def list_columns(table: pd.DataFrame | Columns) -> list[str]:
    """The list columns (alpha, beta) the table has.

    Parameters
    ----------
    table : DataFrame or Columns
        The table.

    Returns
    -------
    list of str
        Its list columns.
    """
    return [c for c in LIST_COLUMNS if c in table]


def frame_of(table: pd.DataFrame | Columns) -> pd.DataFrame:
    """A copy of the table as a DataFrame, counts as nullable integers.

    Parameters
    ----------
    table : DataFrame or Columns
        The table.

    Returns
    -------
    DataFrame
        A copy.
    """
    return to_frame(table) if isinstance(table, dict) else with_integer_counts(table.copy())


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: NaN and <NA> as None, lists as lists of floats.

    Parameters
    ----------
    frame : DataFrame
        The table.

    Returns
    -------
    list of dict
        One dict per row.
    """
    out = frame.astype(object).where(frame.notna(), None) if len(frame) else frame
    return cast(list[dict[str, Any]], json_safe(out.to_dict(orient="records")))


# ----------------------------------------------------------------------------- reading


def too_many(where: str, count: int, what: str, limit: int) -> QKEnergyError:
    """The one line for a table beyond a bound of :mod:`qkenergy.formats.schema`.

    Parameters
    ----------
    where : str
        The file as errors show it.
    count : int
        How many there are.
    what : str
        Of what ("rows", "columns").
    limit : int
        The bound.

    Returns
    -------
    QKEnergyError
        The error, for the caller to raise.
    """
    return QKEnergyError(f"{where}: {count} {what}, more than the {limit} a qkenergy table may have")


def check_names(names: list[Any], where: str) -> list[str]:
    """Column names: at most MAX_COLUMNS, text, unique.

    Parameters
    ----------
    names : list
        The column names read.
    where : str
        The file as errors show it.

    Returns
    -------
    list of str
        ``names``.

    Raises
    ------
    QKEnergyError
        Too many columns, a name that is not text of 1 to 200 characters, or a name twice.
    """
    if len(names) > MAX_COLUMNS:
        raise too_many(where, len(names), "columns", MAX_COLUMNS)
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise QKEnergyError(
                f"{where}: column name {describe(name)} is not a name (text of 1 to 200 characters)"
            )
        if name in seen:
            raise QKEnergyError(f"{where}: column {show_name(name, 60)} appears twice")
        seen.add(name)
    return names


def checked_frame(
    names: Sequence[str],
    cells: dict[str, Any],
    where: str,
    *,
    table: str,
    source: str,
    text: Callable[[str], str] | None = None,
) -> pd.DataFrame:
    """The table read back: required columns present, every cell checked for its kind, as a DataFrame.

    Parameters
    ----------
    names : sequence of str
        The columns, in order.
    cells : dict
        Column -> float64 array (numbers a reader already converted) or raw cells, checked by
        :func:`qkenergy.formats.schema.check_cells`.
    where : str
        The file as errors show it.
    table : {"heads", "layers"}
        Which table it is (its required columns).
    source : {"csv", "json", "parquet"}
        The format read, whose rules the raw cells are checked under (csv: text; others: typed values).
    text : callable or None, optional
        Applied to each text cell once checked (CSV: undoing the spreadsheet neutralisation).

    Returns
    -------
    DataFrame
        The table, counts as nullable integers.

    Raises
    ------
    QKEnergyError
        A required column is missing, or a cell does not fit its kind.
    """
    import pandas as pd

    required = REQUIRED_COLUMNS if table == "heads" else _REQUIRED_LAYER_COLUMNS
    missing = [c for c in required if c not in names]
    if missing:
        kind = "head" if table == "heads" else "layer"
        raise QKEnergyError(
            f"{where}: not a qkenergy {kind} table; missing column(s) {', '.join(missing)} "
            "(write one with `qkenergy analyze -o FILE`)"
        )
    data: dict[str, Any] = {}
    for name in names:
        values = cells[name]
        if isinstance(values, np.ndarray):  # numbers, already converted (CSV, Parquet)
            values = check_numbers(values, name, where)
        else:
            values = check_cells(values, name, where, source)
        if text is not None and column_kind(name) in ("text", None) and isinstance(values, list):
            values = [text(v) for v in values]
        if isinstance(values, np.ndarray):
            data[name] = pd.Series(values, dtype=values.dtype)
        elif (values and isinstance(values[0], list)) or column_kind(name) == "lobe":
            data[name] = pd.Series(list_column(values), dtype=object)
        else:
            data[name] = text_column(pd.Series(values, dtype=object))
    frame = pd.DataFrame(data, index=pd.RangeIndex(len(next(iter(data.values()))) if data else 0))
    return with_integer_counts(frame)


def text_column(values: pd.Series) -> pd.Series:
    """A label column as str: missing values become "" (also in a column csv read as all-NaN floats).

    Parameters
    ----------
    values : Series
        The column.

    Returns
    -------
    Series
        The column as str.
    """
    return values.astype(object).where(values.notna(), "").astype(str)
