"""Layouts from TOML files: the shipped declarative schema, written by a user.

A layout file holds the fields of :class:`qkenergy.weights.layout.Layout`
(every field but the ``adjust`` hook, which is code): tensor name templates
(``{i}`` = layer index, relative to the checkpoint's prefix), how Q and K are
stored (``storage``: separate, stacked, conv1d, interleaved), the norm feeding
attention, and which config.json keys give the sizes and the key/value grouping.
The TOML is mapped onto the dataclasses generically, field by field, from their
type hints, so every field a layout has (now or later) can be written in TOML,
and a file that states a shipped layout compares equal to it.

The file is read with the bounds of :mod:`qkenergy.base.toml_input` (a
regular file of at most 1 MiB, nesting at most 64 deep). Name templates may
hold ``{i}`` (and, in a qk-norm name, ``{h}``) and nothing else of Python's
format syntax: no other field, conversion or format spec, ``{{`` and ``}}``
for literal braces. A key-head count is a positive integer, a norm offset a
finite number, text at most 256 characters; messages cut what they quote.

Example (``docs/layouts/llama.toml`` is the shipped llama layout)::

    query = "layers.{i}.self_attn.q_proj.weight"
    key = "layers.{i}.self_attn.k_proj.weight"
    norm = "layers.{i}.input_layernorm.weight"
    kv_heads_key = "num_key_value_heads"
    head_dim_key = "head_dim"
"""

from __future__ import annotations

import dataclasses
import math
import os
import string
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe
from qkenergy.base.toml_input import read_toml
from qkenergy.weights.layout import LatentAttention, Layout, QKNorm

__all__ = ["layout_from_mapping", "load_layout"]


def load_layout(path: str | os.PathLike[str]) -> Layout:
    """The :class:`Layout` a TOML file describes; one-line QKEnergyError naming the file and key.

    Parameters
    ----------
    path : str or os.PathLike
        The TOML file.

    Returns
    -------
    Layout

    Raises
    ------
    QKEnergyError
        The file cannot be read, is not valid TOML, or does not describe a layout.
    """
    where = show_path(path)
    return layout_from_mapping(read_toml(path, where, "the layout file"), where)


def layout_from_mapping(data: Mapping[str, Any], where: str = "layout") -> Layout:
    """A :class:`Layout` from a parsed TOML table (``where`` names it in messages).

    Parameters
    ----------
    data : mapping
        The parsed TOML table (the Layout's fields, nested tables for its parts).
    where : str
        What the table is, in messages.

    Returns
    -------
    Layout

    Raises
    ------
    QKEnergyError
        An unknown key, a missing field, or a value of the wrong type, named by its key.
    """
    return cast(Layout, _build(Layout, data, where, ""))


# Name templates of each dataclass, and the fields they may hold.
_TEMPLATES: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {
    Layout: (("query", "key", "norm", "first_norm", "final_norm"), frozenset("i")),
    QKNorm: (("query", "key"), frozenset("ih")),
    LatentAttention: (("query_norm", "query_up", "key_norm", "key_up"), frozenset("i")),
}
MAX_TEXT = 256
"""Longest text value of a layout (a tensor name template, a config key, a label)."""
MAX_KV_HEADS = 1 << 20


def _check_template(value: str, allowed: frozenset[str], where: str, key: str) -> None:
    """``value`` is a name template: literal text, ``{i}`` (and ``{h}`` where allowed), ``{{``, ``}}``."""
    fields = " and ".join("{" + f + "}" for f in sorted(allowed))
    rule = f"a tensor name template holds {fields} and no other format field ({{{{ and }}}} for a brace)"
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:  # unbalanced braces
        raise QKEnergyError(
            f"{where}: key {key!r}: {describe(value)} is not a name template ({exc}); {rule}"
        ) from None
    for _, name, spec, conversion in parts:
        if name is not None and (name not in allowed or spec or conversion):
            shown = (
                "{"
                + show_name(name, 30)[1:-1]
                + (f"!{conversion}" if conversion else "")
                + (":..." if spec else "")
                + "}"
            )
            raise QKEnergyError(f"{where}: key {key!r} uses {shown}; {rule}")


def _build(cls: type, data: Any, where: str, prefix: str) -> Any:
    """An instance of dataclass ``cls`` from a table, each value checked against its field's type hint."""
    if not isinstance(data, Mapping):
        raise QKEnergyError(
            f"{where}: {prefix.rstrip('.') or 'the file'} must be a table, got {describe(data)}"
        )
    hints = typing.get_type_hints(cls)
    settable = {f.name: f for f in dataclasses.fields(cls) if f.init and not _is_code(hints[f.name])}
    unknown = [k for k in data if k not in settable]
    if unknown:
        raise QKEnergyError(
            f"{where}: unknown key {show_name(prefix + unknown[0], 60)}; a layout has: {', '.join(settable)}"
        )
    values: dict[str, Any] = {}
    for name, fld in settable.items():
        key = prefix + name
        if name in data:
            values[name] = _convert(data[name], hints[name], where, key)
        elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
            raise QKEnergyError(f"{where}: missing key {key!r} (required)")
    templates, allowed = _TEMPLATES.get(cls, ((), frozenset()))
    for name in templates:
        if isinstance(values.get(name), str):
            _check_template(values[name], allowed, where, prefix + name)
    if cls is QKNorm and values.get("scope") == "projection":
        for name in ("query", "key"):
            if "{h}" in str(values.get(name, "")):
                raise QKEnergyError(
                    f"{where}: key {prefix + name!r}: {{h}} needs scope = 'head' (one norm per head)"
                )
    kv_heads = values.get("kv_heads")
    if kv_heads is not None and not 1 <= kv_heads <= MAX_KV_HEADS:
        raise QKEnergyError(
            f"{where}: key {prefix + 'kv_heads'!r} is {describe(kv_heads)}; expected a positive "
            f"integer (at most {MAX_KV_HEADS})"
        )
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise QKEnergyError(f"{where}: {exc}") from None


def _is_code(hint: Any) -> bool:
    """A hook field (a callable): code, not data, so not settable from TOML."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    return any(typing.get_origin(o) is Callable or o is Callable for o in options if o is not type(None))


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "nothing"
    if _is_union(hint):
        return " or ".join(_describe(h) for h in typing.get_args(hint) if h is not type(None))
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(hint)[0])}"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"a table ({hint.__name__})"
    names = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _convert(value: Any, hint: Any, where: str, key: str) -> Any:
    """``value`` checked (and converted: lists to tuples, tables to dataclasses) against ``hint``."""

    def fail() -> QKEnergyError:
        return QKEnergyError(
            f"{where}: key {show_name(key, 60)} must be {_describe(hint)}, got {describe(value)}"
        )

    if _is_union(hint):
        for option in typing.get_args(hint):
            if option is type(None):
                continue
            try:
                return _convert(value, option, where, key)
            except QKEnergyError:
                continue
        raise fail()
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value in typing.get_args(hint) and type(value) is type(typing.get_args(hint)[0]):
            return value
        raise fail()
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list):
            raise fail()
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], where, f"{key}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise fail()
        return tuple(_convert(v, a, where, f"{key}[{i}]") for i, (v, a) in enumerate(zip(args, value)))
    if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, Any]):
        if not isinstance(value, Mapping):
            raise fail()
        _, item = typing.get_args(hint)
        return {str(k): _convert(v, item, where, f"{key}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, where, key + ".")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise fail()
    if hint is str and type(value) is str and len(value) > MAX_TEXT:
        raise QKEnergyError(f"{where}: key {show_name(key, 60)} is longer than {MAX_TEXT} characters")
    if hint is int and type(value) is int and not -(2**63) <= value < 2**63:
        raise fail()
    if hint is int or hint is str or hint is bool:
        if type(value) is hint:
            return value
        raise fail()
    if hint is Any:
        return value
    raise QKEnergyError(f"{where}: key {key!r} has a type TOML cannot give ({_describe(hint)})")
