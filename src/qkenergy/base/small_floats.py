"""bfloat16 and float8 values kept as their stored bits, widened exactly with numpy alone.

numpy has no bfloat16 or float8 dtypes. ml_dtypes adds them, but importing it costs
about 0.6 s (its extension registers every dtype and cast when loaded): more than the
whole start-up of a run, paid by every bf16 checkpoint. The formats need none of it. A
bfloat16 is the top half of a float32, so shifting its 16 bits up by 16 gives the
float32 exactly; a float8 has 256 values, and a table of them turns codes into floats
in one lookup, also exactly (every one of them is a float32).

Readers hand such tensors over with one of the dtypes below: a single field of raw
bytes named after the format (``dtype([('bfloat16', 'V2')])``). numpy refuses
arithmetic and casts on it, rather than reading the bits as integers, so every use
goes through :func:`as_float` or :func:`widen_into`; the 16-bit storage stays 16-bit
until the piece that needs it is widened (a layer read is not doubled in memory).
Arrays of ml_dtypes' own dtypes (from a caller who has imported it) are accepted too.
"""

from __future__ import annotations

import functools

import numpy as np

from qkenergy.base.extras import require

__all__ = [
    "BFLOAT16",
    "FLOAT8_E4M3FN",
    "FLOAT8_E5M2",
    "FLOAT8_E8M0FNU",
    "as_float",
    "as_ml_dtypes",
    "fingerprint_dtype",
    "is_small_float",
    "widen_into",
]

BFLOAT16 = np.dtype([("bfloat16", "V2")])
"""bfloat16 values as their stored bits (1 sign, 8 exponent, 7 mantissa bits)."""
FLOAT8_E4M3FN = np.dtype([("float8_e4m3fn", "V1")])
"""float8 E4M3 (no infinities; 0x7f and 0xff are NaN) as stored bytes."""
FLOAT8_E5M2 = np.dtype([("float8_e5m2", "V1")])
"""float8 E5M2 (IEEE-like: infinities and NaNs) as stored bytes."""
FLOAT8_E8M0FNU = np.dtype([("float8_e8m0fnu", "V1")])
"""float8 E8M0 (unsigned powers of two 2**-127 .. 2**127; 0xff is NaN) as stored bytes."""

_FLOAT8 = (FLOAT8_E4M3FN, FLOAT8_E5M2, FLOAT8_E8M0FNU)


def is_small_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one of this module's stored-bits dtypes.

    Parameters
    ----------
    dtype : numpy.dtype
        Any dtype.

    Returns
    -------
    bool
    """
    return dtype == BFLOAT16 or dtype in _FLOAT8


def _float8_values(dtype: np.dtype) -> np.ndarray:
    """The 256 values of a float8 format in float64, by code (exact: every one is a float32)."""
    code = np.arange(256)
    if dtype == FLOAT8_E8M0FNU:
        return np.where(code == 255, np.nan, np.ldexp(1.0, code - 127))
    exponent_bits, bias = (4, 7) if dtype == FLOAT8_E4M3FN else (5, 15)
    mantissa_bits = 7 - exponent_bits
    sign = np.where(code & 0x80, -1.0, 1.0)
    exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = code & ((1 << mantissa_bits) - 1)
    # a zero exponent field holds subnormals: mantissa * 2**(1 - bias - mantissa_bits)
    significand = np.where(exponent == 0, mantissa, mantissa + (1 << mantissa_bits))
    value = sign * np.ldexp(significand.astype(np.float64), np.maximum(exponent, 1) - bias - mantissa_bits)
    top = exponent == (1 << exponent_bits) - 1
    nan = np.copysign(np.nan, sign)  # a NaN keeps its sign bit, as ml_dtypes' casts keep it
    # E4M3FN has no infinities: only S.1111.111 is NaN, the rest of the top binade are numbers
    if dtype == FLOAT8_E4M3FN:
        return np.where(top & (mantissa == 7), nan, value)
    return np.where(top, np.where(mantissa == 0, sign * np.inf, nan), value)


@functools.cache
def _table(dtype: np.dtype, target: np.dtype) -> np.ndarray:
    """The 256 values of a 1-byte float dtype in ``target``, indexed by the byte."""
    if dtype in _FLOAT8:
        table = _float8_values(dtype).astype(target)
    else:  # a 1-byte float dtype from elsewhere (ml_dtypes): its own cast, once per code
        table = np.arange(256, dtype=np.uint8).view(dtype).astype(target)
    table.flags.writeable = False
    return table


def _float_dtype(dtype: np.dtype | type) -> np.dtype:
    target = np.dtype(dtype)
    if target.kind != "f":
        raise ValueError(f"small floats widen to a float dtype, not {target}")
    return target


def as_float(array: np.ndarray, dtype: np.dtype | type = np.float32, *, copy: bool = False) -> np.ndarray:
    """``array``'s values in ``dtype`` (float32 or float64): stored bfloat16 and float8 bits widened exactly.

    Other dtypes are converted as :func:`numpy.asarray` converts them. bfloat16 bits
    are shifted into the top half of a float32, float8 codes looked up in a table of
    their 256 values: each value comes out exactly as ml_dtypes' cast gives it.

    Parameters
    ----------
    array : ndarray
        Any numeric array (C-ordered or not), or one of this module's dtypes.
    dtype : numpy.dtype
        A float dtype.
    copy : bool
        Always a new array (otherwise ``array`` itself when it already has ``dtype``).

    Returns
    -------
    ndarray
        Of ``array``'s shape; a new C-ordered array whenever a conversion was needed.

    Raises
    ------
    ValueError
        ``dtype`` is not a float dtype.
    """
    target = _float_dtype(dtype)
    source = np.asarray(array)
    if source.dtype == BFLOAT16:
        out = np.empty(source.shape, target)
        widen_into(out, source)
        return out
    if source.dtype.itemsize == 1 and source.dtype.kind not in "biu":
        # float8 (ours, or ml_dtypes' whose cast goes element by element): a lookup of 256 values
        return _table(source.dtype, target)[source.view(np.uint8)]
    return np.array(source, dtype=target, copy=True) if copy else np.asarray(source, dtype=target)


def widen_into(target: np.ndarray, source: np.ndarray) -> None:
    """``target[...] = source`` with ``source``'s values, stored bfloat16 and float8 bits widened exactly.

    For a float32 target, bfloat16 bits are shifted straight into it (no temporary).

    Parameters
    ----------
    target : ndarray
        float32 or float64, of ``source``'s shape (or one it broadcasts to).
    source : ndarray
        Any numeric array, or one of this module's dtypes.

    Raises
    ------
    ValueError
        ``target`` is not a float array.
    """
    dtype = _float_dtype(target.dtype)
    if source.dtype == BFLOAT16:
        if dtype == np.float32:
            np.left_shift(source.view(np.uint16), 16, out=target.view(np.uint32), dtype=np.uint32)
        else:  # float64: through float32, where a bfloat16 is exact (signalling NaNs become quiet)
            with np.errstate(invalid="ignore"):
                target[...] = as_float(source, np.float32)
    elif source.dtype.itemsize == 1 and source.dtype.kind not in "biu":
        np.take(_table(source.dtype, dtype), source.view(np.uint8), out=target, mode="clip")
    else:
        target[...] = source


def as_ml_dtypes(array: np.ndarray) -> np.ndarray:
    """The same bits viewed with ml_dtypes' dtype (``ml_dtypes.bfloat16``, ...), for a caller's own use.

    Imports ml_dtypes (about 0.6 s, once): only where an array leaves qkenergy for the
    caller as stored, such as :attr:`qkenergy.Head.w_query`. Other dtypes come back as they are.

    Parameters
    ----------
    array : ndarray
        Any array.

    Returns
    -------
    ndarray
        A view of ``array`` (``array`` itself for other dtypes).
    """
    if not is_small_float(array.dtype):
        return array
    require("dtypes", "ml_dtypes", "bfloat16 and float8 weights as ml_dtypes arrays")
    import ml_dtypes

    name = array.dtype.names[0] if array.dtype.names else ""
    return array.view(getattr(ml_dtypes, name))


# ml_dtypes' dtype.str of each format: what content fingerprints recorded before these dtypes
_RECORDED = {BFLOAT16: "<V2", FLOAT8_E4M3FN: "<V1", FLOAT8_E5M2: "<f1", FLOAT8_E8M0FNU: "<V1"}


def fingerprint_dtype(dtype: np.dtype) -> str:
    """The dtype's text in content fingerprints: ``dtype.str``, and for this module's dtypes that of
    ml_dtypes' dtype of the format (``<V2`` for bfloat16), as recorded before these dtypes replaced them.

    Parameters
    ----------
    dtype : numpy.dtype
        Any dtype.

    Returns
    -------
    str
    """
    return _RECORDED.get(dtype, dtype.str)
