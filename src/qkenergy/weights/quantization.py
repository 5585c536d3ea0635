"""Quantised safetensors checkpoints: ``quantization_config`` read, weights dequantised exactly.

A quantised checkpoint stores a linear weight W (``[out_features, in_features]``)
as integers or 8-bit floats q plus scales s (and zero points z), each scale
shared by a block of entries. Every method read here is one formula,

    W[i, j] = (q[i, j] - z[r(i), c(j)]) * s[r(i), c(j)],

with its own storage of q, s, z and its own grid: the scale row r(i) = i // a
and column c(j) = j // b (or a per-column group index, "act-order"):

- ``fp8`` (DeepSeek-V3, Qwen3-FP8, Kimi K2): q in float8 e4m3, s =
  ``weight_scale_inv`` per ``weight_block_size`` block [a, b] (the last blocks
  of a row or column may be partial), or one scale per tensor;
- ``fbgemm_fp8`` (Meta's FP8 releases): q in float8, one ``weight_scale`` per output row;
- ``compressed-tensors`` (llm-compressor): ``float-quantized`` / ``int-quantized`` /
  ``naive-quantized`` (q stored as float8 or int8) and ``pack-quantized`` (int2/4/8
  packed into int32 ``weight_packed``, offset by 2^(bits-1)), scales per tensor,
  output channel, group of input columns or 2-D block, optional zero points;
- ``gptq`` (AutoGPTQ, GPTQModel): ``qweight`` packs 32/bits input rows per int32,
  ``qzeros`` 32/bits output columns, ``scales`` and ``g_idx`` (the group of
  each input column: act-order reorders them); ``checkpoint_format`` ``gptq``
  stores z - 1 (so z = stored + 1), ``gptq_v2`` stores z;
- ``awq`` (AutoAWQ, GEMM packing): ``qweight`` and ``qzeros`` pack 8 output
  columns per int32 in the order 0, 2, 4, 6, 1, 3, 5, 7.

Packed fields are read low bits first from the little-endian words. q - z is
exact in float32 and so is its product with a 16-bit scale (an 8-bit value
times an 11-bit significand); with float32 scales the float32 product is the
exact product rounded once (relative error below 2^-24).

Anything else (bitsandbytes, HQQ, EETQ, unknown methods, other packings) is
refused in one line naming the method and the config file. Modules that the
config leaves unquantised are stored as plain float weights and read as they are.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError, check_memory
from qkenergy.base.json_input import describe, read_object
from qkenergy.base.small_floats import as_float
from qkenergy.weights.safetensors_io import DTYPES

__all__ = [
    "METHODS",
    "Quantization",
    "QuantizedTensors",
    "Scheme",
    "dequantize_awq",
    "dequantize_gptq",
    "dequantize_grid",
    "parse_quantization",
    "product_dtype",
    "quantized_tensors",
    "read_quantization",
    "stored_quantization",
    "unpack_fields",
]

METHODS: tuple[str, ...] = ("fp8", "fbgemm_fp8", "compressed-tensors", "gptq", "awq")
"""The ``quant_method`` values dequantised here."""

# Known methods that are refused, each with what it stores (for the message).
_REFUSED: dict[str, str] = {
    "bitsandbytes": "NF4 / FP4 codebooks, or LLM.int8 rows with outliers",
    "hqq": "half-quadratic codes with per-group float zeros",
    "eetq": "int8 weights laid out for its own kernels",
}
_FP8_FORMATS = {"F8_E4M3": "e4m3", "F8_E5M2": "e5m2"}
_CT_FORMATS = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized")
_CT_STRATEGIES = ("tensor", "channel", "group", "block")
_PACKED_BITS = (2, 4, 8)  # fields never straddle a byte, so every packer agrees on where they lie
# AutoAWQ's GEMM packing puts output column ORDER[k] of each group of 8 in the k-th nibble.
_AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_AWQ_UNPACK = tuple(int(k) for k in np.argsort(_AWQ_ORDER))


# ----------------------------------------------------------------------------- pure dequantisation


def unpack_fields(packed: np.ndarray, bits: int, axis: int, order: Sequence[int] | None = None) -> np.ndarray:
    """The unsigned ``bits``-bit fields of 32-bit words, low bits first, laid out along ``axis``.

    ``packed`` (int32 or uint32, little-endian) holds 32/bits consecutive
    entries of ``axis`` per word: field k of word w is bits [k*bits, (k+1)*bits)
    of w and lands at index w * 32/bits + k, or, with ``order`` (a permutation
    of the fields of a word), field order[k] lands there. Returns C-ordered uint8.

    Parameters
    ----------
    packed : ndarray of int32 or uint32
        The words.
    bits : int
        Bits per field (2, 4 or 8).
    axis : int
        The axis the fields unpack along (its length grows 32/bits times).
    order : sequence of int or None
        A permutation of a word's fields; None: low bits first.

    Returns
    -------
    ndarray of uint8
        ``packed``'s shape with ``axis`` 32/bits times longer.

    Raises
    ------
    ValueError
        ``bits`` is not 2, 4 or 8, or the words are not 32-bit integers.
    """
    if bits not in _PACKED_BITS:
        raise ValueError(f"bits must be one of {_PACKED_BITS}, got {bits}")
    words = np.asarray(packed)
    if words.dtype.itemsize != 4 or words.dtype.kind not in "iu":
        raise ValueError(f"packed words must be 32-bit integers, got {words.dtype}")
    # In memory a little-endian word's bytes come lowest first, whatever the host.
    little = np.ascontiguousarray(words, dtype=words.dtype.newbyteorder("<"))
    octets = little.view(np.uint8).reshape(*words.shape, 4)
    per_byte, mask = 8 // bits, np.uint8((1 << bits) - 1)
    fields = [
        octets[..., k // per_byte] >> np.uint8(k % per_byte * bits) & mask
        for k in (range(32 // bits) if order is None else order)
    ]
    axis %= words.ndim
    shape = list(words.shape)
    shape[axis] *= 32 // bits
    return np.stack(fields, axis=axis + 1).reshape(shape)


# The float dtypes a scale or a float8 weight may have.
_FLOAT_CODES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0")


def product_dtype(scale_dtype: np.dtype) -> np.dtype:
    """The dtype (q - z) * s is formed in: float32, unless the scales are float64.

    q - z is a small integer (or a float8 value), exact in float32, and a float32 product of two
    float32 numbers is the exact product rounded once; float64 scales (rare) would be rounded
    before the product, so they are multiplied in float64 and the product rounded to float32.

    Parameters
    ----------
    scale_dtype : numpy.dtype
        The stored scales' dtype.

    Returns
    -------
    numpy.dtype
        float64 for float64 scales, else float32.
    """
    return np.dtype(np.float64 if _code(scale_dtype) == "F64" else np.float32)


def _values(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` as a new C-ordered float array; float8 through a table of its 256 values (exact,
    several times faster than ml_dtypes' cast element by element)."""
    if values.dtype.kind not in "biuf":  # float8 (or bfloat16) bits: base.small_floats
        return as_float(values, dtype)
    return np.array(values, dtype=dtype, order="C")


def dequantize_grid(
    values: np.ndarray,
    scale: np.ndarray,
    *,
    zero: np.ndarray | None = None,
    rows_per_scale: int | None = None,
    columns_per_scale: int | None = None,
    column_group: np.ndarray | None = None,
) -> np.ndarray:
    """W[i, j] = (values[i, j] - zero[r, c]) * scale[r, c], r = i // rows_per_scale, c = j // columns_per_scale.

    ``values`` (out, in): integers, or float8 read as their values; ``scale``
    and ``zero`` (R, C): one per block of the grid, the last block of a row or
    column possibly partial (None: one block spans the axis). ``column_group``
    (in,) replaces j // columns_per_scale (GPTQ's g_idx). Returns C-ordered
    float32, each entry the exact value rounded once (``product_dtype``): exact
    whenever it fits, as with 16-bit scales (8-bit values times 11-bit significands).

    Parameters
    ----------
    values : (out, in) ndarray
        The stored integers or float8 values.
    scale : (R, C) ndarray
        One scale per block.
    zero : (R, C) ndarray or None
        One zero point per block; None: 0.
    rows_per_scale, columns_per_scale : int or None
        The block's size along each axis; None: the whole axis.
    column_group : (in,) ndarray of int or None
        Each column's block index along the columns, replacing j // columns_per_scale.

    Returns
    -------
    (out, in) ndarray of float32
        C-ordered.

    Raises
    ------
    ValueError
        The scales or zeros do not fit the weight's shape in blocks of that size.
    """
    rows, cols = values.shape
    dtype = product_dtype(scale.dtype)
    s = as_float(scale, dtype, copy=True)
    z = None if zero is None else as_float(zero, dtype, copy=True)
    a = rows if rows_per_scale is None or s.shape[0] == 1 else rows_per_scale
    b = cols if columns_per_scale is None or s.shape[1] == 1 else columns_per_scale
    grid = (-(-rows // a), s.shape[1] if column_group is not None else -(-cols // b))
    if s.shape != grid or (z is not None and z.shape != grid):
        raise ValueError(f"scales {s.shape} do not fit a [{rows}, {cols}] weight in blocks of [{a}, {b}]")
    out = _values(values, dtype)
    # NaN or infinite values and scales, or products beyond float32, make non-finite weights:
    # the statistics say so per head ("non-finite weights"), so numpy's warnings would only be noise
    with np.errstate(all="ignore"):
        return _scaled(out, s, z, a, b, column_group)


_GRID_ROWS_BYTES = 4 << 20  # the scale grid of this many bytes of rows at a time (a cache-sized piece)


def _scaled(
    out: np.ndarray, s: np.ndarray, z: np.ndarray | None, a: int, b: int, column_group: np.ndarray | None
) -> np.ndarray:
    """dequantize_grid's arithmetic, in place on ``out`` (float32 or float64), returned as float32."""
    rows, cols = out.shape
    if column_group is None and rows % a == 0 and cols % b == 0:
        # whole blocks: each scale broadcast over its block, no grid of the weight's size
        blocks = out.reshape(rows // a, a, cols // b, b)
        if z is not None:
            blocks -= z[:, None, :, None]
        blocks *= s[:, None, :, None]
    else:
        row_index = np.arange(rows) // a
        col_index = np.arange(cols) // b if column_group is None else np.asarray(column_group, np.intp)
        # The grids of a few rows at a time: they stay in cache (30 % faster than whole-matrix grids),
        # and np.take keeps C order (a[:, index] would come back transposed in memory).
        step = max(1, _GRID_ROWS_BYTES // (4 * cols))
        for first in range(0, rows, step):
            rows_here = row_index[first : first + step]
            if z is not None:
                out[first : first + step] -= np.take(z[rows_here], col_index, axis=1)
            out[first : first + step] *= np.take(s[rows_here], col_index, axis=1)
    return out if out.dtype == np.float32 else out.astype(np.float32)


def dequantize_gptq(
    qweight: np.ndarray,
    qzeros: np.ndarray,
    scales: np.ndarray,
    g_idx: np.ndarray | None,
    *,
    bits: int,
    group_size: int,
    zero_offset: int,
) -> np.ndarray:
    """GPTQ: W[j, i] = (q[i, j] - z[g(i), j]) * scales[g(i), j], as W (out, in) float32.

    q: ``qweight`` (in * bits/32, out) unpacked along its rows; z: ``qzeros``
    (groups, out * bits/32) unpacked along its columns, plus ``zero_offset``
    (1 for checkpoint_format gptq, which stores z - 1; 0 for gptq_v2); g(i) =
    g_idx[i] (act-order) or i // group_size (group_size -1: one group).

    Parameters
    ----------
    qweight : (in * bits/32, out) ndarray of int32
        The packed weights.
    qzeros : (groups, out * bits/32) ndarray of int32
        The packed zero points.
    scales : (groups, out) ndarray
        The scales.
    g_idx : (in,) ndarray of int or None
        Each input column's group (act-order); None: i // group_size.
    bits : int
        Bits per field (2, 4 or 8).
    group_size : int
        Input columns per group; -1: one group.
    zero_offset : int
        Added to the stored zero points (1 for gptq, 0 for gptq_v2).

    Returns
    -------
    (out, in) ndarray of float32
    """
    # the words transposed (a small copy) unpack straight into W's C order
    q = unpack_fields(qweight.T, bits, axis=1)
    z = unpack_fields(qzeros, bits, axis=1)[:, : q.shape[0]].astype(np.int16) + zero_offset
    size = None if group_size == -1 else group_size
    return dequantize_grid(
        q, scales.T, zero=z.T, rows_per_scale=1, columns_per_scale=size, column_group=g_idx
    )


def dequantize_awq(
    qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, *, group_size: int
) -> np.ndarray:
    """AWQ (GEMM): W[j, i] = (q[i, j] - z[i // group_size, j]) * scales[i // group_size, j], W (out, in).

    q: ``qweight`` (in, out/8) and z: ``qzeros`` (groups, out/8), 4-bit fields in
    AutoAWQ's order (nibble k holds column 0, 2, 4, 6, 1, 3, 5, 7 of each 8).

    Parameters
    ----------
    qweight : (in, out/8) ndarray of int32
        The packed 4-bit weights.
    qzeros : (groups, out/8) ndarray of int32
        The packed 4-bit zero points.
    scales : (groups, out) ndarray
        The scales.
    group_size : int
        Input channels per group; -1: one group.

    Returns
    -------
    (out, in) ndarray of float32
    """
    q = unpack_fields(qweight.T, 4, axis=0, order=_AWQ_UNPACK)
    z = unpack_fields(qzeros, 4, axis=1, order=_AWQ_UNPACK)
    size = None if group_size == -1 else group_size
    return dequantize_grid(q, scales.T, zero=z.T, rows_per_scale=1, columns_per_scale=size)


# ----------------------------------------------------------------------------- the config


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
        kind = f"{'fp' if self.type == 'float' else 'int'}{self.bits}"
        grain = {
            "group": f"group {self.group_size}",
            "block": f"block {self.block_size[0]}x{self.block_size[1]}" if self.block_size else "block",
        }.get(self.strategy, self.strategy)
        return f"compressed-tensors {self.format} {kind} {grain}{'' if self.symmetric else ' asym'}"

    def settings(self) -> dict[str, Any]:
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


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's ``quantization_config``, validated: how its quantised weights are stored.

    Parameters
    ----------
    method : str
        One of ``METHODS``.
    format : str
        fp8: e4m3; gptq: gptq or gptq_v2; awq: gemm; compressed-tensors: the global format.
    bits : int
        Bits per stored weight.
    where : str
        The config file, for messages.
    group_size : int or None
        GPTQ, AWQ: input columns per scale (-1: one group per column).
    block_size : (int, int) or None
        fp8: the block each scale covers; None: one scale per tensor.
    desc_act : bool
        GPTQ act-order (a ``g_idx`` gives each column's group).
    symmetric : bool or None
        Whether the zero point is fixed; None when the method does not say.
    ignore : tuple of str
        Modules the config leaves unquantised.
    schemes : tuple of Scheme
        compressed-tensors: its config groups.
    """

    method: str  # one of METHODS
    format: str  # fp8: e4m3; gptq: gptq or gptq_v2; awq: gemm; compressed-tensors: the global format
    bits: int
    where: str  # the config file, for messages
    group_size: int | None = None  # gptq, awq (-1: one group per column)
    block_size: tuple[int, int] | None = None  # fp8 (None: one scale per tensor)
    desc_act: bool = False  # gptq act-order
    symmetric: bool | None = None
    ignore: tuple[str, ...] = ()  # modules the config leaves unquantised
    schemes: tuple[Scheme, ...] = ()  # compressed-tensors config groups

    def label(self) -> str:
        """The method in a table cell (compressed-tensors: see Scheme.label)."""
        if self.method == "fp8":
            grain = (
                "tensor" if self.block_size is None else f"block {self.block_size[0]}x{self.block_size[1]}"
            )
            return f"fp8 {self.format} {grain}"
        if self.method == "fbgemm_fp8":
            return "fbgemm_fp8 e4m3 channel"
        if self.method in ("gptq", "awq"):
            group = "channel" if self.group_size == -1 else f"group {self.group_size}"
            extra = " act-order" if self.desc_act else ""
            extra += "" if self.symmetric is None or self.symmetric else " asym"
            # gptq's format (gptq or gptq_v2) names the method too; awq's is the packing (gemm)
            name = self.format if self.method == "gptq" else f"awq {self.format}"
            return f"{name} int{self.bits} {group}{extra}"
        return " / ".join(s.label() for s in self.schemes) or "compressed-tensors"

    def settings(self) -> dict[str, Any]:
        """What the analysis settings record (method, format, bits, group or block size, ...)."""
        out: dict[str, Any] = {
            "method": self.method,
            "format": self.format,
            "bits": self.bits,
            "group_size": self.group_size,
            "block_size": None if self.block_size is None else list(self.block_size),
            "desc_act": self.desc_act,
            "symmetric": self.symmetric,
            "ignore": list(self.ignore),
            "config": self.where,
        }
        if self.schemes:
            out["schemes"] = [s.settings() for s in self.schemes]
        return out


def _field(obj: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) and kind is not bool:
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected {_kind_name(kind)}")
    if not isinstance(value, kind):
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {bool: "a boolean", int: "an integer", str: "a string", list: "an array", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _names(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = _field(obj, key, where, list, [])
    if not all(isinstance(v, str) for v in value):
        raise QKEnergyError(f"{where}: field {key!r} must be an array of module names")
    return tuple(value)


def _group_size(obj: Mapping[str, Any], key: str, where: str, default: int) -> int:
    size = _field(obj, key, where, int, default)
    if size != -1 and not 1 <= size <= 1 << 20:
        raise QKEnergyError(f"{where}: field {key!r} is {size}; expected a positive integer or -1")
    return int(size)


def _pair(value: Any, key: str, where: str) -> tuple[int, int]:
    if isinstance(value, str) and re.fullmatch(r"\d{1,7}x\d{1,7}", value):
        value = [int(v) for v in value.split("x")]
    expected = f"expected [rows, columns] of a block, two integers from 1 to {1 << 20}"
    if not isinstance(value, list) or len(value) != 2:
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; {expected}")
    for i, v in enumerate(value):
        if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 20):
            raise QKEnergyError(
                f"{where}: field {key!r} is {describe(value)}: element {i} (the {('rows', 'columns')[i]}) "
                f"is {describe(v)}; {expected}"
            )
    return int(value[0]), int(value[1])


def _refuse(method: str, where: str, why: str = "") -> QKEnergyError:
    stored = f" ({why})" if why else ""
    return QKEnergyError(
        f"{where}: quantization_config has quant_method {show_name(method)}{stored}, which qkenergy does not "
        f"read (it dequantises {', '.join(METHODS)}); analyze the unquantised checkpoint instead"
    )


def parse_quantization(config: Mapping[str, Any], where: str) -> Quantization | None:
    """The validated ``quantization_config`` of a config.json dict (None: plain weights).

    compressed-tensors' older key ``compression_config`` is read too. Refused in
    one line naming the method and ``where`` (the config file): bitsandbytes,
    HQQ, EETQ, any method not in :data:`METHODS`, and the packings of a known
    method that are not read (GPTQ 3-bit or marlin, AWQ gemv, ...).

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    where : str
        The config file, for messages.

    Returns
    -------
    Quantization or None

    Raises
    ------
    QKEnergyError
        A method or packing that is not read, or a field of the wrong type or value.
    """
    raw = config.get("quantization_config")
    if raw is None and isinstance(config.get("compression_config"), Mapping):
        raw = config["compression_config"]
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise QKEnergyError(f"{where}: field 'quantization_config' is {describe(raw)}; expected an object")
    here = f"{where} (quantization_config)"
    method = raw.get("quant_method")
    if method is None and (raw.get("load_in_4bit") or raw.get("load_in_8bit")):
        method = "bitsandbytes"
    if not isinstance(method, str):
        raise QKEnergyError(
            f"{here}: field 'quant_method' is {describe(method)}; expected the name of the method"
        )
    method = method.lower()
    if method == "gguf":
        # transformers writes this when it saves a model it loaded from a GGUF file: it dequantised
        # every tensor on loading, so the safetensors beside this config hold plain weights
        return None
    if method == "fp8":
        return _fp8(raw, here)
    if method == "fbgemm_fp8":
        return Quantization(
            "fbgemm_fp8", "e4m3", 8, here, ignore=_names(raw, "modules_to_not_convert", here), symmetric=True
        )
    if method == "compressed-tensors":
        return _compressed_tensors(raw, here)
    if method == "gptq":
        return _gptq(raw, here)
    if method == "awq":
        return _awq(raw, here)
    if method == "bitsandbytes":
        if raw.get("load_in_4bit"):
            kind = "4-bit NF4 / FP4 codebooks"
        elif raw.get("load_in_8bit"):
            kind = "8-bit LLM.int8 rows with outliers"
        else:
            kind = _REFUSED[method]
        raise _refuse(method, where, kind)
    raise _refuse(method, where, _REFUSED.get(method, ""))


# Files beside config.json where older exports keep the quantisation: AutoGPTQ, AutoAWQ.
SIDE_FILES: dict[str, str] = {"quantize_config.json": "gptq", "quant_config.json": "awq"}
_SIDE_FILE_BYTES = 1 << 20


def read_quantization(config: Mapping[str, Any], where: str, root: Path | None = None) -> Quantization | None:
    """:func:`parse_quantization` of config.json (``where``), else of a side file in ``root``.

    AutoGPTQ and AutoAWQ used to write the settings to quantize_config.json /
    quant_config.json beside a config.json that does not have them.

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    where : str
        config.json, for messages.
    root : pathlib.Path or None
        The checkpoint directory holding the side files; None: config.json only.

    Returns
    -------
    Quantization or None
        None for plain weights.

    Raises
    ------
    QKEnergyError
        As :func:`parse_quantization`, or a side file that cannot be read.
    """
    found = parse_quantization(config, where)
    if found is not None or root is None:
        return found
    for name, method in SIDE_FILES.items():
        path = root / name
        if path.is_file():
            side = read_object(path, show_path(path), "the quantisation settings", _SIDE_FILE_BYTES)
            return parse_quantization(
                {"quantization_config": {"quant_method": method, **side}}, show_path(path)
            )
    return None


def _fp8(raw: Mapping[str, Any], where: str) -> Quantization:
    fmt = _field(raw, "fmt", where, str, "e4m3").lower()
    if fmt not in ("e4m3", "e5m2"):
        raise QKEnergyError(f"{where}: field 'fmt' is {describe(fmt)}; expected 'e4m3' or 'e5m2'")
    block = raw.get("weight_block_size")
    size = None if block is None else _pair(block, "weight_block_size", where)
    ignore = _names(raw, "modules_to_not_convert", where)
    return Quantization("fp8", fmt, 8, where, block_size=size, ignore=ignore, symmetric=True)


def _gptq(raw: Mapping[str, Any], where: str) -> Quantization:
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
    bits = _field(raw, "bits", where, int, None)
    if bits not in (2, 4, 8):
        raise QKEnergyError(
            f"{where}: GPTQ bits is {describe(bits)}; qkenergy reads 2-, 4- and 8-bit GPTQ "
            "(3-bit fields straddle words)"
        )
    ignore = _names(raw, "modules_to_not_convert", where)
    return Quantization(
        "gptq",
        fmt,
        bits,
        where,
        group_size=_group_size(raw, "group_size", where, 128),
        desc_act=bool(_field(raw, "desc_act", where, bool, False)),
        symmetric=bool(_field(raw, "sym", where, bool, True)),
        ignore=ignore,
    )


def _awq(raw: Mapping[str, Any], where: str) -> Quantization:
    version = raw.get("version", raw.get("format", "gemm"))
    if not isinstance(version, str) or version.lower() != "gemm":
        raise QKEnergyError(
            f"{where}: AWQ version {describe(version)} is not read (only the GEMM packing, AutoAWQ's "
            "default); analyze the unquantised checkpoint instead"
        )
    bits = _field(raw, "bits", where, int, _field(raw, "w_bit", where, int, 4))
    if bits != 4:
        raise QKEnergyError(f"{where}: AWQ bits is {describe(bits)}; the GEMM packing is 4-bit")
    size = _group_size(raw, "group_size", where, _field(raw, "q_group_size", where, int, 128))
    return Quantization(
        "awq",
        "gemm",
        4,
        where,
        group_size=size,
        symmetric=not bool(_field(raw, "zero_point", where, bool, True)),
        ignore=_names(raw, "modules_to_not_convert", where),
    )


def _compressed_tensors(raw: Mapping[str, Any], where: str) -> Quantization:
    fmt = _field(raw, "format", where, str, "dense")
    for key in ("transform_config",):
        if raw.get(key):
            raise QKEnergyError(
                f"{where}: compressed-tensors {key} (online rotations of the weights' inputs) is not read"
            )
    sparsity = raw.get("sparsity_config")
    if isinstance(sparsity, Mapping) and sparsity.get("format") not in (None, "dense"):
        raise QKEnergyError(
            f"{where}: compressed-tensors sparsity format {describe(sparsity.get('format'))} is not read"
        )
    groups = _field(raw, "config_groups", where, dict, {})
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
        schemes.append(_scheme(str(name), group, weights, _field(group, "format", at, str, fmt), at))
    return Quantization(
        "compressed-tensors",
        fmt,
        max((s.bits for s in schemes), default=16),
        where,
        ignore=_names(raw, "ignore", where),
        schemes=tuple(schemes),
    )


def _scheme(name: str, group: Mapping[str, Any], weights: Mapping[str, Any], fmt: str, where: str) -> Scheme:
    targets = _names(group, "targets", where)
    kind = _field(weights, "type", where, str, "int").lower()
    bits = _field(weights, "num_bits", where, int, 8)
    if kind not in ("int", "float") or not 1 <= bits <= 16:
        raise QKEnergyError(f"{where}: weights of type {kind!r} with {bits} bits are not read")
    size = weights.get("group_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
        raise QKEnergyError(f"{where}: field 'group_size' is {describe(size)}; expected an integer")
    strategy = _field(weights, "strategy", where, str, None)
    if strategy is None:
        strategy = "tensor" if size is None else "channel" if size == -1 else "group"
    strategy = strategy.lower()
    block = None
    if strategy == "block":
        block = _pair(weights.get("block_structure"), "block_structure", where)
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
        bool(_field(weights, "symmetric", where, bool, True)),
        group_size=int(size) if strategy == "group" and size is not None else None,
        block_size=block,
    )


# ----------------------------------------------------------------------------- modules and names


def _matches(module: str, target: str) -> bool:
    """A config target: ``re:PATTERN`` (matched from the start of the module name) or the exact name."""
    if target.startswith("re:"):
        try:
            return re.match(target[3:], module) is not None
        except re.error:
            return False
    return module == target


def _ignored(module: str, ignore: Iterable[str]) -> bool:
    """Whether the config leaves a module unquantised (a name, its last parts, or an ``re:`` pattern)."""
    return any(_matches(module, t) or module.endswith("." + t) for t in ignore)


def _scheme_for(module: str, q: Quantization) -> Scheme | None:
    """compressed-tensors: the config group of a linear module (exact name first, then ``re:``, then the class)."""
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


# How a module's weight is stored, by the tensors beside it.
_STORED_AS = {
    "qweight": ("qweight", "qzeros", "scales", "g_idx"),  # GPTQ, AWQ
    "packed": ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx"),
    "scaled": ("weight", "weight_scale_inv", "weight_scale", "weight_zero_point", "weight_g_idx"),
}
_METHOD_STORAGE = {
    "fp8": ("scaled",),
    "fbgemm_fp8": ("scaled",),
    "gptq": ("qweight",),
    "awq": ("qweight",),
    "compressed-tensors": ("packed", "scaled"),
}
_NEEDS = {
    "fp8": "weight (float8) and weight_scale_inv",
    "fbgemm_fp8": "weight (float8) and weight_scale",
    "gptq": "qweight, qzeros, scales (and g_idx)",
    "awq": "qweight, qzeros and scales",
    "compressed-tensors": "weight_packed or weight (float8 / int8), and weight_scale",
}
_SCALED_CODES = ("F8_E4M3", "F8_E5M2", "I8")


class QuantizedTensors:
    """A tensor source whose quantised linear weights read as dequantised float32 ``<module>.weight``.

    Wraps a :class:`~qkenergy.weights.safetensors_io.TensorSource` (or any reader
    with ``names``, ``shape``, ``dtype``, ``tensor``). A module's weight is
    quantised when its stored parts say so: ``qweight`` (GPTQ, AWQ),
    ``weight_packed`` (compressed-tensors), or a float8 / int8 ``weight`` with a
    scale beside it; the name ``<module>.weight`` the layouts ask for then reads
    as the dequantised float32 array. Every other tensor, and a module stored in
    floats (left unquantised by the config), reads as stored. The parts are read
    (checked reads) only when the weight is; :meth:`stored_names` names them
    (the fingerprints hash their bytes). With ``quantization`` None (a config
    without quantization_config) a quantised weight is one error line.

    Parameters
    ----------
    inner : object
        The wrapped reader (``names``, ``shape``, ``dtype``, ``tensor``).
    quantization : Quantization or None
        The checkpoint's settings; None for a config without quantization_config.
    config : str
        The config file, for messages.
    """

    def __init__(self, inner: Any, quantization: Quantization | None, config: str) -> None:
        self.inner = inner
        self.quantization = quantization
        self.config = config  # the config file, for messages
        stored = list(inner.names)
        self._stored = set(stored)
        self._virtual: dict[str, str] = {}  # <module>.weight -> module, for weights stored without one
        for name in stored:
            module, _, part = name.rpartition(".")
            if part in ("qweight", "weight_packed") and module + ".weight" not in self._stored:
                self._virtual.setdefault(module + ".weight", module)
        self._names = stored + list(self._virtual)

    @property
    def names(self) -> Collection[str]:
        return self._names

    def __contains__(self, name: object) -> bool:
        return name in self._virtual or name in self._stored

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    @property
    def location(self) -> str:
        """How messages name the checkpoint (that of the wrapped source)."""
        return str(getattr(self.inner, "location", "the checkpoint"))

    def __getattr__(self, name: str) -> Any:
        # files, file_of, split_reads, release, close, ...: the wrapped source's
        if name in ("inner", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def storage(self, name: str) -> str | None:
        """How tensor ``name`` is stored: "qweight", "packed", "scaled", or None (as it reads)."""
        if name in self._virtual:
            module = self._virtual[name]
            return "qweight" if module + ".qweight" in self._stored else "packed"
        if not name.endswith(".weight") or name not in self._stored:
            return None
        module = name[: -len(".weight")]
        if not any(f"{module}.{s}" in self._stored for s in ("weight_scale_inv", "weight_scale")):
            return None
        return "scaled" if _code(self.inner.dtype(name)) in _SCALED_CODES else None

    def stored_names(self, name: str) -> list[str]:
        """The stored tensors that ``name`` is read from: its parts when dequantised, else itself."""
        kind = self.storage(name)
        if kind is None:
            return [name]
        module = name[: -len(".weight")]
        return [p for p in (f"{module}.{s}" for s in _STORED_AS[kind]) if p in self._stored]

    def quantization_of(self, name: str) -> str:
        """The quantisation of tensor ``name`` for a table cell: its label, "" when read as stored."""
        if self.storage(name) is None or self.quantization is None:
            return ""
        if self.quantization.method == "compressed-tensors":
            scheme = _scheme_for(name[: -len(".weight")], self.quantization)
            return "" if scheme is None else scheme.label()
        return self.quantization.label()

    def shape(self, name: str) -> tuple[int, ...]:
        kind = self._checked(name)
        if kind is None:
            return tuple(self.inner.shape(name))
        return _Weight(self, name[: -len(".weight")], kind).shape()

    def dtype(self, name: str) -> np.dtype:
        if self._checked(name) is None:
            dtype: np.dtype = self.inner.dtype(name)
            return dtype
        return np.dtype(np.float32)

    def tensor(self, name: str) -> np.ndarray:
        """Read-only array of ``name``: dequantised float32 for a quantised weight, else as stored."""
        kind = self._checked(name)
        if kind is None:
            array: np.ndarray = self.inner.tensor(name)
            return array
        weight = _Weight(self, name[: -len(".weight")], kind)
        rows, cols = weight.shape()
        check_memory(8 * rows * cols, f"{self.location}: dequantised tensor {show_name(name)}")
        out = weight.dequantize(rows, cols)
        out.flags.writeable = False
        return out

    def prefetch(self, names: Iterable[str]) -> None:
        """Read the stored tensors behind ``names`` into the page cache (TensorSource.prefetch)."""
        fetch = getattr(self.inner, "prefetch", None)
        if fetch is not None:
            fetch([p for n in names for p in self.stored_names(n)])

    def _checked(self, name: str) -> str | None:
        """storage(name), with one error line when the config does not say how to read it."""
        kind = self.storage(name)
        if kind is None:
            return None
        parts = ", ".join(p.rpartition(".")[2] for p in self.stored_names(name))
        q = self.quantization
        if q is None:
            raise QKEnergyError(
                f"{self.location}: tensor {show_name(name)} is stored quantised ({parts}) but "
                f"{self.config} has no quantization_config saying how; add the checkpoint's own "
                "quantization_config (its quantize_config.json for old GPTQ exports)"
            )
        if kind not in _METHOD_STORAGE[q.method]:
            raise QKEnergyError(
                f"{self.location}: tensor {show_name(name)} is stored as {parts}, not as "
                f"{q.method} stores a weight ({_NEEDS[q.method]}; {self.config})"
            )
        return kind

    def __repr__(self) -> str:
        label = "no quantization_config" if self.quantization is None else self.quantization.label()
        return f"QuantizedTensors({label!r}, {self.inner!r})"


def _code(dtype: np.dtype) -> str:
    """The safetensors code of a numpy dtype (for messages and the storage test)."""
    for code in DTYPES:
        if DTYPES[code] == dtype:
            return code
    return str(dtype)


def _blocks(size: int, block: int) -> int:
    return -(-size // block)


class _Weight:
    """One quantised weight of a :class:`QuantizedTensors`: its parts checked, then dequantised."""

    def __init__(self, source: QuantizedTensors, module: str, kind: str) -> None:
        self.source = source
        self.module = module
        self.kind = kind
        q = source.quantization
        assert q is not None
        self.q = q
        self.scheme: Scheme | None = None
        if q.method == "compressed-tensors":
            scheme = _scheme_for(module, q)
            if scheme is None or _ignored(module, q.ignore):
                raise QKEnergyError(
                    f"{self.where}: stored quantised, but no config group of {source.config} covers this module"
                )
            if scheme.strategy not in _CT_STRATEGIES:
                raise QKEnergyError(
                    f"{self.where}: compressed-tensors strategy {scheme.strategy!r} is not read"
                )
            if scheme.format not in _CT_FORMATS:
                raise QKEnergyError(f"{self.where}: compressed-tensors format {scheme.format!r} is not read")
            if scheme.format == "pack-quantized" and (
                scheme.type != "int" or scheme.bits not in _PACKED_BITS
            ):
                raise QKEnergyError(
                    f"{self.where}: pack-quantized {scheme.type}{scheme.bits} is not read (int2, int4, int8 are)"
                )
            self.scheme = scheme

    @property
    def where(self) -> str:
        return f"{self.source.location}: {show_name(self.module + '.weight')}"

    def name(self, part: str, *, required: bool = True) -> str | None:
        name = f"{self.module}.{part}"
        if name in self.source._stored:
            return name
        if required:
            held = ", ".join(p.rpartition(".")[2] for p in self.source.stored_names(self.module + ".weight"))
            raise QKEnergyError(
                f"{self.where}: missing tensor {show_name(name)}; the checkpoint holds {held} of this "
                f"weight, and {self.q.method} stores {_NEEDS[self.q.method]}"
            )
        return None

    def stored_shape(self, part: str) -> tuple[int, ...]:
        name = self.name(part)
        assert name is not None
        return tuple(self.source.inner.shape(name))

    def read(self, part: str, kinds: str, *, required: bool = True) -> np.ndarray | None:
        """A part's array, checked to have a float dtype (``kinds`` "f"), an integer one ("iu"),
        either ("fiu"), or to be 32-bit packed words ("w": I32 or U32)."""
        name = self.name(part, required=required)
        if name is None:
            return None
        array: np.ndarray = self.source.inner.tensor(name)
        code = _code(array.dtype)
        if kinds == "w":
            ok, expected = code in ("I32", "U32"), "I32 (packed words)"
        else:
            ok = array.dtype.kind in kinds.replace("f", "") or ("f" in kinds and code in _FLOAT_CODES)
            expected = {"f": "a float dtype", "iu": "an integer dtype"}.get(kinds, "a float or integer dtype")
        if not ok:
            raise QKEnergyError(
                f"{self.source.location}: tensor {show_name(name)} has dtype {code}; expected {expected}"
            )
        return array

    def expect(self, part: str, shape: tuple[int, ...], got: tuple[int, ...], what: str) -> None:
        if tuple(got) != tuple(shape):
            raise QKEnergyError(
                f"{self.source.location}: tensor {show_name(self.module + '.' + part)} has shape "
                f"{list(got)}, expected {list(shape)} ({what})"
            )

    def shape(self) -> tuple[int, int]:
        """(out, in) of the weight from the shapes of its parts (no weight bytes read)."""
        if self.kind == "qweight":
            qweight, scales = self.stored_shape("qweight"), self.stored_shape("scales")
            if len(qweight) != 2 or len(scales) != 2:
                raise QKEnergyError(f"{self.where}: qweight and scales must be 2-D")
            if self.q.method == "gptq":
                return int(scales[1]), int(qweight[0]) * (32 // self.q.bits)
            return int(scales[1]), int(qweight[0])
        if self.kind == "packed":
            assert self.scheme is not None
            packed = self.stored_shape("weight_packed")
            if len(packed) != 2:
                raise QKEnergyError(f"{self.where}: weight_packed must be 2-D, got shape {list(packed)}")
            shape_name = self.name("weight_shape", required=False)
            if shape_name is None:
                return int(packed[0]), int(packed[1]) * (32 // self.scheme.bits)
            dims = np.asarray(self.source.inner.tensor(shape_name)).reshape(-1)
            if dims.dtype.kind not in "iu" or dims.size != 2 or not (dims > 0).all():
                raise QKEnergyError(
                    f"{self.source.location}: tensor {show_name(shape_name)} must hold the two positive "
                    "sizes [out, in] of the weight"
                )
            return int(dims[0]), int(dims[1])
        stored = self.stored_shape("weight")
        if len(stored) != 2:
            raise QKEnergyError(f"{self.where}: a quantised weight must be 2-D, got shape {list(stored)}")
        return int(stored[0]), int(stored[1])

    def dequantize(self, rows: int, cols: int) -> np.ndarray:
        if self.kind == "qweight":
            return self._gptq_awq(rows, cols) if self.q.method == "gptq" else self._awq(rows, cols)
        if self.q.method in ("fp8", "fbgemm_fp8"):
            return self._fp8(rows, cols)
        return self._compressed(rows, cols)

    def _fp8(self, rows: int, cols: int) -> np.ndarray:
        weight = self.read("weight", "f")
        assert weight is not None
        part = "weight_scale_inv" if self.q.method == "fp8" else "weight_scale"
        scale = self.read(part, "f")
        assert scale is not None
        _check_float8(weight.dtype, self)
        if self.q.method == "fbgemm_fp8":
            self.expect(part, (rows, 1), scale.shape, "one scale per output row")
            return dequantize_grid(weight, scale, rows_per_scale=1)
        if self.q.block_size is None:
            self.expect(part, (), () if scale.size == 1 else scale.shape, "one scale per tensor")
            return dequantize_grid(weight, scale.reshape(1, 1))
        a, b = self.q.block_size
        grid = (_blocks(rows, a), _blocks(cols, b))
        self.expect(part, grid, scale.shape, f"one scale per {a} x {b} block of [{rows}, {cols}]")
        return dequantize_grid(weight, scale, rows_per_scale=a, columns_per_scale=b)

    def _groups(self, g_idx: np.ndarray | None, cols: int, groups: int, part: str) -> np.ndarray | None:
        if g_idx is None:
            return None
        self.expect(part, (cols,), g_idx.shape, "one group per input column")
        g = g_idx.astype(np.int64)
        if g.size and (g.min() < 0 or g.max() >= groups):
            raise QKEnergyError(
                f"{self.source.location}: tensor {show_name(self.module + '.' + part)} names groups "
                f"outside 0..{groups - 1}"
            )
        return g

    def _gptq_awq(self, rows: int, cols: int) -> np.ndarray:
        bits = self.q.bits
        per = 32 // bits
        qweight, qzeros = self.read("qweight", "w"), self.read("qzeros", "w")
        scales = self.read("scales", "f")
        assert qweight is not None and qzeros is not None and scales is not None
        groups = scales.shape[0]
        self.expect("qweight", (cols // per, rows), qweight.shape, f"in/{per} x out, int32")
        self.expect("qzeros", (groups, _blocks(rows, per)), qzeros.shape, f"groups x out/{per}, int32")
        self.expect("scales", (groups, rows), scales.shape, "groups x out")
        g_idx = self._groups(self.read("g_idx", "iu", required=False), cols, groups, "g_idx")
        size = self.q.group_size
        assert size is not None
        if g_idx is not None and size != -1 and np.array_equal(g_idx, np.arange(cols) // size):
            g_idx = None  # the groups in order, as AutoGPTQ saves them without act-order: whole blocks
        if g_idx is None:
            expected = 1 if size == -1 else _blocks(cols, size)
            self.expect("scales", (expected, rows), scales.shape, f"groups of {size} input columns x out")
        offset = 1 if self.q.format == "gptq" else 0
        return dequantize_gptq(qweight, qzeros, scales, g_idx, bits=bits, group_size=size, zero_offset=offset)

    def _awq(self, rows: int, cols: int) -> np.ndarray:
        qweight, qzeros = self.read("qweight", "w"), self.read("qzeros", "w")
        scales = self.read("scales", "f")
        assert qweight is not None and qzeros is not None and scales is not None
        size = self.q.group_size
        assert size is not None
        groups = 1 if size == -1 else _blocks(cols, size)
        if rows % 8 or (size != -1 and cols % size):
            raise QKEnergyError(
                f"{self.where}: [{rows}, {cols}] does not split into packs of 8 output columns and "
                f"groups of {size} input columns"
            )
        self.expect("qweight", (cols, rows // 8), qweight.shape, "in x out/8, int32")
        self.expect("qzeros", (groups, rows // 8), qzeros.shape, "groups x out/8, int32")
        self.expect("scales", (groups, rows), scales.shape, "groups x out")
        return dequantize_awq(qweight, qzeros, scales, group_size=size)

    def _compressed(self, rows: int, cols: int) -> np.ndarray:
        scheme = self.scheme
        assert scheme is not None
        offset = 0
        if self.kind == "packed":
            words = self.read("weight_packed", "w")
            assert words is not None
            per = 32 // scheme.bits
            self.expect("weight_packed", (rows, _blocks(cols, per)), words.shape, f"out x in/{per}, int32")
            values: np.ndarray = unpack_fields(words, scheme.bits, axis=1)[:, :cols]
            offset = 1 << (scheme.bits - 1)  # stored unsigned, q + 2^(bits-1): the offset joins the zero
        else:
            stored = self.read("weight", "fiu")
            assert stored is not None
            if scheme.type == "float":
                _check_float8(stored.dtype, self)
                values = stored
            elif stored.dtype.kind in "iu":
                values = stored
            else:
                raise QKEnergyError(f"{self.where}: an int-quantized weight of dtype {_code(stored.dtype)}")
        a, b = {
            "tensor": (rows, cols),
            "channel": (1, cols),
            "group": (1, scheme.group_size or cols),
            "block": scheme.block_size or (rows, cols),
        }[scheme.strategy]
        grid = (_blocks(rows, a), _blocks(cols, b))
        scale = self.read("weight_scale", "f")
        assert scale is not None
        scale = _as_grid(scale, grid)
        self.expect("weight_scale", grid, scale.shape, f"{scheme.strategy} scales of [{rows}, {cols}]")
        zero = self.read("weight_zero_point", "iu", required=False)
        if zero is not None and self.kind == "packed" and zero.dtype.itemsize == 4:
            # packed along the output rows like the values, with the same offset: q - z = stored difference
            zero, offset = unpack_fields(zero, scheme.bits, axis=0)[: grid[0]], 0
        if zero is not None:
            zero = _as_grid(zero, grid)
            self.expect("weight_zero_point", grid, zero.shape, "one zero point per scale")
        if offset:
            zero = np.full(grid, offset, np.int16) if zero is None else zero.astype(np.int16) + offset
        g_idx = self._groups(self.read("weight_g_idx", "iu", required=False), cols, grid[1], "weight_g_idx")
        return dequantize_grid(
            values,
            scale,
            zero=zero,
            rows_per_scale=a,
            columns_per_scale=b,
            column_group=g_idx,
        )


def _as_grid(array: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """A scale or zero point stored as a scalar, a vector or (R, C), as the (R, C) grid when it fits."""
    if array.size == grid[0] * grid[1] and array.ndim <= 1:
        return array.reshape(grid)
    return array


def _check_float8(dtype: np.dtype, weight: _Weight) -> None:
    code = _code(dtype)
    if code not in _FP8_FORMATS:
        raise QKEnergyError(f"{weight.where}: stored as {code}; expected float8 (F8_E4M3 or F8_E5M2)")


def quantized_tensors(
    tensors: Any, quantization: Quantization | None, config: str
) -> tuple[Any, dict[str, Any]]:
    """``tensors`` read through the checkpoint's quantisation, and the facts for the analysis settings.

    ``quantization``: :func:`parse_quantization` of the config (``config``: the
    file, for messages). A plain checkpoint comes back as it is, without notes.
    The wrapper is installed whenever the config has a quantization_config or
    the tensors hold quantised parts, so that a weight stored quantised under a
    config that does not say so is one error line, not integers read as weights.

    Parameters
    ----------
    tensors : object
        The checkpoint's tensor reader.
    quantization : Quantization or None
        The checkpoint's settings, from :func:`parse_quantization`.
    config : str
        The config file, for messages.

    Returns
    -------
    tensors : object
        ``tensors`` itself, or a :class:`QuantizedTensors` over it.
    notes : dict
        ``{"quantization": ...}`` (the settings) when the config has some, else empty.
    """
    if quantization is None and not _has_quantized_parts(tensors):
        return tensors, {}
    notes = {} if quantization is None else {"quantization": quantization.settings()}
    return QuantizedTensors(tensors, quantization, config), notes


def stored_quantization(tensors: Any, names: Iterable[str]) -> str:
    """The ``quantization`` cell of the heads read from ``names``: their labels, "" for plain weights.

    Parameters
    ----------
    tensors : object
        The tensor reader (its ``quantization_of``, where it has one).
    names : iterable of str
        The tensors the heads are read from.

    Returns
    -------
    str
        The distinct labels joined by " + ".
    """
    label = getattr(tensors, "quantization_of", None)
    if label is None:
        return ""
    return " + ".join(dict.fromkeys(text for name in names if (text := label(name))))


def _has_quantized_parts(tensors: Any) -> bool:
    names = set(tensors.names)
    for name in names:
        module, _, part = name.rpartition(".")
        if part in ("qweight", "weight_packed"):
            return True
        scaled = part in ("weight_scale_inv", "weight_scale") and module + ".weight" in names
        if scaled and _code(tensors.dtype(module + ".weight")) in _SCALED_CODES:
            return True
    return False
