"""The ``qkenergy`` console script: Ctrl-C and SIGTERM are one line from the first instant.

The handlers are installed before the command line (click, numpy, ...) is imported, so an
interrupt during start-up prints one line instead of an import traceback. Nothing can need
cleaning up before the commands run, so these first handlers just exit; ``cli.main`` then
installs the ones that raise and clean up (see :mod:`qkenergy.base.interrupt`).

The modules are imported with the cyclic garbage collector paused and their objects then
frozen (:func:`gc.freeze`): they live as long as the process, so the collections that
importing ~200 modules would trigger, and every later full collection, have nothing to find
in them (a few milliseconds of a run's start-up). The collector is on again before any command runs.

Before numpy is imported, OpenBLAS is asked for the kernels that are fastest for these products
on this CPU (:mod:`qkenergy.base.blas_kernels`: AVX2 ones on AMD Zen 4, unless OPENBLAS_CORETYPE is set).
"""

from __future__ import annotations

import gc
import os
import signal
from types import FrameType

from qkenergy.base.blas_kernels import choose_openblas_kernels


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"qkenergy: error: interrupted by {signal.Signals(signum).name}\n".encode())
    os._exit(128 + signum)


def main() -> None:
    """Entry point of the console script."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_at_once)
    choose_openblas_kernels()
    enabled = gc.isenabled()
    gc.disable()
    try:
        from qkenergy.cli import main as cli_main
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    cli_main()


if __name__ == "__main__":
    main()
