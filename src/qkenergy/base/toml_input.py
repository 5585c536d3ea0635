"""Hardened reading of the TOML a user gives: survey manifests, layout files.

The TOML counterpart of :mod:`qkenergy.base.json_input`, with the same
bounds: a regular file only (opened non-blocking, so a FIFO or a device is
refused at once, never read), no larger than a cap, UTF-8 text, arrays and
inline tables nested no deeper than :data:`MAX_DEPTH` (checked on the text
before parsing, so no RecursionError), tables (dotted keys included) no deeper
than :data:`MAX_DEPTH` once parsed, and integers of at most
:data:`MAX_INT_DIGITS` digits. Messages quote nothing of the file at length.
"""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import MAX_DEPTH, MAX_INT_DIGITS, bracket_depth, read_bytes

__all__ = ["MAX_TOML_BYTES", "parse_toml", "read_toml"]

MAX_TOML_BYTES = 1 << 20
"""Largest manifest or layout file read (1 MiB: some ten thousand [[model]] tables)."""

# Strings and comments, removed before brackets are counted: multi-line strings first.
_SKIPPED = re.compile(rb'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')
_DIGITS = re.compile(rb"[0-9_]{%d,}" % (MAX_INT_DIGITS + 1))


def read_toml(
    path: str | os.PathLike[str], where: str, what: str, limit: int = MAX_TOML_BYTES
) -> dict[str, Any]:
    """The TOML document in file ``path``, within this module's bounds.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    where : str
        The file as shown in messages.
    what : str
        What the file is, in messages.
    limit : int
        The largest size accepted, in bytes.

    Returns
    -------
    dict

    Raises
    ------
    QKEnergyError
        As :func:`~qkenergy.base.json_input.read_bytes` and :func:`parse_toml`.
    """
    return parse_toml(read_bytes(path, where, what, limit), where, what)


def _table_depth(data: Any) -> int:
    """Deepest nesting of tables and arrays in a parsed document (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def parse_toml(raw: bytes, where: str, what: str) -> dict[str, Any]:
    """Parse ``raw`` (UTF-8 TOML) into a dict, with the bounds of this module.

    Parameters
    ----------
    raw : bytes
        The TOML text.
    where : str
        The file, in messages.
    what : str
        What the text is, in messages.

    Returns
    -------
    dict

    Raises
    ------
    QKEnergyError
        Not UTF-8, not valid TOML, nested more than ``MAX_DEPTH`` levels, or a number longer
        than ``MAX_INT_DIGITS`` digits.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QKEnergyError(f"{where}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    skipped = _SKIPPED.sub(b'""', raw)
    if bracket_depth(skipped) > MAX_DEPTH:
        raise QKEnergyError(f"{where}: {what} is nested more than {MAX_DEPTH} levels deep")
    if _DIGITS.search(skipped):
        raise QKEnergyError(f"{where}: {what} holds a number longer than {MAX_INT_DIGITS} digits")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise QKEnergyError(f"{where}: {what} is not valid TOML ({str(exc).splitlines()[0][:200]})") from None
    except (ValueError, RecursionError) as exc:  # pragma: no cover - excluded by the checks above
        raise QKEnergyError(f"{where}: {what} is not valid TOML ({type(exc).__name__})") from None
    if _table_depth(data) > MAX_DEPTH:
        raise QKEnergyError(f"{where}: {what} has tables nested more than {MAX_DEPTH} levels deep")
    return data
