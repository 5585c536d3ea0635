"""Output of the command line: the consoles and the one-line error format (``qkenergy: error: ...``)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

PROG = "qkenergy"


# The library names its Python parameters in its messages (``samples must be ...``); the
# command line names its flags for them.
FLAGS = {
    "samples": "--samples",
    "rotation_samples": "--rotation-samples",
    "radius": "--radius",
    "type_rule": "--type-rule",
    "imbalance_cut": "--imbalance-cut",
    "edge_cut": "--edge-cut",
    "name": "--name",
    "seed": "--seed",
    "layers": "--layers",
    "heads": "--heads",
    "head": "--head",
    "rope_offsets": "--rope-offsets",
    "threads": "--threads",
    "kind": "--null",
    "null_kind": "--null",
}


def flag_message(error: BaseException) -> str:
    """The message of ``error`` with its leading Python parameter replaced by the command line's flag."""
    message = str(error)
    parameter = getattr(error, "parameter", None)
    if parameter in FLAGS and message.startswith(parameter):
        return FLAGS[parameter] + message[len(parameter) :]
    return message


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
