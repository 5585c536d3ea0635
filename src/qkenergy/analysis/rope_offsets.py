"""Heads of a RoPE model at several relative offsets: one row per head and offset.

The form between a query at position i and a key at j is L_d = W_K^T R_d W_Q,
d = i - j (:mod:`qkenergy.math.rope`). Each head's Gram matrix is computed
once; each offset then costs one rotation of its query rows and columns
(G_d = P_d G P_d^T, O(n^2)) and the statistics of G_d, whatever the width N.
The null law of L_d is that of L (R_d W_Q is Gaussian when W_Q is), so the null
columns apply unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.math.rope import Rope, log_offsets
from qkenergy.weights.architecture import Architecture
from qkenergy.weights.rope_settings import context_length, has_rope, layer_ropes, stack_config

__all__ = ["OffsetPlan", "plan_offsets", "plan_stacks", "rope_description"]

OffsetPlan = tuple[list[Rope], list[int]]
# Each offset is a full set of rows: more than this is surely a typo (0-100000) rather than a plan.
MAX_OFFSETS = 4096


def plan_offsets(
    spec: Sequence[int | range] | str | None, config: Mapping[str, Any], arch: Architecture, where: str
) -> OffsetPlan | None:
    """Each layer's Rope and the offsets to read (``spec``: "log", offsets, or None for none).

    Parameters
    ----------
    spec : "log", int, range, sequence of int and range, or None
        The offsets asked for.
    config : mapping
        The model's configuration.
    arch : Architecture
        The attention stack.
    where : str
        The checkpoint, for errors.

    Returns
    -------
    OffsetPlan or None
        (the Rope of each layer, the sorted offsets); None when ``spec`` is None.

    Raises
    ------
    ArgumentError
        ``spec`` is not "log" or offsets, gives too many offsets, or "log" without a context length.
    """
    if spec is None:
        return None
    ropes = layer_ropes(config, arch, where)
    if isinstance(spec, str):
        if spec.strip().lower() != "log":
            raise ArgumentError(
                f"rope_offsets: expected 'log' or offsets such as 0,1,2,4, got {spec!r}",
                parameter="rope_offsets",
            )
        context = context_length(stack_config(config, arch))  # a tower's own context length
        if context is None:
            raise ArgumentError(
                f"rope_offsets log: {where} gives no context length (max_position_embeddings); "
                "pass the offsets, e.g. 0,1,2,4",
                parameter="rope_offsets",
            )
        return ropes, log_offsets(context)
    offsets: set[int] = set()
    too_many = ArgumentError(
        f"rope_offsets: more than {MAX_OFFSETS} offsets; use 'log' or fewer", parameter="rope_offsets"
    )
    for value in [spec] if isinstance(spec, int | np.integer | range) else spec:
        if isinstance(value, range) and value.step > 0 and value.start >= 0:
            if len(offsets) + len(value) > MAX_OFFSETS:  # checked before the range is expanded
                raise too_many
            offsets.update(value)
            continue
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ArgumentError(
                f"rope_offsets: {value!r} is not a non-negative integer offset", parameter="rope_offsets"
            )
        offsets.add(int(value))
    if len(offsets) > MAX_OFFSETS:
        raise too_many
    if not offsets:
        raise ArgumentError("rope_offsets: empty list of offsets", parameter="rope_offsets")
    return ropes, sorted(offsets)


def plan_stacks(
    spec: Sequence[int | range] | str | None,
    config: Mapping[str, Any],
    archs: Sequence[Architecture],
    where: str,
) -> dict[int, OffsetPlan | None]:
    """:func:`plan_offsets` for each attention stack with RoPE, keyed by ``id(arch)`` (None: no offsets).

    Parameters
    ----------
    spec : "log", int, range, sequence of int and range, or None
        The offsets asked for.
    config : mapping
        The model's configuration.
    archs : sequence of Architecture
        The model's attention stacks.
    where : str
        The checkpoint, for errors.

    Returns
    -------
    dict
        ``id(arch)`` -> its OffsetPlan or None.

    Raises
    ------
    QKEnergyError
        Offsets are asked for and no stack has a rotary embedding, or as :func:`plan_offsets`.
    """
    plans: dict[int, OffsetPlan | None] = {id(a): None for a in archs}
    if spec is None:
        return plans
    for arch in archs:
        if has_rope(config, arch):
            plans[id(arch)] = plan_offsets(spec, config, arch, where)
    if all(plan is None for plan in plans.values()):
        plan_offsets(spec, config, archs[0], where)  # raises: the model has no rotary embedding
    return plans


def rope_description(
    config: Mapping[str, Any], archs: Sequence[Architecture], where: str
) -> dict[str, Any] | None:
    """The rotary settings of the first stack with RoPE, for the analysis settings (None without RoPE).

    Parameters
    ----------
    config : mapping
        The model's configuration.
    archs : sequence of Architecture
        The model's attention stacks.
    where : str
        The checkpoint, for errors.

    Returns
    -------
    dict or None
        kind, theta, rotary_dim, head_dim, pairs, context; ``{"kind": "unknown"}`` when unreadable.
    """
    arch = next((a for a in archs if has_rope(config, a)), None)
    if arch is None:
        return None
    try:
        ropes = layer_ropes(config, arch, where)
    except QKEnergyError:  # unreadable settings only matter when offsets are asked for
        return {"kind": "unknown"}
    first = ropes[0]
    return {
        "kind": first.kind,
        "theta": sorted({r.theta for r in ropes}),
        "rotary_dim": first.rotary_dim,
        "head_dim": arch.head_dim,
        "pairs": first.pairs,
        "context": context_length(stack_config(config, arch)),
    }
