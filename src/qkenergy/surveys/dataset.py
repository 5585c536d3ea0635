"""The survey's output: Hive-partitioned Parquet datasets, one file per (model, layer) unit.

Layout (the contract with ``qkenergy report``)::

    OUT/heads/model=<NAME>/layer-<LLLLL>.parquet     one row per head
    OUT/layers/model=<NAME>/layer-<LLLLL>.parquet    one row per layer form (--per-layer)

A unit file holds the columns of ``analyze_model(...).heads`` (``.layers``)
except ``model``, which is the partition key, and except the
Benjamini-Hochberg columns (``symmetric_energy_p_bh``,
``symmetric_energy_rotation_p_bh``), which depend on all of a model's heads
and so cannot live in a per-layer file: :func:`load_survey` recomputes them
per model. Each file adds ``group``, ``step``, ``source`` and
``revision`` from the manifest. Files are written atomically (temporary name
starting with ``.``, which Parquet readers skip, then ``os.replace``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

__all__ = [
    "BH_COLUMNS",
    "MANIFEST_COLUMNS",
    "clean_partial_files",
    "load_survey",
    "unit_path",
    "write_unit",
]

# BH column -> (its p column, the p_tail column that replaces p at the Monte Carlo floor, the setting
# holding that null's sample count K).
BH_COLUMNS = {
    "symmetric_energy_p_bh": ("symmetric_energy_p", "symmetric_energy_p_tail", "samples"),
    "symmetric_energy_rotation_p_bh": (
        "symmetric_energy_rotation_p",
        "symmetric_energy_rotation_p_tail",
        "rotation_samples",
    ),
}
MANIFEST_COLUMNS = ("group", "step", "source", "revision")
TABLES = ("heads", "layers")


def unit_path(out: str | os.PathLike[str], table: str, model: str, layer: int) -> Path:
    """``OUT/<table>/model=<model>/layer-<LLLLL>.parquet``."""
    return Path(out) / table / f"model={model}" / f"layer-{layer:05d}.parquet"


def _arrow_table(frame: Any, extra: dict[str, Any], settings: dict[str, Any] | None) -> Any:
    """The unit's frame as an Arrow table with stable column types (every file of a dataset agrees),
    the settings it was made with in the file's metadata (as every qkenergy Parquet table has them)."""
    import pyarrow as pa

    from qkenergy.formats.provenance import METADATA_KEY, settings_json

    frame = frame.drop(columns=[c for c in ("model", *BH_COLUMNS) if c in frame.columns])
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
    return table.replace_schema_metadata(
        None if settings is None else {METADATA_KEY: settings_json(settings)}
    )


def write_unit(
    out: str | os.PathLike[str],
    table: str,
    model: str,
    layer: int,
    frame: Any,
    extra: dict[str, Any],
    settings: dict[str, Any] | None = None,
) -> Path:
    """Write one unit's file atomically (``settings`` in its Parquet metadata); returns its path."""
    import pyarrow.parquet as pq

    from qkenergy.formats.tables import atomic_path

    target = unit_path(out, table, model, layer)
    arrow = _arrow_table(frame, extra, settings)
    with atomic_path(target) as tmp:
        pq.write_table(arrow, tmp)
    return target


def clean_partial_files(out: str | os.PathLike[str]) -> list[Path]:
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


def _with_bh(frame: Any, settings: dict[str, Any]) -> Any:
    """Insert each BH column, per model, after its p_tail column (where ``analyze`` puts it).

    As in ``analyze``, an empirical p at its floor 2/(K + 1) enters as its Beta
    tail p. K is the survey's sample count: every null draw has defined
    statistics (a Gaussian or rotated head is almost surely not zero).
    """
    import numpy as np

    from qkenergy.analysis.significance import bh_with_tail

    for column, (p_column, tail_column, samples_key) in BH_COLUMNS.items():
        if p_column not in frame.columns or tail_column not in frame.columns:
            continue
        p = frame[p_column].to_numpy(np.float64)
        tail = frame[tail_column].to_numpy(np.float64)
        floor = np.isfinite(p) & (p <= 2.0 / (1 + int(settings.get(samples_key, 0) or 0)) * (1 + 1e-12))
        adjusted = np.full(len(frame), np.nan)
        for rows in frame.groupby("model", sort=False).indices.values():
            adjusted[rows] = bh_with_tail(p[rows], tail[rows], floor[rows])
        frame.insert(frame.columns.get_loc(tail_column) + 1, column, adjusted)
    return frame


def load_survey(out: str | os.PathLike[str]) -> tuple[Any, Any]:
    """The survey in OUT as pandas DataFrames ``(heads, layers)`` (layers None without --per-layer).

    ``model`` is a plain str column (first); rows are sorted by model, layer,
    head. The Benjamini-Hochberg columns are recomputed per model over all its
    heads (as ``analyze`` does for one model), so the head table has the
    columns of ``analyze``'s plus group, step, source and revision.
    """
    import json

    import pandas as pd

    from qkenergy.base.errors import QKEnergyError
    from qkenergy.weights.safetensors_io import show_path

    root = Path(out)
    if not any((root / "heads").glob("model=*/*.parquet")):
        raise QKEnergyError(
            f"{show_path(root)}: no survey results (expected heads/model=NAME/layer-*.parquet; "
            "run `qkenergy survey MANIFEST -o OUT`)"
        )
    try:
        settings = json.loads((root / "survey.json").read_text(encoding="utf-8"))["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        raise QKEnergyError(
            f"{show_path(root / 'survey.json')}: missing or unreadable survey settings"
        ) from None
    frames: list[Any] = []
    for table in TABLES:
        if table == "layers" and not any((root / table).glob("model=*/*.parquet")):
            frames.append(None)
            continue
        frame = _read_dataset(root / table)
        frame.insert(0, "model", frame.pop("model").astype(str))
        # analyze's order: stack (in the model's own order, as each unit file lists them), layer, head
        rank = (
            frame.groupby("model", sort=False)["stack"].transform(lambda s: pd.factorize(s)[0])
            if "stack" in frame.columns
            else 0
        )
        keys = ["model", "_stack", "layer", "head"] if table == "heads" else ["model", "_stack", "layer"]
        frame = frame.assign(_stack=rank).sort_values(keys, kind="stable", ignore_index=True)
        frame = frame.drop(columns="_stack")
        frames.append(_with_bh(frame, settings) if table == "heads" else frame)
    return frames[0], frames[1]
