"""Plotly figures comparing models: the figures of ``qkenergy report``.

Each figure is drawn from the frames of :mod:`qkenergy.analysis.comparison`
and comes back as a :class:`ReportFigure` (file stem, title, caption, plotly
figure, size for the static export). Every head marker shows, on hover, its
model, layer, head and the key statistics (s, z, BH-adjusted p, type, pairing).
Only SVG traces are used (no WebGL), so the figures render the same in a
headless browser, in kaleido and on machines without a GPU.

1. ``symmetric_energy_by_model``: s per head of each model, box and points,
   over the band null mean +- 2 sd and the baseline (N+1)/(2N).
2. ``symmetric_energy_by_depth``: s against relative depth, per-layer medians.
3. ``head_types``: shares of Type II, I+ and I- heads per model.
3a. ``head_types_per_layer``: the share of each type per layer, one heatmap per model.
4. ``symmetric_profiles``: (b_sym, c_sym, d_sym) on the simplex, one per model.
4a. ``type_spectra`` (heads with lobes ``alpha``, ``beta``): per type, each model's mean
   normalised spectrum of S over its heads that go furthest that type's way.
4b. ``moments_O_E`` (heads with moment columns): E against O per head, by type, one
   panel per model, over the Gaussian null's cloud of each head shape.
5. ``training_steps`` (heads with a ``step``): median s per layer against step;
   ``training_loss`` (given loss curves): each run's training loss against step.
6. ``groups`` (heads with a ``group``): models compared by group.
7. ``baseline_difference`` (with a reference model): s - s_reference per head.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale
from plotly.subplots import make_subplots

from qkenergy.analysis.comparison import (
    BaselineComparison,
    head_keys,
    model_info,
    present,
    relative_depth,
)
from qkenergy.analysis.summary import HEAD_TYPES, baseline
from qkenergy.figures.captions import report_type_rules
from qkenergy.formats.tables import text_column as text

__all__ = ["MOMENT_CLOUD_SAMPLES", "ReportFigure", "moment_clouds", "report_figures"]

WIDTH = 1000  # static export width in pixels; the HTML figures fill the page width
# The models' colours: orange and grey are left out, being the null band's and the null cloud's.
_RESERVED = {"#FF7F0E", "#7F7F7F", "rgb(217,95,2)", "rgb(102,102,102)"}
_PALETTE = [c for c in qualitative.D3 + qualitative.Dark2 if c not in _RESERVED]
_TYPE_COLOURS = {"II": "#7f7f7f", "I+": "#d62728", "I-": "#1f77b4", "undefined": "#dddddd"}
_FONT = {"family": "DejaVu Sans, Arial, sans-serif", "size": 12}
_BAND_FILL = "rgba(255,150,0,0.45)"  # the null band: a colour of its own, seen against grey and the points
_BAND_EDGE = "rgba(200,100,0,0.9)"
_BAND_OUTLINE = {"width": 1, "color": _BAND_EDGE}
_BASELINE_LINE = {"color": "black", "width": 1.5, "dash": "dash"}
_OUTLINE = {"width": 0.3, "color": "black"}  # of a head's marker
_DOTTED = {"color": "black", "width": 1, "dash": "dot"}  # the baselines of the other figures


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report: ``name`` is the file stem of its PNG / SVG.

    Parameters
    ----------
    name : str
        The file stem.
    title : str
        The figure's title in the report.
    caption : str
        The caption under it.
    figure : plotly Figure
        The figure.
    height : int
        Its height in CSS pixels.
    """

    name: str
    title: str
    caption: str
    figure: go.Figure
    height: int


def _report(name: str, title: str, caption: str, fig: go.Figure) -> ReportFigure:
    """The figure as the report shows it, at the height its layout was given."""
    return ReportFigure(name, title, caption, fig, fig.layout.height)


def _layout(fig: go.Figure, height: int, **extra: Any) -> None:
    options: dict[str, Any] = {
        "template": "plotly_white",
        "height": height,
        "font": _FONT,
        "margin": {"l": 70, "r": 30, "t": 40, "b": 60},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    }
    fig.update_layout(**{**options, **extra})


# ----------------------------------------------------------------------------- hover


_HOVER = (
    "<b>%{customdata[0]}</b><br>%{customdata[1]}<br>"
    "s = %{customdata[2]:.4f}, z = %{customdata[3]:.1f}, BH p = %{customdata[4]:.2g}<br>"
    "type %{customdata[5]}, pairing %{customdata[6]:.3f}<extra></extra>"
)


def _where(frame: pd.DataFrame) -> pd.Series:
    label = "layer " + frame["layer"].astype(str) + ", head " + frame["head"].astype(str)
    if "stack" in frame.columns:
        stack = text(frame["stack"])
        label = label.where(stack == "", label + " (" + stack + ")")
    return label


def _customdata(frame: pd.DataFrame) -> np.ndarray:
    """Per head: model, where, s, z, BH p, type, pairing (NaN shows as NaN).

    Numbers are rounded one digit beyond what the hover shows: the page carries
    every head three times, and full float64 text would double its data.
    """

    def col(name: str, digits: int) -> Any:
        return frame[name].astype(np.float64).round(digits) if name in frame.columns else np.nan

    p = (
        frame["symmetric_energy_p_bh"]
        if "symmetric_energy_p_bh" in frame.columns
        else pd.Series(np.nan, frame.index)
    )
    data = pd.DataFrame(
        {
            "model": frame["model"].astype(str),
            "where": _where(frame),
            "s": col("symmetric_energy", 5),
            "z": col("symmetric_energy_z", 2),
            "p": [float(f"{v:.3g}") for v in p.astype(np.float64)],
            "type": text(frame["head_type"]).replace("", "–") if "head_type" in frame else "–",
            "pairing": col("pairing", 4),
        }
    )
    return data.to_numpy(dtype=object)


# ----------------------------------------------------------------------------- 1. by model


def _by_model(heads: pd.DataFrame, models: list[str], colours: dict[str, str]) -> ReportFigure:
    fig = go.Figure()
    for i, name in enumerate(models):
        group = heads[heads["model"] == name]
        fig.add_trace(
            go.Box(
                x=[name] * len(group),
                y=group["symmetric_energy"],
                name=name,
                marker={"color": colours[name], "size": 3, "opacity": 0.6},
                line={"width": 1.2},
                boxpoints="all",
                jitter=0.45,
                pointpos=0,
                hoveron="points",
                customdata=_customdata(group),
                hovertemplate=_HOVER,
                showlegend=False,
            )
        )
        # The null band and baseline of each (n, N) shape of the model.
        for (_n, N), shape in group.groupby(["n", "N"]):
            base = float(baseline(float(cast(float, N))))
            sd = (
                float(np.nanmedian(shape["symmetric_energy_null_sd"]))
                if "symmetric_energy_null_sd" in shape
                else math.nan
            )
            across = {"x0": i - 0.45, "x1": i + 0.45}
            if math.isfinite(sd):
                # An edge as well as a fill: at a few null sd the band is only pixels high.
                style = {"fillcolor": _BAND_FILL, "line": _BAND_OUTLINE, "layer": "below"}
                fig.add_shape(type="rect", **across, y0=base - 2 * sd, y1=base + 2 * sd, **style)
            fig.add_shape(type="line", **across, y0=base, y1=base, line=_BASELINE_LINE)
    fig.add_trace(_key("random baseline (N+1)/(2N)", mode="lines", line=_BASELINE_LINE))
    band = {"symbol": "square", "size": 12, "color": _BAND_FILL, "line": _BAND_OUTLINE}
    fig.add_trace(_key("null law: mean ± 2 sd", mode="markers", marker=band))
    _layout(fig, 460)
    fig.update_xaxes(categoryorder="array", categoryarray=models, title_text="model")
    fig.update_yaxes(title_text="symmetric energy s = ||S||²/||L||²")
    return _report(
        "symmetric_energy_by_model",
        "Symmetric energy per model against its random baseline",
        "Each point is a head; the box spans its model's quartiles. The dashed line is the exact mean of "
        "a random (Gaussian) head of the same shape, (N+1)/(2N); the orange band is that null law's mean "
        "± 2 standard deviations. Heads far outside the band are more symmetric (above) or more skew "
        "(below) than chance.",
        fig,
    )


# ----------------------------------------------------------------------------- 2. by depth


def _key(name: str, **style: Any) -> go.Scatter:
    """A legend entry for lines and bands drawn as shapes (they have none of their own)."""
    return go.Scatter(x=[None], y=[None], name=name, hoverinfo="skip", **style)


def _baseline_key() -> go.Scatter:
    """A legend entry for the dotted baseline lines."""
    return _key("random baseline (N+1)/(2N)", mode="lines", line=_DOTTED)


def _by_depth(heads: pd.DataFrame, models: list[str], colours: dict[str, str]) -> ReportFigure:
    fig = go.Figure()
    for name in models:
        group = heads[heads["model"] == name]
        fig.add_trace(
            go.Scatter(
                x=group["relative_depth"],
                y=group["symmetric_energy"],
                mode="markers",
                marker={"color": colours[name], "size": 5, "opacity": 0.35},
                name=name,
                legendgroup=name,
                showlegend=False,
                customdata=_customdata(group),
                hovertemplate=_HOVER,
            )
        )
        medians = group.groupby(["relative_depth"])["symmetric_energy"].median().reset_index()
        fig.add_trace(
            go.Scatter(
                x=medians["relative_depth"],
                y=medians["symmetric_energy"],
                mode="lines+markers",
                line={"color": colours[name], "width": 2},
                marker={"size": 6},
                name=name,
                legendgroup=name,
                hovertemplate=f"<b>{name}</b><br>depth %{{x:.2f}}: median s %{{y:.4f}}<extra></extra>",
            )
        )
    for N in sorted(heads["N"].unique()):
        fig.add_hline(y=float(baseline(float(N))), line=_DOTTED)
    fig.add_trace(_baseline_key())
    _layout(fig, 460)
    fig.update_xaxes(title_text="relative depth: layer / (layers - 1)", range=[-0.03, 1.03])
    fig.update_yaxes(title_text="symmetric energy s")
    return _report(
        "symmetric_energy_by_depth",
        "Symmetric energy against relative depth",
        "Points are heads, lines the median over each layer's heads, with depth scaled so that every "
        "model runs from its first layer (0) to its last (1). Dotted lines: the random baselines (N+1)/(2N) "
        "of the models' widths. Click a model in the legend to hide it; double-click to show it alone.",
        fig,
    )


# ----------------------------------------------------------------------------- 3. head types


_UNRECORDED_RULE = (
    "Type II heads have paired lobes; Type I+ heads carry excess positive-lobe energy, Type I- heads "
    "excess negative-lobe energy (the settings given record no head-type rule)."
)


def _head_types(heads: pd.DataFrame, models: list[str], rule: str | None) -> ReportFigure:
    """Shares of the types per model; ``rule``: the recorded rule's sentence (figures.captions)."""
    types = text(heads["head_type"]).replace("", "undefined")
    counts = pd.crosstab(heads["model"], types).reindex(index=models, fill_value=0)
    totals = counts.sum(axis=1)
    fig = go.Figure()
    for t in (*HEAD_TYPES, "undefined"):
        if t not in counts.columns or (t == "undefined" and not counts[t].any()):
            continue
        fig.add_trace(
            go.Bar(
                x=models,
                y=counts[t] / totals,
                name=f"Type {t}" if t != "undefined" else "undefined",
                marker_color=_TYPE_COLOURS[t],
                customdata=np.column_stack([counts[t], totals]),
                hovertemplate=f"<b>%{{x}}</b><br>Type {t}: %{{customdata[0]}} of %{{customdata[1]}} heads "
                "(%{y:.0%})<extra></extra>",
            )
        )
    _layout(fig, 400, barmode="stack")
    fig.update_yaxes(title_text="share of heads", tickformat=".0%", range=[0, 1])
    fig.update_xaxes(title_text="model")
    return _report(
        "head_types",
        "Head types per model",
        f"{rule or _UNRECORDED_RULE} Here c and d are the unpaired positive and negative shares of the head's profile (c_sym, d_sym "
        "the same in units of ||S||²). Undefined: heads with L = 0 or non-finite weights.",
        fig,
    )


# ----------------------------------------------------------------------------- 3a. types per layer


def _layer_labels(frame: pd.DataFrame) -> pd.Series:
    """'3', or 'encoder 3' for a layer of a named stack."""
    label = frame["layer"].astype(str)
    if "stack" in frame.columns:
        stack = text(frame["stack"])
        label = label.where(stack == "", stack + " " + label)
    return label


def _type_shares(heads: pd.DataFrame, models: list[str]) -> ReportFigure:
    fig = make_subplots(
        rows=len(models), cols=1, subplot_titles=models, vertical_spacing=min(0.08, 0.35 / len(models))
    )
    for row, name in enumerate(models, start=1):
        part = heads[heads["model"] == name]
        part = part.sort_values([c for c in ("stack", "layer") if c in part.columns], kind="stable")
        layers = pd.Categorical(_layer_labels(part), categories=pd.unique(_layer_labels(part)))
        types = text(part["head_type"]).replace("", "undefined")
        kinds = [*HEAD_TYPES, *(["undefined"] if (types == "undefined").any() else [])]
        counts = pd.crosstab(types, layers).reindex(index=kinds, fill_value=0)
        number = counts.to_numpy(np.int64)
        totals = number.sum(axis=0)
        shares = number / np.maximum(totals, 1)
        labels = np.array(
            [[f"{k}/{t}" for k, t in zip(r, totals, strict=True)] for r in number], dtype=object
        )
        fig.add_trace(
            go.Heatmap(
                z=shares,
                x=[str(c) for c in counts.columns],
                y=[f"Type {k}" if k in HEAD_TYPES else k for k in kinds],
                coloraxis="coloraxis",
                text=labels,
                texttemplate="%{text}" if number.shape[1] <= 40 else None,
                hovertemplate=f"<b>{name}</b><br>layer %{{x}}, %{{y}}: %{{text}} heads (%{{z:.0%}})<extra></extra>",
                xgap=1,
                ygap=1,
            ),
            row=row,
            col=1,
        )
        # one axis title, under the last panel: above it would crowd the next model's name
        fig.update_xaxes(title_text="layer" if row == len(models) else None, type="category", row=row, col=1)
    _layout(
        fig,
        80 + 170 * len(models),
        coloraxis={"colorscale": "Blues", "cmin": 0, "cmax": 1, "colorbar": {"title": {"text": "share"}}},
    )
    return _report(
        "head_types_per_layer",
        "Head types per layer",
        "For each model and layer, the share of the layer's heads of each type (the cells give the counts): "
        "where in depth the Type II heads (paired lobes), the I+ heads (excess positive lobe) and the I- heads "
        "(excess negative lobe) sit.",
        fig,
    )


# ----------------------------------------------------------------------------- 4a. spectra of the types


def _type_spectra(heads: pd.DataFrame, models: list[str], colours: dict[str, str]) -> ReportFigure:
    from qkenergy.figures.plots import EXTREME_HEADS, TYPE_PROFILE, extreme_heads, normalised_spectrum

    fig = make_subplots(
        rows=1,
        cols=len(HEAD_TYPES),
        shared_yaxes=True,
        subplot_titles=[f"Type {t}: largest {TYPE_PROFILE[t]}" for t in HEAD_TYPES],
        horizontal_spacing=0.04,
    )
    named: set[str] = set()  # each model in the legend once, from its first panel with heads
    for col, head_type in enumerate(HEAD_TYPES, start=1):
        for name in models:
            chosen = extreme_heads(heads[heads["model"] == name], head_type)
            if not len(chosen):
                continue
            alpha, beta = normalised_spectrum(chosen)
            ranks = np.arange(1, alpha.size + 1)
            heads_text = ", ".join(
                f"{layer}.{h}" for layer, h in zip(chosen["layer"], chosen["head"], strict=True)
            )
            for values, lobe, dash in ((alpha, "α_i", "solid"), (-beta, "−β_i", "dot")):
                fig.add_trace(
                    go.Scatter(
                        x=ranks,
                        y=values,
                        mode="lines",
                        line={"color": colours[name], "width": 1.8, "dash": dash},
                        name=name,
                        legendgroup=name,
                        showlegend=name not in named,
                        hovertemplate=f"<b>{name}</b>, Type {head_type} (layer.head {heads_text})<br>"
                        f"rank %{{x}}: mean {lobe} / ||S|| = %{{y:.3f}}<extra></extra>",
                    ),
                    row=1,
                    col=col,
                )
                named.add(name)
        fig.add_hline(y=0, line={"color": "black", "width": 1}, row=1, col=col)
        fig.update_xaxes(title_text="rank i", row=1, col=col)
    fig.update_yaxes(title_text="mean eigenvalue of S / ||S||", row=1, col=1)
    # the legend above the panels' titles, not on them
    _layout(
        fig,
        440,
        margin={"l": 70, "r": 30, "t": 90, "b": 60},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.1, "x": 0},
    )
    return _report(
        "type_spectra",
        "Mean normalised spectrum of S, most extreme heads of each type",
        f"For each type and model, the mean over the model's {EXTREME_HEADS} heads of that type that go "
        "furthest its way (the largest b_sym for Type II, c_sym for I+, d_sym for I-) of the eigenvalues of "
        "the symmetric part S divided by ||S||: the positive ones α_i above zero (solid), the negative "
        "ones −β_i below (dotted), by rank i. Matched lobes mirror each other; an I+ head's upper lobe "
        "outweighs its lower one, an I- head's the reverse.",
        fig,
    )


# ----------------------------------------------------------------------------- 4. simplex


def _simplex(heads: pd.DataFrame, models: list[str]) -> ReportFigure:
    from qkenergy.figures.plots import accumulation_limit

    cols = min(len(models), 3)
    rows = math.ceil(len(models) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        specs=[[{"type": "ternary"}] * cols for _ in range(rows)],
        subplot_titles=models,
        horizontal_spacing=0.14,
        # plotly refuses a spacing above 1 / (rows - 1): many models (a survey of checkpoints) reach it
        vertical_spacing=min(0.12 / rows + 0.06, 0.5 / max(rows - 1, 1)),
    )
    theta = np.linspace(0, np.pi / 2, 200)
    limit = np.vstack([accumulation_limit(np.tan(theta[:-1])), [0.0, 0.0, 1.0]])
    for i, name in enumerate(models):
        row, col = i // cols + 1, i % cols + 1
        group = heads[(heads["model"] == name) & heads[["b_sym", "c_sym", "d_sym"]].notna().all(axis=1)]
        fig.add_trace(
            go.Scatterternary(
                a=limit[:, 0],
                b=limit[:, 1],
                c=limit[:, 2],
                mode="lines",
                line={"color": "#ff7f0e", "width": 3},
                name="accumulation limit (2ρ, (1-ρ)₊², (ρ-1)₊²)/(1+ρ²)",
                legendgroup="limit",
                showlegend=i == 0,
                hoverinfo="skip",
            ),
            row=row,
            col=col,
        )
        fig.add_trace(
            go.Scatterternary(
                a=group["b_sym"],
                b=group["c_sym"],
                c=group["d_sym"],
                mode="markers",
                marker={
                    "color": group["relative_depth"],
                    "coloraxis": "coloraxis",
                    "size": 5,
                    "line": _OUTLINE,
                },
                name=name,
                showlegend=False,
                customdata=_customdata(group),
                hovertemplate=_HOVER,
            ),
            row=row,
            col=col,
        )
    # the legend above the panels' titles, the colour bar clear of the last column's corner labels
    _layout(
        fig,
        150 + 330 * rows,
        margin={"l": 70, "r": 90, "t": 100, "b": 60},
        legend={"orientation": "h", "yref": "container", "yanchor": "top", "y": 0.995, "x": 0},
        coloraxis={
            "colorscale": "Viridis",
            "cmin": 0,
            "cmax": 1,
            "colorbar": {"title": {"text": "depth"}, "x": 1.06},
        },
    )
    fig.update_ternaries(
        aaxis={"title": {"text": "b_sym"}, "min": 0},
        baxis={"title": {"text": "c_sym"}, "min": 0},
        caxis={"title": {"text": "d_sym"}, "min": 0},
        sum=1,
    )
    fig.update_annotations(yshift=18)
    return _report(
        "symmetric_profiles",
        "Symmetric profiles on the simplex",
        "Each head's symmetric energy split into paired lobe energy b_sym (top corner, Type II), positive "
        "excess c_sym (bottom left, I+) and negative excess d_sym (bottom right, I-), coloured by relative "
        "depth. The orange curve, along the two upper edges, is the accumulation limit "
        "(2ρ, (1-ρ)₊², (ρ-1)₊²)/(1+ρ²) that the profile of a head with long, regular lobes approaches.",
        fig,
    )


# ----------------------------------------------------------------------------- moments O and E

MOMENT_CLOUD_SAMPLES = 500
"""Null draws per head shape behind the O-E figure's cloud (seed 0)."""


def moment_clouds(
    heads: pd.DataFrame, *, samples: int = MOMENT_CLOUD_SAMPLES, seed: int = 0
) -> dict[tuple[int, int], np.ndarray]:
    """(n, N) -> (samples, 2) draws of (moment_O, moment_E) of a Gaussian head of that shape (nulls.null_law).

    Parameters
    ----------
    heads : DataFrame
        The head table (n, N).
    samples : int, optional
        Draws per shape.
    seed : int, optional
        Seed of the draws.

    Returns
    -------
    dict
        (n, N) -> ndarray of shape (samples, 2).
    """
    from qkenergy.math.nulls import null_law  # only when the figure is drawn

    clouds = {}
    for n, N in heads[["n", "N"]].dropna().drop_duplicates().itertuples(index=False):
        law = null_law(int(n), int(N), samples=samples, seed=seed, names=("moment_O", "moment_E"))
        clouds[(int(n), int(N))] = np.asarray(law.values)
    return clouds


def _moments(
    heads: pd.DataFrame, models: list[str], clouds: dict[tuple[int, int], np.ndarray]
) -> ReportFigure:
    cols = min(len(models), 3)
    rows = math.ceil(len(models) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=models,
        horizontal_spacing=0.08,
        vertical_spacing=0.12 / rows + 0.06,
    )
    types = text(heads["head_type"])
    for i, name in enumerate(models):
        row, col = i // cols + 1, i % cols + 1
        group = heads[(heads["model"] == name) & heads[["moment_O", "moment_E"]].notna().all(axis=1)]
        for n, N in group[["n", "N"]].drop_duplicates().itertuples(index=False):
            cloud = clouds.get((int(n), int(N)))
            if cloud is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=cloud[:, 0],
                    y=cloud[:, 1],
                    mode="markers",
                    marker={"color": "#bbbbbb", "size": 3, "opacity": 0.5},
                    name=f"null, Gaussian head n={n}, N={N}",
                    legendgroup="null",
                    showlegend=i == 0,
                    hoverinfo="skip",
                ),
                row=row,
                col=col,
            )
        for head_type in HEAD_TYPES:
            sub = group[types[group.index] == head_type]
            fig.add_trace(
                go.Scatter(
                    x=sub["moment_O"],
                    y=sub["moment_E"],
                    mode="markers",
                    marker={"color": _TYPE_COLOURS[head_type], "size": 6, "line": _OUTLINE},
                    name=f"Type {head_type}",
                    legendgroup=head_type,
                    showlegend=i == 0,
                    customdata=_customdata(sub),
                    hovertemplate=_HOVER,
                ),
                row=row,
                col=col,
            )
    # the legend at the top of the figure, above the panels' titles, not on them
    _layout(
        fig,
        150 + 330 * rows,
        margin={"l": 70, "r": 30, "t": 100, "b": 60},
        legend={"orientation": "h", "yref": "container", "yanchor": "top", "y": 0.995, "x": 0},
    )
    fig.update_xaxes(title_text="O = Σ λ/(1-λ²)")
    fig.update_yaxes(title_text="E = Σ λ²/(1-λ²)")
    fig.update_annotations(yshift=8)
    return _report(
        "moments_O_E",
        "Moment statistics O and E of the normalised spectrum",
        "Each head's normalised nonzero spectrum λ of S (a unit vector) summarised by the odd moment "
        "O = Σ λ/(1-λ²) (sign: which lobe reaches further) and the even moment E = Σ λ²/(1-λ²) (how "
        f"concentrated the spectrum is), coloured by head type. Grey: {MOMENT_CLOUD_SAMPLES} Gaussian heads "
        "of the same shape (n, N), the null law the moment columns are judged against.",
        fig,
    )


# ----------------------------------------------------------------------------- 5. training steps


def _runs(heads: pd.DataFrame, info: pd.DataFrame) -> pd.Series:
    """The training run of each row: its group when given, else its architecture, else one run."""
    run = pd.Series("all checkpoints", index=heads.index)
    arch = text(heads["model"].map(info["architecture"]))
    run = run.where(arch == "", arch)
    if "group" in heads.columns:
        group = text(heads["group"])
        run = run.where(group == "", group)
    return run


def _steps(heads: pd.DataFrame, info: pd.DataFrame) -> ReportFigure | None:
    step = pd.to_numeric(heads["step"], errors="coerce")
    frame = heads.assign(step=step, run=_runs(heads, info), where=_where(heads)).dropna(subset=["step"])
    keys = [k for k in head_keys(frame) if k != "head"]
    runs = [r for r, g in frame.groupby("run", sort=True) if g["step"].nunique() >= 2]
    if not runs:
        return None
    fig = make_subplots(rows=len(runs), cols=1, subplot_titles=runs, vertical_spacing=0.25 / len(runs))
    for row, run in enumerate(runs, start=1):
        part = frame[frame["run"] == run]
        medians = (
            part.groupby([*keys, "step"])
            .agg(
                s=("symmetric_energy", "median"),
                depth=("relative_depth", "first"),
                model=("model", "first"),
            )
            .reset_index()
            .sort_values("step")
        )
        positive = bool((medians["step"] > 0).all()) and medians["step"].max() >= 100 * medians["step"].min()
        for key, line in medians.groupby(keys, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            label = "layer " + " ".join(str(k) for k in reversed(key) if str(k))  # no "" stack
            colour = sample_colorscale("Viridis", [float(np.clip(line["depth"].iloc[0], 0, 1))])[0]
            fig.add_trace(
                go.Scatter(
                    x=line["step"],
                    y=line["s"],
                    mode="lines+markers",
                    line={"color": colour, "width": 1.5},
                    marker={"size": 5},
                    name=label,
                    showlegend=row == 1,
                    legendgroup=label,
                    customdata=line[["model"]].to_numpy(dtype=object),
                    hovertemplate=f"<b>%{{customdata[0]}}</b><br>{label}, step %{{x}}<br>"
                    "median s %{y:.4f}<extra></extra>",
                ),
                row=row,
                col=1,
            )
        for N in sorted(part["N"].unique()):
            fig.add_hline(y=float(baseline(float(N))), line=_DOTTED, row=row, col=1)
        fig.update_xaxes(title_text="training step", type="log" if positive else "linear", row=row, col=1)
        fig.update_yaxes(title_text="median s", row=row, col=1)
    fig.add_trace(_baseline_key(), row=1, col=1)
    _layout(fig, 80 + 340 * len(runs), legend={"orientation": "v", "x": 1.02, "y": 1})
    return _report(
        "training_steps",
        "Symmetric energy per layer across training",
        "For checkpoints of one training run (one panel per group), the median symmetric energy of each "
        "layer's heads against the training step; colours go from the first layer (dark) to the last "
        "(yellow). Dotted: the random baseline (N+1)/(2N), where every layer starts from a random "
        "initialisation.",
        fig,
    )


def _losses(losses: pd.DataFrame) -> ReportFigure:
    fig = go.Figure()
    runs = sorted(losses["run"].astype(str).unique())
    steps = pd.to_numeric(losses["step"])
    positive = bool((steps > 0).all()) and steps.max() >= 100 * steps.min()
    for i, run in enumerate(runs):
        line = losses[losses["run"].astype(str) == run].sort_values("step")
        fig.add_trace(
            go.Scatter(
                x=line["step"],
                y=line["loss"],
                mode="lines",
                line={"color": _PALETTE[i % len(_PALETTE)], "width": 1.5},
                name=run,
                hovertemplate=f"<b>{html.escape(run)}</b><br>step %{{x}}<br>loss %{{y:.4f}}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="training step", type="log" if positive else "linear")
    fig.update_yaxes(title_text="training loss")
    _layout(fig, 420)
    return _report(
        "training_loss",
        "Training loss",
        "The loss each run logged while it trained (from the trainer_state.json of its last checkpoint), "
        "against the training step. Runs with different objectives (masked and causal language "
        "modelling) compare in shape, not in level.",
        fig,
    )


# ----------------------------------------------------------------------------- 6. groups


def _groups(heads: pd.DataFrame, summary: pd.DataFrame) -> ReportFigure:
    group = text(heads["group"]).replace("", "(no group)")
    names = sorted(group.unique())
    fig = go.Figure()
    for name in names:
        fig.add_trace(
            go.Box(
                x=group[group == name],
                y=heads.loc[group == name, "symmetric_energy"],
                name=name,
                boxpoints=False,
                marker_color="#9aa7b8",
                hoverinfo="skip",
                showlegend=False,
            )
        )
    per_model = summary.assign(group=text(summary["group"]).replace("", "(no group)"))
    fig.add_trace(
        go.Scatter(
            x=per_model["group"],
            y=per_model["s_median"],
            mode="markers",
            marker={
                "symbol": "diamond",
                "size": 10,
                "color": "#d62728",
                "line": {"width": 1, "color": "black"},
            },
            error_y={
                "type": "data",
                "symmetric": False,
                "array": per_model["s_q3"] - per_model["s_median"],
                "arrayminus": per_model["s_median"] - per_model["s_q1"],
                "width": 3,
            },
            name="model median (IQR)",
            customdata=per_model[["model", "s_q1", "s_q3", "heads"]].to_numpy(dtype=object),
            hovertemplate="<b>%{customdata[0]}</b> (%{x})<br>median s %{y:.4f}, IQR %{customdata[1]:.4f}–"
            "%{customdata[2]:.4f}<br>%{customdata[3]} heads<extra></extra>",
        )
    )
    _layout(fig, 420)
    fig.update_xaxes(title_text="group", categoryorder="array", categoryarray=names)
    fig.update_yaxes(title_text="symmetric energy s")
    return _report(
        "groups",
        "Models compared by group",
        "Boxes: the symmetric energy of all heads of each group's models. Diamonds: each model's median "
        "with its interquartile range (hover for the model).",
        fig,
    )


# ----------------------------------------------------------------------------- 7. reference model


def _difference(comparison: BaselineComparison) -> ReportFigure:
    diffs = comparison.differences
    compared = comparison.compared
    fig = make_subplots(
        rows=len(compared),
        cols=1,
        subplot_titles=[f"{m} − {comparison.reference}" for m in compared],
        vertical_spacing=0.3 / len(compared),
    )
    span = float(np.nanmax(np.abs(diffs["difference"].to_numpy(np.float64)))) if len(diffs) else 0.0
    span = span if math.isfinite(span) and span > 0 else 1e-3
    heights = []
    for row, name in enumerate(compared, start=1):
        part = diffs[diffs["model"] == name]
        part = part.assign(row=_layer_labels(part))
        grid, own, ref = (
            part.pivot_table(index="row", columns="head", values=values, aggfunc="first", dropna=False)
            for values in ("difference", "symmetric_energy", "symmetric_energy_reference")
        )
        fig.add_trace(
            go.Heatmap(
                z=grid.to_numpy(np.float64),
                x=[str(h) for h in grid.columns],
                y=[str(r) for r in grid.index],
                coloraxis="coloraxis",
                customdata=np.dstack([t.reindex_like(grid).to_numpy(np.float64) for t in (own, ref)]),
                hovertemplate=f"<b>{name}</b><br>layer %{{y}}, head %{{x}}<br>s = %{{customdata[0]:.4f}}, "
                f"{comparison.reference}: %{{customdata[1]:.4f}}<br>difference %{{z:+.4f}}<extra></extra>",
                xgap=1,
                ygap=1,
            ),
            row=row,
            col=1,
        )
        fig.update_yaxes(title_text="layer", autorange="reversed", row=row, col=1)
        # one axis title, under the last panel: above it would run into the next panel's title
        fig.update_xaxes(title_text="head" if row == len(compared) else None, row=row, col=1)
        heights.append(len(grid))
    _layout(
        fig,
        int(80 + sum(max(160, 60 + 18 * h) for h in heights)),
        coloraxis={
            "colorscale": "RdBu_r",
            "cmid": 0,
            "cmin": -span,
            "cmax": span,
            "colorbar": {"title": {"text": "Δs"}},
        },
    )
    return _report(
        "baseline_difference",
        f"Difference from {comparison.reference}, head by head",
        f"For each model of the same architecture as {comparison.reference}, the symmetric energy of every "
        "head minus that of the same head (layer, head) of the reference: red cells became more symmetric, "
        "blue cells more skew.",
        fig,
    )


# ----------------------------------------------------------------------------- all


def report_figures(
    heads: pd.DataFrame,
    summary: pd.DataFrame,
    *,
    models: pd.DataFrame | None = None,
    comparison: BaselineComparison | None = None,
    losses: pd.DataFrame | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[ReportFigure]:
    """The report's figures for a head table (see the module docstring for which appear when).

    ``losses``: training loss curves (``run``, ``step``, ``loss``), drawn after the training steps.

    Parameters
    ----------
    heads : DataFrame
        The head table of all models.
    summary : DataFrame
        The per-model summary (:func:`qkenergy.analysis.comparison.model_summary`).
    models : DataFrame or None, optional
        Per-model facts (architecture, n_layers).
    comparison : BaselineComparison or None, optional
        The comparison with a reference model, drawn when given.
    losses : DataFrame or None, optional
        Training loss curves.
    settings : mapping or None, optional
        The run's recorded settings (a survey's, or each table's: :func:`report.page.read_inputs`);
        the captions that state how heads were judged read them (:mod:`qkenergy.figures.captions`).

    Returns
    -------
    list of ReportFigure
        The figures, in report order.
    """
    info = model_info(heads, models)
    order = list(info.index)
    heads = heads.assign(model=heads["model"].astype(str), relative_depth=relative_depth(heads, info))
    colours = {m: _PALETTE[i % len(_PALETTE)] for i, m in enumerate(order)}
    figures = [
        _by_model(heads, order, colours),
        _by_depth(heads, order, colours),
        _head_types(heads, order, report_type_rules(settings)),
        _type_shares(heads, order),
        _simplex(heads, order),
    ]
    if {"alpha", "beta", "head_type", "b_sym", "c_sym", "d_sym"} <= set(heads.columns):
        figures.append(_type_spectra(heads, order, colours))
    if {"moment_O", "moment_E", "n", "N"} <= set(heads.columns) and heads["moment_O"].notna().any():
        figures.append(_moments(heads, order, moment_clouds(heads)))
    if "step" in heads.columns and present(heads["step"]):
        steps = _steps(heads, info)
        if steps is not None:
            figures.append(steps)
    if losses is not None and len(losses):
        figures.append(_losses(losses))
    if "group" in heads.columns and present(heads["group"]):
        figures.append(_groups(heads, summary))
    if comparison is not None and comparison.compared:
        figures.append(_difference(comparison))
    for fig in figures:
        _names_as_text(fig.figure)
    return figures


def _literal(value: Any) -> Any:
    """Text escaped for plotly's label markup (it reads <b>, <a href>, entities); others as they are."""
    if isinstance(value, str):
        return html.escape(value, quote=False)
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.array([_literal(v) for v in value.ravel()], dtype=object).reshape(value.shape)
    if isinstance(value, list | tuple):
        return type(value)(_literal(v) for v in value)
    return value


def _names_as_text(fig: Any) -> None:
    """Names are data: every name a trace shows (legend, categories, hover text) prints as written.

    Plotly renders a subset of HTML in labels, so a model called ``<b>x</b>`` would be bold and
    ``<a href=...>`` a link; escaped, plotly shows the characters themselves (it decodes the
    entities). Hover templates and the figure's own titles are code, not data, and stay.
    """
    for trace in fig.data:
        for attr in ("name", "text", "hovertext", "x", "y", "customdata"):
            value = getattr(trace, attr, None)
            if value is not None:
                trace[attr] = _literal(value)
    for axis in [*fig.select_xaxes(), *fig.select_yaxes()]:
        if axis.categoryarray is not None:
            axis.categoryarray = _literal(axis.categoryarray)
