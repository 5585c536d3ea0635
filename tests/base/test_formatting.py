"""Numbers as the summaries print them (qkenergy.base.formatting)."""

from __future__ import annotations

import math

import numpy as np

from qkenergy.base.formatting import MISSING, format_fixed, format_number, format_p, json_safe


def test_numbers_of_every_magnitude() -> None:
    assert format_fixed(0.123456) == "0.1235" and format_fixed(float("nan")) == MISSING
    assert format_number(0.5, 2) == "0.5" and format_number(2.5e-7, 2) == "2.500e-07"
    assert format_number(0.0) == "0" and format_number(None) == MISSING


def test_a_p_value_that_underflowed_is_not_printed_as_zero() -> None:
    # A BH-adjusted tail probability below double precision (a head at z ~ 200) is stored as 0.0.
    assert format_p(0.0) == "<5e-324"
    assert format_p(np.float64(3e-12)) == "3.000e-12" and format_p(0.04) == "0.04"
    assert format_p(float("nan")) == MISSING


def test_json_safe_has_no_nan() -> None:
    value = json_safe({"a": np.array([1.0, np.nan]), "b": (np.float32(2), math.inf)})
    assert value == {"a": [1.0, None], "b": [2.0, None]}
