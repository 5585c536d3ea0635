"""``qkenergy verify``: every claim of the mathematics checked numerically, as a table or JSON."""

from __future__ import annotations

import sys

import click

from qkenergy.cli.output import print_result
from qkenergy.cli.params import BYTES_PER_NULL_SAMPLE, fits_in_memory


@click.command()
@click.option(
    "--samples",
    type=click.IntRange(min=50),
    default=None,
    callback=fits_in_memory(BYTES_PER_NULL_SAMPLE),
    help="Monte Carlo draws per row.  [default: 100000]",  # math.verify.DEFAULT_SAMPLES (a test checks)
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of the checks instead of a table.")
@click.pass_context
def verify(ctx: click.Context, samples: int | None, seed: int, as_json: bool) -> None:
    """Check every claim of the specification numerically (exit 0 exactly when all pass)."""
    from qkenergy.api.verification import verify as run_verification

    result = run_verification(samples, seed, progress=not as_json and sys.stderr.isatty())
    print_result(result, as_json)
    ctx.exit(0 if result.passed else 1)
