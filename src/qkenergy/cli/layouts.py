"""``qkenergy layouts [NAME]``: the supported model types and where their heads live; ``--coverage``:
every model type of the installed transformers, supported or not and why."""

from __future__ import annotations

import click

from qkenergy.base.errors import QKEnergyError
from qkenergy.cli.output import print_result


@click.command()
@click.argument("name", required=False)
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
def layouts(name: str | None, as_json: bool, markdown: bool, coverage: bool) -> None:
    """List the supported model types: stacks, positions, qk-norm, and how each is proven.

    NAME keeps the model types whose model_type or model names contain it, ignoring case
    (qkenergy layouts llama).
    """
    from qkenergy.api import layouts as catalog

    if coverage:
        try:
            result: catalog.Layouts | catalog.Coverage = catalog.coverage(name=name)
        except QKEnergyError as error:
            if error.parameter != "model_types":
                raise
            raise QKEnergyError(
                "--coverage lists the model types of the installed transformers: pip install transformers"
            ) from None
    else:
        result = catalog.layouts(name=name)
    if markdown and not as_json:
        click.echo(result.to_markdown())
    else:
        print_result(result, as_json)
