"""The report's PNG / SVG figures drawn with matplotlib, from the same plotly figures the page shows.

Where no Chrome or Chromium is found, plotly's own exporter (kaleido) cannot
render; :func:`draw` then reads each plotly figure's traces and layout and
draws them on a matplotlib canvas (Agg, never a GUI backend): the same data,
axes, titles, colours, bands and lines, in matplotlib's style. It knows the
traces the report uses: scatter (markers, lines, error bars), box, bar,
heatmap and scatterternary, with shapes (rectangles, lines) and annotations;
:func:`unsupported` names any other trace type in a figure, which is then not
drawn.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap, LinearSegmentedColormap, Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

__all__ = ["SUPPORTED_TRACES", "draw", "save", "unsupported"]

SUPPORTED_TRACES = frozenset({"scatter", "box", "bar", "heatmap", "scatterternary"})
_DPI = 100  # plotly sizes are in CSS pixels: 100 dpi keeps a 1000 px figure 10 inches wide
_SQRT3_2 = math.sqrt(3) / 2
_DEFAULT_COLOURS = (
    "#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880",
)  # fmt: skip
_DASHES = {"dash": (0, (5, 3)), "dot": (0, (1, 2)), "dashdot": (0, (5, 2, 1, 2)), "solid": "-"}
_MARKERS = {"circle": "o", "diamond": "D", "square": "s", "cross": "P", "x": "X", "triangle-up": "^"}
_TAGS = re.compile(r"<[^>]+>")


def unsupported(figure: Any) -> list[str]:
    """The trace types of a plotly figure that :func:`draw` cannot draw (empty when it can draw all).

    Parameters
    ----------
    figure : plotly Figure
        The figure.

    Returns
    -------
    list of str
        The trace types, sorted.
    """
    return sorted({t.type for t in figure.data if t.type not in SUPPORTED_TRACES})


def save(figure: Any, path: Path, fmt: str, *, width: int, height: int, scale: float = 1.0) -> Path:
    """Draw ``figure`` (plotly) with matplotlib into ``path`` as ``fmt`` (png or svg).

    Parameters
    ----------
    figure : plotly Figure
        The figure to draw.
    path : Path
        The file to write.
    fmt : {"png", "svg"}
        The file format.
    width : int
        Width in CSS pixels.
    height : int
        Height in CSS pixels.
    scale : float, optional
        Resolution factor (dpi = 100 * scale).

    Returns
    -------
    Path
        ``path``.
    """
    metadata = {"Date": None} if fmt == "svg" else {}
    with _style(figure):  # text is sized when it is drawn: the whole save runs in the style
        fig = _draw(figure, width=width, height=height)
        fig.savefig(path, format=fmt, dpi=_DPI * scale, bbox_inches="tight", metadata=metadata or None)
    return path


def _style(figure: Any) -> Any:
    import matplotlib

    font = (figure.layout.font.size or 12) * 72 / _DPI  # plotly's font size is in CSS pixels
    return matplotlib.rc_context(
        {"font.size": font, "axes.titlesize": font, "axes.labelsize": font, "svg.hashsalt": "qkenergy"}
    )


# ----------------------------------------------------------------------------- small readers


def _plain(text: Any) -> str:
    """Plotly text without its HTML tags (<b>, <br>)."""
    return _TAGS.sub("", str(text).replace("<br>", "\n")) if text is not None else ""


def _colour(value: Any, default: str = "0.3") -> Any:
    """A plotly colour ('#hex', 'rgb(...)', 'rgba(...)', a name) as matplotlib reads it."""
    if value is None:
        return default
    text = str(value).strip()
    match = re.fullmatch(r"rgba?\(([^)]*)\)", text)
    if match:
        parts = [float(p) for p in match.group(1).split(",")]
        rgb = [min(max(p / 255, 0.0), 1.0) for p in parts[:3]]
        return (*rgb, parts[3]) if len(parts) > 3 else tuple(rgb)
    return text


def _colourscale(scale: Any) -> Colormap:
    """A plotly colour scale (validated: a list of [fraction, colour]) as a matplotlib colour map."""
    stops = [(float(f), _colour(c)) for f, c in scale]
    return LinearSegmentedColormap.from_list("plotly", stops)


def _title(axis: Mapping[str, Any]) -> str:
    title = axis.get("title") or {}
    return _plain(title.get("text", "") if isinstance(title, Mapping) else title)


def _axis_key(ref: str) -> str:
    """'x2' -> 'xaxis2', 'y' -> 'yaxis', 'x2 domain' -> 'xaxis2'."""
    ref = ref.split()[0]
    return f"{ref[0]}axis{ref[1:]}"


def _decoded(value: Any) -> Any:
    """``value`` with plotly's typed arrays ({"dtype", "bdata", "shape"}) as numpy arrays."""
    if isinstance(value, dict):
        if "bdata" in value and "dtype" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
            shape = value.get("shape")
            if shape:
                array = array.reshape([int(n) for n in str(shape).split(",")])
            return array
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_decoded(v) for v in value]
    return value


def _values(data: Any) -> list[Any]:
    if data is None:
        return []
    return list(np.asarray(data, dtype=object).ravel())


def _is_category(values: Sequence[Any]) -> bool:
    return any(isinstance(v, str) for v in values)


# ----------------------------------------------------------------------------- the canvas


class _Canvas:
    """The matplotlib figure with one Axes per plotly axis pair or ternary subplot."""

    def __init__(self, layout: dict[str, Any], width: int, height: int) -> None:
        self.layout = layout
        self.width, self.height = width, height
        self.figure = Figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI)
        FigureCanvasAgg(self.figure)
        margin = layout.get("margin") or {}
        self.left = float(margin.get("l", 80)) / width
        self.right = 1 - float(margin.get("r", 80)) / width
        self.bottom = float(margin.get("b", 80)) / height
        self.top = 1 - float(margin.get("t", 100)) / height
        self.axes: dict[str, Axes] = {}
        self.categories: dict[str, list[str]] = {}
        self.colours: dict[str, tuple[Colormap, Normalize, str]] = {}
        self.mappables: dict[str, Any] = {}

    def paper(self, x: float, y: float) -> tuple[float, float]:
        """Plotly paper coordinates (0..1 over the plot area) as figure fractions."""
        return self.left + x * (self.right - self.left), self.bottom + y * (self.top - self.bottom)

    def _rect(self, xdomain: Sequence[float], ydomain: Sequence[float]) -> tuple[float, float, float, float]:
        x0, y0 = self.paper(float(xdomain[0]), float(ydomain[0]))
        x1, y1 = self.paper(float(xdomain[1]), float(ydomain[1]))
        return (x0, y0, x1 - x0, y1 - y0)

    def cartesian(self, xref: str, yref: str) -> Axes:
        key = f"{xref}{yref}"
        if key not in self.axes:
            xaxis = self.layout.get(_axis_key(xref)) or {}
            yaxis = self.layout.get(_axis_key(yref)) or {}
            ax = self.figure.add_axes(self._rect(xaxis.get("domain", (0, 1)), yaxis.get("domain", (0, 1))))
            ax.grid(True, color="0.9", lw=0.8)
            ax.set_axisbelow(True)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            self.axes[key] = ax
        return self.axes[key]

    def ternary(self, name: str) -> Axes:
        if name not in self.axes:
            spec = self.layout.get(name) or {}
            domain = spec.get("domain") or {}
            ax = self.figure.add_axes(self._rect(domain.get("x", (0, 1)), domain.get("y", (0, 1))))
            ax.set_aspect("equal")
            ax.set_anchor("N")  # the triangle just below its subplot title, as plotly draws it
            ax.axis("off")
            corners = np.array([[0.5, _SQRT3_2], [0, 0], [1, 0], [0.5, _SQRT3_2]])
            ax.plot(corners[:, 0], corners[:, 1], color="0.3", lw=1)
            for t in (0.2, 0.4, 0.6, 0.8):
                for a, b, c in (
                    ([t, t], [1 - t, 0], [0, 1 - t]),
                    ([1 - t, 0], [t, t], [0, 1 - t]),
                    ([1 - t, 0], [0, 1 - t], [t, t]),
                ):
                    ax.plot(*_ternary_xy(a, b, c), color="0.9", lw=0.6, zorder=0)
            pad = 0.05
            ax.text(0.5, _SQRT3_2 + pad, _title(spec.get("aaxis") or {}), ha="center", va="bottom")
            ax.text(-pad, -pad, _title(spec.get("baxis") or {}), ha="right", va="top")
            ax.text(1 + pad, -pad, _title(spec.get("caxis") or {}), ha="left", va="top")
            ax.set_xlim(-0.2, 1.2)
            ax.set_ylim(-0.15, _SQRT3_2 + 0.15)
            self.axes[name] = ax
        return self.axes[name]

    def category_positions(self, xref: str, values: Sequence[Any]) -> np.ndarray:
        """Positions of category labels on axis ``xref``: the axis' categoryarray, else first appearance."""
        known = self.categories.setdefault(xref, [])
        if not known:
            axis = self.layout.get(_axis_key(xref)) or {}
            if axis.get("categoryorder") == "array":
                known.extend(str(c) for c in axis.get("categoryarray") or ())
        for v in values:
            if str(v) not in known:
                known.append(str(v))
        return np.array([known.index(str(v)) for v in values], dtype=np.float64)

    def colour_axis(self, name: str) -> tuple[Colormap, Normalize, str]:
        """The colour map, norm and colour-bar title of a shared layout.coloraxis."""
        if name not in self.colours:
            spec = self.layout.get(name) or {}
            cmap = (
                _colourscale(spec["colorscale"])
                if spec.get("colorscale")
                else _colourscale([(0, "#440154"), (0.5, "#21918c"), (1, "#fde725")])
            )
            lo, hi = spec.get("cmin"), spec.get("cmax")
            mid = spec.get("cmid")
            norm: Normalize
            if mid is not None and lo is not None and hi is not None and lo < mid < hi:
                norm = TwoSlopeNorm(vcenter=mid, vmin=lo, vmax=hi)
            else:
                norm = Normalize(vmin=lo, vmax=hi)
            title = _title(spec.get("colorbar") or {})
            self.colours[name] = (cmap, norm, title)
        return self.colours[name]

    def colour_bar(self, name: str, mappable: Any) -> None:
        """Give the shared colour axis ``name`` one colour bar (drawn last, beside the plot area)."""
        self.mappables.setdefault(name, mappable)


def _ternary_xy(a: Any, b: Any, c: Any) -> tuple[np.ndarray, np.ndarray]:
    """Plotly's ternary placement: a at the top corner, b bottom left, c bottom right."""
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", divide="ignore"):
        total = a + b + c
        a, c = a / total, c / total
    return c + a / 2, a * _SQRT3_2


# ----------------------------------------------------------------------------- traces


def _marker_colours(
    canvas: _Canvas, marker: Mapping[str, Any], count: int, default: str
) -> tuple[Any, Any, Normalize | None, str | None]:
    """(colour or array, cmap, norm, coloraxis) of a trace's markers."""
    colour = marker.get("color")
    if colour is not None and not isinstance(colour, str) and np.ndim(colour) > 0:
        axis = marker.get("coloraxis")
        if axis:
            cmap, norm, _ = canvas.colour_axis(axis)
            return np.asarray(colour, dtype=np.float64), cmap, norm, axis
        return np.asarray(colour, dtype=np.float64), "viridis", None, None
    return _colour(colour, default), None, None, None


def _scatter(canvas: _Canvas, trace: dict[str, Any], default: str, label: str | None) -> Any:
    ternary = trace["type"] == "scatterternary"
    if ternary:
        ax = canvas.ternary(trace.get("subplot", "ternary"))
        xs, ys = _ternary_xy(_values(trace.get("a")), _values(trace.get("b")), _values(trace.get("c")))
        xref = ""
    else:
        xref, yref = trace.get("xaxis", "x"), trace.get("yaxis", "y")
        ax = canvas.cartesian(xref, yref)
        x = _values(trace.get("x"))
        xs = canvas.category_positions(xref, x) if _is_category(x) else np.asarray(x, dtype=np.float64)
        ys = np.asarray(_values(trace.get("y")), dtype=np.float64)
    mode = trace.get("mode") or ("lines+markers" if len(xs) < 20 else "lines")
    marker = trace.get("marker") or {}
    line = trace.get("line") or {}
    handle: Any = None
    if "lines" in mode:
        (handle,) = ax.plot(
            xs,
            ys,
            color=_colour(line.get("color"), default),
            lw=float(line.get("width", 2)) * 0.75,
            ls=_DASHES.get(str(line.get("dash", "solid")), "-"),
            marker=_MARKERS.get(str(marker.get("symbol", "circle")), "o") if "markers" in mode else None,
            ms=float(marker.get("size", 6)) * 0.75,
            label=label,
            zorder=2,
        )
    elif "markers" in mode:
        colour, cmap, norm, axis = _marker_colours(canvas, marker, len(xs), default)
        edge = marker.get("line") or {}
        size = float(marker.get("size", 6))
        handle = ax.scatter(
            xs,
            ys,
            c=colour if cmap is not None else None,
            color=None if cmap is not None else colour,
            cmap=cmap,
            norm=norm,
            s=(0.75 * size) ** 2,
            marker=_MARKERS.get(str(marker.get("symbol", "circle")), "o"),
            alpha=marker.get("opacity"),
            edgecolors=_colour(edge.get("color"), "none") if edge.get("width") else "none",
            linewidths=float(edge.get("width", 0)) * 0.75,
            label=label,
            zorder=3,
        )
        if axis is not None:
            canvas.colour_bar(axis, handle)
    error = trace.get("error_y") or {}
    if error.get("array") is not None and not ternary:
        upper = np.asarray(error["array"], dtype=np.float64)
        lower = upper if error.get("symmetric", True) else np.asarray(error["arrayminus"], dtype=np.float64)
        ax.errorbar(xs, ys, yerr=[lower, upper], fmt="none", ecolor="0.2", elinewidth=1, capsize=3, zorder=2)
    return handle


def _box(canvas: _Canvas, trace: dict[str, Any], default: str, label: str | None, index: int) -> Any:
    xref, yref = trace.get("xaxis", "x"), trace.get("yaxis", "y")
    ax = canvas.cartesian(xref, yref)
    y = np.asarray(_values(trace.get("y")), dtype=np.float64)
    x = _values(trace.get("x")) or [trace.get("name") or str(index)] * len(y)
    positions = canvas.category_positions(xref, x)
    marker = trace.get("marker") or {}
    colour = _colour(marker.get("color") or (trace.get("line") or {}).get("color"), default)
    handle = None
    for position in np.unique(positions):
        values = y[(positions == position) & np.isfinite(y)]
        if not values.size:
            continue
        parts = ax.boxplot(
            [values],
            positions=[position],
            widths=0.5,
            showfliers=trace.get("boxpoints") is None,
            patch_artist=True,
            manage_ticks=False,
            zorder=2,
        )
        for box in parts["boxes"]:
            box.set(facecolor=(0, 0, 0, 0), edgecolor=colour, linewidth=1.2)
        for key in ("whiskers", "caps", "medians"):
            for artist in parts[key]:
                artist.set(color=colour, linewidth=1.2)
        handle = parts["boxes"][0]
        if trace.get("boxpoints") == "all":
            rng = np.random.default_rng(index)  # the same jitter every time: the same bytes
            jitter = float(trace.get("jitter", 0.3)) * 0.25
            ax.scatter(
                position + rng.uniform(-jitter, jitter, values.size),
                values,
                s=(0.75 * float(marker.get("size", 6))) ** 2,
                color=colour,
                alpha=marker.get("opacity", 0.6),
                edgecolors="none",
                zorder=3,
            )
    if handle is not None and label:
        handle.set_label(label)
    return handle


def _bar(
    canvas: _Canvas, trace: dict[str, Any], default: str, label: str | None, stacks: dict[str, Any]
) -> Any:
    xref, yref = trace.get("xaxis", "x"), trace.get("yaxis", "y")
    ax = canvas.cartesian(xref, yref)
    x = _values(trace.get("x"))
    positions = canvas.category_positions(xref, x) if _is_category(x) else np.asarray(x, dtype=np.float64)
    height = np.nan_to_num(np.asarray(_values(trace.get("y")), dtype=np.float64))
    key = f"{xref}{yref}"
    stacked = canvas.layout.get("barmode") in ("stack", "relative")
    bottom = stacks.get(key, {}) if stacked else {}
    base = np.array([bottom.get(p, 0.0) for p in positions])
    marker = trace.get("marker") or {}
    handle = ax.bar(
        positions, height, bottom=base, width=0.6, color=_colour(marker.get("color"), default), label=label
    )
    if stacked:
        stacks[key] = {p: b + h for p, b, h in zip(positions, base, height, strict=True)}
    return handle


def _heatmap(canvas: _Canvas, trace: dict[str, Any]) -> None:
    xref, yref = trace.get("xaxis", "x"), trace.get("yaxis", "y")
    ax = canvas.cartesian(xref, yref)
    ax.grid(False)
    z = np.asarray(trace.get("z"), dtype=np.float64)
    rows, cols = z.shape
    x = [str(v) for v in _values(trace.get("x"))] or [str(i) for i in range(cols)]
    y = [str(v) for v in _values(trace.get("y"))] or [str(i) for i in range(rows)]
    axis = trace.get("coloraxis")
    if axis:
        cmap, norm, _ = canvas.colour_axis(axis)
    else:
        cmap = (
            _colourscale(trace["colorscale"])
            if trace.get("colorscale")
            else _colourscale([(0, "#440154"), (1, "#fde725")])
        )
        finite = z[np.isfinite(z)]
        lo = trace.get("zmin", finite.min() if finite.size else 0)
        hi = trace.get("zmax", finite.max() if finite.size else 1)
        norm = Normalize(vmin=lo, vmax=hi)
    gap = 1.0 if trace.get("xgap") or trace.get("ygap") else 0.0
    mesh = ax.pcolormesh(
        np.arange(cols + 1) - 0.5,
        np.arange(rows + 1) - 0.5,
        np.ma.masked_invalid(z),
        cmap=cmap.with_extremes(bad="0.85"),
        norm=norm,
        edgecolors="white" if gap else "face",
        linewidth=gap,
    )
    ax.set_xticks(range(cols), x, fontsize="small" if cols > 16 else None)
    ax.set_yticks(range(rows), y, fontsize="small" if rows > 16 else None)
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(-0.5, rows - 0.5)
    text = trace.get("text")
    if trace.get("texttemplate") and text is not None:
        cells = np.asarray(text, dtype=object)
        for i in range(rows):
            for j in range(cols):
                if cells[i, j] not in (None, ""):
                    # dark text on light cells and light on dark ones, as plotly chooses
                    r, g, b, _ = cmap(norm(z[i, j])) if np.isfinite(z[i, j]) else (1, 1, 1, 1)
                    light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5
                    ax.text(
                        j, i, _plain(cells[i, j]), ha="center", va="center", fontsize="small",
                        color="black" if light else "white",
                    )  # fmt: skip
    if axis:
        canvas.colour_bar(axis, mesh)
    else:
        bar = canvas.figure.colorbar(mesh, ax=ax)
        bar.set_label(_title(trace.get("colorbar") or {}))


# ----------------------------------------------------------------------------- layout


def _shape(canvas: _Canvas, shape: Mapping[str, Any]) -> None:
    xref, yref = str(shape.get("xref", "x")), str(shape.get("yref", "y"))
    if xref == "paper" or yref == "paper":
        return  # the report draws none: its bands and lines belong to an axis
    ax = canvas.cartesian(xref.split()[0], yref.split()[0])
    x_domain, y_domain = xref.endswith("domain"), yref.endswith("domain")
    if x_domain and not y_domain:
        transform = ax.get_yaxis_transform()  # x in axes fraction, y in data
    elif y_domain and not x_domain:
        transform = ax.get_xaxis_transform()
    elif x_domain and y_domain:
        transform = ax.transAxes
    else:
        transform = ax.transData
    x0, x1 = float(shape.get("x0", 0)), float(shape.get("x1", 1))
    y0, y1 = float(shape.get("y0", 0)), float(shape.get("y1", 1))
    line = shape.get("line") or {}
    zorder = 0.5 if shape.get("layer") == "below" else 4
    if shape.get("type") == "rect":
        from matplotlib.patches import Rectangle

        width = float(line.get("width", 0) or 0)
        ax.add_patch(
            Rectangle(
                (x0, y0),
                x1 - x0,
                y1 - y0,
                transform=transform,
                facecolor=_colour(shape.get("fillcolor"), "none"),
                edgecolor=_colour(line.get("color"), "none") if width else "none",
                linewidth=width,
                zorder=zorder,
            )
        )
    elif shape.get("type") == "line":
        ax.plot(
            [x0, x1],
            [y0, y1],
            transform=transform,
            color=_colour(line.get("color"), "black"),
            lw=float(line.get("width", 2)) * 0.75,
            ls=_DASHES.get(str(line.get("dash", "solid")), "-"),
            zorder=zorder,
        )


def _shared_limits(canvas: _Canvas) -> None:
    """Axes that plotly links (``matches``, e.g. make_subplots' shared_yaxes) get one common range."""
    for letter in ("x", "y"):
        groups: dict[str, list[Axes]] = {}
        for key, ax in canvas.axes.items():
            found = re.match(r"(x\d*)(y\d*)", key)
            if found is None:
                continue
            ref = found.group(1) if letter == "x" else found.group(2)
            target = (canvas.layout.get(_axis_key(ref)) or {}).get("matches") or ref
            groups.setdefault(str(target), []).append(ax)
        for axes in groups.values():
            if len(axes) < 2:
                continue
            limits = [ax.get_xlim() if letter == "x" else ax.get_ylim() for ax in axes]
            low, high = min(min(lim) for lim in limits), max(max(lim) for lim in limits)
            for ax in axes:
                if letter == "x":
                    ax.set_xlim(low, high)
                else:
                    ax.set_ylim(low, high)


def _axes_style(canvas: _Canvas) -> None:
    _shared_limits(canvas)
    for key, ax in canvas.axes.items():
        if "ternary" in key:
            continue
        xref, yref = re.match(r"(x\d*)(y\d*)", key).groups()  # type: ignore[union-attr]
        for ref, set_label, set_scale, set_lim, invert, axis in (
            (xref, ax.set_xlabel, ax.set_xscale, ax.set_xlim, ax.invert_xaxis, ax.xaxis),
            (yref, ax.set_ylabel, ax.set_yscale, ax.set_ylim, ax.invert_yaxis, ax.yaxis),
        ):
            spec = canvas.layout.get(_axis_key(ref)) or {}
            set_label(_title(spec))
            log = spec.get("type") == "log"
            if log:
                set_scale("log")
            if spec.get("range") is not None:
                lo, hi = (float(v) for v in spec["range"])
                set_lim(10**lo if log else lo, 10**hi if log else hi)
            if spec.get("autorange") == "reversed":
                invert()
            if str(spec.get("tickformat", "")).endswith("%"):
                axis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            if ref in canvas.categories and axis is ax.xaxis:
                labels = canvas.categories[ref]
                ax.set_xticks(
                    range(len(labels)),
                    labels,
                    rotation=20 if len(labels) > 4 else 0,
                    ha="right" if len(labels) > 4 else "center",
                )


def _legend(canvas: _Canvas, entries: list[tuple[Any, str]]) -> None:
    layout = canvas.layout
    if layout.get("showlegend") is False or not entries:
        return
    spec = layout.get("legend") or {}
    handles, labels = zip(*entries, strict=True)
    if spec.get("orientation") == "h":
        x, y = canvas.paper(float(spec.get("x", 0)), float(spec.get("y", 1.02)))
        canvas.figure.legend(
            handles, labels, loc="lower left", bbox_to_anchor=(x, y), ncol=min(len(labels), 6),
            frameon=False,
        )  # fmt: skip
    else:
        x, y = canvas.paper(float(spec.get("x", 1.02)), float(spec.get("y", 1)))
        canvas.figure.legend(handles, labels, loc="upper left", bbox_to_anchor=(x, y), frameon=False)


def draw(figure: Any, *, width: int, height: int) -> Figure:
    """A matplotlib Figure of plotly ``figure``, ``width`` x ``height`` CSS pixels at 100 dpi.

    Parameters
    ----------
    figure : plotly Figure
        The figure to draw.
    width : int
        Width in CSS pixels.
    height : int
        Height in CSS pixels.

    Returns
    -------
    Figure
        The matplotlib figure.
    """
    with _style(figure):
        return _draw(figure, width=width, height=height)


def _draw(figure: Any, *, width: int, height: int) -> Figure:
    spec = _decoded(figure.to_plotly_json())
    layout: dict[str, Any] = spec.get("layout") or {}
    canvas = _Canvas(layout, width, height)
    traces = [t for t in spec.get("data") or () if t.get("type", "scatter") in SUPPORTED_TRACES]
    for shape in layout.get("shapes") or ():
        if shape.get("layer") == "below":
            _shape(canvas, shape)
    entries: list[tuple[Any, str]] = []
    shown: set[str] = set()
    stacks: dict[str, Any] = {}
    legend_count = sum(t.get("showlegend") is not False for t in traces)
    colours = (layout.get("template") or {}).get("layout", {}).get("colorway") or _DEFAULT_COLOURS
    for index, trace in enumerate(traces):
        trace.setdefault("type", "scatter")
        default = colours[index % len(colours)]
        name = _plain(trace.get("name")) if trace.get("name") else None
        wants = trace.get("showlegend") is not False and (legend_count >= 2 or trace.get("showlegend"))
        group = str(trace.get("legendgroup") or name)
        label = name if wants and name and group not in shown else None
        kind = trace["type"]
        if kind in ("scatter", "scatterternary"):
            handle = _scatter(canvas, trace, default, label)
        elif kind == "box":
            handle = _box(canvas, trace, default, label, index)
        elif kind == "bar":
            handle = _bar(canvas, trace, default, label, stacks)
        else:
            _heatmap(canvas, trace)
            handle = None
        if label and handle is not None:
            shown.add(group)
            entries.append((handle, label))
    for shape in layout.get("shapes") or ():
        if shape.get("layer") != "below":
            _shape(canvas, shape)
    _axes_style(canvas)
    for k, (name, mappable) in enumerate(canvas.mappables.items()):
        # Where plotly puts a shared colour bar: beside the plot area, not inside a subplot.
        cax = canvas.figure.add_axes(
            (canvas.right + 0.02 + 0.08 * k, canvas.bottom, 0.015, canvas.top - canvas.bottom)
        )
        bar = canvas.figure.colorbar(mappable, cax=cax)
        bar.set_label(canvas.colour_axis(name)[2])
    for note in layout.get("annotations") or ():
        if note.get("xref", "paper") == "paper" and note.get("yref", "paper") == "paper":
            x, y = canvas.paper(float(note.get("x", 0.5)), float(note.get("y", 1)))
            y += float(note.get("yshift", 0) or 0) / height
            canvas.figure.text(
                x, y, _plain(note.get("text")), ha=note.get("xanchor", "center").replace("auto", "center"),
                va="bottom",
            )  # fmt: skip
    _legend(canvas, entries)
    return canvas.figure
