"""User-facing errors: one line that names the file, tensor or argument and what was expected.

The two argument checks below are shared by every module that takes counts,
seeds or variances from a user, so the messages read the same everywhere.
"""

from __future__ import annotations

import math
import numbers


class QKEnergyError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits non-zero."""


class ArgumentError(QKEnergyError):
    """A bad command-line argument that only the data can reveal (e.g. --layers 99 on a 6-layer model).

    The CLI treats it like any other bad argument: one line, exit status 2.
    """


def check_integer(value: object, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (numpy integers accepted), else QKEnergyError naming ``name``.

    bool is an Integral in Python, but True as a count or seed is almost surely a bug.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        expected = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        raise QKEnergyError(f"{name} must be {expected}, got {value!r}")
    return int(value)


def check_positive(value: object, name: str) -> float:
    """``value`` as a positive finite float (a variance, a scale ratio), else QKEnergyError naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (math.isfinite(value) and value > 0)
    ):
        raise QKEnergyError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)
