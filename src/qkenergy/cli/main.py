"""The qkenergy command line: the group, its entry point and how failures map to exit statuses.

The commands (verify, baseline, lobes, analyze, plot, survey, report, layouts, explain) live in one
module each of this package; this one gathers them under the ``qkenergy`` group.

Errors are one line on stderr, ``qkenergy: error: <message>``: bad command-line
arguments exit with status 2, library errors (QKEnergyError) with status 1.
The library modules are imported inside the commands so that ``--help`` and
argument errors stay fast.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.extras import missing_extra
from qkenergy.base.interrupt import Interrupted, signals_raise
from qkenergy.cli.analyze import analyze
from qkenergy.cli.baseline import baseline
from qkenergy.cli.explain import explain
from qkenergy.cli.layouts import layouts
from qkenergy.cli.lobes import lobes
from qkenergy.cli.output import PROG, fail, flag_message, one_line, option_flags
from qkenergy.cli.plot import plot
from qkenergy.cli.report import report_command
from qkenergy.cli.survey import survey
from qkenergy.cli.verify import verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="qkenergy", prog_name=PROG)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Symmetric and skew energy of attention heads, judged against exact random-matrix baselines."""
    if ctx.invoked_subcommand is None:  # bare `qkenergy`: the help, not an error
        click.echo(ctx.get_help())


for _command in (verify, baseline, lobes, analyze, plot, layouts, survey, report_command, explain):
    cli.add_command(_command)


def _warning_line(message: Warning | str, *where: Any, **named: Any) -> None:
    """warnings.showwarning for the command line: ``qkenergy: warning: <message>``, one line (not where)."""
    click.echo(f"{PROG}: warning: {one_line(str(message))}", err=True)


def _keep_freed_memory() -> None:
    """glibc only: serve arrays below 256 MiB from the heap and keep freed memory up to 1 GiB.

    By default glibc maps every block above a threshold (at most 32 MiB) afresh
    and unmaps it when freed, so each layer's Q/K arrays fault their pages in
    again (a llama-sized query tensor is 33.5 MB): 2 to 9 % of a whole run.
    Reused heap memory costs no faults, and the peak stays that of one layer
    and the next. A process-wide setting, so the command line makes it, not the
    library; other C libraries are left alone.
    """
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
    except (ValueError, OSError):
        return
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt
    mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def _no_collection_at_exit() -> None:
    """Freeze every object as the interpreter exits, so that its final collections skip them.

    Python's shutdown runs full garbage collections over every object still alive
    (some 26,000 after an analyze run; its finalisation took 24 ms, 9 ms frozen),
    only to free memory the process is about to return anyway. Registered with
    atexit, so it acts at the very end of the process and nowhere else: a test
    suite or a program calling :func:`main` many times collects as usual
    (finalizers of objects caught in reference cycles are not run at exit, which
    Python does not promise anyway).
    """
    atexit.unregister(gc.freeze)  # once, however often main runs
    atexit.register(gc.freeze)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console entry point: run the command line and exit with its status.

    Every failure is one line on stderr. Set QKENERGY_DEBUG=1 to get the traceback of an
    unexpected exception (a bug, or an input class not checked yet) instead of its one line.
    """
    _keep_freed_memory()
    _no_collection_at_exit()
    with warnings.catch_warnings(), signals_raise():
        warnings.showwarning = _warning_line
        _run(argv)


def _run(argv: Sequence[str] | None) -> NoReturn:
    try:
        status = cli.main(
            args=list(argv) if argv is not None else None, prog_name=PROG, standalone_mode=False
        )
    except Interrupted as interrupt:  # SIGINT / SIGTERM: clean-ups have run on the way up
        fail(str(interrupt), 128 + interrupt.signum)
    except click.UsageError as error:  # includes BadParameter, NoSuchOption, MissingParameter
        fail(one_line(error.format_message()), 2)
    except ArgumentError as error:  # e.g. --layers beyond the checkpoint's layers
        fail(flag_message(error, option_flags(cli)), 2)
    except QKEnergyError as error:
        fail(flag_message(error, option_flags(cli)), 1)
    except click.ClickException as error:  # e.g. FileError
        fail(error.format_message(), 1)
    except click.Abort:
        fail("aborted", 1)
    except BrokenPipeError:
        # stdout closed by the reader (e.g. `| head`): exit quietly, like other filters do; pointing
        # stdout at /dev/null keeps the interpreter's final flush from complaining
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as error:
        # A file the library does not check up front (an unwritable cache directory, a full disk):
        # still one line, naming the file.
        fail(f"{error.filename}: {error.strerror}" if error.filename else str(error), 1)
    except MemoryError:
        fail("out of memory", 1)
    except Exception as error:  # anything else is a bug or an unchecked input: still one line
        if isinstance(error, ModuleNotFoundError) and (missing := missing_extra(error)) is not None:
            fail(str(missing), 1)  # an extra's module imported where no require() call foresaw it
        if os.environ.get("QKENERGY_DEBUG", "").strip() not in ("", "0"):
            raise
        fail(f"unexpected {type(error).__name__}: {error} (set QKENERGY_DEBUG=1 for the traceback)", 1)
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    main()
