"""Tidy tables (csv / parquet / json, written atomically) and rich terminal summaries.

pandas is imported where a function needs it, not with this module: writing a
CSV of an analysis (a column table, :mod:`qkenergy.analysis.columns`) never needs it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qkenergy.analysis.columns import (
    COUNT_COLUMNS,
    LIST_COLUMNS,
    Columns,
    json_list,
    row_count,
    to_frame,
    with_integer_counts,
    write_csv,
)
from qkenergy.analysis.provenance import METADATA_KEY, read_settings, settings_json, sidecar_path
from qkenergy.analysis.transaction import OutputTransaction, joined
from qkenergy.errors import QKEnergyError
from qkenergy.formatting import (
    format_fixed,
    format_p,
    format_percent,
    json_safe,
    print_table,
    rich_table,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from qkenergy.analysis.analyze import Analysis

__all__ = [
    "COUNT_COLUMNS",
    "FORMATS",
    "LIST_COLUMNS",
    "REQUIRED_COLUMNS",
    "SIGNIFICANCE",
    "atomic_path",
    "baseline",
    "ensure_directory",
    "layer_summary",
    "layers_path",
    "notable_heads",
    "print_summary",
    "read_table",
    "rotation_verdict",
    "tail_note",
    "text_column",
    "verdict",
    "with_integer_counts",
    "write_results",
    "write_table",
]

FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}
# How CSV cells hold the list columns (recorded in the sidecar and in docs/columns.md).
CSV_LIST_ENCODING = "JSON array text, e.g. [0.41, 0.12]; [] for an undefined head"
STRING_COLUMNS = ("model", "stack", "positional", "head_type", "reason")
REQUIRED_COLUMNS = ("model", "layer", "head", "n", "N", "symmetric_energy")
SIGNIFICANCE = 0.05
HEAD_TYPES = ("II", "I+", "I-")


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

    A one-file :class:`~qkenergy.analysis.transaction.OutputTransaction`: a
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
    made (see :mod:`qkenergy.analysis.provenance`): Parquet key-value metadata
    ``qkenergy``, the ``settings`` member of the JSON object, or the CSV
    sidecar ``<path>.meta.json`` (only when there are settings). csv keeps the
    list columns (alpha, beta) as JSON array text; json is the object
    ``{"settings": ..., "heads": [records], "layers": [records]}`` with NaN as
    null (``layers`` only for json: csv and parquet take the layer table as a
    table of its own, see :func:`write_results`); parquet keeps lists natively.
    ``transaction``: stage the files in the caller's transaction instead of
    committing them here. ``df`` may be a column table
    (:mod:`qkenergy.analysis.columns`): csv is then written without pandas.
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

            df = pd.read_csv(source)
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


# ----------------------------------------------------------------------------- summaries
# The summary reads a DataFrame or a column table (an analysis' own, which spares the pandas
# import, ~0.25 s, on every run that prints it): columns only through these helpers.


def _floats(table: pd.DataFrame | Columns, name: str) -> np.ndarray:
    return np.asarray(table[name], dtype=np.float64)


def _texts(table: pd.DataFrame | Columns, name: str) -> list[str]:
    """A label column as str, a missing value as ""."""
    return [value if isinstance(value, str) else "" for value in np.asarray(table[name], dtype=object)]


def _length(table: pd.DataFrame | Columns) -> int:
    return row_count(table) if isinstance(table, dict) else len(table)


def _take(table: pd.DataFrame | Columns, rows: np.ndarray) -> pd.DataFrame | Columns:
    """The rows at these positions (or where this mask holds), in that order, as the same kind of table."""
    positions = np.flatnonzero(rows) if rows.dtype == bool else rows
    if isinstance(table, dict):
        return {name: column[positions] for name, column in table.items()}
    return table.iloc[positions]


def _rows(table: pd.DataFrame | Columns) -> list[dict[str, Any]]:
    if isinstance(table, dict):
        names = list(table)
        return [dict(zip(names, row, strict=True)) for row in zip(*(table[n].tolist() for n in names))]
    return cast(list[dict[str, Any]], table.to_dict(orient="records"))


def baseline(N: Any) -> Any:
    """Exact null mean of the symmetric energy, (N+1)/(2N) (Corollary 2, Proposition 6)."""
    return (N + 1) / (2 * N)


def _layer_rows(table: pd.DataFrame | Columns) -> list[dict[str, Any]]:
    """The rows of :func:`layer_summary`."""
    keys = [k for k in ("model", "stack") if k in table] + ["layer"]
    layer = np.asarray(table["layer"])
    row_keys = list(zip(*(layer.tolist() if k == "layer" else _texts(table, k) for k in keys), strict=True))
    members: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(row_keys):
        members.setdefault(key, []).append(i)
    if "stack" in table:
        # Stacks keep the order of the table (encoder before decoder), layers are sorted within.
        stacks = _texts(table, "stack")
        rank = {stack: k for k, stack in enumerate(dict.fromkeys(stacks))}
        order = sorted(range(len(row_keys)), key=lambda i: (rank[stacks[i]], layer[i]))
        groups = list(dict.fromkeys(row_keys[i] for i in order))
    else:
        groups = sorted(members)
    s_all, N_all = _floats(table, "symmetric_energy"), np.asarray(table["N"])
    judged = "symmetric_energy_p_bh" in table and "symmetric_energy_z" in table
    p_all = _floats(table, "symmetric_energy_p_bh") if judged else None
    z_all = _floats(table, "symmetric_energy_z") if judged else None
    types_all = _texts(table, "head_type") if "head_type" in table else None
    rows = []
    for key in groups:
        idx = np.asarray(members[key])
        s = s_all[idx]
        defined = s[np.isfinite(s)]
        q1, med, q3 = np.quantile(defined, [0.25, 0.5, 0.75]) if defined.size else (np.nan,) * 3
        Ns = np.unique(N_all[idx])
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row.update(
            heads=len(idx),
            N=int(Ns[0]) if len(Ns) == 1 else np.nan,
            symmetric_energy_median=float(med),
            symmetric_energy_q1=float(q1),
            symmetric_energy_q3=float(q3),
            symmetric_energy_iqr=float(q3 - q1),
            baseline=float(baseline(Ns[0])) if len(Ns) == 1 else np.nan,
        )
        above = below = np.nan
        if p_all is not None and z_all is not None:
            p, z = p_all[idx], z_all[idx]
            if np.isfinite(p).any():
                significant = np.isfinite(p) & (p < SIGNIFICANCE)
                above = float(np.mean(significant & (z > 0)))
                below = float(np.mean(significant & (z < 0)))
        row.update(share_above=above, share_below=below)
        types = [] if types_all is None else [types_all[i] for i in idx]
        for t in HEAD_TYPES:
            row[f"type_{t}"] = types.count(t)
        row["undefined"] = int((~np.isfinite(s)).sum())
        rows.append(row)
    return rows


def layer_summary(df: pd.DataFrame | Columns) -> pd.DataFrame:
    """Per layer: median and IQR of symmetric energy, baseline, significant shares, head types.

    A head is significantly above (below) the random law when
    ``symmetric_energy_p_bh < 0.05`` and its z-score is positive (negative);
    the shares are over the layer's heads and NaN when no null was computed.
    """
    import pandas as pd

    return pd.DataFrame(_layer_rows(df))


def verdict(df: pd.DataFrame | Columns, *, null: bool = True) -> str:
    """One sentence on the whole model: how many heads differ from the random law, and how."""
    s = _floats(df, "symmetric_energy")
    defined = np.isfinite(s)
    total = int(defined.sum())
    if total == 0:
        return "No head has a defined symmetric energy (all forms are zero or non-finite)."
    median = float(np.median(s[defined]))
    base = baseline(_floats(df, "N")[defined])
    base_text = (
        format_fixed(base[0])
        if np.ptp(base) == 0
        else f"{format_fixed(base.min())}–{format_fixed(base.max())}"
    )
    p = _floats(df, "symmetric_energy_p_bh") if "symmetric_energy_p_bh" in df else np.full(len(s), np.nan)
    if not null or not np.isfinite(p).any():
        return (
            f"Median symmetric energy {median:.4f} against the random baseline {base_text} "
            f"over {total} heads; null laws were skipped, so no significance is claimed."
        )
    z = _floats(df, "symmetric_energy_z")
    significant = np.isfinite(p) & (p < SIGNIFICANCE)
    above = int((significant & (z > 0)).sum())
    below = int((significant & (z < 0)).sum())
    return (
        f"{above} of {total} heads ({100 * above / total:.0f}%) are significantly more symmetric "
        f"and {below} ({100 * below / total:.0f}%) significantly more skew than a random head of "
        f"the same shape (BH-adjusted p < {SIGNIFICANCE:g}); median symmetric energy {median:.4f} "
        f"against the random baseline {base_text}."
    )


def _significant(df: pd.DataFrame | Columns, prefix: str) -> tuple[int, int, int] | None:
    """(above, below, total) heads with BH-adjusted p < SIGNIFICANCE under one null; None if not drawn."""
    p_col, z_col = f"{prefix}_p_bh", f"{prefix}_z"
    if p_col not in df or z_col not in df:
        return None
    p = _floats(df, p_col)
    if not np.isfinite(p).any():
        return None
    z = _floats(df, z_col)
    significant = np.isfinite(p) & (p < SIGNIFICANCE)
    return int((significant & (z > 0)).sum()), int((significant & (z < 0)).sum()), int(np.isfinite(p).sum())


def rotation_verdict(df: pd.DataFrame | Columns) -> str | None:
    """One sentence on the rotation null (the heads' own spectra, random orientation); None if not drawn."""
    counts = _significant(df, "symmetric_energy_rotation")
    if counts is None:
        return None
    above, below, total = counts
    sd = _floats(df, "symmetric_energy_rotation_null_sd")
    sd = sd[np.isfinite(sd)]
    return (
        f"Rotation null (each head's own W_K, W_Q, query input space rotated at random): {above} of "
        f"{total} heads significantly more symmetric and {below} more skew (BH-adjusted p < "
        f"{SIGNIFICANCE:g}); null sd of s {format_fixed(sd.min())}–{format_fixed(sd.max())}."
    )


def tail_note(df: pd.DataFrame | Columns, settings: dict[str, Any]) -> str | None:
    """How many empirical p-values sat at their Monte Carlo floor and entered BH as the Beta tail."""
    parts = []
    for prefix, key, label in (
        ("symmetric_energy", "samples", "Gaussian"),
        ("symmetric_energy_rotation", "rotation_samples", "rotation"),
    ):
        K = int(settings.get(key) or 0)
        if K < 2 or f"{prefix}_p" not in df:
            continue
        p = _floats(df, f"{prefix}_p")
        at_floor = int((np.isfinite(p) & (p <= 2 / (K + 1) * (1 + 1e-9))).sum())
        if at_floor:
            parts.append(f"{at_floor} heads under the {label} null")
    if not parts:
        return None
    return (
        "At the Monte Carlo floor 2/(K+1): " + ", ".join(parts) + " enter BH through *_p_tail, a Beta law "
        "matched to the null's mean and variance (an approximation; see docs/statistics.md)."
    )


def _layer_count(df: pd.DataFrame | Columns) -> str:
    """'6 layers', or '6 layers of 3 stacks' for a model with several attention stacks."""
    layers = np.asarray(df["layer"]).tolist()
    stacks = _texts(df, "stack") if "stack" in df else [""] * len(layers)
    if len(set(stacks)) <= 1:
        return f"{len(set(layers))} layers"
    return f"{len(set(zip(stacks, layers, strict=True)))} layers of {len(set(stacks))} stacks"


def _layer_label(row: Mapping[Any, Any]) -> str:
    """'3', or 'encoder 3' for a layer of a named stack."""
    stack = row.get("stack") or ""
    return f"{stack} {row['layer']}" if stack else str(row["layer"])


def _notable_rows(df: pd.DataFrame | Columns, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the ``top`` largest and the ``top`` smallest defined s (ties: first in the table first)."""
    s = _floats(df, "symmetric_energy")
    defined = np.flatnonzero(np.isfinite(s))
    largest = defined[np.argsort(-s[defined], kind="stable")[:top]]
    smallest = defined[np.argsort(s[defined], kind="stable")[:top]]
    return largest, smallest


def notable_heads(
    df: pd.DataFrame | Columns, top: int = 5
) -> tuple[pd.DataFrame | Columns, pd.DataFrame | Columns]:
    """The ``top`` most symmetric heads (largest s) and the ``top`` most skew (smallest s), as ``df`` is."""
    largest, smallest = _notable_rows(df, top)
    return _take(df, largest), _take(df, smallest)


def _notable_table(df: pd.DataFrame | Columns, top: int) -> Table:
    table = rich_table(
        "Heads worth a look",
        [("", "left"), "layer", "head", "s", "z", "p_bh", ("type", "left")],
        title_justify="left",
    )
    for label, rows in zip(("most symmetric", "most skew"), notable_heads(df, top), strict=True):
        records = _rows(rows)
        for i, r in enumerate(records):
            table.add_row(
                label if i == 0 else "",
                _layer_label(r),
                str(r["head"]),
                format_fixed(r["symmetric_energy"]),
                format_fixed(r.get("symmetric_energy_z"), 1),
                format_p(r.get("symmetric_energy_p_bh")),
                str(r.get("head_type", "")),
                end_section=i == len(records) - 1,
            )
    return table


def _summary_offset(settings: dict[str, Any], df: pd.DataFrame | Columns) -> int | None:
    """The RoPE offset the summary's tables read (the first asked for), or None without offsets."""
    offsets = settings.get("rope_offsets")
    if not settings.get("rope") or not offsets or "offset" not in df:
        return None
    return int(offsets[0])


def _at_offset(table: pd.DataFrame | Columns | None, offset: int | None) -> pd.DataFrame | Columns | None:
    """The rows of one RoPE offset (each head once), or ``table`` itself without offsets."""
    if table is None or offset is None or "offset" not in table:
        return table
    return _take(table, np.asarray(table["offset"]) == offset)


def _print_rope(
    settings: dict[str, Any], df: pd.DataFrame | Columns, offset: int | None, console: Console
) -> None:
    """With RoPE offsets: which offset the tables read, and the median s at every offset."""
    if offset is None:
        return
    rope = settings["rope"]
    offsets, s = _floats(df, "offset"), _floats(df, "symmetric_energy")
    medians = []
    for d in np.unique(offsets[~np.isnan(offsets)]):
        at_d = s[offsets == d]
        at_d = at_d[~np.isnan(at_d)]
        medians.append(f"{int(d)}: {format_fixed(float(np.median(at_d)) if at_d.size else np.nan)}")
    console.print(
        f"RoPE ({rope.get('kind')}, theta {', '.join(f'{t:g}' for t in rope.get('theta', []))}): "
        f"the tables below read offset d = {offset}; the CSV has every offset. Median s by offset d: "
        + ", ".join(medians)
    )


def print_summary(analysis: Analysis, console: Console | None = None, *, top: int = 5) -> None:
    """Header line, per-layer table (and the layer forms, when analysed), the ``top`` most
    symmetric and most skew heads (none when ``top`` is 0), one-sentence verdict.

    On a console that is not a terminal (a pipe, a file) the tables are plain
    text: aligned columns without box drawing.
    """
    from rich.console import Console

    console = console or Console()
    settings = analysis.settings
    every_offset = analysis.head_table()
    offset = _summary_offset(settings, every_offset)
    df = _at_offset(every_offset, offset)
    assert df is not None
    null = bool(settings.get("null", True))
    samples = settings.get("samples", 0)
    fold = "used" if settings.get("fold_norm") else "not used"
    # Empirical two-sided p-values cannot go below 2/(K + 1): say so, since z-scores
    # of trained heads often lie far beyond what K null samples can resolve.
    if not null:
        null_text = "null laws skipped"
    else:
        texts = []
        if samples:
            texts.append(f"{samples} null samples per shape (smallest p {2 / (samples + 1):.2g})")
        rotation = int(settings.get("rotation_samples") or 0)
        if rotation:
            texts.append(f"rotation null {rotation} draws per head (smallest p {2 / (rotation + 1):.2g})")
        null_text = " · ".join(texts)
    console.print(
        f"[bold]{analysis.model}[/bold] · {_length(df)} heads in {_layer_count(df)} · "
        f"fold-norm {fold} · {null_text}"
    )
    for note in settings.get("notes", ()):
        console.print(f"note: {note}")
    _print_rope(settings, every_offset, offset, console)
    table = rich_table(
        "Symmetric energy per layer",
        ["layer", "heads", "median s", "IQR", "baseline", "above", "below", *HEAD_TYPES],
        title_justify="left",
    )
    for r in _layer_rows(df):
        table.add_row(
            _layer_label(r),
            str(r["heads"]),
            format_fixed(r["symmetric_energy_median"]),
            format_fixed(r["symmetric_energy_iqr"]),
            format_fixed(r["baseline"]),
            format_percent(r["share_above"]),
            format_percent(r["share_below"]),
            str(r["type_II"]),
            str(r["type_I+"]),
            str(r["type_I-"]),
        )
    print_table(console, table)
    layers = cast("pd.DataFrame | None", _at_offset(analysis.layers, offset))
    if layers is not None and len(layers):
        form = rich_table(
            "Whole-layer forms (sum over heads)",
            ["layer", "s", "2s-1", "z(s)", "dir", "z(dir)", "p(dir)", "type"],
            title_justify="left",
            caption="dir: directionality as published by Saponati et al. 2025, (R - C)/(R + C), "
            "> 0 when query-side features stand out; z and p against the Gaussian law of a "
            "layer of the same shape",
        )
        for r in _rows(layers):
            form.add_row(
                _layer_label(r),
                format_fixed(r["symmetric_energy"]),
                format_fixed(r["symmetry_score"]),
                format_fixed(r.get("symmetric_energy_z"), 1),
                format_fixed(r["directionality"], 3),
                format_fixed(r.get("directionality_z"), 2),
                format_fixed(r.get("directionality_p"), 3),
                str(r.get("head_type", "")),
            )
        print_table(console, form)
        notes = {str(x) for x in layers.get("null_note", ()) if isinstance(x, str) and x}
        for note in sorted(notes):
            console.print(f"Layer null {note}.")
    if top > 0:
        print_table(console, _notable_table(df, top))
    rotation_line = rotation_verdict(df)
    if samples or rotation_line is None:  # the Gaussian verdict, unless only the rotation null was drawn
        console.print(verdict(df, null=null))
    for line in (rotation_line, tail_note(df, settings)):
        if line is not None:
            console.print(line)
