"""Matplotlib figures of a head table (Agg canvas only, never a GUI backend).

1. ``symmetric_energy_heatmap``: layer x head, diverging colours centred on the
   random baseline (N+1)/(2N) (Corollary 2, Proposition 6).
2. ``symmetric_energy_null``: histogram of the heads' symmetric energy against
   the exact null density of a Gaussian head of the same (n, N), drawn above
   the heads' bars, with its central 99 % as a band and, inset, at its own scale.
3. ``head_types_per_layer``: layer x type, the share of the layer's heads of
   each type (Type II, I+, I-).
4. ``symmetric_profiles``: (b_sym, c_sym, d_sym) on the simplex with the
   accumulation-limit curve rho -> (2rho, (1-rho)_+^2, (rho-1)_+^2)/(1+rho^2).
5. ``moments_O_E``: the moment statistics E against O of each head, coloured
   by head type, over the cloud of the Gaussian null law of the same (n, N)
   (docs/mathematics.md, section 9).
6. ``type_spectra``: for each type, the mean normalised spectrum of S
   (alpha_i / ||S|| up, -beta_i / ||S|| down, by rank i) of the heads that go
   furthest its way (largest b_sym, c_sym, d_sym).
7. ``lobes_layer{L}_head{H}``: one head's sorted lobes alpha vs beta with the
   line beta = rho alpha (Lemma 6).
8. ``symmetric_energy_offsets`` (tables with an ``offset`` column, from
   ``--rope-offsets``): s of L_d against the offset d, one line per layer;
   the other figures then show the smallest offset.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from numpy.typing import ArrayLike

from qkenergy.analysis.summary import HEAD_TYPES, baseline
from qkenergy.base.atomic import OutputTransaction, joined
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.formatting import MISSING, format_fixed
from qkenergy.formats.provenance import population_label
from qkenergy.formats.recorded_settings import METADATA_KEY, settings_json
from qkenergy.math.defaults import RADIUS

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.math.nulls import NullLaw

__all__ = [
    "FIGURES",
    "FORMATS",
    "accumulation_limit",
    "choose_head",
    "extreme_heads",
    "figure",
    "moment_scatter",
    "normalised_spectrum",
    "plot_results",
    "ternary_xy",
    "type_counts",
]

FIGURES = (
    "symmetric_energy_heatmap",
    "symmetric_energy_null",
    "head_types_per_layer",
    "symmetric_profiles",
    "moments_O_E",
    "type_spectra",
    "lobes",
    "symmetric_energy_offsets",
)
"""The figures :func:`plot_results` draws (``lobes``: one head's; ``symmetric_energy_offsets``: RoPE offsets only)."""

FORMATS = ("png", "svg", "pdf")
_SQRT3_2 = math.sqrt(3) / 2
_DPI = 150


# Where each format keeps free text: the run's settings (JSON) go there.
_SETTINGS_FIELD = {"png": METADATA_KEY, "svg": "Description", "pdf": "Subject"}


def _save(
    fig: Figure,
    outdir: Path,
    stem: str,
    formats: Sequence[str],
    outputs: OutputTransaction,
    settings: dict[str, Any] | None,
) -> list[Path]:
    FigureCanvasAgg(fig)  # attach the Agg canvas; svg/pdf pick their own writer by format
    paths = []
    for fmt in formats:
        path = outdir / f"{stem}.{fmt}"
        # No timestamps of the drawing itself: the same table and settings give the same bytes.
        metadata: dict[str, Any] = (
            {"Date": None} if fmt == "svg" else ({"CreationDate": None} if fmt == "pdf" else {})
        )
        if settings is not None:
            metadata[_SETTINGS_FIELD[fmt]] = settings_json(settings)
        fig.savefig(outputs.stage(path), format=fmt, dpi=_DPI, bbox_inches="tight", metadata=metadata or None)
        paths.append(path)
    return paths


def _check_formats(formats: Sequence[str]) -> list[str]:
    if isinstance(formats, str):
        formats = [formats]
    out = [str(f).lower().lstrip(".") for f in formats]
    bad = [f for f in out if f not in FORMATS]
    if bad or not out:
        raise QKEnergyError(f"plot formats {bad or '(none)'} not supported; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(out))


def _need(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    if missing := [c for c in columns if c not in df.columns]:
        raise QKEnergyError(f"cannot plot {what}: the table lacks column(s) {', '.join(missing)}")


def _plain(text: str) -> str:
    """A name for a matplotlib label: its dollar signs escaped, so that it is never read as mathtext
    (a model called ``$\\foo$`` would be a math formula, and fail to draw)."""
    return text.replace("$", r"\$")


def _model_name(df: pd.DataFrame) -> str | None:
    models = df["model"].unique() if "model" in df.columns else np.array([])
    return _plain(str(models[0])) if len(models) == 1 else None


def _title(df: pd.DataFrame) -> str:
    return _model_name(df) or "heads"


def _legend_below(ax: Axes, ncol: int = 1, *, gap: float = 0.15, entries: Sequence[Any] = ()) -> Any:
    """The axes' legend under them (``gap``: axes heights below their bottom, under the axis title),
    off the data: a legend inside may cover the very point that matters. ``entries``: (handles, labels)."""
    return ax.legend(
        *entries, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -gap), ncol=ncol, frameon=False
    )


# ----------------------------------------------------------------------------- 1. heatmap


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    """The table with a heatmap row key: the layer, or 'stack layer' when there are several stacks."""
    if "stack" not in df.columns or df["stack"].nunique() <= 1:
        return df.assign(row=df["layer"])
    labels = df["stack"].astype(str) + " " + df["layer"].astype(str)
    order = pd.unique(labels)  # stacks in table order, layers as analysed
    return df.assign(row=pd.Categorical(labels, categories=order, ordered=True))


def _pivot(df: pd.DataFrame, values: str) -> pd.DataFrame:
    """``values`` by heatmap row and head."""
    return df.pivot_table(
        index="row", columns="head", values=values, aggfunc="first", dropna=False, observed=True
    )


def _canvas(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """A new figure with one axes, or the figure of the axes given (drawn into in place)."""
    if ax is None:
        fig = Figure(figsize=figsize)
        return fig, fig.add_subplot()
    return cast(Figure, ax.figure), ax


def _null_scale(df: pd.DataFrame, deviations: np.ndarray) -> tuple[float, str]:
    """The unit of the heatmap's colours: the null law's sd of s (median over the heads), else, with
    no null columns, a twentieth of the largest |s - baseline|; and how the colour bar names it."""
    sd = (
        df["symmetric_energy_null_sd"].to_numpy(np.float64)
        if "symmetric_energy_null_sd" in df.columns
        else np.zeros(0)
    )
    sd = sd[np.isfinite(sd) & (sd > 0)]
    if sd.size:
        return float(np.median(sd)), "null sd"
    spread = float(np.max(np.abs(deviations))) if deviations.size else 0.0
    unit = spread / 20 if spread > 0 else 1e-3
    return unit, f"{unit:.2g}"


def _heatmap(df: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """s per head, coloured by asinh((s - baseline) / null sd): diverging about the random baseline
    (N+1)/(2N), linear within a null sd of it and logarithmic beyond, so that heads a few null sd off
    the baseline are told apart from it and from the far ones at once; the cells print s to 3 decimals."""
    import matplotlib
    from matplotlib.colors import FuncNorm

    df = _rows(df)
    grid = _pivot(df, "symmetric_energy")
    values = grid.to_numpy(np.float64)
    centre = float(baseline(float(df["N"].unique()[0])))
    finite = values[np.isfinite(values)]
    unit, unit_name = _null_scale(df, finite - centre)
    distance = (values - centre) / unit
    reach = float(np.arcsinh(np.max(np.abs(distance[np.isfinite(distance)]), initial=1.0)))
    norm = FuncNorm((np.arcsinh, np.sinh), vmin=-math.sinh(reach), vmax=math.sinh(reach))

    rows, cols = values.shape
    fig, ax = _canvas(ax, (max(5.0, 0.55 * cols + 2.8), max(3.0, 0.4 * rows + 1.6)))
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="0.8")
    image = ax.imshow(
        np.ma.masked_invalid(distance), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest"
    )
    ax.set_xticks(range(cols), [str(c) for c in grid.columns], fontsize=7 if cols > 16 else 9)
    ax.set_yticks(range(rows), [str(r) for r in grid.index], fontsize=7 if rows > 16 else 9)
    ax.set(xlabel="head", ylabel="layer")
    # Mark heads whose symmetric energy differs significantly from the random law.
    sig = np.full(values.shape, np.nan)
    if "symmetric_energy_p_bh" in df.columns:
        sig = _pivot(df, "symmetric_energy_p_bh").reindex_like(grid).to_numpy(np.float64)
    annotate = rows * cols <= 400
    for i, j in zip(*np.nonzero(np.isfinite(values)), strict=True):
        star = "*" if math.isfinite(sig[i, j]) and sig[i, j] < 0.05 else ""
        if annotate:
            dark = abs(float(norm(distance[i, j])) - 0.5) > 0.3
            text = f"{values[i, j]:.3f}{star}"
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color="white" if dark else "black")
        elif star:
            ax.text(j, i, star, ha="center", va="center", fontsize=6)
    bar = fig.colorbar(image, ax=ax)
    steps = [k for k in (1, 10, 100, 1000, 10000) if k <= math.sinh(reach)]
    bar.set_ticks([-k for k in reversed(steps)] + [0] + steps)
    bar.set_label(f"(s − baseline) / {unit_name}, asinh scale")
    stars = "; * BH-adjusted p < 0.05" if "symmetric_energy_p_bh" in df.columns else ""
    ax.set_title(
        f"{_title(df)}: symmetric energy s per head\n"
        f"colour: s against the random baseline (N+1)/(2N) = {centre:.4f}{stars}",
        fontsize=9,
    )
    return fig


# ----------------------------------------------------------------------------- 2. null histogram


def _shape_laws(
    df: pd.DataFrame,
    laws: Mapping[tuple[int, int], NullLaw] | None,
    null: NullSpec | None,
    cache_dir: str | os.PathLike[str] | None,
) -> Iterator[tuple[int, Any, Any, NullLaw]]:
    """(k, n, N, law) for each head shape of the table in order: the law given, else drawn (or cached)."""
    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.math.nulls import NULL_STATISTICS

    null = null or NullSpec()
    shapes = df[["n", "N"]].drop_duplicates().sort_values(["n", "N"]).itertuples(index=False)
    for k, (n, N) in enumerate(shapes):
        law = (laws or {}).get((int(n), int(N))) or null.null_law(
            int(n), int(N), cache_dir=cache_dir, names=NULL_STATISTICS
        )
        yield k, n, N, law


def _null_histogram(
    df: pd.DataFrame,
    *,
    null: NullSpec | None,
    cache_dir: str | os.PathLike[str] | None,
    population: str = "heads",
    laws: Mapping[tuple[int, int], NullLaw] | None = None,
    ax: Axes | None = None,
) -> Figure:
    s = df["symmetric_energy"].to_numpy(np.float64)
    s = s[np.isfinite(s)]
    fig, ax = _canvas(ax, (7.0, 4.6))
    axn = ax.twinx()  # the null is much narrower than trained heads: own density axis
    # ... drawn above the heads' bars, which would otherwise hide it.
    axn.set_zorder(ax.get_zorder() + 1)
    axn.patch.set_visible(False)
    colours = ["0.15", "tab:purple", "tab:green", "tab:brown"]
    lo, hi = (s.min(), s.max()) if s.size else (np.inf, -np.inf)
    drawn: list[tuple[np.ndarray, str, float]] = []
    for k, n, N, law in _shape_laws(df, laws, null, cache_dir):
        draws = np.asarray(law.samples("symmetric_energy"), dtype=np.float64)
        draws = draws[np.isfinite(draws)]
        colour = colours[k % len(colours)]
        base = float(baseline(float(N)))
        if draws.size:
            # The null's central 99 % as a band over the whole height: visible at any width of the law.
            ax.axvspan(*np.quantile(draws, [0.005, 0.995]), color=colour, alpha=0.15, lw=0, zorder=0)
            axn.hist(draws, bins=60, density=True, histtype="stepfilled", color=colour, alpha=0.35)
            label = f"null, Gaussian head n={n}, N={N} ({draws.size} samples; band: central 99%)"
            axn.hist(draws, bins=60, density=True, histtype="step", color=colour, lw=1.2, label=label)
            lo, hi = min(lo, draws.min()), max(hi, draws.max())
            drawn.append((draws, colour, base))
        axn.axvline(base, color=colour, ls="--", lw=1, label=f"baseline (N+1)/(2N) = {base:.4f}")
        lo, hi = min(lo, base), max(hi, base)
    if s.size:
        span = hi - lo if hi > lo else 1e-3
        bins = np.linspace(lo - 0.02 * span, hi + 0.02 * span, 41)
        counts, _, _ = ax.hist(
            s, bins=bins.tolist(), color="tab:red", alpha=0.6, label=f"{population} ({s.size})"
        )
        ax.set_ylim(0, 1.9 * max(float(np.max(counts)), 1.0))  # headroom for the zoom on the null
    ax.set(xlabel="symmetric energy s = ||S||²/||L||²", ylabel="heads")
    axn.set_ylabel("null density")
    if drawn:
        _null_zoom(ax, s, *drawn[0], right=drawn[0][2] <= (lo + hi) / 2)
    (handles, labels), (handles_n, labels_n) = ax.get_legend_handles_labels(), axn.get_legend_handles_labels()
    _legend_below(axn, 2, gap=0.14, entries=(handles + handles_n, labels + labels_n))
    ax.set_title(f"{_title(df)}: heads against the exact random law", fontsize=10)
    return fig


def _null_zoom(ax: Any, s: np.ndarray, draws: np.ndarray, colour: str, base: float, *, right: bool) -> None:
    """An inset with the null law at its own scale and the heads that fall within its range."""
    inset = ax.inset_axes([0.56 if right else 0.04, 0.52, 0.4, 0.4])
    inset.set_zorder(10)  # above the density axis too
    a, b = float(draws.min()), float(draws.max())
    pad = 0.5 * (b - a) if b > a else 1e-3
    inset.hist(draws, bins=40, density=True, histtype="stepfilled", color=colour, alpha=0.35)
    inset.hist(draws, bins=40, density=True, histtype="step", color=colour, lw=1)
    near = s[(s >= a - pad) & (s <= b + pad)]
    inset.plot(near, np.zeros_like(near), "|", color="tab:red", ms=12, mew=1.5)
    inset.axvline(base, color=colour, ls="--", lw=1)
    inset.set_xlim(a - pad, b + pad)
    inset.tick_params(labelsize=6)
    inset.xaxis.set_major_locator(MaxNLocator(4))  # 4-decimal labels: more would run into each other
    inset.set_yticks([])
    inset.set_title(f"the null law, zoomed: {near.size} heads (|) in this range", fontsize=7)


# ----------------------------------------------------------------------------- head types per layer

TYPE_COLOURS = {"II": "0.45", "I+": "tab:red", "I-": "tab:blue"}
# The part of the symmetric profile that makes each type: Type II heads keep their energy in
# matched pairs (b_sym), I+ heads in the positive lobe's excess (c_sym), I- in the negative one's (d_sym).
TYPE_PROFILE = {"II": "b_sym", "I+": "c_sym", "I-": "d_sym"}
EXTREME_HEADS = 5  # heads per type in the mean spectrum


def type_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Per layer (rows: layer, or 'stack layer', in table order) how many heads are of each type
    (columns II, I+, I-, and 'undefined' when some head has no type).

    Parameters
    ----------
    df : DataFrame
        The head table (layer, head_type; optionally stack).

    Returns
    -------
    DataFrame
        Heads per layer (rows) and type (columns).
    """
    rows = _rows(df)["row"].astype(str)
    types = df["head_type"].fillna("").astype(str).replace("", "undefined")
    counts = pd.crosstab(pd.Categorical(rows, categories=pd.unique(rows)), types)
    extra = ["undefined"] if "undefined" in counts.columns else []
    counts = counts.reindex(columns=[*HEAD_TYPES, *extra], fill_value=0)
    counts.index.name, counts.columns.name = "layer", "head_type"
    return counts


def _type_shares(df: pd.DataFrame, ax: Axes | None = None) -> Figure:
    counts = type_counts(df)
    number = counts.to_numpy(np.int64)
    totals = number.sum(axis=1)
    shares = number / np.maximum(totals, 1)[:, None]
    rows, cols = shares.shape
    fig, ax = _canvas(ax, (max(4.5, 1.1 * cols + 2.8), max(3.0, 0.38 * rows + 1.6)))
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(cols), [f"Type {t}" if t in HEAD_TYPES else t for t in counts.columns])
    ax.set_yticks(range(rows), [str(r) for r in counts.index], fontsize=7 if rows > 16 else 9)
    ax.set_ylabel("layer")
    if rows * cols <= 600:
        for i, j in np.ndindex(rows, cols):
            colour = "white" if shares[i, j] > 0.6 else "black"
            ax.text(j, i, f"{number[i, j]}/{totals[i]}", ha="center", va="center", fontsize=7, color=colour)
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("share of the layer's heads")
    ax.set_title(f"{_title(df)}: head types per layer (heads of the type / heads)", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- spectra of the types


def extreme_heads(df: pd.DataFrame, head_type: str, count: int = EXTREME_HEADS) -> pd.DataFrame:
    """The ``count`` heads of ``head_type`` that go furthest its way: the largest b_sym (Type II),
    c_sym (I+) or d_sym (I-); ties in table order.

    Parameters
    ----------
    df : DataFrame
        The head table (head_type and the profile columns).
    head_type : {"II", "I+", "I-"}
        The type.
    count : int, optional
        How many heads.

    Returns
    -------
    DataFrame
        The heads, most extreme first.
    """
    part = df[df["head_type"].astype(str) == head_type]
    values = part[TYPE_PROFILE[head_type]].to_numpy(np.float64)
    order = [i for i in np.argsort(-values, kind="stable") if math.isfinite(values[i])]
    return part.iloc[order[:count]]


def normalised_spectrum(heads: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Mean over ``heads`` of alpha_i / ||S|| and of beta_i / ||S|| by rank i (shorter lobes padded with 0).

    alpha: the positive eigenvalues of S in decreasing order, beta: the magnitudes of its negative
    ones; ||S||^2 = ||alpha||^2 + ||beta||^2, so each head's spectrum has unit norm before the mean.

    Parameters
    ----------
    heads : DataFrame
        Heads with ``alpha`` and ``beta`` list columns.

    Returns
    -------
    alpha : ndarray, shape (r,)
        Mean normalised positive lobe by rank (r the longest lobe).
    beta : ndarray, shape (r,)
        Mean normalised negative lobe by rank.
    """
    alphas = [np.asarray(a, dtype=np.float64) for a in heads["alpha"]]
    betas = [np.asarray(b, dtype=np.float64) for b in heads["beta"]]
    width = max([x.size for x in (*alphas, *betas)] + [1])
    alpha = np.zeros((len(alphas), width))
    beta = np.zeros((len(betas), width))
    for k, (a, b) in enumerate(zip(alphas, betas, strict=True)):
        norm = math.sqrt(float(a @ a + b @ b)) or 1.0
        alpha[k, : a.size] = a / norm
        beta[k, : b.size] = b / norm
    if not len(alphas):
        return np.zeros(0), np.zeros(0)
    return alpha.mean(axis=0), beta.mean(axis=0)


def _type_spectra(df: pd.DataFrame, count: int = EXTREME_HEADS, axes: Sequence[Axes] | None = None) -> Figure:
    if axes is None:
        fig = Figure(figsize=(11.0, 4.4))
        axes = fig.subplots(1, len(HEAD_TYPES), sharey=True)
    else:
        fig = cast(Figure, axes[0].figure)
    for ax, head_type in zip(axes, HEAD_TYPES, strict=True):
        chosen = extreme_heads(df, head_type, count)
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_xlabel("rank i")
        if not len(chosen):
            ax.set_title(f"Type {head_type}: no head of this type", fontsize=8)
            continue
        alpha, beta = normalised_spectrum(chosen)
        ranks = np.arange(1, alpha.size + 1)
        colour = TYPE_COLOURS[head_type]
        ax.bar(ranks, alpha, width=0.8, color=colour, label="α_i / ||S|| (positive eigenvalues)")
        ax.bar(ranks, -beta, width=0.8, color=colour, alpha=0.45, label="−β_i / ||S|| (negative eigenvalues)")
        where = ", ".join(
            f"{layer}.{head}" for layer, head in zip(chosen["layer"], chosen["head"], strict=True)
        )
        ax.set_title(
            f"Type {head_type}: the {len(chosen)} heads with the largest {TYPE_PROFILE[head_type]}\n"
            f"(layer.head {where})",
            fontsize=8,
        )
        _legend_below(ax, gap=0.2)
    axes[0].set_ylabel("mean eigenvalue of S / ||S||")
    fig.suptitle(f"{_title(df)}: mean normalised spectrum of S, most extreme heads of each type", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 3. simplex


def ternary_xy(b: ArrayLike, c: ArrayLike, d: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Barycentric (b, c, d) -> plane: b at the top, c bottom left, d bottom right.

    Parameters
    ----------
    b, c, d : array_like, shape (...)
        Barycentric weights (normalised here).

    Returns
    -------
    x, y : ndarray, shape (...)
        The plane coordinates.
    """
    top, left, right = (np.asarray(v, dtype=np.float64) for v in (b, c, d))
    total = top + left + right
    with np.errstate(invalid="ignore", divide="ignore"):
        top, right = top / total, right / total
    return right + top / 2, top * _SQRT3_2


def accumulation_limit(rho: np.ndarray) -> np.ndarray:
    """(2rho, (1-rho)_+^2, (rho-1)_+^2)/(1+rho^2): the limit symmetric profile (docs/mathematics.md §3).

    Parameters
    ----------
    rho : ndarray, shape (...)
        The ratios rho >= 0.

    Returns
    -------
    ndarray, shape (..., 3)
        The profile (b, c, d) at each rho.
    """
    rho = np.asarray(rho, dtype=np.float64)
    out = np.stack([2 * rho, np.clip(1 - rho, 0, None) ** 2, np.clip(rho - 1, 0, None) ** 2], axis=-1)
    return out / (1 + rho**2)[..., None]


def _simplex(
    df: pd.DataFrame,
    *,
    radius: float = RADIUS,
    population: str = "heads",
    type_rule: str = "radius",
    imbalance_cut: float = 0.2,
    ax: Axes | None = None,
) -> Figure:
    fig, ax = _canvas(ax, (6.4, 5.6))
    ax.set_aspect("equal")
    ax.axis("off")
    corners = np.array([[0, 0], [1, 0], [0.5, _SQRT3_2], [0, 0]])
    ax.plot(corners[:, 0], corners[:, 1], color="0.2", lw=1)
    for t in np.arange(0.2, 1.0, 0.2):  # grid lines of constant b, c and d
        for line in (
            ternary_xy([t, t], [1 - t, 0], [0, 1 - t]),
            ternary_xy([1 - t, 0], [t, t], [0, 1 - t]),
            ternary_xy([1 - t, 0], [0, 1 - t], [t, t]),
        ):
            ax.plot(*line, color="0.88", lw=0.6, zorder=0)
    if type_rule == "imbalance":
        # Type boundaries: (c - d)/(c + d) = +-cut, rays from the b corner (the edge c + d <= 0.01 is
        # a share of the whole form's energy: no one line here).
        high, low = (1 + imbalance_cut) / 2, (1 - imbalance_cut) / 2
        label = f"type boundaries |c − d|/(c + d) = {imbalance_cut:g}: II between, I+ left, I− right"
        ax.plot(*ternary_xy([1, 0], [0, high], [0, low]), color="0.4", lw=0.8, label=label)
        ax.plot(*ternary_xy([1, 0], [0, low], [0, high]), color="0.4", lw=0.8)
    else:
        # Type boundaries: c = d splits I+ from I-; c + d <= radius is Type II.
        ax.plot(
            *ternary_xy([1, 0], [0, 0.5], [0, 0.5]),
            color="0.6",
            lw=0.8,
            ls=":",
            label="c = d: I+ left, I− right",
        )
        ax.plot(
            *ternary_xy([1 - radius] * 2, [radius, 0], [0, radius]),
            color="0.4",
            lw=0.8,
            label=f"c + d = {radius:g}: Type II above",
        )
    theta = np.linspace(0, np.pi / 2, 400)
    limit = np.vstack([accumulation_limit(np.tan(theta[:-1])), [0.0, 0.0, 1.0]])  # rho -> infinity last
    ax.plot(
        *ternary_xy(*limit.T), color="tab:orange", lw=1.5, label="accumulation limit, ρ from 0 (c) to ∞ (d)"
    )
    sub = df[df[["b_sym", "c_sym", "d_sym"]].notna().all(axis=1)]
    x, y = ternary_xy(sub["b_sym"], sub["c_sym"], sub["d_sym"])
    points = ax.scatter(
        x,
        y,
        c=sub["layer"],
        cmap="viridis",
        s=18,
        edgecolor="k",
        linewidth=0.3,
        zorder=3,
        label=f"{population} ({len(sub)})",
    )
    if len(sub):
        bar = fig.colorbar(points, ax=ax, shrink=0.7)
        bar.set_label("layer")
    pad = 0.04
    ax.text(
        0.5, _SQRT3_2 + pad, "b_sym (paired lobes)\nType II near here", ha="center", va="bottom", fontsize=8
    )
    ax.text(-pad, -pad, "c_sym\n(α excess, I+)", ha="right", va="top", fontsize=8)
    ax.text(1 + pad, -pad, "d_sym\n(β excess, I−)", ha="left", va="top", fontsize=8)
    ax.set(xlim=(-0.25, 1.25), ylim=(-0.2, _SQRT3_2 + 0.18))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False)
    ax.set_title(f"{_title(df)}: symmetric profiles (b, c, d)/s", fontsize=10)
    return fig


# ----------------------------------------------------------------------------- 4. lobes


def choose_head(df: pd.DataFrame, head: Any = None) -> tuple[int, int]:
    """(layer, head) to plot: the given one (tuple or 'L,H' / 'L.H' / 'L:H'), else the most extreme.

    Most extreme: largest |symmetric_energy_z|, or, without null columns, the
    largest |s - (N+1)/(2N)|.

    Parameters
    ----------
    df : DataFrame
        One model's head table.
    head : (layer, head), str or None, optional
        The head asked for; None for the most extreme.

    Returns
    -------
    (int, int)
        The head's layer and index.

    Raises
    ------
    ArgumentError
        ``head`` is malformed or not in the table.
    QKEnergyError
        No head has a defined symmetric energy.
    """
    if head is not None:
        if isinstance(head, str):
            parts = head.replace(":", ",").replace(".", ",").split(",")
            try:
                layer, h = (int(p) for p in parts)
            except ValueError:
                raise ArgumentError(f"head: expected LAYER,HEAD, got {head!r}", parameter="head") from None
        else:
            try:
                layer, h = (int(v) for v in head)
            except (TypeError, ValueError):
                raise ArgumentError(f"head: expected (layer, head), got {head!r}", parameter="head") from None
        if not ((df["layer"] == layer) & (df["head"] == h)).any():
            raise ArgumentError(f"head: layer {layer}, head {h} is not in the table", parameter="head")
        return layer, h
    score = (
        df["symmetric_energy_z"].abs()
        if "symmetric_energy_z" in df.columns
        else pd.Series(np.nan, index=df.index)
    )
    if not np.isfinite(score.to_numpy(np.float64)).any():
        score = (df["symmetric_energy"] - baseline(df["N"].astype(float))).abs()
    if not np.isfinite(score.to_numpy(np.float64)).any():
        raise QKEnergyError("no head with a defined symmetric energy to plot")
    row = df.loc[cast(Any, score.idxmax())]  # an index label (pandas-stubs types it Hashable)
    return int(row["layer"]), int(row["head"])


def _lobes(df: pd.DataFrame, layer: int, head: int, axes: Sequence[Axes] | None = None) -> Figure:
    row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
    alpha = np.asarray(row["alpha"], dtype=np.float64)
    beta = np.asarray(row["beta"], dtype=np.float64)
    m = max(alpha.size, beta.size)
    alpha = np.pad(alpha, (0, m - alpha.size))
    beta = np.pad(beta, (0, m - beta.size))
    rho = (
        float(row["rho"])
        if "rho" in row and np.isfinite(row["rho"])
        else (float(np.linalg.norm(beta) / np.linalg.norm(alpha)) if np.any(alpha) else float("nan"))
    )

    if axes is None:
        fig = Figure(figsize=(10.0, 4.2))
        ax, ax2 = fig.subplots(1, 2)
    else:
        if len(axes) != 2:
            raise QKEnergyError("ax: the lobes figure has two panels, pass a pair of axes", parameter="ax")
        ax, ax2 = axes
        fig = cast(Figure, ax.figure)
    top = max(alpha.max(initial=0), beta.max(initial=0)) * 1.05 or 1.0
    ax.plot([0, top], [0, top], color="0.7", ls=":", lw=1, label="β = α")
    if math.isfinite(rho):
        ax.plot([0, top], [0, rho * top], color="tab:orange", lw=1.5, label=f"β = ρα, ρ = {rho:.3f}")
    ax.scatter(
        alpha,
        beta,
        s=14,
        color="tab:blue",
        edgecolor="k",
        linewidth=0.3,
        zorder=3,
        label="sorted pairs (α_i, β_i)",
    )
    ax.set(xlim=(0, top), ylim=(0, top), aspect="equal")
    ax.set(xlabel="α_i (positive eigenvalues of S)", ylabel="β_i (|negative eigenvalues| of S)")
    _legend_below(ax)
    ranks = np.arange(1, m + 1)
    ax2.plot(ranks, alpha, marker="o", ms=3, lw=1, label="α (positive lobe)")
    ax2.plot(ranks, beta, marker="s", ms=3, lw=1, label="β (negative lobe)")
    if math.isfinite(rho):
        ax2.plot(ranks, rho * alpha, color="tab:orange", lw=1, ls="--", label="ρα")
    ax2.set(xlabel="rank i", ylabel="eigenvalue magnitude")
    _legend_below(ax2)

    def fmt(name: str, digits: int = 3) -> str:
        return format_fixed(row.get(name), digits)

    fig.suptitle(
        f"{_title(df)}: layer {layer}, head {head} — s = {fmt('symmetric_energy', 4)} "
        f"(z = {fmt('symmetric_energy_z', 1)}), type {row.get('head_type', '') or MISSING}, "
        f"pairing = {fmt('pairing')}, lobe departure = {fmt('lobe_departure')}",
        fontsize=10,
    )
    return fig


# ----------------------------------------------------------------------------- 5. RoPE offsets


def _offsets(df: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Symmetric energy against the RoPE offset d: one line per layer (median over heads, IQR band)."""
    fig, ax = _canvas(ax, (7.5, 4.4))
    layers = sorted(df["layer"].unique())
    import matplotlib

    colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, max(len(layers), 1)))
    for colour, layer in zip(colours, layers):
        by_offset = df[df["layer"] == layer].groupby("offset")["symmetric_energy"]
        median = by_offset.median()
        offsets = np.asarray(median.index, dtype=np.float64)
        ax.plot(offsets, median.to_numpy(), marker="o", ms=3, lw=1.2, color=colour, label=f"layer {layer}")
        quartiles = [by_offset.quantile(q).to_numpy() for q in (0.25, 0.75)]
        ax.fill_between(offsets, *quartiles, color=colour, alpha=0.12)
    base = float(baseline(float(df["N"].iloc[0])))
    ax.axhline(base, color="0.3", ls="--", lw=1, label=f"baseline (N+1)/(2N) = {base:.4f}")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("relative offset d = i - j (query i, key j)")
    ax.set_ylabel("symmetric energy s of L_d = W_K^T R_d W_Q")
    ncol = 2 if len(layers) > 16 else 1  # the legend beside the axes, off the lines
    ax.legend(fontsize=7, ncol=ncol, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    ax.set_title(
        f"{_title(df)}: symmetric energy against RoPE offset (median over heads, IQR band)", fontsize=9
    )
    return fig


# ----------------------------------------------------------------------------- 6. moments O and E

MOMENT_COLUMNS = ("moment_O", "moment_E", "head_type")


def moment_scatter(
    df: pd.DataFrame,
    *,
    null: NullSpec | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    population: str = "heads",
    laws: Mapping[tuple[int, int], NullLaw] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """moment_E against moment_O per head, coloured by head type, over the null cloud of each shape (n, N).

    The cloud is the Gaussian null law of the same shape (``null_cache.null_law``
    drawn as ``null`` says: the draws of the other null figures).

    Parameters
    ----------
    df : DataFrame
        The head table (n, N, moment_O, moment_E, head_type).
    null : NullSpec, optional
        How each null cloud is drawn: its samples and seed (default ``NullSpec()``).
    cache_dir : str or path-like or None, optional
        The null-law cache (None: no cache).
    population : str, optional
        What the points are, for the legend.
    laws : mapping (n, N) -> NullLaw, optional
        The laws the analysis judged the heads against (other shapes are drawn as above).
    ax : Axes or None, optional
        Draw into these axes instead of a new figure.

    Returns
    -------
    Figure
        The matplotlib figure.
    """
    fig, ax = _canvas(ax, (7.0, 5.0))
    clouds = ["0.6", "tab:purple", "tab:green", "tab:brown"]
    for k, n, N, law in _shape_laws(df, laws, null, cache_dir):
        O, E = law.samples("moment_O"), law.samples("moment_E")
        ok = np.isfinite(O) & np.isfinite(E)
        colour = clouds[k % len(clouds)]
        label = f"null, Gaussian head n={n}, N={N} ({int(ok.sum())} samples)"
        ax.scatter(O[ok], E[ok], s=3, color=colour, alpha=0.35, linewidths=0, label=label, zorder=1)
    types = df["head_type"].fillna("").astype(str)
    defined = df["moment_O"].notna() & df["moment_E"].notna()
    for head_type in ("I+", "I-", "II"):
        colour = TYPE_COLOURS[head_type]
        sub = df[defined & (types == head_type)]
        ax.scatter(
            sub["moment_O"],
            sub["moment_E"],
            s=22,
            color=colour,
            edgecolor="k",
            linewidth=0.3,
            label=f"{population}, Type {head_type} ({len(sub)})",
            zorder=3,
        )
    ax.set_xlabel("O = Σ λ/(1 − λ²)  (odd in λ: > 0 when the positive lobe reaches further)")
    ax.set_ylabel("E = Σ λ²/(1 − λ²)  (even in λ, >= 1)")
    legend = _legend_below(ax, ncol=2)
    for handle in legend.legend_handles:  # the cloud's 3-point dots would be invisible in the legend
        if isinstance(handle, PathCollection):
            handle.set_sizes([max(float(np.max(handle.get_sizes())), 12.0)])
    ax.set_title(f"{_title(df)}: moment statistics of the normalised spectrum of S", fontsize=10)
    return fig


# ----------------------------------------------------------------------------- entry point


def _type_rule(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The head-type rule a table was made with, as :func:`_simplex` draws it (the published
    imbalance rule when the settings record none)."""
    from qkenergy.analysis.type_rule import TypeRule
    from qkenergy.figures.captions import recorded_type_rule

    rule, radius = recorded_type_rule(settings) or (TypeRule(), RADIUS)
    return {"radius": radius, "type_rule": rule.rule, "imbalance_cut": rule.imbalance_cut}


def figure(
    df: pd.DataFrame,
    name: str,
    *,
    head: tuple[int, int] | str | None = None,
    ax: Any = None,
    null_laws: Mapping[tuple[int, int], NullLaw] | None = None,
    null: NullSpec | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    settings: dict[str, Any] | None = None,
) -> Figure:
    """One figure of :func:`plot_results`, drawn and returned, no file written.

    Parameters
    ----------
    df : DataFrame
        One model's head table (as ``analyze`` gives it or ``read_table`` reads it).
    name : str
        One of :data:`FIGURES`.
    head : (layer, head) or str, optional
        The head of the ``lobes`` figure (default: the most extreme, largest |symmetric_energy_z|).
    ax : matplotlib Axes, optional
        Draw into these axes (a pair for ``lobes``, three for ``type_spectra``) instead of a new figure;
        their figure is returned.
    null_laws : mapping (n, N) -> NullLaw, optional
        The Gaussian null laws to draw in ``symmetric_energy_null`` (an analysis' own); other
        shapes are drawn as ``null`` says, kept in ``cache_dir``.
    null : NullSpec, optional
        How the null laws drawn here are drawn: samples and seed (default ``NullSpec()``).
    cache_dir : str or path-like, optional
        The null-law cache (None: no cache).
    settings : dict, optional
        The run's settings (default ``df.attrs["settings"]``): they name the heads in legends.

    Returns
    -------
    Figure
        The matplotlib figure.

    Raises
    ------
    QKEnergyError
        ``name`` is not a figure, the table lacks a column the figure needs, or is empty.
    """
    if name not in FIGURES:
        raise QKEnergyError(f"name must be one of {', '.join(FIGURES)}, got {name!r}", parameter="name")
    _need(df, ("layer", "head", "n", "N", "symmetric_energy"), "the head table")
    if len(df) == 0:
        raise QKEnergyError("cannot draw an empty head table")
    if name == "symmetric_energy_offsets":
        if "offset" not in df.columns:
            raise QKEnergyError("symmetric_energy_offsets needs a table read at several RoPE offsets")
        return _offsets(df, ax)
    if "offset" in df.columns:  # the per-head figures show the smallest offset, as plot_results
        df = df[df["offset"] == df["offset"].min()]
    if settings is None:
        settings = df.attrs.get("settings")
    population = population_label(settings, _model_name(df))
    nulls: dict[str, Any] = dict(null=null, cache_dir=cache_dir, population=population)
    if name == "symmetric_energy_heatmap":
        return _heatmap(df, ax)
    if name == "symmetric_energy_null":
        return _null_histogram(df, laws=null_laws, ax=ax, **nulls)
    if name == "symmetric_profiles":
        _need(df, ("b_sym", "c_sym", "d_sym"), "symmetric profiles")
        return _simplex(df, population=population, ax=ax, **_type_rule(settings))
    if name == "head_types_per_layer":
        _need(df, ("head_type",), "the head-type shares")
        return _type_shares(df, ax)
    if name == "type_spectra":
        _need(df, ("head_type", "alpha", "beta", *TYPE_PROFILE.values()), "the mean spectra by type")
        return _type_spectra(df, axes=ax)
    if name == "moments_O_E":
        _need(df, MOMENT_COLUMNS, "the O-E figure")
        return moment_scatter(df, ax=ax, **nulls)
    _need(df, ("alpha", "beta"), "the lobes figure")
    layer, h = choose_head(df, head)
    return _lobes(df, layer, h, ax)


def _check_one_model(df: pd.DataFrame) -> None:
    """The head table :func:`plot_results` draws: its columns, some heads, one model of one width N."""
    _need(df, ("layer", "head", "n", "N", "symmetric_energy"), "the head table")
    if len(df) == 0:
        raise QKEnergyError("cannot plot an empty head table")
    if "model" in df.columns and df["model"].nunique() > 1:
        raise QKEnergyError(
            f"cannot plot several models at once ({', '.join(map(str, df['model'].unique()))}); split the table"
        )
    if df["N"].nunique() > 1:
        raise QKEnergyError("cannot plot heads of several model widths N at once; split the table")


def plot_results(
    df: pd.DataFrame,
    outdir: str | os.PathLike[str],
    *,
    head: tuple[int, int] | str | None = None,
    null: NullSpec | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    formats: Sequence[str] = ("png", "svg"),
    settings: dict[str, Any] | None = None,
    transaction: OutputTransaction | None = None,
    null_laws: Mapping[tuple[int, int], NullLaw] | None = None,
) -> list[Path]:
    """Write the figures for one model's head table into ``outdir``; returns the files.

    The lobe figure is drawn for the most extreme head (largest |symmetric_energy_z|) and for
    ``head``; the lobe figures are skipped, with a warning, when the table has no alpha/beta columns.
    The settings name the heads in the legends (:func:`provenance.population_label`) and are
    stored in each file (PNG text chunk ``qkenergy``, SVG description, PDF subject).

    Parameters
    ----------
    df : DataFrame
        One model's head table.
    outdir : str or path-like
        The directory to write into.
    head : (layer, head), str or None, optional
        Another head to draw the lobe figure of.
    null : NullSpec, optional
        How the null laws of the histogram and the O-E cloud are drawn: samples and seed
        (default ``NullSpec()``; null_cache.null_law).
    cache_dir : str or path-like or None, optional
        The null-law cache (None: no cache).
    formats : sequence of str, optional
        The file formats (png, svg, pdf).
    settings : dict or None, optional
        The run's settings (default: ``df.attrs["settings"]``).
    transaction : OutputTransaction or None, optional
        The caller's transaction to stage the files in (:mod:`qkenergy.base.atomic`); by default
        they are committed together here.
    null_laws : mapping (n, N) -> NullLaw, optional
        The Gaussian laws the analysis judged the heads against (drawn as ``null`` says): shown
        as they are, not drawn again.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    QKEnergyError
        An unsupported format, a missing column, an empty table or a table of several models.
    """
    formats = _check_formats(formats)
    _check_one_model(df)
    every_offset = df
    if "offset" in df.columns:  # RoPE offsets: the per-head figures show the smallest offset
        df = df[df["offset"] == df["offset"].min()]
    # validate --head before any drawing; the requested head comes in addition to the most extreme one
    chosen = list(dict.fromkeys([choose_head(df), *([choose_head(df, head)] if head is not None else [])]))
    _need(df, ("b_sym", "c_sym", "d_sym"), "symmetric profiles")
    if settings is None:
        settings = df.attrs.get("settings")
    population = _plain(population_label(settings, str(df["model"].iloc[0]) if _model_name(df) else None))
    nulls: dict[str, Any] = dict(null=null, cache_dir=cache_dir, population=population, laws=null_laws)
    paths: list[Path] = []
    with joined(transaction) as outputs:
        outdir = outputs.ensure_directory(outdir)

        def save(fig: Figure, stem: str) -> None:
            paths.extend(_save(fig, outdir, stem, formats, outputs, settings))

        if "offset" in every_offset.columns:
            save(_offsets(every_offset), "symmetric_energy_offsets")
        save(_heatmap(df), "symmetric_energy_heatmap")
        save(_null_histogram(df, **nulls), "symmetric_energy_null")
        if "head_type" in df.columns:
            save(_type_shares(df), "head_types_per_layer")
        save(_simplex(df, population=population, **_type_rule(settings)), "symmetric_profiles")
        if set(MOMENT_COLUMNS) <= set(df.columns):
            save(moment_scatter(df, **nulls), "moments_O_E")
        else:
            warnings.warn("the table has no moment columns: the O-E figure skipped", stacklevel=2)
        if {"alpha", "beta"} <= set(df.columns):
            if {"head_type", *TYPE_PROFILE.values()} <= set(df.columns):
                save(_type_spectra(df), "type_spectra")
            for layer, h in chosen:
                save(_lobes(df, layer, h), f"lobes_layer{layer}_head{h}")
        else:
            warnings.warn("the table has no alpha/beta lobe columns: lobe figures skipped", stacklevel=2)
    return paths
