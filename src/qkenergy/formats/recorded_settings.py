"""The settings as a table records them: strict JSON text, where each format keeps it, the checks on reading.

Every table format module (:mod:`qkenergy.formats.csv_table`, ...) writes and
reads its settings with these; :mod:`qkenergy.formats.provenance` builds the
settings. They live apart from provenance so that
the format modules sit below it: provenance's ``read_settings`` asks the format
registry (:data:`qkenergy.formats.tables.FORMATS`) which module reads a file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import json_safe
from qkenergy.base.json_input import describe, get_bool, get_int, get_str, json_type, parse_object

__all__ = [
    "MAX_SETTINGS_BYTES",
    "METADATA_KEY",
    "SIDECAR_SUFFIX",
    "check_settings",
    "parse_settings",
    "settings_json",
    "sidecar_path",
]

METADATA_KEY = "qkenergy"
SIDECAR_SUFFIX = ".meta.json"
MAX_SETTINGS_BYTES = 16 << 20
"""Largest settings read back (a sidecar, a Parquet file's metadata): a run's are some kilobytes."""


def sidecar_path(table: str | os.PathLike[str]) -> Path:
    """The settings file beside a CSV table: ``results.csv`` -> ``results.csv.meta.json``.

    Parameters
    ----------
    table : str or path-like
        The CSV table.

    Returns
    -------
    Path
        Its sidecar.
    """
    table = Path(table)
    return table.with_name(table.name + SIDECAR_SUFFIX)


def settings_json(settings: Mapping[str, Any]) -> str:
    """The settings as strict JSON text (NaN as null).

    Parameters
    ----------
    settings : mapping
        The settings.

    Returns
    -------
    str
        JSON text.
    """
    return json.dumps(json_safe(dict(settings)), allow_nan=False, sort_keys=False)


def parse_settings(raw: bytes | None, where: str) -> dict[str, Any] | None:
    """Settings from a Parquet file's ``qkenergy`` metadata (JSON text; None when absent), checked.

    Parameters
    ----------
    raw : bytes or None
        The metadata value.
    where : str
        The file as errors show it.

    Returns
    -------
    dict or None
        The settings.

    Raises
    ------
    QKEnergyError
        The value is too large, not a JSON object, or fails :func:`check_settings`.
    """
    if raw is None:
        return None
    if len(raw) > MAX_SETTINGS_BYTES:
        raise QKEnergyError(f"{where}: its settings are larger than the {MAX_SETTINGS_BYTES}-byte limit")
    return check_settings(parse_object(raw, where, "its settings (Parquet metadata 'qkenergy')"), where)


# The settings a reader of a table uses, and what each must be (any other key is kept as it is).
_TEXT_SETTINGS = ("model", "model_type", "initialisation", "null_kind", "qkenergy_version", "created")
_COUNT_SETTINGS = {"n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "head_dim": 1, "hidden_size": 1,
                   "samples": 0, "rotation_samples": 0, "seed": 0}  # fmt: skip
_FLAG_SETTINGS = ("null", "per_layer", "fold_norm")


def check_settings(settings: Any, where: str) -> dict[str, Any] | None:
    """``settings`` (parsed JSON, None for a table without) checked: a JSON object whose keys that
    readers use have their types (text, counts, flags, the radius in [0, 1], notes a list of
    text, RoPE offsets a list of integers, ``rope`` an object); one line naming the key otherwise.

    Parameters
    ----------
    settings : object
        The parsed settings, or None.
    where : str
        The file as errors show it.

    Returns
    -------
    dict or None
        ``settings``, unchanged.

    Raises
    ------
    QKEnergyError
        ``settings`` is not an object, or a key has the wrong type.
    """
    if settings is None:
        return None
    if not isinstance(settings, dict):
        raise QKEnergyError(f"{where}: its settings are not a JSON object (got {json_type(settings)})")
    at = f"{where}: settings"
    for key in _TEXT_SETTINGS:
        get_str(settings, key, at)
    for key, minimum in _COUNT_SETTINGS.items():
        get_int(settings, key, at, minimum=minimum, maximum=2**53)
    for key in _FLAG_SETTINGS:
        get_bool(settings, key, at, default=False)
    radius = settings.get("radius")
    if radius is not None and (
        isinstance(radius, bool) or not isinstance(radius, int | float) or not 0 <= radius <= 1
    ):
        raise QKEnergyError(f"{at}: field 'radius' is {describe(radius)}; expected a number in [0, 1]")
    notes = settings.get("notes")
    if notes is not None and (not isinstance(notes, list) or not all(isinstance(n, str) for n in notes)):
        raise QKEnergyError(f"{at}: field 'notes' is {describe(notes)}; expected a list of text")
    offsets = settings.get("rope_offsets")
    if offsets is not None and (
        not isinstance(offsets, list)
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in offsets)
    ):
        raise QKEnergyError(f"{at}: field 'rope_offsets' is {describe(offsets)}; expected a list of integers")
    rope = settings.get("rope")
    if rope is not None and rope is not False:
        theta = rope.get("theta", []) if isinstance(rope, dict) else None
        if not isinstance(theta, list) or not all(
            isinstance(t, int | float) and not isinstance(t, bool) for t in theta
        ):
            raise QKEnergyError(
                f"{at}: field 'rope' is {describe(rope)}; expected an object with a list 'theta'"
            )
        get_str(rope, "kind", f"{at}: field 'rope'")
    return settings
