"""Which OpenBLAS kernels the command line asks for: the AVX2 (Haswell) ones on AMD Zen 4.

OpenBLAS picks its kernels once, when it is loaded (with numpy), from the
CPU. On AMD Zen 4 (family 25 with AVX-512) it takes its SkylakeX (AVX-512)
kernels. Zen 4 executes a 512-bit instruction as two 256-bit halves, and
for the shapes qkenergy multiplies, OpenBLAS's Haswell (AVX2) kernels
measure faster there. On a Zen 4 EPYC, numpy's OpenBLAS 0.3.31 on one thread
(``python benchmarks/bench_blas_kernels.py``, docs/performance.md, "BLAS kernels"):

- each query head's G_QQ (a 128 x 4096 rank-k update): 1.39x as fast;
- a key head's query-key blocks (a (512 x 4096)(4096 x 128) product): 1.09x;
- the Cholesky factor of a 256 x 256 G: 1.09x;
- the eigenvalues of a 256 x 256 core: 0.97x (mostly LAPACK's own level-2 code);
- a whole llama-shaped layer of statistics (32 heads, bfloat16): 1.11x.

So the ``qkenergy`` console script sets OPENBLAS_CORETYPE=Haswell on such a
CPU before it imports numpy. A user's choice wins: nothing is set when
OPENBLAS_CORETYPE is set already (``OPENBLAS_CORETYPE=SkylakeX`` keeps
OpenBLAS's own choice). Dask workers that a run starts on this machine
inherit the variable. Importing qkenergy changes nothing in the importing
process; a program calls :func:`choose_openblas_kernels` before it imports
numpy to make the same choice.

The kernels change the rounding of the products (float32 ones, for 16-bit
weights), not the mathematics. The settings of every table record the BLAS
and kernels it was computed with (``blas``, see :mod:`qkenergy.base.parallel`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, MutableMapping
from pathlib import Path

__all__ = ["VARIABLE", "choose_openblas_kernels", "first_processor", "preferred_kernels"]

VARIABLE = "OPENBLAS_CORETYPE"

# The first processor's entry of /proc/cpuinfo fits in this many bytes (its flags line is ~1.5 kB).
_CPUINFO_BYTES = 16384


def first_processor(cpuinfo: str) -> dict[str, str]:
    """The fields of the first processor's entry of /proc/cpuinfo text ("vendor_id", "cpu family", "flags", ...).

    Parameters
    ----------
    cpuinfo : str
        The text of /proc/cpuinfo.

    Returns
    -------
    dict of str to str
        Field name -> value (stripped), the first occurrence of each; empty when no field was found.
    """
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if not colon:
            if fields:  # a blank line ends the first processor's entry
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    return fields


def preferred_kernels(cpuinfo: str) -> str | None:
    """The OpenBLAS kernels to ask for on the CPU that ``cpuinfo`` (/proc/cpuinfo text) describes.

    "Haswell" on AMD Zen 4 (vendor AuthenticAMD, cpu family 25, flag
    avx512f); None elsewhere, where OpenBLAS's own choice stands (Zen 3 has no
    AVX-512 and gets AVX2 kernels anyway; Zen 5, family 26, runs AVX-512 at
    full width).

    Parameters
    ----------
    cpuinfo : str
        The text of /proc/cpuinfo (only its first processor's entry is read).

    Returns
    -------
    str or None
        The OpenBLAS core name ("Haswell"), or None to leave OpenBLAS's choice alone.
    """
    fields = first_processor(cpuinfo)
    zen4 = (
        fields.get("vendor_id") == "AuthenticAMD"
        and fields.get("cpu family") == "25"
        and "avx512f" in fields.get("flags", "").split()
    )
    return "Haswell" if zen4 else None


def choose_openblas_kernels(
    environ: MutableMapping[str, str] = os.environ,
    cpuinfo: Path = Path("/proc/cpuinfo"),
    loaded: Collection[str] = sys.modules,
) -> str | None:
    """Set OPENBLAS_CORETYPE to :func:`preferred_kernels` of this CPU; the value set, or None.

    Nothing is set when the variable is set already (a user's choice), when
    numpy is in ``loaded`` (its OpenBLAS has chosen), when ``cpuinfo`` cannot
    be read (not Linux), or on a CPU where OpenBLAS's own choice stands.

    Parameters
    ----------
    environ : mutable mapping
        The environment to set OPENBLAS_CORETYPE in (default: this process's).
    cpuinfo : pathlib.Path
        The CPU description (/proc/cpuinfo).
    loaded : collection of str
        The modules already imported (default ``sys.modules``).

    Returns
    -------
    str or None
        The kernels set, or None when nothing was set.
    """
    if VARIABLE in environ or "numpy" in loaded:
        return None
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as file:
            text = file.read(_CPUINFO_BYTES)
    except OSError:
        return None
    kernels = preferred_kernels(text)
    if kernels is not None:
        environ[VARIABLE] = kernels
    return kernels
