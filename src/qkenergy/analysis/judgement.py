"""Each null's judgement of the heads: null mean and sd, z, two-sided p, Beta tail and BH-adjusted p.

The Gaussian null (a Gaussian head of the same shape, one law per (n, N), cached) and the
rotation null (the head's own W_K, W_Q with the query's input space rotated at random, one
law per head) add their columns to the head table (docs/mathematics.md §6 and §7).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from qkenergy.analysis.significance import TAIL_STATISTICS, bh_with_tail, judge
from qkenergy.base.parallel import thread_map
from qkenergy.formats.columns import Columns
from qkenergy.math.nulls import NULL_STATISTICS, NullLaw

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.run_config import RunConfig

__all__ = ["rotation_seed", "with_null_columns", "with_rotation_bh"]


def null_columns(kind: str = "") -> list[str]:
    """X_null_mean, X_null_sd, X_z, X_p for X in NULL_STATISTICS (``kind`` "rotation_" for that null)."""
    return [f"{x}_{kind}{s}" for x in NULL_STATISTICS for s in ("null_mean", "null_sd", "z", "p")]


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


def rotation_rows(
    grams: np.ndarray,
    N: int,
    table: Columns,
    layer: int,
    samples: int,
    seed: int,
    threads: int = 1,
) -> dict[str, np.ndarray]:
    """Rotation-null columns of one layer's heads (NaN when ``samples`` is 0), and private floor flags."""
    heads = len(table["head"])
    out = {c: np.full(heads, np.nan) for c in null_columns("rotation_")}
    for x in TAIL_STATISTICS:
        out[f"{x}_rotation_p_tail"] = np.full(heads, np.nan)
        out[f"_{x}_rotation_floor"] = np.zeros(heads, dtype=bool)
    if samples == 0:
        return out
    # Zero or non-finite heads have no orientation to randomise: their columns stay NaN.
    todo = [i for i, reason in enumerate(table["reason"]) if not reason]
    heads_ids = table["head"]

    from qkenergy.math.rotation import rotation_law  # only when the rotation null is drawn

    def draw(i: int) -> NullLaw:
        head_seed = rotation_seed(seed, layer, int(heads_ids[i]))
        return rotation_law(grams[i], N, samples=samples, seed=head_seed, names=NULL_STATISTICS)

    for i, law in zip(todo, thread_map(draw, todo, threads), strict=True):
        for x in NULL_STATISTICS:
            judged = judge(law, x, np.asarray(table[x], dtype=np.float64)[i : i + 1])
            for suffix in ("null_mean", "null_sd", "z", "p"):
                out[f"{x}_rotation_{suffix}"][i] = judged[suffix][0]
            if x in TAIL_STATISTICS:
                out[f"{x}_rotation_p_tail"][i] = judged["p_tail"][0]
                out[f"_{x}_rotation_floor"][i] = judged["floor"][0]
    return out


def with_rotation_bh(table: Columns) -> Columns:
    """Add symmetric_energy_rotation_p_bh and move the rotation columns before the lobes.

    Parameters
    ----------
    table : Columns
        The head table with the rotation columns of :func:`rotation_rows` and their floor flags.

    Returns
    -------
    Columns
        The table, the rotation null's BH-adjusted p added (floor flags dropped).
    """
    floor = table.pop("_symmetric_energy_rotation_floor").astype(bool)
    table["symmetric_energy_rotation_p_bh"] = bh_with_tail(
        table["symmetric_energy_rotation_p"].astype(np.float64),
        table["symmetric_energy_rotation_p_tail"].astype(np.float64),
        floor,
    )
    rotation = [
        *null_columns("rotation_"),
        "symmetric_energy_rotation_p_tail",
        "symmetric_energy_rotation_p_bh",
    ]
    rest = [c for c in table if c not in rotation and c not in ("alpha", "beta")]
    return {c: table[c] for c in [*rest, *rotation, "alpha", "beta"]}


def with_null_columns(
    table: Columns,
    run: RunConfig,
    *,
    laws: Mapping[tuple[int, int], NullLaw],
    used: dict[tuple[int, int], NullLaw] | None = None,
) -> Columns:
    """Insert the Gaussian null columns (before the lobes), the Beta tail and BH-adjusted p of s.

    Parameters
    ----------
    table : Columns
        The head table.
    run : RunConfig
        Whether the Gaussian null is drawn, its spec, the cache, progress and threads.
    laws : mapping of (n, N) to NullLaw
        Laws already drawn (a survey's); other shapes are drawn (or read from the cache) here.
    used : dict, optional
        Receives the Gaussian null law of each head shape (n, N) judged against.

    Returns
    -------
    Columns
    """
    null, spec, cache_dir, progress, threads = (
        run.gaussian,
        run.spec,
        run.cache_dir,
        run.progress,
        run.threads,
    )
    heads = len(table["head"])
    extra = {c: np.full(heads, np.nan) for c in null_columns()}
    extra["symmetric_energy_p_tail"] = np.full(heads, np.nan)
    floor = np.zeros(heads, dtype=bool)
    if null:
        from qkenergy.analysis.null_cache import null_law  # with its Monte Carlo engine, only when drawn

        for n, N in dict.fromkeys(zip(table["n"].tolist(), table["N"].tolist(), strict=True)):
            law = laws.get((int(n), int(N))) or null_law(
                spec,
                int(n),
                int(N),
                cache_dir=cache_dir,
                progress=progress,
                names=NULL_STATISTICS,
                threads=threads,
            )
            if used is not None:
                used[(int(n), int(N))] = law
            rows = (table["n"] == n) & (table["N"] == N)
            for x in NULL_STATISTICS:
                judged = judge(law, x, np.asarray(table[x][rows], dtype=np.float64))
                for suffix in ("null_mean", "null_sd", "z", "p"):
                    extra[f"{x}_{suffix}"][rows] = judged[suffix]
                if x in TAIL_STATISTICS:
                    extra[f"{x}_p_tail"][rows] = judged["p_tail"]
                    floor[rows] = judged["floor"]
    extra["symmetric_energy_p_bh"] = bh_with_tail(
        extra["symmetric_energy_p"], extra["symmetric_energy_p_tail"], floor
    )
    base = {c: v for c, v in table.items() if c not in ("alpha", "beta")}
    return {**base, **extra, "alpha": table["alpha"], "beta": table["beta"]}
