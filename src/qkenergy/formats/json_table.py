"""JSON tables: one strict JSON object ``{"settings": ..., "heads": [records], "layers": [records]}``.

A :class:`~qkenergy.formats.table_format.TableFormat` that holds the layer
table in the head table's file (``layers`` only when there is one). NaN and
<NA> are null, lists are lists; nothing but standard JSON is written. A plain
list of records (a file from before settings were recorded) is read too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import json_safe
from qkenergy.base.json_input import json_type, parse_value, read_bytes
from qkenergy.formats.columns import Columns, column_records, with_integer_counts
from qkenergy.formats.recorded_settings import check_settings
from qkenergy.formats.schema import MAX_COLUMNS, MAX_ROWS, MAX_TABLE_BYTES
from qkenergy.formats.table_format import check_names, checked_frame, frame_of, records, too_many

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["EMBEDS_LAYERS", "NAME", "read", "read_cells", "read_settings", "write"]

NAME = "json"
EMBEDS_LAYERS = True


def write(
    table: pd.DataFrame | Columns,
    path: Path,
    *,
    settings: dict[str, Any] | None,
    layers: pd.DataFrame | None = None,
    outputs: OutputTransaction,
) -> list[Path]:
    """Stage the JSON object (settings, head records, layer records when given) in ``outputs``.

    Parameters
    ----------
    table : DataFrame or Columns
        The head table.
    path : Path
        The JSON file.
    settings : dict or None
        The settings member.
    layers : DataFrame or None, optional
        The layer table, as a ``layers`` member.
    outputs : OutputTransaction
        The transaction the file is staged in.

    Returns
    -------
    list of Path
        ``[path]``.
    """
    target = Path(path)
    # no pandas for Columns
    heads = column_records(table) if isinstance(table, dict) else records(frame_of(table))
    document: dict[str, Any] = {"settings": settings, "heads": heads}
    if layers is not None:
        document["layers"] = records(with_integer_counts(layers.copy()))
    with open(outputs.stage(target), "w", encoding="utf-8") as fh:
        json.dump(json_safe(document), fh, allow_nan=False)
        fh.write("\n")
    return [target]


def read(path: Path, *, table: str = "heads") -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """The checked ``table`` member (``heads`` or ``layers``) and the ``settings`` member.

    Parameters
    ----------
    path : Path
        The JSON file.
    table : {"heads", "layers"}, optional
        The member to read.

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
    names, cells, settings = read_cells(source, where, table)
    return checked_frame(names, cells, where, table=table, source=NAME), settings


def read_settings(path: Path) -> dict[str, Any] | None:
    """The ``settings`` member (checked); None for a plain list of records.

    Parameters
    ----------
    path : Path
        The JSON file.

    Returns
    -------
    dict or None
        The settings.

    Raises
    ------
    QKEnergyError
        The file is unreadable or its settings not an object.
    """
    source = Path(path)
    where = show_path(source)
    document = parse_value(read_bytes(source, where, "the table", MAX_TABLE_BYTES), where, "the table")
    return check_settings(document.get("settings"), where) if isinstance(document, dict) else None


def read_cells(
    source: Path, where: str, table: str
) -> tuple[list[str], dict[str, list[Any]], dict[str, Any] | None]:
    """Columns of a JSON table (an object with settings and records, or a plain list of records).

    Parameters
    ----------
    source : Path
        The JSON file.
    where : str
        The file as errors show it.
    table : str
        The member to read.

    Returns
    -------
    names : list of str
        The columns, in first-seen order.
    cells : dict
        Name -> list of values.
    settings : dict or None
        The ``settings`` member.

    Raises
    ------
    QKEnergyError
        The file is not JSON, lacks the member, or its records are not objects or too many.
    """
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
        rows = document[table]
    else:
        rows = document  # before settings were recorded: a plain list of records
    if not isinstance(rows, list):
        raise QKEnergyError(f"{where}: {table!r} is {json_type(rows)}; expected a list of records (objects)")
    if len(rows) > MAX_ROWS:
        raise too_many(where, len(rows), "rows", MAX_ROWS)
    names: dict[str, None] = {}
    for i, record in enumerate(rows):
        if not isinstance(record, dict):
            raise QKEnergyError(f"{where}: record {i + 1} is {json_type(record)}; expected an object")
        names.update(dict.fromkeys(record))
        if len(names) > MAX_COLUMNS:
            raise too_many(where, MAX_COLUMNS + 1, "columns or more", MAX_COLUMNS)
    columns = check_names(list(names), where)
    return columns, {name: [r.get(name) for r in rows] for name in columns}, settings
