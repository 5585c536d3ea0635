"""CSV tables: the column writer's bytes (those pandas writes), settings in a ``.meta.json`` sidecar.

A :class:`~qkenergy.formats.table_format.TableFormat`. The list columns (alpha,
beta) hold JSON array text; text cells a spreadsheet could take for a formula
are neutralised (:func:`qkenergy.formats.columns.csv_cell`) and given back as
written when read. The sidecar ``<table>.meta.json`` is
``{"table": ..., "settings": ..., "list_columns": ...}``, written only with settings.
A column table is written without pandas.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.extras import require
from qkenergy.base.formatting import json_safe
from qkenergy.base.json_input import read_bytes, read_object
from qkenergy.formats.columns import Columns, csv_text, frame_columns, with_integer_counts, write_csv
from qkenergy.formats.recorded_settings import MAX_SETTINGS_BYTES, check_settings, sidecar_path
from qkenergy.formats.schema import MAX_CELL_CHARS, MAX_ROWS, MAX_TABLE_BYTES, column_kind
from qkenergy.formats.table_format import check_names, checked_frame, list_columns, too_many

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["EMBEDS_LAYERS", "LIST_ENCODING", "NAME", "read", "read_cells", "read_settings", "write"]

NAME = "csv"
EMBEDS_LAYERS = False

LIST_ENCODING = "JSON array text, e.g. [0.41, 0.12]; [] for an undefined head"
"""How CSV cells hold the list columns (recorded in the sidecar and in docs/columns.md)."""


def write(
    table: pd.DataFrame | Columns,
    path: Path,
    *,
    settings: dict[str, Any] | None,
    layers: pd.DataFrame | None = None,
    outputs: OutputTransaction,
) -> list[Path]:
    """Stage the table as CSV (and, with settings, its sidecar) in ``outputs``; returns both paths.

    Parameters
    ----------
    table : DataFrame or Columns
        The table.
    path : Path
        The CSV file.
    settings : dict or None
        The settings for the sidecar; None for no sidecar.
    layers : DataFrame or None, optional
        Must be None: a CSV file holds one table.
    outputs : OutputTransaction
        The transaction the files are staged in.

    Returns
    -------
    list of Path
        The table and, with settings, its sidecar.
    """
    if layers is not None:
        raise ValueError("a csv table holds one table; the layer table is a table of its own")
    target = Path(path)
    # a DataFrame through the column writer too: text neutralised for spreadsheets (csv_cell), CR quoted
    columns = table if isinstance(table, dict) else frame_columns(with_integer_counts(table.copy()))
    write_csv(columns, outputs.stage(target))
    if settings is None:
        return [target]
    sidecar = {
        "table": target.name,
        "settings": settings,
        "list_columns": {c: LIST_ENCODING for c in list_columns(table)},
    }
    with open(outputs.stage(sidecar_path(target)), "w", encoding="utf-8") as fh:
        json.dump(json_safe(sidecar), fh, allow_nan=False, indent=1)
        fh.write("\n")
    return [target, sidecar_path(target)]


def read(path: Path, *, table: str = "heads") -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """The checked table and its sidecar's settings (None without a sidecar).

    Parameters
    ----------
    path : Path
        The CSV file.
    table : {"heads", "layers"}, optional
        Which table it is (the columns it is checked for).

    Returns
    -------
    frame : DataFrame
        The table.
    settings : dict or None
        The recorded settings.

    Raises
    ------
    QKEnergyError
        The file or its sidecar is unreadable, too large or not such a table.
    """
    source = Path(path)
    where = show_path(source)
    names, cells = read_cells(source, where)
    settings = read_settings(source)
    return checked_frame(names, cells, where, table=table, source=NAME, text=csv_text), settings


def read_settings(path: Path) -> dict[str, Any] | None:
    """The settings of the sidecar ``<table>.meta.json`` (bounded, checked); None when there is none.

    Parameters
    ----------
    path : Path
        The CSV file (the sidecar is found beside it).

    Returns
    -------
    dict or None
        The settings.

    Raises
    ------
    QKEnergyError
        The sidecar is too large, not JSON or its settings not an object.
    """
    sidecar = sidecar_path(path)
    if not sidecar.exists():
        return None
    side = show_path(sidecar)
    document = read_object(sidecar, side, "the settings", MAX_SETTINGS_BYTES)
    return check_settings(document.get("settings"), side)


def read_cells(source: Path, where: str) -> tuple[list[str], dict[str, Any]]:
    """The header and every column of a CSV table (bounded: size, columns, rows, cell length).

    The header is read with the csv module and checked first; the body is parsed by pyarrow into
    Arrow strings (compact: no Python object per cell), and numeric columns are converted there,
    so that a large table costs about its size in memory, not ten times it. Numbers come back as
    float64 arrays (NaN for an empty cell), other columns as lists of text.

    Parameters
    ----------
    source : Path
        The CSV file.
    where : str
        The file as errors show it.

    Returns
    -------
    names : list of str
        The header.
    cells : dict
        Name -> float64 array or list of text.

    Raises
    ------
    QKEnergyError
        The file is too large, not CSV, or exceeds a bound.
    """
    require("tables", "pyarrow", f"{where}: CSV tables are read with it")
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    raw = read_bytes(source, where, "the table", MAX_TABLE_BYTES)
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_CELL_CHARS)
    try:
        head = raw[: 2 * MAX_CELL_CHARS].decode("utf-8", "replace")
        header = next(csv.reader(io.StringIO(head, newline=""), strict=True), None)
    except csv.Error as exc:
        reason = " ".join(str(exc).split())[:120]
        if "field limit" in reason:
            reason = f"a column name longer than {MAX_CELL_CHARS} characters"
        raise QKEnergyError(f"{where}: not a valid CSV header ({reason})") from None
    finally:
        csv.field_size_limit(limit)
    if header is None:
        raise QKEnergyError(f"{where}: empty file; expected a CSV header of column names")
    names = check_names(header, where)
    try:
        arrow = pcsv.read_csv(
            pa.BufferReader(raw),
            read_options=pcsv.ReadOptions(block_size=32 << 20, use_threads=False),
            parse_options=pcsv.ParseOptions(newlines_in_values=True),
            convert_options=pcsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowException, ValueError) as exc:
        reason = " ".join(str(exc).split())
        if "UTF8" in reason or "UTF-8" in reason:
            reason = "text that is not UTF-8"
        elif "Expected" in reason and "columns" in reason:
            reason = "a row has another number of cells than the header has columns"
        elif "straddl" in reason or "block" in reason:
            reason = "a row longer than 32 MiB"
        raise QKEnergyError(f"{where}: not a valid CSV table ({reason[:120]})") from None
    try:
        read_names = arrow.column_names  # pyarrow decodes them: ValueError for bytes that are not UTF-8
    except ValueError:
        read_names = None
    if read_names != names:  # pyarrow read the header as the csv module did
        raise QKEnergyError(f"{where}: not a valid CSV table (its header is not UTF-8 column names)")
    if arrow.num_rows > MAX_ROWS:
        raise too_many(where, arrow.num_rows, "rows", MAX_ROWS)
    cells: dict[str, Any] = {}
    for name in names:
        column = arrow.column(name)
        if column_kind(name) not in ("text", "flag", "lobe"):
            try:  # numbers, converted by Arrow; a cell that is not one: found cell by cell
                numbers = pc.cast(
                    pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column), pa.float64()
                )
                cells[name] = numbers.to_numpy(zero_copy_only=False).astype(np.float64)
                continue
            except (pa.ArrowException, ValueError):
                pass
        cells[name] = column.to_pylist()
    return names, cells
