"""The survey manifest: which models to analyse, each with its own options.

Two forms. A TOML file (``.toml``) with one ``[[model]]`` table per model::

    [[model]]
    source = "openai-community/gpt2"   # path, Hugging Face cache folder or hub id
    name = "gpt2"                      # optional; default derived from source
    revision = "main"                  # optional; hub ids and cache folders only
    fold_norm = true                   # optional; fold the attention norm's gain
    layers = "0-5"                     # optional; list [0, 1] or text "0-3,7"
    step = 1000                        # optional; training step of a checkpoint
    group = "base"                     # optional; any label

or a plain text file with one source per line (``#`` starts a comment). The
source ``embedded`` is the all-MiniLM-L6-v2 shipped with qkenergy. Errors are
one line naming the manifest file, the model entry and the key.

The manifest is read as any input is (:mod:`qkenergy.base.toml_input`): a
regular file of at most 1 MiB, TOML nested at most 64 deep; layer ranges are
checked against :data:`MAX_LAYER` before they are expanded, and messages cut
what they quote. A model's name becomes a folder (``model=NAME``): it is made
of letters, digits, ``.``, ``_`` and ``-`` only, and at most
:data:`MAX_NAME_BYTES` bytes (a longer one is cut and ends in a digest of the
whole name, so that names stay distinct).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import describe, read_bytes
from qkenergy.base.toml_input import MAX_TOML_BYTES, parse_toml

__all__ = ["EMBEDDED", "KEYS", "MAX_LAYER", "MAX_NAME_BYTES", "ModelEntry", "model_name", "read_manifest"]

EMBEDDED = "embedded"
"""The manifest source naming the embedded all-MiniLM-L6-v2 (a path of that name wins)."""

KEYS = ("source", "name", "revision", "fold_norm", "layers", "step", "group")
MAX_LAYER = 1 << 16
"""Largest layer index a manifest may name (no model has nearly as many layers)."""
MAX_NAME_BYTES = 200
"""Longest model name: a path component (``model=NAME``) stays far below the usual 255-byte limit."""
MAX_SOURCE_CHARS = 4096
"""Longest source: the longest path Linux accepts."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HF_CACHE = re.compile(r"^models--(.+)$")


@dataclass(frozen=True)
class ModelEntry:
    """One model of the manifest, validated; ``name`` is filesystem-safe and unique.

    Parameters
    ----------
    source : str
        Where the model is: a directory, a file or a hub id.
    name : str
        The survey's name for it.
    revision : str or None, optional
        The hub revision.
    fold_norm : bool, optional
        Fold the query/key norms into the weights.
    layers : tuple of int or None, optional
        The layers to analyse; None for all.
    step : int or None, optional
        The training step of the checkpoint.
    group : str or None, optional
        The group (training run) it belongs to.
    """

    source: str
    name: str
    revision: str | None = None
    fold_norm: bool = False
    layers: tuple[int, ...] | None = None
    step: int | None = None
    group: str | None = None

    def record(self) -> dict[str, Any]:
        """JSON-ready form (survey.json)."""
        out = asdict(self)
        out["layers"] = None if self.layers is None else list(self.layers)
        return out


def model_name(text: str) -> str:
    """A filesystem- and Hive-safe model name: letters, digits, ``.``, ``_``, ``-``.

    ``org/name`` becomes ``org--name`` (as the Hugging Face cache spells it);
    other characters become ``_``; leading dots and underscores are dropped
    (readers of Parquet datasets skip such names as hidden files).

    Parameters
    ----------
    text : str
        The name or source as given.

    Returns
    -------
    str
        The safe name.
    """
    safe = _UNSAFE.sub("_", text.strip().replace("/", "--")).lstrip("._") or "model"
    if len(safe) > MAX_NAME_BYTES:  # ASCII only by now: characters are bytes
        digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
        safe = f"{safe[: MAX_NAME_BYTES - 17]}-{digest}"
    return safe


def _default_name(source: str) -> str:
    """Name of a model from its source: the hub id, cache folder or directory it comes from."""
    if source == EMBEDDED:
        return "all-MiniLM-L6-v2"
    path = Path(os.path.expanduser(source))
    if _exists(path) or source.startswith((".", "/", "~")):
        path = path.resolve() if _exists(path) else path
        if path.suffix == ".safetensors" or path.name.endswith(".index.json"):
            path = path.parent
        cached = _HF_CACHE.match(path.name)
        return model_name(cached.group(1) if cached else path.name)
    return model_name(source)  # hub id: org/name -> org--name


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; False for a name no file can have (too long, a NUL in it)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _where(manifest: Path, index: int, source: str | None) -> str:
    entry = f"model {index + 1}" + (
        f" ({show_path(source[:120])}{'...' if len(source) > 120 else ''})" if source else ""
    )
    return f"{show_path(manifest)}: {entry}"


def _parse_layers(value: Any, where: str) -> tuple[int, ...]:
    expected = "a list of layer indices such as [0, 1, 5] or text such as '0-3,7'"
    indices: list[int] = []
    beyond = f"; layer indices go up to {MAX_LAYER}"
    if isinstance(value, str):
        for item in (part.strip() for part in value.split(",")):
            low, dash, high = item.partition("-")
            if not (low.isdigit() and (high.isdigit() if dash else True)) or len(item) > 20:
                raise QKEnergyError(f"{where}: key 'layers': {describe(item)} is not {expected}")
            first, last = int(low), int(high if dash else low)
            if last < first:
                raise QKEnergyError(f"{where}: key 'layers': {describe(item)} is not {expected}")
            if last > MAX_LAYER:  # checked before the range is expanded
                raise QKEnergyError(f"{where}: key 'layers': {describe(item)} is out of range{beyond}")
            indices.extend(range(first, last + 1))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise QKEnergyError(f"{where}: key 'layers': {describe(item)} is not {expected}")
            if item > MAX_LAYER:
                raise QKEnergyError(f"{where}: key 'layers': {describe(item)} is out of range{beyond}")
            indices.append(item)
    else:
        raise QKEnergyError(f"{where}: key 'layers' must be {expected}, got {describe(value)}")
    if not indices:
        raise QKEnergyError(f"{where}: key 'layers' is empty; expected {expected}")
    return tuple(sorted(set(indices)))


def _entry(table: Any, manifest: Path, index: int) -> ModelEntry:
    if not isinstance(table, dict):
        raise QKEnergyError(f"{_where(manifest, index, None)}: expected a [[model]] table")
    source = table.get("source")
    where = _where(manifest, index, source if isinstance(source, str) else None)
    if unknown := [k for k in table if k not in KEYS]:
        raise QKEnergyError(
            f"{where}: unknown key {show_name(unknown[0], 60)}; allowed keys: {', '.join(KEYS)}"
        )
    if not isinstance(source, str) or not source.strip():
        raise QKEnergyError(f"{where}: key 'source' is required: a path, cache folder or hub id (text)")
    options: dict[str, Any] = {"source": _text(source.strip(), where, "source")}
    for key in ("name", "revision", "group"):
        if key in table:
            if not isinstance(table[key], str) or not table[key].strip():
                raise QKEnergyError(
                    f"{where}: key {key!r} must be non-empty text, got {describe(table[key])}"
                )
            options[key] = _text(table[key].strip(), where, key)
    if "fold_norm" in table:
        if not isinstance(table["fold_norm"], bool):
            raise QKEnergyError(
                f"{where}: key 'fold_norm' must be true or false, got {describe(table['fold_norm'])}"
            )
        options["fold_norm"] = table["fold_norm"]
    if "step" in table:
        step = table["step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63:
            raise QKEnergyError(f"{where}: key 'step' must be a non-negative integer, got {describe(step)}")
        options["step"] = step
    if "layers" in table:
        options["layers"] = _parse_layers(table["layers"], where)
    options["name"] = model_name(options["name"]) if "name" in options else _default_name(options["source"])
    return ModelEntry(**options)


def _text(value: str, where: str, key: str) -> str:
    """A text value of the manifest: at most MAX_SOURCE_CHARS characters, no control characters."""
    if len(value) > MAX_SOURCE_CHARS:
        raise QKEnergyError(f"{where}: key {key!r} is longer than {MAX_SOURCE_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise QKEnergyError(f"{where}: key {key!r} holds a control character: {describe(value)}")
    return value


def _read_toml(path: Path, raw: bytes) -> list[ModelEntry]:
    data = parse_toml(raw, show_path(path), "the manifest")
    if extra := [k for k in data if k != "model"]:
        raise QKEnergyError(
            f"{show_path(path)}: unknown key {show_name(extra[0], 60)}; a manifest holds only [[model]] tables "
            "(survey settings come from the command line)"
        )
    tables = data.get("model")
    if not isinstance(tables, list) or not tables:
        raise QKEnergyError(f"{show_path(path)}: no [[model]] table; expected at least one")
    return [_entry(table, path, i) for i, table in enumerate(tables)]


def _read_lines(path: Path, raw: bytes) -> list[ModelEntry]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise QKEnergyError(f"{show_path(path)}: the manifest is not UTF-8 text") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if source := line.split("#", 1)[0].strip():
            source = _text(source, f"{show_path(path)}: line {number}", "source")
            entries.append(ModelEntry(source=source, name=_default_name(source)))
    if not entries:
        raise QKEnergyError(f"{show_path(path)}: no model sources; expected one path or hub id per line")
    return entries


def read_manifest(path: str | os.PathLike[str]) -> tuple[list[ModelEntry], str]:
    """The models of a manifest (``.toml``: [[model]] tables; else one source per line) and its sha256.

    Parameters
    ----------
    path : str or path-like
        The manifest.

    Returns
    -------
    entries : list of ModelEntry
        The models.
    sha256 : str
        The manifest's digest.

    Raises
    ------
    QKEnergyError
        The manifest is unreadable, an entry invalid, or a name used twice.
    """
    manifest = Path(path)
    raw = read_bytes(manifest, show_path(manifest), "the manifest", MAX_TOML_BYTES)
    reader = _read_toml if manifest.suffix.lower() == ".toml" else _read_lines
    entries = reader(manifest, raw)
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in seen:
            raise QKEnergyError(
                f"{_where(manifest, i, entry.source)}: key 'name': {show_name(entry.name, 60)} is already used by "
                f"model {seen[entry.name] + 1}; give each model a distinct name"
            )
        seen[entry.name] = i
    return entries, hashlib.sha256(raw).hexdigest()
