"""``qkenergy plot``: the figures of a head table written by ``analyze -o``."""

from __future__ import annotations

from pathlib import Path

import click

from qkenergy.base.extras import require
from qkenergy.cli.params import HeadType, cache_dir_option, draws_option
from qkenergy.math.defaults import SAMPLES


@click.command()
@click.argument("results", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    "outdir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the figures.",
)
@click.option("--head", type=HeadType(), default=None, help="Also plot this head in detail, as LAYER,HEAD.")
@draws_option("--samples", default=SAMPLES, help="Null-law samples for the overlays.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@cache_dir_option("Null-law cache")
def plot(
    results: Path,
    outdir: Path,
    head: tuple[int, int] | None,
    samples: int,
    seed: int,
    cache_dir: Path,
) -> None:
    """Plot a results table written by qkenergy analyze -o (its recorded settings label the figures)."""
    from qkenergy.api.model import read

    require("plot", "matplotlib", "qkenergy plot draws with it")  # before the table is read (its own extra)
    from qkenergy.analysis.nullspec import NullSpec

    null = NullSpec(samples=samples, seed=seed)
    for path in read(results).plot(outdir, head=head, null=null, cache_dir=cache_dir):
        click.echo(f"wrote {path}")
