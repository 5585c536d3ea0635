"""``qkenergy baseline``: the exact random baselines of a head shape, or Monte Carlo for other entry laws."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from qkenergy.base.errors import QKEnergyError
from qkenergy.cli.output import one_line, print_result
from qkenergy.cli.params import (
    DEFAULT_BASELINE_SAMPLES,
    cache_dir_option,
    draws_option,
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
@draws_option("--samples", default=DEFAULT_BASELINE_SAMPLES, show_default=True, help="Random heads drawn.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@cache_dir_option("Gaussian null-law cache")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of a table.")
def baseline(
    head_dim: int, model_dim: int, dist: str, samples: int, seed: int, cache_dir: Path, as_json: bool
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
        cache_dir=cache_dir,
        progress=not as_json and sys.stderr.isatty(),
    )
    print_result(result, as_json)
