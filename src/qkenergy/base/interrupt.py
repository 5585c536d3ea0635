"""Ctrl-C and SIGTERM on the command line: one line, temporary files removed, status 128 + signal.

While :func:`signals_raise` is active, SIGINT and SIGTERM raise :class:`Interrupted` in the main
thread. It derives from BaseException (as KeyboardInterrupt does), so ``except Exception`` never
swallows it while every ``finally`` and ``except BaseException`` clean-up (the atomic writers'
temporary files) still runs; click does not turn it into "Aborted!" as it does KeyboardInterrupt.
After the first signal both are ignored, so a second Ctrl-C cannot cut a clean-up short.
Inside :func:`signals_deferred` (a few statements that must not be cut, such as creating a
temporary file and noting it for removal) the signal waits and is raised as the block ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["SIGNALS", "Interrupted", "signals_deferred", "signals_raise"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_deferred: list[int] | None = None  # signals that arrived inside signals_deferred (main thread only)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; ``signum`` says which.

    Parameters
    ----------
    signum : int
        The signal that arrived (``signal.SIGINT`` or ``signal.SIGTERM``); kept as ``signum``.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def _raise(signum: int, frame: FrameType | None) -> None:
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if _deferred is not None:
        _deferred.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A signal arriving inside the block raises :class:`Interrupted` only as the block ends.

    For the main thread, where the handlers run; in other threads (and nested) it does nothing.
    """
    global _deferred
    if _deferred is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferred = []
    try:
        yield
    finally:
        pending, _deferred = _deferred, None
        if pending:
            raise Interrupted(pending[0])


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` inside the block; the previous handlers come back after."""
    previous = {}
    for sig in SIGNALS:
        try:
            previous[sig] = signal.signal(sig, _raise)
        except ValueError:  # not the main thread: leave the signals alone
            break
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
