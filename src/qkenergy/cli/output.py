"""Output of the command line: the consoles and the one-line error format (``qkenergy: error: ...``)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

PROG = "qkenergy"
MAX_LINE = 600
"""Longest error or warning line: what a message quotes (a value, a path) is cut in its middle."""


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
    """The message on one line, at most MAX_LINE characters (its start and its end kept).

    The last net under the messages that cut what they quote themselves: a value given on the
    command line (click quotes it whole), an operating system's message with a path in it.
    """
    text = " ".join(str(error).split())
    if len(text) <= MAX_LINE:
        return text
    head, tail = MAX_LINE - 240, 180
    return f"{text[:head]} [... {len(text) - head - tail} characters ...] {text[-tail:]}"


def stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def stdout_console() -> Any:
    from rich.console import Console

    return Console()


def fail(message: str, status: int) -> NoReturn:
    click.echo(f"{PROG}: error: {one_line(message)}", err=True)
    sys.exit(status)
