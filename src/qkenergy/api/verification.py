"""Every claim of the mathematics checked numerically, as one object: ``qk.verify() -> Verification``.

A :class:`Verification` holds the rows of :func:`qkenergy.math.verify.run_checks`
(one :class:`~qkenergy.math.verify.Check` per claim per setting) and the run's
``samples`` and ``seed``; it says whether every check ``passed``, gives the rows as a
DataFrame (:attr:`Verification.table`) or JSON records, and prints the table
``qkenergy verify`` prints.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qkenergy.api.shown import ShownAsJson
from qkenergy.base.formatting import format_number, json_safe, print_table, rich_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.math.verify import Check

__all__ = ["WIDE_VERIFY", "Verification", "verify"]

WIDE_VERIFY = 120
"""Below this console width the checks print one line each (the setting shortened on a terminal)."""

TITLE = "qkenergy verify: the claims of the specification, checked numerically"
CAPTION = (
    "Monte Carlo rows pass within 5 standard errors (z), Lemma 5 rows when the largest "
    "relative error is below 1e-10, Lemma 7-10 rows when the largest error of their identities is "
    "below 1e-10, Theorem 4 rows on the exact face conditions, KS rows (estimate = p-value) when p > 0.001; "
    "the rows marked 'expected departure' pass when the departure is significant."
)
COLUMNS: tuple[str, ...] = (
    "claim",
    "setting",
    "theory",
    "estimate",
    "stderr",
    "z",
    "error",
    "passed",
    "note",
)
"""The fields of one check's record (its JSON object, a column of :attr:`Verification.table`)."""


@dataclass(frozen=True)
class Verification(ShownAsJson):
    """The checks of one run of :func:`verify`, frozen: the rows, their verdict, their text.

    Parameters
    ----------
    checks : tuple of Check
        One :class:`~qkenergy.math.verify.Check` per claim per setting, in the order they ran.
    samples : int
        Monte Carlo draws per row.
    seed : int
        The run's seed (each row derives its own from it and its name).

    Attributes
    ----------
    passed : bool
        Whether every check passed (``qkenergy verify`` exits 0 exactly then).
    failed : tuple of Check
        The checks that did not pass.
    table : DataFrame
        One row per check, the columns of :data:`COLUMNS` (z and error derived).

    Examples
    --------
    >>> import qkenergy as qk
    >>> result = qk.verify(samples=200, seed=1)
    >>> result.passed, len(result) > 50
    (True, True)
    >>> result.table.loc[0, ["claim", "setting"]].tolist()
    ['Lemma 5', 'random Gaussian L, N = 1 (batch of 64)']
    >>> result.verdict() == f"{len(result)} of {len(result)} checks passed" == result.summary().splitlines()[-1]
    True
    """

    checks: tuple[Check, ...]
    samples: int
    seed: int

    def __repr__(self) -> str:
        return f"<Verification: {self.verdict()} ({self.samples} samples, seed {self.seed})>"

    def __len__(self) -> int:
        return len(self.checks)

    def __iter__(self) -> Iterator[Check]:
        return iter(self.checks)

    def __getitem__(self, index: int) -> Check:
        return self.checks[index]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def verdict(self) -> str:
        """The last line of the table: ``"K of M checks passed"`` and how many FAILED, if any.

        Returns
        -------
        str
        """
        failed = len(self.failed)
        return f"{len(self) - failed} of {len(self)} checks passed" + (f", {failed} FAILED" if failed else "")

    def records(self) -> list[dict[str, Any]]:
        """The checks as JSON-ready dicts (what ``qkenergy verify --json`` prints).

        Returns
        -------
        list of dict
            One dict per check, keys :data:`COLUMNS`; NaN and infinities become None.
        """
        return [json_safe(_record(check)) for check in self.checks]

    @property
    def table(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([_record(check) for check in self.checks], columns=list(COLUMNS))

    def print_to(self, console: Any, **options: Any) -> None:
        """Print the checks on a rich Console, as ``qkenergy verify`` does.

        Parameters
        ----------
        console : rich.console.Console
            A table on a console :data:`WIDE_VERIFY` columns wide or more (boxed on a terminal,
            plain off it), one line per check on a narrower one; the verdict last.
        **options
            None.
        """
        from rich.markup import escape

        if console.width < WIDE_VERIFY:
            self._print_narrow(console)
        else:
            table = rich_table(
                TITLE,
                [
                    ("claim", "left"),
                    ("setting", "left"),
                    "theory",
                    "estimate",
                    "stderr",
                    "z or error",
                    ("status", "center"),
                ],
                caption=CAPTION,
            )
            for check in self.checks:
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
        console.print(self.verdict())

    def _print_narrow(self, console: Any) -> None:
        """One line per check: on a terminal the setting is cut to its width, in a pipe or file it is whole."""
        from rich.markup import escape

        claim_width = max(len(c.claim) for c in self.checks)
        deviation_width = max(len(_deviation(c)) for c in self.checks)
        console.print(TITLE)
        console.print(escape(f"{'':4}  {'claim':<{claim_width}}  {'z or error':>{deviation_width}}  setting"))
        cut = False
        for check in self.checks:
            line = f"{'pass' if check.passed else 'FAIL'}  {check.claim:<{claim_width}}  "
            line += f"{_deviation(check):>{deviation_width}}  " + " ".join(check.setting.split())
            if console.is_terminal and len(line) > console.width:
                line = line[: console.width - 1] + "…"
                cut = True
            status = "[green]pass[/]" if check.passed else "[bold red]FAIL[/]"
            console.print(status + escape(line[4:]), soft_wrap=True)
        shortened = " Settings are shortened to fit the width;" if cut else ""
        console.print(f"{CAPTION}{shortened} --json gives every detail.")

    def _repr_html_(self) -> str:
        shown = self.table if self.passed else self.table[~self.table["passed"]]
        which = "every check" if self.passed else "the failed checks"
        return (
            f"<div><strong>{html.escape(self.verdict())}</strong> · {self.samples} samples · seed {self.seed}"
            f"<p>{which.capitalize()}:</p>"
            f"{shown[['claim', 'setting', 'theory', 'estimate', 'z', 'error', 'passed']].to_html(index=False)}</div>"
        )


def _record(check: Check) -> dict[str, Any]:
    """One check as a dict of :data:`COLUMNS`, with its derived z and error."""
    return {name: getattr(check, name) for name in COLUMNS} | {"passed": bool(check.passed)}


def _deviation(check: Check) -> str:
    if check.z is not None:
        return f"z={check.z:+.2f}"
    if check.error is not None:
        return f"err={format_number(check.error, 3)}"
    return ""


def verify(samples: int | None = None, seed: int = 0, *, progress: bool = False) -> Verification:
    """Check every claim of the mathematics numerically (docs/mathematics.md §2-§9), as ``qkenergy verify``.

    Monte Carlo rows pass within 5 standard errors of the theory's value, Lemma 5 and Lemma
    7-10 rows when their identities hold to 1e-10, Kolmogorov-Smirnov rows when p > 0.001,
    Theorem 4 rows on the exact face conditions (:mod:`qkenergy.math.verify`).

    Parameters
    ----------
    samples : int, optional
        Monte Carlo draws per row (default ``math.verify.DEFAULT_SAMPLES``, 100000: about 15 s on
        2 cores); the skewed-law rows draw at least ``MIN_DEPARTURE_SAMPLES``.
    seed : int
        Makes the run reproducible; every row derives its own seed from (seed, its name).
    progress : bool
        Show a transient progress bar on stderr.

    Returns
    -------
    Verification
        The checks, frozen; ``passed`` is True when every one passed.

    Raises
    ------
    QKEnergyError
        ``samples`` below 2 or ``seed`` negative (the message names the parameter).
    """
    from qkenergy.math import verify as checks

    if samples is None:
        samples = checks.DEFAULT_SAMPLES
    rows = checks.run_checks(samples=samples, seed=seed, progress=progress)
    return Verification(tuple(rows), samples=int(samples), seed=int(seed))
