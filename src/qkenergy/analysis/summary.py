"""The terminal summary of an analysis: per-layer table, verdicts and the heads worth a look (rich).

The summary reads a DataFrame or a column table (an analysis' own, which spares
the pandas import on every run that prints it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qkenergy.analysis.nullspec import KINDS, selected
from qkenergy.base.formatting import (
    format_fixed,
    format_p,
    format_percent,
    plural,
    print_table,
    rich_table,
)
from qkenergy.formats.columns import Columns
from qkenergy.math.tails import resolved_floor

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from qkenergy.analysis.analyze import AnalysisResult


__all__ = [
    "SIGNIFICANCE",
    "SKIPPED_SHOWN",
    "baseline",
    "layer_summary",
    "notable_heads",
    "null_verdicts",
    "print_summary",
    "skipped_lines",
    "tail_note",
    "verdict",
]


SIGNIFICANCE = 0.05


HEAD_TYPES = ("II", "I+", "I-")


def _floats(table: pd.DataFrame | Columns, name: str) -> np.ndarray:
    return np.asarray(table[name], dtype=np.float64)


def _texts(table: pd.DataFrame | Columns, name: str) -> list[str]:
    """A label column as str, a missing value as ""."""
    return [value if isinstance(value, str) else "" for value in np.asarray(table[name], dtype=object)]


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
    """Exact null mean of the symmetric energy, (N+1)/(2N) (Corollary 2, Proposition 6).

    Parameters
    ----------
    N : int or ndarray
        Residual width(s).

    Returns
    -------
    float or ndarray
        (N+1)/(2N), elementwise.
    """
    return (N + 1) / (2 * N)


def quartiles(values: Any) -> tuple[float, float, float]:
    """(q1, median, q3) of the finite values; NaN for none."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return (np.nan, np.nan, np.nan)
    q1, med, q3 = np.quantile(x, [0.25, 0.5, 0.75])
    return float(q1), float(med), float(q3)


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
    types_all = _texts(table, "head_type") if "head_type" in table else None
    rows = []
    for key in groups:
        idx = np.asarray(members[key])
        s = s_all[idx]
        q1, med, q3 = quartiles(s)
        Ns = np.unique(N_all[idx]).tolist()
        counts = significant_counts(_take(table, idx), "symmetric_energy")
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row.update(
            heads=len(idx),
            N=int(Ns[0]) if len(Ns) == 1 else np.nan,
            symmetric_energy_median=med,
            symmetric_energy_q1=q1,
            symmetric_energy_q3=q3,
            symmetric_energy_iqr=q3 - q1,
            baseline=float(baseline(Ns[0])) if len(Ns) == 1 else np.nan,
            share_above=np.nan if counts is None else counts[0] / len(idx),
            share_below=np.nan if counts is None else counts[1] / len(idx),
        )
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

    Parameters
    ----------
    df : DataFrame or Columns
        The head table.

    Returns
    -------
    DataFrame
        One row per layer (and stack).
    """
    import pandas as pd

    return pd.DataFrame(_layer_rows(df))


def verdict(df: pd.DataFrame | Columns, *, null: bool = True) -> str:
    """One sentence on the whole model: how many heads differ from the random law, and how.

    Parameters
    ----------
    df : DataFrame or Columns
        The head table.
    null : bool, optional
        Whether null laws were drawn (False: no significance is claimed).

    Returns
    -------
    str
        The sentence.
    """
    s = _floats(df, "symmetric_energy")
    defined = np.isfinite(s)
    total = int(defined.sum())
    if total == 0:
        return "No head has a defined symmetric energy (all forms are zero or non-finite)."
    # heads without a defined s (zero forms) are not among the shares: say so, with their count
    undefined = len(s) - total
    among = (
        f" ({undefined} of the {len(s)} heads have no defined s: zero or non-finite forms)"
        if undefined
        else ""
    )
    median = float(np.median(s[defined]))
    base = baseline(_floats(df, "N")[defined])
    base_text = (
        format_fixed(base[0])
        if np.ptp(base) == 0
        else f"{format_fixed(base.min())}–{format_fixed(base.max())}"
    )
    counts = significant_counts(df, "symmetric_energy") if null else None
    if counts is None:
        return (
            f"Median symmetric energy {median:.4f} against the random baseline {base_text} "
            f"over {total} heads{among}; null laws were skipped, so no significance is claimed."
        )
    above, below, _ = counts
    return (
        f"{above} of {total} heads ({100 * above / total:.0f}%) are significantly more symmetric "
        f"and {below} ({100 * below / total:.0f}%) significantly more skew than a random head of "
        f"the same shape (BH-adjusted p < {SIGNIFICANCE:g}); median symmetric energy {median:.4f} "
        f"against the random baseline {base_text}{among}."
    )


def significant_counts(df: pd.DataFrame | Columns, prefix: str) -> tuple[int, int, int] | None:
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


def null_verdicts(df: pd.DataFrame | Columns) -> list[str]:
    """One sentence on each null per head drawn (the rotation null: the heads' own spectra, random orientation).

    Parameters
    ----------
    df : DataFrame or Columns
        The head table.

    Returns
    -------
    list of str
        The sentences (none for a null not drawn).
    """
    lines = []
    for kind in (k for k in KINDS.values() if k.verdict is not None):
        counts = significant_counts(df, f"symmetric_energy_{kind.infix}".rstrip("_"))
        if counts is None:
            continue
        above, below, total = counts
        sd = _floats(df, f"symmetric_energy_{kind.infix}null_sd")
        sd = sd[np.isfinite(sd)]
        lines.append(
            f"{kind.verdict}: {above} of {total} heads significantly more symmetric and {below} more "
            f"skew (BH-adjusted p < {SIGNIFICANCE:g}); null sd of s "
            f"{format_fixed(sd.min())}–{format_fixed(sd.max())}."
        )
    return lines


def tail_note(df: pd.DataFrame | Columns, settings: dict[str, Any]) -> str | None:
    """How many empirical p-values sat at their Monte Carlo floor and entered BH as the Beta tail.

    Parameters
    ----------
    df : DataFrame or Columns
        The head table.
    settings : dict
        The analysis settings (samples, rotation_samples).

    Returns
    -------
    str or None
        The note; None when no p sat at its floor.
    """
    parts = []
    for prefix, key, label in (
        (f"symmetric_energy_{k.infix}".rstrip("_"), k.samples, k.label) for k in KINDS.values()
    ):
        K = int(settings.get(key) or 0)
        if K < 2 or f"{prefix}_p" not in df:
            continue
        p = _floats(df, f"{prefix}_p")
        if at_floor := int((np.isfinite(p) & (p <= 2 / (K + 1) * (1 + 1e-9))).sum()):
            parts.append(f"{at_floor} heads under the {label} null")
    if not parts:
        return None
    floor = format_p(
        0.0,
        resolved_floor(
            next((int(settings[k.samples]) for k in KINDS.values() if settings.get(k.samples)), 0)
        ),
    )
    return (
        "At the Monte Carlo floor 2/(K+1): " + ", ".join(parts) + " enter BH through *_p_tail, a Beta law "
        f"matched to the null's mean and variance (an approximation, printed as {floor} beyond what K "
        "samples resolve; see qkenergy explain p-values)."
    )


SKIPPED_SHOWN = 5
"""Layers whose skipped heads the summary lists one line each (the settings list them all)."""


def skipped_lines(skipped: Sequence[Mapping[str, Any]], shown: int = SKIPPED_SHOWN) -> list[str]:
    """The summary's lines on heads skipped for non-finite weights: one per layer, why, then how many more.

    Parameters
    ----------
    skipped : sequence of mapping
        ``settings["skipped_heads"]``: stack, layer, head, why of each head.
    shown : int, optional
        The most layers listed.

    Returns
    -------
    list of str
        Empty when no head was skipped.
    """
    by_layer: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for entry in skipped:
        by_layer.setdefault((str(entry.get("stack") or ""), int(entry["layer"])), []).append(entry)
    lines = []
    for (stack, layer), entries in list(by_layer.items())[:shown]:
        heads = ", ".join(str(int(e["head"])) for e in entries)
        # a head's why joins the findings that reach it with "; ": each finding once per layer
        why = "; ".join(dict.fromkeys(part for e in entries for part in str(e.get("why", "")).split("; ")))
        label = f"{stack} layer {layer}" if stack else f"layer {layer}"
        lines.append(f"Skipped, {label} head{'s' if len(entries) != 1 else ''} {heads}: {why}")
    if len(by_layer) > shown:
        rest = sum(len(v) for v in list(by_layer.values())[shown:])
        lines.append(
            f"Skipped: {rest} heads of {len(by_layer) - shown} more layers (settings skipped_heads)."
        )
    return lines


def _layer_count(df: pd.DataFrame | Columns) -> str:
    """'6 layers', or '6 layers of 3 stacks' for a model with several attention stacks."""
    layers = np.asarray(df["layer"]).tolist()
    stacks = _texts(df, "stack") if "stack" in df else [""] * len(layers)
    if len(set(stacks)) <= 1:
        return plural(len(set(layers)), "layer")
    return f"{plural(len(set(zip(stacks, layers, strict=True))), 'layer')} of {len(set(stacks))} stacks"


def _layer_label(row: Mapping[Any, Any]) -> str:
    """'3', or 'encoder 3' for a layer of a named stack."""
    stack = row.get("stack") or ""
    return f"{stack} {row['layer']}" if stack else str(row["layer"])


def _sides(df: pd.DataFrame | Columns) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the heads above and of those below the random baseline (N+1)/(2N)."""
    s = _floats(df, "symmetric_energy")
    base = baseline(_floats(df, "N"))
    with np.errstate(invalid="ignore"):
        return np.flatnonzero(s > base), np.flatnonzero(s < base)


def notable_heads(
    df: pd.DataFrame | Columns, top: int = 5
) -> tuple[pd.DataFrame | Columns, pd.DataFrame | Columns]:
    """The ``top`` most symmetric heads (largest s, above the random baseline) and the ``top``
    most skew (smallest s, below it), as ``df`` is: a head above the baseline is never listed
    as skew, nor one below it as symmetric.

    Parameters
    ----------
    df : DataFrame or Columns
        The head table.
    top : int, optional
        How many heads of each kind.

    Returns
    -------
    symmetric : DataFrame or Columns
        The most symmetric heads, largest s first.
    skew : DataFrame or Columns
        The most skew heads, smallest s first.
    """
    s = _floats(df, "symmetric_energy")
    above, below = _sides(df)  # ties: first in the table first
    largest = above[np.argsort(-s[above], kind="stable")[:top]]
    return _take(df, largest), _take(df, below[np.argsort(s[below], kind="stable")[:top]])


def skew_note(df: pd.DataFrame | Columns, top: int) -> str:
    """How many heads lie below the random baseline, how many of them the list shows, and how many
    of them are significantly more skew than a random head (BH-adjusted p < 0.05)."""
    _, below = _sides(df)
    count = below.size
    if count == 0:
        return "Most skew: no head lies below the random baseline."
    shown = (
        f"the {plural(count, 'head')} below the random baseline"
        if count <= top
        else f"{top} of the {count} heads below the random baseline"
    )
    p = _floats(df, "symmetric_energy_p_bh")[below] if "symmetric_energy_p_bh" in df else np.array([])
    if not np.isfinite(p).any():
        return f"Most skew: {shown} (null laws skipped: no significance claimed)."
    significant = int((np.isfinite(p) & (p < SIGNIFICANCE)).sum())
    of_them = "of them" if count <= top else f"of the {count}"
    return (
        f"Most skew: {shown}, {significant} {of_them} significantly more skew than a random head "
        f"(BH-adjusted p < {SIGNIFICANCE:g})."
    )


def _notable_table(df: pd.DataFrame | Columns, top: int, samples: int) -> Table:
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
                format_p(r.get("symmetric_energy_p_bh"), resolved_floor(samples)),
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
    for d in np.unique(offsets[~np.isnan(offsets)]).tolist():
        at_d = s[offsets == d]
        at_d = at_d[~np.isnan(at_d)]
        medians.append(f"{int(d)}: {format_fixed(np.median(at_d) if at_d.size else np.nan)}")
    console.print(
        f"RoPE ({rope.get('kind')}, theta {', '.join(f'{t:g}' for t in rope.get('theta', []))}): "
        f"the tables below read offset d = {offset}; the CSV has every offset. Median s by offset d: "
        + ", ".join(medians)
    )


def print_summary(analysis: AnalysisResult, console: Console | None = None, *, top: int = 5) -> None:
    """Header line, per-layer table (and the layer forms, when analysed), the ``top`` most
    symmetric and most skew heads (none when ``top`` is 0), one-sentence verdict.

    On a console that is not a terminal (a pipe, a file) the tables are plain
    text: aligned columns without box drawing.

    Parameters
    ----------
    analysis : AnalysisResult
        The analysis to print.
    console : Console or None, optional
        Where to print (None: a new rich Console on standard output).
    top : int, optional
        How many symmetric and skew heads to list.
    """
    from rich.console import Console

    console = console or Console()
    settings = analysis.settings
    every_offset = analysis.head_table()
    offset = _summary_offset(settings, every_offset)
    df = _at_offset(every_offset, offset)
    assert df is not None
    null, samples = bool(settings.get("null", True)), settings.get("samples", 0)
    _print_header(analysis, df, console)
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
            *(str(r[f"type_{t}"]) for t in HEAD_TYPES),
        )
    print_table(console, table)
    _print_layer_forms(cast("pd.DataFrame | None", _at_offset(analysis.layers, offset)), console)
    if top > 0:
        print_table(console, _notable_table(df, top, int(samples or 0)))
        console.print(skew_note(df, top))
    lines = null_verdicts(df)
    if samples or not lines:  # the Gaussian verdict, unless only nulls per head were drawn
        console.print(verdict(df, null=null))
    for line in (*lines, tail_note(df, settings)):
        if line is not None:
            console.print(line)


def _print_header(analysis: AnalysisResult, df: pd.DataFrame | Columns, console: Console) -> None:
    """The summary's first lines: model, heads, fold-norm, the null laws drawn; its notes, heads skipped."""
    from rich.markup import escape

    settings = analysis.settings
    fold = "used" if settings.get("fold_norm") else "not used"
    # Empirical two-sided p-values cannot go below 2/(K + 1): say so, since z-scores
    # of trained heads often lie far beyond what K null samples can resolve.
    null_text = "null laws skipped"
    if settings.get("null", True):
        draws = [(k, int(settings.get(k.samples) or 0)) for k in selected(settings.get("null_kind"))]
        null_text = " · ".join(k.header.format(K=K, floor=f"{2 / (K + 1):.2g}") for k, K in draws if K)
    # Names are data: a model called "[red]m" prints as written (markup escaped), never as markup.
    skipped = settings.get("skipped_heads") or []
    dropped = f" ({len(skipped)} more skipped: non-finite weights)" if skipped else ""
    console.print(
        f"[bold]{escape(str(analysis.model))}[/bold] · {plural(len(df['layer']), 'head')}{dropped} in "
        f"{_layer_count(df)} · fold-norm {fold} · {null_text}"
    )
    for note in settings.get("notes", ()):
        console.print(f"note: {escape(str(note))}")
    for skipped_line in skipped_lines(skipped):
        console.print(escape(skipped_line))


def _print_layer_forms(layers: pd.DataFrame | None, console: Console) -> None:
    """The table of the layers' whole forms (when analysed), and the layer null's notes."""
    from rich.markup import escape

    if layers is None or not len(layers):
        return
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
            format_p(r.get("directionality_p")),
            str(r.get("head_type", "")),
        )
    print_table(console, form)
    notes = {str(x) for x in layers.get("null_note", ()) if isinstance(x, str) and x}
    for note in sorted(notes):
        console.print(f"Layer null {escape(note)}.")
