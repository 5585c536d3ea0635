"""Tidy tables: csv / parquet / json, written atomically with their settings, and read back.

pandas is imported where a function needs it, not with this module: writing a
CSV of an analysis (a column table, :mod:`qkenergy.formats.columns`) never needs it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import (
    json_safe,
)
from qkenergy.formats.columns import (
    COUNT_COLUMNS,
    LIST_COLUMNS,
    Columns,
    csv_text,
    frame_columns,
    to_frame,
    with_integer_counts,
    write_csv,
)
from qkenergy.formats.provenance import (
    METADATA_KEY,
    check_settings,
    parse_settings,
    read_settings,
    settings_json,
    sidecar_path,
)
from qkenergy.formats.schema import (
    MAX_CELL_CHARS,
    MAX_COLUMNS,
    MAX_ROWS,
    MAX_TABLE_BYTES,
    MAX_UNPACKED_BYTES,
    check_cells,
    check_numbers,
    column_kind,
)
from qkenergy.formats.transaction import OutputTransaction, joined
from qkenergy.weights.json_input import describe, json_type, open_regular, parse_value, read_bytes, show_name
from qkenergy.weights.safetensors_io import show_path

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


__all__ = [
    "COUNT_COLUMNS",
    "FORMATS",
    "LIST_COLUMNS",
    "REQUIRED_COLUMNS",
    "atomic_path",
    "ensure_directory",
    "layers_path",
    "read_table",
    "text_column",
    "with_integer_counts",
    "write_results",
    "write_table",
]


FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}


# How CSV cells hold the list columns (recorded in the sidecar and in docs/columns.md).
CSV_LIST_ENCODING = "JSON array text, e.g. [0.41, 0.12]; [] for an undefined head"


STRING_COLUMNS = ("model", "stack", "positional", "quantization", "head_type", "reason")


REQUIRED_COLUMNS = ("model", "layer", "head", "n", "N", "symmetric_energy")


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        accepted = ", ".join(FORMATS)
        raise QKEnergyError(
            f"{path}: unknown table format {path.suffix or '(no extension)'!r}; accepted extensions: {accepted}"
        )
    return fmt


def ensure_directory(path: str | os.PathLike[str]) -> Path:
    """Create directory ``path`` (and its parents) if needed; one-line QKEnergyError when that fails."""
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QKEnergyError(f"{directory}: cannot create directory ({exc.strerror or exc})") from None
    return directory


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    A one-file :class:`~qkenergy.formats.transaction.OutputTransaction`: a
    symlinked ``path`` is written through, an existing file keeps its permissions.
    """
    with OutputTransaction() as outputs:
        yield outputs.stage(path)


def _list_columns(df: pd.DataFrame | Columns) -> list[str]:
    return [c for c in LIST_COLUMNS if c in df]


def _frame(df: pd.DataFrame | Columns) -> pd.DataFrame:
    """A copy of the table as a DataFrame, counts as nullable integers."""
    return to_frame(df) if isinstance(df, dict) else with_integer_counts(df.copy())


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: NaN and <NA> as None, lists as lists of floats."""
    out = df.astype(object).where(df.notna(), None) if len(df) else df
    return cast(list[dict[str, Any]], json_safe(out.to_dict(orient="records")))


def write_table(
    df: pd.DataFrame | Columns,
    path: str | os.PathLike[str],
    *,
    settings: dict[str, Any] | None = None,
    layers: pd.DataFrame | None = None,
    transaction: OutputTransaction | None = None,
) -> Path:
    """Write ``df`` as csv, parquet or json (by extension), atomically, with its settings; returns the path.

    ``settings`` (default: ``df.attrs["settings"]``, if any): how the table was
    made (see :mod:`qkenergy.formats.provenance`): Parquet key-value metadata
    ``qkenergy``, the ``settings`` member of the JSON object, or the CSV
    sidecar ``<path>.meta.json`` (only when there are settings). csv keeps the
    list columns (alpha, beta) as JSON array text; json is the object
    ``{"settings": ..., "heads": [records], "layers": [records]}`` with NaN as
    null (``layers`` only for json: csv and parquet take the layer table as a
    table of its own, see :func:`write_results`); parquet keeps lists natively.
    ``transaction``: stage the files in the caller's transaction instead of
    committing them here. ``df`` may be a column table
    (:mod:`qkenergy.formats.columns`): csv is then written without pandas.
    """
    target = Path(path)
    fmt = _format(target)
    if settings is None and not isinstance(df, dict):
        settings = df.attrs.get("settings")
    if layers is not None and fmt != "json":
        raise ValueError("layers are embedded in json tables only; write_results writes the others")
    with joined(transaction) as outputs:
        tmp = outputs.stage(target)
        if fmt == "csv":
            if isinstance(df, dict):
                write_csv(df, tmp)
            else:
                # through the column writer: text neutralised for spreadsheets (csv_cell), CR quoted
                write_csv(frame_columns(with_integer_counts(df.copy())), tmp)
            if settings is not None:
                sidecar = {
                    "table": target.name,
                    "settings": settings,
                    "list_columns": {c: CSV_LIST_ENCODING for c in _list_columns(df)},
                }
                with open(outputs.stage(sidecar_path(target)), "w", encoding="utf-8") as fh:
                    json.dump(json_safe(sidecar), fh, allow_nan=False, indent=1)
                    fh.write("\n")
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            out = _frame(df)
            for col in _list_columns(out):
                out[col] = [[float(x) for x in v] for v in out[col]]
            table = pa.Table.from_pandas(out, preserve_index=False)
            if settings is not None:
                metadata = dict(table.schema.metadata or {})
                metadata[METADATA_KEY.encode()] = settings_json(settings).encode()
                table = table.replace_schema_metadata(metadata)
            pq.write_table(table, tmp)
        else:
            document: dict[str, Any] = {"settings": settings, "heads": _records(_frame(df))}
            if layers is not None:
                document["layers"] = _records(with_integer_counts(layers.copy()))
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(json_safe(document), fh, allow_nan=False)
                fh.write("\n")
    return target


def layers_path(path: str | os.PathLike[str]) -> Path:
    """Where the layer table of a csv / parquet head table goes: results.csv -> results.layers.csv."""
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
    (each csv with its ``.meta.json`` sidecar when there are settings).
    """
    target = Path(path)
    with joined(transaction) as outputs:
        if _format(target) == "json":
            written = [write_table(heads, target, settings=settings, layers=layers, transaction=outputs)]
        else:
            written = [write_table(heads, target, settings=settings, transaction=outputs)]
            if layers is not None:
                written.append(
                    write_table(layers, layers_path(target), settings=settings, transaction=outputs)
                )
    if settings is not None and _format(target) == "csv":
        written += [sidecar_path(p) for p in written]
    return written


def read_table(path: str | os.PathLike[str], *, table: str = "heads") -> pd.DataFrame:
    """Inverse of :func:`write_table`: the table, with its settings in ``df.attrs["settings"]`` (or None).

    Older files are read too: a JSON list of records, a CSV without sidecar.
    ``table="layers"`` reads the layer table embedded in a json file, or a
    ``.layers`` csv / parquet file. Head tables are checked for the head-table columns.

    A table is input like any other: a regular file of bounded size
    (:data:`~qkenergy.formats.schema.MAX_TABLE_BYTES`; Parquet: rows, columns and
    decompressed size from its metadata, before reading), at most
    :data:`~qkenergy.formats.schema.MAX_COLUMNS` uniquely named columns and
    :data:`~qkenergy.formats.schema.MAX_ROWS` rows, every documented column
    checked for its kind (:mod:`qkenergy.formats.schema`) and the settings for
    their types, before anything uses them; each failure one line naming the
    file, the column and the row. Text cells that :func:`write_table`
    neutralised for spreadsheets (a leading ``'``) come back as written.

    Parameters
    ----------
    path : path
        A .csv, .parquet or .json table.
    table : str
        "heads" or "layers".

    Returns
    -------
    DataFrame
        With ``attrs["settings"]``: the settings dict, or None.

    Raises
    ------
    QKEnergyError
        One line naming the file, the column and the row of the first failed check.
    """
    import pandas as pd

    source = Path(path)
    fmt = _format(source)
    if table not in ("heads", "layers"):
        raise ValueError(f"table must be 'heads' or 'layers', got {table!r}")
    where = show_path(source)
    if not os.path.lexists(source):
        raise QKEnergyError(f"{where}: no such file")
    if fmt == "csv":
        names, cells = _csv_cells(source, where)
        settings = read_settings(source)
    elif fmt == "parquet":
        names, cells, settings = _parquet_cells(source, where)
    else:
        names, cells, settings = _json_cells(source, where, table)
    required = REQUIRED_COLUMNS if table == "heads" else ("model", "layer")
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
            values = check_cells(values, name, where, "parquet" if fmt == "parquet" else fmt)
        if fmt == "csv" and column_kind(name) in ("text", None) and isinstance(values, list):
            values = [csv_text(v) for v in values]
        if isinstance(values, np.ndarray):
            data[name] = pd.Series(values, dtype=values.dtype)
        elif (values and isinstance(values[0], list)) or column_kind(name) == "lobe":
            column = np.empty(len(values), dtype=object)
            column[:] = values
            data[name] = pd.Series(column, dtype=object)
        else:
            data[name] = text_column(pd.Series(values, dtype=object))
    df = pd.DataFrame(data, index=pd.RangeIndex(len(next(iter(data.values()))) if data else 0))
    df = with_integer_counts(df)
    df.attrs["settings"] = settings
    return df


def _too_many(where: str, count: int, what: str, limit: int) -> QKEnergyError:
    return QKEnergyError(f"{where}: {count} {what}, more than the {limit} a qkenergy table may have")


def _check_names(names: list[Any], where: str) -> list[str]:
    """Column names: at most MAX_COLUMNS, text, unique."""
    if len(names) > MAX_COLUMNS:
        raise _too_many(where, len(names), "columns", MAX_COLUMNS)
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


def _csv_cells(source: Path, where: str) -> tuple[list[str], dict[str, Any]]:
    """The header and every column of a CSV table (bounded: size, columns, rows, cell length).

    The header is read with the csv module and checked first; the body is parsed by pyarrow into
    Arrow strings (compact: no Python object per cell), and numeric columns are converted there,
    so that a large table costs about its size in memory, not ten times it. Numbers come back as
    float64 arrays (NaN for an empty cell), other columns as lists of text.
    """
    import csv
    import io

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
    names = _check_names(header, where)
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
        raise _too_many(where, arrow.num_rows, "rows", MAX_ROWS)
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


def _json_cells(
    source: Path, where: str, table: str
) -> tuple[list[str], dict[str, list[Any]], dict[str, Any] | None]:
    """Columns of a JSON table (an object with settings and records, or a plain list of records)."""
    raw = read_bytes(source, where, "the table", MAX_TABLE_BYTES)
    try:
        document = parse_value(raw, where, "the table")
    except QKEnergyError as error:
        raise QKEnergyError(
            f"{where}: cannot read as json ({str(error).removeprefix(where + ': ')})"
        ) from None
    settings = None
    if isinstance(document, dict):
        settings = check_settings(document.get("settings"), where)
        if table not in document:
            raise QKEnergyError(f"{where}: the JSON object has no {table!r} member")
        records = document[table]
    else:
        records = document  # before settings were recorded: a plain list of records
    if not isinstance(records, list):
        raise QKEnergyError(
            f"{where}: {table!r} is {json_type(records)}; expected a list of records (objects)"
        )
    if len(records) > MAX_ROWS:
        raise _too_many(where, len(records), "rows", MAX_ROWS)
    names: dict[str, None] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise QKEnergyError(f"{where}: record {i + 1} is {json_type(record)}; expected an object")
        for key in record:
            if key not in names:
                names[key] = None
                if len(names) > MAX_COLUMNS:
                    raise _too_many(where, len(names), "columns or more", MAX_COLUMNS)
    columns = _check_names(list(names), where)
    return columns, {name: [r.get(name) for r in records] for name in columns}, settings


def _parquet_cells(source: Path, where: str) -> tuple[list[str], dict[str, Any], dict[str, Any] | None]:
    """Columns of a Parquet table: counts, types and settings checked from its metadata before reading."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_regular(source, where, MAX_TABLE_BYTES) as fh:
            parquet = pq.ParquetFile(fh)
            meta = parquet.metadata
            if meta.num_columns > MAX_COLUMNS:
                raise _too_many(where, meta.num_columns, "columns", MAX_COLUMNS)
            if meta.num_rows > MAX_ROWS:
                raise _too_many(where, meta.num_rows, "rows", MAX_ROWS)
            unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if unpacked > MAX_UNPACKED_BYTES:
                raise QKEnergyError(
                    f"{where}: {unpacked} bytes once decompressed, more than the {MAX_UNPACKED_BYTES}-byte limit"
                )
            schema = parquet.schema_arrow
            names = _check_names(list(schema.names), where)
            settings = parse_settings((schema.metadata or {}).get(METADATA_KEY.encode()), where)
            for field in schema:
                _check_arrow_type(field, where)
            arrow = parquet.read()
    except (pa.ArrowException, OSError, ValueError) as exc:  # pyarrow: ValueError for bad UTF-8
        first = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise QKEnergyError(f"{where}: cannot read as parquet ({first})") from None
    cells: dict[str, Any] = {}
    for field in arrow.schema:
        column = arrow.column(field.name)
        if _is_numeric(field.type):
            cells[field.name] = column.to_numpy().astype(np.float64)
        else:
            cells[field.name] = column.to_pylist()
    return names, cells, settings


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


def text_column(values: pd.Series) -> pd.Series:
    """A label column as str: missing values become "" (also in a column csv read as all-NaN floats)."""
    return values.astype(object).where(values.notna(), "").astype(str)
