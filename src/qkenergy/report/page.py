"""The comparison report of ``qkenergy report``: one self-contained HTML page plus PNG / SVG figures.

``build_report(heads, layers, "report.html")`` writes

- ``report.html``: the per-model table and the interactive figures of
  :mod:`qkenergy.figures.survey_figures`, with plotly.js inlined, so that the
  page works offline and fetches nothing (no script, font or image from the
  network);
- ``report_files/``: each figure as ``NAME.png`` and ``NAME.svg`` (plotly's own
  export, kaleido in a headless Chrome or Chromium; where none is found, no
  figure file and one warning line naming what to install), the per-model table
  as ``models.csv`` and, with a reference model, ``baseline_difference.csv``.

The set is written atomically: everything is rendered into a temporary
directory beside the target, then moved into place (the figure folder first,
the page last), so an interrupted or failed run leaves the previous report as
it was and no partial file.
"""

from __future__ import annotations

import html
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from qkenergy.analysis.comparison import (
    BaselineComparison,
    baseline_comparison,
    check_heads,
    model_summary,
    present,
)
from qkenergy.base.atomic import OutputTransaction
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.extras import require
from qkenergy.base.formatting import MISSING, format_fixed, format_percent, json_safe, plural
from qkenergy.base.json_input import read_object
from qkenergy.base.version import __version__
from qkenergy.figures.survey_figures import WIDTH, ReportFigure, report_figures
from qkenergy.formats.tables import layers_path, read_table, write_table

__all__ = [
    "STATIC_FORMATS",
    "Report",
    "ReportInputs",
    "browser_path",
    "build_report",
    "files_directory",
    "read_inputs",
]

STATIC_FORMATS = ("png", "svg")
_PNG_SCALE = 2  # 2000 px wide PNGs: sharp in print


@dataclass(frozen=True)
class Report:
    """What :func:`build_report` wrote: the page, the folder beside it and every file in it.

    Parameters
    ----------
    html : Path
        The page.
    directory : Path
        The folder beside it.
    files : list of Path
        Every file written.
    figures : list of str
        The figures' names, in page order.
    summary : DataFrame
        The per-model summary the page shows.
    comparison : BaselineComparison or None
        The comparison with a reference model, when asked for.
    renderer : str or None, optional
        What drew the PNG / SVG figures: "kaleido", or None (none drawn).
    """

    html: Path
    directory: Path
    files: list[Path]
    figures: list[str]
    summary: pd.DataFrame
    comparison: BaselineComparison | None
    renderer: str | None = None


def files_directory(out_html: str | os.PathLike[str]) -> Path:
    """The folder beside the page that holds its static figures: report.html -> report_files/.

    Parameters
    ----------
    out_html : str or path-like
        The page.

    Returns
    -------
    Path
        The folder.
    """
    path = Path(out_html)
    return path.with_name(f"{path.stem}_files")


def build_report(
    heads: pd.DataFrame,
    layers: pd.DataFrame | None,
    out_html: str | os.PathLike[str],
    *,
    baseline: str | None = None,
    models: pd.DataFrame | None = None,
    settings: dict[str, Any] | None = None,
    title: str | None = None,
    static: bool | None = None,
    formats: Sequence[str] = STATIC_FORMATS,
    losses: pd.DataFrame | None = None,
) -> Report:
    """Write the comparison report of the models in ``heads`` (and ``layers``) to ``out_html``.

    The page itself needs no browser.

    Parameters
    ----------
    heads : DataFrame
        Head table with a ``model`` column (several models; optional ``group``, ``step``,
        ``stack``).
    layers : DataFrame or None
        The per-layer forms table.
    out_html : path
        The page; its figures and tables go in the folder beside it (NAME_files).
    baseline : str, optional
        A model to compare every model of its architecture with, head by head.
    models : DataFrame, optional
        Per-model facts (``model`` plus ``architecture`` / ``model_type``, ``n_layers``) when the
        heads lack them.
    settings : dict, optional
        Shown in the page (how the survey was run).
    title : str, optional
        The page's title.
    static : bool, optional
        The PNG / SVG figures, plotly's own export (kaleido in a headless Chrome or Chromium).
        None (the default): every figure where a browser is found, else none and one warning
        naming what to install; True: every figure, or QKEnergyError; False: none.
    formats : sequence of str
        The static figures' formats.
    losses : DataFrame, optional
        Training loss curves (``run``, ``step``, ``loss``; :func:`training_losses`), drawn as one
        more figure.

    Returns
    -------
    Report
        The page, the folder beside it, every file written, the figures and the per-model summary.
    """
    check_heads(heads)
    target = Path(out_html)
    if target.suffix.lower() not in (".html", ".htm"):
        raise QKEnergyError(f"{target}: the report is an HTML file; expected a name ending in .html")
    formats = [str(f).lower().lstrip(".") for f in formats]
    bad = [f for f in formats if f not in STATIC_FORMATS]
    if bad:
        raise QKEnergyError(
            f"report figure formats {bad} not supported; choose from {', '.join(STATIC_FORMATS)}"
        )
    summary = model_summary(heads, layers, models)
    comparison = baseline_comparison(heads, baseline, models) if baseline is not None else None
    figures = report_figures(
        heads, summary, models=models, comparison=comparison, losses=losses, settings=settings
    )

    directory = files_directory(target)
    # the page and its folder land together; an old folder is swapped out, not merged
    with OutputTransaction() as outputs:
        staged_dir = outputs.stage_directory(directory)
        written = [write_table(summary, staged_dir / "models.csv")]
        if comparison is not None:
            written.append(write_table(comparison.differences, staged_dir / "baseline_difference.csv"))
        drawn: list[Path] = []  # every figure's files, or none
        if static is not False and formats:
            drawn = _export_static(figures, staged_dir, formats, required=static is True)
            written += drawn
        page = _page(
            figures,
            summary,
            comparison,
            title=title or _default_title(summary),
            settings=settings,
            files=directory.name,
            formats=formats if drawn else [],
        )
        outputs.stage(target).write_text(page, encoding="utf-8")
    return Report(
        html=target,
        directory=directory,
        files=[directory / p.name for p in written],
        figures=[f.name for f in figures],
        summary=summary,
        comparison=comparison,
        renderer="kaleido" if drawn else None,
    )


def _default_title(summary: pd.DataFrame) -> str:
    return f"qkenergy report: {plural(len(summary), 'model')}, {int(summary['heads'].sum())} heads"


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class ReportInputs:
    """What a report is drawn from: heads, layer forms (or None), per-model facts and the run's settings.

    Parameters
    ----------
    heads : DataFrame
        The head table of all models.
    layers : DataFrame or None
        The layer forms.
    models : DataFrame or None
        Per-model facts (architecture, n_layers), from a survey.
    settings : dict
        The run's settings.
    losses : DataFrame or None, optional
        Training loss per run and step (``run``, ``step``, ``loss``), from the checkpoints' trainer_state.json.
    """

    heads: pd.DataFrame
    layers: pd.DataFrame | None
    models: pd.DataFrame | None
    settings: dict[str, Any]
    losses: pd.DataFrame | None = None


def read_inputs(sources: Sequence[str | os.PathLike[str]]) -> ReportInputs:
    """The report's inputs from one survey directory (``qkenergy survey -o OUT``) or from head tables.

    A directory is read with :func:`qkenergy.load_survey`, its ``survey.json``
    giving each model's architecture and layer count and the survey's
    settings. Files are head tables written by ``qkenergy analyze -o`` (csv,
    parquet or json), with their per-layer forms when ``--per-layer`` wrote
    them (inside the json file, or beside: ``results.csv`` ->
    ``results.layers.csv``) and the settings recorded with them; a model may
    appear in one table only.

    Parameters
    ----------
    sources : sequence of str or path-like
        One survey directory, or head tables.

    Returns
    -------
    ReportInputs
        What the report is drawn from.

    Raises
    ------
    ArgumentError
        No source, or a survey directory given with other sources.
    QKEnergyError
        A table cannot be read, or a model appears in two tables.
    """
    paths = [Path(s) for s in sources]
    if not paths:
        raise ArgumentError("expected a survey directory (qkenergy survey -o OUT) or head tables")
    directories = [p for p in paths if p.is_dir()]
    if directories:
        if len(paths) > 1:
            raise ArgumentError(
                f"{directories[0]}: a survey directory is reported on its own; give one directory or only tables"
            )
        return _read_survey(directories[0])
    heads, layers, facts, recorded = [], [], [], {}
    origin: dict[str, Path] = {}
    for path in paths:
        table = read_table(path)
        settings = table.attrs.get("settings") or {}
        recorded[str(path)] = settings
        for name in table["model"].unique():
            if name in origin:
                raise QKEnergyError(
                    f"{path}: model {name!r} is already in {origin[name]}; give each model once"
                )
            origin[name] = path
            facts.append({"model": name} | {key: settings.get(key) for key in ("model_type", "n_layers")})
        heads.append(table)
        # analyze --per-layer keeps the layer forms in the same json file, or beside a csv / parquet one.
        if path.suffix.lower() == ".json":
            if settings.get("per_layer"):
                layers.append(read_table(path, table="layers"))
        elif layers_path(path).is_file():
            layers.append(read_table(layers_path(path), table="layers"))
    return ReportInputs(
        heads=pd.concat(heads, ignore_index=True),
        layers=pd.concat(layers, ignore_index=True) if layers else None,
        models=pd.DataFrame(facts),
        settings={"tables": recorded},
    )


def _read_survey(out: Path) -> ReportInputs:
    from qkenergy.surveys import load_survey
    from qkenergy.surveys.dataset import read_record

    heads, layers = load_survey(out)
    record = read_record(out / "survey.json") or {}  # bounded and checked, as every input
    listed = record.get("models", [])
    listed = listed if isinstance(listed, list) else []
    entries = []
    # Per-model facts, each of its type or left out: the record is a file anyone may have edited.
    for entry in listed:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            model_type, n_layers = entry.get("model_type"), entry.get("n_layers")
            entries.append(
                {
                    "model": entry["name"],
                    "model_type": model_type if isinstance(model_type, str) else None,
                    "n_layers": n_layers
                    if isinstance(n_layers, int) and not isinstance(n_layers, bool)
                    else None,
                }
            )
    kept: dict[str, Any] = {
        k: record[k] for k in ("settings", "manifest", "run", "provenance") if k in record
    }
    return ReportInputs(
        heads=heads,
        layers=layers,
        models=pd.DataFrame(entries) if entries else None,
        settings={"survey": str(out), **kept},
        # the record's own entries: they name each checkpoint's path, group and step
        losses=training_losses([entry for entry in listed if isinstance(entry, dict)]),
    )


TRAINER_STATE = "trainer_state.json"
_TRAINER_STATE_LIMIT = 64 << 20


def training_losses(entries: Sequence[Mapping[str, Any]]) -> pd.DataFrame | None:
    """The training loss curve of each run among a survey's models, or None when no checkpoint has one.

    A run is a manifest ``group`` (else the model's name). Checkpoints that
    transformers' Trainer saved hold ``trainer_state.json``, whose
    ``log_history`` lists the logged losses up to that checkpoint; the
    checkpoint of a run with the largest ``step`` gives the run's curve.
    """
    latest: dict[str, tuple[float, Path]] = {}
    for entry in entries:
        path = entry.get("path")
        if not isinstance(path, str) or not (Path(path) / TRAINER_STATE).is_file():
            continue
        run = str(entry.get("group") or entry.get("name"))
        step = entry.get("step")
        order = float(step) if isinstance(step, int | float) else float("-inf")
        if run not in latest or order >= latest[run][0]:
            latest[run] = (order, Path(path) / TRAINER_STATE)
    rows = []
    for run, (_, state_path) in sorted(latest.items()):
        state = read_object(state_path, str(state_path), "the trainer state", _TRAINER_STATE_LIMIT)
        history = state.get("log_history")
        for item in history if isinstance(history, list) else []:
            if not isinstance(item, dict):
                continue
            step, loss = item.get("step"), item.get("loss")
            if isinstance(step, int) and isinstance(loss, int | float) and not isinstance(loss, bool):
                rows.append({"run": run, "step": step, "loss": float(loss)})
    return pd.DataFrame(rows) if rows else None


# ----------------------------------------------------------------------------- static figures


def browser_path() -> str | None:
    """The Chrome or Chromium kaleido would start (``BROWSER_PATH``, then the usual names and
    places, as kaleido's choreographer looks), or None when there is none it could run.

    Returns
    -------
    str or None
        The browser's path.
    """
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return None
    try:
        found = Chromium.find_browser(skip_local=False)
    except Exception:  # its search reads PATH, the registry and typical places: failing there means none
        return None
    if not found or not Path(found).is_file() or not os.access(found, os.X_OK):
        return None
    return str(found)


_NO_BROWSER = (
    "install Chrome or Chromium (apt-get install chromium, or plotly_get_chrome), or set BROWSER_PATH to one"
)
"""What to install for the report's PNG / SVG figures: plotly's kaleido renders them in a headless browser."""


def _export_static(
    figures: list[ReportFigure], directory: Path, formats: Sequence[str], *, required: bool
) -> list[Path]:
    """Every figure as PNG / SVG through plotly's kaleido; without a browser none, and one warning line.

    One way to draw each figure: the static files are plotly's own export of the page's figures,
    never a second drawing of them (the page itself needs no browser).
    """
    problem = "no Chrome or Chromium found"
    if browser_path() is not None:
        try:
            return _kaleido_export(figures, directory, formats)
        except QKEnergyError as error:
            problem = str(error)
            for leftover in directory.glob("*"):  # a partial kaleido run leaves nothing behind
                if leftover.suffix.lstrip(".") in formats:
                    leftover.unlink()
    if required:
        raise QKEnergyError(
            f"static: {problem}, so the PNG / SVG figures cannot be drawn; {_NO_BROWSER}, "
            "or leave out `static`",
            parameter="static",
        )
    warnings.warn(
        f"{problem}: no PNG / SVG figures written (the page has them all); {_NO_BROWSER}", stacklevel=3
    )
    return []


def _kaleido_export(figures: list[ReportFigure], directory: Path, formats: Sequence[str]) -> list[Path]:
    """Every figure as PNG / SVG through kaleido (one headless Chrome / Chromium for all)."""
    require("report", "kaleido", "the report's PNG / SVG figures")
    import kaleido

    jobs, paths = [], []
    for fig in figures:
        for fmt in formats:
            path = directory / f"{fig.name}.{fmt}"
            opts = {"format": fmt, "width": WIDTH, "height": fig.height}
            if fmt == "png":
                opts["scale"] = _PNG_SCALE
            jobs.append({"fig": fig.figure, "path": str(path), "opts": opts})
            paths.append(path)
    try:
        # MathJax is never used; without it kaleido's page loads nothing from the network.
        kaleido.write_fig_from_object_sync(
            jobs, kopts={"page_generator": kaleido.PageGenerator(mathjax=False)}, cancel_on_error=True
        )
    except Exception as exc:  # kaleido and choreographer raise many types; the user needs one line
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise QKEnergyError(f"kaleido could not render the figures ({message})") from None
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise QKEnergyError(f"kaleido did not write {', '.join(missing)}")
    return paths


# ----------------------------------------------------------------------------- the page


_CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 24px auto; max-width: 1400px;
       padding: 0 16px; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em; }
p.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 5px; text-align: right; white-space: nowrap;
         vertical-align: top; }
th { background: #f4f4f4; cursor: help; white-space: normal; } td.text, th.text { text-align: left; }
span.iqr { color: #666; font-size: 0.85em; }
.scroll { overflow-x: auto; } figure { margin: 0; } figcaption { color: #444; font-size: 0.9em; }
details pre { background: #f7f7f7; padding: 8px; font-size: 0.8em; overflow-x: auto; }
"""

# (column, header, tooltip, formatter) of the per-model table in the page.
_TABLE: tuple[tuple[str, str, str], ...] = (
    ("model", "model", "model name"),
    ("group", "group", "the survey manifest's group label"),
    ("step", "step", "training step of the checkpoint"),
    ("architecture", "architecture", "model_type of the checkpoint's config"),
    ("stacks", "stacks", "attention stacks (encoder, decoder, cross, ...); empty for one stack"),
    ("layers", "layers", "layers analysed"),
    ("n", "n", "head dimension"),
    ("N", "N", "residual width"),
    ("heads", "heads", "heads analysed"),
    ("s", "median s (IQR)", "median symmetric energy over heads; under it the first and third quartiles"),
    ("baseline", "baseline", "exact mean (N+1)/(2N) of a random head of the same shape"),
    ("share_above", "above", "share of heads significantly more symmetric than random (BH p < 0.05)"),
    ("share_below", "below", "share of heads significantly more skew than random (BH p < 0.05)"),
    ("share_II", "II", "share of Type II heads (paired lobes)"),
    ("share_I+", "I+", "share of Type I+ heads (positive-lobe excess)"),
    ("share_I-", "I-", "share of Type I- heads (negative-lobe excess)"),
    ("pairing_median", "pairing", "median pairing over heads"),
    ("balance_min", "min balance", "smallest balance over heads"),
    ("participation_ratio_median", "PR", "median participation ratio over heads"),
    (
        "symmetry_score",
        "2s-1 (IQR)",
        "Saponati et al. symmetry score of the layer forms: median over layers (IQR)",
    ),
    ("directionality", "directionality (IQR)", "directionality of the layer forms: median over layers (IQR)"),
)


def _cell(row: Mapping[Any, Any], column: str) -> tuple[str, str]:
    """A table cell's text and, for medians, the interquartile range shown under it."""
    if column in ("s", "symmetry_score", "directionality"):
        stem, digits = ("s", 4) if column == "s" else (column, 3)
        mid = row[f"{stem}_median"]
        if mid != mid:  # NaN: no defined heads, or no per-layer forms
            return MISSING, ""
        q1, q3 = format_fixed(row[f"{stem}_q1"], digits), format_fixed(row[f"{stem}_q3"], digits)
        return format_fixed(mid, digits), f"{q1} – {q3}"
    if column == "baseline":
        lo, hi = row["baseline_min"], row["baseline_max"]
        return (format_fixed(lo) if lo == hi else f"{format_fixed(lo)}–{format_fixed(hi)}"), ""
    value = row.get(column)
    if column.startswith("share_"):
        return format_percent(value), ""
    if column in ("pairing_median", "balance_min", "participation_ratio_median"):
        return format_fixed(value, 3), ""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING, ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value)), ""  # a training step read back as float
    return str(value), ""


def _table(frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]]) -> str:
    text_columns = {"model", "group", "architecture", "stacks"}

    def kind(column: str) -> str:
        return ' class="text"' if column in text_columns else ""

    head = "".join(f'<th{kind(c)} title="{html.escape(tip)}">{html.escape(h)}</th>' for c, h, tip in columns)
    body = []
    for row in frame.to_dict(orient="records"):
        cells = []
        for c, _, _ in columns:
            value, iqr = _cell(row, c)
            extra = f'<br><span class="iqr">{html.escape(iqr)}</span>' if iqr else ""
            cells.append(f"<td{kind(c)}>{html.escape(value)}{extra}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _comparison_section(comparison: BaselineComparison) -> str:
    parts = [f"<h2>Compared with {html.escape(comparison.reference)}</h2>"]
    if comparison.compared:
        summary = comparison.summary()
        rows = "".join(
            f'<tr><td class="text">{html.escape(r["model"])}</td><td>{r["heads"]}</td>'
            f"<td>{format_fixed(r['difference_median'], 4)}</td>"
            f"<td>{format_fixed(r['difference_q1'], 4)} – {format_fixed(r['difference_q3'], 4)}</td>"
            f"<td>{format_percent(r['share_higher'])}</td></tr>"
            for r in summary.to_dict(orient="records")
        )
        parts.append(
            '<div class="scroll"><table><thead><tr><th class="text">model</th><th>heads</th>'
            '<th title="median over heads of s - s_reference">median Δs</th><th>IQR of Δs</th>'
            '<th title="share of heads with a larger s than the same head of the reference">higher</th>'
            f"</tr></thead><tbody>{rows}</tbody></table></div>"
        )
    else:
        parts.append("<p>No model has the reference's architecture and heads.</p>")
    if comparison.skipped:
        items = "".join(
            f"<li>{html.escape(name)}: {html.escape(reason)}</li>"
            for name, reason in comparison.skipped.items()
        )
        parts.append(f"<p>Not compared:</p><ul>{items}</ul>")
    return "\n".join(parts)


def _figure_section(fig: ReportFigure, files: str, formats: Sequence[str]) -> str:
    """The figure's div and caption, with links to its PNG / SVG files (none when ``formats`` is empty)."""
    import plotly.io as pio

    div = pio.to_html(
        fig.figure,
        include_plotlyjs=False,
        full_html=False,
        div_id=f"figure-{fig.name}",
        default_height=f"{fig.height}px",
        config={"displaylogo": False, "responsive": True},
    )
    links = " ".join(
        f'<a href="{html.escape(quote(files))}/{fig.name}.{fmt}">{fmt.upper()}</a>' for fmt in formats
    )
    if links:
        links = f" Static: {links}."
    return (
        f'<section id="{html.escape(fig.name)}"><h2>{html.escape(fig.title)}</h2><figure>{div}'
        f"<figcaption>{html.escape(fig.caption)}{links}</figcaption></figure></section>"
    )


def _page(
    figures: list[ReportFigure],
    summary: pd.DataFrame,
    comparison: BaselineComparison | None,
    *,
    title: str,
    settings: dict[str, Any] | None,
    files: str,
    formats: Sequence[str],
) -> str:
    from plotly.offline import get_plotlyjs

    derived = ("s", "baseline", "symmetry_score", "directionality")
    # Columns that say nothing for these models (no group, no step, one stack each) are left out.
    columns = [c for c in _TABLE if c[0] in derived or (c[0] in summary.columns and present(summary[c[0]]))]
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = f"Written {when} by qkenergy {__version__}."
    static = " and ".join(f.upper() for f in formats)
    meta += (
        f" Figures as {static}, and the tables as CSV, in {html.escape(files)}/."
        if static
        else f" The tables as CSV in {html.escape(files)}/."
    )
    sections = [
        "<h2>Models</h2>",
        _table(summary, columns),
        "<p>Hover a column header for its meaning. Shares above / below count heads whose Benjamini-"
        "Hochberg adjusted p-value (per model) is below 0.05, over the heads with a defined s. 2s-1 and "
        "directionality are medians over the model's layer forms (shown only when the survey ran "
        "with --per-layer).</p>",
    ]
    if comparison is not None:
        sections.append(_comparison_section(comparison))
    sections += [_figure_section(f, files, formats) for f in figures]
    if settings:
        sections.append(
            "<details><summary>Settings</summary><pre>"
            + html.escape(json.dumps(json_safe(settings), indent=1, sort_keys=True))
            + "</pre></details>"
        )
    # plotly.js inline (its text never contains "</script>"); the data: icon stops a favicon request.
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{html.escape(title)}</title><style>{_CSS}</style>'
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>'
        f'<h1>{html.escape(title)}</h1><p class="meta">{meta}</p>\n'
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
