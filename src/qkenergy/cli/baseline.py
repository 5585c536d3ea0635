"""``qkenergy baseline``: the exact random baselines of a head shape, or Monte Carlo for other entry laws."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import format_number, json_safe, print_table, rich_table
from qkenergy.cli.output import one_line, stdout_console
from qkenergy.cli.params import (
    BYTES_PER_NULL_SAMPLE,
    DEFAULT_BASELINE_SAMPLES,
    default_cache_dir,
    fits_in_memory,
    parse_entry_law,
    validated_by,
)

QUANTILE_LEVELS: tuple[float, ...] = (0.01, 0.05, 0.5, 0.95, 0.99)


BASELINE_STATISTICS: tuple[str, ...] = ("symmetric_energy", "pairing", "lobe_departure")


@click.command()
@click.option(
    "--n", "head_dim", type=click.IntRange(min=1), required=True, help="Head dimension n (rows of W_Q, W_K)."
)
@click.option(
    "--N", "model_dim", type=click.IntRange(min=1), required=True, help="Model (residual) dimension N."
)
@click.option(
    "--dist",
    default="gaussian",
    show_default=True,
    callback=validated_by(parse_entry_law),
    help="Entry law of W_Q and W_K: gaussian, rademacher, uniform, exponential, lognormal, "
    "bernoulli:p, student_t:nu.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=2),
    default=DEFAULT_BASELINE_SAMPLES,
    callback=fits_in_memory(BYTES_PER_NULL_SAMPLE),
    show_default=True,
    help="Random heads drawn.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Gaussian null-law cache (default: $XDG_CACHE_HOME/qkenergy or ~/.cache/qkenergy).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of a table.")
def baseline(
    head_dim: int, model_dim: int, dist: str, samples: int, seed: int, cache_dir: Path | None, as_json: bool
) -> None:
    """The random baseline of a head of shape (n, N) (Corollary 2, Proposition 6)."""
    if head_dim > model_dim:
        raise click.BadParameter(
            f"expected n <= N (Proposition 6), got n = {head_dim} > N = {model_dim}", param_hint="'--n'"
        )
    from qkenergy.math import nulls

    try:
        nulls.check_null_memory(head_dim, model_dim, samples)
    except QKEnergyError as error:
        raise click.UsageError(one_line(error)) from None
    result = random_head_baseline(
        head_dim,
        model_dim,
        dist=dist,
        samples=samples,
        seed=seed,
        cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
        progress=not as_json and sys.stderr.isatty(),
    )
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        _print_baseline(result)


def random_head_baseline(
    n: int,
    N: int,
    *,
    dist: str = "gaussian",
    samples: int = DEFAULT_BASELINE_SAMPLES,
    seed: int = 0,
    cache_dir: Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Baseline of a random head of shape (n, N) as a JSON-ready dict (Corollary 2, Proposition 6).

    Gaussian entries: the exact null sampler (nulls.null_law) and the exact mean
    (N+1)/(2N) of the symmetric energy (Proposition 6), stderr 0. Other entry
    laws: W_K, W_Q simulated directly; the expectation of the ratio is then a
    Monte Carlo estimate that may differ from the ratio of expectations
    (N+1)/(2N) of Corollary 2, and both are reported.
    """
    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.math import baselines, entry_laws, montecarlo, nulls
    from qkenergy.math.laws import Law

    law = entry_laws.entry_law(dist)
    ratio_of_expectations = baselines.qk_product_expectations(n, N).symmetric_ratio
    if law.name == "gaussian":
        null = NullSpec(samples=samples, seed=seed).null_law(n, N, cache_dir=cache_dir, progress=progress)
        columns = {name: null.samples(name) for name in BASELINE_STATISTICS}
        exact = {"symmetric_energy": baselines.gaussian_head_ratio_expectations(n, N).symmetric}
        energy_rows = None
    else:
        values = montecarlo.draw(
            lambda rng, size: nulls.direct_gram(rng, n, N, size, law),
            samples,
            seed=seed,
            chunk_size=max(montecarlo.BLOCK_SIZE, _MAX_CHUNK_VALUES // (4 * n * n)),
            transform=lambda G: _head_columns(G, N),
            progress=progress,
            description=f"random {law.spec} heads n={n} N={N}",
        )
        columns = {name: values[:, i] for i, name in enumerate(BASELINE_STATISTICS)}
        exact = {}
        energy_rows = values[:, len(BASELINE_STATISTICS) :]
    result: dict[str, Any] = {
        "n": n,
        "N": N,
        "dist": law.spec,
        "samples": samples,
        "seed": seed,
        "sampler": _sampler_name(law.name, n, N),
    }
    for name in BASELINE_STATISTICS:
        # one statistic's law (NaN draws, undefined statistics, left out); the exact mean where known
        sampled = Law(name, columns[name])
        summary = Law(name, columns[name], exact_mean=exact.get(name))
        sample_mean, sample_stderr = sampled.mean(), sampled.stderr()
        quantiles = summary.ppf(QUANTILE_LEVELS) if summary.defined else [math.nan] * len(QUANTILE_LEVELS)
        row: dict[str, Any] = {
            "mean": summary.mean(),
            "stderr": summary.stderr(),
            "sd": summary.std(),
            "quantiles": {_quantile_key(q): float(v) for q, v in zip(QUANTILE_LEVELS, quantiles)},
            "defined_samples": summary.defined,
        }
        if name == "symmetric_energy":
            row["ratio_of_expectations"] = ratio_of_expectations
            row["expectation_of_ratio"] = row["mean"]
            row["expectation_of_ratio_stderr"] = row["stderr"]
            if energy_rows is not None:
                # E||S||^2 / E||L||^2 estimated from the same draws: Corollary 2 says it is exact for every law
                estimate = montecarlo.estimate_ratio(energy_rows[:, 1], energy_rows[:, 0])
                row["ratio_of_expectations_estimate"] = estimate.value
                row["ratio_of_expectations_estimate_stderr"] = estimate.stderr
                row["departure_z"] = (
                    (row["mean"] - ratio_of_expectations) / row["stderr"] if row["stderr"] > 0 else math.nan
                )
            row["sample_mean"] = sample_mean
            row["sample_stderr"] = sample_stderr
        result[name] = json_safe(row)
    return result


def _sampler_name(law: str, n: int, N: int) -> str:
    if law != "gaussian":
        return "direct simulation of W_K, W_Q (Monte Carlo)"
    route = "Bartlett-Wishart" if 2 * n <= N else "C C^T, since N < 2n"
    return f"exact Gaussian null law ({route})"


# Hand the statistics chunks of Gram matrices of bounded size (as nulls.null_law does).
_MAX_CHUNK_VALUES = 1 << 24


def _head_columns(G: np.ndarray, N: int) -> np.ndarray:
    """Baseline statistics of a chunk of Gram matrices, then ||L||^2 and ||S||^2 (Gram route)."""
    from qkenergy.math import gram, statistics

    energy = gram.gram_energies(G)
    return np.column_stack(
        [statistics.gram_statistics(G, N).stack(BASELINE_STATISTICS), energy.norm_l_sq, energy.norm_s_sq]
    )


def _print_baseline(result: dict[str, Any]) -> None:
    how = "exact sampler" if result["dist"] == "gaussian" else "Monte Carlo"
    # One column per statistic and one row per quantity: fits 80 columns with every digit.
    table = rich_table(
        f"Random baseline of a head: n = {result['n']}, N = {result['N']}, {result['dist']} "
        f"entries ({how}, {result['samples']} samples)",
        [("", "left"), *BASELINE_STATISTICS],
    )
    for column in table.columns:
        column.no_wrap = True
    rows: list[tuple[str, Any]] = [
        ("mean", lambda row: format_number(row["mean"])),
        ("stderr", lambda row: format_number(row["stderr"], 3)),
        ("sd", lambda row: format_number(row["sd"], 4)),
        *(
            (f"quantile {q:g}", lambda row, q=q: format_number(row["quantiles"][_quantile_key(q)], 4))
            for q in QUANTILE_LEVELS
        ),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(result[name]) for name in BASELINE_STATISTICS))
    console = stdout_console()
    print_table(console, table)
    energy = result["symmetric_energy"]
    console.print(
        f"ratio of expectations E||S||²/E||L||² = (N+1)/(2N) = {format_number(energy['ratio_of_expectations'])} "
        "(Corollary 2, every entry law)"
    )
    if result["dist"] == "gaussian":
        console.print(
            f"expectation of the ratio E[||S||²/||L||²] = {format_number(energy['expectation_of_ratio'])} exactly "
            f"(Proposition 6); sampled mean {format_number(energy['sample_mean'])} ± "
            f"{format_number(energy['sample_stderr'], 2)}"
        )
    else:
        console.print(
            f"expectation of the ratio E[||S||²/||L||²] = {format_number(energy['expectation_of_ratio'])} ± "
            f"{format_number(energy['expectation_of_ratio_stderr'], 2)} (Monte Carlo; z = "
            f"{format_number(energy['departure_z'], 3)} against (N+1)/(2N)); ratio of expectations estimated from "
            f"the same draws {format_number(energy['ratio_of_expectations_estimate'])} ± "
            f"{format_number(energy['ratio_of_expectations_estimate_stderr'], 2)}"
        )


def _quantile_key(level: float) -> str:
    return f"{level:g}"
