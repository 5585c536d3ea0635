"""``qkenergy lobes``: Lemma 6's lobe departure D_n of a positive law, as n grows."""

from __future__ import annotations

import json

import click

from qkenergy.base.formatting import format_number, json_safe, print_table, rich_table
from qkenergy.cli.output import stdout_console
from qkenergy.cli.params import (
    BYTES_PER_LOBE_ENTRY,
    BYTES_PER_REPEAT,
    IntListType,
    fits_in_memory,
    parse_positive_law,
    validated_by,
)

DEFAULT_LOBE_REPEATS = 20


@click.command()
@click.option(
    "--law",
    default="exponential",
    show_default=True,
    callback=validated_by(parse_positive_law),
    help="Positive law of the lobe entries: exponential, half_normal, lognormal, chi, pareto:alpha.",
)
@click.option(
    "--rho",
    type=click.FloatRange(min=0, min_open=True),
    default=0.5,
    show_default=True,
    help="Scale ratio rho = u/v of the two lobes.",
)
@click.option(
    "--n",
    "ns",
    type=IntListType(),
    callback=fits_in_memory(BYTES_PER_LOBE_ENTRY),
    default="10,100,1000,100000",
    show_default=True,
    help="Lobe lengths, comma-separated.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option(
    "--repeats",
    type=click.IntRange(min=2),
    callback=fits_in_memory(BYTES_PER_REPEAT),
    default=DEFAULT_LOBE_REPEATS,
    show_default=True,
    help="Independent pairs of lobes per length.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def lobes(law: str, rho: float, ns: tuple[int, ...], seed: int, repeats: int, as_json: bool) -> None:
    """Lemma 6: the departure D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| of two sorted iid lobes."""
    from qkenergy.math import lobes as lobe_module

    curve = lobe_module.lobe_departure_curve(law, rho, list(ns), seed=seed, repeats=repeats)
    rows = [
        (int(n), float(m), float(s), float(med))
        for n, m, s, med in zip(curve.ns, curve.mean, curve.stderr, curve.median)
    ]
    if as_json:
        click.echo(
            json.dumps(
                [json_safe({"n": n, "mean": m, "stderr": s, "median": med}) for n, m, s, med in rows],
                indent=1,
            )
        )
        return
    finite = lobe_module.positive_law(law).finite_second_moment
    table = rich_table("Lemma 6: lobe departure D_n", ["n", "D_n mean", "stderr", "median"])
    for n, mean, stderr, median in rows:
        table.add_row(f"{n:,}", format_number(mean), format_number(stderr, 3), format_number(median))
    console = stdout_console()
    print_table(console, table)
    console.print(
        f"D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| for two sorted iid samples of the {curve.law} law "
        f"at scales 1 and rho = {rho:g}, {repeats} repeats; "
        + (
            "finite second moment: D_n -> 0 almost surely."
            if finite
            else "infinite second moment: Lemma 6 does not apply, D_n need not tend to 0."
        )
    )
