"""``qkenergy explain [TOPIC]``: the documentation in the terminal, by topic (:mod:`qkenergy.api.explain`)."""

from __future__ import annotations

import click

from qkenergy.cli.output import stdout_console


@click.command()
@click.argument("topic", required=False)
def explain(topic: str | None) -> None:
    """Show the documentation of TOPIC (columns, mathematics, head-types, statistics, hub, ...).

    Without TOPIC, the list of topics with one line each. On a terminal the page is rendered;
    into a pipe or a file it is the page's markdown text.
    """
    from qkenergy.api.explain import explain as page

    text = page(topic)
    console = stdout_console()
    if topic is None or not console.is_terminal:
        click.echo(text, nl=False)
        return
    from rich.markdown import Markdown

    console.print(Markdown(text, hyperlinks=False))
