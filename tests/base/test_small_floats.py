"""bfloat16 and float8 widened from their bits with numpy alone: every code exactly as ml_dtypes casts it."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

from qkenergy.base.small_floats import (
    BFLOAT16,
    FLOAT8_E4M3FN,
    FLOAT8_E5M2,
    FLOAT8_E8M0FNU,
    as_float,
    as_ml_dtypes,
    fingerprint_dtype,
    is_small_float,
    widen_into,
)

FLOAT8 = [
    (FLOAT8_E4M3FN, ml_dtypes.float8_e4m3fn),
    (FLOAT8_E5M2, ml_dtypes.float8_e5m2),
    (FLOAT8_E8M0FNU, ml_dtypes.float8_e8m0fnu),
]
BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def _reference(codes: np.ndarray, theirs: type, target: type) -> np.ndarray:
    with warnings.catch_warnings():  # signalling NaNs raise 'invalid' in ml_dtypes' float64 cast
        warnings.simplefilter("ignore", RuntimeWarning)
        return codes.view(theirs).astype(target)


@pytest.mark.parametrize("target", [np.float32, np.float64])
def test_every_bfloat16_pattern_widens_bit_for_bit(target: type) -> None:
    codes = np.arange(1 << 16, dtype=np.uint16)  # zeros, subnormals, infinities, every NaN payload
    got = as_float(codes.view(BFLOAT16), target)
    want = _reference(codes, ml_dtypes.bfloat16, target)
    assert got.dtype == target
    np.testing.assert_array_equal(got.view(BITS[np.dtype(target)]), want.view(BITS[np.dtype(target)]))


@pytest.mark.parametrize(("mine", "theirs"), FLOAT8)
@pytest.mark.parametrize("target", [np.float32, np.float64])
def test_every_float8_code_widens_bit_for_bit(mine: np.dtype, theirs: type, target: type) -> None:
    codes = np.arange(256, dtype=np.uint8)
    got = as_float(codes.view(mine), target)
    want = _reference(codes, theirs, target)
    np.testing.assert_array_equal(got.view(BITS[np.dtype(target)]), want.view(BITS[np.dtype(target)]))
    # ml_dtypes' own float8 arrays go through the same table, built from its cast
    np.testing.assert_array_equal(as_float(codes.view(theirs), target), want)


def test_widen_into_strided_sources_and_targets() -> None:
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((6, 10)).astype(ml_dtypes.bfloat16)
    bits = weights.view(np.uint16).view(BFLOAT16)
    transposed = np.empty((10, 6), np.float32)
    widen_into(transposed, bits.T)  # a Conv1D head: a transposed view
    np.testing.assert_array_equal(transposed, weights.astype(np.float32).T)
    every_other = np.zeros((12, 10), np.float64)[::2]  # a strided float64 target
    widen_into(every_other, bits)
    np.testing.assert_array_equal(every_other, weights.astype(np.float64))
    codes = rng.integers(0, 256, (4, 5), dtype=np.uint8)
    target = np.zeros((4, 10), np.float32)[:, ::2]
    widen_into(target, codes.view(FLOAT8_E4M3FN))
    np.testing.assert_array_equal(target, codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32))


def test_bits_refuse_arithmetic_and_casts() -> None:
    # the point of an opaque dtype: a use that forgets to widen fails instead of reading integers
    bits = np.ones(3, np.uint16).view(BFLOAT16)
    with pytest.raises((TypeError, ValueError)):
        bits.astype(np.float32)
    with pytest.raises(TypeError):
        bits * 2.0


def test_other_dtypes_convert_as_numpy_does() -> None:
    x = np.arange(4, dtype=np.float32)
    assert as_float(x) is x  # already float32: no copy unless asked
    copied = as_float(x, copy=True)
    assert copied is not x and np.array_equal(copied, x)
    np.testing.assert_array_equal(as_float(np.arange(3, dtype=np.int8), np.float64), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="float dtype"):
        as_float(x, np.int32)


def test_api_and_fingerprint_views() -> None:
    values = np.array([1.5, -2.0, 3.0], ml_dtypes.bfloat16)
    bits = values.view(np.uint16).view(BFLOAT16)
    assert is_small_float(bits.dtype) and not is_small_float(np.dtype(np.float16))
    shown = as_ml_dtypes(bits)
    assert shown.dtype == np.dtype(ml_dtypes.bfloat16) and np.array_equal(shown, values)
    assert as_ml_dtypes(np.zeros(2)).dtype == np.float64
    # in-memory fingerprints hash the dtype's text: the same as when ml_dtypes' dtypes were used
    for mine, theirs in [(BFLOAT16, ml_dtypes.bfloat16), *FLOAT8]:
        assert fingerprint_dtype(mine) == np.dtype(theirs).str
    assert fingerprint_dtype(np.dtype("<f4")) == "<f4"
