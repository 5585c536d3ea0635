"""``qkenergy lobes``: Lemma 6's lobe departure D_n of a positive law, as n grows."""

from __future__ import annotations

import click

from qkenergy.cli.output import print_result
from qkenergy.cli.params import (
    BYTES_PER_LOBE_ENTRY,
    BYTES_PER_REPEAT,
    IntListType,
    fits_in_memory,
    parse_positive_law,
    validated_by,
)

# api.lobes' defaults (a test keeps them equal): the API is imported when the command runs, not for --help
DEFAULT_LOBE_LENGTHS = "10,100,1000,100000"
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
    default=DEFAULT_LOBE_LENGTHS,
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
    from qkenergy.api.lobes import lobes as lobe_departure

    result = lobe_departure(law, rho, ns, seed=seed, repeats=repeats)
    print_result(result, as_json)
