"""Hardened reading of the JSON in a checkpoint: safetensors header, config.json, shard index.

Every such file comes from whoever published the checkpoint, so it is read
with bounds: the file must be a regular file (opened non-blocking: a FIFO
never blocks the open) no larger than a cap, its nesting no deeper than
:data:`MAX_DEPTH` (checked before parsing, so no RecursionError), and no
integer longer than :data:`MAX_INT_DIGITS` digits (Python refuses to convert
very long ones, and nothing in a checkpoint needs them). Values are then read
through typed accessors that name the file and the field when a value has the
wrong JSON type. Messages describe a bad value by its JSON type (and short
scalars by value), so they stay one short line whatever the file holds.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import plural

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "bracket_depth",
    "describe",
    "get_bool",
    "get_int",
    "get_str",
    "json_type",
    "open_regular",
    "parse_object",
    "parse_value",
    "read_bytes",
    "read_object",
]

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (real configs nest about 4 deep)."""
MAX_INT_DIGITS = 30
"""Longest integer accepted: 30 digits is far beyond any byte offset or size."""

# A JSON string (escapes included): removed before the brackets are counted.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = np.frombuffer(b"[{", np.uint8)
_CLOSE = np.frombuffer(b"]}", np.uint8)


class _TooLong(ValueError):
    """An integer literal longer than MAX_INT_DIGITS."""


def open_regular(path: str | os.PathLike[str], where: str, limit: int | None = None) -> IO[bytes]:
    """``path`` opened for binary reading if it is a regular file (of at most ``limit`` bytes).

    The open is non-blocking and the check is fstat on the open descriptor, so a
    FIFO, a device or a symlink to one is refused without waiting or reading.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    where : str
        The file as shown in messages.
    limit : int or None
        The largest size accepted, in bytes; None for no limit.

    Returns
    -------
    file object
        Binary, blocking; the caller closes it.

    Raises
    ------
    QKEnergyError
        The file cannot be opened, is not a regular file, or is larger than ``limit``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise QKEnergyError(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise QKEnergyError(f"{where}: not a regular file")
        if limit is not None and info.st_size > limit:
            raise QKEnergyError(f"{where}: larger than the {limit}-byte limit for this file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], where: str, what: str, limit: int) -> bytes:
    """The bytes of regular file ``path`` (at most ``limit``); one-line QKEnergyError otherwise.

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
    bytes

    Raises
    ------
    QKEnergyError
        The file cannot be read, is not a regular file, or is larger than ``limit``.
    """
    try:
        with open_regular(path, where, limit) as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise QKEnergyError(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > limit:  # grew since fstat
        raise QKEnergyError(f"{where}: {what} is larger than the {limit}-byte limit")
    return raw


def read_object(path: str | os.PathLike[str], where: str, what: str, limit: int) -> dict[str, Any]:
    """The JSON object in file ``path`` (at most ``limit`` bytes); one-line QKEnergyError otherwise.

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
        As :func:`read_bytes` and :func:`parse_object`.
    """
    return parse_object(read_bytes(path, where, what, limit), where, what)


def bracket_depth(text_bytes: bytes) -> int:
    """Deepest nesting of [ and { in ``text_bytes`` (strings already removed), counted vectorised.

    Parameters
    ----------
    text_bytes : bytes
        JSON text with its strings removed.

    Returns
    -------
    int
        0 when there is no bracket.
    """
    text = np.frombuffer(text_bytes, np.uint8)
    opens, closes = np.isin(text, _OPEN), np.isin(text, _CLOSE)
    marks = np.flatnonzero(opens | closes)
    if marks.size == 0:
        return 0
    steps = np.where(opens[marks], 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max())


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLong
    return int(text)


def parse_object(raw: bytes, where: str, what: str) -> dict[str, Any]:
    """Parse ``raw`` (UTF-8 JSON) into a dict, with the depth and integer bounds of this module.

    Parameters
    ----------
    raw : bytes
        The JSON text.
    where : str
        The file, in messages.
    what : str
        What the text is ("config.json", "the header", ...), in messages.

    Returns
    -------
    dict

    Raises
    ------
    QKEnergyError
        As :func:`parse_value`, or the value is not an object.
    """
    data = parse_value(raw, where, what)
    if not isinstance(data, dict):
        raise QKEnergyError(f"{where}: {what} must be a JSON object, got {json_type(data)}")
    return data


def parse_value(raw: bytes, where: str, what: str) -> Any:
    """Parse ``raw`` (UTF-8 JSON: any value) with the depth and integer bounds of this module.

    Parameters
    ----------
    raw : bytes
        The JSON text.
    where : str
        The file, in messages.
    what : str
        What the text is, in messages.

    Returns
    -------
    object
        The parsed value.

    Raises
    ------
    QKEnergyError
        Not valid UTF-8 JSON, nested more than ``MAX_DEPTH`` levels, or an integer longer than
        ``MAX_INT_DIGITS`` digits.
    """
    if bracket_depth(_STRING.sub(b'""', raw)) > MAX_DEPTH:  # strings removed; a bound for malformed text
        raise QKEnergyError(f"{where}: {what} is nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_parse_int)
    except _TooLong:
        raise QKEnergyError(f"{where}: {what} holds an integer longer than {MAX_INT_DIGITS} digits") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = (
            f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else exc.reason
        )
        raise QKEnergyError(f"{where}: {what} is not valid UTF-8 JSON ({reason})") from None
    except RecursionError:  # pragma: no cover - excluded by the depth check
        raise QKEnergyError(f"{where}: {what} is nested too deeply") from None


def json_type(value: object) -> str:
    """The JSON type of a parsed value, for a message: 'an object', 'an array', 'a string', ..., 'null'.

    Parameters
    ----------
    value : object
        A parsed JSON value.

    Returns
    -------
    str
        The Python type's name for a value JSON has no type for.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    for kind, name in ((dict, "an object"), (list, "an array"), (str, "a string"), (float, "a number")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def describe(value: object) -> str:
    """A bad value for a message: short scalars by value, everything else by JSON type.

    Parameters
    ----------
    value : object
        A parsed JSON value.

    Returns
    -------
    str
    """
    if isinstance(value, bool | int | float) or value is None:
        text = json.dumps(value)
        return text if len(text) <= 24 else json_type(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, list | dict):
        # a short array or object by value (the element at fault shows), a long one by its size
        try:
            text = json.dumps(value, allow_nan=True)
        except (TypeError, ValueError, RecursionError):
            text = ""
        if text and len(text) <= 40:
            return f"{json_type(value)} {text}"
        return f"{json_type(value)} of {plural(len(value), 'item' if isinstance(value, list) else 'key')}"
    return json_type(value)


def get_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    """``obj[key]`` if it is a string, None if absent; else one line naming ``where`` and ``key``.

    Parameters
    ----------
    obj : mapping
        A parsed JSON object.
    key : str
        The field.
    where : str
        The file, in the message.

    Returns
    -------
    str or None
        None when the field is absent or null.

    Raises
    ------
    QKEnergyError
        The field is present and not a string.
    """
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected a string")


def get_bool(obj: Mapping[str, Any], key: str, where: str, *, default: bool) -> bool:
    """``obj[key]`` if it is a boolean, ``default`` if absent or null; else one line naming the field.

    Parameters
    ----------
    obj : mapping
        A parsed JSON object.
    key : str
        The field.
    where : str
        The file, in the message.
    default : bool
        The value when the field is absent or null.

    Returns
    -------
    bool

    Raises
    ------
    QKEnergyError
        The field is present and not a boolean.
    """
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected true or false")


def get_int(
    obj: Mapping[str, Any], key: str, where: str, *, minimum: int = 0, maximum: int | None = None
) -> int | None:
    """``obj[key]`` if it is an integer in [minimum, maximum], None if absent; else one line naming the field.

    Parameters
    ----------
    obj : mapping
        A parsed JSON object.
    key : str
        The field.
    where : str
        The file, in the message.
    minimum : int
        The least value accepted.
    maximum : int or None
        The largest value accepted; None for no bound.

    Returns
    -------
    int or None
        None when the field is absent or null.

    Raises
    ------
    QKEnergyError
        The field is present and not an integer (a boolean included) in [minimum, maximum].
    """
    value = obj.get(key)
    if value is None:
        return None
    wrong_type = isinstance(value, bool) or not isinstance(value, int)
    if wrong_type or value < minimum or (maximum is not None and value > maximum):
        expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if maximum is not None:
            expected += f" (at most {maximum})"
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected {expected}")
    return int(value)
