"""The ``qkenergy`` console script: Ctrl-C and SIGTERM are one line from the first instant.

The handlers are installed before the command line (click, numpy, ...) is imported, so an
interrupt during start-up prints one line instead of an import traceback. Nothing can need
cleaning up before the commands run, so these first handlers just exit; ``cli.main`` then
installs the ones that raise and clean up (see :mod:`qkenergy.interrupt`).
"""

from __future__ import annotations

import os
import signal
from types import FrameType


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"qkenergy: error: interrupted by {signal.Signals(signum).name}\n".encode())
    os._exit(128 + signum)


def main() -> None:
    """Entry point of the console script."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_at_once)
    from qkenergy.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
