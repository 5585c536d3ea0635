"""Null law of a layer's whole form under Gaussian weights: symmetric energy and directionality.

A layer's form is L = sum_h W_K^{k(h)T} W_Q^h (query heads h, key heads k(h)
under grouped-query attention). Grouping the query heads by their key head,
L = sum_k W_K^{kT} (sum_{h: k(h) = k} W_Q^h), and a sum of m_k iid Gaussian
blocks is one Gaussian block of variance m_k. So under iid Gaussian weights the
layer's form has the law of W_K^T W_Q with W_K, W_Q of shape
(n, N), n = H_kv * head_dim, iid N(0, 1) entries except that the rows of W_Q
belonging to key head k have variance m_k (all equal, and then irrelevant, when
the grouping is uniform). The symmetric energy's mean is exact, (N+1)/(2N),
whatever n: a Gaussian W_Q is invariant under W_Q -> W_Q U, U orthogonal, and
E[s(L U)] = (N+1)/(2N) for every fixed L (:mod:`qkenergy.math.rotation`).

Directionality (:mod:`qkenergy.math.directionality`) depends on the
coordinates of R^N, not only on the 2n x 2n Gram matrix, so each draw forms
W_K and W_Q. Two exact routes, chosen by arithmetic:

- "gram": G_KK, G_QQ, G_QK (n x n) and the row / column norms of M = L^T as
  diag(W_Q^T G_KK W_Q), diag(W_K^T G_QQ W_K): about 8 n^2 N flops per draw;
- "dense": L = W_K^T W_Q itself (N x N): about 2 n N^2 flops per draw.

:func:`layer_null_flops` gives the cost of a law; callers skip (and say so)
shapes whose cost is beyond what they can afford.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.math import montecarlo
from qkenergy.math.defaults import SAMPLES
from qkenergy.math.directionality import DIRECTIONALITY_GAMMA, dense_norms, directionality
from qkenergy.math.nulls import NullLaw

__all__ = [
    "LAYER_NULL_STATISTICS",
    "LAYER_ROUTES",
    "layer_null_flops",
    "layer_null_law",
    "layer_null_route",
    "layer_null_samples",
]

LAYER_NULL_STATISTICS: tuple[str, ...] = ("symmetric_energy", "directionality")
LAYER_ROUTES: tuple[str, ...] = ("gram", "dense")

# Draws per sub-batch keep the temporaries near this many float64 values (32 MiB).
_BATCH_VALUES = 1 << 22


def _route_flops(n: int, N: int) -> dict[str, float]:
    return {"gram": 8.0 * n * n * N, "dense": 2.0 * n * N * N}


def layer_null_route(n: int, N: int) -> str:
    """The route with the least arithmetic per draw for a form W_K^T W_Q of (n, N) factors.

    Parameters
    ----------
    n : int
        Rows of the factors.
    N : int
        Residual width.

    Returns
    -------
    str
        "gram" or "dense".
    """
    costs = _route_flops(check_integer(n, "n"), check_integer(N, "N"))
    return min(costs, key=costs.__getitem__)


def layer_null_flops(n: int, N: int, samples: int, route: str | None = None) -> float:
    """Approximate floating-point operations of :func:`layer_null_law` (products only).

    Parameters
    ----------
    n : int
        The layer form's factor rows, H_kv * head_dim.
    N : int
        Residual width.
    samples : int
        Draws.
    route : str, optional
        "gram" (about 8 n^2 N flops per draw) or "dense" (2 n N^2); default the cheaper.

    Returns
    -------
    float
    """
    route = route or layer_null_route(n, N)
    return _route_flops(n, N)[route] * samples


def _check_groups(group_sizes: Sequence[int], head_dim: int) -> np.ndarray:
    sizes = np.asarray([check_integer(m, "group size", minimum=0) for m in group_sizes], dtype=np.float64)
    sizes = sizes[sizes > 0]  # a key head no query reads adds nothing to the form
    if sizes.size == 0:
        raise QKEnergyError("layer null: no query head")
    return np.repeat(np.sqrt(sizes), check_integer(head_dim, "head_dim"))


def layer_null_samples(
    rng: np.random.Generator,
    group_sizes: Sequence[int],
    head_dim: int,
    N: int,
    size: int,
    *,
    route: str | None = None,
    gamma: float = DIRECTIONALITY_GAMMA,
) -> np.ndarray:
    """Draws of (symmetric_energy, directionality) of a Gaussian layer's form.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    group_sizes : sequence of int
        ``group_sizes[k]``: query heads reading key head k (H / H_kv under grouped-query
        attention, all 1 for multi-head attention).
    head_dim : int
        n of one head.
    N : int
        Residual width.
    size : int
        Draws.
    route : str, optional
        "gram" or "dense" (default: :func:`layer_null_route`).
    gamma : float
        Directionality's outlier threshold (mean + gamma sd).

    Returns
    -------
    (size, 2) ndarray
        symmetric_energy and directionality (the published sign) of each draw.
    """
    scales = _check_groups(group_sizes, head_dim)
    n = scales.size
    N = check_integer(N, "N")
    size = check_integer(size, "size", minimum=0)
    route = route or layer_null_route(n, N)
    if route not in LAYER_ROUTES:
        raise ValueError(f"route must be one of {LAYER_ROUTES}, got {route!r}")
    out = np.empty((size, 2))
    step = max(1, _BATCH_VALUES // (2 * n * N + (N * N if route == "dense" else 3 * n * n)))
    for lo in range(0, size, step):
        k = min(size, lo + step) - lo
        w_key = rng.standard_normal((k, n, N))
        w_query = rng.standard_normal((k, n, N)) * scales[:, None]
        if route == "dense":
            L = np.swapaxes(w_key, 1, 2) @ w_query
            norm_sq = np.einsum("bij,bij->b", L, L)
            trace_sq = np.einsum("bij,bji->b", L, L)
            rows, cols = dense_norms(L)
        else:
            gkk = w_key @ np.swapaxes(w_key, 1, 2)
            gqq = w_query @ np.swapaxes(w_query, 1, 2)
            gqk = w_query @ np.swapaxes(w_key, 1, 2)
            norm_sq = np.einsum("bij,bij->b", gkk, gqq)
            trace_sq = np.einsum("bij,bji->b", gqk, gqk)
            # ||M_{i,:}||^2 = (W_Q^T G_KK W_Q)_ii, ||M_{:,j}||^2 = (W_K^T G_QQ W_K)_jj
            rows = np.sqrt(np.einsum("bai,bai->bi", gkk @ w_query, w_query))
            cols = np.sqrt(np.einsum("bai,bai->bi", gqq @ w_key, w_key))
        out[lo : lo + k, 0] = 0.5 + 0.5 * trace_sq / norm_sq
        out[lo : lo + k, 1] = directionality(rows, cols, gamma=gamma)
    return out


def layer_null_law(
    group_sizes: Sequence[int],
    head_dim: int,
    N: int,
    *,
    samples: int = SAMPLES,
    seed: int = 0,
    route: str | None = None,
    progress: bool = False,
) -> NullLaw:
    """The null law of (symmetric_energy, directionality) for a Gaussian layer of this shape.

    The layer's form is one W_K^T W_Q of n = H_kv * head_dim rows, the rows of key
    head k's queries of variance m_k; the exact mean of symmetric_energy is (N+1)/(2N)
    (docs/mathematics.md §8). Seeded through :func:`montecarlo.draw` (SeedSequence
    blocks, chunk-invariant).

    Parameters
    ----------
    group_sizes : sequence of int
        ``group_sizes[k]``: the query heads reading key head k (all 1 for multi-head attention).
    head_dim : int
        n of one head.
    N : int
        Residual width.
    samples : int
        Draws.
    seed : int
        Seed of the draws.
    route : str, optional
        "gram" or "dense" (default: :func:`layer_null_route`).
    progress : bool
        Show a progress bar on stderr.

    Returns
    -------
    NullLaw
        ``kind`` "layer", n = H_kv * head_dim, statistics ``LAYER_NULL_STATISTICS``.
    """
    n = len(_check_groups(group_sizes, head_dim))
    N = check_integer(N, "N")
    samples = check_integer(samples, "samples", minimum=2)
    seed = check_integer(seed, "seed", minimum=0)
    values = montecarlo.draw(
        lambda rng, size: layer_null_samples(rng, group_sizes, head_dim, N, size, route=route),
        samples,
        seed=seed,
        progress=progress,
        description=f"layer null n={n} N={N}",
    )
    values.flags.writeable = False
    return NullLaw(n=n, N=N, seed=seed, names=LAYER_NULL_STATISTICS, values=values, kind="layer")
