"""``qkenergy survey``: many models in one restartable Dask run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from qkenergy.cli.output import fail, stdout_console
from qkenergy.cli.params import (
    DEFAULT_BASELINE_SAMPLES,
    NullOptions,
    cache_dir_option,
    draws_option,
    null_options,
)

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.type_rule import TypeRule


@click.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Survey directory: heads/ (and layers/) Parquet datasets, ledger.sqlite, survey.json.",
)
@click.option("--per-layer", is_flag=True, help="Also analyse each layer's whole form (OUT/layers/).")
@draws_option(
    "--samples",
    default=DEFAULT_BASELINE_SAMPLES,
    show_default=True,
    help="Null-law samples per head shape (one law per shape per survey).",
)
@null_options
@draws_option(
    "--rotation-samples",
    default=500,
    show_default=True,
    help="Rotation-null draws per head (with --null rotation or both).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Retries of a failing unit before it is reported.",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="Submit to this running Dask scheduler (e.g. tcp://head:8786) instead of a local cluster.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes of the local cluster.  [default: one per core]",
)
@cache_dir_option(
    "Null-law cache, read and written by this process, and in its hub/ the byte ranges of hub models "
    "shared with the workers"
)
@click.option("--quiet", is_flag=True, help="No progress display and no summary.")
def survey(
    manifest: Path,
    out: Path,
    per_layer: bool,
    null: NullOptions,
    types: TypeRule,
    retries: int,
    scheduler: str | None,
    workers: int | None,
    cache_dir: Path,
    quiet: bool,
) -> None:
    """Analyse every layer of every model of MANIFEST on Dask, restartably (see qkenergy explain survey).

    MANIFEST: a TOML file of [[model]] tables or a text file with one source per line.
    Rerunning the same command does only what is missing.
    """
    import signal

    from qkenergy.api.survey import survey as run_survey

    # SIGTERM (a batch system's cancel) unwinds like Ctrl-C: the cluster is stopped, in-flight units released.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        result = run_survey(
            manifest,
            out,
            null=null.drawn,
            null_spec=null.spec,
            types=types,
            per_layer=per_layer,
            retries=retries,
            scheduler=scheduler,
            workers=workers,
            cache_dir=cache_dir,
            progress=not quiet and sys.stderr.isatty(),
        )
    except KeyboardInterrupt:
        fail(f"interrupted; the finished units are kept in {out}: rerun the same command to resume", 130)
    if not quiet:
        result.print_summary(stdout_console())
    if not result.ok:
        sys.exit(1)
