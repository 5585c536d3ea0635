"""Layouts from TOML files: the shipped declarative schema, written by a user.

A layout file holds the fields of :class:`qkenergy.weights.layout.Layout`
(every field but the ``adjust`` hook, which is code): tensor name templates
(``{i}`` = layer index, relative to the checkpoint's prefix), how Q and K are
stored (``storage``: separate, stacked, conv1d, interleaved), the norm feeding
attention, and which config.json keys give the sizes and the key/value grouping.
The TOML is mapped onto the dataclasses generically, field by field, from their
type hints, so every field a layout has (now or later) can be written in TOML,
and a file that states a shipped layout compares equal to it.

Example (``docs/layouts/llama.toml`` is the shipped llama layout)::

    query = "layers.{i}.self_attn.q_proj.weight"
    key = "layers.{i}.self_attn.k_proj.weight"
    norm = "layers.{i}.input_layernorm.weight"
    kv_heads_key = "num_key_value_heads"
    head_dim_key = "head_dim"
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.layout import Layout
from qkenergy.weights.safetensors_io import show_path

__all__ = ["layout_from_mapping", "load_layout"]


def load_layout(path: str | os.PathLike[str]) -> Layout:
    """The :class:`Layout` a TOML file describes; one-line QKEnergyError naming the file and key."""
    where = show_path(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise QKEnergyError(f"{where}: cannot read layout file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise QKEnergyError(f"{where}: not valid TOML ({str(exc).splitlines()[0]})") from None
    return layout_from_mapping(data, where)


def layout_from_mapping(data: Mapping[str, Any], where: str = "layout") -> Layout:
    """A :class:`Layout` from a parsed TOML table (``where`` names it in messages)."""
    layout: Layout = _build(Layout, data, where, "")
    return layout


def _build(cls: type, data: Any, where: str, prefix: str) -> Any:
    """An instance of dataclass ``cls`` from a table, each value checked against its field's type hint."""
    if not isinstance(data, Mapping):
        raise QKEnergyError(f"{where}: {prefix.rstrip('.') or 'the file'} must be a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    settable = {f.name: f for f in dataclasses.fields(cls) if f.init and not _is_code(hints[f.name])}
    unknown = [k for k in data if k not in settable]
    if unknown:
        raise QKEnergyError(
            f"{where}: unknown key {prefix + unknown[0]!r}; a layout has: {', '.join(settable)}"
        )
    values: dict[str, Any] = {}
    for name, fld in settable.items():
        key = prefix + name
        if name in data:
            values[name] = _convert(data[name], hints[name], where, key)
        elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
            raise QKEnergyError(f"{where}: missing key {key!r} (required)")
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
        return QKEnergyError(f"{where}: key {key!r} must be {_describe(hint)}, got {value!r}")

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
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise fail()
    if hint is int or hint is str or hint is bool:
        if type(value) is hint:
            return value
        raise fail()
    if hint is Any:
        return value
    raise QKEnergyError(f"{where}: key {key!r} has a type TOML cannot give ({_describe(hint)})")
