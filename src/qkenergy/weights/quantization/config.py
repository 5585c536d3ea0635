"""``quantization_config`` read: the registered method it names parses it, every other method is refused.

Refused in one line naming the method and the config file: bitsandbytes, HQQ,
EETQ, any method not registered, and the packings of a known method that are
not read. transformers' ``gguf`` marks weights it already dequantised (plain).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe, read_object
from qkenergy.weights.quantization.method import METHODS, Quantization

__all__ = ["SIDE_FILES", "parse_quantization", "read_quantization"]

# Known methods that are refused, each with what it stores (for the message).
_REFUSED: dict[str, str] = {
    "bitsandbytes": "NF4 / FP4 codebooks, or LLM.int8 rows with outliers",
    "hqq": "half-quadratic codes with per-group float zeros",
    "eetq": "int8 weights laid out for its own kernels",
}


def _refuse(method: str, where: str, why: str = "") -> QKEnergyError:
    stored = f" ({why})" if why else ""
    return QKEnergyError(
        f"{where}: quantization_config has quant_method {show_name(method)}{stored}, which qkenergy does not "
        f"read (it dequantises {', '.join(METHODS)}); analyze the unquantised checkpoint instead"
    )


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
    if method == "bitsandbytes":
        if raw.get("load_in_4bit"):
            kind = "4-bit NF4 / FP4 codebooks"
        elif raw.get("load_in_8bit"):
            kind = "8-bit LLM.int8 rows with outliers"
        else:
            kind = _REFUSED[method]
        raise _refuse(method, where, kind)
    raise _refuse(method, where, _REFUSED.get(method, ""))


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
