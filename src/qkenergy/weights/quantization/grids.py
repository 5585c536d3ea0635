"""The pure dequantisation formulas: packed fields unpacked, W = (q - z) * s over a grid of scales.

Every quantisation method read here is one formula,

    W[i, j] = (q[i, j] - z[r(i), c(j)]) * s[r(i), c(j)],

with the scale row r(i) = i // a and column c(j) = j // b (or a per-column group
index, "act-order"). Packed fields are read low bits first from the
little-endian words. q - z is exact in float32 and so is its product with a
16-bit scale (an 8-bit value times an 11-bit significand); with float32 scales
the float32 product is the exact product rounded once (relative error below 2^-24).
Nothing here reads a file: the methods (:mod:`~qkenergy.weights.quantization`)
hand their checked arrays to these functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qkenergy.base.small_floats import as_float
from qkenergy.weights.safetensors_io import DTYPES

__all__ = [
    "FLOAT_CODES",
    "PACKED_BITS",
    "blocks",
    "dequantize_awq",
    "dequantize_gptq",
    "dequantize_grid",
    "dtype_code",
    "product_dtype",
    "unpack_fields",
]

PACKED_BITS = (2, 4, 8)
"""Bits of a packed field: fields never straddle a byte, so every packer agrees on where they lie."""
FLOAT_CODES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0")
"""The float dtypes a scale or a float8 weight may have."""
# AutoAWQ's GEMM packing puts output column ORDER[k] of each group of 8 in the k-th nibble.
_AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_AWQ_UNPACK = tuple(int(k) for k in np.argsort(_AWQ_ORDER))


def dtype_code(dtype: np.dtype) -> str:
    """The safetensors code of a numpy dtype (for messages and the storage test).

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype.

    Returns
    -------
    str
        Its safetensors code (F32, F8_E4M3, I32, ...), or numpy's name when it has none.
    """
    return next((code for code, known in DTYPES.items() if known == dtype), str(dtype))


def blocks(size: int, block: int) -> int:
    """How many blocks of ``block`` cover ``size`` (the last one may be partial).

    Parameters
    ----------
    size : int
        The length covered.
    block : int
        The block's length.

    Returns
    -------
    int
        ceil(size / block).
    """
    return -(-size // block)


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
    if bits not in PACKED_BITS:
        raise ValueError(f"bits must be one of {PACKED_BITS}, got {bits}")
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
    return np.dtype(np.float64 if dtype_code(scale_dtype) == "F64" else np.float32)


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
