"""Typed fields of a ``quantization_config``: one line naming the file and the field when one is wrong.

Shared by the methods' parsers (:class:`~qkenergy.weights.quantization.method.QuantMethod.parse`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe

__all__ = ["block_pair", "config_field", "group_size", "module_names"]


def config_field(
    obj: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], default: Any
) -> Any:
    """``obj[key]`` if it has JSON type ``kind``, ``default`` if absent or null.

    Parameters
    ----------
    obj : mapping
        The config object.
    key : str
        The field.
    where : str
        The config file, for messages.
    kind : type or tuple of type
        The accepted Python types (a boolean is never an integer).
    default : object
        The value of an absent field.

    Returns
    -------
    object
        The value.

    Raises
    ------
    QKEnergyError
        The field has another type.
    """
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) and kind is not bool:
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected {_kind_name(kind)}")
    if not isinstance(value, kind):
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {bool: "a boolean", int: "an integer", str: "a string", list: "an array", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def module_names(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    """An array of module names (``modules_to_not_convert``, ``ignore``, ``targets``); () if absent.

    Parameters
    ----------
    obj : mapping
        The config object.
    key : str
        The field.
    where : str
        The config file, for messages.

    Returns
    -------
    tuple of str
        The names.
    """
    value = config_field(obj, key, where, list, [])
    if not all(isinstance(v, str) for v in value):
        raise QKEnergyError(f"{where}: field {key!r} must be an array of module names")
    return tuple(value)


def group_size(obj: Mapping[str, Any], key: str, where: str, default: int) -> int:
    """Input columns per scale: a positive integer, or -1 for one group per column.

    Parameters
    ----------
    obj : mapping
        The config object.
    key : str
        The field.
    where : str
        The config file, for messages.
    default : int
        The size of an absent field.

    Returns
    -------
    int
        The group size.
    """
    size = config_field(obj, key, where, int, default)
    if size != -1 and not 1 <= size <= 1 << 20:
        raise QKEnergyError(f"{where}: field {key!r} is {size}; expected a positive integer or -1")
    return int(size)


def block_pair(value: Any, key: str, where: str) -> tuple[int, int]:
    """The [rows, columns] of a block each scale covers (also written "128x128").

    Parameters
    ----------
    value : object
        The field's value.
    key : str
        The field, for messages.
    where : str
        The config file, for messages.

    Returns
    -------
    (int, int)
        Rows and columns, each from 1 to 2^20.
    """
    if isinstance(value, str) and re.fullmatch(r"\d{1,7}x\d{1,7}", value):
        value = [int(v) for v in value.split("x")]
    expected = f"expected [rows, columns] of a block, two integers from 1 to {1 << 20}"
    if not isinstance(value, list) or len(value) != 2:
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; {expected}")
    for i, v in enumerate(value):
        if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 20):
            raise QKEnergyError(
                f"{where}: field {key!r} is {describe(value)}: element {i} (the {('rows', 'columns')[i]}) "
                f"is {describe(v)}; {expected}"
            )
    return int(value[0]), int(value[1])
