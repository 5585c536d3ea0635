"""How an output was made: the settings of a run, written with every table and read back from it.

A settings dict is a flat JSON object; commands add their own keys (``analyze``
its selection and null-law options, ``survey`` its manifest) to the common ones
made here:

- ``qkenergy_version``, ``created`` (UTC, ISO 8601), ``command`` (the command line),
  ``blas`` (the BLAS libraries and kernels of the process, :func:`qkenergy.base.parallel.blas_libraries`);
- ``model_source``: the MODEL argument and what it resolved to (see :func:`model_source`),
  with a fingerprint of every weight file read (see :func:`fingerprint_files`).

Each table format module writes and reads its own settings (where: see
:func:`qkenergy.formats.tables.write_table`); :mod:`qkenergy.formats.recorded_settings`
holds their JSON text and checks; :func:`read_settings` asks the module of a file's extension.
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
import sys
from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import json_safe
from qkenergy.base.parallel import blas_libraries
from qkenergy.base.small_floats import fingerprint_dtype
from qkenergy.base.version import __version__
from qkenergy.weights.safetensors_io import Closeable, TensorSource

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.weights.source import ModelSource

__all__ = [
    "ReadRecorder",
    "fingerprint_files",
    "model_source",
    "population_label",
    "read_settings",
    "run_settings",
]

# How much of a weight file is hashed at a time: bounded memory whatever the tensor size.
_CHUNK = 4 << 20
# A hub snapshot directory is named after the commit it holds.
_REVISION = re.compile(r"^[0-9a-f]{40}$")


# ----------------------------------------------------------------------------- building


def _installed_version(name: str) -> str | None:
    """``importlib.metadata.version(name)``, None when not installed (scipy.special imports
    importlib.metadata anyway, so reading it costs nothing more)."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_settings(resolved: Mapping[str, Any] | None = None, /, **settings: Any) -> dict[str, Any]:
    """The common provenance keys, then ``model_source`` = ``resolved`` (:func:`model_source`), then ``settings``.

    Parameters
    ----------
    resolved : mapping or None, optional
        The :func:`model_source` of the run, positional only.
    **settings
        The command's own keys (samples, seed, radius, fold_norm, null_kind, ...): any JSON-ready
        values, recorded as given.

    Returns
    -------
    dict
        The settings, JSON-ready: qkenergy_version, created, command, blas, model_source, then ``settings``.
    """
    out: dict[str, Any] = {
        "qkenergy_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(
            [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
        ),
        "blas": blas_libraries(),
    }
    if resolved is not None:
        out["model_source"] = dict(resolved)
    out.update(settings)
    return cast(dict[str, Any], json_safe(out))


def model_source(
    argument: Any,
    model: ModelSource,
    files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What MODEL was and what it resolved to.

    ``argument``: as given (None: the embedded default; a model in memory is
    named by its type); ``origin``: embedded, file, directory, cache, hub, or
    the kind of model in memory; ``path``: the directory holding config.json (None in memory);
    ``hub_id`` and ``revision`` (the snapshot's commit) for hub models and the
    embedded MiniLM where known; ``package`` for the embedded MiniLM; ``files``:
    the fingerprints of the weight files read.

    Parameters
    ----------
    argument : str, path-like, model or None
        MODEL as given.
    model : ModelSource
        What it resolved to.
    files : list of dict or None, optional
        The fingerprints of the weight files read (:func:`fingerprint_files`).

    Returns
    -------
    dict
        The keys above (JSON-ready).
    """
    on_disk = argument is None or isinstance(argument, str | os.PathLike)
    root = Path(model.root).resolve() if on_disk else None
    hub_id = model.name if model.origin in ("hub", "embedded") else None
    revision = None
    if root is not None and root.parent.name == "snapshots" and _REVISION.match(root.name):
        revision = root.name  # a hub or cache snapshot is named after its commit
        if hub_id is None and root.parent.parent.name.startswith("models--"):
            hub_id = root.parent.parent.name.removeprefix("models--").replace("--", "/")
    hub = model.notes.get("hub")
    if hub is not None:  # read by byte range: the repository and the commit resolved
        hub_id, revision = hub["repo_id"], hub["commit"]
    package = None
    if model.origin == "embedded":
        name = model.package or "qkenergy"  # the default MiniLM ships inside qkenergy
        version = __version__ if name == "qkenergy" else _installed_version(name)
        package = name if version is None else f"{name}=={version}"
    return {
        "argument": (
            None if argument is None else os.fspath(argument) if on_disk else f"<{type(argument).__name__}>"
        ),
        "name": model.name,
        "origin": model.origin,
        "path": None if root is None else str(root),
        "hub_id": hub_id,
        "revision": revision,
        "package": package,
        "files": list(files or []),
    }


class ReadRecorder(Closeable):
    """A TensorReader (layouts.TensorReader) that notes which tensors were read from ``tensors``.

    Over safetensors files the fingerprints are those of :func:`fingerprint_files`,
    begun as the tensors are read: a tensor lying after every tensor hashed so
    far in its file is hashed from the array just read (the file's bytes), so
    that :meth:`fingerprints` only reads what was not hashed on the way. Over a
    model in memory (no files) each tensor is hashed as it is read: SHA-256 of
    name, dtype, shape and bytes, in read order. One reader at a time (a
    helper thread reading ahead is fine).

    File digests are extended on a thread of their own, in read order: SHA-256
    (about 2 GB/s) releases the GIL, so it runs beside the statistics instead
    of delaying the first layer's. A safetensors tensor is read-only, so the
    bytes hashed are the bytes read. :meth:`fingerprints` waits for it;
    :meth:`close` (or the ``with`` block) ends it.

    Parameters
    ----------
    tensors : TensorSource
        The checkpoint's tensors (safetensors files or a model in memory).
    """

    def __init__(self, tensors: Any) -> None:
        self.tensors = tensors
        self.read: dict[str, None] = {}  # names in read order
        self._memory = None if hasattr(tensors, "files") else _sha256()
        self._memory_bytes = 0
        self._begun: dict[Path, _BegunDigest] = {}  # file digests begun as tensors are read
        self._hasher = ThreadPoolExecutor(1, thread_name_prefix="qkenergy-hash")
        self._hashing: list[Future[None]] = []

    def close(self) -> None:
        """Stop the hashing thread (what it has not hashed yet is dropped)."""
        self._hasher.shutdown(wait=True, cancel_futures=True)

    @property
    def names(self) -> Collection[str]:
        return cast(Collection[str], self.tensors.names)

    @property
    def location(self) -> str:
        """How messages name the checkpoint (as TensorSource.location)."""
        return str(self.tensors.location)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.tensors.shape(name))

    def tensor(self, name: str) -> np.ndarray:
        array: np.ndarray = self.tensors.tensor(name)
        if name not in self.read:
            self.read[name] = None
            if self._memory is not None:
                data = np.ascontiguousarray(array)
                self._memory.update(f"{name}\0{fingerprint_dtype(data.dtype)}\0{list(data.shape)}\0".encode())
                self._memory.update(data.reshape(-1).view(np.uint8).data)  # bytes of any dtype (bfloat16 too)
                self._memory_bytes += data.nbytes
            elif _stored_names(self.tensors, name) == [name]:
                self._hashing.append(self._hasher.submit(self._hash_in_file_order, name, array))
            # else a dequantised weight (weights.quantization): fingerprints() hashes its stored parts
        return array

    def _hash_in_file_order(self, name: str, array: np.ndarray) -> None:
        """Extend the digest of ``name``'s file with the array's bytes when it comes next in file order."""
        sf = self.tensors.file_of(name)
        info = sf.info(name)
        begun = self._begun.get(sf.path)
        if begun is None:
            begun = self._begun[sf.path] = _BegunDigest.of_header(sf)
        if info.begin >= begun.ranges[-1][1] and array.nbytes == info.end - info.begin:
            begun.digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
            begun.add(info.begin, info.end)

    def fingerprints(self) -> list[dict[str, Any]]:
        """One entry per weight file read (:func:`fingerprint_files`), or one for the tensors in memory."""
        if self._memory is None:
            for hashed in self._hashing:
                hashed.result()  # an error while hashing is raised here
            return fingerprint_files(self.tensors, self.read, begun=self._begun)
        if not self.read:
            return []
        return [
            {
                "path": None,
                "in_memory": self.location,
                "sha256": self._memory.hexdigest(),
                "sha256_of": "name, dtype, shape and bytes of each tensor read, in read order",
                "hashed_bytes": self._memory_bytes,
                "tensors": list(self.read),
            }
        ]


def _sha256(data: bytes = b"") -> Any:
    """A new SHA-256 digest of ``data``.

    hashlib is imported here, not with the module: loading it (OpenSSL) takes
    about 2.5 ms, which a run from files spends on the hashing thread, while
    the first layer is read, instead of in the start-up of every command.
    """
    import hashlib

    return hashlib.sha256(data)


class _BegunDigest:
    """A file's SHA-256 of :func:`fingerprint_files` begun while its tensors were read.

    ``digest`` holds the header and ``ranges`` (byte ranges in increasing file
    order); ``states[k]`` is a copy of the digest after the header and the
    first k ranges, so that the digest can resume from any prefix of ranges.
    """

    def __init__(self, header_end: int, digest: Any) -> None:
        self.digest = digest
        self.ranges: list[tuple[int, int]] = [(0, header_end)]
        self.states = [digest.copy()]

    @classmethod
    def of_header(cls, sf: Any) -> _BegunDigest:
        with open(sf.path, "rb") as fh:
            header = fh.read(_header_end(sf, fh))
        return cls(len(header), _sha256(header))

    def add(self, begin: int, end: int) -> None:
        """Note the range [begin, end) hashed."""
        self.ranges.append((begin, end))
        self.states.append(self.digest.copy())

    def resume(self, ranges: list[tuple[int, int]]) -> tuple[Any, int]:
        """(a copy of the digest after the longest prefix of ``ranges`` hashed here, its length)."""
        k = 0
        while k < min(len(ranges), len(self.ranges)) and ranges[k] == self.ranges[k]:
            k += 1
        return (self.states[k - 1].copy(), k) if k else (_sha256(), 0)


def _stored_names(tensors: Any, name: str) -> list[str]:
    """The stored tensors that ``name`` reads (a dequantised weight's parts), else ``[name]``."""
    stored = getattr(tensors, "stored_names", None)
    return [name] if stored is None else list(stored(name))


def _header_end(sf: Any, fh: Any) -> int:
    """Where a weight file's header ends: a GGUF file says so (``header_end``), safetensors' 8-byte length does."""
    end = getattr(sf, "header_end", None)
    if end is None:
        fh.seek(0)
        end = 8 + int.from_bytes(fh.read(8), "little")
    fh.seek(0)
    return int(end)


def fingerprint_files(
    tensors: TensorSource, read: Iterable[str], *, begun: Mapping[Path, _BegunDigest] | None = None
) -> list[dict[str, Any]]:
    """Size and SHA-256 of the bytes read from each weight file.

    For each file that holds a tensor in ``read``: SHA-256 of its header (the
    8-byte length and the JSON) followed by the byte ranges of the tensors
    read, in file order, streamed in chunks of 4 MiB. When every tensor of a
    file is read this is the SHA-256 of the whole file (``sha256sum``); else it
    covers exactly what the analysis used, at the cost of one pass over the
    query and key weights (which are in the page cache by then), less what
    ``begun`` (digests begun by :class:`ReadRecorder` as it read) already holds.
    The entry lists the tensor names hashed so that the digest can be recomputed.

    Parameters
    ----------
    tensors : TensorSource
        The checkpoint's safetensors files.
    read : iterable of str
        The names of the tensors read.
    begun : mapping or None, optional
        File -> digest already begun by a :class:`ReadRecorder`.

    Returns
    -------
    list of dict
        Per file: its path, size, sha256 and the tensors hashed.

    Raises
    ------
    QKEnergyError
        A file changed while it was read, or cannot be read.
    """
    by_file: dict[Path, list[str]] = {}
    for name in dict.fromkeys(part for asked in read for part in _stored_names(tensors, asked)):
        by_file.setdefault(tensors.file_of(name).path, []).append(name)
    out = []
    for sf in tensors.files:
        names = by_file.get(sf.path)
        if not names:
            continue
        infos = sorted((sf.info(n) for n in names), key=lambda i: i.begin)
        try:
            with open(sf.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                ranges = [(0, _header_end(sf, fh))] + [(i.begin, i.end) for i in infos]
                if max(end for _, end in ranges) > size:
                    raise QKEnergyError(
                        f"{show_path(sf.path)}: file changed while it was read (now {size} bytes)"
                    )
                started = (begun or {}).get(sf.path)
                digest, done = started.resume(ranges) if started else (_sha256(), 0)
                hashed = sum(end - begin for begin, end in ranges[:done])
                for begin, end in ranges[done:]:
                    fh.seek(begin)
                    left = end - begin
                    while left:
                        chunk = fh.read(min(left, _CHUNK))
                        if not chunk:
                            raise QKEnergyError(f"{show_path(sf.path)}: file changed while it was read")
                        digest.update(chunk)
                        left -= len(chunk)
                    hashed += end - begin
        except OSError as exc:
            raise QKEnergyError(f"{show_path(sf.path)}: cannot read: {exc.strerror or exc}") from None
        out.append(
            {
                "path": str(sf.path.resolve()),
                "size": int(size),
                "sha256": digest.hexdigest(),
                "sha256_of": "whole file" if hashed == size else "header and the tensors read, in file order",
                "hashed_bytes": int(hashed),
                "tensors": [i.name for i in infos],
            }
        )
    return out


# ----------------------------------------------------------------------------- reading back


def read_settings(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The settings recorded with a table (.parquet, .json or .csv with its sidecar); None for older files.

    The table's format module (:data:`qkenergy.formats.tables.FORMATS`, by
    extension) reads them as any input is read: regular files of bounded size
    (a JSON table at most :data:`qkenergy.formats.schema.MAX_TABLE_BYTES`, a
    sidecar or Parquet metadata at most
    :data:`~qkenergy.formats.recorded_settings.MAX_SETTINGS_BYTES`), JSON nested
    at most 64 deep, every setting a reader uses checked for its type
    (:func:`~qkenergy.formats.recorded_settings.check_settings`).

    Parameters
    ----------
    path : path
        The table (.parquet, .json, or .csv with its ``.meta.json`` sidecar).

    Returns
    -------
    dict or None
        The settings dict every output records (version, command, model source, null settings, ...).

    Raises
    ------
    QKEnergyError
        A file too large, too deeply nested or with settings of the wrong types (naming the file).
    """
    from qkenergy.formats.tables import FORMATS

    source = Path(path)
    table_format = FORMATS.get(source.suffix.lower())
    if table_format is None:
        raise QKEnergyError(
            f"{show_path(source)}: no settings can be recorded in a {source.suffix.lower() or 'bare'} file"
        )
    return table_format.read_settings(source)


def population_label(settings: Mapping[str, Any] | None, model: str | None = None) -> str:
    """How figures name the heads of a table: 'random-initialised heads' or '<model> heads'.

    A run records ``initialisation = "random"`` when it knows the weights are a
    random initialisation (e.g. the step-0 checkpoint of a training run); a
    table without settings is named after its ``model`` column.

    Parameters
    ----------
    settings : mapping or None
        The table's settings.
    model : str or None, optional
        The model named by the table's ``model`` column.

    Returns
    -------
    str
        The label.
    """
    settings = settings or {}
    name = settings.get("model") or model
    if settings.get("initialisation") == "random":
        return f"random-initialised heads{f' ({name})' if name else ''}"
    return f"{name} heads" if name else "heads"
