"""Each null's judgement of the heads: null mean and sd, z, two-sided p, Beta tail and BH-adjusted p.

The Gaussian null (a Gaussian head of the same shape, one law per (n, N), cached) and each
registered null per head (:data:`~qkenergy.analysis.nullspec.KINDS` with a sampler: the rotation
null, the head's own W_K, W_Q with the query's input space rotated at random) add their columns
to the head table (docs/mathematics.md §6 and §7).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.analysis.nullspec import KINDS, NullKind, NullSpec
from qkenergy.analysis.significance import TAIL_STATISTICS, bh_with_tail, judge
from qkenergy.base.parallel import thread_map
from qkenergy.formats.columns import Columns
from qkenergy.math.nulls import NULL_STATISTICS, NullLaw

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.run_config import RunConfig

__all__ = ["rotation_seed", "with_bh", "with_null_columns"]


def null_columns(infix: str = "") -> list[str]:
    """X_{infix}null_mean, X_{infix}null_sd, X_{infix}z, X_{infix}p for X in NULL_STATISTICS (a NullKind's infix)."""
    return [f"{x}_{infix}{s}" for x in NULL_STATISTICS for s in ("null_mean", "null_sd", "z", "p")]


def rotation_seed(seed: int, layer: int, head: int) -> int:
    """The rotation null's seed of one head: its own SeedSequence child of (seed, layer, head).

    Parameters
    ----------
    seed : int
        The run's seed.
    layer : int
        The head's layer.
    head : int
        The head's index in its layer.

    Returns
    -------
    int
        A 32-bit seed.
    """
    return int(np.random.SeedSequence([seed, layer, head]).generate_state(1, np.uint32)[0])


def head_null_rows(
    grams: np.ndarray, N: int, table: Columns, layer: int, spec: NullSpec | None, threads: int = 1
) -> dict[str, np.ndarray]:
    """The columns of every null per head (NaN unless ``spec`` draws it) and their floor flags for :func:`with_bh`."""
    heads, out = len(table["head"]), {}
    drawn = () if spec is None else spec.kinds  # a spec carries its kinds to Dask workers
    for kind in (k for k in dict.fromkeys([*KINDS.values(), *drawn]) if k.sampler is not None):
        out.update(_blank(kind.infix, heads))
        if spec is None or kind not in drawn:
            continue
        # Zero or non-finite heads have no orientation to randomise: their columns stay NaN.
        todo = [i for i, reason in enumerate(table["reason"]) if not reason]
        draw = functools.partial(_head_law, kind, grams, N, table["head"], layer, spec)
        for i, law in zip(todo, thread_map(draw, todo, threads), strict=True):
            _judge_into(out, kind.infix, law, table, slice(i, i + 1))
    return out


def _head_law(
    kind: NullKind, grams: np.ndarray, N: int, heads: np.ndarray, layer: int, spec: NullSpec, i: int
) -> NullLaw:
    """The law of head ``i`` under a null per head, seeded by (seed, layer, head)."""
    assert kind.sampler is not None  # a null per head has one
    seed = rotation_seed(spec.seed, layer, int(heads[i]))
    return kind.sampler(grams[i], N, spec.draws(kind.samples), seed, NULL_STATISTICS)


def _tails(infix: str) -> list[str]:
    """The Beta-tail columns of a null (X_{infix}p_tail for X in TAIL_STATISTICS)."""
    return [f"{x}_{infix}p_tail" for x in TAIL_STATISTICS]


def _blank(infix: str, heads: int) -> dict[str, np.ndarray]:
    """One null's columns (NaN) and its private floor flags (False)."""
    out = {c: np.full(heads, np.nan) for c in [*null_columns(infix), *_tails(infix)]}
    return out | {f"_{x}_{infix}floor": np.zeros(heads, dtype=bool) for x in TAIL_STATISTICS}


def _judge_into(out: dict[str, np.ndarray], infix: str, law: NullLaw, table: Columns, rows: Any) -> None:
    """Fill one null's columns (and floor flags) at ``rows`` from its law."""
    for x in NULL_STATISTICS:
        judged = judge(law, x, np.asarray(table[x], dtype=np.float64)[rows])
        for suffix in ("null_mean", "null_sd", "z", "p"):
            out[f"{x}_{infix}{suffix}"][rows] = judged[suffix]
        if x in TAIL_STATISTICS:
            out[f"{x}_{infix}p_tail"][rows] = judged["p_tail"]
            out[f"_{x}_{infix}floor"][rows] = judged["floor"]


def with_bh(table: Columns) -> Columns:
    """Add each null's BH-adjusted p of s and move its columns (in the order of its floor flags) before the lobes.

    Parameters
    ----------
    table : Columns
        The head table with every null's columns and floor flags.

    Returns
    -------
    Columns
        The table, each null's BH-adjusted p added (floor flags dropped).
    """
    moved: list[str] = []
    for at in [c[1:-5] for c in table if c.startswith("_symmetric_energy_") and c.endswith("_floor")]:
        floor = table.pop(f"_{at}floor").astype(bool)
        table[f"{at}p_bh"] = bh_with_tail(
            table[f"{at}p"].astype(np.float64), table[f"{at}p_tail"].astype(np.float64), floor
        )
        infix = at.removeprefix("symmetric_energy_")
        moved += [*null_columns(infix), *_tails(infix), f"{at}p_bh"]
    rest = [c for c in table if c not in moved and c not in ("alpha", "beta")]
    return {c: table[c] for c in [*rest, *moved, "alpha", "beta"]}


def with_null_columns(
    table: Columns,
    run: RunConfig,
    *,
    laws: Mapping[tuple[int, int], NullLaw],
    used: dict[tuple[int, int], NullLaw],
) -> Columns:
    """Add the Gaussian null columns, the Beta tail of s and its floor flag (first: :func:`with_bh` keeps that order).

    Parameters
    ----------
    table : Columns
        The head table.
    run : RunConfig
        Whether the Gaussian null is drawn, its spec, the cache, progress and threads.
    laws : mapping of (n, N) to NullLaw
        Laws already drawn (a survey's); other shapes are drawn (or read from the cache) here.
    used : dict
        Receives the Gaussian null law of each head shape (n, N) judged against.

    Returns
    -------
    Columns
    """
    extra = _blank("", len(table["head"]))
    if run.gaussian:
        from qkenergy.analysis.null_cache import null_law  # with its Monte Carlo engine, only when drawn

        for n, N in dict.fromkeys(zip(table["n"].tolist(), table["N"].tolist(), strict=True)):
            law = laws.get((int(n), int(N))) or null_law(
                run.spec, int(n), int(N), cache_dir=run.cache_dir, progress=run.progress,
                names=NULL_STATISTICS, threads=run.threads,
            )  # fmt: skip
            used[(int(n), int(N))] = law
            _judge_into(extra, "", law, table, (table["n"] == n) & (table["N"] == N))
    return {c: v for c, v in extra.items() if c[0] == "_"} | table | extra
