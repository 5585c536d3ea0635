"""Per-head statistics of L = W_K^T W_Q under the paper's names (docs/mathematics.md §3).

Two routes give the same numbers: `gram_statistics` from the 2n x 2n Gram
matrix G (docs/mathematics.md §4, the Gram route, O(n^2 N) per head) and `dense_statistics`
from the N x N matrix L (the O(N^3) reference). Both reduce a head to

    the eigenvalues of S, ||S||^2, ||T||^2, tr L, the singular values h of L,

and `_statistics_from_spectra` turns these into every statistic. All work is
vectorised over heads with stacked linear algebra.

A head whose L is zero, or whose weights are not finite, gets NaN for every
statistic and a `reason`. A statistic undefined on its own for a fine head
(e.g. lobe_departure when S is positive semidefinite) is NaN with reason "".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from qkenergy.base.parallel import single_threaded_blas, thread_map
from qkenergy.math.energies import (
    divide_or_nan,
    energies,
    power_of_two_scale,
    rescale_by_power_of_two,
    scale_by_power_of_two,
)
from qkenergy.math.gram import (
    gram_norm_sq,
    gram_trace,
    head_dim,
    head_gram,
    key_block,
    max_abs,
    piece_gram,
    query_block,
    query_pieces,
)
from qkenergy.math.head_types import EDGE_CUT, IMBALANCE_CUT, RADIUS, head_types, profile_imbalance
from qkenergy.math.moments import MOMENT_STATISTICS, lobe_moments
from qkenergy.math.spectrum import (
    block_singular_values,
    block_skew_energy,
    block_symmetric_core,
    dense_singular_values,
    dense_symmetric_eigenvalues,
    eigenvalue_tolerance,
    lobes,
    psd_factor_lower,
    singular_values,
    skew_core,
    symmetric_core,
    triangular_blocks,
)

STATISTICS: tuple[str, ...] = (
    "symmetric_energy",
    "a",
    "b",
    "c",
    "d",
    "b_sym",
    "c_sym",
    "d_sym",
    "imbalance",
    "balance",
    "n_pos",
    "n_neg",
    "n_zero",
    "rho",
    "pairing",
    "pairing_bound",
    "pairing_gap",
    "lobe_departure",
    "trace_ratio",
    "participation_ratio",
    "stable_rank",
    "leading_share",
    "limit_b_sym",
    "limit_c_sym",
    "limit_d_sym",
    "limit_distance",
    *MOMENT_STATISTICS,
)

# Statistics that need the singular values h of L (an extra n x n eigenproblem per head).
SINGULAR_VALUE_STATISTICS: tuple[str, ...] = ("participation_ratio", "stable_rank", "leading_share")

REASON_ZERO_HEAD = "zero head (L = 0)"
REASON_NON_FINITE = "non-finite weights"

# A head is a zero head when ||L|| <= ZERO_HEAD_TOL * ||W_K|| ||W_Q|| (always
# ||L|| <= ||W_K|| ||W_Q||). Below that, L is at the rounding level of the
# float64 Gram product and its ratios would be noise. L can vanish with
# nonzero W_K, W_Q (rows of W_K orthogonal to rows of W_Q), hence relative.
ZERO_HEAD_TOL = 1e-6


@dataclass(frozen=True)
class HeadStatistics:
    """Statistics of a batch of heads: arrays of the batch shape (docs/mathematics.md §3).

    Scalars in `STATISTICS` order; `head_type` ("II", "I+", "I-", "" when
    undefined; :mod:`qkenergy.math.head_types`); `reason` ("" for a fine head, else why its statistics are
    NaN); lobes `alpha`, `beta` of shape (..., m), decreasing, zero-padded,
    in units of ||L|| (the eigenvalues of S / ||L||, so the weights' scale
    drops out); m = n on the Gram route, N on the dense route.

    Parameters
    ----------
    symmetric_energy, a, b, c, d, b_sym, c_sym, d_sym, imbalance, balance, n_pos, n_neg, n_zero, rho, pairing, pairing_bound, pairing_gap, lobe_departure, trace_ratio, participation_ratio, stable_rank, leading_share, limit_b_sym, limit_c_sym, limit_d_sym, limit_distance, lobe_imbalance, lobe_overlap, moment_O, moment_E, moment_R : (...) ndarray
        The scalar statistics, float (docs/columns.md; each field's comment gives its formula).
    head_type : (...) ndarray of str
        "II", "I+", "I-" or "".
    reason : (...) ndarray of str
        "" for a fine head, else why its statistics are NaN.
    alpha, beta : (..., m) ndarray
        The positive and negative lobes of S in units of ||L||, decreasing, zero-padded.
    """

    symmetric_energy: np.ndarray  # s = ||S||^2/||L||^2 (Lemma 5)
    a: np.ndarray  # ||T||^2/||L||^2
    b: np.ndarray  # 2<alpha, beta>/||L||^2
    c: np.ndarray  # ||(alpha - beta)_+||^2/||L||^2
    d: np.ndarray  # ||(alpha - beta)_-||^2/||L||^2
    b_sym: np.ndarray  # b/s
    c_sym: np.ndarray  # c/s
    d_sym: np.ndarray  # d/s
    imbalance: np.ndarray  # (c - d)/(c + d): the profile imbalance of the published type rule
    balance: np.ndarray  # 1 - |n_pos - n_neg|/(n_pos + n_neg)
    n_pos: np.ndarray  # positive eigenvalues of S (float: NaN for failed heads)
    n_neg: np.ndarray  # negative eigenvalues of S
    n_zero: np.ndarray  # N - n_pos - n_neg
    rho: np.ndarray  # ||beta||/||alpha|| (+inf when S != 0 is negative semidefinite)
    pairing: np.ndarray  # 1 - ||alpha - beta||/||S||
    pairing_bound: np.ndarray  # 1 - |1 - rho|/sqrt(1 + rho^2) (pairing lemma: >= pairing)
    pairing_gap: np.ndarray  # pairing_bound - pairing
    lobe_departure: np.ndarray  # ||beta - rho alpha||/||beta|| (Lemma 6)
    trace_ratio: np.ndarray  # |tr L|/||L||
    participation_ratio: np.ndarray  # (sum h^2)^2/sum h^4
    stable_rank: np.ndarray  # sum h^2/h_1^2
    leading_share: np.ndarray  # h_1^2/sum h^2
    limit_b_sym: np.ndarray  # accumulation limit 2 rho/(1 + rho^2)
    limit_c_sym: np.ndarray  # (1 - rho)_+^2/(1 + rho^2)
    limit_d_sym: np.ndarray  # (rho - 1)_+^2/(1 + rho^2)
    limit_distance: np.ndarray  # ||(b_sym, c_sym, d_sym) - limit profile||
    lobe_imbalance: np.ndarray  # I = ||lambda_+||^2 - ||lambda_-||^2 of the normalised spectrum (Lemma 7)
    lobe_overlap: np.ndarray  # C = <lambda_+, lambda_->, 0 <= 2C <= 1 (Lemma 7)
    moment_O: np.ndarray  # sum lambda/(1 - lambda^2) (Lemma 9)
    moment_E: np.ndarray  # sum lambda^2/(1 - lambda^2)
    moment_R: np.ndarray  # sum 1/(1 - lambda), over the nonzero spectrum
    head_type: np.ndarray
    reason: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """Name -> 1-D array over the flattened batch: the scalars, head_type, reason."""
        names = (*STATISTICS, "head_type", "reason")
        return {name: np.asarray(getattr(self, name)).reshape(-1) for name in names}

    def stack(self, names: Sequence[str]) -> np.ndarray:
        """The scalar statistics ``names`` as the columns of one float64 array (heads, len(names))."""
        columns = [np.asarray(getattr(self, name), dtype=np.float64).reshape(-1) for name in names]
        return np.stack(columns, axis=1)


def _norm(x: np.ndarray) -> np.ndarray:
    """Euclidean norm over the last axis (of a lobe)."""
    return np.sqrt(np.sum(x * x, axis=-1))


def _statistics_from_spectra(
    *,
    eigs: np.ndarray,
    norm_s_sq: np.ndarray,
    norm_t_sq: np.ndarray,
    norm_l_sq: np.ndarray,
    trace_l: np.ndarray,
    h: np.ndarray | None,
    N: int,
    lobe_length: int,
    reason: np.ndarray,
    radius: float,
    zero_tol: float,
    type_rule: str = "imbalance",
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
) -> dict[str, np.ndarray]:
    """Every statistic of docs/mathematics.md §3 for heads (H,) from their spectra.

    eigs: eigenvalues of S (H, k); norm_s_sq, norm_t_sq, norm_l_sq: ||S||^2,
    ||T||^2, ||L||^2 (= ||S||^2 + ||T||^2, Lemma 5); trace_l: tr L; h:
    singular values of L, descending (None: their statistics are NaN);
    reason: failures; type_rule, radius, imbalance_cut, edge_cut: the head type
    (:func:`qkenergy.math.head_types.head_types`).
    """
    symmetric_energy = divide_or_nan(norm_s_sq, norm_l_sq)
    a = divide_or_nan(norm_t_sq, norm_l_sq)

    # When ||S|| is at the rounding level of ||L|| (L antisymmetric), the
    # computed eigenvalues of S are noise: S counts as 0, as on the dense route.
    symmetric_vanishes = norm_s_sq <= zero_tol**2 * norm_l_sq
    eigs = np.where(symmetric_vanishes[:, None], 0.0, eigs)
    alpha, beta = lobes(eigs, zero_tol=zero_tol, length=lobe_length)
    tol = eigenvalue_tolerance(eigs, zero_tol)
    n_pos = np.sum(eigs > tol, axis=-1).astype(np.float64)
    n_neg = np.sum(eigs < -tol, axis=-1).astype(np.float64)
    n_zero = N - n_pos - n_neg
    balance = 1.0 - divide_or_nan(np.abs(n_pos - n_neg), n_pos + n_neg)

    # Profile pi(L) = (a, b, c, d) and the symmetric profile (b, c, d)/s.
    lobe_gap = alpha - beta
    inner = np.sum(alpha * beta, axis=-1)
    excess_sq = np.sum(np.maximum(lobe_gap, 0.0) ** 2, axis=-1)
    deficit_sq = np.sum(np.minimum(lobe_gap, 0.0) ** 2, axis=-1)
    b = divide_or_nan(2.0 * inner, norm_l_sq)
    c = divide_or_nan(excess_sq, norm_l_sq)
    d = divide_or_nan(deficit_sq, norm_l_sq)
    norm_s_sq_defined = np.where(symmetric_vanishes, 0.0, norm_s_sq)
    b_sym = divide_or_nan(2.0 * inner, norm_s_sq_defined)
    c_sym = divide_or_nan(excess_sq, norm_s_sq_defined)
    d_sym = divide_or_nan(deficit_sq, norm_s_sq_defined)

    # rho = ||beta||/||alpha|| is +inf when S != 0 is negative semidefinite.
    # The pairing bound and the limit profile are written homogeneously in
    # (||alpha||, ||beta||), so that case needs no special formula there.
    norm_alpha = _norm(alpha)
    norm_beta = _norm(beta)
    lobes_sq = norm_alpha**2 + norm_beta**2
    rho = np.where(norm_alpha > 0, norm_beta / np.where(norm_alpha > 0, norm_alpha, 1.0), np.inf)
    rho = np.where(lobes_sq > 0, rho, np.nan)
    pairing = 1.0 - divide_or_nan(_norm(lobe_gap), np.sqrt(norm_s_sq_defined))
    pairing_bound = 1.0 - divide_or_nan(np.abs(norm_alpha - norm_beta), np.sqrt(lobes_sq))
    pairing_gap = pairing_bound - pairing
    both_lobes = (norm_alpha > 0) & (norm_beta > 0)
    finite_rho = np.where(both_lobes, rho, 0.0)
    lobe_departure = np.where(
        both_lobes, divide_or_nan(_norm(beta - finite_rho[:, None] * alpha), norm_beta), np.nan
    )

    trace_ratio = divide_or_nan(np.abs(trace_l), np.sqrt(norm_l_sq))

    head_type = head_types(
        c, d, c_sym, d_sym, type_rule=type_rule, radius=radius, imbalance_cut=imbalance_cut, edge_cut=edge_cut
    )
    # Lemmas 7-10: the normalised spectrum lambda (eigenvalues of S over their norm; on the Gram
    # route those of the 2n x 2n core, never of the N x N S).
    spectrum_shape = lobe_moments(eigs, alpha, beta, zero_tol=zero_tol)

    values = {
        "symmetric_energy": symmetric_energy,
        "a": a,
        "b": b,
        "c": c,
        "d": d,
        "b_sym": b_sym,
        "c_sym": c_sym,
        "d_sym": d_sym,
        "imbalance": profile_imbalance(c, d),
        "balance": balance,
        "n_pos": n_pos,
        "n_neg": n_neg,
        "n_zero": n_zero,
        "rho": rho,
        "pairing": pairing,
        "pairing_bound": pairing_bound,
        "pairing_gap": pairing_gap,
        "lobe_departure": lobe_departure,
        "trace_ratio": trace_ratio,
        **_singular_value_statistics(h, len(reason)),
        **_accumulation_limit(norm_alpha, norm_beta, lobes_sq, b_sym, c_sym, d_sym),
        **spectrum_shape,
    }
    return _mask_failed(values, head_type, reason, alpha, beta, norm_l_sq)


def _accumulation_limit(
    norm_alpha: np.ndarray,
    norm_beta: np.ndarray,
    lobes_sq: np.ndarray,
    b_sym: np.ndarray,
    c_sym: np.ndarray,
    d_sym: np.ndarray,
) -> dict[str, np.ndarray]:
    """The accumulation limit (2 rho, (1 - rho)_+^2, (rho - 1)_+^2)/(1 + rho^2) and the profile's distance to it."""
    limit_b_sym = divide_or_nan(2.0 * norm_alpha * norm_beta, lobes_sq)
    limit_c_sym = divide_or_nan(np.maximum(norm_alpha - norm_beta, 0.0) ** 2, lobes_sq)
    limit_d_sym = divide_or_nan(np.maximum(norm_beta - norm_alpha, 0.0) ** 2, lobes_sq)
    return {
        "limit_b_sym": limit_b_sym,
        "limit_c_sym": limit_c_sym,
        "limit_d_sym": limit_d_sym,
        "limit_distance": np.sqrt(
            (b_sym - limit_b_sym) ** 2 + (c_sym - limit_c_sym) ** 2 + (d_sym - limit_d_sym) ** 2
        ),
    }


def _singular_value_statistics(h: np.ndarray | None, heads: int) -> dict[str, np.ndarray]:
    """participation_ratio, stable_rank, leading_share from the singular values h of L (None: NaN)."""
    h_sq = np.full((heads, 1), np.nan) if h is None else h * h
    sum_h_sq = np.sum(h_sq, axis=-1)
    leading_sq = h_sq[:, 0] if h_sq.shape[-1] else np.zeros(h_sq.shape[0])
    return {
        "participation_ratio": divide_or_nan(sum_h_sq**2, np.sum(h_sq * h_sq, axis=-1)),
        "stable_rank": divide_or_nan(sum_h_sq, leading_sq),
        "leading_share": divide_or_nan(leading_sq, sum_h_sq),
    }


def _mask_failed(
    values: dict[str, np.ndarray],
    head_type: np.ndarray,
    reason: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    norm_l_sq: np.ndarray,
) -> dict[str, np.ndarray]:
    """NaN statistics and no type for failed heads; the head type, reason and lobes added."""
    failed = reason != ""
    for name in STATISTICS:
        values[name] = np.where(failed, np.nan, values[name])
    values["head_type"] = np.where(failed, "", head_type).astype("<U2")
    values["reason"] = reason
    # The Gram route rescales W_K and W_Q separately, so absolute eigenvalues
    # carry no meaning: report the lobes in units of ||L||, where
    # b = 2<alpha, beta>, c = ||(alpha - beta)_+||^2 and ||alpha||^2 + ||beta||^2 = s.
    unit = np.sqrt(np.where(failed, 1.0, norm_l_sq))[:, None]
    values["alpha"] = np.where(failed[:, None], np.nan, alpha / unit)
    values["beta"] = np.where(failed[:, None], np.nan, beta / unit)
    return values


def _assemble(values: dict[str, np.ndarray], batch: tuple[int, ...]) -> HeadStatistics:
    """Reshape flat (H, ...) arrays to the batch shape."""
    shaped = {
        field.name: values[field.name].reshape(batch + values[field.name].shape[1:])
        for field in fields(HeadStatistics)
    }
    return HeadStatistics(**shaped)


def _failure_reason(non_finite: np.ndarray, zero_head: np.ndarray) -> np.ndarray:
    reason = np.where(zero_head, REASON_ZERO_HEAD, "")
    return np.where(non_finite, REASON_NON_FINITE, reason).astype(str)


def _prepare_gram(G: np.ndarray, *, owned: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Flat (H, 2n, 2n) float64 Gram matrices, rescaled, failed heads replaced; and their reasons.

    ``owned``: G is a float64 array made for this call (piece_gram's), rescaled in place;
    otherwise the caller's G is left as it is.
    """
    n = head_dim(G)
    G = np.asarray(G, dtype=np.float64).reshape(-1, 2 * n, 2 * n)
    largest = max_abs(G)  # NaN anywhere in a head gives NaN
    non_finite = ~np.isfinite(largest)
    G = scale_by_power_of_two(G, -power_of_two_scale(largest)[:, None, None], out=G if owned else None)
    # Failed heads are computed on a harmless stand-in and overwritten with NaN.
    stand_in = np.eye(2 * n)
    if np.any(non_finite):
        G[non_finite] = stand_in
    weight_scale = np.trace(key_block(G), axis1=-2, axis2=-1) * np.trace(query_block(G), axis1=-2, axis2=-1)
    zero_head = ~non_finite & (gram_norm_sq(G) <= ZERO_HEAD_TOL**2 * weight_scale)
    if np.any(zero_head):
        G[zero_head] = stand_in
    return G, _failure_reason(non_finite, zero_head)


# Heads whose block route runs as one stack: their 2n x 2n arrays (factor, core) hold about
# this many float64 values (2 MiB), so that the blocks and cores of a stack are still in
# cache for the next step (5% of a layer at n = 128: 4 heads a stack rather than 8).
_SPECTRA_STACK_VALUES = 1 << 18


def _block_spectra(V: np.ndarray, *, with_h: bool) -> dict[str, np.ndarray | None]:
    """Spectra of heads from lower Cholesky factors V of their G (see spectrum.triangular_blocks).

    The heads go in stacks of at least two (numpy releases the GIL for a stack
    of eigenproblems, not for a single one) and about _SPECTRA_STACK_VALUES values.
    """
    stack = max(2, _SPECTRA_STACK_VALUES // V.shape[-1] ** 2)
    if len(V) > stack:
        parts = [_block_spectra(V[start : start + stack], with_h=with_h) for start in range(0, len(V), stack)]
        return {
            key: None if parts[0][key] is None else np.concatenate([part[key] for part in parts])
            for key in parts[0]
        }
    X, Y, Z = triangular_blocks(V)
    core = block_symmetric_core(X, Y, upper_only=True)
    n = X.shape[-1]
    top_left, top_right = core[..., :n, :n], core[..., :n, n:]
    return {
        "eigs": np.linalg.eigvalsh(core, UPLO="U"),
        # ||core||^2 with the block below the diagonal counted as the transpose of the one above
        "norm_s_sq": np.sum(top_left * top_left, axis=(-2, -1))
        + 2.0 * np.sum(top_right * top_right, axis=(-2, -1)),
        "norm_t_sq": block_skew_energy(X, Y),
        "h": block_singular_values(Z) if with_h else None,
    }


def _gram_spectra(G: np.ndarray, *, with_h: bool, symmetric: bool = False) -> dict[str, np.ndarray | None]:
    """Eigenvalues of S, ||S||^2, ||T||^2 and (with_h) the singular values of L, per head of G (H, 2n, 2n).

    Heads with a resolved Cholesky factor take the block route (two n^3
    products); the rest (rank-deficient G, eigh factor) the general cores.
    ``symmetric``: G is exactly symmetric (as piece_gram makes it), so its
    transpose, in Fortran order, is the same matrix: LAPACK's copy of it reads
    contiguous columns (the Cholesky about 20% faster), the factor is the same.
    """
    V, triangular = psd_factor_lower(np.swapaxes(G, -1, -2) if symmetric else G)
    if np.all(triangular):
        return _block_spectra(V, with_h=with_h)
    n2 = G.shape[-1]
    out: dict[str, np.ndarray | None] = {
        "eigs": np.empty((len(G), n2)),
        "norm_s_sq": np.empty(len(G)),
        "norm_t_sq": np.empty(len(G)),
        "h": np.empty((len(G), n2 // 2)) if with_h else None,
    }
    if np.any(triangular):
        for key, value in _block_spectra(V[triangular], with_h=with_h).items():
            if value is not None:
                out[key][triangular] = value  # type: ignore[index]
    general = ~triangular
    core = symmetric_core(V[general])
    out["eigs"][general] = np.linalg.eigvalsh(core)  # type: ignore[index]
    out["norm_s_sq"][general] = np.sum(core * core, axis=(-2, -1))  # type: ignore[index]
    out["norm_t_sq"][general] = np.sum(skew_core(V[general]) ** 2, axis=(-2, -1))  # type: ignore[index]
    if with_h:
        out["h"][general] = singular_values(G[general])  # type: ignore[index]
    return out


def _check_names(names: Sequence[str]) -> tuple[str, ...]:
    names = tuple(names)
    unknown = [name for name in names if name not in STATISTICS]
    if unknown:
        raise ValueError(f"unknown statistic {unknown[0]!r}; valid: {', '.join(STATISTICS)}")
    return names


def _gram_values(
    G: np.ndarray,
    N: int,
    *,
    radius: float,
    zero_tol: float,
    with_h: bool,
    symmetric: bool = False,
    types: Mapping[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
    """``symmetric``: G is piece_gram's (exactly symmetric, and ours to rescale in place);
    ``types``: type_rule, imbalance_cut, edge_cut (default: the imbalance rule)."""
    batch = np.shape(G)[:-2]
    n = head_dim(G)
    G, reason = _prepare_gram(G, owned=symmetric)
    # Many small eigenproblems: BLAS threads only contend here (several times
    # slower on a busy 2-core machine), so run them on one thread.
    with single_threaded_blas():
        spectra = _gram_spectra(G, with_h=with_h, symmetric=symmetric)
    values = _statistics_from_spectra(
        **spectra,  # type: ignore[arg-type]
        norm_l_sq=spectra["norm_s_sq"] + spectra["norm_t_sq"],  # type: ignore[operator]
        trace_l=gram_trace(G),
        N=N,
        lobe_length=n,
        reason=reason,
        radius=radius,
        zero_tol=zero_tol,
        **(types or {}),
    )
    return values, batch


def gram_statistics(
    G: np.ndarray,
    N: int,
    *,
    radius: float = RADIUS,
    zero_tol: float = 1e-9,
    type_rule: str = "imbalance",
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
) -> HeadStatistics:
    """Per-head statistics from Gram matrices G (..., 2n, 2n) of heads of residual width N.

    docs/mathematics.md §3 and §4. With G = V V^T (Cholesky,
    V lower triangular), the eigenvalues of S are those of the block core
    1/2 [[X + X^T, Y], [Y^T, 0]], X, Y from one (n x n)(n x 2n) product of V's
    blocks (spectrum.triangular_blocks); ||S||^2 and ||T||^2 are the norms of
    its symmetric and skew parts, h^2 = eig(Z Z^T), tr L = tr G_QK.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q] (:func:`qkenergy.math.gram.head_gram`).
    N : int
        Residual width (for n_zero: the zero eigenvalues of the N x N S).
    radius : float
        The radius rule's tolerance on c_sym + d_sym.
    zero_tol : float
        Eigenvalues below zero_tol * max|eigenvalue of S| count as 0 (n_pos, n_neg, n_zero).
    type_rule : str
        "imbalance" or "radius" (:mod:`qkenergy.math.head_types`).
    imbalance_cut, edge_cut : float
        The imbalance rule's tolerances.

    Returns
    -------
    HeadStatistics
        Batch shape ``G.shape[:-2]``, lobes of length n.
    """
    types = {"type_rule": type_rule, "imbalance_cut": imbalance_cut, "edge_cut": edge_cut}
    return _assemble(*_gram_values(G, N, radius=radius, zero_tol=zero_tol, with_h=True, types=types))


def statistic_columns(
    G: np.ndarray,
    N: int,
    names: Sequence[str] = STATISTICS,
    *,
    radius: float = RADIUS,
    zero_tol: float = 1e-9,
) -> np.ndarray:
    """``gram_statistics(G, N).stack(names)`` reshaped to (..., len(names)), computing only what names need.

    The fast path for null laws: without a name of ``SINGULAR_VALUE_STATISTICS``
    the singular values of L (an n x n eigenproblem per head) are skipped; the
    values are the same numbers gram_statistics gives.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices.
    N : int
        Residual width.
    names : sequence of str
        The statistics, in column order.
    radius, zero_tol : float
        As :func:`gram_statistics`'s.

    Returns
    -------
    (..., len(names)) ndarray
    """
    names = _check_names(names)
    with_h = any(name in SINGULAR_VALUE_STATISTICS for name in names)
    values, batch = _gram_values(G, N, radius=radius, zero_tol=zero_tol, with_h=with_h)
    return np.stack([values[name] for name in names], axis=-1).reshape(*batch, len(names))


def spectra_statistic_columns(
    spectra: dict[str, np.ndarray | None],
    N: int,
    names: Sequence[str] = STATISTICS,
    *,
    radius: float = RADIUS,
    zero_tol: float = 1e-9,
) -> np.ndarray:
    """:func:`statistic_columns` (H, len(names)) of full-rank heads given by their spectra: the null fast path.

    ``spectra`` as ``nulls.bartlett_spectra`` gives them: ``eigs`` (H, 2n),
    ``norm_s_sq``, ``norm_l_sq``, ``trace_l`` (H,), ``h`` (H, n) or None.
    ||T||^2 = ||L||^2 - ||S||^2 (Lemma 5): exact to rounding for the Gaussian
    null, where ||S||^2 is about half of ||L||^2 (a real head, possibly
    nearly symmetric, takes ||T||^2 from its blocks instead). Every head is
    taken as a full-rank head: no zero-head or non-finite checks (a Wishart
    sample with N >= 2n has rank 2n almost surely).

    Parameters
    ----------
    spectra : dict of str to ndarray or None
        The heads' spectra.
    N : int
        Residual width.
    names : sequence of str
        The statistics, in column order.
    radius, zero_tol : float
        As :func:`gram_statistics`'s.

    Returns
    -------
    (H, len(names)) ndarray
    """
    names = _check_names(names)
    eigs = spectra["eigs"]
    norm_s_sq, norm_l_sq = spectra["norm_s_sq"], spectra["norm_l_sq"]
    assert eigs is not None and norm_s_sq is not None and norm_l_sq is not None
    values = _statistics_from_spectra(
        eigs=eigs,
        norm_s_sq=norm_s_sq,
        norm_t_sq=norm_l_sq - norm_s_sq,
        norm_l_sq=norm_l_sq,
        trace_l=spectra["trace_l"],  # type: ignore[arg-type]
        h=spectra["h"],
        N=N,
        lobe_length=eigs.shape[-1] // 2,
        reason=np.full(len(eigs), "", dtype=str),
        radius=radius,
        zero_tol=zero_tol,
    )
    return np.stack([values[name] for name in names], axis=-1)


def dense_statistics(
    L: np.ndarray,
    *,
    radius: float = RADIUS,
    zero_tol: float = 1e-9,
    type_rule: str = "imbalance",
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
) -> HeadStatistics:
    """Per-head statistics from dense L (..., N, N): the O(N^3) reference route.

    Eigenvalues of S by eigvalsh, h by SVD, energies by Lemma 5 (energies.py).
    Without the weights there is no scale to compare with, so only an exactly
    zero L is a zero head here. Lobes have length N. Head types as in
    :func:`gram_statistics`.

    Parameters
    ----------
    L : (..., N, N) ndarray
        Dense bilinear forms L = W_K^T W_Q.
    radius : float
        The radius rule's tolerance on c_sym + d_sym.
    zero_tol : float
        Eigenvalues below zero_tol * max|eigenvalue of S| count as 0 (n_pos, n_neg, n_zero).
    type_rule : str
        "imbalance" or "radius" (:mod:`qkenergy.math.head_types`).
    imbalance_cut, edge_cut : float
        The imbalance rule's tolerances.

    Returns
    -------
    HeadStatistics
        Batch shape ``L.shape[:-2]``.
    """
    L = np.asarray(L, dtype=np.float64)
    if L.ndim < 2 or L.shape[-1] != L.shape[-2]:
        raise ValueError(f"dense_statistics: L must have shape (..., N, N), got {L.shape}")
    N = L.shape[-1]
    batch = L.shape[:-2]
    L = L.reshape(-1, N, N)

    non_finite = ~np.all(np.isfinite(L), axis=(-2, -1))
    zero_head = ~non_finite & ~np.any(L != 0, axis=(-2, -1))
    failed = non_finite | zero_head
    L = np.where(failed[:, None, None], np.eye(N), L)
    L, _ = rescale_by_power_of_two(L)

    energy = energies(L)
    values = _statistics_from_spectra(
        eigs=dense_symmetric_eigenvalues(L),
        norm_s_sq=energy.norm_s_sq,
        norm_t_sq=energy.norm_t_sq,
        norm_l_sq=energy.norm_s_sq + energy.norm_t_sq,
        trace_l=np.trace(L, axis1=-2, axis2=-1),
        h=dense_singular_values(L),
        N=N,
        lobe_length=N,
        reason=_failure_reason(non_finite, zero_head),
        radius=radius,
        zero_tol=zero_tol,
        type_rule=type_rule,
        imbalance_cut=imbalance_cut,
        edge_cut=edge_cut,
    )
    return _assemble(values, batch)


def head_statistics(
    w_query: np.ndarray,
    w_key: np.ndarray,
    *,
    kv_head: np.ndarray | None = None,
    heads: Sequence[int] | np.ndarray | None = None,
    threads: int = 1,
    radius: float = RADIUS,
    zero_tol: float = 1e-9,
    type_rule: str = "imbalance",
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
) -> HeadStatistics:
    """Per-head statistics of heads (..., n, N): gram_statistics(head_gram(w_query, w_key), N).

    With ``kv_head`` (grouped-query attention) no key is copied per query head. The work goes in
    pieces of query heads sharing a key head (gram.query_pieces) over ``threads`` threads, BLAS on
    one thread each; results do not depend on ``threads``. Head types as in :func:`gram_statistics`.

    Parameters
    ----------
    w_query : (..., n, N) ndarray
        The heads' query blocks (with ``kv_head``: (H, n, N)); any float dtype.
    w_key : (..., n, N) ndarray
        The key blocks, of the same shape (with ``kv_head``: (H_kv, n, N)).
    kv_head : (H,) ndarray of int, optional
        The key head of each query head: query head h pairs with key head kv_head[h].
    heads : sequence of int, optional
        With ``kv_head``: the query heads, in order (default: all).
    threads : int
        Threads for the pieces.
    radius : float
        The radius rule's tolerance.
    zero_tol : float
        Eigenvalues below zero_tol * max|eigenvalue| count as 0 (n_pos, n_neg, n_zero).
    type_rule : str
        "imbalance" or "radius" (:func:`qkenergy.math.head_types.head_types`).
    imbalance_cut, edge_cut : float
        The imbalance rule's tolerances.

    Returns
    -------
    HeadStatistics
        Every statistic of docs/columns.md per head, batch shape ``w_query.shape[:-2]``
        (docs/mathematics.md §2-§4).

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.statistics import head_statistics
    >>> rng = np.random.default_rng(0)
    >>> w = rng.standard_normal((2, 4, 16))
    >>> stats = head_statistics(w, w)  # W_K = W_Q: L = W^T W is symmetric
    >>> stats.symmetric_energy.tolist(), stats.head_type.tolist()
    ([1.0, 1.0], ['I+', 'I+'])
    """
    types = {"type_rule": type_rule, "imbalance_cut": imbalance_cut, "edge_cut": edge_cut}
    N = np.shape(w_query)[-1]
    values_of = functools.partial(
        _gram_values, N=N, radius=radius, zero_tol=zero_tol, with_h=True, symmetric=True, types=types
    )
    if kv_head is None and heads is None and threads <= 1:
        return _assemble(*values_of(head_gram(w_query, w_key)))
    if kv_head is None:
        w_query, w_key = np.asarray(w_query), np.asarray(w_key)
        if w_query.ndim != 3:
            raise ValueError("head_statistics: heads and threads need w_query of shape (H, n, N)")
        kv_head = np.arange(w_query.shape[0])
    n = w_query.shape[-2]
    pieces = query_pieces(kv_head, n, N, None if heads is None else np.asarray(heads, dtype=np.intp))
    parts = thread_map(
        lambda piece: values_of(piece_gram(w_query, w_key, kv_head, piece))[0], pieces, threads
    )
    values = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    return _assemble(values, (sum(len(piece) for piece in pieces),))
