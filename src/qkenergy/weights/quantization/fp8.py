"""FP8 checkpoints: ``fp8`` (one scale per block or per tensor) and ``fbgemm_fp8`` (one per output row).

- ``fp8`` (DeepSeek-V3, Qwen3-FP8, Kimi K2): q in float8 e4m3, s =
  ``weight_scale_inv`` per ``weight_block_size`` block [a, b] (the last blocks
  of a row or column may be partial), or one scale per tensor;
- ``fbgemm_fp8`` (Meta's FP8 releases): q in float8, one ``weight_scale`` per output row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe
from qkenergy.weights.quantization.config import block_pair, config_field, module_names
from qkenergy.weights.quantization.grids import blocks, dequantize_grid
from qkenergy.weights.quantization.method import SCALED, Quantization, QuantMethod, StoredWeight, check_float8

__all__ = ["FbgemmFp8", "Fp8"]


def _float8_weight(weight: StoredWeight, part: str) -> tuple[np.ndarray, np.ndarray]:
    """The float8 ``weight`` and its scales ``part``, dtypes checked."""
    values = weight.read("weight", "f")
    assert values is not None
    scale = weight.read(part, "f")
    assert scale is not None
    check_float8(values.dtype, weight)
    return values, scale


class Fp8(QuantMethod):
    """``fp8``: float8 weights, ``weight_scale_inv`` per ``weight_block_size`` block or per tensor."""

    name = "fp8"
    storages = (SCALED,)
    needs = "weight (float8) and weight_scale_inv"

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        """As :meth:`QuantMethod.parse`: ``fmt`` (e4m3, e5m2), ``weight_block_size``, ``modules_to_not_convert``."""
        fmt = config_field(raw, "fmt", where, str, "e4m3").lower()
        if fmt not in ("e4m3", "e5m2"):
            raise QKEnergyError(f"{where}: field 'fmt' is {describe(fmt)}; expected 'e4m3' or 'e5m2'")
        block = raw.get("weight_block_size")
        size = None if block is None else block_pair(block, "weight_block_size", where)
        ignore = module_names(raw, "modules_to_not_convert", where)
        return Quantization("fp8", fmt, 8, where, block_size=size, ignore=ignore, symmetric=True)

    def label(self, q: Quantization) -> str:
        """As :meth:`QuantMethod.label`: "fp8 e4m3 block 128x128" or "fp8 e4m3 tensor"."""
        grain = "tensor" if q.block_size is None else f"block {q.block_size[0]}x{q.block_size[1]}"
        return f"fp8 {q.format} {grain}"

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        part = "weight_scale_inv"
        values, scale = _float8_weight(weight, part)
        if weight.q.block_size is None:
            weight.expect(part, (), () if scale.size == 1 else scale.shape, "one scale per tensor")
            return dequantize_grid(values, scale.reshape(1, 1))
        a, b = weight.q.block_size
        grid = (blocks(rows, a), blocks(cols, b))
        weight.expect(part, grid, scale.shape, f"one scale per {a} x {b} block of [{rows}, {cols}]")
        return dequantize_grid(values, scale, rows_per_scale=a, columns_per_scale=b)


class FbgemmFp8(QuantMethod):
    """``fbgemm_fp8``: float8 weights, one ``weight_scale`` per output row."""

    name = "fbgemm_fp8"
    storages = (SCALED,)
    needs = "weight (float8) and weight_scale"

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        """As :meth:`QuantMethod.parse`: ``modules_to_not_convert`` only."""
        ignore = module_names(raw, "modules_to_not_convert", where)
        return Quantization("fbgemm_fp8", "e4m3", 8, where, ignore=ignore, symmetric=True)

    def label(self, q: Quantization) -> str:
        """As :meth:`QuantMethod.label`: "fbgemm_fp8 e4m3 channel"."""
        return "fbgemm_fp8 e4m3 channel"

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        part = "weight_scale"
        values, scale = _float8_weight(weight, part)
        weight.expect(part, (rows, 1), scale.shape, "one scale per output row")
        return dequantize_grid(values, scale, rows_per_scale=1)
