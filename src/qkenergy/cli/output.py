"""Output of the command line: the consoles and the one-line error format (``qkenergy: error: ...``)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

PROG = "qkenergy"


def one_line(error: BaseException | str) -> str:
    return " ".join(str(error).split())


def stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def stdout_console() -> Any:
    from rich.console import Console

    return Console()


def fail(message: str, status: int) -> NoReturn:
    click.echo(f"{PROG}: error: {one_line(message)}", err=True)
    sys.exit(status)
