"""The survey's closing words: one row per model, failures, and where the report goes."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from qkenergy.base.formatting import format_fixed, format_percent, plural, print_table, rich_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from rich.console import Console

    from qkenergy.surveys.engine import SurveyRun

__all__ = ["model_summary", "print_survey"]


def model_summary(heads: pd.DataFrame) -> pd.DataFrame:
    """Per model of a :func:`load_survey` head table: layers, heads, n, N, median s, baseline, BH shares.

    ``n`` is the head dimension, or its distinct values as text ("8/16") when layers differ.

    A head is significantly above (below) the random law when its per-model
    ``symmetric_energy_p_bh < 0.05`` and its z-score is positive (negative).

    Parameters
    ----------
    heads : DataFrame
        The survey's head table.

    Returns
    -------
    DataFrame
        One row per model.
    """
    import pandas as pd

    from qkenergy.analysis.summary import SIGNIFICANCE, baseline

    rows = []
    for model, group in heads.groupby("model", sort=True):
        s = group["symmetric_energy"].to_numpy(np.float64)
        p = group["symmetric_energy_p_bh"].to_numpy(np.float64)
        z = group["symmetric_energy_z"].to_numpy(np.float64)
        significant = np.isfinite(p) & (p < SIGNIFICANCE)
        null = bool(np.isfinite(p).any())
        Ns = group["N"].unique()
        ns = sorted(int(v) for v in group["n"].unique())  # several with per-layer shapes (gemma4)
        rows.append(
            {
                "model": model,
                "layers": group["layer"].nunique(),
                "heads": len(group),
                "n": ns[0] if len(ns) == 1 else "/".join(map(str, ns)),
                "N": int(Ns[0]),
                "symmetric_energy_median": float(np.nanmedian(s)) if np.isfinite(s).any() else np.nan,
                "baseline": float(baseline(Ns[0])) if len(Ns) == 1 else np.nan,
                "share_above": float(np.mean(significant & (z > 0))) if null else np.nan,
                "share_below": float(np.mean(significant & (z < 0))) if null else np.nan,
            }
        )
    return pd.DataFrame(rows)


def print_survey(run: SurveyRun, heads: pd.DataFrame | None, console: Console) -> None:
    """Per-model table, the run's counts, failures (one line each) and the report command.

    Parameters
    ----------
    run : SurveyRun
        The run.
    heads : DataFrame or None
        The survey's head table.
    console : Console
        Where to print.
    """
    from rich.markup import escape

    if heads is not None and len(heads):
        failed_units = Counter(model for model, _, _ in run.failed)
        table = rich_table(
            "Survey: symmetric energy per model",
            [
                ("model", "left"),
                "layers",
                "heads",
                "n",
                "N",
                "median s",
                "baseline",
                "above",
                "below",
                "failed",
            ],
            title_justify="left",
        )
        for r in model_summary(heads).to_dict(orient="records"):
            table.add_row(
                escape(str(r["model"])),
                *(str(r[key]) for key in ("layers", "heads", "n", "N")),
                format_fixed(r["symmetric_energy_median"]),
                format_fixed(r["baseline"]),
                format_percent(r["share_above"]),
                format_percent(r["share_below"]),
                str(failed_units.get(r["model"], 0)),
            )
        print_table(console, table)
    console.print(
        f"{plural(run.units, 'unit')}: {run.computed} computed, {run.skipped} already done, "
        f"{run.unchanged} verified unchanged, {len(run.failed)} failed · {run.elapsed:.1f} s · "
        f"above / below: share of heads significantly more symmetric / skew than a random head "
        f"(BH per model, p < 0.05)"
    )
    for model, error in run.model_errors.items():
        console.print(
            f"[red]model {escape(model)} not surveyed:[/] {escape(error)}", markup=True, highlight=False
        )
    for model, layer, error in run.failed:
        console.print(
            f"[red]{escape(model)} layer {layer} failed:[/] {escape(error)}", markup=True, highlight=False
        )
    if heads is not None and len(heads):
        command = f"qkenergy report {run.out} -o {run.out / 'report.html'}"
        console.print(f"report: {escape(command)}", highlight=False)
