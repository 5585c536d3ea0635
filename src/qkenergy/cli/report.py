"""``qkenergy report``: the comparison report (HTML page and figures) of surveys or analyze tables."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The report page (.html); its PNG / SVG figures and CSV tables go to <name>_files/ beside it.",
)
@click.option(
    "--baseline",
    "reference",
    default=None,
    help="Compare every model of the same architecture with this model, head by head.",
)
@click.option("--title", default=None, help="Title of the page.")
@click.option(
    "--static/--no-static",
    default=None,
    help="The PNG / SVG figures (plotly's kaleido, in a headless Chrome or Chromium): --static "
    "requires them, --no-static skips them. By default they are written where a browser is "
    "found; without one, one warning line names what to install.",
)
def report_command(
    sources: tuple[Path, ...], output: Path, reference: str | None, title: str | None, static: bool | None
) -> None:
    """Compare models in one report: a survey's OUT directory, or head tables from analyze -o."""
    from qkenergy.api.survey import write_report
    from qkenergy.base.formatting import plural  # numpy: not at --help

    if output.suffix.lower() not in (".html", ".htm"):
        raise click.BadParameter(
            f"expected a file ending in .html, got {str(output)!r}", param_hint="'-o' / '--output'"
        )
    result = write_report(sources, output, baseline=reference, title=title, static=static)
    click.echo(
        f"wrote {result.html} ({plural(len(result.summary), 'model')}, {plural(len(result.figures), 'figure')})"
    )
    click.echo(f"wrote {plural(len(result.files), 'file')} in {result.directory}")
