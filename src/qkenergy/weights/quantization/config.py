"""``quantization_config`` read: the registered method it names parses it, every other method is refused.

Refused in one line naming the method and the config file: bitsandbytes, HQQ,
EETQ, any method not registered, and the packings of a known method that are
not read. transformers' ``gguf`` marks weights it already dequantised (plain).
The typed fields (:func:`config_field`, ...) give one line naming the file and
the field when one is wrong; the methods' parsers share them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe, read_object
from qkenergy.weights.quantization.method import METHODS, Quantization

__all__ = [
    "SIDE_FILES",
    "block_pair",
    "config_field",
    "group_size",
    "module_names",
    "parse_quantization",
    "read_quantization",
]

# Known methods that are refused, each with what it stores (for the message).
_REFUSED: dict[str, str] = {
    "bitsandbytes": "NF4 / FP4 codebooks, or LLM.int8 rows with outliers",
    "hqq": "half-quadratic codes with per-group float zeros",
    "eetq": "int8 weights laid out for its own kernels",
}


def parse_quantization(config: Mapping[str, Any], where: str) -> Quantization | None:
    """The validated ``quantization_config`` of a config.json dict (None: plain weights).

    compressed-tensors' older key ``compression_config`` is read too. Refused in
    one line naming the method and ``where`` (the config file): bitsandbytes,
    HQQ, EETQ, any method not in :data:`METHODS`, and the packings of a known
    method that are not read (GPTQ 3-bit or marlin, AWQ gemv, ...).

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    where : str
        The config file, for messages.

    Returns
    -------
    Quantization or None

    Raises
    ------
    QKEnergyError
        A method or packing that is not read, or a field of the wrong type or value.
    """
    raw = config.get("quantization_config")
    if raw is None and isinstance(config.get("compression_config"), Mapping):
        raw = config["compression_config"]
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise QKEnergyError(f"{where}: field 'quantization_config' is {describe(raw)}; expected an object")
    here = f"{where} (quantization_config)"
    method = raw.get("quant_method")
    if method is None and (raw.get("load_in_4bit") or raw.get("load_in_8bit")):
        method = "bitsandbytes"
    if not isinstance(method, str):
        raise QKEnergyError(
            f"{here}: field 'quant_method' is {describe(method)}; expected the name of the method"
        )
    method = method.lower()
    if method == "gguf":
        # transformers writes this when it saves a model it loaded from a GGUF file: it dequantised
        # every tensor on loading, so the safetensors beside this config hold plain weights
        return None
    rule = METHODS.get(method)
    if rule is not None:
        return rule.parse(raw, here)
    stored = _REFUSED.get(method, "")
    if method == "bitsandbytes" and raw.get("load_in_4bit"):
        stored = "4-bit NF4 / FP4 codebooks"
    elif method == "bitsandbytes" and raw.get("load_in_8bit"):
        stored = "8-bit LLM.int8 rows with outliers"
    raise QKEnergyError(
        f"{where}: quantization_config has quant_method {show_name(method)}{f' ({stored})' if stored else ''}, "
        f"which qkenergy does not read (it dequantises {', '.join(METHODS)}); analyze the unquantised "
        "checkpoint instead"
    )


# Files beside config.json where older exports keep the quantisation: AutoGPTQ, AutoAWQ.
SIDE_FILES: dict[str, str] = {"quantize_config.json": "gptq", "quant_config.json": "awq"}
_SIDE_FILE_BYTES = 1 << 20


def read_quantization(config: Mapping[str, Any], where: str, root: Path | None = None) -> Quantization | None:
    """:func:`parse_quantization` of config.json (``where``), else of a side file in ``root``.

    AutoGPTQ and AutoAWQ used to write the settings to quantize_config.json /
    quant_config.json beside a config.json that does not have them.

    Parameters
    ----------
    config : mapping
        The parsed config.json.
    where : str
        config.json, for messages.
    root : pathlib.Path or None
        The checkpoint directory holding the side files; None: config.json only.

    Returns
    -------
    Quantization or None
        None for plain weights.

    Raises
    ------
    QKEnergyError
        As :func:`parse_quantization`, or a side file that cannot be read.
    """
    found = parse_quantization(config, where)
    if found is not None or root is None:
        return found
    for name, method in SIDE_FILES.items():
        path = root / name
        if path.is_file():
            side = read_object(path, show_path(path), "the quantisation settings", _SIDE_FILE_BYTES)
            return parse_quantization(
                {"quantization_config": {"quant_method": method, **side}}, show_path(path)
            )
    return None


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
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        names = {bool: "a boolean", int: "an integer", str: "a string", list: "an array", dict: "an object"}
        kinds = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(names.get(k, k.__name__) for k in kinds)
        raise QKEnergyError(f"{where}: field {key!r} is {describe(value)}; expected {expected}")
    return value


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
