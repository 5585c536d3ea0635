"""``compressed-tensors`` checkpoints (llm-compressor): config groups of modules, each with its own scheme.

``float-quantized`` / ``int-quantized`` / ``naive-quantized`` (q stored as float8
or int8) and ``pack-quantized`` (int2/4/8 packed into int32 ``weight_packed``,
offset by 2^(bits-1)), scales per tensor, output channel, group of input
columns or 2-D block, optional zero points.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe
from qkenergy.weights.quantization.config import block_pair, config_field, module_names
from qkenergy.weights.quantization.grids import (
    PACKED_BITS,
    blocks,
    dequantize_grid,
    dtype_code,
    unpack_fields,
)
from qkenergy.weights.quantization.method import (
    PACKED,
    SCALED,
    Quantization,
    QuantMethod,
    StoredWeight,
    as_grid,
    check_float8,
)

__all__ = ["CompressedTensors", "Scheme", "scheme_for"]

_CT_FORMATS = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized")
_CT_STRATEGIES = ("tensor", "channel", "group", "block")


@dataclass(frozen=True)
class Scheme:
    """One compressed-tensors config group: which modules it covers and how their weights are stored.

    Parameters
    ----------
    name : str
        The config group's name.
    targets : tuple of str
        The modules it covers: names, "re:" patterns, or a class ("Linear").
    format : str
        float-quantized, int-quantized, naive-quantized, pack-quantized or dense.
    type : str
        "int" or "float".
    bits : int
        Bits per stored weight.
    strategy : str
        tensor, channel, group or block (others are refused when a weight needs them).
    symmetric : bool
        Whether the zero point is fixed.
    group_size : int or None
        Input columns per scale (``group``).
    block_size : (int, int) or None
        The block each scale covers (``block``).
    """

    name: str
    targets: tuple[str, ...]
    format: str  # float-quantized, int-quantized, naive-quantized, pack-quantized, dense
    type: str  # int or float
    bits: int
    strategy: str  # tensor, channel, group, block (others are refused when a weight needs them)
    symmetric: bool
    group_size: int | None = None
    block_size: tuple[int, int] | None = None

    def label(self) -> str:
        """The scheme in a table cell ("compressed-tensors pack-quantized int4 group 128")."""
        kind = f"{'fp' if self.type == 'float' else 'int'}{self.bits}"
        grain = {
            "group": f"group {self.group_size}",
            "block": f"block {self.block_size[0]}x{self.block_size[1]}" if self.block_size else "block",
        }.get(self.strategy, self.strategy)
        return f"compressed-tensors {self.format} {kind} {grain}{'' if self.symmetric else ' asym'}"

    def settings(self) -> dict[str, Any]:
        """What the analysis settings record of this config group."""
        return {
            "group": self.name,
            "targets": list(self.targets),
            "format": self.format,
            "type": self.type,
            "bits": self.bits,
            "strategy": self.strategy,
            "symmetric": self.symmetric,
            "group_size": self.group_size,
            "block_size": None if self.block_size is None else list(self.block_size),
        }


def _scheme(name: str, group: Mapping[str, Any], weights: Mapping[str, Any], fmt: str, where: str) -> Scheme:
    targets = module_names(group, "targets", where)
    kind = config_field(weights, "type", where, str, "int").lower()
    bits = config_field(weights, "num_bits", where, int, 8)
    if kind not in ("int", "float") or not 1 <= bits <= 16:
        raise QKEnergyError(f"{where}: weights of type {kind!r} with {bits} bits are not read")
    size = config_field(weights, "group_size", where, int, None)
    strategy = config_field(weights, "strategy", where, str, None)
    if strategy is None:
        strategy = "tensor" if size is None else "channel" if size == -1 else "group"
    strategy = strategy.lower()
    block = None
    if strategy == "block":
        block = block_pair(weights.get("block_structure"), "block_structure", where)
    if strategy == "group" and (size is None or not 1 <= size <= 1 << 20):
        raise QKEnergyError(
            f"{where}: group strategy with group_size {describe(size)}; expected a positive size"
        )
    return Scheme(
        name,
        targets,
        fmt.lower(),
        kind,
        int(bits),
        strategy,
        bool(config_field(weights, "symmetric", where, bool, True)),
        group_size=int(size) if strategy == "group" and size is not None else None,
        block_size=block,
    )


def _matches(module: str, target: str) -> bool:
    """A config target: ``re:PATTERN`` (matched from the start of the module name) or the exact name."""
    if target.startswith("re:"):
        try:
            return re.match(target[3:], module) is not None
        except re.error:
            return False
    return module == target


def scheme_for(module: str, q: Quantization) -> Scheme | None:
    """The config group of a linear module (exact name first, then ``re:``, then the class).

    Parameters
    ----------
    module : str
        The module.
    q : Quantization
        The checkpoint's settings.

    Returns
    -------
    Scheme or None
        None when no group covers it.
    """
    best: tuple[int, int, Scheme] | None = None
    for order, scheme in enumerate(q.schemes):
        for target in scheme.targets:
            if target.startswith("re:"):
                rank = 1 if _matches(module, target) else None
            elif "." not in target and target.endswith("Linear"):
                rank = 2  # a class: every attention projection is a Linear
            else:
                rank = 0 if module == target else None
            if rank is not None and (best is None or (rank, order) < best[:2]):
                best = (rank, order, scheme)
    return None if best is None else best[2]


class CompressedTensors(QuantMethod):
    """``compressed-tensors``: each module read by the scheme of its config group."""

    name = "compressed-tensors"
    storages = (PACKED, SCALED)
    needs = "weight_packed or weight (float8 / int8), and weight_scale"

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        """As :meth:`QuantMethod.parse`: ``format``, ``config_groups``, ``ignore``; transforms and sparsity refused."""
        fmt = config_field(raw, "format", where, str, "dense")
        if raw.get("transform_config"):
            raise QKEnergyError(
                f"{where}: compressed-tensors transform_config (online rotations of the weights' inputs) is not read"
            )
        sparsity = raw.get("sparsity_config")
        if isinstance(sparsity, Mapping) and sparsity.get("format") not in (None, "dense"):
            raise QKEnergyError(
                f"{where}: compressed-tensors sparsity format {describe(sparsity.get('format'))} is not read"
            )
        groups = config_field(raw, "config_groups", where, dict, {})
        schemes = []
        for name, group in groups.items():
            at = f"{where} config_groups.{name}"
            if not isinstance(group, Mapping):
                raise QKEnergyError(f"{at} is {describe(group)}; expected an object")
            weights = group.get("weights")
            if weights is None:
                continue  # activations only: the weights are stored as they are
            if not isinstance(weights, Mapping):
                raise QKEnergyError(f"{at}: field 'weights' is {describe(weights)}; expected an object")
            schemes.append(
                _scheme(str(name), group, weights, config_field(group, "format", at, str, fmt), at)
            )
        return Quantization(
            "compressed-tensors",
            fmt,
            max((s.bits for s in schemes), default=16),
            where,
            ignore=module_names(raw, "ignore", where),
            schemes=tuple(schemes),
        )

    def label(self, q: Quantization) -> str:
        """As :meth:`QuantMethod.label`: the labels of its schemes."""
        return " / ".join(s.label() for s in q.schemes) or "compressed-tensors"

    def module_label(self, q: Quantization, module: str) -> str:
        """As :meth:`QuantMethod.module_label`: the label of the module's scheme ("" without one)."""
        scheme = scheme_for(module, q)
        return "" if scheme is None else scheme.label()

    def prepare(self, weight: StoredWeight) -> None:
        """As :meth:`QuantMethod.prepare`: the module's scheme, checked to be one that is read."""
        q = weight.q
        scheme = scheme_for(weight.module, q)
        # left unquantised by the config: a name, its last parts, or an ``re:`` pattern
        ignored = any(_matches(weight.module, t) or weight.module.endswith("." + t) for t in q.ignore)
        if scheme is None or ignored:
            raise QKEnergyError(
                f"{weight.where}: stored quantised, but no config group of {weight.source.config} covers this module"
            )
        if scheme.strategy not in _CT_STRATEGIES:
            raise QKEnergyError(
                f"{weight.where}: compressed-tensors strategy {scheme.strategy!r} is not read"
            )
        if scheme.format not in _CT_FORMATS:
            raise QKEnergyError(f"{weight.where}: compressed-tensors format {scheme.format!r} is not read")
        if scheme.format == "pack-quantized" and (scheme.type != "int" or scheme.bits not in PACKED_BITS):
            raise QKEnergyError(
                f"{weight.where}: pack-quantized {scheme.type}{scheme.bits} is not read (int2, int4, int8 are)"
            )
        weight.scheme = scheme

    def shape(self, weight: StoredWeight) -> tuple[int, int]:
        """As :meth:`QuantMethod.shape`: a packed weight's from ``weight_shape`` or its words."""
        if weight.kind != PACKED.name:
            return super().shape(weight)
        assert weight.scheme is not None
        packed = weight.stored_shape("weight_packed")
        if len(packed) != 2:
            raise QKEnergyError(f"{weight.where}: weight_packed must be 2-D, got shape {list(packed)}")
        shape_name = weight.name("weight_shape", required=False)
        if shape_name is None:
            return int(packed[0]), int(packed[1]) * (32 // weight.scheme.bits)
        dims = np.asarray(weight.source.inner.tensor(shape_name)).reshape(-1)
        if dims.dtype.kind not in "iu" or dims.size != 2 or not (dims > 0).all():
            raise QKEnergyError(
                f"{weight.source.location}: tensor {show_name(shape_name)} must hold the two positive "
                "sizes [out, in] of the weight"
            )
        return int(dims[0]), int(dims[1])

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        """As :meth:`QuantMethod.dequantize`: the values, then the scheme's grid of scales and zero points."""
        scheme = weight.scheme
        assert scheme is not None
        values, offset = _values(weight, scheme, rows, cols)
        a, b = {
            "tensor": (rows, cols),
            "channel": (1, cols),
            "group": (1, scheme.group_size or cols),
            "block": scheme.block_size or (rows, cols),
        }[scheme.strategy]
        grid = (blocks(rows, a), blocks(cols, b))
        scale = weight.read("weight_scale", "f")
        assert scale is not None
        scale = as_grid(scale, grid)
        weight.expect("weight_scale", grid, scale.shape, f"{scheme.strategy} scales of [{rows}, {cols}]")
        zero = weight.read("weight_zero_point", "iu", required=False)
        if zero is not None and weight.kind == PACKED.name and zero.dtype.itemsize == 4:
            # packed along the output rows like the values, with the same offset: q - z = stored difference
            zero, offset = unpack_fields(zero, scheme.bits, axis=0)[: grid[0]], 0
        if zero is not None:
            zero = as_grid(zero, grid)
            weight.expect("weight_zero_point", grid, zero.shape, "one zero point per scale")
        if offset:
            zero = np.full(grid, offset, np.int16) if zero is None else zero.astype(np.int16) + offset
        g_idx = weight.groups(
            weight.read("weight_g_idx", "iu", required=False), cols, grid[1], "weight_g_idx"
        )
        return dequantize_grid(
            values,
            scale,
            zero=zero,
            rows_per_scale=a,
            columns_per_scale=b,
            column_group=g_idx,
        )


def _values(weight: StoredWeight, scheme: Scheme, rows: int, cols: int) -> tuple[np.ndarray, int]:
    """The stored values q of a weight and the offset its packing adds to them."""
    if weight.kind == PACKED.name:
        words = weight.read("weight_packed", "w")
        assert words is not None
        per = 32 // scheme.bits
        weight.expect("weight_packed", (rows, blocks(cols, per)), words.shape, f"out x in/{per}, int32")
        # stored unsigned, q + 2^(bits-1): the offset joins the zero
        return unpack_fields(words, scheme.bits, axis=1)[:, :cols], 1 << (scheme.bits - 1)
    stored = weight.read("weight", "fiu")
    assert stored is not None
    if scheme.type == "float":
        check_float8(stored.dtype, weight)
        return stored, 0
    if stored.dtype.kind in "iu":
        return stored, 0
    raise QKEnergyError(f"{weight.where}: an int-quantized weight of dtype {dtype_code(stored.dtype)}")
