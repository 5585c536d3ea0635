"""The conditional (rotation) null: a head's own spectra, its relative orientation at random.

A trained head keeps W_K and W_Q (their singular values and row spaces) and
only the query's input space is rotated at random: L_U = W_K^T W_Q U, U Haar
on O(N). docs/mathematics.md §6 (the rotation null):

- ||L U|| = ||L|| and E[tr((L U)^2)] = ||L||^2 / N, since
  E[U_jk U_li] = delta_jl delta_ki / N; hence E[s(L U)] = (N+1)/(2N) for EVERY
  fixed L (Proposition 6 is the Gaussian case). ``qkenergy verify`` checks it.
- The Gram matrix of the rotated head keeps G_KK and G_QQ; only its
  off-diagonal block changes, W_Q U W_K^T = F_Q B F_K^T with F_Q = A_Q S_Q,
  F_K = A_K S_K from the thin SVDs W_Q = A_Q S_Q V_Q^T, W_K = A_K S_K V_K^T
  (F_Q F_Q^T = G_QQ: the factors come from G alone, never from the N-wide weights),
  and B = V_Q^T U V_K distributed as the top-left r_Q x r_K block of a Haar
  matrix. With Z = [X; Y] (N x r_K Gaussian, X its first r_Q rows), the
  QR factor Z R^{-1} (R upper triangular with positive diagonal,
  R^T R = Z^T Z = X^T X + Y^T Y) is uniform on the Stiefel manifold, so
  B = X R^{-1}. Y^T Y ~ Wishart_{r_K}(N - r_Q, I) is drawn by the Bartlett
  decomposition when N - r_Q >= r_K, else from Y itself (fewer than r_K rows):
  O(n^3) per draw, independent of N.

Every statistic then comes from the same Gram-route code
(``statistics.gram_statistics``); the symmetric energy needs only
tr((G_QK)^2) = tr((B K)^2), K = F_K^T F_Q, and no eigenproblem.
Draws are seeded through ``montecarlo.draw`` (SeedSequence blocks, bitwise
identical whatever the chunk size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.base.parallel import single_threaded_blas
from qkenergy.math import montecarlo
from qkenergy.math.energies import rescale_by_power_of_two
from qkenergy.math.gram import gram_norm_sq, head_dim, key_block, query_block
from qkenergy.math.nulls import NullLaw
from qkenergy.math.statistics import statistic_columns

__all__ = [
    "ROTATION_STATISTICS",
    "RotatedHead",
    "haar_block",
    "haar_orthogonal",
    "rotated_head",
    "rotation_gram",
    "rotation_law",
    "rotation_symmetric_energy",
]

ROTATION_STATISTICS: tuple[str, ...] = ("symmetric_energy", "pairing", "lobe_departure")
"""Statistics the rotation null is drawn for, in column order."""

# A singular value of W_Q (W_K) below this multiple of n * eps * the largest one
# counts as 0: the rank r_Q (r_K) of the factor, at the resolution of its Gram block.
_RANK_TOL = 1e3

# Draws handed to one batched transform: bounds the (draws, 2n, 2n) Gram stack.
_CHUNK_VALUES = 1 << 22


def haar_orthogonal(rng: np.random.Generator, N: int, size: int) -> np.ndarray:
    """Haar-distributed orthogonal matrices (size, N, N): QR of a Gaussian matrix, signs fixed.

    Q from A = Q R with each column of Q multiplied by the sign of R's diagonal
    (so R has a positive diagonal, which makes the factorization unique and Q
    Haar). O(N^3) per draw: the direct reference for the exact block sampler.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    N : int
        Size of the matrices.
    size : int
        Draws.

    Returns
    -------
    (size, N, N) ndarray
    """
    N = check_integer(N, "N")
    size = check_integer(size, "size", minimum=0)
    Q, R = np.linalg.qr(rng.standard_normal((size, N, N)))
    signs = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    return Q * np.where(signs == 0, 1.0, signs)[:, None, :]


def _wishart_lower(rng: np.random.Generator, p: int, dof: int, size: int) -> np.ndarray:
    """Lower-triangular T (size, p, p) with T T^T ~ Wishart_p(dof, I) (Bartlett; dof >= p).

    T_ii^2 ~ chi^2(dof - i + 1) (i = 1..p), iid standard normals below the diagonal.
    """
    T = np.tril(rng.standard_normal((size, p, p)), -1)
    diagonal = np.sqrt(rng.chisquare(dof - np.arange(p), size=(size, p)))
    T[:, np.arange(p), np.arange(p)] = diagonal
    return T


def haar_block(rng: np.random.Generator, r_Q: int, r_K: int, N: int, size: int) -> np.ndarray:
    """Top-left r_Q x r_K blocks (size, r_Q, r_K) of Haar matrices on O(N), in O(r^3) per draw.

    B = X R^{-1}, R^T R = X^T X + W, X an r_Q x r_K Gaussian matrix and
    W ~ Wishart_{r_K}(N - r_Q, I): Bartlett when N - r_Q >= r_K, else W = Y^T Y
    from the (N - r_Q) x r_K Gaussian Y itself. Needs r_Q, r_K <= N.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    r_Q, r_K : int
        The block's rows and columns, <= N.
    N : int
        Size of the orthogonal group.
    size : int
        Draws.

    Returns
    -------
    (size, r_Q, r_K) ndarray
    """
    r_Q = check_integer(r_Q, "r_Q", minimum=0)
    r_K = check_integer(r_K, "r_K", minimum=0)
    N = check_integer(N, "N")
    size = check_integer(size, "size", minimum=0)
    if r_Q > N or r_K > N:
        raise QKEnergyError(f"a block of an N x N matrix needs r_Q, r_K <= N, got {r_Q}, {r_K}, N = {N}")
    if r_Q == 0 or r_K == 0:
        return np.zeros((size, r_Q, r_K))
    X = rng.standard_normal((size, r_Q, r_K))
    rest = N - r_Q
    if rest >= r_K:
        T = _wishart_lower(rng, r_K, rest, size)
        W = T @ np.swapaxes(T, 1, 2)
    else:
        Y = rng.standard_normal((size, rest, r_K))
        W = np.swapaxes(Y, 1, 2) @ Y
    lower = np.linalg.cholesky(np.swapaxes(X, 1, 2) @ X + W)  # R = lower^T
    # B = X R^{-1}, i.e. B^T = lower^{-1} X^T.
    return np.swapaxes(np.linalg.solve(lower, np.swapaxes(X, 1, 2)), 1, 2)


def _factor(block: np.ndarray) -> np.ndarray:
    """F (n, r) with F F^T = block (PSD, n x n), r its numerical rank: A S of the thin SVD."""
    w, A = np.linalg.eigh(block)
    n = block.shape[-1]
    keep = w > _RANK_TOL * n * np.finfo(np.float64).eps * max(float(w[-1]), 0.0)
    return A[:, keep] * np.sqrt(w[keep])


@dataclass(frozen=True)
class RotatedHead:
    """What the rotation null keeps of a head: its Gram blocks and their factors (:func:`rotated_head`).

    Parameters
    ----------
    gram : (2n, 2n) ndarray
        The head's Gram matrix (rescaled by a power of two).
    query_factor : (n, r_Q) ndarray
        F_Q with F_Q F_Q^T = G_QQ.
    key_factor : (n, r_K) ndarray
        F_K with F_K F_K^T = G_KK.
    N : int
        Residual width.
    norm_l_sq : float
        ||L||^2, unchanged by the rotation.
    """

    gram: np.ndarray
    query_factor: np.ndarray
    key_factor: np.ndarray
    N: int
    norm_l_sq: float

    @property
    def n(self) -> int:
        return head_dim(self.gram)

    @property
    def ranks(self) -> tuple[int, int]:
        """(r_Q, r_K): the numerical ranks of W_Q and W_K."""
        return self.query_factor.shape[1], self.key_factor.shape[1]


def rotated_head(gram: np.ndarray, N: int) -> RotatedHead:
    """The rotation null's view of one head from its Gram matrix and residual width.

    Parameters
    ----------
    gram : (2n, 2n) ndarray
        G of C = [W_K; W_Q] (:func:`qkenergy.math.gram.head_gram`).
    N : int
        Residual width.

    Returns
    -------
    RotatedHead
    """
    G = np.asarray(gram, dtype=np.float64)
    n = head_dim(G)
    N = check_integer(N, "N")
    if G.ndim != 2:
        raise ValueError(f"rotated_head takes one Gram matrix (2n, 2n), got shape {G.shape}")
    if not np.all(np.isfinite(G)):
        raise QKEnergyError("rotation null: the head's Gram matrix is not finite")
    G, _ = rescale_by_power_of_two(G)  # exact: a power of two
    factor_q, factor_k = _factor(query_block(G)), _factor(key_block(G))
    if max(factor_q.shape[1], factor_k.shape[1]) > min(n, N):
        raise QKEnergyError(f"rotation null: rank above min(n, N) = {min(n, N)} for a head of width N = {N}")
    norm_l_sq = float(gram_norm_sq(G))
    if not norm_l_sq > 0:
        raise QKEnergyError("rotation null: zero head (L = 0) has no orientation to randomise")
    return RotatedHead(G, factor_q, factor_k, N, norm_l_sq)


def rotation_gram(rng: np.random.Generator, head: RotatedHead, size: int) -> np.ndarray:
    """Gram matrices of the rotated head [W_K; W_Q U], U Haar on O(N): exact, O(n^3) per draw.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    head : RotatedHead
        The head (:func:`rotated_head`).
    size : int
        Draws.

    Returns
    -------
    (size, 2n, 2n) ndarray
    """
    B = haar_block(rng, *head.ranks, head.N, size)
    cross = head.query_factor @ B @ head.key_factor.T  # G_QK(U) = F_Q B F_K^T
    n = head.n
    out = np.empty((size, 2 * n, 2 * n))
    out[:, :n, :n] = key_block(head.gram)
    out[:, n:, n:] = query_block(head.gram)
    out[:, n:, :n] = cross
    out[:, :n, n:] = np.swapaxes(cross, 1, 2)
    return out


def rotation_symmetric_energy(rng: np.random.Generator, head: RotatedHead, size: int) -> np.ndarray:
    """s(L U) for ``size`` Haar U: 1/2 + tr((B K)^2)/(2 ||L||^2), K = F_K^T F_Q (no eigenproblem).

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    head : RotatedHead
        The head (:func:`rotated_head`).
    size : int
        Draws.

    Returns
    -------
    (size,) ndarray
    """
    B = haar_block(rng, *head.ranks, head.N, size)
    BK = B @ (head.key_factor.T @ head.query_factor)  # (size, r_Q, r_Q); tr((G_QK)^2) = tr((B K)^2)
    trace_sq = np.einsum("bij,bji->b", BK, BK)
    return 0.5 + 0.5 * trace_sq / head.norm_l_sq


def rotation_law(
    gram: np.ndarray,
    N: int,
    *,
    samples: int = 1000,
    seed: int = 0,
    names: Sequence[str] = ROTATION_STATISTICS,
) -> NullLaw:
    """The rotation null of one head: samples of ``names`` for L U, U Haar on O(N).

    Only G's diagonal blocks matter. Its exact mean of symmetric_energy, (N+1)/(2N),
    holds for the rotation null of any head (docs/mathematics.md §6). When ``names``
    is only symmetric_energy, no eigenproblem is solved.

    Parameters
    ----------
    gram : (2n, 2n) ndarray
        The head's Gram matrix (:func:`qkenergy.math.gram.head_gram`).
    N : int
        Residual width.
    samples : int
        Haar draws.
    seed : int
        Seed of the draws.
    names : sequence of str
        The statistics drawn (numbers: the Type II radius, which only names head types, plays no part).

    Returns
    -------
    NullLaw
        ``kind`` "rotation" (mean, sd, z, p_two_sided; ``law[name]`` a Law of samples).
    """
    head = rotated_head(gram, N)
    samples = check_integer(samples, "samples", minimum=2)
    seed = check_integer(seed, "seed", minimum=0)
    names = tuple(names)
    # Many small products and factorisations per draw: BLAS threads only contend there.
    with single_threaded_blas():
        if names == ("symmetric_energy",):
            values = montecarlo.draw(
                lambda rng, size: rotation_symmetric_energy(rng, head, size)[:, None], samples, seed=seed
            )
        else:
            values = montecarlo.draw(
                lambda rng, size: rotation_gram(rng, head, size),
                samples,
                seed=seed,
                chunk_size=max(montecarlo.BLOCK_SIZE, _CHUNK_VALUES // (4 * head.n * head.n)),
                # only what ``names`` need: no singular values of L, no n x n eigenproblem beyond S's
                transform=lambda G: statistic_columns(G, head.N, names),
            )
    values.flags.writeable = False
    return NullLaw(n=head.n, N=head.N, seed=seed, names=names, values=values, kind="rotation")
