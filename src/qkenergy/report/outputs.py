"""Every output of one ``analyze`` run, written in one transaction: tables, sidecars, figures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.atomic import OutputTransaction

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.analyze import AnalysisResult

__all__ = ["write_outputs"]


def write_outputs(
    analysis: AnalysisResult,
    *,
    output: str | os.PathLike[str] | None = None,
    plot_dir: str | os.PathLike[str] | None = None,
    **plot_options: Any,
) -> list[Path]:
    """Write the head table (and layer table) to ``output`` and the figures into ``plot_dir``.

    All files land together or none does (:class:`OutputTransaction`): an
    unwritable plot directory or a failing layer table leaves no head table behind.

    Parameters
    ----------
    analysis : AnalysisResult
        The analysis whose tables and figures are written.
    output : str or path-like or None, optional
        The head table's file (csv, parquet or json); None for no table.
    plot_dir : str or path-like or None, optional
        The figures' directory; None for no figures.
    **plot_options
        Keywords of :func:`qkenergy.figures.plots.plot_results`.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    QKEnergyError
        A table or figure cannot be written (then nothing is).
    """
    from qkenergy.formats import tables

    written: list[Path] = []
    with OutputTransaction() as outputs:
        if output is not None:
            written += tables.write_results(
                analysis.head_table(),
                output,
                settings=analysis.settings,
                layers=analysis.layers,
                transaction=outputs,
            )
        if plot_dir is not None:
            from qkenergy.analysis.nullspec import NullSpec
            from qkenergy.figures import plots

            # the laws the heads were judged against, where drawn as the figures' null laws are
            null = plot_options.get("null") or NullSpec()
            laws = {
                shape: law
                for shape, law in analysis.null_laws.items()
                if (law.size, law.seed) == (null.samples, null.seed)
            }
            written += plots.plot_results(
                analysis.heads,
                plot_dir,
                settings=analysis.settings,
                transaction=outputs,
                null_laws=laws,
                **plot_options,
            )
    return written
