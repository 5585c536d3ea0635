"""The claims of the mathematics (docs/mathematics.md), checked numerically.

``run_checks()`` returns one :class:`Check` per claim per setting:

- Lemma 5: the three energy identities (and the ratio form) on random,
  structured and adversarial matrices, largest relative error below 1e-10;
- Corollary 1: E||L||^2, E||S||^2, E||T||^2 and their ratio for iid square L,
  several N and entry laws; E[s] for Gaussian entries by Monte Carlo and by the
  exact Beta law;
- Corollary 2: the same for L = W_K^T W_Q, several (n, N), sigma_K^2 != sigma_Q^2;
- Proposition 6: E[s] = (N+1)/(2N) for Gaussian heads, n = 1 .. N, through the
  exact sampler and by direct sampling;
- Lemma 6: D_n decreasing towards 0 for finite-second-moment laws, and not for
  a Pareto law of tail index 1.5 (the contrast case);
- the skewed entry laws where E[s] departs from E||S||^2/E||L||^2 (expected);
- the exact samplers against direct simulation (Kolmogorov-Smirnov);
- the rotation null: E[s(L U)] = (N+1)/(2N) for any fixed L with U Haar (direct
  QR sampling, heads of rank 1 to N), and its exact O(n^3) block sampler against
  direct Haar rotations (KS);
- the per-layer null: E[s] = (N+1)/(2N) for a whole Gaussian layer with grouped
  keys, and its reduction to one head of n = H_kv * head_dim against direct
  sampling of whole layers (KS);
- the Beta tail approximation of p-values: exact for an iid Gaussian square L,
  and against the empirical tail of a Gaussian head where both exist;
- the normalised spectrum lambda of S (docs/mathematics.md, section 9), on
  random, structured and rank-deficient heads: Lemma 7 (lobe norms from I,
  ||lambda_+ - lambda_-||^2 = 1 - 2C, P = 1 - sqrt(1 - 2C), 0 <= 2C <= 1),
  Lemma 8 (the involution iota), Lemma 9 (O, E, R from R and R o iota, and
  their power series), Lemma 10 (the Gram form of S, tr(S^j), ||S||^2 and the
  moments as traces of H = JG/(2||S||)), each an identity to 1e-10; Theorem 4
  (the heads on each face of the profile's simplex), exact face conditions.

Monte Carlo rows pass within 5 standard errors, KS rows when p > 0.001; each
row says which in its setting or note. Every row has its own seed derived from
(seed, check name), so rows do not depend on each other or on their order.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from scipy import stats

from qkenergy.base.errors import check_integer
from qkenergy.math import (
    baselines,
    energies,
    gram,
    layer_null,
    lobes,
    moments,
    montecarlo,
    nulls,
    rotation,
    spectrum,
    tails,
)
from qkenergy.math import statistics as head_stats
from qkenergy.math.directionality import dense_norms, directionality

DEFAULT_SAMPLES = 100_000
"""Monte Carlo draws per row: the default run takes about 15 s on 2 cores."""

TOLERANCE_SE = 5.0
"""Monte Carlo rows pass when |estimate - theory| <= 5 standard errors."""

KS_ALPHA = 1e-3
"""Kolmogorov-Smirnov rows pass when p > 0.001."""

LEMMA5_TOLERANCE = 1e-10
"""Largest relative error allowed in the identities of Lemma 5 (float64)."""

SPECTRUM_TOLERANCE = 1e-10
"""Largest error allowed in the identities of Lemmas 7 to 10 (relative where the row says so)."""

MIN_DEPARTURE_SAMPLES = 100_000
"""Floor on the draws of the skewed-law rows: below it the expected departure may not reach 5 SE."""

LOBE_SIZES: tuple[int, ...] = (10, 100, 1_000, 10_000, 100_000)
LOBE_REPEATS = 30


@dataclass(frozen=True)
class Check:
    """One claim in one setting: the theory's value, the numerical estimate, and the verdict.

    Parameters
    ----------
    claim : str
        The spec item ("Lemma 5", "Corollary 2", ...).
    setting : str
        What was checked, and how.
    theory : float or None
        The claim's value; None where the claim is a behaviour rather than a number
        (Lemma 6, KS tests).
    estimate : float
        The numerical value (a KS row's p-value).
    stderr : float or None
        The estimate's standard error; None for exact computations.
    passed : bool
        The verdict.
    note : str
        The tolerance, or why a row passes (an expected departure).
    """

    claim: str
    setting: str
    theory: float | None
    estimate: float
    stderr: float | None
    passed: bool
    note: str = ""

    @property
    def z(self) -> float | None:
        """(estimate - theory) / stderr, where both exist."""
        if self.theory is None or self.stderr is None or not self.stderr > 0:
            return None
        return (self.estimate - self.theory) / self.stderr

    @property
    def error(self) -> float | None:
        """|estimate - theory| where a theory value exists."""
        return None if self.theory is None else abs(self.estimate - self.theory)


CheckFunction = Callable[[int, int], list[Check]]
_Check = TypeVar("_Check", bound=CheckFunction)


_SHARED_SECTIONS = """
    Parameters
    ----------
    samples : int
        Monte Carlo draws per row (rows without draws ignore it).
    seed : int
        The run's seed; each row derives its own from it and its name.

    Returns
    -------
    list of Check
        One row per setting.
    """


def _shared_sections(check: _Check) -> _Check:
    """Give a check the Parameters and Returns sections every check shares."""
    check.__doc__ = f"{(check.__doc__ or '').rstrip()}\n{_SHARED_SECTIONS}"
    return check


def _subseed(seed: int, name: str) -> int:
    """A non-negative seed for one row, from (seed, row name): rows are independent of order."""
    state = np.random.SeedSequence([seed, zlib.crc32(name.encode())]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


def _exact_row(
    claim: str, setting: str, worst: float, what: str, tolerance: float = SPECTRUM_TOLERANCE
) -> Check:
    """An exact row: passes when the worst error (inf where not finite) is at most ``tolerance``."""
    worst = worst if math.isfinite(worst) else math.inf
    return Check(claim, setting, 0.0, worst, None, worst <= tolerance, f"{what}; pass below {tolerance:g}")


def _within(claim: str, setting: str, theory: float, estimate: montecarlo.Estimate, note: str = "") -> Check:
    """A Monte Carlo row: passes within TOLERANCE_SE standard errors."""
    value, stderr = float(estimate.value), float(estimate.stderr)
    passed = bool(np.isfinite(value) and abs(value - theory) <= TOLERANCE_SE * stderr)
    tolerance = f"tolerance {TOLERANCE_SE:g} SE"
    return Check(claim, setting, theory, value, stderr, passed, f"{tolerance}; {note}" if note else tolerance)


# ---------------------------------------------------------------------------
# Lemma 5


def _lemma5_errors(L: np.ndarray, expected_s: np.ndarray | float | None = None) -> float:
    """Largest relative error (relative to ||L||^2) of ||L||^2, the three identities and the ratio form.

    energies.energies sums ||S||^2 and ||T||^2 from S and T themselves, so
    the identities are a genuine check of the arithmetic. With ``expected_s``
    the ratio s = ||S||^2/||L||^2 must also equal that exact value.
    """
    e = energies.energies(L)
    total = e.norm_l_sq
    L64 = np.asarray(L, dtype=np.float64)
    errors = [
        # ||L||^2 itself against a plain float64 sum (every family here stays inside float64's range)
        np.abs(total - np.sum(L64 * L64, axis=(-2, -1))) / total,
        np.abs(total - e.norm_s_sq - e.norm_t_sq) / total,
        np.abs(e.norm_s_sq - 0.5 * total - 0.5 * e.trace_l_sq) / total,
        np.abs(e.norm_t_sq - 0.5 * total + 0.5 * e.trace_l_sq) / total,
        # the ratio form: s = 1/2 + tr(L^2)/(2||L||^2), t = 1/2 - tr(L^2)/(2||L||^2)
        np.abs(e.symmetric_ratio - 0.5 - 0.5 * e.trace_l_sq / total),
        np.abs(e.skew_ratio - 0.5 + 0.5 * e.trace_l_sq / total),
    ]
    if expected_s is not None:
        errors.append(np.abs(e.symmetric_ratio - expected_s))
    return float(np.max(np.stack([np.asarray(x, dtype=np.float64).ravel() for x in errors])))


def _lemma5_families(rng: np.random.Generator) -> list[tuple[str, np.ndarray, np.ndarray | float | None]]:
    """(setting, batch of L, exact s or None): random, structured and adversarial matrices."""
    families: list[tuple[str, np.ndarray, np.ndarray | float | None]] = []
    for N in (1, 2, 5, 32, 128):
        families.append((f"random Gaussian L, N = {N} (batch of 64)", rng.standard_normal((64, N, N)), None))
    A = rng.standard_normal((64, 24, 24))
    families.append(("symmetric L = A + A^T, N = 24: s = 1", A + np.swapaxes(A, 1, 2), 1.0))
    families.append(("antisymmetric L = A - A^T, N = 24: s = 0", A - np.swapaxes(A, 1, 2), 0.0))
    u, v = rng.standard_normal((2, 64, 24))
    cos2 = np.einsum("bi,bi->b", u, v) ** 2 / (np.einsum("bi,bi->b", u, u) * np.einsum("bi,bi->b", v, v))
    families.append(
        ("rank-one L = u v^T, N = 24: s = (1 + cos^2)/2", u[:, :, None] * v[:, None, :], 0.5 * (1 + cos2))
    )
    families.append(("nilpotent L (strictly upper triangular), N = 24: s = 1/2", np.triu(A, 1), 0.5))
    single = np.zeros((1, 7, 7))
    single[0, 2, 5] = 3.0
    families.append(("one off-diagonal entry (S and T share the energy): s = 1/2", single, 0.5))
    big = rng.standard_normal((32, 48, 48))
    families.append(
        (
            "heavy cancellation L = I + 1e8 (A - A^T), N = 48",
            np.eye(48) + 1e8 * (big - np.swapaxes(big, 1, 2)),
            None,
        )
    )
    for scale in (1e-30, 1e30):
        L32 = (scale * rng.standard_normal((64, 32, 32))).astype(np.float32)
        families.append((f"float32 entries of size {scale:g}, N = 32", L32, None))
    mixed = rng.standard_normal((64, 32, 32)) * 10.0 ** rng.uniform(-30, 30, (64, 32, 32))
    families.append(("float32 entries spanning 1e-30 .. 1e30, N = 32", mixed.astype(np.float32), None))
    return families


@_shared_sections
def check_lemma5(samples: int, seed: int) -> list[Check]:
    """Lemma 5: ||L||^2 = ||S||^2 + ||T||^2, ||S||^2, ||T||^2 = (||L||^2 +- tr L^2)/2, exactly.

    The claim: docs/mathematics.md §2.
    """
    rng = np.random.default_rng(_subseed(seed, "lemma5"))
    what = "largest relative error of the identities (energies.py, float64)"
    rows = [
        _exact_row("Lemma 5", setting, _lemma5_errors(L, expected_s), what, LEMMA5_TOLERANCE)
        for setting, L, expected_s in _lemma5_families(rng)
    ]
    return [*rows, _lemma5_extreme_float64(rng), _lemma5_gram_route(rng)]


def _lemma5_extreme_float64(rng: np.random.Generator) -> Check:
    """Ratios at float64 scales where ||L||^2 itself under- or overflows: they must not notice."""
    worst = 0.0
    for exponent in (-200, 200):
        base = rng.standard_normal((16, 20, 20))
        reference = energies.energies(base)
        with np.errstate(over="ignore", under="ignore"):  # the energies may leave float64: expected
            e = energies.energies(base * 10.0**exponent)
        worst = max(
            worst,
            float(np.max(np.abs(e.symmetric_ratio - reference.symmetric_ratio))),
            float(np.max(np.abs(e.symmetric_ratio + e.skew_ratio - 1))),
        )
    return _exact_row(
        "Lemma 5",
        "ratios at float64 scales 1e-200 and 1e200 (||L||^2 under/overflows)",
        worst,
        "s + t = 1 and s equal to the unscaled s",
        LEMMA5_TOLERANCE,
    )


def _lemma5_gram_route(rng: np.random.Generator) -> Check:
    """The Gram route (docs/mathematics.md §4) gives the same ||L||^2, tr(L^2) and s as the dense L = W_K^T W_Q."""
    worst = 0.0
    for n, N, scale, dtype in (
        (1, 9, 1.0, np.float64),
        (4, 16, 1.0, np.float64),
        (16, 8, 1.0, np.float64),
        (8, 64, 1e-30, np.float32),
        (8, 64, 1e30, np.float32),
    ):
        w_query = (scale * rng.standard_normal((8, n, N))).astype(dtype)
        w_key = (scale * rng.standard_normal((8, n, N))).astype(dtype)
        G = gram.head_gram(w_query, w_key)
        from_gram = gram.gram_energies(G)
        # the dense reference on the same per-matrix power-of-two rescaling head_gram applies
        wq, _ = energies.rescale_by_power_of_two(w_query)
        wk, _ = energies.rescale_by_power_of_two(w_key)
        dense = energies.energies(np.swapaxes(wk, 1, 2) @ wq)
        worst = max(
            worst,
            float(np.max(np.abs(from_gram.symmetric_ratio - dense.symmetric_ratio))),
            float(
                np.max(
                    np.abs(from_gram.trace_l_sq / from_gram.norm_l_sq - dense.trace_l_sq / dense.norm_l_sq)
                )
            ),
        )
    return _exact_row(
        "Lemma 5",
        "Gram route vs dense L = W_K^T W_Q, (n, N) up to (16, 64), float32 at 1e+-30",
        worst,
        "largest error of s and tr(L^2)/||L||^2 (gram.py vs energies.py)",
        LEMMA5_TOLERANCE,
    )


# ---------------------------------------------------------------------------
# Corollaries 1 and 2


# (N, entry law, variance): several N and laws, including skewed and heavy-tailed ones
COROLLARY1_SETTINGS: tuple[tuple[int, str, float], ...] = (
    (2, "gaussian", 1.0),
    (3, "rademacher", 1.0),
    (5, "exponential", 0.25),
    (8, "uniform", 2.0),
    (16, "lognormal", 1.0),
    (6, "student_t:5", 1.0),
)

# (n, N, entry law, sigma_K^2, sigma_Q^2): unequal variances, n < N, n = N and n > N
COROLLARY2_SETTINGS: tuple[tuple[int, int, str, float, float], ...] = (
    (1, 4, "gaussian", 0.5, 2.0),
    (3, 8, "rademacher", 1.0, 3.0),
    (6, 6, "exponential", 0.2, 5.0),
    (8, 4, "uniform", 2.0, 0.25),
    (2, 10, "student_t:5", 0.1, 10.0),
)


def _energy_rows(claim: str, setting: str, result: montecarlo.EnergyEstimates) -> list[Check]:
    """E||L||^2, E||S||^2, E||T||^2 and E||S||^2/E||L||^2 against the closed forms."""
    base = result.baseline
    return [
        _within(claim, f"{setting}: E||L||^2", base.total, result.total),
        _within(claim, f"{setting}: E||S||^2", base.symmetric, result.symmetric),
        _within(claim, f"{setting}: E||T||^2", base.skew, result.skew),
        _within(
            claim,
            f"{setting}: E||S||^2 / E||L||^2 = (N+1)/(2N)",
            base.symmetric_ratio,
            result.ratio_of_expectations,
            "ratio of expectations, delta-method SE",
        ),
    ]


@_shared_sections
def check_corollary1(samples: int, seed: int) -> list[Check]:
    """Corollary 1: iid square L, E||L||^2 = N^2 s2, E||S||^2 = N(N+1)/2 s2, E||T||^2 = N(N-1)/2 s2.

    The claim: docs/mathematics.md §5.
    """
    rows: list[Check] = []
    for N, law, sigma2 in COROLLARY1_SETTINGS:
        setting = f"N = {N}, {law} entries, variance {sigma2:g}, K = {samples}"
        result = montecarlo.energy_expectations(
            "square", law, N, samples=samples, sigma2=sigma2, seed=_subseed(seed, f"corollary1 {N} {law}")
        )
        rows.extend(_energy_rows("Corollary 1", setting, result))
    for N in (2, 16):
        theory = baselines.symmetric_ratio(N)
        result = montecarlo.energy_expectations(
            "square", "gaussian", N, samples=samples, seed=_subseed(seed, f"corollary1 ratio {N}")
        )
        rows.append(
            _within(
                "Corollary 1",
                f"N = {N}, Gaussian entries, K = {samples}: E[||S||^2/||L||^2] by Monte Carlo",
                theory,
                result.expectation_of_ratio,
                "expectation of the ratio",
            )
        )
        beta_mean = float(baselines.gaussian_square_law(N).mean())
        rows.append(
            Check(
                "Corollary 1",
                f"N = {N}, Gaussian entries: E[||S||^2/||L||^2] as the mean of the exact "
                f"law Beta(N(N+1)/4, N(N-1)/4)",
                theory,
                beta_mean,
                None,
                abs(beta_mean - theory) <= 1e-12,
                "exact; pass when equal to 1e-12",
            )
        )
    return rows


@_shared_sections
def check_corollary2(samples: int, seed: int) -> list[Check]:
    """Corollary 2: L = W_K^T W_Q, E||L||^2 = n N^2 sK2 sQ2, E||S||^2 = n N(N+1)/2 sK2 sQ2, ...

    The claim: docs/mathematics.md §5.
    """
    rows: list[Check] = []
    for n, N, law, var_k, var_q in COROLLARY2_SETTINGS:
        setting = f"n = {n}, N = {N}, {law}, sigma_K^2 = {var_k:g}, sigma_Q^2 = {var_q:g}, K = {samples}"
        result = montecarlo.energy_expectations(
            "qk",
            law,
            N,
            n,
            samples=samples,
            sigma2_K=var_k,
            sigma2_Q=var_q,
            seed=_subseed(seed, f"corollary2 {n} {N} {law}"),
        )
        rows.extend(_energy_rows("Corollary 2", setting, result))
    return rows


# ---------------------------------------------------------------------------
# Proposition 6

PROPOSITION6_N = 12
PROPOSITION6_NS: tuple[int, ...] = (1, 3, 6, 12)


@_shared_sections
def check_proposition6(samples: int, seed: int) -> list[Check]:
    """Proposition 6: E[||S||^2/||L||^2] = (N+1)/(2N) for Gaussian heads, independently of 1 <= n <= N.

    The claim: docs/mathematics.md §5.
    """
    N = PROPOSITION6_N
    theory = baselines.gaussian_head_ratio_expectations(1, N).symmetric
    rows: list[Check] = []
    for n in PROPOSITION6_NS:
        route = "Bartlett-Wishart" if 2 * n <= N else "C C^T (N < 2n)"
        for name, sampler, how in (
            (
                "null",
                lambda rng, size, n=n: gram.gram_energies(nulls.null_gram(rng, n, N, size)).symmetric_ratio,
                f"exact sampler nulls.null_gram ({route})",
            ),
            (
                "direct",
                lambda rng, size, n=n: _direct_symmetric_energy(rng, n, N, size),
                "direct W_K, W_Q with sigma_K^2 = 0.3, sigma_Q^2 = 5, dense L",
            ),
        ):
            s = montecarlo.draw(
                cast(montecarlo.Sampler, sampler), samples, seed=_subseed(seed, f"proposition6 {name} {n}")
            )
            setting = f"n = {n}, N = {N}: {how}, K = {samples}"
            rows.append(_within("Proposition 6", setting, theory, montecarlo.estimate_mean(s)))
    return rows


def _direct_symmetric_energy(rng: np.random.Generator, n: int, N: int, size: int) -> np.ndarray:
    """s of dense L = W_K^T W_Q with Gaussian factors of unequal variances (no Gram route involved)."""
    w_key = math.sqrt(0.3) * rng.standard_normal((size, n, N))
    w_query = math.sqrt(5.0) * rng.standard_normal((size, n, N))
    return energies.energies(np.swapaxes(w_key, 1, 2) @ w_query).symmetric_ratio


# ---------------------------------------------------------------------------
# Lemma 6

# (law, rho, finite second moment): Lemma 6 for two laws, and its Pareto contrast
LEMMA6_SETTINGS: tuple[tuple[str, float], ...] = (
    ("exponential", 0.5),
    ("half_normal", 2.0),
    ("pareto:1.5", 0.5),
)


@_shared_sections
def check_lemma6(samples: int, seed: int) -> list[Check]:
    """Lemma 6: D_n = ||beta_n - rho alpha_n||/||alpha_n|| -> 0 iff (here) the second moment is finite.

    The claim: docs/mathematics.md §3.
    """
    rows = []
    for law, rho in LEMMA6_SETTINGS:
        curve = lobes.lobe_departure_curve(
            law, rho, LOBE_SIZES, seed=_subseed(seed, f"lemma6 {law} {rho}"), repeats=LOBE_REPEATS
        )
        trail = ", ".join(f"{m:.3g}" for m in curve.mean)
        sizes = f"n = {LOBE_SIZES[0]:,} .. {LOBE_SIZES[-1]:,}"
        if lobes.positive_law(law).finite_second_moment:
            passed = bool(np.all(np.diff(curve.mean) < 0) and curve.mean[-1] <= curve.mean[0] / 10)
            setting = f"{curve.law}, rho = {rho:g}, {sizes}, {LOBE_REPEATS} repeats: D_n decreases towards 0"
            note = (
                f"mean D_n = {trail}; pass when it falls at every step and D at the largest n is at most "
                "1/10 of D at the smallest"
            )
            rows.append(
                Check("Lemma 6", setting, None, float(curve.mean[-1]), float(curve.stderr[-1]), passed, note)
            )
        else:
            # Infinite second moment: the few largest entries dominate both lobes, so D_n does not settle.
            # D_n is then heavy-tailed across repeats too, so judge by the median over repeats.
            medians = ", ".join(f"{m:.3g}" for m in curve.median)
            passed = bool(curve.median[-1] >= curve.median[0] / 2)
            setting = (
                f"{curve.law}, rho = {rho:g}, {sizes}, {LOBE_REPEATS} repeats (infinite second moment, "
                "contrast): D_n does NOT decrease"
            )
            note = (
                f"median D_n = {medians} (means {trail}); pass when the median at the largest n is at least "
                "1/2 of that at the smallest: the lemma's hypothesis fails and so does its conclusion, as "
                "expected"
            )
            rows.append(Check("Lemma 6", setting, None, float(curve.median[-1]), None, passed, note))
    return rows


# ---------------------------------------------------------------------------
# Expectation of the ratio versus ratio of expectations

# (law, departure expected): at N = 2 the skewed laws move E[s] away from (N+1)/(2N)
DEPARTURE_SETTINGS: tuple[tuple[str, bool], ...] = (
    ("exponential", True),
    ("lognormal", True),
    ("bernoulli:0.1", True),
    ("rademacher", False),
)
DEPARTURE_N = 2


@_shared_sections
def check_departures(samples: int, seed: int) -> list[Check]:
    """Skewed entries: E[s] != E||S||^2/E||L||^2 = (N+1)/(2N) (the Gaussian-symmetry hypothesis fails).

    The claim: docs/mathematics.md §5.
    """
    samples = max(samples, MIN_DEPARTURE_SAMPLES)
    N = DEPARTURE_N
    theory = baselines.symmetric_ratio(N)
    rows = []
    for law, departs in DEPARTURE_SETTINGS:
        result = montecarlo.energy_expectations(
            "square", law, N, samples=samples, seed=_subseed(seed, f"departure {law}")
        )
        estimate = result.expectation_of_ratio
        z = (estimate.value - theory) / estimate.stderr
        ratio = result.ratio_of_expectations
        ratio_z = (ratio.value - theory) / ratio.stderr
        if departs:
            passed = abs(z) > TOLERANCE_SE
            setting = (
                f"N = {N}, {law} entries, K = {samples}: E[s] departs from (N+1)/(2N) "
                f"(expected, significant beyond {TOLERANCE_SE:g} SE)"
            )
            note = (
                f"expected departure, not a failure: E[s] = {estimate.value:.4f}, z = {z:+.1f}; the ratio of "
                f"expectations still matches (N+1)/(2N): {ratio.value:.4f}, z = {ratio_z:+.1f}"
            )
        else:
            passed = abs(z) <= TOLERANCE_SE
            setting = (
                f"N = {N}, {law} entries, K = {samples}: control, ||L||^2 is constant so E[s] = (N+1)/(2N)"
            )
            note = (
                f"tolerance {TOLERANCE_SE:g} SE; ratio of expectations {ratio.value:.4f}, z = {ratio_z:+.1f}"
            )
        rows.append(
            Check("E[ratio] vs ratio of E", setting, theory, estimate.value, estimate.stderr, passed, note)
        )
    return rows


# ---------------------------------------------------------------------------
# Exact samplers against direct simulation

KS_STATISTICS: tuple[str, ...] = ("symmetric_energy", "pairing", "lobe_departure", "trace_ratio")
KS_SHAPES: tuple[tuple[int, int], ...] = ((4, 12), (2, 40))


def _ks_row(claim: str, setting: str, result: Any, sizes: str) -> Check:
    """A KS row from scipy's result (statistic, pvalue): passes when p > KS_ALPHA."""
    p = float(result.pvalue)
    note = f"KS p-value, D = {float(result.statistic):.4f}, {sizes}; pass when p > {KS_ALPHA:g}"
    return Check(claim, setting, None, p, None, bool(p > KS_ALPHA), note)


def _ks_finite(claim: str, setting: str, x: np.ndarray, y: np.ndarray, size: int) -> Check:
    """A two-sample KS row on the finite values of x and y, ``size`` draws each."""
    return _ks_row(
        claim, setting, stats.ks_2samp(x[np.isfinite(x)], y[np.isfinite(y)]), f"K = {size} vs {size}"
    )


def _ks_exact(setting: str, s: np.ndarray, law: Any, size: int) -> Check:
    """A one-sample KS row of the exact samplers: ``size`` draws s against the exact law's cdf."""
    return _ks_row("Exact samplers", setting, stats.kstest(s, law.cdf), f"K = {size} against the exact cdf")


@_shared_sections
def check_samplers(samples: int, seed: int) -> list[Check]:
    """The exact samplers and laws of docs/mathematics.md §5 and §6 against direct simulation (two- and one-sample KS)."""
    size = max(200, samples // 4)
    rows = []
    for n, N in KS_SHAPES:
        exact, direct = (
            montecarlo.draw(
                cast(montecarlo.Sampler, lambda rng, k, n=n, N=N, grams=grams: grams(rng, n, N, k)),
                size,
                seed=_subseed(seed, f"ks {route} {n} {N}"),
                transform=cast(
                    montecarlo.Transform, lambda G, N=N: head_stats.gram_statistics(G, N).stack(KS_STATISTICS)
                ),
            )
            for route, grams in (("bartlett", nulls.bartlett_gram), ("direct", nulls.direct_gram))
        )
        for j, name in enumerate(KS_STATISTICS):
            setting = f"n = {n}, N = {N}: Bartlett-Wishart G vs direct C C^T, {name}"
            rows.append(_ks_finite("Exact samplers", setting, exact[:, j], direct[:, j], size))
    for N in (3, 10):
        s = montecarlo.energy_samples(
            "square", "gaussian", N, samples=size, seed=_subseed(seed, f"ks beta {N}")
        )[:, 3]
        setting = f"N = {N}: Beta(N(N+1)/4, N(N-1)/4) law vs simulated iid Gaussian square L, s"
        rows.append(_ks_exact(setting, s, baselines.gaussian_square_law(N), size))
    for N in (2, 10):
        s = montecarlo.draw(
            cast(montecarlo.Sampler, lambda rng, k, N=N: _direct_symmetric_energy(rng, 1, N, k)),
            size,
            seed=_subseed(seed, f"ks rank one {N}"),
        )
        setting = f"n = 1, N = {N}: rank-one law (1 + Beta(1/2, (N-1)/2))/2 vs simulated Gaussian head, s"
        rows.append(_ks_exact(setting, s, baselines.rank_one_law(N), size))
    return rows


# ---------------------------------------------------------------------------
# The rotation null and the Beta tail

ROTATION_N = 12
ROTATION_RANKS: tuple[int, ...] = (1, 3, 12)


def _fixed_form(rng: np.random.Generator, rank: int, N: int) -> np.ndarray:
    """An N x N form of this rank with a geometric (strongly anisotropic) spectrum."""
    left, right = rng.standard_normal((2, N, rank))
    return (left * 2.0 ** -np.arange(rank)) @ right.T


def _haar_symmetric_energy(L: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """s(L U) for U Haar on O(N), sampled directly (QR of a Gaussian matrix with the sign fix)."""
    LU = L @ rotation.haar_orthogonal(rng, L.shape[0], size)
    return 0.5 + 0.5 * np.einsum("bij,bji->b", LU, LU) / np.sum(L * L)


@_shared_sections
def check_rotation(samples: int, seed: int) -> list[Check]:
    """E[s(L U)] = (N+1)/(2N) for ANY fixed L, U Haar; the exact block sampler against direct Haar.

    The claim: docs/mathematics.md §6.
    """
    N = ROTATION_N
    rows: list[Check] = []
    for rank in ROTATION_RANKS:
        L = _fixed_form(np.random.default_rng(_subseed(seed, f"rotation form {rank}")), rank, N)
        s = montecarlo.draw(
            cast(montecarlo.Sampler, lambda rng, size, L=L: _haar_symmetric_energy(L, rng, size)),
            samples,
            seed=_subseed(seed, f"rotation mean {rank}"),
        )
        rows.append(
            _within(
                "Rotation null",
                f"fixed L of rank {rank}, N = {N}, geometric spectrum: E[s(L U)] = (N+1)/(2N), "
                f"U Haar by QR, K = {samples}",
                baselines.symmetric_ratio(N),
                montecarlo.estimate_mean(s),
            )
        )
    size = max(200, samples // 4)
    n, rank = 4, 2
    rng = np.random.default_rng(_subseed(seed, "rotation ks head"))
    w_query = np.zeros((n, N))
    w_query[:rank] = rng.standard_normal((rank, N))
    w_key = np.diag(2.0 ** -np.arange(n)) @ rng.standard_normal((n, N))
    law = rotation.rotation_law(
        gram.head_gram(w_query, w_key), N, samples=size, seed=_subseed(seed, "rot exact")
    )

    def direct(rng: np.random.Generator, k: int) -> np.ndarray:
        rotated = np.broadcast_to(w_query, (k, n, N)) @ rotation.haar_orthogonal(rng, N, k)
        stats_ = head_stats.head_statistics(rotated, np.broadcast_to(w_key, (k, n, N)))
        return stats_.stack(rotation.ROTATION_STATISTICS)

    reference = montecarlo.draw(direct, size, seed=_subseed(seed, "rotation direct"))
    for j, name in enumerate(rotation.ROTATION_STATISTICS):
        setting = (
            f"n = {n}, N = {N}, W_Q of rank {rank}: exact block sampler B = X R^-1, R^T R = X^T X + W "
            f"vs direct Haar U, {name}"
        )
        rows.append(_ks_finite("Rotation null", setting, law.samples(name), reference[:, j], size))
    return rows


LAYER_SHAPE = (4, 2, 3, 24)  # query heads, key heads, head dim, N


def _direct_layer(rng: np.random.Generator, size: int) -> np.ndarray:
    """(s, directionality) of whole Gaussian layers: every query head, key heads repeated (GQA)."""
    H, H_kv, d, N = LAYER_SHAPE
    kv_head = np.arange(H) // (H // H_kv)
    w_query = rng.standard_normal((size, H * d, N))
    w_key = rng.standard_normal((size, H_kv, d, N))[:, kv_head].reshape(size, H * d, N)
    L = np.swapaxes(w_key, 1, 2) @ w_query
    rows, cols = dense_norms(L)
    return np.stack([energies.energies(L).symmetric_ratio, directionality(rows, cols)], axis=1)


@_shared_sections
def check_layer_null(samples: int, seed: int) -> list[Check]:
    """A whole Gaussian layer: exact mean of s, and the summed-query-groups reduction against direct sampling.

    The claim: docs/mathematics.md §8.
    """
    H, H_kv, d, N = LAYER_SHAPE
    setting = f"H = {H} query heads, {H_kv} key heads, head dim {d}, N = {N}"
    direct = montecarlo.draw(_direct_layer, samples, seed=_subseed(seed, "layer direct"))
    rows = [
        _within(
            "Layer null",
            f"{setting}: E[s] of the layer form = (N+1)/(2N), direct whole layers, K = {samples}",
            baselines.symmetric_ratio(N),
            montecarlo.estimate_mean(direct[:, 0]),
        )
    ]
    size = max(200, samples // 4)
    law = layer_null.layer_null_law([H // H_kv] * H_kv, d, N, samples=size, seed=_subseed(seed, "layer law"))
    for j, name in enumerate(layer_null.LAYER_NULL_STATISTICS):
        setting_j = f"{setting}: layer null law (one Gaussian head of n = H_kv d) vs whole layers, {name}"
        rows.append(_ks_finite("Layer null", setting_j, law.samples(name), direct[:size, j], size))
    return rows


TAIL_SHAPE = (16, 128)
TAIL_LEVELS: tuple[float, ...] = (0.01, 0.001)


@_shared_sections
def check_tails(samples: int, seed: int) -> list[Check]:
    """The Beta law matched to the null's mean and variance: exact for iid square L, close for heads.

    The claim: docs/mathematics.md §7.
    """
    N = 10
    exact = baselines.gaussian_square_law(N)
    matched = tails.matched_beta(exact.mean(), exact.var())
    assert matched is not None  # an exact Beta law always matches its own moments
    error = float(np.max(np.abs(np.subtract(matched.args, exact.args)) / np.asarray(exact.args)))
    rows = [
        _exact_row(
            "Beta tail",
            f"iid Gaussian square L, N = {N}: the Beta matched to the mean and variance of s is "
            "Beta(N(N+1)/4, N(N-1)/4), the exact law",
            error,
            "largest relative error of the two parameters",
            1e-10,
        )
    ]
    n, N = TAIL_SHAPE
    s = montecarlo.draw(
        lambda rng, size: gram.gram_energies(nulls.null_gram(rng, n, N, size)).symmetric_ratio,
        samples,
        seed=_subseed(seed, "beta tail head"),
    )
    beta = tails.matched_beta(baselines.symmetric_ratio(N), float(np.var(s, ddof=1)))
    assert beta is not None, "no Beta law matches the sampled variance"
    for q in TAIL_LEVELS:
        for side, frequency in (("lower", np.mean(s <= beta.ppf(q))), ("upper", np.mean(s >= beta.isf(q)))):
            rows.append(
                _within(
                    "Beta tail",
                    f"Gaussian head n = {n}, N = {N}: empirical frequency beyond the matched Beta's "
                    f"{side} {q:g} quantile, K = {samples}",
                    q,
                    montecarlo.Estimate(
                        float(frequency), math.sqrt(q * (1 - q) / samples), math.nan, math.nan, samples
                    ),
                    "binomial SE; the approximation behind *_p_tail",
                )
            )
    return rows


# ---------------------------------------------------------------------------
# The normalised spectrum: Lemmas 7 to 10 and Theorem 4

FACE_TOLERANCE = 1e-12
"""A profile coordinate counts as on a face of the simplex at or below this (to rounding)."""


def _spectrum_heads(rng: np.random.Generator) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(setting, w_query, w_key) batches: random, structured and rank-deficient heads."""
    families: list[tuple[str, np.ndarray, np.ndarray]] = []
    for n, N in ((1, 6), (4, 16), (8, 40)):
        w_query, w_key = rng.standard_normal((2, 16, n, N))
        families.append((f"random Gaussian heads, n = {n}, N = {N}", w_query, w_key))
    n, N = 6, 30
    scales = 2.0 ** -np.arange(n)[:, None]
    w_key = scales * rng.standard_normal((16, n, N))
    w_query = w_key + 0.3 * rng.standard_normal((16, n, N))
    families.append(
        (f"structured: W_Q = W_K + noise, geometric row scales, n = {n}, N = {N}", w_query, w_key)
    )
    A = rng.standard_normal((16, n, n))
    families.append(
        (
            f"structured: symmetric L = W_K^T A W_K, A = A^T, n = {n}, N = {N}",
            (A + np.swapaxes(A, 1, 2)) @ w_key,
            w_key,
        )
    )
    families.append(("rank-deficient: n = 6 > N/2, N = 8", *rng.standard_normal((2, 16, 6, 8))))
    repeated = rng.standard_normal((16, 5, 20))
    repeated[:, 3:] = repeated[:, :2]  # rows of W_Q repeat: C = [W_K; W_Q] has rank 8 < 10
    families.append(
        ("rank-deficient: W_Q with repeated rows, n = 5, N = 20", repeated, rng.standard_normal((16, 5, 20)))
    )
    same = rng.standard_normal((16, 4, 20))
    families.append(("rank-deficient: W_K = W_Q (S positive semidefinite), n = 4, N = 20", same, same))
    return families


def _dense_spectrum(w_query: np.ndarray, w_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalised nonzero spectra lambda (heads, k_max), zero-padded in the middle, from the N x N S; and k."""
    eigs = spectrum.dense_symmetric_eigenvalues(np.swapaxes(w_key, -1, -2) @ w_query)
    lam, kept = moments.normalised_spectrum(eigs)
    return lam, np.sum(kept, axis=-1)


@_shared_sections
def check_lemma7(samples: int, seed: int) -> list[Check]:
    """Lemma 7: ||lambda_+||^2 = (1 + I)/2, ||lambda_-||^2 = (1 - I)/2, ||lambda_+ - lambda_-||^2 = 1 - 2C, P = 1 - sqrt(1 - 2C).

    The claim: docs/mathematics.md §9.
    """
    rng = np.random.default_rng(_subseed(seed, "lemma7"))
    what = (
        "largest error of the four identities (I, C, pairing from the Gram route, lobes from the "
        "N x N S) and of 0 <= 2C <= 1"
    )
    rows = []
    for setting, w_query, w_key in _spectrum_heads(rng):
        stats_ = head_stats.head_statistics(w_query, w_key)
        I, C, P = stats_.lobe_imbalance, stats_.lobe_overlap, stats_.pairing
        plus, minus = spectrum.lobes(_dense_spectrum(w_query, w_key)[0], zero_tol=0.0)
        errors = [
            np.sum(plus * plus, axis=-1) - (1 + I) / 2,
            np.sum(minus * minus, axis=-1) - (1 - I) / 2,
            np.sum((plus - minus) ** 2, axis=-1) - (1 - 2 * C),
            P - (1 - np.sqrt(1 - 2 * C)),
            np.minimum(2 * C, 0.0),
            np.maximum(2 * C - 1, 0.0),
        ]
        rows.append(_exact_row("Lemma 7", setting, float(np.max(np.abs(errors))), what))
    return rows


@_shared_sections
def check_lemma8(samples: int, seed: int) -> list[Check]:
    """Lemma 8: iota is an orthogonal involution, I o iota = -I, C and P invariant, P = 1 - ||lambda - iota lambda||/sqrt 2.

    The claim: docs/mathematics.md §9.
    """
    rng = np.random.default_rng(_subseed(seed, "lemma8"))
    what = (
        "largest error of iota^2 = id, <iota x, iota y> = <x, y>, I o iota = -I, C o iota = C, "
        "P o iota = P, P = 1 - ||lambda - iota lambda||/sqrt 2, and of the columns of -L against L's"
    )
    rows = []
    for setting, w_query, w_key in _spectrum_heads(rng):
        plus, minus = spectrum.lobes(_dense_spectrum(w_query, w_key)[0], zero_tol=0.0)
        # lambda with its lobes lined up: zeros in the middle when n_pos != n_neg (n > N/2)
        lam = np.concatenate([-minus, np.flip(plus, axis=-1)], axis=-1)
        mirrored = moments.involution(lam)
        x, y = rng.standard_normal((2, *lam.shape))
        plus_i, minus_i = spectrum.lobes(mirrored, zero_tol=0.0)

        def lobe_stats(p: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            I = np.sum(p * p, axis=-1) - np.sum(m * m, axis=-1)
            C = np.sum(p * m, axis=-1)
            return I, C, 1 - np.sqrt(np.sum((p - m) ** 2, axis=-1))

        I, C, P = lobe_stats(plus, minus)
        I_i, C_i, P_i = lobe_stats(plus_i, minus_i)
        # on the heads: -L has spectrum iota lambda; the Gram route's columns follow
        mine, negated = (head_stats.head_statistics(q, w_key) for q in (w_query, -w_query))
        errors = [
            np.max(np.abs(moments.involution(mirrored) - lam), axis=-1),
            np.sum(moments.involution(x) * moments.involution(y), axis=-1) - np.sum(x * y, axis=-1),
            I_i + I,
            C_i - C,
            P_i - P,
            P - (1 - np.linalg.norm(lam - mirrored, axis=-1) / math.sqrt(2)),
            negated.lobe_imbalance + mine.lobe_imbalance,
            negated.lobe_overlap - mine.lobe_overlap,
            negated.pairing - mine.pairing,
        ]
        rows.append(_exact_row("Lemma 8", setting, float(np.max(np.abs(errors))), what))
    return rows


@_shared_sections
def check_lemma9(samples: int, seed: int) -> list[Check]:
    """Lemma 9: O = (R - R o iota)/2, k + E = (R + R o iota)/2, and the power series of O, E, R.

    The claim: docs/mathematics.md §9.
    """
    rng = np.random.default_rng(_subseed(seed, "lemma9"))
    rows = []
    for setting, w_query, w_key in _spectrum_heads(rng):
        mine, negated = (head_stats.head_statistics(q, w_key) for q in (w_query, -w_query))
        O, E, R = mine.moment_O, mine.moment_E, mine.moment_R
        R_iota = negated.moment_R  # the spectrum of -L is iota lambda
        lam, k = _dense_spectrum(w_query, w_key)
        # power sums p_j = sum lambda_i^j, summed until the largest |lambda|^j is below 1e-17
        top = float(np.max(np.abs(lam)))
        terms = min(math.ceil(math.log(1e-17) / math.log(top)), 100_000) if 0 < top < 1 else 1
        powers = np.cumprod(np.broadcast_to(lam, (terms, *lam.shape)), axis=0)  # lambda^1 .. lambda^terms
        p = np.sum(powers, axis=-1)  # (terms, heads)
        odd, even = p[0::2], p[1::2]
        scale = 1.0 + np.abs(R)
        errors = [
            (O - (R - R_iota) / 2) / scale,
            (k + E - (R + R_iota) / 2) / scale,
            (O - np.sum(odd, axis=0)) / scale,
            (E - np.sum(even, axis=0)) / scale,
            (R - k - np.sum(p, axis=0)) / scale,
        ]
        rows.append(
            _exact_row(
                "Lemma 9",
                setting,
                float(np.max(np.abs(errors))),
                f"largest error relative to 1 + |R| of the two identities (R o iota from -L) and of the power "
                f"series O = sum p_odd, E = sum p_even, R = k + sum p_j ({terms} terms, p_j = sum lambda^j)",
            )
        )
    return rows


@_shared_sections
def check_lemma10(samples: int, seed: int) -> list[Check]:
    """Lemma 10: S = M^T J M/2, tr(S^j) = tr((JG/2)^j), ||S||^2 = tr((JG)^2)/4, O, E, R as traces of H = JG/(2||S||).

    The claim: docs/mathematics.md §9.
    """
    rng = np.random.default_rng(_subseed(seed, "lemma10"))
    what = (
        "largest relative error of S = M^T J M/2, ||S||^2 = tr((JG)^2)/4, tr(S^j) = tr((JG/2)^j) "
        "(j = 1..6, relative to ||S||^j) and of the moment columns against the traces "
        "tr(H (I - H^2)^-1), tr(H^2 (I - H^2)^-1), tr((I - H)^-1) - (2n - k)"
    )
    rows = []
    for setting, w_query, w_key in _spectrum_heads(rng):
        n = w_query.shape[-2]
        M = np.concatenate([w_key, w_query], axis=-2)  # [W_K; W_Q]
        G = M @ np.swapaxes(M, -1, -2)
        JG = np.concatenate([G[:, n:], G[:, :n]], axis=-2)
        L = np.swapaxes(w_key, -1, -2) @ w_query
        S = 0.5 * (L + np.swapaxes(L, -1, -2))
        swap = np.block([[np.zeros((n, n)), np.eye(n)], [np.eye(n), np.zeros((n, n))]])
        norm_s = np.sqrt(np.sum(S * S, axis=(-2, -1)))
        errors = [np.max(np.abs(0.5 * np.swapaxes(M, -1, -2) @ swap @ M - S), axis=(-2, -1)) / norm_s]
        errors.append(np.abs(np.einsum("bij,bji->b", JG, JG) / 4 - norm_s**2) / norm_s**2)
        S_power, H_power = np.eye(S.shape[-1]), np.eye(2 * n)
        for j in range(1, 7):
            S_power, H_power = S_power @ S, H_power @ (JG / 2)
            errors.append(
                np.abs(np.trace(S_power, axis1=-2, axis2=-1) - np.trace(H_power, axis1=-2, axis2=-1))
                / norm_s**j
            )
        mine = head_stats.head_statistics(w_query, w_key)
        nonzero = mine.n_pos + mine.n_neg
        traced = moments.trace_moments(moments.gram_operator(G), nonzero)
        for name in ("moment_O", "moment_E", "moment_R"):
            column = getattr(mine, name)
            errors.append(np.abs(column - traced[name]) / (1 + np.abs(traced[name])))
        rows.append(_exact_row("Lemma 10", setting, float(np.max(errors)), what))
    return rows


def _head_with_spectrum(
    rng: np.random.Generator, positive: np.ndarray, negative: np.ndarray, N: int
) -> tuple[np.ndarray, np.ndarray]:
    """(w_query, w_key), n = len(positive) = len(negative), whose S has eigenvalues positive and -negative.

    M = Q D O U^T: Q^T J Q = diag(I, -I) for Q = [[I, I], [I, -I]]/sqrt 2, D = diag(sqrt(2 positive),
    sqrt(2 negative)), O a random rotation, U an N x 2n orthonormal frame; then
    M^T J M/2 = U O^T diag(positive, -negative) O U^T.
    """
    n = len(positive)
    eye = np.eye(n)
    Q = np.block([[eye, eye], [eye, -eye]]) / math.sqrt(2)
    D = np.sqrt(2 * np.concatenate([positive, negative]))
    O = np.linalg.qr(rng.standard_normal((2 * n, 2 * n)))[0]
    U = np.linalg.qr(rng.standard_normal((N, 2 * n)))[0]
    M = (Q * D) @ O @ U.T
    return M[n:], M[:n]


def _symmetric_head(rng: np.random.Generator, spectrum: np.ndarray, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(w_query, w_key) of a symmetric L = W_K^T A W_K with the eigenvalues ``spectrum`` (W_K orthonormal rows)."""
    n = len(spectrum)
    w_key = np.linalg.qr(rng.standard_normal((N, n)))[0].T
    O = np.linalg.qr(rng.standard_normal((n, n)))[0]
    return (O * spectrum) @ O.T @ w_key, w_key


def _face_row(setting: str, on: np.ndarray, off: np.ndarray, condition: str, exact: bool) -> Check:
    """Theorem 4's row: the heads ``on`` the face give at most the limit, those ``off`` it more."""
    limit = 0.0 if exact else FACE_TOLERANCE
    worst, nearest = float(np.max(on)), float(np.min(off))
    bound = "exactly 0" if exact else f"at most {limit:g}"
    note = (
        f"{condition}; pass when the heads on the face give {bound} and those off it more "
        f"(smallest off the face: {nearest:.3g}); tolerance 1e-12"
    )
    worst = worst if math.isfinite(worst) else math.inf
    return Check("Theorem 4", setting, 0.0, worst, None, bool(worst <= limit < nearest), note)


@_shared_sections
def check_theorem4(samples: int, seed: int) -> list[Check]:
    """Theorem 4: which heads the profile (a, b, c, d) sends to each face of its simplex.

    Each row builds heads that satisfy the face's condition and heads that just miss it,
    and passes when the first land on the face (the coordinate exactly 0 where the
    condition is a strict inequality of eigenvalues, at most FACE_TOLERANCE where it is an
    equality) and the second do not.

    The claim: docs/mathematics.md §9.
    """
    rng = np.random.default_rng(_subseed(seed, "theorem4"))
    n, N, count = 4, 24, 12
    rows: list[Check] = []

    def heads(
        make: Callable[[], tuple[np.ndarray, np.ndarray]], sign: float = 1.0
    ) -> head_stats.HeadStatistics:
        pairs = [make() for _ in range(count)]
        return head_stats.head_statistics(
            sign * np.stack([q for q, _ in pairs]), np.stack([k for _, k in pairs])
        )

    def lobe(scale: float = 1.0) -> np.ndarray:
        return np.sort(scale * rng.uniform(0.2, 1.0, n))[::-1]

    def face(setting: str, on: np.ndarray, off: np.ndarray, condition: str, exact: bool = False) -> None:
        rows.append(_face_row(setting, on, off, condition, exact))

    def dominated(first: float) -> tuple[np.ndarray, np.ndarray]:
        # alpha_i < beta_i for every i; first > 1 makes alpha_1 > beta_1 (the condition fails)
        negative = lobe()
        positive = negative * rng.uniform(0.3, 0.9, n)
        positive[0] = negative[0] * first
        return _head_with_spectrum(rng, positive, negative, N)

    def paired(shift: float) -> tuple[np.ndarray, np.ndarray]:
        positive = lobe()
        return _head_with_spectrum(rng, positive, positive * (1 + shift), N)

    random_heads = heads(lambda: (rng.standard_normal((n, N)), rng.standard_normal((n, N))))
    symmetric = heads(lambda: _symmetric_head(rng, rng.standard_normal(n), N))
    face(
        "face a = 0: symmetric L = W_K^T A W_K (A = A^T) vs Gaussian heads",
        symmetric.a,
        random_heads.a,
        "a = 0 exactly when L = L^T",
    )
    skew = heads(lambda: _skew_head(rng, n, N))
    face(
        "vertex a = 1: skew L = W_K^T A W_K (A = -A^T) vs Gaussian heads",
        1 - skew.a,
        1 - random_heads.a,
        "a = 1 exactly when S = 0",
    )
    semidefinite = heads(lambda: _head_with_spectrum(rng, lobe(), np.zeros(n), N))  # rank-deficient: rank n
    both = heads(lambda: _head_with_spectrum(rng, lobe(), lobe(0.05), N))
    face(
        "face b = 0: S positive semidefinite (rank-deficient [W_K; W_Q]) vs a negative lobe 1/20 of the positive",
        semidefinite.b + semidefinite.c * semidefinite.d,
        both.b,
        "b = 0 exactly when one lobe is empty, and then c d = 0: nothing lands inside the face b = 0 or on "
        "the open edge c-d",
        exact=True,
    )
    below, above = heads(lambda: dominated(0.9)), heads(lambda: dominated(1.05))
    face(
        "face c = 0: alpha_i < beta_i for every i vs alpha_1 = 1.05 beta_1",
        below.c,
        above.c,
        "c = 0 exactly when lambda_+ <= lambda_- entrywise",
        exact=True,
    )

    # L -> -L swaps the lobes: the same heads with W_Q negated lie on d = 0
    face(
        "face d = 0: beta_i < alpha_i for every i (W_Q -> -W_Q of the heads above) vs beta_1 = 1.05 alpha_1",
        heads(lambda: dominated(0.9), sign=-1.0).d,
        heads(lambda: dominated(1.05), sign=-1.0).d,
        "d = 0 exactly when lambda_- <= lambda_+ entrywise",
        exact=True,
    )
    mirrored, nearly = heads(lambda: paired(0.0)), heads(lambda: paired(0.01))
    face(
        "edge c = d = 0: alpha = beta (spectrum of S symmetric about 0) vs beta = 1.01 alpha",
        np.maximum(
            mirrored.c + mirrored.d, np.abs(mirrored.lobe_imbalance) + np.abs(1 - 2 * mirrored.lobe_overlap)
        ),
        nearly.c + nearly.d,
        "c + d = 0 (and I = 0, 2C = 1) to rounding exactly when lambda = iota lambda",
    )
    pm = heads(lambda: _symmetric_head(rng, np.repeat(lobe()[: n // 2], 2) * np.tile([1, -1], n // 2), N))
    face(
        "vertex b = 1: symmetric L with eigenvalues in +-pairs vs Gaussian heads",
        1 - pm.b,
        1 - random_heads.b,
        "b = 1 exactly when L is symmetric with alpha = beta",
    )
    psd = heads(lambda: _symmetric_head(rng, lobe(), N))
    face(
        "vertex c = 1: symmetric positive definite A in L = W_K^T A W_K vs Gaussian heads",
        1 - psd.c,
        1 - random_heads.c,
        "c = 1 exactly when L is symmetric positive semidefinite",
    )
    nsd = heads(lambda: _symmetric_head(rng, -lobe(), N))
    face(
        "vertex d = 1: symmetric negative definite A vs Gaussian heads",
        1 - nsd.d,
        1 - random_heads.d,
        "d = 1 exactly when L is symmetric negative semidefinite",
    )
    return rows


def _skew_head(rng: np.random.Generator, n: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(w_query, w_key) of a skew L = W_K^T A W_K, A = -A^T."""
    w_key = rng.standard_normal((n, N))
    A = rng.standard_normal((n, n))
    return (A - A.T) @ w_key, w_key


# ---------------------------------------------------------------------------

CHECKS: tuple[CheckFunction, ...] = (
    check_lemma5,
    check_corollary1,
    check_corollary2,
    check_proposition6,
    check_lemma6,
    check_departures,
    check_samplers,
    check_rotation,
    check_layer_null,
    check_tails,
    check_lemma7,
    check_lemma8,
    check_lemma9,
    check_lemma10,
    check_theorem4,
)
"""The checks run_checks runs, in table order (tests replace this to inject a failure)."""


def run_checks(samples: int = DEFAULT_SAMPLES, seed: int = 0, progress: bool = False) -> list[Check]:
    """Every claim of the specification checked numerically: one Check per claim per setting.

    Parameters
    ----------
    samples : int
        Monte Carlo draws per row (the skewed-law rows use at least MIN_DEPARTURE_SAMPLES, the KS
        rows samples/4 per side).
    seed : int
        The run's seed: the run is reproducible.
    progress : bool
        Show a transient progress bar on stderr.

    Returns
    -------
    list of Check
        In the order of ``CHECKS``; :func:`qkenergy.verify` wraps them in a Verification.
    """
    samples = check_integer(samples, "samples", 2)
    seed = check_integer(seed, "seed", 0)
    if not progress:
        return [row for check in CHECKS for row in check(samples, seed)]
    from qkenergy.base.formatting import progress_bar

    rows: list[Check] = []
    with progress_bar("verifying {task.fields[claim]}", stderr=True) as bar:
        task = bar.add_task("verify", total=len(CHECKS), claim="")
        for check in CHECKS:
            bar.update(task, claim=check.__name__.removeprefix("check_"))
            rows.extend(check(samples, seed))
            bar.advance(task)
    return rows
