"""``qkenergy layouts``: the supported model types and where their heads live; ``--coverage``: every
model type of the installed transformers, supported or not and why."""

from __future__ import annotations

import click

from qkenergy.base.errors import QKEnergyError
from qkenergy.cli.output import stdout_console


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option(
    "--markdown", is_flag=True, help="Print a markdown table (the list of qkenergy explain families)."
)
@click.option(
    "--coverage",
    is_flag=True,
    help="List every model_type of the installed transformers: supported (and its proof), not a "
    "bilinear attention (and why), or not yet supported; the counts first.",
)
def layouts(as_json: bool, markdown: bool, coverage: bool) -> None:
    """List the supported model types: stacks, positions, qk-norm, and how each is proven."""
    from qkenergy.api import layouts as catalog

    if coverage:
        try:
            result: catalog.Layouts | catalog.Coverage = catalog.coverage()
        except QKEnergyError as error:
            if error.parameter != "model_types":
                raise
            raise QKEnergyError(
                "--coverage lists the model types of the installed transformers: pip install transformers"
            ) from None
    else:
        result = catalog.layouts()
    if as_json:
        click.echo(result.to_json())
    elif markdown:
        click.echo(result.to_markdown())
    else:
        result.print_summary(stdout_console())
