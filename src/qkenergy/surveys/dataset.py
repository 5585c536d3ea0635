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
starting with ``.``, which Parquet readers skip, then ``os.replace``), and
written and read by the package's one Parquet module
(:mod:`qkenergy.formats.parquet_table`, as ``analyze -o heads.parquet`` is):
the same settings metadata, the same bounds on what a file may hold.

Each file says which unit it is: its Parquet metadata ``qkenergy_unit`` holds
``{"model", "layer", "table"}``, and the ledger records its SHA-256. A rerun
calls a unit done only when the file on disk has that digest
(:func:`file_sha256`); :func:`load_survey` reads only files the ledger lists as
done with that digest and claiming the unit their path names, so that a file
damaged, swapped or copied between runs is never read (nor read twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from qkenergy.analysis.nullspec import KINDS
from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError

__all__ = [
    "MANIFEST_COLUMNS",
    "UNIT_KEY",
    "clean_partial_files",
    "file_sha256",
    "load_survey",
    "unit_path",
    "write_unit",
]

UNIT_KEY = "qkenergy_unit"
"""Parquet metadata key of a unit file: the unit it holds, {"model", "layer", "table"}."""
# What manifest.model_name makes: a path component that is neither hidden nor a parent.
_SAFE_NAME = re.compile(r"[A-Za-z0-9-][A-Za-z0-9._-]{0,199}")
_PART = re.compile(r"layer-(\d{5,})\.parquet")


def bh_columns() -> dict[str, tuple[str, str, str]]:
    """BH column -> (its p column, the p_tail column that replaces p at the Monte Carlo floor, the setting
    holding that null's sample count K), one per registered null."""
    at = [(f"symmetric_energy_{k.infix}", k.samples) for k in KINDS.values()]
    return {f"{a}p_bh": (f"{a}p", f"{a}p_tail", samples) for a, samples in at}


MANIFEST_COLUMNS = ("group", "step", "source", "revision")
TABLES = ("heads", "layers")


MAX_RECORD_BYTES = 64 << 20
"""Largest survey.json read (it lists every model with its architecture: kilobytes per model)."""


def read_record(path: Path) -> dict[str, Any] | None:
    """OUT/survey.json as a JSON object (None when absent), read as any input is (bounded, checked)."""
    from qkenergy.base.json_input import parse_object, read_bytes

    if not os.path.lexists(path):
        return None
    hint = "; remove it or choose another output directory"
    where, what = show_path(path), "the survey record"
    try:
        record = parse_object(read_bytes(path, where, what, MAX_RECORD_BYTES), where, what)
    except QKEnergyError as error:
        raise QKEnergyError(f"{error}{hint}") from None
    settings = record.get("settings", {})
    if not isinstance(settings, dict):
        raise QKEnergyError(f"{where}: its 'settings' are not a JSON object{hint}")
    return record


def unit_path(out: str | os.PathLike[str], table: str, model: str, layer: int) -> Path:
    """``OUT/<table>/model=<model>/layer-<LLLLL>.parquet``; ``model`` must be a safe path component.

    Parameters
    ----------
    out : str or path-like
        The survey's output directory OUT.
    table : {"heads", "layers"}
        The dataset.
    model : str
        The survey's model name.
    layer : int
        The layer.

    Returns
    -------
    Path
        The unit's file.

    Raises
    ------
    QKEnergyError
        ``model`` cannot name a folder, or ``table`` is not a dataset.
    """
    if not _SAFE_NAME.fullmatch(model) or table not in TABLES:
        raise QKEnergyError(
            f"model name {model[:60]!r} cannot name a folder of the survey (see manifest.model_name)"
        )
    return Path(out) / table / f"model={model}" / f"layer-{layer:05d}.parquet"


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a unit file (None when it is missing or not a regular file).

    Parameters
    ----------
    path : Path
        The unit file.

    Returns
    -------
    str or None
        The hex digest.
    """
    from qkenergy.base.json_input import open_regular

    digest = hashlib.sha256()
    try:
        with open_regular(path, show_path(path)) as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except (OSError, QKEnergyError):
        return None
    return digest.hexdigest()


def write_unit(
    out: str | os.PathLike[str],
    table: str,
    model: str,
    layer: int,
    frame: Any,
    extra: dict[str, Any],
    settings: dict[str, Any] | None = None,
) -> Path:
    """Write one unit's file atomically (``settings`` in its Parquet metadata); returns its path.

    Written by the package's Parquet writer (:func:`qkenergy.formats.parquet_table.write_frame`),
    as ``analyze -o heads.parquet`` is, with stable column types (a column of nulls only as
    text) and only qkenergy's metadata: the unit (``qkenergy_unit``) and the settings.

    Parameters
    ----------
    out : str or path-like
        The survey's output directory OUT.
    table : {"heads", "layers"}
        The dataset.
    model : str
        The survey's model name.
    layer : int
        The layer.
    frame : DataFrame
        The unit's rows.
    extra : dict
        The manifest's group, step, source and revision, added to every row.
    settings : dict or None, optional
        The unit's settings.

    Returns
    -------
    Path
        The unit's file.

    Raises
    ------
    QKEnergyError
        As :func:`unit_path`, or the file cannot be written.
    """
    import pyarrow as pa

    from qkenergy.base.atomic import atomic_path
    from qkenergy.formats import parquet_table

    target = unit_path(out, table, model, layer)
    # Without ``model`` and the BH columns, with the manifest's; copy(): one block again, so that
    # the columns added below do not fragment it (pandas warns).
    unit = frame.drop(columns=[c for c in ("model", *bh_columns()) if c in frame.columns]).copy()
    for key in MANIFEST_COLUMNS:
        unit[key] = extra.get(key)
    # Column types every unit file of a dataset agrees on (whatever one unit's values are).
    types = {"group": pa.string(), "step": pa.int64(), "source": pa.string(), "revision": pa.string()}
    types.update({c: pa.list_(pa.float64()) for c in ("alpha", "beta") if c in unit.columns})
    with atomic_path(target) as tmp:
        parquet_table.write_frame(
            unit,
            tmp,
            settings=settings,
            metadata={UNIT_KEY: json.dumps({"model": model, "layer": layer, "table": table})},
            types=types,
            nulls_as_text=True,
            pandas_metadata=False,
        )
    return target


def clean_partial_files(out: str | os.PathLike[str]) -> list[Path]:
    """Remove temporary files that a killed run left in OUT's datasets; returns them.

    Parameters
    ----------
    out : str or path-like
        The survey's output directory OUT.

    Returns
    -------
    list of Path
        The files removed.
    """
    removed = []
    for table in TABLES:
        for path in (Path(out) / table).glob("model=*/.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def _read_parts(root: Path, table: str, done: dict[str, str | None] | None) -> Any:
    """Every unit file of ``table`` as one Arrow table (plus ``model``), each file checked first.

    A file must be named as :func:`unit_path` names files; one the ledger does
    not list as done (``done``: relative path -> SHA-256; None when OUT has no
    ledger) is not read; a done one must have the ledger's digest and claim
    the unit of its path, else one line.
    """
    import pyarrow as pa

    from qkenergy.formats.parquet_table import read_arrow

    def refuse(path: Path, why: str) -> QKEnergyError:
        return QKEnergyError(
            f"{show_path(path)}: {why}; rerun the survey to recompute it (or remove the file)"
        )

    parts = []
    for path in sorted((root / table).glob("model=*/*.parquet")):
        model = path.parent.name.removeprefix("model=")
        match = _PART.fullmatch(path.name)
        relative = str(path.relative_to(root))
        if match is None or not _SAFE_NAME.fullmatch(model):
            raise refuse(path, "not a unit file of the survey (expected model=NAME/layer-LLLLL.parquet)")
        if done is not None:
            if relative not in done:
                continue  # not done (never finished, failed since, or not the survey's): not read
            if done[relative] is not None and file_sha256(path) != done[relative]:
                raise refuse(path, "changed since the survey wrote it (its SHA-256 is not the ledger's)")
        layer = int(match.group(1))
        where = show_path(path)
        try:  # the bounds of every qkenergy Parquet table (size, counts, names, column types, settings)
            part, _ = read_arrow(path, where, unreadable="not a readable Parquet file")
        except QKEnergyError as error:
            raise refuse(path, str(error).removeprefix(f"{where}: ")) from None
        claim: Any = None
        with contextlib.suppress(ValueError, TypeError):
            claim = json.loads((part.schema.metadata or {}).get(UNIT_KEY.encode(), b"null"))
        if claim is not None and claim != {"model": model, "layer": layer, "table": table}:
            raise refuse(path, f"holds another unit ({str(claim)[:100]})")
        if "layer" in part.column_names:
            layers = set(part.column("layer").to_pylist())
            if layers - {layer}:
                raise refuse(path, f"holds rows of layer {sorted(layers - {layer})[0]}, not of layer {layer}")
        parts.append(part.append_column("model", pa.array([model] * part.num_rows, pa.string())))
    try:
        return pa.concat_tables(parts, promote_options="permissive")
    except pa.ArrowException as exc:
        raise QKEnergyError(
            f"{show_path(root / table)}: unit files of different columns ({' '.join(str(exc).split())[:120]})"
        ) from None


def _with_bh(frame: Any, settings: dict[str, Any]) -> Any:
    """Insert each BH column, per model, after its p_tail column (where ``analyze`` puts it).

    As in ``analyze``, an empirical p at its floor 2/(K + 1) enters as its Beta
    tail p. K is the survey's sample count: every null draw has defined
    statistics (a Gaussian or rotated head is almost surely not zero).
    """
    import numpy as np

    from qkenergy.analysis.significance import bh_with_tail

    for column, (p_column, tail_column, samples_key) in bh_columns().items():
        if p_column not in frame.columns or tail_column not in frame.columns:
            continue
        p = frame[p_column].to_numpy(np.float64)
        tail = frame[tail_column].to_numpy(np.float64)
        samples = settings.get(samples_key)
        samples = samples if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0 else 0
        floor = np.isfinite(p) & (p <= 2.0 / (1 + samples) * (1 + 1e-12))
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

    Parameters
    ----------
    out : path
        The survey's output folder (``qkenergy survey -o OUT``, :func:`qkenergy.survey`).

    Returns
    -------
    heads : DataFrame
        One row per head of every model.
    layers : DataFrame or None
        One row per layer's whole form (``per_layer``), else None.

    Raises
    ------
    QKEnergyError
        OUT holds no survey results, no readable settings, or a head twice.
    """
    import pandas as pd

    from qkenergy.surveys.ledger import done_files

    root = Path(out)
    if not any((root / "heads").glob("model=*/*.parquet")):
        raise QKEnergyError(
            f"{show_path(root)}: no survey results (expected heads/model=NAME/layer-*.parquet; "
            "run `qkenergy survey MANIFEST -o OUT`)"
        )
    record = read_record(root / "survey.json")
    settings = None if record is None else record.get("settings")
    if not isinstance(settings, dict):
        raise QKEnergyError(f"{show_path(root / 'survey.json')}: missing or unreadable survey settings")
    done = done_files(root / "ledger.sqlite")
    frames: list[Any] = []
    for table in TABLES:
        if table == "layers" and not any((root / table).glob("model=*/*.parquet")):
            frames.append(None)
            continue
        frame = _read_parts(root, table, done).to_pandas()
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
        unit = [c for c in ("model", "stack", "offset", "layer", "head") if c in frame.columns]
        if frame.duplicated(unit).any():  # a last net: the checks above let no unit in twice
            raise QKEnergyError(f"{show_path(root / table)}: a head appears twice; rerun the survey")
        frames.append(_with_bh(frame, settings) if table == "heads" else frame)
    return frames[0], frames[1]
