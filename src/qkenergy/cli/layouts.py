"""``qkenergy layouts``: the supported model types and where their heads live."""

from __future__ import annotations

import json

import click

from qkenergy.base.formatting import print_table, rich_table
from qkenergy.cli.output import stdout_console


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option("--markdown", is_flag=True, help="Print a markdown table (the list in docs/families.md).")
def layouts(as_json: bool, markdown: bool) -> None:
    """List the supported model types: stacks, positions, qk-norm, and how each is proven."""
    from qkenergy.base.formatting import markdown_table
    from qkenergy.weights.families import LAYOUT_COLUMNS, describe_families

    rows = describe_families()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif markdown:
        click.echo(markdown_table(LAYOUT_COLUMNS, rows))
    else:
        table = rich_table("qkenergy layouts: supported model types", [(c, "left") for c in LAYOUT_COLUMNS])
        for row in rows:
            table.add_row(*(row[c] for c in LAYOUT_COLUMNS))
        print_table(stdout_console(), table)
