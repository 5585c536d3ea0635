"""Lemma 6's lobe departure of a positive law, as n grows, as one object: ``qk.lobes() -> LobeDeparture``.

Two sorted iid samples of a positive law X at scales 1 and rho become proportional:
D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| -> 0 almost surely when E[X^2] < inf
(docs/mathematics.md §3, "Proportional lobes"). :func:`lobes` follows D_n along n for
a number of independent repeats (:func:`qkenergy.math.lobes.lobe_departure_curve`);
the :class:`LobeDeparture` it returns prints the table ``qkenergy lobes`` prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.api.shown import ShownAsJson
from qkenergy.base.formatting import format_number, json_safe, print_table, rich_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.math.lobes import LobeCurve, PositiveLaw

__all__ = ["DEFAULT_LOBE_LENGTHS", "DEFAULT_LOBE_REPEATS", "LobeDeparture", "lobes"]

DEFAULT_LOBE_LENGTHS: tuple[int, ...] = (10, 100, 1_000, 100_000)
DEFAULT_LOBE_REPEATS = 20


@dataclass(frozen=True)
class LobeDeparture(ShownAsJson):
    """D_n of one positive law along n (Lemma 6), frozen: the curve, its table and its text.

    Parameters
    ----------
    curve : LobeCurve
        The departures of every repeat (:func:`qkenergy.math.lobes.lobe_departure_curve`).
    finite_second_moment : bool
        Whether E[X^2] < inf, the condition of Lemma 6 (D_n -> 0 almost surely).

    Attributes
    ----------
    law : str
        The law's spec ("exponential", "pareto:alpha=1.5", ...).
    rho : float
        The scale ratio u / v of the two lobes.
    ns : (k,) ndarray of int
        The lobe lengths n.
    mean, stderr, median : (k,) ndarray
        Mean of D_n over the repeats, its standard error, and the median (robust for heavy tails).
    values : (repeats, k) ndarray
        D_n of each repeat (one sample path each).
    repeats, seed : int
        Independent pairs of lobes per length, and the seed they were drawn from.
    table : DataFrame
        Columns n, mean, stderr, median: one row per length.

    Examples
    --------
    >>> import qkenergy as qk
    >>> curve = qk.lobes("exponential", rho=0.5, ns=[10, 1000], repeats=5)
    >>> curve.finite_second_moment, bool(curve.mean[1] < curve.mean[0])
    (True, True)
    >>> curve.table.columns.tolist()
    ['n', 'mean', 'stderr', 'median']
    """

    curve: LobeCurve
    finite_second_moment: bool

    def __repr__(self) -> str:
        return (
            f"<LobeDeparture of the {self.law} law: rho = {self.rho:g}, "
            f"n = {', '.join(str(int(n)) for n in self.ns)}, {self.repeats} repeats>"
        )

    @property
    def law(self) -> str:
        return self.curve.law

    @property
    def rho(self) -> float:
        return self.curve.rho

    @property
    def ns(self) -> np.ndarray:
        return self.curve.ns

    @property
    def mean(self) -> np.ndarray:
        return self.curve.mean

    @property
    def stderr(self) -> np.ndarray:
        return self.curve.stderr

    @property
    def median(self) -> np.ndarray:
        return self.curve.median

    @property
    def values(self) -> np.ndarray:
        return self.curve.values

    @property
    def repeats(self) -> int:
        return self.curve.repeats

    @property
    def seed(self) -> int:
        return self.curve.seed

    def _rows(self) -> list[tuple[int, float, float, float]]:
        return [
            (int(n), float(m), float(s), float(med))
            for n, m, s, med in zip(self.ns, self.mean, self.stderr, self.median)
        ]

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per length: n, mean, stderr, median (what ``qkenergy lobes --json`` prints).

        Returns
        -------
        list of dict
        """
        return [json_safe({"n": n, "mean": m, "stderr": s, "median": med}) for n, m, s, med in self._rows()]

    @property
    def table(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self._rows(), columns=["n", "mean", "stderr", "median"])

    def note(self) -> str:
        """The sentence under the table: what D_n is, and what Lemma 6 says of this law.

        Returns
        -------
        str
        """
        return (
            f"D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| for two sorted iid samples of the {self.law} law "
            f"at scales 1 and rho = {self.rho:g}, {self.repeats} repeats; "
            + (
                "finite second moment: D_n -> 0 almost surely."
                if self.finite_second_moment
                else "infinite second moment: Lemma 6 does not apply, D_n need not tend to 0."
            )
        )

    def print_to(self, console: Any, **options: Any) -> None:
        """Print the table and its note on a rich Console, as ``qkenergy lobes`` does.

        Parameters
        ----------
        console : rich.console.Console
            Boxed on a terminal, plain aligned text off it (the table is never cut).
        **options
            None.
        """
        table = rich_table(self.heading(), ["n", "D_n mean", "stderr", "median"])
        for n, mean, stderr, median in self._rows():
            table.add_row(f"{n:,}", format_number(mean), format_number(stderr, 3), format_number(median))
        print_table(console, table)
        console.print(self.note())

    def heading(self) -> str:
        """The table's title.

        Returns
        -------
        str
        """
        return "Lemma 6: lobe departure D_n"

    def notes(self) -> list[str]:
        """The line under the table (:meth:`note`).

        Returns
        -------
        list of str
        """
        return [self.note()]


def lobes(
    law: str | PositiveLaw = "exponential",
    rho: float = 0.5,
    ns: Sequence[int] | np.ndarray = DEFAULT_LOBE_LENGTHS,
    *,
    seed: int = 0,
    repeats: int = DEFAULT_LOBE_REPEATS,
) -> LobeDeparture:
    """Lemma 6: the lobe departure D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| of a positive law along n.

    alpha_n sorts X_1 .. X_n decreasingly (scale 1), beta_n sorts rho X'_1 .. rho X'_n (scale
    rho); each repeat follows one sample path (docs/mathematics.md §3, "Proportional lobes").
    D_n -> 0 almost surely when E[X^2] < inf; a Pareto law of tail index below 2 is the contrast.

    Parameters
    ----------
    law : str or PositiveLaw
        exponential, half_normal, lognormal[:sigma], chi[:k] or pareto:alpha
        (:func:`qkenergy.math.lobes.positive_law`).
    rho : float
        The scale ratio u / v of the two lobes, > 0.
    ns : sequence of int
        Lobe lengths n, each >= 1.
    seed : int
        Repeat r draws from the r-th child of ``SeedSequence(seed)``.
    repeats : int
        Independent pairs of lobes per length.

    Returns
    -------
    LobeDeparture
        The curve and whether Lemma 6 applies to the law.

    Raises
    ------
    QKEnergyError
        An unknown law, rho not positive, an empty or non-integer ``ns``, or lobes too large for memory.
    """
    from qkenergy.math import lobes as lobe_module

    # looked up on the module at call time: tests stand in for it there
    curve = lobe_module.lobe_departure_curve(law, rho, list(ns), seed=seed, repeats=repeats)
    finite = lobe_module.positive_law(law).finite_second_moment
    return LobeDeparture(curve, finite_second_moment=finite)
