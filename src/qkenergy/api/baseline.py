"""The random baseline of a head shape as one object: ``qk.baseline(n, N) -> Baseline``.

A random head of shape (n, N) has E||S||^2 / E||L||^2 = (N+1)/(2N) for every entry
law with finite variance (Corollary 2, the ratio of expectations); for Gaussian
entries the expectation of the ratio E[||S||^2 / ||L||^2] is that same number exactly
(Proposition 6), and the whole law of every statistic is drawn by the exact sampler
(docs/mathematics.md §2). For other entry laws W_K, W_Q are simulated directly: the
expectation of the ratio is then a Monte Carlo estimate that may differ from the ratio
of expectations, and both are reported. :func:`baseline` computes it; the
:class:`Baseline` it returns prints the table ``qkenergy baseline`` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.api.shown import ShownAsJson
from qkenergy.base.formatting import format_number, json_safe, print_table, rich_table
from qkenergy.math.defaults import SAMPLES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["BASELINE_STATISTICS", "QUANTILE_LEVELS", "Baseline", "baseline"]

QUANTILE_LEVELS: tuple[float, ...] = (0.01, 0.05, 0.5, 0.95, 0.99)
"""The quantiles of each statistic's law that a baseline reports."""

BASELINE_STATISTICS: tuple[str, ...] = ("symmetric_energy", "pairing", "lobe_departure")
"""The statistics whose random law a baseline describes (the head table's columns)."""

# Hand the statistics chunks of Gram matrices of bounded size (as nulls.null_law does).
_MAX_CHUNK_VALUES = 1 << 24


@dataclass(frozen=True)
class Baseline(ShownAsJson):
    """The random baseline of one head shape, frozen: its JSON object, its table and its text.

    Parameters
    ----------
    result : dict
        The JSON-ready object ``qkenergy baseline --json`` prints: n, N, dist, samples, seed,
        sampler, and one entry per statistic of :data:`BASELINE_STATISTICS` (mean, stderr, sd,
        quantiles, defined_samples; the symmetric energy also its ratio of expectations and
        expectation of the ratio).

    Attributes
    ----------
    n, N : int
        The head shape.
    dist : str
        The entry law of W_Q and W_K ("gaussian", "student_t:nu=3", ...).
    exact : bool
        True for Gaussian entries (the exact sampler), False for Monte Carlo.
    table : DataFrame
        One row per statistic: mean, stderr, sd and the quantiles.

    Examples
    --------
    >>> import qkenergy as qk
    >>> b = qk.baseline(8, 32, samples=500)
    >>> b.ratio_of_expectations, b.exact  # (N+1)/(2N), Corollary 2
    (0.515625, True)
    >>> list(b.table.index)
    ['symmetric_energy', 'pairing', 'lobe_departure']
    """

    result: dict[str, Any]

    @property
    def n(self) -> int:
        return int(self.result["n"])

    @property
    def N(self) -> int:
        return int(self.result["N"])

    @property
    def dist(self) -> str:
        return str(self.result["dist"])

    @property
    def exact(self) -> bool:
        return self.dist == "gaussian"

    @property
    def ratio_of_expectations(self) -> float:
        """E||S||^2 / E||L||^2 = (N+1)/(2N) (Corollary 2)."""
        return float(self.result["symmetric_energy"]["ratio_of_expectations"])

    @property
    def expectation_of_ratio(self) -> float:
        """E[||S||^2 / ||L||^2]: (N+1)/(2N) exactly for Gaussian entries (Proposition 6), else estimated."""
        return float(self.result["symmetric_energy"]["expectation_of_ratio"])

    def records(self) -> dict[str, Any]:
        """The JSON-ready object ``qkenergy baseline --json`` prints.

        Returns
        -------
        dict
        """
        return self.result

    @property
    def table(self) -> pd.DataFrame:
        import pandas as pd

        rows = {
            name: {
                **{key: self.result[name][key] for key in ("mean", "stderr", "sd")},
                **{f"quantile {q:g}": self.result[name]["quantiles"][f"{q:g}"] for q in QUANTILE_LEVELS},
            }
            for name in BASELINE_STATISTICS
        }
        return pd.DataFrame.from_dict(rows, orient="index").astype(float)

    def title(self) -> str:
        """The table's title: the shape, the entry law, how the law was drawn.

        Returns
        -------
        str
        """
        how = "exact sampler" if self.exact else "Monte Carlo"
        return (
            f"Random baseline of a head: n = {self.n}, N = {self.N}, {self.dist} "
            f"entries ({how}, {self.result['samples']} samples)"
        )

    def notes(self) -> list[str]:
        """The lines under the table: the ratio of expectations and the expectation of the ratio.

        Returns
        -------
        list of str
        """
        energy = self.result["symmetric_energy"]
        lines = [
            f"ratio of expectations E||S||²/E||L||² = (N+1)/(2N) = {format_number(energy['ratio_of_expectations'])} "
            "(Corollary 2, every entry law)"
        ]
        if self.exact:
            lines.append(
                f"expectation of the ratio E[||S||²/||L||²] = {format_number(energy['expectation_of_ratio'])} "
                f"exactly (Proposition 6); sampled mean {format_number(energy['sample_mean'])} ± "
                f"{format_number(energy['sample_stderr'], 2)}"
            )
        else:
            lines.append(
                f"expectation of the ratio E[||S||²/||L||²] = {format_number(energy['expectation_of_ratio'])} ± "
                f"{format_number(energy['expectation_of_ratio_stderr'], 2)} (Monte Carlo; z = "
                f"{format_number(energy['departure_z'], 3)} against (N+1)/(2N)); ratio of expectations "
                f"estimated from the same draws {format_number(energy['ratio_of_expectations_estimate'])} ± "
                f"{format_number(energy['ratio_of_expectations_estimate_stderr'], 2)}"
            )
        return lines

    def print_to(self, console: Any, **options: Any) -> None:
        """Print the table and its notes on a rich Console, as ``qkenergy baseline`` does.

        Parameters
        ----------
        console : rich.console.Console
            Boxed on a terminal, plain aligned text off it.
        **options
            None.
        """
        # One column per statistic and one row per quantity: fits 80 columns with every digit.
        table = rich_table(self.title(), [("", "left"), *BASELINE_STATISTICS])
        for column in table.columns:
            column.no_wrap = True
        rows: list[tuple[str, Any]] = [
            ("mean", lambda row: format_number(row["mean"])),
            ("stderr", lambda row: format_number(row["stderr"], 3)),
            ("sd", lambda row: format_number(row["sd"], 4)),
            *(
                (f"quantile {q:g}", lambda row, q=q: format_number(row["quantiles"][f"{q:g}"], 4))
                for q in QUANTILE_LEVELS
            ),
        ]
        for label, cell in rows:
            table.add_row(label, *(cell(self.result[name]) for name in BASELINE_STATISTICS))
        print_table(console, table)
        for line in self.notes():
            console.print(line)

    def heading(self) -> str:
        """The notebook view's heading: :meth:`title`.

        Returns
        -------
        str
        """
        return self.title()

    def html_table(self) -> str:
        """The notebook view's table, one row per quantity.

        Returns
        -------
        str
        """
        return str(self.table.to_html())


def baseline(
    n: int,
    N: int,
    *,
    dist: str = "gaussian",
    samples: int = SAMPLES,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    progress: bool = False,
) -> Baseline:
    """The random baseline of a head of shape (n, N) (Corollary 2, Proposition 6).

    Gaussian entries: the exact null sampler (:meth:`qkenergy.NullSpec.null_law`) and the exact
    mean (N+1)/(2N) of the symmetric energy (Proposition 6), stderr 0. Other entry laws: W_K,
    W_Q simulated directly; the expectation of the ratio is then a Monte Carlo estimate that
    may differ from the ratio of expectations (N+1)/(2N) of Corollary 2, and both are reported.

    Parameters
    ----------
    n, N : int
        The head dimension (rows of W_Q, W_K) and the model dimension, n <= N.
    dist : str
        Entry law of W_Q and W_K: gaussian, rademacher, uniform, exponential, lognormal,
        bernoulli:p, student_t:nu (:func:`qkenergy.math.entry_laws.entry_law`).
    samples : int
        Random heads drawn (2000 by default, as analyze's null laws: they share the cache).
    seed : int
        The draws' seed.
    cache_dir : path, optional
        The Gaussian null-law cache (None: none).
    progress : bool
        Show a progress bar on stderr.

    Returns
    -------
    Baseline

    Raises
    ------
    QKEnergyError
        n > N, an unknown entry law, or more samples than memory holds.
    """
    from qkenergy.analysis.nullspec import NullSpec
    from qkenergy.base.errors import QKEnergyError
    from qkenergy.math import baselines, entry_laws, montecarlo, nulls
    from qkenergy.math.laws import Law

    if n > N:
        raise QKEnergyError(f"expected n <= N (Proposition 6), got n = {n} > N = {N}", parameter="n")
    nulls.check_null_memory(n, N, samples)
    law = entry_laws.entry_law(dist)
    ratio_of_expectations = baselines.qk_product_expectations(n, N).symmetric_ratio
    if law.name == "gaussian":
        null = NullSpec(samples=samples, seed=seed).null_law(n, N, cache_dir=cache_dir, progress=progress)
        columns = {name: null.samples(name) for name in BASELINE_STATISTICS}
        exact = {"symmetric_energy": baselines.gaussian_head_ratio_expectations(n, N).symmetric}
        energy_rows = None
    else:
        values = montecarlo.draw(
            lambda rng, size: nulls.direct_gram(rng, n, N, size, law),
            samples,
            seed=seed,
            chunk_size=max(montecarlo.BLOCK_SIZE, _MAX_CHUNK_VALUES // (4 * n * n)),
            transform=lambda G: _head_columns(G, N),
            progress=progress,
            description=f"random {law.spec} heads n={n} N={N}",
        )
        columns = {name: values[:, i] for i, name in enumerate(BASELINE_STATISTICS)}
        exact = {}
        energy_rows = values[:, len(BASELINE_STATISTICS) :]
    result: dict[str, Any] = {
        "n": n,
        "N": N,
        "dist": law.spec,
        "samples": samples,
        "seed": seed,
        "sampler": _sampler_name(law.name, n, N),
    }
    for name in BASELINE_STATISTICS:
        # one statistic's law (NaN draws, undefined statistics, left out); the exact mean where known
        sampled = Law(name, columns[name])
        summary = Law(name, columns[name], exact_mean=exact.get(name))
        quantiles = summary.ppf(QUANTILE_LEVELS) if summary.defined else [math.nan] * len(QUANTILE_LEVELS)
        row: dict[str, Any] = {
            "mean": summary.mean(),
            "stderr": summary.stderr(),
            "sd": summary.std(),
            "quantiles": {f"{q:g}": float(v) for q, v in zip(QUANTILE_LEVELS, quantiles)},
            "defined_samples": summary.defined,
        }
        if name == "symmetric_energy":
            row["ratio_of_expectations"] = ratio_of_expectations
            row["expectation_of_ratio"] = row["mean"]
            row["expectation_of_ratio_stderr"] = row["stderr"]
            if energy_rows is not None:
                # E||S||^2 / E||L||^2 estimated from the same draws: Corollary 2 says it is exact for every law
                estimate = montecarlo.estimate_ratio(energy_rows[:, 1], energy_rows[:, 0])
                row["ratio_of_expectations_estimate"] = estimate.value
                row["ratio_of_expectations_estimate_stderr"] = estimate.stderr
                row["departure_z"] = (
                    (row["mean"] - ratio_of_expectations) / row["stderr"] if row["stderr"] > 0 else math.nan
                )
            row["sample_mean"], row["sample_stderr"] = sampled.mean(), sampled.stderr()
        result[name] = json_safe(row)
    return Baseline(result)


def _sampler_name(law: str, n: int, N: int) -> str:
    if law != "gaussian":
        return "direct simulation of W_K, W_Q (Monte Carlo)"
    route = "Bartlett-Wishart" if 2 * n <= N else "C C^T, since N < 2n"
    return f"exact Gaussian null law ({route})"


def _head_columns(G: np.ndarray, N: int) -> np.ndarray:
    """Baseline statistics of a chunk of Gram matrices, then ||L||^2 and ||S||^2 (Gram route)."""
    from qkenergy.math import gram, statistics

    energy = gram.gram_energies(G)
    return np.column_stack(
        [statistics.gram_statistics(G, N).stack(BASELINE_STATISTICS), energy.norm_l_sq, energy.norm_s_sq]
    )
