"""``qkenergy verify``: every claim of the mathematics checked numerically, as a table or JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from qkenergy.base.formatting import format_number, json_safe, print_table, rich_table
from qkenergy.cli.output import stdout_console
from qkenergy.cli.params import BYTES_PER_NULL_SAMPLE, fits_in_memory


@click.command()
@click.option(
    "--samples",
    type=click.IntRange(min=50),
    default=None,
    callback=fits_in_memory(BYTES_PER_NULL_SAMPLE),
    help="Monte Carlo draws per row.  [default: 100000]",  # math.verify.DEFAULT_SAMPLES (a test checks)
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of the checks instead of a table.")
@click.pass_context
def verify(ctx: click.Context, samples: int | None, seed: int, as_json: bool) -> None:
    """Check every claim of the specification numerically (exit 0 exactly when all pass)."""
    from qkenergy.math import verify as verification

    options: dict[str, Any] = {"seed": seed, "progress": not as_json and sys.stderr.isatty()}
    if samples is not None:
        options["samples"] = samples
    checks = verification.run_checks(**options)
    if as_json:
        click.echo(json.dumps([json_safe(_check_record(check)) for check in checks], indent=1))
    else:
        _print_checks(checks)
    ctx.exit(0 if all(check.passed for check in checks) else 1)


def _check_record(check: Any) -> dict[str, Any]:
    """A verify.Check as a dict, with its derived z and error."""
    return {
        "claim": check.claim,
        "setting": check.setting,
        "theory": check.theory,
        "estimate": check.estimate,
        "stderr": check.stderr,
        "z": check.z,
        "error": check.error,
        "passed": bool(check.passed),
        "note": check.note,
    }


# Below this width verify prints one line per check (setting shortened) instead of the full table.
WIDE_VERIFY = 120


def _deviation(check: Any) -> str:
    if check.z is not None:
        return f"z={check.z:+.2f}"
    if check.error is not None:
        return f"err={format_number(check.error, 3)}"
    return ""


def _print_checks(checks: Sequence[Any]) -> None:
    from rich.markup import escape

    console = stdout_console()
    caption = (
        "Monte Carlo rows pass within 5 standard errors (z), Lemma 5 rows when the largest "
        "relative error is below 1e-10, Lemma 7-10 rows when the largest error of their identities is "
        "below 1e-10, Theorem 4 rows on the exact face conditions, KS rows (estimate = p-value) when p > 0.001; "
        "the rows marked 'expected departure' pass when the departure is significant."
    )
    if console.width < WIDE_VERIFY:
        _print_checks_narrow(checks, console, caption)
    else:
        table = rich_table(
            "qkenergy verify: the claims of the specification, checked numerically",
            [
                ("claim", "left"),
                ("setting", "left"),
                "theory",
                "estimate",
                "stderr",
                "z or error",
                ("status", "center"),
            ],
            caption=caption,
        )
        for check in checks:
            setting = escape(check.setting)
            if check.note and (check.theory is None or "expected departure" in check.note):
                # rows whose z or error column does not tell the whole story carry their note
                setting += f"\n[dim]{escape(check.note)}[/]"
            table.add_row(
                escape(check.claim),
                setting,
                format_number(check.theory),
                format_number(check.estimate),
                format_number(check.stderr, 3),
                _deviation(check),
                "[green]pass[/]" if check.passed else "[bold red]FAIL[/]",
            )
        print_table(console, table)
    failed = sum(not check.passed for check in checks)
    console.print(
        f"{len(checks) - failed} of {len(checks)} checks passed" + (f", {failed} FAILED" if failed else "")
    )


def _print_checks_narrow(checks: Sequence[Any], console: Any, caption: str) -> None:
    """One line per check: on a terminal the setting is cut to its width, in a pipe or file it is whole."""
    from rich.markup import escape

    claim_width = max(len(c.claim) for c in checks)
    deviation_width = max(len(_deviation(c)) for c in checks)
    console.print("qkenergy verify: the claims of the specification, checked numerically")
    console.print(escape(f"{'':4}  {'claim':<{claim_width}}  {'z or error':>{deviation_width}}  setting"))
    cut = False
    for check in checks:
        line = f"{'pass' if check.passed else 'FAIL'}  {check.claim:<{claim_width}}  "
        line += f"{_deviation(check):>{deviation_width}}  " + " ".join(check.setting.split())
        if console.is_terminal and len(line) > console.width:
            line = line[: console.width - 1] + "…"
            cut = True
        status = "[green]pass[/]" if check.passed else "[bold red]FAIL[/]"
        console.print(status + escape(line[4:]), soft_wrap=True)
    shortened = " Settings are shortened to fit the width;" if cut else ""
    console.print(f"{caption}{shortened} --json gives every detail.")
