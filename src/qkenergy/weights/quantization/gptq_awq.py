"""Integer weights packed in 32-bit words: ``gptq`` (AutoGPTQ, GPTQModel) and ``awq`` (AutoAWQ, GEMM).

- ``gptq``: ``qweight`` packs 32/bits input rows per int32, ``qzeros`` 32/bits
  output columns, ``scales`` and ``g_idx`` (the group of each input column:
  act-order reorders them); ``checkpoint_format`` ``gptq`` stores z - 1 (so
  z = stored + 1), ``gptq_v2`` stores z;
- ``awq`` (GEMM packing): ``qweight`` and ``qzeros`` pack 8 output columns per
  int32 in the order 0, 2, 4, 6, 1, 3, 5, 7.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe
from qkenergy.weights.quantization.config import config_field, group_size, module_names
from qkenergy.weights.quantization.grids import blocks, dequantize_awq, dequantize_gptq
from qkenergy.weights.quantization.method import QWEIGHT, Quantization, QuantMethod, StoredWeight

__all__ = ["Awq", "Gptq"]


def _packed_shape(weight: StoredWeight) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The stored shapes of ``qweight`` and ``scales``, both 2-D."""
    qweight, scales = weight.stored_shape("qweight"), weight.stored_shape("scales")
    if len(qweight) != 2 or len(scales) != 2:
        raise QKEnergyError(f"{weight.where}: qweight and scales must be 2-D")
    return qweight, scales


def _label(q: Quantization, name: str) -> str:
    group = "channel" if q.group_size == -1 else f"group {q.group_size}"
    extra = " act-order" if q.desc_act else ""
    extra += "" if q.symmetric is None or q.symmetric else " asym"
    return f"{name} int{q.bits} {group}{extra}"


def _parts(weight: StoredWeight) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    qweight, qzeros = weight.read("qweight", "w"), weight.read("qzeros", "w")
    scales = weight.read("scales", "f")
    assert qweight is not None and qzeros is not None and scales is not None
    return qweight, qzeros, scales


class Gptq(QuantMethod):
    """``gptq``: 2-, 4- or 8-bit integers packed along the input rows, groups of input columns."""

    name = "gptq"
    storages = (QWEIGHT,)
    needs = "qweight, qzeros, scales (and g_idx)"

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        """As :meth:`QuantMethod.parse`: ``checkpoint_format``, ``bits``, ``group_size``, ``desc_act``, ``sym``."""
        fmt = raw.get("checkpoint_format", raw.get("format"))
        fmt = "gptq" if fmt is None else fmt
        if not isinstance(fmt, str):
            raise QKEnergyError(f"{where}: field 'checkpoint_format' is {describe(fmt)}; expected a string")
        fmt = fmt.lower()
        if fmt not in ("gptq", "gptq_v2"):
            raise QKEnergyError(
                f"{where}: GPTQ checkpoint_format {show_name(fmt)} is not read (only gptq and gptq_v2, "
                "the packings AutoGPTQ and GPTQModel save); analyze the unquantised checkpoint instead"
            )
        bits = config_field(raw, "bits", where, int, None)
        if bits not in (2, 4, 8):
            raise QKEnergyError(
                f"{where}: GPTQ bits is {describe(bits)}; qkenergy reads 2-, 4- and 8-bit GPTQ "
                "(3-bit fields straddle words)"
            )
        ignore = module_names(raw, "modules_to_not_convert", where)
        return Quantization(
            "gptq",
            fmt,
            bits,
            where,
            group_size=group_size(raw, "group_size", where, 128),
            desc_act=bool(config_field(raw, "desc_act", where, bool, False)),
            symmetric=bool(config_field(raw, "sym", where, bool, True)),
            ignore=ignore,
        )

    def label(self, q: Quantization) -> str:
        """As :meth:`QuantMethod.label`: the format (gptq, gptq_v2) names the method."""
        return _label(q, q.format)

    def shape(self, weight: StoredWeight) -> tuple[int, int]:
        """As :meth:`QuantMethod.shape`: out from ``scales``, in from ``qweight``'s packed rows."""
        qweight, scales = _packed_shape(weight)
        return int(scales[1]), int(qweight[0]) * (32 // weight.q.bits)

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        bits = weight.q.bits
        per = 32 // bits
        qweight, qzeros, scales = _parts(weight)
        groups = scales.shape[0]
        weight.expect("qweight", (cols // per, rows), qweight.shape, f"in/{per} x out, int32")
        weight.expect("qzeros", (groups, blocks(rows, per)), qzeros.shape, f"groups x out/{per}, int32")
        weight.expect("scales", (groups, rows), scales.shape, "groups x out")
        g_idx = weight.groups(weight.read("g_idx", "iu", required=False), cols, groups, "g_idx")
        size = weight.q.group_size
        assert size is not None
        if g_idx is not None and size != -1 and np.array_equal(g_idx, np.arange(cols) // size):
            g_idx = None  # the groups in order, as AutoGPTQ saves them without act-order: whole blocks
        if g_idx is None:
            expected = 1 if size == -1 else blocks(cols, size)
            weight.expect("scales", (expected, rows), scales.shape, f"groups of {size} input columns x out")
        offset = 1 if weight.q.format == "gptq" else 0
        return dequantize_gptq(qweight, qzeros, scales, g_idx, bits=bits, group_size=size, zero_offset=offset)


class Awq(QuantMethod):
    """``awq``: 4-bit integers packed along the output columns (GEMM order), groups of input columns."""

    name = "awq"
    storages = (QWEIGHT,)
    needs = "qweight, qzeros and scales"

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        """As :meth:`QuantMethod.parse`: ``version`` (gemm), ``bits`` / ``w_bit``, ``group_size``, ``zero_point``."""
        version = raw.get("version", raw.get("format", "gemm"))
        if not isinstance(version, str) or version.lower() != "gemm":
            raise QKEnergyError(
                f"{where}: AWQ version {describe(version)} is not read (only the GEMM packing, AutoAWQ's "
                "default); analyze the unquantised checkpoint instead"
            )
        bits = config_field(raw, "bits", where, int, config_field(raw, "w_bit", where, int, 4))
        if bits != 4:
            raise QKEnergyError(f"{where}: AWQ bits is {describe(bits)}; the GEMM packing is 4-bit")
        size = group_size(raw, "group_size", where, config_field(raw, "q_group_size", where, int, 128))
        return Quantization(
            "awq",
            "gemm",
            4,
            where,
            group_size=size,
            symmetric=not bool(config_field(raw, "zero_point", where, bool, True)),
            ignore=module_names(raw, "modules_to_not_convert", where),
        )

    def label(self, q: Quantization) -> str:
        """As :meth:`QuantMethod.label`: "awq gemm int4 group 128"."""
        return _label(q, f"awq {q.format}")

    def shape(self, weight: StoredWeight) -> tuple[int, int]:
        """As :meth:`QuantMethod.shape`: out from ``scales``, in from ``qweight``'s rows."""
        qweight, scales = _packed_shape(weight)
        return int(scales[1]), int(qweight[0])

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        qweight, qzeros, scales = _parts(weight)
        size = weight.q.group_size
        assert size is not None
        groups = 1 if size == -1 else blocks(cols, size)
        if rows % 8 or (size != -1 and cols % size):
            raise QKEnergyError(
                f"{weight.where}: [{rows}, {cols}] does not split into packs of 8 output columns and "
                f"groups of {size} input columns"
            )
        weight.expect("qweight", (cols, rows // 8), qweight.shape, "in x out/8, int32")
        weight.expect("qzeros", (groups, rows // 8), qzeros.shape, "groups x out/8, int32")
        weight.expect("scales", (groups, rows), scales.shape, "groups x out")
        return dequantize_awq(qweight, qzeros, scales, group_size=size)
