"""Null laws shared across a survey's workers: one per (n, N) shape, drawn once.

Each shape's law is read from the null cache or drawn as one Dask task per
seeded Monte Carlo block (spread over every worker), joined on the client
(bitwise :func:`qkenergy.math.nulls.null_law`) and stored in the null cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkenergy.surveys.units import run_null_blocks

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.nullspec import NullSpec


def shared_laws(
    client: Any, shapes: list[tuple[int, int]], spec: NullSpec, cache_dir: str | None, run: int
) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], list[Any]]]:
    """Start every shape's Gaussian null law: (laws already held by every worker, block tasks by shape).

    A law found in the null cache is scattered to every worker at once. A
    law to draw is split into its seeded Monte Carlo blocks, one task each,
    so that every worker draws part of every law (a law as one task would
    leave the other workers idle while that shape's units wait); the blocks
    joined in order are bitwise the law that ``analyze`` draws.
    """
    from qkenergy.analysis.null_cache import cached_null_law
    from qkenergy.math.montecarlo import block_count
    from qkenergy.math.nulls import NULL_STATISTICS

    laws: dict[tuple[int, int], Any] = {}
    drawing: dict[tuple[int, int], list[Any]] = {}
    # The dearest laws first (eigenproblems of size 2n per sample): the last block to finish is a cheap one.
    for n, N in sorted(shapes, key=lambda shape: (-shape[0], -shape[1])):
        law = None
        if cache_dir is not None:
            law = cached_null_law(spec, n, N, cache_dir=cache_dir, names=NULL_STATISTICS)
        if law is not None:
            laws[n, N] = client.scatter(law, broadcast=True, hash=False)
            continue
        drawing[n, N] = [
            client.submit(
                run_null_blocks,
                n,
                N,
                block,
                block + 1,
                spec,
                key=f"null-n{n}-N{N}-block{block}-run{run}",
                priority=10,  # before any unit: every unit of a shape waits for its whole law
            )
            for block in range(block_count(spec.samples))
        ]
    return laws, drawing


def join_law(
    client: Any, shape: tuple[int, int], blocks: list[Any], spec: NullSpec, cache_dir: str | None
) -> Any:
    """The law of ``shape`` from its finished block tasks: cached once, then scattered to every worker.

    Held by every worker, the law does not pull its units to one of them (a
    unit goes where its dependencies are).
    """
    from qkenergy.analysis.null_cache import store_null_law
    from qkenergy.math.nulls import NULL_STATISTICS, null_law_from_blocks

    law = null_law_from_blocks(*shape, client.gather(blocks), seed=spec.seed, names=NULL_STATISTICS)
    if cache_dir is not None:
        store_null_law(law, spec, cache_dir)
    return client.scatter(law, broadcast=True, hash=False)
