"""``qkenergy baseline``: the exact random baselines of a head shape, or Monte Carlo for other entry laws."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from qkenergy.base.cache_dirs import default_cache_dir
from qkenergy.base.errors import QKEnergyError
from qkenergy.cli.output import one_line, stdout_console
from qkenergy.cli.params import (
    BYTES_PER_NULL_SAMPLE,
    DEFAULT_BASELINE_SAMPLES,
    fits_in_memory,
    parse_entry_law,
    validated_by,
)


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
    from qkenergy.api.baseline import baseline as random_baseline

    result = random_baseline(
        head_dim,
        model_dim,
        dist=dist,
        samples=samples,
        seed=seed,
        cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
        progress=not as_json and sys.stderr.isatty(),
    )
    if as_json:
        click.echo(result.to_json())
    else:
        result.print_summary(stdout_console())
