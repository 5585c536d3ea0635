"""MATH.md: Gram route. A head (W_Q, W_K) -> its 2n x 2n Gram matrix G = C C^T.

C = [W_K; W_Q] (keys first, 2n x N), so G has the blocks

    G = [[G_KK, G_KQ],      G_KK = W_K W_K^T,  G_QQ = W_Q W_Q^T,
         [G_QK, G_QQ]],     G_QK = W_Q W_K^T = G_KQ^T.

Every per-head statistic of L = W_K^T W_Q is a function of G, so the N x N
matrix L is never formed: one (2n x N)(N x 2n) product per head.
"""

from __future__ import annotations

import numpy as np

from qkenergy.math.energies import Energies, energies_from_invariants, power_of_two_scale

# Heads are converted a few at a time: a llama layer holds 32 x 128 x 4096
# entries per matrix, 128 MiB per matrix in float64.
_CHUNK_BYTES = 32 * 2**20


def accumulator_dtype(*dtypes: np.dtype) -> np.dtype:
    """float32 when every weight dtype is 16-bit (float16, bfloat16), float64 otherwise.

    A 16-bit weight carries 8 to 11 significant bits, so a float32 product
    (24 bits, rounding error ~ sqrt(N) 2^-24) adds nothing visible to the
    statistics and halves the cost of the Gram products; float32 and float64
    weights keep float64 products, so their statistics stay exact to rounding.
    """
    sixteen_bit = all(np.dtype(d).itemsize <= 2 for d in dtypes)
    return np.dtype(np.float32) if sixteen_bit else np.dtype(np.float64)


def _scale_heads(heads: np.ndarray) -> np.ndarray:
    """Scale each head (h, n, N) in place by the power of two of its max-abs entry.

    Returns the mask of heads that held a non-finite entry (zeroed here). The
    scaling is exact, so W and 2**k W give bitwise the same result, and a zero
    head stays zero without a division.
    """
    # max and -min rather than abs: no temporary copy of the heads
    max_abs = np.maximum(
        np.max(heads, axis=(-2, -1), initial=-np.inf), -np.min(heads, axis=(-2, -1), initial=np.inf)
    ).astype(np.float64)
    max_abs = np.where(np.isnan(max_abs), np.inf, np.maximum(max_abs, 0.0))
    non_finite = ~np.isfinite(max_abs)
    heads[non_finite] = 0.0
    heads *= np.ldexp(1.0, -power_of_two_scale(max_abs)).astype(heads.dtype)[:, None, None]
    return non_finite


def head_gram(w_query: np.ndarray, w_key: np.ndarray) -> np.ndarray:
    """Gram matrix G = C C^T, C = [W_K; W_Q], of each head: (..., n, N) x 2 -> (..., 2n, 2n) float64.

    MATH.md: Gram route. Each of W_K and W_Q is rescaled per head by (the power
    of two of) its own largest absolute entry before the product, so
    normalized statistics are exact at any weight scale. Accepts float16,
    ml_dtypes.bfloat16, float32 and float64 (also memory-mapped); heads are
    converted in chunks and multiplied in ``accumulator_dtype`` (float32 for
    16-bit weights, else float64). A head with a non-finite weight gets a G
    full of NaN.
    """
    w_query = np.asarray(w_query)
    w_key = np.asarray(w_key)
    if w_query.shape != w_key.shape or w_query.ndim < 2:
        raise ValueError(
            "head_gram: w_query and w_key must share a shape (..., n, N), "
            f"got {w_query.shape} and {w_key.shape}"
        )
    *batch, n, N = w_query.shape
    queries = w_query.reshape(-1, n, N)
    keys = w_key.reshape(-1, n, N)
    dtype = accumulator_dtype(queries.dtype, keys.dtype)
    heads = queries.shape[0]
    gram = np.empty((heads, 2 * n, 2 * n))
    chunk = max(1, _CHUNK_BYTES // max(1, 2 * n * N * dtype.itemsize))
    C = np.empty((min(chunk, heads), 2 * n, N), dtype)  # C = [W_K; W_Q], reused per chunk
    for start in range(0, heads, chunk):
        stop = min(start + chunk, heads)
        c = C[: stop - start]
        c[:, :n] = keys[start:stop]  # the conversion to ``dtype`` happens in the copy
        c[:, n:] = queries[start:stop]
        bad = _scale_heads(c[:, :n]) | _scale_heads(c[:, n:])
        for offset, head in enumerate(c):
            # 2-D c @ c.T lets numpy use the symmetric rank-k BLAS update
            gram[start + offset] = head @ head.T
        gram[start:stop][bad] = np.nan
    return gram.reshape(*batch, 2 * n, 2 * n)


def head_dim(G: np.ndarray) -> int:
    """Head dimension n of a Gram matrix of shape (..., 2n, 2n)."""
    size = G.shape[-1]
    if G.ndim < 2 or G.shape[-2] != size or size % 2:
        raise ValueError(f"Gram matrix must have shape (..., 2n, 2n), got {G.shape}")
    return size // 2


def key_block(G: np.ndarray) -> np.ndarray:
    """G_KK = W_K W_K^T, the top-left n x n block."""
    n = head_dim(G)
    return G[..., :n, :n]


def query_block(G: np.ndarray) -> np.ndarray:
    """G_QQ = W_Q W_Q^T, the bottom-right n x n block."""
    n = head_dim(G)
    return G[..., n:, n:]


def query_key_block(G: np.ndarray) -> np.ndarray:
    """G_QK = W_Q W_K^T, the bottom-left n x n block."""
    n = head_dim(G)
    return G[..., n:, :n]


def gram_norm_sq(G: np.ndarray) -> np.ndarray:
    """||L||^2 = sum_ij (G_KK)_ij (G_QQ)_ij = tr(W_K W_K^T W_Q W_Q^T) (MATH.md: Gram route)."""
    return np.sum(key_block(G) * query_block(G), axis=(-2, -1))


def gram_trace_square(G: np.ndarray) -> np.ndarray:
    """tr(L^2) = sum_ij (G_QK)_ij (G_QK)_ji (MATH.md: Gram route)."""
    qk = query_key_block(G)
    return np.sum(qk * np.swapaxes(qk, -1, -2), axis=(-2, -1))


def gram_trace(G: np.ndarray) -> np.ndarray:
    """tr L = tr G_QK (MATH.md: Gram route)."""
    return np.trace(query_key_block(G), axis1=-2, axis2=-1)


def gram_energies(G: np.ndarray) -> Energies:
    """Lemma 5 energies of L from its Gram matrix, via ||L||^2 and tr(L^2) (MATH.md: Gram route)."""
    G = np.asarray(G, dtype=np.float64)
    return energies_from_invariants(gram_norm_sq(G), gram_trace_square(G))
