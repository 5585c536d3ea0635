"""Output of the command line: the consoles and the one-line error format (``qkenergy: error: ...``)."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import click

PROG = "qkenergy"
MAX_LINE = 600
"""Longest error or warning line: what a message quotes (a value, a path) is cut in its middle."""


# The library names its Python parameters in its messages (``samples must be ...``); the
# command line names its flags for them, read from the click declarations (:func:`option_flags`).
# The library's names of the options whose click name differs: library name -> click name.
_LIBRARY_NAMES = {"kind": "null_kind", "null": "no_null", "layout": "layout_file", "baseline": "reference"}


@functools.cache
def option_flags(group: click.Group) -> dict[str, str]:
    """Python parameter -> the command line's flag (``{"samples": "--samples", "null": "--no-null", ...}``),
    from the options every command of ``group`` (``qkenergy.cli.main.cli``) declares."""
    flags: dict[str, str] = {}
    for command in group.commands.values():
        for param in command.params:
            long = [opt for opt in param.opts if opt.startswith("--")]
            if isinstance(param, click.Option) and param.name and long:
                flags.setdefault(param.name, long[0])
    flags.update({name: flags[dest] for name, dest in _LIBRARY_NAMES.items() if dest in flags})
    return flags


def flag_message(error: BaseException, flags: Mapping[str, str]) -> str:
    """The message of ``error`` with the command line's flags for its Python parameters.

    The leading parameter (``error.parameter``) becomes its flag, and so does every parameter the
    message names further on in backquotes (``leave out `static```); ``flags``: :func:`option_flags`.
    """
    message = str(error)
    parameter = str(getattr(error, "parameter", None) or "")
    if parameter and parameter in flags and message.startswith(parameter):
        message = flags[parameter] + message[len(parameter) :]
    if "`" in message:
        message = _QUOTED.sub(lambda m: flags.get(m.group(1), m.group(0)), message)
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


def stdout_console() -> Any:
    """A rich Console on standard output (off a terminal its lines carry no trailing spaces)."""
    from qkenergy.base.formatting import output_console

    return output_console()


def print_result(result: Any, as_json: bool) -> None:
    """A result's JSON (``--json``) or its summary, on standard output."""
    if as_json:
        click.echo(result.to_json())
    else:
        result.print_summary(stdout_console())


def fail(message: str, status: int) -> NoReturn:
    click.echo(f"{PROG}: error: {one_line(message)}", err=True)
    sys.exit(status)
