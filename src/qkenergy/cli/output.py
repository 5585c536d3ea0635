"""Output of the command line: the consoles and the one-line error format (``qkenergy: error: ...``)."""

from __future__ import annotations

import re
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
    "null": "--no-null",
    "per_layer": "--per-layer",
    "retries": "--retries",
    "workers": "--workers",
    "scheduler": "--scheduler",
    "baseline": "--baseline",
    "static": "--static",
    "model_type": "--model-type",
    "revision": "--revision",
    "layout": "--layout",
    "skip_nonfinite": "--skip-nonfinite",
}


def flag_message(error: BaseException) -> str:
    """The message of ``error`` with the command line's flags for its Python parameters.

    The leading parameter (``error.parameter``) becomes its flag, and so does every parameter the
    message names further on in backquotes (``leave out `static```).
    """
    message = str(error)
    parameter = getattr(error, "parameter", None)
    if parameter in FLAGS and message.startswith(parameter):
        message = FLAGS[parameter] + message[len(parameter) :]
    if "`" in message:
        message = _QUOTED.sub(lambda m: FLAGS.get(m.group(1), m.group(0)), message)
    return message


_QUOTED = re.compile(r"`([a-z_]+)`")


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
