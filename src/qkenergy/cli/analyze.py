"""``qkenergy analyze``: the per-head analysis of a model, its summary, tables and figures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from qkenergy.base.extras import require
from qkenergy.cli.output import stdout_console
from qkenergy.cli.params import (
    IndexSelectionType,
    NullOptions,
    RopeOffsetsType,
    cache_dir_option,
    draws_option,
    null_options,
)
from qkenergy.math.defaults import SAMPLES

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.type_rule import TypeRule


@click.command()
@click.argument("model", required=False)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the per-head table here (.csv, .parquet or .json).",
)
@click.option(
    "--plot",
    "plot_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the figures into this directory.",
)
@click.option(
    "--per-layer",
    is_flag=True,
    help="Also analyse each layer's whole form sum_h W_K^h^T W_Q^h, with the symmetry "
    "score 2s - 1 and the directionality of Saponati et al. 2025, each against the law of "
    "a Gaussian layer of the same shape; written to <output>.layers.<ext>.",
)
@click.option(
    "--fold-norm",
    is_flag=True,
    help="Fold the gain of the norm feeding attention into the form (L -> D L D, as TransformerLens does).",
)
@click.option(
    "--layers", type=IndexSelectionType(), default=None, help="Layers to analyze, e.g. 0,1,5 or 0-3."
)
@click.option("--heads", type=IndexSelectionType(), default=None, help="Heads to analyze, e.g. 0,1,5 or 0-3.")
@draws_option(
    "--samples",
    default=None,
    help=f"Null-law samples per head shape (cached per shape).  [default: {SAMPLES}]",
)
@null_options
@draws_option(
    "--rotation-samples", default=None, help="Rotation-null draws per head (not cached).  [default: 500]"
)
@cache_dir_option("Null-law cache, and in its hub/ the byte ranges fetched of hub models")
@click.option(
    "--model-type",
    default=None,
    metavar="TYPE",
    help="Read MODEL as this supported model_type, whatever its config.json says.",
)
@click.option(
    "--revision",
    default=None,
    metavar="REV",
    help="Branch, tag or commit of a hub id or Hugging Face cache folder (default: main).",
)
@click.option(
    "--layout",
    "layout_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML layout file for an architecture qkenergy does not ship (see qkenergy explain layout-files).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads for heads and null samples, BLAS on one thread each (default: every available core).",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Name this many most symmetric and most skew heads in the summary (0: none).",
)
@click.option(
    "--rope-offsets",
    type=RopeOffsetsType(),
    default=None,
    help="RoPE models: also read each head at these relative offsets d (L_d = W_K^T R_d W_Q), "
    "e.g. 0,1,2,4, or 'log' for 0, 1, 2, 4, ... up to the context length; adds an offset column.",
)
@click.option(
    "--name",
    default=None,
    metavar="NAME",
    help="Name the model NAME in every output (the table's model column, its settings, the figures) "
    "instead of the name MODEL gives: two runs of one checkpoint (e.g. with and without --fold-norm) "
    "then stay apart in qkenergy report.",
)
@click.option(
    "--skip-nonfinite",
    is_flag=True,
    help="Heads whose weights hold NaN or infinite values (a weight, a scale, a norm gain) are left out "
    "and listed in the summary and the settings, instead of stopping the run (the default: one line "
    "naming the file, the tensor and the block, exit 1, nothing written).",
)
@click.option("--quiet", is_flag=True, help="No summary and no progress bar.")
def analyze(
    model: str | None,
    output: Path | None,
    plot_dir: Path | None,
    per_layer: bool,
    fold_norm: bool,
    layers: tuple[int, ...] | None,
    heads: tuple[int, ...] | None,
    null: NullOptions,
    types: TypeRule,
    cache_dir: Path,
    model_type: str | None,
    revision: str | None,
    layout_file: Path | None,
    threads: int | None,
    top: int,
    rope_offsets: Any,
    name: str | None,
    skip_nonfinite: bool,
    quiet: bool,
) -> None:
    """Analyze every head of MODEL (safetensors file, directory, shards, GGUF file, HF cache folder, hub id, or
    an embedded model: minilm (the default), smollm2).

    Every column of the table and every term of the summary is explained by
    qkenergy explain columns, the mathematics behind them by qkenergy explain mathematics.

    Quantised safetensors (FP8, compressed-tensors, GPTQ, AWQ) are dequantised
    as they are read; other methods are refused (qkenergy explain quantization).
    """
    from qkenergy.analysis.run_config import Reading, RunConfig, Selection
    from qkenergy.api.model import run
    from qkenergy.formats import tables

    if output is not None and output.suffix.lower() not in tables.FORMATS:
        raise click.BadParameter(
            f"expected a file ending in {', '.join(tables.FORMATS)}, got {str(output)!r}",
            param_hint="'-o' / '--output'",
        )
    if output is not None:
        tables.table_format(output)  # its extra (Parquet: pyarrow) checked before the analysis, not after
    if plot_dir is not None:
        require("plot", "matplotlib", "--plot draws with it")
    config = RunConfig(
        selection=Selection(layers, heads, rope_offsets),
        reading=Reading(model_type, layout_file, revision, None, fold_norm, name, skip_nonfinite),
        null=null.drawn,
        spec=null.spec,
        types=types,
        per_layer=per_layer,
        cache_dir=cache_dir,
        threads=threads,
        progress=not quiet and sys.stderr.isatty(),
    )
    result = run(model, config)
    if not quiet:
        result.print_summary(stdout_console(), top=top)
    # the tables, their settings and the figures land together or not at all
    written = result.write(output, plots=plot_dir, null=null.spec, cache_dir=cache_dir)
    if not quiet:
        for path in written:
            click.echo(f"wrote {path}", err=True)
        if hub := result.settings.get("hub"):
            from qkenergy.weights.hub import fetch_summary

            click.echo(fetch_summary(hub), err=True)
