"""A survey as one object: :func:`survey` runs one, :func:`open_survey` opens one; :func:`write_report` draws the page.

A :class:`Survey` is a survey's output folder OUT (``qkenergy survey -o OUT``):
its dataset (``heads``, ``layers``: read on first use, as
:func:`qkenergy.surveys.dataset.load_survey` reads them), its ``settings``
(the null laws' :class:`~qkenergy.analysis.nullspec.NullSpec`, the head-type
:class:`~qkenergy.analysis.type_rule.TypeRule`), the summary ``qkenergy
survey`` prints, every figure of the comparison report and the report itself.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec

from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.record import recorded_run
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.api.shown import Shown
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.extras import require
from qkenergy.base.formatting import plural
from qkenergy.surveys.engine import SurveyRun
from qkenergy.surveys.engine import survey as run_survey

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.report.page import Report, ReportInputs

__all__ = ["Survey", "open_survey", "survey", "write_report"]

P = ParamSpec("P")


class Survey(Shown):
    """A survey's results in OUT: dataset, settings, summary, figures and report.

    Parameters
    ----------
    out : path
        The survey's folder.
    last_run : SurveyRun, optional
        What the :func:`survey` call that made this object did (None: opened with :func:`open_survey`).

    Attributes
    ----------
    out : Path
        The survey's folder.
    last_run : SurveyRun or None
        What the :func:`survey` call that returned this object did (units computed, skipped,
        failed, ...); None for a survey opened with :func:`open_survey`.
    heads : DataFrame
        One row per head of every model (analyze's columns plus group, step, source, revision).
    layers : DataFrame or None
        One row per layer's whole form (surveys run with ``per_layer``), else None.
    settings : dict
        The survey's settings (``survey.json``): the null spec's and type rule's values, per_layer.
    """

    def __init__(self, out: str | os.PathLike[str], *, last_run: SurveyRun | None = None) -> None:
        from qkenergy.surveys.dataset import read_record

        self.out = Path(out)
        self.last_run = last_run
        record = read_record(self.out / "survey.json")
        if record is None:
            raise QKEnergyError(
                f"{self.out}: no survey.json; not the folder of a survey (qkenergy survey -o)"
            )
        self.record: dict[str, Any] = record
        self._inputs: ReportInputs | None = None

    def __repr__(self) -> str:
        models = self.record.get("models", [])
        count = len(models) if isinstance(models, list) else 0
        return f"<Survey {self.out}: {plural(count, 'model')}, {self.status}>"

    # ---------------------------------------------------------------- the dataset
    def _read(self) -> ReportInputs:
        if self._inputs is None:
            require("survey", "plotly", "a survey's dataset is read with the report's reader")
            from qkenergy.report.page import read_inputs

            self._inputs = read_inputs([self.out])
        return self._inputs

    @property
    def heads(self) -> pd.DataFrame:
        return self._read().heads

    @property
    def layers(self) -> pd.DataFrame | None:
        return self._read().layers

    @property
    def settings(self) -> dict[str, Any]:
        settings = self.record.get("settings", {})
        return dict(settings) if isinstance(settings, dict) else {}

    @property
    def null(self) -> NullSpec | None:
        """How the null laws were drawn (None when the survey drew none)."""
        return recorded_run(self.settings).null

    @property
    def types(self) -> TypeRule:
        """The head-type rule the heads were named by."""
        return recorded_run(self.settings).types

    @property
    def status(self) -> str:
        """The last run's status: done, failed, interrupted (or running while one runs)."""
        run = self.record.get("run", {})
        return str(run.get("status", "unknown")) if isinstance(run, dict) else "unknown"

    @property
    def ok(self) -> bool:
        """Whether every unit of every model was analysed (in the last run)."""
        return self.last_run.ok if self.last_run is not None else self.status == "done"

    # ---------------------------------------------------------------- text
    def _run_counts(self) -> SurveyRun:
        """The last run's counts: this call's, or as survey.json and the ledger recorded them."""
        if self.last_run is not None:
            return self.last_run
        from qkenergy.surveys.ledger import Ledger

        run = self.record.get("run", {})
        run = run if isinstance(run, dict) else {}

        def count(key: str) -> int:
            value = run.get(key, 0)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        with Ledger(self.out / "ledger.sqlite", read_only=True) as ledger:
            failed = ledger.failed_units()
        elapsed = run.get("elapsed_s", 0.0)
        return SurveyRun(
            out=self.out,
            run=count("run"),
            units=count("units"),
            computed=count("computed"),
            unchanged=count("unchanged"),
            skipped=count("skipped"),
            failed=failed,
            elapsed=float(elapsed) if isinstance(elapsed, int | float) else 0.0,
        )

    def print_to(self, console: Any, **options: Any) -> None:
        """Print what ``qkenergy survey`` prints at the end: one row per model, the counts, failures.

        Parameters
        ----------
        console : rich.console.Console
            Where to print.
        **options
            None.
        """
        from qkenergy.surveys.dataset import load_survey
        from qkenergy.surveys.summary import print_survey

        run = self._run_counts()
        if self._inputs is not None:
            heads: pd.DataFrame | None = self._inputs.heads
        else:  # the head table only (not the report's other inputs), and none when no unit is done
            heads = load_survey(self.out)[0] if run.units > len(run.failed) else None
        print_survey(run, heads, console)

    def _repr_html_(self) -> str:
        import html

        from qkenergy.surveys.summary import model_summary

        spec = self.null
        null = (
            "no null laws" if spec is None else f"{spec.kind} null, {spec.samples} samples, seed {spec.seed}"
        )
        table = model_summary(self.heads).to_html(index=False, float_format=lambda x: f"{x:.4f}")
        return (
            f"<div><strong>Survey {html.escape(str(self.out))}</strong> · {len(self.heads)} heads · "
            f"{html.escape(null)} · last run {html.escape(self.status)}{table}</div>"
        )

    # ---------------------------------------------------------------- figures and the report
    def _figures(self, baseline: str | None = None) -> list[Any]:
        from qkenergy.analysis.comparison import baseline_comparison, model_summary
        from qkenergy.figures.survey_figures import report_figures

        inputs = self._read()
        summary = model_summary(inputs.heads, inputs.layers, inputs.models)
        comparison = None if baseline is None else baseline_comparison(inputs.heads, baseline, inputs.models)
        return report_figures(
            inputs.heads,
            summary,
            models=inputs.models,
            comparison=comparison,
            losses=inputs.losses,
            settings=inputs.settings,
        )

    @property
    def figures(self) -> list[str]:
        """The names of the report's figures for this survey (what :meth:`figure` draws)."""
        return [f.name for f in self._figures()]

    def figure(self, name: str, *, baseline: str | None = None) -> Any:
        """One figure of the comparison report, as an interactive plotly Figure (no file written).

        Parameters
        ----------
        name : str
            One of :attr:`figures`.
        baseline : str, optional
            The reference model of the head-by-head comparison figures (as :meth:`report`'s).

        Returns
        -------
        plotly.graph_objects.Figure

        Raises
        ------
        QKEnergyError
            No figure of that name.
        """
        drawn = self._figures(baseline)
        for fig in drawn:
            if fig.name == name:
                return fig.figure
        raise QKEnergyError(
            f"name: no figure {name!r:.60} in this survey's report; figures: {', '.join(f.name for f in drawn)}",
            parameter="name",
        )

    def report(
        self,
        output: str | os.PathLike[str],
        *,
        baseline: str | None = None,
        title: str | None = None,
        static: bool | None = None,
    ) -> Report:
        """Write the comparison report of this survey (as ``qkenergy report OUT -o output``).

        Parameters
        ----------
        output : path
            The page (.html); its figures and tables go to ``<name>_files/`` beside it.
        baseline : str, optional
            Compare every model of its architecture with this one, head by head.
        title : str, optional
            The page's title.
        static : bool, optional
            The PNG / SVG figures, plotly's export in a headless Chrome or Chromium (None: all where one
            is found, else none and a warning naming what to install; True: all or an error; False: none).

        Returns
        -------
        Report
        """
        return _build(self._read(), output, baseline=baseline, title=title, static=static)


def _returning_survey(run: Callable[P, SurveyRun]) -> Callable[P, Survey]:
    """``run`` (the engine's survey), returning the :class:`Survey` of its OUT instead of its counts."""

    @functools.wraps(run)
    def survey(*args: P.args, **kwargs: P.kwargs) -> Survey:
        require("survey", "distributed", "surveys run on a Dask cluster")
        done = run(*args, **kwargs)
        return Survey(done.out, last_run=done)

    survey.__module__ = __name__
    survey.__signature__ = inspect.signature(run).replace(return_annotation="Survey")  # type: ignore[attr-defined]
    survey.__doc__ = """Analyse every layer of every model of MANIFEST on Dask, restartably; results in OUT.

    Parameters
    ----------
    manifest : path
        A TOML file of ``[[model]]`` tables or a text file with one source per line (docs/survey.md).
    out : path
        The survey's folder; a rerun with the same settings does only what is missing.
    null : NullSpec, True or False
        How every head's null laws are drawn (True: ``NullSpec()``); False draws none, and
        ``null_spec`` then still gives the values recorded.
    null_spec : NullSpec, optional
        With ``null=False``: the values recorded.
    types : TypeRule, optional
        How head types are named (default: the published imbalance rule).
    per_layer : bool
        Also each layer's whole form (the ``layers`` table).
    retries, scheduler, workers, cache_dir, progress
        As :func:`qkenergy.surveys.engine.survey` (whose signature this is).

    Returns
    -------
    Survey
        OUT's results, with ``last_run`` saying what this call did.
    """
    return survey


survey = _returning_survey(run_survey)


def open_survey(out: str | os.PathLike[str]) -> Survey:
    """The survey in OUT (``qkenergy survey -o OUT``); its tables are read on first use.

    Parameters
    ----------
    out : path
        The survey's folder.

    Returns
    -------
    Survey
    """
    return Survey(out)


def write_report(
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    baseline: str | None = None,
    title: str | None = None,
    static: bool | None = None,
) -> Report:
    """Write the comparison report (``qkenergy report``) of one survey folder or of head tables.

    Parameters
    ----------
    sources : path or sequence of paths
        A survey's OUT, or the tables of ``analyze -o`` (csv, parquet, json).
    output : path
        The page (.html), its figures and CSV tables going to ``<name>_files/`` beside it.
    baseline : str, optional
        Compare every model of its architecture with this one, head by head.
    title : str, optional
        The page's title.
    static : bool, optional
        The PNG / SVG figures, plotly's export in a headless Chrome or Chromium (None: all where one
        is found, else none and a warning naming what to install; True: all or an error; False: none).

    Returns
    -------
    Report
        Everything lands, or nothing does.
    """
    require("report", "plotly", "the report's figures are drawn with it")
    from qkenergy.report.page import read_inputs

    paths = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    return _build(read_inputs(paths), output, baseline=baseline, title=title, static=static)


def _build(
    inputs: ReportInputs,
    output: str | os.PathLike[str],
    *,
    baseline: str | None,
    title: str | None,
    static: bool | None,
) -> Report:
    from qkenergy.report.page import build_report

    return build_report(
        inputs.heads,
        inputs.layers,
        output,
        baseline=baseline,
        models=inputs.models,
        settings=inputs.settings,
        title=title,
        static=static,
        losses=inputs.losses,
    )
