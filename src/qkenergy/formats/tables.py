"""Tidy tables: csv / parquet / json, written atomically with their settings, and read back.

pandas is imported where a function needs it, not with this module: writing a
CSV of an analysis (a column table, :mod:`qkenergy.formats.columns`) never needs it.
"""

from __future__ import annotations

import contextlib
import json
import math
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
    json_list,
    to_frame,
    with_integer_counts,
    write_csv,
)
from qkenergy.formats.provenance import METADATA_KEY, read_settings, settings_json, sidecar_path
from qkenergy.formats.transaction import OutputTransaction, joined

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
                out = with_integer_counts(df.copy())
                for col in _list_columns(out):
                    out[col] = [json_list(v) for v in out[col]]
                out.to_csv(tmp, index=False)
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


def _as_list(value: Any) -> list[float]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [float("nan") if x is None else float(x) for x in value]


def read_table(path: str | os.PathLike[str], *, table: str = "heads") -> pd.DataFrame:
    """Inverse of :func:`write_table`: the table, with its settings in ``df.attrs["settings"]`` (or None).

    Older files are read too: a JSON list of records, a CSV without sidecar.
    ``table="layers"`` reads the layer table embedded in a json file, or a
    ``.layers`` csv / parquet file. Head tables are checked for the head-table columns.
    """
    source = Path(path)
    fmt = _format(source)
    if table not in ("heads", "layers"):
        raise ValueError(f"table must be 'heads' or 'layers', got {table!r}")
    if not source.is_file():
        raise QKEnergyError(f"{source}: no such file")
    settings = None
    try:
        if fmt == "csv":
            import pandas as pd

            # read_csv leaves one block per column; copy() joins them, else every later
            # assign on a table of over 100 columns warns that the frame is fragmented
            df = pd.read_csv(source).copy()
            settings = read_settings(source)
        elif fmt == "parquet":
            import pyarrow.parquet as pq

            arrow = pq.read_table(source)
            df = arrow.to_pandas()
            raw = (arrow.schema.metadata or {}).get(METADATA_KEY.encode())
            settings = None if raw is None else json.loads(raw)
        else:
            with open(source, encoding="utf-8") as fh:
                document = json.load(fh)
            if isinstance(document, dict):
                settings = document.get("settings")
                if table not in document:
                    raise ValueError(f"the JSON object has no {table!r} member")
                records = document[table]
            else:
                records = document  # before settings were recorded: a plain list of records
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise ValueError("expected a list of records (objects)")
            import pandas as pd

            df = pd.DataFrame.from_records(records)
            for col in df.columns:
                # Columns that are entirely null were all-NaN floats when written.
                if df[col].dtype == object and df[col].isna().all():
                    df[col] = np.nan
        for col in _list_columns(df):
            df[col] = [_as_list(v) for v in df[col]]
        if settings is not None and not isinstance(settings, dict):
            raise ValueError("its settings are not a JSON object")
    except QKEnergyError:
        raise
    except Exception as exc:  # parsers raise many types; the user needs one line
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise QKEnergyError(f"{source}: cannot read as {fmt} ({msg})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns] if table == "heads" else []
    if missing:
        raise QKEnergyError(
            f"{source}: not a qkenergy head table; missing column(s) {', '.join(missing)} "
            "(write one with `qkenergy analyze -o FILE`)"
        )
    for col in STRING_COLUMNS:
        if col in df.columns:
            df[col] = text_column(df[col])
    df = with_integer_counts(df)
    df.attrs["settings"] = settings
    return df


def text_column(values: pd.Series) -> pd.Series:
    """A label column as str: missing values become "" (also in a column csv read as all-NaN floats)."""
    return values.astype(object).where(values.notna(), "").astype(str)
