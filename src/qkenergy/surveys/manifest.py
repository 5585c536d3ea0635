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
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.safetensors_io import show_path

__all__ = ["EMBEDDED", "KEYS", "ModelEntry", "model_name", "read_manifest"]

EMBEDDED = "embedded"
"""The manifest source naming the embedded all-MiniLM-L6-v2 (a path of that name wins)."""

KEYS = ("source", "name", "revision", "fold_norm", "layers", "step", "group")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HF_CACHE = re.compile(r"^models--(.+)$")


@dataclass(frozen=True)
class ModelEntry:
    """One model of the manifest, validated; ``name`` is filesystem-safe and unique."""

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
    """
    safe = _UNSAFE.sub("_", text.strip().replace("/", "--")).lstrip("._")
    return safe or "model"


def _default_name(source: str) -> str:
    """Name of a model from its source: the hub id, cache folder or directory it comes from."""
    if source == EMBEDDED:
        return "all-MiniLM-L6-v2"
    path = Path(os.path.expanduser(source))
    if path.exists() or source.startswith((".", "/", "~")):
        path = path.resolve() if path.exists() else path
        if path.suffix == ".safetensors" or path.name.endswith(".index.json"):
            path = path.parent
        cached = _HF_CACHE.match(path.name)
        return model_name(cached.group(1) if cached else path.name)
    return model_name(source)  # hub id: org/name -> org--name


def _where(manifest: Path, index: int, source: str | None) -> str:
    entry = f"model {index + 1}" + (f" ({source})" if source else "")
    return f"{show_path(manifest)}: {entry}"


def _parse_layers(value: Any, where: str) -> tuple[int, ...]:
    expected = "a list of layer indices such as [0, 1, 5] or text such as '0-3,7'"
    indices: list[int] = []
    if isinstance(value, str):
        for item in (part.strip() for part in value.split(",")):
            low, dash, high = item.partition("-")
            try:
                first, last = int(low), int(high if dash else low)
            except ValueError:
                raise QKEnergyError(f"{where}: key 'layers': {item!r} is not {expected}") from None
            if first < 0 or last < first:
                raise QKEnergyError(f"{where}: key 'layers': {item!r} is not {expected}")
            indices.extend(range(first, last + 1))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise QKEnergyError(f"{where}: key 'layers': {item!r} is not {expected}")
            indices.append(item)
    else:
        raise QKEnergyError(f"{where}: key 'layers' must be {expected}, got {value!r}")
    if not indices:
        raise QKEnergyError(f"{where}: key 'layers' is empty; expected {expected}")
    return tuple(sorted(set(indices)))


def _entry(table: Any, manifest: Path, index: int) -> ModelEntry:
    if not isinstance(table, dict):
        raise QKEnergyError(f"{_where(manifest, index, None)}: expected a [[model]] table")
    source = table.get("source")
    where = _where(manifest, index, source if isinstance(source, str) else None)
    unknown = [k for k in table if k not in KEYS]
    if unknown:
        raise QKEnergyError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(KEYS)}")
    if not isinstance(source, str) or not source.strip():
        raise QKEnergyError(f"{where}: key 'source' is required: a path, cache folder or hub id (text)")
    options: dict[str, Any] = {"source": source.strip()}
    for key in ("name", "revision", "group"):
        if key in table:
            if not isinstance(table[key], str) or not table[key].strip():
                raise QKEnergyError(f"{where}: key {key!r} must be non-empty text, got {table[key]!r}")
            options[key] = table[key].strip()
    if "fold_norm" in table:
        if not isinstance(table["fold_norm"], bool):
            raise QKEnergyError(f"{where}: key 'fold_norm' must be true or false, got {table['fold_norm']!r}")
        options["fold_norm"] = table["fold_norm"]
    if "step" in table:
        step = table["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise QKEnergyError(f"{where}: key 'step' must be a non-negative integer, got {step!r}")
        options["step"] = step
    if "layers" in table:
        options["layers"] = _parse_layers(table["layers"], where)
    options["name"] = model_name(options["name"]) if "name" in options else _default_name(options["source"])
    return ModelEntry(**options)


def _read_toml(path: Path, text: str) -> list[ModelEntry]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise QKEnergyError(f"{show_path(path)}: not valid TOML ({exc})") from None
    extra = [k for k in data if k != "model"]
    if extra:
        raise QKEnergyError(
            f"{show_path(path)}: unknown key {extra[0]!r}; a manifest holds only [[model]] tables "
            "(survey settings come from the command line)"
        )
    tables = data.get("model")
    if not isinstance(tables, list) or not tables:
        raise QKEnergyError(f"{show_path(path)}: no [[model]] table; expected at least one")
    return [_entry(table, path, i) for i, table in enumerate(tables)]


def _read_lines(path: Path, text: str) -> list[ModelEntry]:
    sources = (line.split("#", 1)[0].strip() for line in text.splitlines())
    entries = [ModelEntry(source=source, name=_default_name(source)) for source in sources if source]
    if not entries:
        raise QKEnergyError(f"{show_path(path)}: no model sources; expected one path or hub id per line")
    return entries


def read_manifest(path: str | os.PathLike[str]) -> tuple[list[ModelEntry], str]:
    """The models of a manifest (``.toml``: [[model]] tables; else one source per line) and its sha256."""
    manifest = Path(path)
    try:
        raw = manifest.read_bytes()
    except OSError as exc:
        raise QKEnergyError(
            f"{show_path(manifest)}: cannot read the manifest ({exc.strerror or exc})"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise QKEnergyError(f"{show_path(manifest)}: the manifest is not UTF-8 text") from None
    reader = _read_toml if manifest.suffix.lower() == ".toml" else _read_lines
    entries = reader(manifest, text)
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in seen:
            raise QKEnergyError(
                f"{_where(manifest, i, entry.source)}: key 'name': {entry.name!r} is already used by "
                f"model {seen[entry.name] + 1}; give each model a distinct name"
            )
        seen[entry.name] = i
    return entries, hashlib.sha256(raw).hexdigest()
