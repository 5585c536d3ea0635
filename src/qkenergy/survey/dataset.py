"""The survey's output: Hive-partitioned Parquet datasets, one file per (model, layer) unit.

Layout (the contract with ``qkenergy report``)::

    OUT/heads/model=<NAME>/layer-<LLLLL>.parquet     one row per head
    OUT/layers/model=<NAME>/layer-<LLLLL>.parquet    one row per layer form (--per-layer)

A unit file holds the columns of ``analyze_model(...).heads`` (``.layers``)
except ``model``, which is the partition key, and except the
Benjamini-Hochberg column ``symmetric_energy_p_bh``, which depends on all of a
model's heads and so cannot live in a per-layer file: :func:`load_survey`
recomputes it per model. Each file adds ``group``, ``step``, ``source`` and
``revision`` from the manifest. Files are written atomically (temporary name
starting with ``.``, which Parquet readers skip, then ``os.replace``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

__all__ = [
    "BH_COLUMN",
    "MANIFEST_COLUMNS",
    "clean_partial_files",
    "load_survey",
    "unit_path",
    "write_unit",
]

BH_COLUMN = "symmetric_energy_p_bh"
MANIFEST_COLUMNS = ("group", "step", "source", "revision")
TABLES = ("heads", "layers")


def unit_path(out: str | os.PathLike, table: str, model: str, layer: int) -> Path:
    """``OUT/<table>/model=<model>/layer-<LLLLL>.parquet``."""
    return Path(out) / table / f"model={model}" / f"layer-{layer:05d}.parquet"


def _arrow_table(frame: Any, extra: dict[str, Any]) -> Any:
    """The unit's frame as an Arrow table with stable column types (every file of a dataset agrees)."""
    import pyarrow as pa

    frame = frame.drop(columns=[c for c in ("model", BH_COLUMN) if c in frame.columns])
    for key in MANIFEST_COLUMNS:
        frame[key] = extra.get(key)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    types = {"group": pa.string(), "step": pa.int64(), "source": pa.string(), "revision": pa.string()}
    types.update({c: pa.list_(pa.float64()) for c in ("alpha", "beta") if c in frame.columns})
    for name, kind in types.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, pa.field(name, kind), table.column(i).cast(kind))
    # A column that is None in every row of this unit is stored as text, not Arrow's null type.
    for i, field in enumerate(table.schema):
        if pa.types.is_null(field.type):
            table = table.set_column(i, pa.field(field.name, pa.string()), table.column(i).cast(pa.string()))
    return table.replace_schema_metadata(None)


def write_unit(
    out: str | os.PathLike, table: str, model: str, layer: int, frame: Any, extra: dict[str, Any]
) -> Path:
    """Write one unit's file atomically; returns its path."""
    import pyarrow.parquet as pq

    from qkenergy.analysis.report import atomic_path

    target = unit_path(out, table, model, layer)
    arrow = _arrow_table(frame, extra)
    with atomic_path(target) as tmp:
        pq.write_table(arrow, tmp)
    return target


def clean_partial_files(out: str | os.PathLike) -> list[Path]:
    """Remove temporary files that a killed run left in OUT's datasets; returns them."""
    removed = []
    for table in TABLES:
        for path in (Path(out) / table).glob("model=*/.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def _read_dataset(root: Path) -> Any:
    import pyarrow.dataset as ds

    dataset = ds.dataset(root, format="parquet", partitioning="hive")
    return dataset.to_table().to_pandas()


def load_survey(out: str | os.PathLike) -> tuple[Any, Any]:
    """The survey in OUT as pandas DataFrames ``(heads, layers)`` (layers None without --per-layer).

    ``model`` is a plain str column (first); rows are sorted by model, layer,
    head. ``symmetric_energy_p_bh`` is recomputed per model over all its heads
    (Benjamini-Hochberg, as ``analyze`` does for one model), so the head table
    has the columns of ``analyze``'s plus group, step, source and revision.
    """
    import numpy as np

    from qkenergy.analysis.analyze import bh_adjusted
    from qkenergy.errors import QKEnergyError
    from qkenergy.weights.safetensors_io import show_path

    root = Path(out)
    if not any((root / "heads").glob("model=*/*.parquet")):
        raise QKEnergyError(
            f"{show_path(root)}: no survey results (expected heads/model=NAME/layer-*.parquet; "
            "run `qkenergy survey MANIFEST -o OUT`)"
        )
    frames: list[Any] = []
    for table in TABLES:
        if table == "layers" and not any((root / table).glob("model=*/*.parquet")):
            frames.append(None)
            continue
        frame = _read_dataset(root / table)
        frame.insert(0, "model", frame.pop("model").astype(str))
        keys = ["model", "layer", "head"] if table == "heads" else ["model", "layer"]
        frame = frame.sort_values(keys, kind="stable", ignore_index=True)
        if table == "heads" and "symmetric_energy_p" in frame.columns:
            adjusted = np.full(len(frame), np.nan)
            for rows in frame.groupby("model", sort=False).indices.values():
                adjusted[rows] = bh_adjusted(frame["symmetric_energy_p"].to_numpy(np.float64)[rows])
            # Where analyze puts it: after the null columns, before the lobes.
            where = frame.columns.get_loc("alpha") if "alpha" in frame.columns else len(frame.columns)
            frame.insert(where, BH_COLUMN, adjusted)
        frames.append(frame)
    return frames[0], frames[1]
