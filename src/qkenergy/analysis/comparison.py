"""Comparing models: the per-model table of a survey and head-by-head differences from a reference.

Pure pandas on head tables with one row per head and a ``model`` column (what
``analyze_model(...).heads`` gives for one model and ``load_survey`` for many),
optionally with the survey's ``group``, ``step`` and, for models with several
attention stacks, ``stack`` columns; and on the per-layer forms table
(``analyze_model(..., per_layer=True).layers``). No plotting and no I/O: the
figures and the report (``survey_figures``, ``survey_report``) are drawn from
these frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from qkenergy.analysis.summary import HEAD_TYPES, baseline, quartiles, significant_counts
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.formats.tables import REQUIRED_COLUMNS
from qkenergy.formats.tables import text_column as text

__all__ = [
    "SUMMARY_COLUMNS",
    "BaselineComparison",
    "baseline_comparison",
    "check_heads",
    "head_keys",
    "model_info",
    "model_order",
    "model_summary",
    "present",
    "relative_depth",
]

# Columns of model_summary, in table order (group / step only when the heads carry them).
SUMMARY_COLUMNS: tuple[str, ...] = (
    "model",
    "architecture",
    "stacks",
    "layers",
    "n",
    "N",
    "heads",
    "s_median",
    "s_q1",
    "s_q3",
    "baseline_min",
    "baseline_max",
    "share_above",
    "share_below",
    *(f"share_{t}" for t in HEAD_TYPES),
    "pairing_median",
    "balance_min",
    "participation_ratio_median",
    "symmetry_score_median",
    "symmetry_score_q1",
    "symmetry_score_q3",
    "directionality_median",
    "directionality_q1",
    "directionality_q3",
)


def check_heads(heads: pd.DataFrame, what: str = "head table") -> None:
    """One-line QKEnergyError unless ``heads`` is a non-empty head table with the required columns.

    Parameters
    ----------
    heads : DataFrame
        The table to check.
    what : str, optional
        What the table is, for the error.

    Raises
    ------
    QKEnergyError
        A required column is missing, or the table is empty.
    """
    if missing := [c for c in REQUIRED_COLUMNS if c not in heads.columns]:
        raise QKEnergyError(f"{what}: not a qkenergy head table; missing column(s) {', '.join(missing)}")
    if len(heads) == 0:
        raise QKEnergyError(f"{what}: no heads to report")


def head_keys(heads: pd.DataFrame) -> list[str]:
    """Columns naming a head within its model: (stack,) layer, head.

    Parameters
    ----------
    heads : DataFrame
        A head table.

    Returns
    -------
    list of str
        ``["stack", "layer", "head"]`` or ``["layer", "head"]``.
    """
    return ["stack", "layer", "head"] if "stack" in heads.columns else ["layer", "head"]


def _stack(frame: pd.DataFrame) -> pd.Series:
    if "stack" in frame.columns:
        return text(frame["stack"])
    return pd.Series("", index=frame.index)


def model_order(heads: pd.DataFrame) -> list[str]:
    """Models in reading order: by group, then training step (missing last), then name.

    Parameters
    ----------
    heads : DataFrame
        The head table (``model``; optionally ``group``, ``step``).

    Returns
    -------
    list of str
        The model names, each once.
    """
    keys = pd.DataFrame({"model": heads["model"].astype(str)})
    keys["group"] = text(heads["group"]) if "group" in heads.columns else ""
    keys["step"] = pd.to_numeric(heads["step"], errors="coerce") if "step" in heads.columns else np.nan
    first = keys.groupby("model", sort=False).first().reset_index()
    first = first.sort_values(["group", "step", "model"], na_position="last", kind="stable")
    return first["model"].tolist()


def model_info(heads: pd.DataFrame, models: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per model: ``architecture`` (model_type; "" unknown) and ``n_layers`` (NaN unknown).

    Taken from ``models`` (a frame with a ``model`` column and any of
    ``architecture`` / ``model_type`` / ``n_layers``, e.g. from a survey's
    settings), else from the same columns of ``heads``.

    Parameters
    ----------
    heads : DataFrame
        The head table (a ``model`` column).
    models : DataFrame or None, optional
        Per-model facts, preferred over the head table's.

    Returns
    -------
    DataFrame
        Indexed by model, in :func:`model_order`: architecture, n_layers.
    """
    names = model_order(heads)
    info = pd.DataFrame({"architecture": "", "n_layers": np.nan}, index=pd.Index(names, name="model"))
    for source in (heads, models):
        if source is None or "model" not in source.columns:
            continue
        first = source.assign(model=source["model"].astype(str)).groupby("model", sort=False).first()
        first = first[first.index.isin(names)]
        for column in ("model_type", "architecture"):
            if column in first.columns:
                known = text(first[column])
                known = known[known != ""]
                info.loc[known.index, "architecture"] = known
        if "n_layers" in first.columns:
            count = pd.to_numeric(first["n_layers"], errors="coerce").dropna()
            info.loc[count.index, "n_layers"] = count.astype(float)
    return info


def relative_depth(heads: pd.DataFrame, info: pd.DataFrame | None = None) -> pd.Series:
    """layer / (L - 1) per row: 0 the first layer of its model (and stack), 1 the last.

    L is the model's layer count from ``info`` (see :func:`model_info`) when
    known, else one more than the deepest analysed layer of that model and
    stack. A one-layer model sits at 0.

    Parameters
    ----------
    heads : DataFrame
        The head table (model, layer; optionally stack).
    info : DataFrame or None, optional
        :func:`model_info` of the heads (computed when None).

    Returns
    -------
    Series
        The relative depth in [0, 1] per row, named ``relative_depth``.
    """
    info = model_info(heads) if info is None else info
    layer = heads["layer"].to_numpy(np.float64)
    deepest = heads.groupby([heads["model"].astype(str), _stack(heads)])["layer"].transform("max")
    known = heads["model"].astype(str).map(info["n_layers"]).to_numpy(np.float64)
    count = np.where(np.isfinite(known), known, deepest.to_numpy(np.float64) + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        depth = np.where(count > 1, layer / (count - 1), 0.0)
    return pd.Series(depth, index=heads.index, name="relative_depth")


def _shape_value(values: pd.Series) -> Any:
    """The one value of a shape column, or its distinct values as text ("32/64") when they differ."""
    distinct = sorted(pd.unique(values.dropna()))
    if len(distinct) == 1:
        return int(distinct[0])
    return "/".join(str(int(v)) for v in distinct)


def model_summary(
    heads: pd.DataFrame, layers: pd.DataFrame | None = None, models: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per model: shapes, symmetric energy against its baseline, significance, head types, scores.

    Columns (``SUMMARY_COLUMNS``, with ``group`` and ``step`` after ``model``
    when the heads carry them): architecture; stacks (the model's attention
    stacks, "" for single-stack models); layers (analysed); n, N (head and
    residual width; "a/b" when they differ within the model); heads; median
    and quartiles of the symmetric energy s over the heads with a defined s;
    the random baseline (N+1)/(2N) (min and max over the model's widths);
    share_above / share_below: heads whose BH-adjusted p < 0.05 with positive
    (negative) z, over the heads with a defined s (NaN without null laws);
    share_II / share_I+ / share_I-: head types over all heads; median pairing,
    minimum balance, median participation ratio over heads; and, from the
    per-layer forms when ``layers`` is given, median and quartiles over the
    model's layers of the symmetry score 2s - 1 and of the directionality
    (Saponati et al. 2025; NaN otherwise).

    Parameters
    ----------
    heads : DataFrame
        The head table of all models.
    layers : DataFrame or None, optional
        The layer table (per-layer forms), for the symmetry score and directionality.
    models : DataFrame or None, optional
        Per-model facts; see :func:`model_info`.

    Returns
    -------
    DataFrame
        One row per model, the columns above.

    Raises
    ------
    QKEnergyError
        ``heads`` is not a head table.
    """
    check_heads(heads)
    info = model_info(heads, models)
    by_model = dict(tuple(heads.groupby(heads["model"].astype(str), sort=False)))
    layer_groups: dict[str, pd.DataFrame] = {}
    if layers is not None and len(layers) and "model" in layers.columns:
        layer_groups = dict(tuple(layers.groupby(layers["model"].astype(str), sort=False)))
    rows = [
        _model_row(name, by_model[name], info, layer_groups.get(name), heads.columns) for name in info.index
    ]
    return pd.DataFrame(rows)


def _model_row(
    name: str, group: pd.DataFrame, info: pd.DataFrame, forms: pd.DataFrame | None, columns: pd.Index
) -> dict[str, Any]:
    """One model's row of :func:`model_summary` (``forms``: its layer forms, if any)."""
    s = group["symmetric_energy"].to_numpy(np.float64)
    defined = np.isfinite(s)
    q1, med, q3 = quartiles(s)
    stacks = sorted(set(_stack(group)) - {""})
    base = baseline(group["N"].to_numpy(np.float64))
    row: dict[str, Any] = {"model": name}
    for extra in ("group", "step"):
        if extra in columns:
            row[extra] = group[extra].iloc[0]
    row.update(
        architecture=info.at[name, "architecture"],
        stacks=", ".join(stacks),
        layers=int(group[[*head_keys(group)[:-1]]].drop_duplicates().shape[0]),
        n=_shape_value(group["n"]),
        N=_shape_value(group["N"]),
        heads=len(group),
        s_median=med,
        s_q1=q1,
        s_q3=q3,
        baseline_min=float(np.min(base)),
        baseline_max=float(np.max(base)),
    )
    # over the heads with a defined s
    counts = significant_counts(group, "symmetric_energy") if defined.any() else None
    row["share_above"] = np.nan if counts is None else counts[0] / int(defined.sum())
    row["share_below"] = np.nan if counts is None else counts[1] / int(defined.sum())
    types = text(group["head_type"]) if "head_type" in group else pd.Series("", index=group.index)
    for t in HEAD_TYPES:
        row[f"share_{t}"] = float((types == t).mean())
    row["pairing_median"] = quartiles(group.get("pairing", np.nan))[1]
    balance = group.get("balance", pd.Series(np.nan, index=group.index)).to_numpy(np.float64)
    balance = balance[np.isfinite(balance)]
    row["balance_min"] = float(np.min(balance)) if balance.size else np.nan
    row["participation_ratio_median"] = quartiles(group.get("participation_ratio", np.nan))[1]
    for score in ("symmetry_score", "directionality"):
        values = forms[score] if forms is not None and score in forms.columns else np.nan
        lo, mid, hi = quartiles(values)
        row.update({f"{score}_median": mid, f"{score}_q1": lo, f"{score}_q3": hi})
    return row


# ----------------------------------------------------------------------------- reference model


@dataclass(frozen=True)
class BaselineComparison:
    """Head-by-head difference of the symmetric energy from a reference model.

    ``differences``: one row per head of every compared model: model,
    reference, (stack,) layer, head, n, N, symmetric_energy,
    symmetric_energy_reference, difference (= s - s_reference).
    ``compared``: the models compared, in report order. ``skipped``: model ->
    why it was not compared (another architecture or other heads).

    Parameters
    ----------
    reference : str
        The reference model.
    differences : DataFrame
        One row per compared head (columns above).
    compared : list of str
        The models compared, in report order.
    skipped : dict, optional
        Model -> why it was not compared.
    """

    reference: str
    differences: pd.DataFrame
    compared: list[str]
    skipped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> pd.DataFrame:
        """Per compared model: heads, median and quartiles of the difference, share of heads with s above."""
        rows = []
        for name, group in self.differences.groupby("model", sort=False):
            d = group["difference"].to_numpy(np.float64)
            q1, med, q3 = quartiles(d)
            finite = d[np.isfinite(d)]
            rows.append(
                [name, len(group), med, q1, q3, float(np.mean(finite > 0)) if finite.size else np.nan]
            )
        columns = ["model", "heads", "difference_median", "difference_q1", "difference_q3", "share_higher"]
        return pd.DataFrame(rows, columns=columns)


def baseline_comparison(
    heads: pd.DataFrame, reference: str, models: pd.DataFrame | None = None
) -> BaselineComparison:
    """Compare every model of the reference's architecture with the reference, head by head.

    A model is compared when its architecture (when both are known) equals the
    reference's and it has exactly the reference's heads ((stack,) layer,
    head) with the same (n, N); the others are listed in ``skipped`` with the
    reason. Raises ArgumentError when ``reference`` is not one of the models.

    Parameters
    ----------
    heads : DataFrame
        The head table of all models (a ``model`` column).
    reference : str
        The reference model's name.
    models : DataFrame or None, optional
        Per-model facts (architecture, n_layers); see :func:`model_info`.

    Returns
    -------
    BaselineComparison
        The differences, the models compared and those skipped.

    Raises
    ------
    ArgumentError
        ``reference`` is not a model of the table.
    QKEnergyError
        ``heads`` is not a head table.
    """
    check_heads(heads)
    info = model_info(heads, models)
    names = list(info.index)
    if reference not in names:
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ArgumentError(
            f"baseline: model {reference!r} is not in the table; models: {shown}", parameter="baseline"
        )
    keys = head_keys(heads)
    columns = [*keys, "n", "N", "symmetric_energy"]
    frame = heads.assign(model=heads["model"].astype(str))
    ref = frame[frame["model"] == reference][columns]
    ref_shape = _shape(ref, keys)
    ref_arch: object = info.at[reference, "architecture"]
    compared: list[str] = []
    skipped: dict[str, str] = {}
    parts = []
    for name in names:
        if name == reference:
            continue
        arch: object = info.at[name, "architecture"]
        if arch and ref_arch and arch != ref_arch:
            skipped[name] = f"architecture {arch}, the reference is {ref_arch}"
            continue
        mine = frame[frame["model"] == name][columns]
        if _shape(mine, keys) != ref_shape:
            skipped[name] = f"other heads or shapes ({len(mine)} heads, the reference has {len(ref)})"
            continue
        merged = mine.merge(
            ref[[*keys, "symmetric_energy"]], on=keys, suffixes=("", "_reference"), validate="one_to_one"
        )
        merged.insert(0, "reference", reference)
        merged.insert(0, "model", name)
        merged["difference"] = merged["symmetric_energy"] - merged["symmetric_energy_reference"]
        parts.append(merged)
        compared.append(name)
    out_columns = ["model", "reference", *columns, "symmetric_energy_reference", "difference"]
    differences = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=out_columns)
    return BaselineComparison(reference, differences[out_columns], compared, skipped)


def _shape(frame: pd.DataFrame, keys: list[str]) -> list[tuple[Any, ...]]:
    """The sorted (stack,) layer, head, n, N of a model's heads: what must match to compare head by head."""
    cells = [frame[k].astype(str) if k == "stack" else frame[k].astype(np.int64) for k in [*keys, "n", "N"]]
    return sorted(zip(*(c.tolist() for c in cells)))


def present(values: Sequence[Any] | pd.Series) -> bool:
    """True when some value is neither missing nor empty text.

    Parameters
    ----------
    values : sequence or Series
        The values of a column.

    Returns
    -------
    bool
        Whether any value is present.
    """
    series = pd.Series(values)
    return bool((series.notna() & (series.astype(str) != "")).any())
