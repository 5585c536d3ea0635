"""``qkenergy layouts``: the supported model types and where their heads live; ``--coverage``: every
model type of the installed transformers, supported or not and why."""

from __future__ import annotations

import json

import click

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import print_table, rich_table
from qkenergy.cli.output import stdout_console


def installed_model_types() -> tuple[list[str], str]:
    """Every ``model_type`` the installed transformers defines (its config mapping), and its version."""
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # type: ignore[attr-defined]
    except ImportError:
        raise QKEnergyError(
            "--coverage lists the model types of the installed transformers: pip install transformers"
        ) from None
    return sorted(CONFIG_MAPPING_NAMES), str(transformers.__version__)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option("--markdown", is_flag=True, help="Print a markdown table (the list in docs/families.md).")
@click.option(
    "--coverage",
    is_flag=True,
    help="List every model_type of the installed transformers: supported (and its proof), not a "
    "bilinear attention (and why), or not yet supported; the counts first.",
)
def layouts(as_json: bool, markdown: bool, coverage: bool) -> None:
    """List the supported model types: stacks, positions, qk-norm, and how each is proven."""
    from qkenergy.base.formatting import markdown_table
    from qkenergy.weights.families import LAYOUT_COLUMNS, describe_families

    if coverage:
        from qkenergy.weights.coverage import COVERAGE_COLUMNS, coverage_line
        from qkenergy.weights.coverage import coverage as classify

        types, version = installed_model_types()
        rows = classify(types)
        line = coverage_line(rows, f"transformers {version}")
        if as_json:
            click.echo(json.dumps({"summary": line, "model_types": rows}, indent=2))
        elif markdown:
            click.echo(line + "\n\n" + markdown_table(COVERAGE_COLUMNS, rows))
        else:
            table = rich_table(
                f"qkenergy layouts --coverage: {line}", [(c, "left") for c in COVERAGE_COLUMNS]
            )
            for row in rows:
                table.add_row(*(row[c] for c in COVERAGE_COLUMNS))
            print_table(stdout_console(), table)
        return
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
