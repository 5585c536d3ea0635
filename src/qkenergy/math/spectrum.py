"""Spectra of S, T and L from the Gram matrix G (docs/mathematics.md §4, the Gram route), and the dense reference.

With C = [W_K; W_Q] and G = C C^T = V V^T:

    S = 1/2 C^T J  C,  J  = [[0, I], [ I, 0]]  -> nonzero eigenvalues of S are those of 1/2 V^T J V,
    T = 1/2 C^T J' C,  J' = [[0, I], [-I, 0]]  -> singular values of T are the moduli of the
                                                   eigenvalues of 1/2 V^T J' V,
    G_KK = R R^T                               -> singular values of L are the square roots of
                                                   the eigenvalues of R^T G_QQ R.

Writing V = [V_K; V_Q] (n rows each), V^T J V = P + P^T and V^T J' V = P - P^T
with P = V_K^T V_Q. All functions work on stacks (..., 2n, 2n).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import numpy as np

from qkenergy.math.gram import head_dim, key_block, query_block

# A Cholesky pivot below this multiple of m * eps * max diag(G) is at the
# rounding level of a rank-deficient G: those heads take the eigh route.
_PIVOT_TOL = 1e3


def _eigh_factor(G: np.ndarray) -> np.ndarray:
    """V = Q diag(sqrt(w)) from G = Q diag(w) Q^T, eigenvalues below m * eps * max w set to 0."""
    w, Q = np.linalg.eigh(G)
    m = G.shape[-1]
    cutoff = m * np.finfo(np.float64).eps * np.maximum(w[..., -1:], 0.0)
    w = np.where(w > cutoff, w, 0.0)
    return Q * np.sqrt(w)[..., None, :]


def psd_factor(G: np.ndarray) -> np.ndarray:
    """V with G = V V^T for symmetric positive semidefinite G (..., m, m).

    Every use of V is invariant under V -> V O (O orthogonal), so any factor
    will do. Cholesky is several times cheaper than eigh and serves the common
    full-rank head. A head whose G is rank-deficient (n > N/2, repeated rows,
    zero heads) has a Cholesky pivot at the rounding level, or makes Cholesky
    fail; it takes the eigh route, where eigenvalues below m * eps * max w
    are set to 0: a true zero of G comes out of eigh at that level, and its
    square root, of relative size sqrt(eps), would give S spurious
    eigenvalues of relative size ~1e-8. The price: singular values of
    C = [W_K; W_Q] below sqrt(m * eps) * max (about 1e-7 for n = 128) count
    as 0, which is the resolution of any route through G.

    Parameters
    ----------
    G : (..., m, m) ndarray
        Symmetric positive semidefinite.

    Returns
    -------
    (..., m, m) ndarray
        V.
    """
    return psd_factor_lower(G)[0]


def psd_factor_lower(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`psd_factor` and a mask (...,) of the heads whose V is the lower Cholesky factor.

    Parameters
    ----------
    G : (..., m, m) ndarray
        Symmetric positive semidefinite.

    Returns
    -------
    V : (..., m, m) ndarray
    lower : (...) ndarray of bool
        Whether V is the lower Cholesky factor.
    """
    G = np.asarray(G, dtype=np.float64)
    m = G.shape[-1]
    try:
        V = np.linalg.cholesky(G)
    except np.linalg.LinAlgError:
        return _eigh_factor(G), np.zeros(G.shape[:-2], dtype=bool)
    largest = np.max(np.diagonal(G, axis1=-2, axis2=-1), axis=-1, initial=0.0)
    pivots_sq = np.diagonal(V, axis1=-2, axis2=-1) ** 2
    floor = _PIVOT_TOL * m * np.finfo(np.float64).eps * largest
    resolved = np.all(pivots_sq > floor[..., None], axis=-1)
    if not np.all(resolved):
        V[~resolved] = _eigh_factor(G[~resolved])
    return V, resolved


def triangular_blocks(V: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks (X, Y, Z) of P = V_K^T V_Q for a lower-triangular factor V of G = V V^T (..., 2n, 2n).

    For V = [[A, 0], [B, D]], P = [[X, Y], [0, 0]] with X = A^T B and
    Y = A^T D: Z = A^T [B, D] = [X, Y] is one (n x n)(n x 2n) product, so P,
    a (2n)^3 product of the dense route, is never formed:

        symmetric core 1/2 (P + P^T) ~ 1/2 [[X + X^T, Y], [Y^T, 0]]  (same eigenvalues),
        ||S||^2 = ||X + X^T||^2/4 + ||Y||^2/2,  ||T||^2 = ||X - X^T||^2/4 + ||Y||^2/2,
        singular values of L: those of P, h^2 = eig(Z Z^T) (n x n).

    An upper-triangular V = [[D, B], [0, A]] (the Bartlett factor) gives the
    same with X = A^T B, Y = A^T D: see :func:`factor_spectrum`.

    Parameters
    ----------
    V : (..., 2n, 2n) ndarray
        The lower-triangular factor of G = V V^T.

    Returns
    -------
    X, Y : (..., n, n) ndarray
    Z : (..., n, 2n) ndarray
        [X, Y].
    """
    n = V.shape[-1] // 2
    anchor, rest = V[..., :n, :n], V[..., n:, :]
    Z = np.swapaxes(anchor, -1, -2) @ rest  # A^T [B, D] = [X, Y]
    return Z[..., :n], Z[..., n:], Z


def block_symmetric_core(X: np.ndarray, Y: np.ndarray, *, upper_only: bool = False) -> np.ndarray:
    """1/2 [[X + X^T, Y], [Y^T, 0]]: orthogonally similar to the symmetric core of :func:`triangular_blocks`.

    Each matrix is in Fortran order (a transposed view of C-ordered memory),
    the order in which eigvalsh copies it for LAPACK: its copy then reads
    contiguous columns (about 7% of a 256 x 256 eigvalsh), same values.
    ``upper_only``: leave the block below the diagonal unset (for eigvalsh
    with UPLO="U", which reads only the upper triangle): saves a transposed
    copy. The memory holds the transpose, so the symmetric X + X^T is written
    as X^T + X, row by row.

    Parameters
    ----------
    X, Y : (..., n, n) ndarray
        The blocks of :func:`triangular_blocks`.
    upper_only : bool
        Leave the block below the diagonal unset.

    Returns
    -------
    (..., 2n, 2n) ndarray
        In Fortran order.
    """
    n = X.shape[-1]
    memory = np.empty((*X.shape[:-2], 2 * n, 2 * n))
    memory[..., n:, n:] = 0.0
    top_left = memory[..., :n, :n]
    np.add(np.swapaxes(X, -1, -2), X, out=top_left)
    top_left *= 0.5
    M = np.swapaxes(memory, -1, -2)
    np.multiply(Y, 0.5, out=M[..., :n, n:])
    if not upper_only:
        M[..., n:, :n] = np.swapaxes(M[..., :n, n:], -1, -2)
    return M


def block_skew_energy(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """||T||^2 = ||X - X^T||^2/4 + ||Y||^2/2 from the blocks of :func:`triangular_blocks` (O(n^2)).

    Parameters
    ----------
    X, Y : (..., n, n) ndarray
        The blocks of :func:`triangular_blocks`.

    Returns
    -------
    (...) ndarray
        ||T||^2.
    """
    skew = X - np.swapaxes(X, -1, -2)
    return 0.25 * np.sum(skew * skew, axis=(-2, -1)) + 0.5 * np.sum(Y * Y, axis=(-2, -1))


def block_singular_values(Z: np.ndarray) -> np.ndarray:
    """Singular values h of L (descending, n per head) from Z of :func:`triangular_blocks`: h^2 = eig(Z Z^T).

    Parameters
    ----------
    Z : (..., n, 2n) ndarray
        Z of :func:`triangular_blocks`.

    Returns
    -------
    (..., n) ndarray
    """
    h_sq = np.linalg.eigvalsh(Z @ np.swapaxes(Z, -1, -2))
    return np.flip(np.sqrt(np.maximum(h_sq, 0.0)), axis=-1)


# Cores whose eigenvalues are asked for in one eigvalsh call. numpy releases the GIL for a
# stack of matrices but not for a single one, so threads drawing null samples run in parallel
# only when the eigenproblems go in stacks (one 256 x 256 at a time: 0.9x on 2 threads).
CORE_STACK = 8


@dataclass(frozen=True)
class CoreBuffers:
    """Work arrays of :func:`fill_core` for heads of dimension n, reused from sample to sample.

    Reuse keeps them in cache and spares fresh pages per sample; one set per thread.

    Parameters
    ----------
    cores : (CORE_STACK, 2n, 2n) ndarray
        Slots for the symmetric cores of a stack of heads (their bottom-right blocks stay zero).
    columns : (2n, n) ndarray
        Z^T / 2 for a transposed factor.
    scratch : (n, n) ndarray
        X / 2, in padded rows.
    """

    cores: np.ndarray  # (CORE_STACK, 2n, 2n): symmetric cores; their bottom-right blocks stay zero
    columns: np.ndarray  # (2n, n): Z^T / 2 for a transposed factor
    scratch: np.ndarray  # (n, n): X / 2, in rows padded so that its transposed read does not thrash the cache

    @classmethod
    def for_head_dim(cls, n: int) -> CoreBuffers:
        return cls(np.zeros((CORE_STACK, 2 * n, 2 * n)), np.empty((2 * n, n)), np.empty((n, n + 8))[:, :n])


def fill_core(
    factor: np.ndarray, *, transposed: bool, buffers: CoreBuffers, slot: int = 0, with_h: bool = False
) -> tuple[float, float, float, np.ndarray | None]:
    """Null fast path: the core of ONE head into ``buffers.cores[slot]``; (||S||^2, ||L||^2, tr L, h or None).

    ``factor`` (2n x 2n) holds an upper-triangular V with G = V V^T in its
    upper triangle, or (``transposed``) V^T in its lower triangle; the other
    triangle is never read (in the Bartlett draw buffer it is another sample).
    With V = [[D, B], [0, A]] (n x n blocks), Z = A^T [B, D] = [X, Y] and, as
    in :func:`triangular_blocks`,

        eigenvalues of S = those of the core 1/2 [[X + X^T, Y], [Y^T, 0]],
        ||L||^2 = ||Z||^2,  ||S||^2 = ||core||^2,  tr L = tr X,  h^2 = eig(Z Z^T).

    These are the formulas of the batched block route (``statistics.gram_statistics``),
    so the numbers agree with it to rounding. What makes it fast one sample
    at a time: Z is one BLAS dtrmm, which reads only A's triangle (half the
    flops of a general product, no zeroed copy of A); the factor 1/2 rides on
    that product (a power of two: exact); the buffers are reused; only the
    triangle of the core that :func:`core_eigenvalues` reads is written (upper
    factor: the top rows; transposed: the left columns), in Fortran order
    (eigvalsh's copy of a C-ordered matrix reads columns: 8% slower).

    Parameters
    ----------
    factor : (2n, 2n) ndarray
        The head's triangular factor (in its triangle; the other one is never read).
    transposed : bool
        The factor is V^T in the lower triangle rather than V in the upper one.
    buffers : CoreBuffers
        Work arrays for heads of this n.
    slot : int
        The slot of ``buffers.cores`` to write.
    with_h : bool
        Also the singular values h of L.

    Returns
    -------
    norm_s_sq, norm_l_sq, trace_l : float
        ||S||^2, ||L||^2 and tr L.
    h : (n,) ndarray or None
        Singular values of L (with ``with_h``).
    """
    from scipy.linalg.blas import dtrmm  # scipy.linalg: ~0.25 s to import, only when sampling

    n = factor.shape[-1] // 2
    core = buffers.cores[slot]
    top_left = core[:n, :n]
    if not transposed:
        # The core's top rows [B, D] become A^T [B, D]/2 = [X, Y]/2 in place: in Fortran
        # order they are Z^T/2 = [B, D]^T A/2, and factor[n:, n:].T is A^T (Fortran lower).
        z = core[:n]
        z[:, :n] = factor[:n, n:]
        _copy_triangle(factor[:n, :n], z[:, n:], upper=True)
        dtrmm(0.5, factor[n:, n:].T, z.T, side=1, lower=1, trans_a=1, overwrite_b=1)
        x_half, off_diagonal = z[:, :n], z[:, n:]
    else:
        # factor = V^T: W = [B^T; D^T] is its first n columns, and W^T becomes A^T W^T/2
        # (Fortran order, A^T = factor[n:, n:]), so W = Z^T/2 = [X^T; Y^T]/2: the core's left columns.
        z = buffers.columns
        z[:n] = factor[n:, :n]
        _copy_triangle(factor[:n, :n], z[n:], upper=False)
        dtrmm(0.5, factor[n:, n:].T, z.T, side=0, lower=0, trans_a=1, overwrite_b=1)
        core[n:, :n] = z[n:]
        x_half, off_diagonal = z[:n], core[n:, :n]
    flat = z.reshape(-1)
    norm_l_sq = 4.0 * float(np.dot(flat, flat))
    h = 2.0 * block_singular_values(z.T if transposed else z) if with_h else None  # z = Z/2 (or Z^T/2)
    np.copyto(buffers.scratch, x_half)
    np.add(buffers.scratch, buffers.scratch.T, out=top_left)  # (X + X^T)/2
    norm_s_sq = float(
        np.einsum("ij,ij->", top_left, top_left) + 2.0 * np.einsum("ij,ij->", off_diagonal, off_diagonal)
    )
    return norm_s_sq, norm_l_sq, float(np.trace(top_left)), h


def core_eigenvalues(buffers: CoreBuffers, count: int, *, transposed: bool) -> np.ndarray:
    """Eigenvalues (count, 2n), ascending, of the cores :func:`fill_core` wrote to slots 0..count-1.

    One eigvalsh over the stack, each core read in Fortran order from the
    triangle fill_core wrote (the same ``transposed`` for the whole stack).

    Parameters
    ----------
    buffers : CoreBuffers
        The cores :func:`fill_core` wrote.
    count : int
        Slots 0..count-1.
    transposed : bool
        As fill_core's (the same for the whole stack).

    Returns
    -------
    (count, 2n) ndarray
    """
    uplo: Literal["L", "U"] = "U" if transposed else "L"  # the triangle written, seen in Fortran order
    return np.linalg.eigvalsh(np.swapaxes(buffers.cores[:count], -1, -2), UPLO=uplo)


def factor_spectrum(
    factor: np.ndarray, *, transposed: bool, buffers: CoreBuffers, with_h: bool = False
) -> tuple[np.ndarray, float, float, float, np.ndarray | None]:
    """(eigenvalues of S, ||S||^2, ||L||^2, tr L, h or None) of ONE head: :func:`fill_core`, then its eigenvalues.

    Parameters
    ----------
    factor : (2n, 2n) ndarray
        The head's triangular factor (in its triangle; the other one is never read).
    transposed : bool
        The factor is V^T in the lower triangle rather than V in the upper one.
    buffers : CoreBuffers
        Work arrays for heads of this n.
    with_h : bool
        Also the singular values h of L.

    Returns
    -------
    eigs : (2n,) ndarray
        Eigenvalues of S, ascending.
    norm_s_sq, norm_l_sq, trace_l : float
        ||S||^2, ||L||^2 and tr L.
    h : (n,) ndarray or None
        Singular values of L (with ``with_h``).
    """
    values = fill_core(factor, transposed=transposed, buffers=buffers, with_h=with_h)
    return (core_eigenvalues(buffers, 1, transposed=transposed)[0], *values)


def _copy_triangle(source: np.ndarray, target: np.ndarray, *, upper: bool) -> None:
    """target = triu(source) (or tril): the other triangle of source is not used (it is another sample's)."""
    target.fill(0.0)
    np.copyto(target, source, where=_triangle_mask(source.shape[-1], upper=upper))


@functools.cache
def _triangle_mask(n: int, *, upper: bool) -> np.ndarray:
    mask = np.triu(np.ones((n, n), dtype=bool)) if upper else np.tril(np.ones((n, n), dtype=bool))
    mask.flags.writeable = False
    return mask


def _swap_halves(V: np.ndarray, sign: float) -> np.ndarray:
    """J V = [V_Q; V_K] (sign +1) or J' V = [V_Q; -V_K] (sign -1), for V = [V_K; V_Q]."""
    n = V.shape[-2] // 2
    return np.concatenate([V[..., n:, :], sign * V[..., :n, :]], axis=-2)


def symmetric_core(V: np.ndarray) -> np.ndarray:
    """1/2 V^T J V = (P + P^T)/2, P = V_K^T V_Q: its eigenvalues are the nonzero eigenvalues of S.

    One product V^T (J V) rather than P + P^T: adding a batched transpose is
    strided memory traffic that costs more than the extra multiplication.

    Parameters
    ----------
    V : (..., 2n, 2n) ndarray
        A factor of G = V V^T (:func:`psd_factor`).

    Returns
    -------
    (..., 2n, 2n) ndarray
    """
    return 0.5 * (np.swapaxes(V, -1, -2) @ _swap_halves(V, 1.0))


def skew_core(V: np.ndarray) -> np.ndarray:
    """1/2 V^T J' V = (P - P^T)/2: real skew, its eigenvalue moduli are the singular values of T.

    Parameters
    ----------
    V : (..., 2n, 2n) ndarray
        A factor of G = V V^T (:func:`psd_factor`).

    Returns
    -------
    (..., 2n, 2n) ndarray
    """
    return 0.5 * (np.swapaxes(V, -1, -2) @ _swap_halves(V, -1.0))


def symmetric_eigenvalues(G: np.ndarray) -> np.ndarray:
    """Eigenvalues of S (ascending, 2n per head; the other N - 2n are 0). docs/mathematics.md §4, the Gram route.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (..., 2n) ndarray
    """
    head_dim(G)
    return np.linalg.eigvalsh(symmetric_core(psd_factor(G)))


def skew_singular_values_of_core(M: np.ndarray) -> np.ndarray:
    """Singular values (descending) of a real skew matrix M, via eigvalsh of the Hermitian i M.

    i M is Hermitian with real eigenvalues +-sigma, so this is a stable
    symmetric eigenproblem rather than an SVD or a square root of M^T M.

    Parameters
    ----------
    M : (..., m, m) ndarray
        Real skew matrices.

    Returns
    -------
    (..., m) ndarray
    """
    moduli = np.abs(np.linalg.eigvalsh(1j * M))
    return np.flip(np.sort(moduli, axis=-1), axis=-1)


def skew_singular_values(G: np.ndarray) -> np.ndarray:
    """Singular values of T (descending, 2n per head, in equal pairs). docs/mathematics.md §4, the Gram route.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (..., 2n) ndarray
    """
    head_dim(G)
    return skew_singular_values_of_core(skew_core(psd_factor(G)))


def singular_values(G: np.ndarray) -> np.ndarray:
    """Singular values h of L (descending, n per head): h^2 = eig(R^T G_QQ R), G_KK = R R^T.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (..., n) ndarray
        In G's units (the weights' powers of two taken out).
    """
    R = psd_factor(key_block(G))
    h_sq = np.linalg.eigvalsh(np.swapaxes(R, -1, -2) @ query_block(G) @ R)
    return np.flip(np.sqrt(np.maximum(h_sq, 0.0)), axis=-1)


def eigenvalue_tolerance(eigs: np.ndarray, zero_tol: float = 1e-9) -> np.ndarray:
    """zero_tol * max|eigenvalue| per head (shape (..., 1)): smaller eigenvalues count as 0.

    Parameters
    ----------
    eigs : (..., m) ndarray
        Eigenvalues of S.
    zero_tol : float
        The relative tolerance.

    Returns
    -------
    (..., 1) ndarray
    """
    return zero_tol * np.max(np.abs(eigs), axis=-1, keepdims=True, initial=0.0)


def lobes(
    eigs: np.ndarray, *, zero_tol: float = 1e-9, length: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Positive and negative lobes (alpha, beta) of the eigenvalues of S (docs/mathematics.md §3).

    alpha: the eigenvalues above zero_tol * max|eigenvalue|, decreasing;
    beta: the absolute values of those below -zero_tol * max|eigenvalue|,
    decreasing; both zero-padded to `length` (default: eigs.shape[-1]).

    Parameters
    ----------
    eigs : (..., m) ndarray
        Eigenvalues of S.
    zero_tol : float
        The relative tolerance below which an eigenvalue counts as 0.
    length : int, optional
        The padded length (default m).

    Returns
    -------
    alpha, beta : (..., length) ndarray
        Decreasing, zero-padded.
    """
    eigs = np.asarray(eigs, dtype=np.float64)
    length = eigs.shape[-1] if length is None else length
    tol = eigenvalue_tolerance(eigs, zero_tol)
    positive = np.where(eigs > tol, eigs, 0.0)
    negative = np.where(eigs < -tol, -eigs, 0.0)
    alpha = -np.sort(-positive, axis=-1)[..., :length]
    beta = -np.sort(-negative, axis=-1)[..., :length]
    pad = [(0, 0)] * (eigs.ndim - 1) + [(0, max(0, length - eigs.shape[-1]))]
    return np.pad(alpha, pad), np.pad(beta, pad)


# Dense reference route: from an N x N L, O(N^3) per head.


def dense_symmetric_eigenvalues(L: np.ndarray) -> np.ndarray:
    """Eigenvalues of S = (L + L^T)/2 (ascending, N per head), eigvalsh.

    Parameters
    ----------
    L : (..., N, N) ndarray
        Dense bilinear forms.

    Returns
    -------
    (..., N) ndarray
    """
    L = np.asarray(L, dtype=np.float64)
    return np.linalg.eigvalsh(0.5 * (L + np.swapaxes(L, -1, -2)))


def dense_skew_singular_values(L: np.ndarray) -> np.ndarray:
    """Singular values of T = (L - L^T)/2 (descending, N per head).

    Parameters
    ----------
    L : (..., N, N) ndarray
        Dense bilinear forms.

    Returns
    -------
    (..., N) ndarray
    """
    L = np.asarray(L, dtype=np.float64)
    return skew_singular_values_of_core(0.5 * (L - np.swapaxes(L, -1, -2)))


def dense_singular_values(L: np.ndarray) -> np.ndarray:
    """Singular values of L (descending, N per head), SVD.

    Parameters
    ----------
    L : (..., N, N) ndarray
        Dense bilinear forms.

    Returns
    -------
    (..., N) ndarray
    """
    return np.linalg.svd(np.asarray(L, dtype=np.float64), compute_uv=False)
