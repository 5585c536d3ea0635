"""Parquet tables: one Arrow table per file, the settings in its key-value metadata ``qkenergy``.

A :class:`~qkenergy.formats.table_format.TableFormat`, and the one Parquet
writer and reader of the package: ``analyze -o heads.parquet`` and the
survey's unit files (:mod:`qkenergy.surveys.dataset`) are written by
:func:`write_frame` and read by :func:`read_arrow`, so that both have the same
schema and metadata handling and the same bounds on hostile input. Lists
(alpha, beta) are stored natively as lists of doubles.

pyarrow and pandas are imported inside the functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import open_regular
from qkenergy.formats.columns import Columns
from qkenergy.formats.recorded_settings import METADATA_KEY, parse_settings, settings_json
from qkenergy.formats.schema import MAX_COLUMNS, MAX_ROWS, MAX_TABLE_BYTES, MAX_UNPACKED_BYTES, column_kind
from qkenergy.formats.table_format import check_names, checked_frame, frame_of, list_columns, too_many

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "EMBEDS_LAYERS",
    "NAME",
    "arrow_table",
    "read",
    "read_arrow",
    "read_cells",
    "read_settings",
    "write",
    "write_frame",
]

NAME = "parquet"
EMBEDS_LAYERS = False


# ----------------------------------------------------------------------------- writing


def arrow_table(
    frame: pd.DataFrame,
    *,
    settings: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
    types: Mapping[str, Any] | None = None,
    nulls_as_text: bool = False,
    pandas_metadata: bool = True,
) -> Any:
    """``frame`` as an Arrow table (no index), ``settings`` as JSON text under the metadata key ``qkenergy``.

    Parameters
    ----------
    frame : DataFrame
        The table.
    settings : mapping or None, optional
        The settings to record.
    metadata : mapping or None, optional
        Further key-value metadata, before the settings.
    types : mapping or None, optional
        Column -> the Arrow type it is cast to.
    nulls_as_text : bool, optional
        Store a column holding nothing but nulls as text, not as Arrow's null type (a dataset
        whose files must agree on every column's type: the survey's).
    pandas_metadata : bool, optional
        Keep the ``pandas`` key that pyarrow adds (a survey's unit files carry only qkenergy's keys).

    Returns
    -------
    pyarrow.Table
        The Arrow table.
    """
    import pyarrow as pa

    table = pa.Table.from_pandas(frame, preserve_index=False)
    for name, kind in (types or {}).items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, pa.field(name, kind), table.column(i).cast(kind))
    if nulls_as_text:
        for i, field in enumerate(table.schema):
            if pa.types.is_null(field.type):
                table = table.set_column(
                    i, pa.field(field.name, pa.string()), table.column(i).cast(pa.string())
                )
    if settings is None and metadata is None and pandas_metadata:
        return table
    kept: dict[bytes, bytes] = dict(table.schema.metadata or {}) if pandas_metadata else {}
    kept.update({key.encode(): value.encode() for key, value in (metadata or {}).items()})
    if settings is not None:
        kept[METADATA_KEY.encode()] = settings_json(settings).encode()
    return table.replace_schema_metadata(kept)


def write_frame(frame: pd.DataFrame, path: str | os.PathLike[str], **options: Any) -> None:
    """Write ``arrow_table(frame, **options)`` to ``path`` (a staged temporary file: no atomicity here).

    Parameters
    ----------
    frame : DataFrame
        The table.
    path : str or path-like
        The file to write.
    **options
        Keywords of :func:`arrow_table`.
    """
    import pyarrow.parquet as pq

    pq.write_table(arrow_table(frame, **options), path)


def write(
    table: pd.DataFrame | Columns,
    path: Path,
    *,
    settings: dict[str, Any] | None,
    layers: pd.DataFrame | None = None,
    outputs: OutputTransaction,
) -> list[Path]:
    """Stage the table as Parquet in ``outputs``: counts as nullable integers, lobes as lists of doubles.

    Parameters
    ----------
    table : DataFrame or Columns
        The table.
    path : Path
        The Parquet file.
    settings : dict or None
        The settings to record in the metadata.
    layers : DataFrame or None, optional
        Must be None: a Parquet file holds one table.
    outputs : OutputTransaction
        The transaction the file is staged in.

    Returns
    -------
    list of Path
        ``[path]``.
    """
    if layers is not None:
        raise ValueError("a parquet table holds one table; the layer table is a table of its own")
    target = Path(path)
    frame = frame_of(table)
    for column in list_columns(frame):
        frame[column] = [[float(x) for x in v] for v in frame[column]]
    write_frame(frame, outputs.stage(target), settings=settings)
    return [target]


# ----------------------------------------------------------------------------- reading


def read(path: Path, *, table: str = "heads") -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """The checked table and the settings of its metadata (None without).

    Parameters
    ----------
    path : Path
        The Parquet file.
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
        The file is unreadable, too large or not such a table.
    """
    source = Path(path)
    where = show_path(source)
    names, cells, settings = read_cells(source, where)
    return checked_frame(names, cells, where, table=table, source=NAME), settings


def read_settings(path: Path) -> dict[str, Any] | None:
    """The settings of the file's metadata (its schema alone is read), checked; None without.

    Parameters
    ----------
    path : Path
        The Parquet file.

    Returns
    -------
    dict or None
        The settings.

    Raises
    ------
    QKEnergyError
        The file is not readable Parquet or its settings are not valid.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = Path(path)
    where = show_path(source)
    try:
        with open_regular(source, where) as fh:
            metadata = pq.read_schema(fh).metadata or {}
    except (pa.ArrowException, OSError, ValueError) as exc:  # pyarrow: ValueError for bad UTF-8
        raise QKEnergyError(f"{where}: not a readable Parquet file ({_first_line(exc)})") from None
    return parse_settings(metadata.get(METADATA_KEY.encode()), where)


def read_arrow(
    path: Path, where: str, *, unreadable: str = "cannot read as parquet"
) -> tuple[Any, dict[str, Any] | None]:
    """A Parquet file as an Arrow table and its settings, checked from its metadata before it is read.

    A regular file of at most :data:`~qkenergy.formats.schema.MAX_TABLE_BYTES`;
    its footer's counts (columns, rows, bytes once decompressed) within the
    bounds of :mod:`qkenergy.formats.schema`; unique column names; each
    column's Arrow type fitting its documented kind; the settings checked. A
    failure is one line starting with ``where`` (``unreadable (...)`` for what
    pyarrow cannot read).

    Parameters
    ----------
    path : Path
        The Parquet file.
    where : str
        The file as errors show it.
    unreadable : str, optional
        The error's words for a file pyarrow cannot read.

    Returns
    -------
    table : pyarrow.Table
        The table.
    settings : dict or None
        The recorded settings.

    Raises
    ------
    QKEnergyError
        Any check above fails.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_regular(path, where, MAX_TABLE_BYTES) as fh:
            parquet = pq.ParquetFile(fh)
            meta = parquet.metadata
            if meta.num_columns > MAX_COLUMNS:
                raise too_many(where, meta.num_columns, "columns", MAX_COLUMNS)
            if meta.num_rows > MAX_ROWS:
                raise too_many(where, meta.num_rows, "rows", MAX_ROWS)
            unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if unpacked > MAX_UNPACKED_BYTES:
                raise QKEnergyError(
                    f"{where}: {unpacked} bytes once decompressed, more than the {MAX_UNPACKED_BYTES}-byte limit"
                )
            schema = parquet.schema_arrow
            check_names(list(schema.names), where)
            settings = parse_settings((schema.metadata or {}).get(METADATA_KEY.encode()), where)
            for field in schema:
                _check_arrow_type(field, where)
            arrow = parquet.read()
    except (pa.ArrowException, OSError, ValueError) as exc:  # pyarrow: ValueError for bad UTF-8
        raise QKEnergyError(f"{where}: {unreadable} ({_first_line(exc)})") from None
    return arrow, settings


def read_cells(source: Path, where: str) -> tuple[list[str], dict[str, Any], dict[str, Any] | None]:
    """Columns of a Parquet table (:func:`read_arrow`): numbers as float64 arrays, the rest as Python values.

    Parameters
    ----------
    source : Path
        The Parquet file.
    where : str
        The file as errors show it.

    Returns
    -------
    names : list of str
        The columns.
    cells : dict
        Name -> float64 array or list of values.
    settings : dict or None
        The recorded settings.

    Raises
    ------
    QKEnergyError
        As :func:`read_arrow`.
    """
    arrow, settings = read_arrow(source, where)
    cells = {
        field.name: column.to_numpy().astype(np.float64) if _is_numeric(field.type) else column.to_pylist()
        for field, column in zip(arrow.schema, arrow.columns, strict=True)
    }
    return list(arrow.schema.names), cells, settings


def _first_line(error: BaseException) -> str:
    return (" ".join(str(error).split())[:200]) or type(error).__name__


def _is_numeric(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))


def _check_arrow_type(field: Any, where: str) -> None:
    """A Parquet column's type fits its documented kind (numbers, text, flags, lists of numbers)."""
    import pyarrow as pa

    kind, arrow_type = column_kind(field.name), field.type
    text = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if pa.types.is_null(arrow_type):
        fits = kind != "flag"
    elif kind == "text":
        fits = text
    elif kind == "flag":
        fits = pa.types.is_boolean(arrow_type)
    elif kind == "lobe":
        fits = (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and (
            _is_numeric(arrow_type.value_type) or pa.types.is_null(arrow_type.value_type)
        )
    elif kind is None:
        fits = text or _is_numeric(arrow_type) or pa.types.is_boolean(arrow_type)
    else:
        fits = _is_numeric(arrow_type)
    if not fits:
        expected = {"text": "text", "flag": "booleans", "lobe": "lists of numbers", None: "numbers or text"}
        raise QKEnergyError(
            f"{where}: column {show_name(field.name, 60)} has Parquet type {str(arrow_type)[:60]}; "
            f"expected {expected.get(kind, 'numbers')}"
        )
