"""Tidy tables: csv / parquet / json, written atomically with their settings, and read back.

:data:`FORMATS` maps a file's extension to its format module (a
:class:`~qkenergy.formats.table_format.TableFormat`); the functions here dispatch through it.

pandas is imported where a function needs it, not with this module: writing a
CSV of an analysis (a column table, :mod:`qkenergy.formats.columns`) never needs it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.atomic import OutputTransaction, joined
from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.extras import require
from qkenergy.formats import csv_table, json_table, parquet_table
from qkenergy.formats.columns import COUNT_COLUMNS, LIST_COLUMNS, Columns, with_integer_counts
from qkenergy.formats.table_format import REQUIRED_COLUMNS, STRING_COLUMNS, TABLES, TableFormat, text_column

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "COUNT_COLUMNS",
    "FORMATS",
    "LIST_COLUMNS",
    "REQUIRED_COLUMNS",
    "STRING_COLUMNS",
    "ensure_directory",
    "layers_path",
    "read_table",
    "table_format",
    "text_column",
    "with_integer_counts",
    "write_results",
    "write_table",
]


FORMATS: dict[str, TableFormat] = {
    ".csv": csv_table,
    ".parquet": parquet_table,
    ".json": json_table,
}
"""File extension (lower case) -> the module that writes and reads that format."""


def table_format(path: str | os.PathLike[str]) -> TableFormat:
    """The format module of ``path``'s extension; one line naming the accepted ones otherwise.

    Parameters
    ----------
    path : str or path-like
        The table's file.

    Returns
    -------
    TableFormat
        The format module.

    Raises
    ------
    QKEnergyError
        The extension is not .csv, .parquet or .json.
    """
    target = Path(path)
    module = FORMATS.get(target.suffix.lower())
    if module is None:
        accepted = ", ".join(FORMATS)
        raise QKEnergyError(
            f"{target}: unknown table format {target.suffix or '(no extension)'!r}; accepted extensions: {accepted}"
        )
    if module is parquet_table:
        require("tables", "pyarrow", f"{target}: Parquet tables are read and written with it")
    return module


def ensure_directory(path: str | os.PathLike[str]) -> Path:
    """Create directory ``path`` (and its parents) if needed; one-line QKEnergyError when that fails.

    Parameters
    ----------
    path : str or path-like
        The directory.

    Returns
    -------
    Path
        The directory.

    Raises
    ------
    QKEnergyError
        It cannot be created.
    """
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QKEnergyError(f"{directory}: cannot create directory ({exc.strerror or exc})") from None
    return directory


def write_table(
    df: pd.DataFrame | Columns,
    path: str | os.PathLike[str],
    *,
    settings: dict[str, Any] | None = None,
    layers: pd.DataFrame | None = None,
    transaction: OutputTransaction | None = None,
) -> Path:
    """Write ``df`` as csv, parquet or json (by extension), atomically, with its settings; returns the path.

    The settings go in Parquet key-value metadata ``qkenergy``, the ``settings`` member of the
    JSON object ``{"settings": ..., "heads": [records], "layers": [records]}`` (NaN as null), or
    the CSV sidecar ``<path>.meta.json`` (only when there are settings). The list columns
    (alpha, beta) are JSON array text in csv, native lists in json and parquet.

    Parameters
    ----------
    df : DataFrame or Columns
        The table; a column table (:mod:`qkenergy.formats.columns`) is written as csv without pandas.
    path : str or path-like
        The file; its extension picks the format.
    settings : dict or None, optional
        How the table was made (:mod:`qkenergy.formats.provenance`); default ``df.attrs["settings"]``.
    layers : DataFrame or None, optional
        The layer table (json only: csv and parquet write it as a table of its own, :func:`write_results`).
    transaction : OutputTransaction or None, optional
        The caller's transaction to stage the files in; None to commit here.

    Returns
    -------
    Path
        The table's file.

    Raises
    ------
    QKEnergyError
        An unknown extension, or a file that cannot be written.
    """
    return _write(df, Path(path), settings, layers, transaction)[0]


def _write(
    df: pd.DataFrame | Columns,
    target: Path,
    settings: dict[str, Any] | None,
    layers: pd.DataFrame | None,
    transaction: OutputTransaction | None,
) -> list[Path]:
    """Every file written for one table (the table first)."""
    module = table_format(target)
    if settings is None and not isinstance(df, dict):
        settings = df.attrs.get("settings")
    if layers is not None and not module.EMBEDS_LAYERS:
        raise ValueError("layers are embedded in json tables only; write_results writes the others")
    with joined(transaction) as outputs:
        return module.write(df, target, settings=settings, layers=layers, outputs=outputs)


def layers_path(path: str | os.PathLike[str]) -> Path:
    """Where the layer table of a csv / parquet head table goes: results.csv -> results.layers.csv.

    Parameters
    ----------
    path : str or path-like
        The head table.

    Returns
    -------
    Path
        The layer table's path.
    """
    target = Path(path)
    return target.with_name(f"{target.stem}.layers{target.suffix}")


def write_results(
    heads: pd.DataFrame | Columns,
    path: str | os.PathLike[str],
    *,
    settings: dict[str, Any] | None = None,
    layers: pd.DataFrame | None = None,
    transaction: OutputTransaction | None = None,
) -> list[Path]:
    """The head table and, if given, the layer table of one run, in one transaction; returns the files.

    json: one file holding both; csv / parquet: ``path`` and :func:`layers_path`
    (each csv with its ``.meta.json`` sidecar when there are settings). The
    tables come first in the list, then the files beside them (sidecars).

    Parameters
    ----------
    heads : DataFrame or Columns
        The head table.
    path : str or path-like
        The head table's file.
    settings : dict or None, optional
        The run's settings.
    layers : DataFrame or None, optional
        The layer table.
    transaction : OutputTransaction or None, optional
        The caller's transaction; None to commit here.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    QKEnergyError
        An unknown extension, or a file that cannot be written.
    """
    target = Path(path)
    with joined(transaction) as outputs:
        embeds = table_format(target).EMBEDS_LAYERS
        parts = [_write(heads, target, settings, layers if embeds else None, outputs)]
        if layers is not None and not embeds:
            parts.append(_write(layers, layers_path(target), settings, None, outputs))
    return [files[0] for files in parts] + [extra for files in parts for extra in files[1:]]


def read_table(path: str | os.PathLike[str], *, table: str = "heads") -> pd.DataFrame:
    """Inverse of :func:`write_table`: the table, with its settings in ``df.attrs["settings"]`` (or None).

    Older files are read too: a JSON list of records, a CSV without sidecar. A table is input
    like any other: a regular file of bounded size (:data:`~qkenergy.formats.schema.MAX_TABLE_BYTES`;
    Parquet: rows, columns and decompressed size from its metadata, before reading), at most
    :data:`~qkenergy.formats.schema.MAX_COLUMNS` uniquely named columns and
    :data:`~qkenergy.formats.schema.MAX_ROWS` rows, every documented column checked for its
    kind (:mod:`qkenergy.formats.schema`) and the settings for their types, before anything uses
    them. Text cells that :func:`write_table` neutralised for spreadsheets (a leading ``'``)
    come back as written.

    Parameters
    ----------
    path : path
        A .csv, .parquet or .json table.
    table : str
        "heads" (checked for the head-table columns) or "layers": the layer table embedded in a
        json file, or a ``.layers`` csv / parquet file.

    Returns
    -------
    DataFrame
        With ``attrs["settings"]``: the settings dict, or None.

    Raises
    ------
    QKEnergyError
        One line naming the file, the column and the row of the first failed check.
    """
    source = Path(path)
    module = table_format(source)
    if table not in TABLES:
        raise ValueError(f"table must be 'heads' or 'layers', got {table!r}")
    if not os.path.lexists(source):
        raise QKEnergyError(f"{show_path(source)}: no such file")
    df, settings = module.read(source, table=table)
    df.attrs["settings"] = settings
    return df
