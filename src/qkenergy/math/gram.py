"""docs/mathematics.md §4, the Gram route. A head (W_Q, W_K) -> its 2n x 2n Gram matrix G = C C^T.

C = [W_K; W_Q] (keys first, 2n x N), so G has the blocks

    G = [[G_KK, G_KQ],      G_KK = W_K W_K^T,  G_QQ = W_Q W_Q^T,
         [G_QK, G_QQ]],     G_QK = W_Q W_K^T = G_KQ^T.

Every per-head statistic of L = W_K^T W_Q is a function of G, so the N x N
matrix L is never formed: one (2n x N)(N x 2n) product per head.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from qkenergy.base.small_floats import as_float, widen_into
from qkenergy.math.energies import (
    Energies,
    energies_from_invariants,
    power_of_two_scale,
    scale_by_power_of_two,
)


def accumulator_dtype(*dtypes: np.dtype) -> np.dtype:
    """float32 when every weight dtype is 16-bit (float16, bfloat16), float64 otherwise.

    A 16-bit weight carries 8 to 11 significant bits, so a float32 product
    (24 bits, rounding error ~ sqrt(N) 2^-24) adds nothing visible to the
    statistics and halves the cost of the Gram products; float32 and float64
    weights keep float64 products, so their statistics stay exact to rounding.

    Parameters
    ----------
    *dtypes : numpy.dtype
        The dtypes of the weights multiplied together.

    Returns
    -------
    numpy.dtype
    """
    sixteen_bit = all(np.dtype(d).itemsize <= 2 for d in dtypes)
    return np.dtype(np.float32) if sixteen_bit else np.dtype(np.float64)


def max_abs(heads: np.ndarray) -> np.ndarray:
    """Largest |entry| of each matrix of ``heads`` (..., n, N) as float64; NaN where one is NaN.

    Read from the sign-magnitude bits of any IEEE dtype (bfloat16 included, as
    ml_dtypes' dtype or as the stored bits of :mod:`qkenergy.base.small_floats`)
    with two integer maxima: over the signed view, the largest non-negative
    entry; over the unsigned view with its sign bit cleared, the largest
    magnitude of a negative entry (or, with none, the largest entry). No
    temporary array, and integer maxima need no NaN checks.

    Parameters
    ----------
    heads : (..., n, N) ndarray
        Any IEEE float dtype.

    Returns
    -------
    (...) ndarray
        float64.
    """
    size = heads.dtype.itemsize
    largest = np.max(heads.view(f"i{size}"), axis=(-2, -1))
    unsigned = np.max(heads.view(f"u{size}"), axis=(-2, -1))
    magnitude = np.maximum(
        np.maximum(largest, 0).astype(unsigned.dtype), unsigned & ((1 << (8 * size - 1)) - 1)
    )
    return as_float(magnitude.view(heads.dtype), np.float64)


# Heads whose largest entry is 2**e with |e| up to this are multiplied as they
# are, and G's blocks scaled by 2**-e afterwards: no product or sum of such
# weights leaves the normal range where those of the rescaled weights would
# not, so G is the same (bitwise, but for entries at the underflow level).
# Weights outside it are rescaled before the product.
_UNSCALED_EXPONENT = {np.dtype(np.float32): 40, np.dtype(np.float64): 400}


def _convert_heads(sources: list[np.ndarray], targets: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Copy the heads (n, N) into ``targets`` (h, n, N) (the conversion to its dtype happens in the copy).

    Returns (e, non_finite) per head: the block of G that a head's weights
    enter is to be scaled by 2**-e (power_of_two_scale of its max-abs entry,
    rescaled before squaring; exact, so W and 2**k W give the same G: docs/mathematics.md §4),
    and the mask of heads with a non-finite entry (zeroed here, their G to be
    NaN). If a head's e is beyond _UNSCALED_EXPONENT, the copies are rescaled
    instead and every e is 0.
    """
    for source, target in zip(sources, targets, strict=True):
        widen_into(target, source)  # bfloat16 bits: shifted into float32, exactly
    maxima = max_abs(targets)
    non_finite = ~np.isfinite(maxima)
    if np.any(non_finite):
        targets[non_finite] = 0.0
    exponent = power_of_two_scale(maxima)
    if np.all(np.abs(exponent) <= _UNSCALED_EXPONENT[targets.dtype]):
        return exponent.tolist(), non_finite
    # exactly ldexp (for subnormal weights, float64 near 1e-310 or bfloat16 near 1e-39, 2**-e itself
    # overflows and ldexp is used), but by a multiplication where 2**-e is representable
    scale_by_power_of_two(targets, -exponent[:, None, None], out=targets)
    return [0] * len(sources), non_finite


def _power(exponent: int) -> np.float64:
    """2**exponent as a float64 scalar: a product with it is computed in float64 (|exponent| <= 800 here)."""
    return np.float64(2.0**exponent)


# The query heads of one key head are converted and multiplied against it in
# chunks of at most this many float values (16 MiB in float32). A chunk depends
# only on the shapes, never on memory settings or threads, so every G is
# bitwise the same however the work is split.
_PIECE_VALUES = 1 << 22
_buffers = threading.local()


def _scratch(role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A per-thread scratch array for ``role``, reused across calls (fresh pages cost a fault each)."""
    size = math.prod(shape)
    name = f"{role}_{dtype}"
    held = getattr(_buffers, name, None)
    if held is None or held.size < size:
        held = np.empty(size, dtype)
        setattr(_buffers, name, held)
    return held[:size].reshape(shape)


def _chunk_heads(n: int, N: int) -> int:
    """Most query heads converted at once: max(1, 2^22 // (n N))."""
    return max(1, _PIECE_VALUES // max(1, n * N))


def query_pieces(kv_head: np.ndarray, n: int, N: int, heads: np.ndarray | None = None) -> list[np.ndarray]:
    """Query heads (indices, in order of ``heads``) in pieces of whole key-head groups.

    ``kv_head[h]``: the key head of query head h. A piece holds consecutive
    groups of heads sharing a key head, at most max(1, 2^22 // (n N)) heads,
    or one group alone when it is larger (it is then converted in chunks of
    that size, its key only once). Pieces are the unit of work of
    :func:`piece_gram` (and of threads); they depend only on the shapes and
    the heads asked for.

    Parameters
    ----------
    kv_head : (H,) ndarray of int
        The key head of each query head.
    n, N : int
        The head shape.
    heads : ndarray of int, optional
        The query heads asked for (default: all), in order.

    Returns
    -------
    list of ndarray of int
        The pieces' query heads.
    """
    kv_head = np.asarray(kv_head)
    heads = np.arange(len(kv_head)) if heads is None else np.asarray(heads)
    most = _chunk_heads(n, N)
    groups = np.split(heads, np.flatnonzero(np.diff(kv_head[heads]) != 0) + 1) if len(heads) else []
    pieces: list[np.ndarray] = []
    current: list[np.ndarray] = []
    size = 0
    for group in groups:
        if size + len(group) > most and current:
            pieces.append(np.concatenate(current))
            current, size = [], 0
        current.append(group)
        size += len(group)
    if current:
        pieces.append(np.concatenate(current))
    return pieces


def piece_gram(
    w_query: np.ndarray, w_key: np.ndarray, kv_head: np.ndarray, queries: np.ndarray
) -> np.ndarray:
    """G (len(queries), 2n, 2n) of query heads ``queries`` of w_query (H, n, N), keys w_key[kv_head[h]].

    docs/mathematics.md §4, the Gram route, with grouped-query attention in mind: each key head of
    the piece is converted once and its G_KK = W_K W_K^T formed once; the
    query-key blocks G_QK of the queries sharing it come from one
    (c n x N)(N x n) product per chunk of at most 2^22 // (n N) queries; each
    G_QQ = W_Q W_Q^T from a symmetric rank-k update. A piece whose key heads
    each serve one query (multi-head attention) takes :func:`_paired_gram`
    instead. Scaling and dtypes as :func:`head_gram`; the heads may be strided
    views (a Conv1D's transposed columns): the conversion copy reads them. G is
    exactly symmetric (numpy fills the other triangle of a rank-k update by
    copying, and G_KQ is the transpose of G_QK), which
    statistics.head_statistics relies on.

    Parameters
    ----------
    w_query : (H, n, N) ndarray
        Every query head.
    w_key : (H_kv, n, N) ndarray
        Every key head.
    kv_head : (H,) ndarray of int
        The key head of each query head.
    queries : (h,) ndarray of int
        The piece's query heads (:func:`query_pieces`).

    Returns
    -------
    (h, 2n, 2n) ndarray
    """
    n, N = w_query.shape[-2:]
    dtype = accumulator_dtype(w_query.dtype, w_key.dtype)
    queries = np.asarray(queries)
    keys = np.asarray(kv_head)[queries]
    if len(set(keys.tolist())) == len(keys):  # not np.unique: its first call imports numpy.ma (15 ms)
        return _paired_gram(w_query, w_key, queries, keys, dtype)
    most = _chunk_heads(n, N)
    G = np.empty((len(queries), 2 * n, 2 * n))
    bad = np.zeros(len(queries), dtype=bool)
    K = _scratch("key", (1, n, N), dtype)
    for key in dict.fromkeys(keys.tolist()):  # each key head once, in order
        rows = np.flatnonzero(keys == key)
        (key_exponent,), (key_bad,) = _convert_heads([w_key[key]], K)
        # 2-D x @ x.T: numpy uses the symmetric rank-k update
        key_block = np.multiply(K[0] @ K[0].T, _power(-2 * key_exponent))
        for start in range(0, len(rows), most):
            chunk = rows[start : start + most]
            Q = _scratch("query", (len(chunk), n, N), dtype)
            exponent, bad[chunk] = _convert_heads([w_query[h] for h in queries[chunk]], Q)
            bad[chunk] |= key_bad
            qk = (Q.reshape(-1, N) @ K[0].T).reshape(-1, n, n)  # G_QK of the chunk at once
            for i, row in enumerate(chunk.tolist()):
                G[row, :n, :n] = key_block
                np.multiply(Q[i] @ Q[i].T, _power(-2 * exponent[i]), out=G[row, n:, n:])
                np.multiply(qk[i], _power(-exponent[i] - key_exponent), out=G[row, n:, :n])
                G[row, :n, n:] = G[row, n:, :n].T
    G[bad] = np.nan
    return G


def _paired_gram(
    w_query: np.ndarray, w_key: np.ndarray, queries: np.ndarray, keys: np.ndarray, dtype: np.dtype
) -> np.ndarray:
    """:func:`piece_gram` of heads whose key heads are all different: G = C C^T, C = [W_K; W_Q], per head.

    Nothing is shared, so each head's C is converted into one buffer and G
    comes from one symmetric rank-k update of C: the arithmetic of G_KK, G_QQ
    and G_QK, with one product per head instead of three. Heads go through the
    buffer in chunks of the same 2^22 values as a key head's queries.
    """
    n, N = w_query.shape[-2:]
    most = max(1, _chunk_heads(n, N) // 2)
    G = np.empty((len(queries), 2 * n, 2 * n))
    for start in range(0, len(queries), most):
        rows = np.arange(start, min(start + most, len(queries)))
        C = _scratch("pair", (len(rows), 2 * n, N), dtype)
        sources = [w[h] for row in rows for w, h in ((w_key, keys[row]), (w_query, queries[row]))]
        exponent, bad = _convert_heads(sources, C.reshape(-1, n, N))
        for i, row in enumerate(rows.tolist()):
            # 2-D x @ x.T: numpy uses the symmetric rank-k update
            if dtype == G.dtype:
                np.matmul(C[i], C[i].T, out=G[row])
            else:
                G[row] = C[i] @ C[i].T
            key_exponent, query_exponent = exponent[2 * i : 2 * i + 2]
            if key_exponent or query_exponent:  # the blocks of 2**-e W_K and 2**-e' W_Q
                G[row, :n, :n] *= _power(-2 * key_exponent)
                G[row, n:, n:] *= _power(-2 * query_exponent)
                G[row, :n, n:] *= _power(-key_exponent - query_exponent)
                G[row, n:, :n] *= _power(-key_exponent - query_exponent)
        G[rows[bad.reshape(-1, 2).any(axis=1)]] = np.nan
    return G


def head_gram(w_query: np.ndarray, w_key: np.ndarray, kv_head: np.ndarray | None = None) -> np.ndarray:
    """Gram matrix G = C C^T, C = [W_K; W_Q], of each head: (..., n, N) x 2 -> (..., 2n, 2n) float64.

    docs/mathematics.md §4, the Gram route. Each of W_K and W_Q counts as rescaled per head by
    (the power of two of) its own largest absolute entry, so normalized
    statistics are exact at any weight scale: the scaling is applied to G's
    blocks after the product (or, for weights beyond 2**+-_UNSCALED_EXPONENT,
    to the weights before it), exactly either way. Accepts float16, bfloat16
    (ml_dtypes' or the stored bits of :mod:`qkenergy.base.small_floats`),
    float32 and float64 (also memory-mapped); heads are
    converted a piece at a time and multiplied in ``accumulator_dtype``
    (float32 for 16-bit weights, else float64). A head with a non-finite
    weight gets a G full of NaN.

    Parameters
    ----------
    w_query : (..., n, N) ndarray
        The heads' query blocks (with ``kv_head``: (H, n, N)).
    w_key : (..., n, N) ndarray
        The key blocks, of the same shape (with ``kv_head``: (H_kv, n, N)).
    kv_head : (H,) ndarray of int, optional
        Grouped-query attention: the key head of each query head (no key is copied per query
        head, see :func:`piece_gram`).

    Returns
    -------
    (..., 2n, 2n) ndarray
        float64, keys first: [[G_KK, G_KQ], [G_QK, G_QQ]].

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.gram import head_gram
    >>> w_query, w_key = 0.5 * np.eye(2, 3), 0.5 * np.ones((2, 3))  # largest entries in [0.5, 1): unscaled
    >>> C = np.concatenate([w_key, w_query])
    >>> bool(np.array_equal(head_gram(w_query, w_key), C @ C.T))
    True
    >>> bool(np.array_equal(head_gram(4 * w_query, w_key), C @ C.T))  # W_Q's power of two is taken out
    True
    """
    w_query = np.asarray(w_query)
    w_key = np.asarray(w_key)
    if kv_head is None:
        if w_query.shape != w_key.shape or w_query.ndim < 2:
            raise ValueError(
                "head_gram: w_query and w_key must share a shape (..., n, N), "
                f"got {w_query.shape} and {w_key.shape}"
            )
        *batch, n, N = w_query.shape
        queries = w_query.reshape(-1, n, N)
        keys = w_key.reshape(-1, n, N)
        kv_head = np.arange(len(queries))
    else:
        kv_head = np.asarray(kv_head)
        if w_query.ndim != 3 or w_key.ndim != 3 or w_query.shape[1:] != w_key.shape[1:]:
            raise ValueError(
                "head_gram: with kv_head, w_query must be (H, n, N) and w_key (H_kv, n, N), "
                f"got {w_query.shape} and {w_key.shape}"
            )
        if kv_head.shape != (w_query.shape[0],) or np.any((kv_head < 0) | (kv_head >= w_key.shape[0])):
            raise ValueError(
                f"head_gram: kv_head must give a key head in [0, {w_key.shape[0]}) per query head"
            )
        batch, (n, N) = [w_query.shape[0]], w_query.shape[1:]
        queries, keys = w_query, w_key
    gram = np.empty((len(queries), 2 * n, 2 * n))
    for piece in query_pieces(kv_head, n, N):
        gram[piece] = piece_gram(queries, keys, kv_head, piece)
    return gram.reshape(*batch, 2 * n, 2 * n)


def head_dim(G: np.ndarray) -> int:
    """Head dimension n of a Gram matrix of shape (..., 2n, 2n).

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    int

    Raises
    ------
    ValueError
        G not of shape (..., 2n, 2n).
    """
    size: int = G.shape[-1]
    if G.ndim < 2 or G.shape[-2] != size or size % 2:
        raise ValueError(f"Gram matrix must have shape (..., 2n, 2n), got {G.shape}")
    return size // 2


def key_block(G: np.ndarray) -> np.ndarray:
    """G_KK = W_K W_K^T, the top-left n x n block.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (..., n, n) ndarray
        A view of G.
    """
    n = head_dim(G)
    return G[..., :n, :n]


def query_block(G: np.ndarray) -> np.ndarray:
    """G_QQ = W_Q W_Q^T, the bottom-right n x n block.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (..., n, n) ndarray
        A view of G.
    """
    n = head_dim(G)
    return G[..., n:, n:]


def query_key_block(G: np.ndarray) -> np.ndarray:
    """G_QK = W_Q W_K^T, the bottom-left n x n block.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (..., n, n) ndarray
        A view of G.
    """
    n = head_dim(G)
    return G[..., n:, :n]


def gram_norm_sq(G: np.ndarray) -> np.ndarray:
    """||L||^2 = sum_ij (G_KK)_ij (G_QQ)_ij = tr(W_K W_K^T W_Q W_Q^T) (docs/mathematics.md §4, the Gram route).

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (...) ndarray
        ||L||^2.
    """
    return np.sum(key_block(G) * query_block(G), axis=(-2, -1))


def gram_trace_square(G: np.ndarray) -> np.ndarray:
    """tr(L^2) = sum_ij (G_QK)_ij (G_QK)_ji (docs/mathematics.md §4, the Gram route).

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (...) ndarray
        tr(L^2).
    """
    qk = query_key_block(G)
    return np.sum(qk * np.swapaxes(qk, -1, -2), axis=(-2, -1))


def gram_trace(G: np.ndarray) -> np.ndarray:
    """tr L = tr G_QK (docs/mathematics.md §4, the Gram route).

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    (...) ndarray
        tr L.
    """
    return np.trace(query_key_block(G), axis1=-2, axis2=-1)


def gram_energies(G: np.ndarray) -> Energies:
    """Lemma 5 energies of L from its Gram matrix, via ||L||^2 and tr(L^2) (docs/mathematics.md §4, the Gram route).

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].

    Returns
    -------
    Energies
    """
    G = np.asarray(G, dtype=np.float64)
    return energies_from_invariants(gram_norm_sq(G), gram_trace_square(G))
