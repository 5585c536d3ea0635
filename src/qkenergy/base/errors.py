"""User-facing errors: one line that names the file, tensor or argument and what was expected.

The two argument checks below are shared by every module that takes counts,
seeds or variances from a user, so the messages read the same everywhere.
"""

from __future__ import annotations

import math
import numbers
import os


class QKEnergyError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits non-zero.

    Parameters
    ----------
    *args : object
        The message (as Exception's arguments).
    parameter : str, optional
        The Python parameter the message starts with (``samples must be ...``), when it is
        about one; the command line names its own flag for it instead (``--samples``).
    """

    def __init__(self, *args: object, parameter: str | None = None) -> None:
        super().__init__(*args)
        self.parameter = parameter


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
        raise QKEnergyError(f"{name} must be {expected}, got {value!r}", parameter=name)
    return int(value)


def check_positive(value: object, name: str) -> float:
    """``value`` as a positive finite float (a variance, a scale ratio), else QKEnergyError naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (math.isfinite(value) and float(value) > 0)
    ):
        raise QKEnergyError(f"{name} must be a positive finite number, got {value!r}", parameter=name)
    return float(value)


def memory_limit() -> int:
    """Bytes one array of qkenergy may take: half of this machine's physical memory.

    Counts that size an allocation (Monte Carlo samples, head shapes, lobe
    lengths) are checked against it before anything is allocated, so an absurd
    count is refused at once instead of after gigabytes of swapping.
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = 1 << 36  # 64 GiB where the platform cannot say
    return max(1 << 30, total // 2)


def format_bytes(count: int) -> str:
    """``count`` bytes in binary units, e.g. '1.5 GiB' (inf-safe for huge counts)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            return f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} PiB"


def check_memory(nbytes: int, what: str) -> None:
    """QKEnergyError naming ``what`` when ``nbytes`` exceed :func:`memory_limit` (nothing is allocated)."""
    limit = memory_limit()
    if nbytes > limit:
        raise QKEnergyError(
            f"{what} would need {format_bytes(nbytes)} of memory, more than the {format_bytes(limit)} "
            "allowed (half of this machine's memory)"
        )
