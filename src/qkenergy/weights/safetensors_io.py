"""Lazy, validated reading of ``.safetensors`` files with numpy only.

Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
header length ``n``, ``n`` bytes of JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the
data section that follows the header), plus an optional ``"__metadata__"``
dict of strings. All data is little-endian and C-contiguous.

Why not the ``safetensors`` library: its errors do not name the tensor or what
was expected (a wrong byte range gives "Error while deserializing header:
invalid shape, data type, or offset for tensor"), its ``get_tensor`` copies
every tensor into memory, and older releases' numpy backend cannot return
bfloat16. The format is simple enough that a small parser gives one-line errors
naming the file and tensor, and checked reads of only the tensors asked for
(``os.preadv`` into private arrays, not a memory map: a mapped file truncated
by another process kills the reader with SIGBUS). Nothing here ever unpickles
anything.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Self

import numpy as np

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError, check_memory
from qkenergy.base.json_input import describe, json_type, open_regular, parse_object
from qkenergy.base.small_floats import BFLOAT16, FLOAT8_E4M3FN, FLOAT8_E5M2, FLOAT8_E8M0FNU

__all__ = ["DTYPES", "IndexedShards", "SafetensorsFile", "TensorInfo", "TensorSource"]

# safetensors dtype code -> little-endian numpy dtype. Sub-byte codes (F4, F6_*)
# pack several values per byte and are not supported. bfloat16 and float8 tensors
# come back as their stored bits (base.small_floats), widened exactly where they are
# used: no ml_dtypes import (about 0.6 s) for a bf16 checkpoint.
DTYPES: Mapping[str, np.dtype] = MappingProxyType(
    {
        "F64": np.dtype("<f8"),
        "F32": np.dtype("<f4"),
        "F16": np.dtype("<f2"),
        "BF16": BFLOAT16,
        "F8_E4M3": FLOAT8_E4M3FN,
        "F8_E5M2": FLOAT8_E5M2,
        "F8_E8M0": FLOAT8_E8M0FNU,
        "I64": np.dtype("<i8"),
        "I32": np.dtype("<i4"),
        "I16": np.dtype("<i2"),
        "I8": np.dtype("i1"),
        "U64": np.dtype("<u8"),
        "U32": np.dtype("<u4"),
        "U16": np.dtype("<u2"),
        "U8": np.dtype("u1"),
        "BOOL": np.dtype("?"),
    }
)
"""safetensors dtype code -> little-endian numpy dtype (every code this reader supports)."""

# Same cap as the reference implementation: real headers are well below 100 MB.
MAX_HEADER_BYTES = 100_000_000
# Read size of prefetch(): large enough for sequential disk reads, small in memory.
_PREFETCH_BYTES = 8 << 20
# Largest single preadv of tensor(): below Linux's 2 GiB cap per read call.
_READ_BYTES = 1 << 30
# Smallest part of a read that TensorSource.split_reads hands to a thread of its own.
_SPLIT_BYTES = 8 << 20
# Most axes a tensor may have (numpy's own limit is 64).
MAX_RANK = 32


@dataclass(frozen=True)
class TensorInfo:
    """Header entry of one tensor; ``begin``/``end`` are absolute file offsets.

    Parameters
    ----------
    name : str
        The tensor's name.
    dtype : str
        The safetensors dtype (F32, F16, BF16, ...).
    shape : tuple of int
        In numpy order.
    begin, end : int
        Absolute byte offsets of its data in the file.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# What a remote file's first fetch takes: the length and, in most files, the whole header.
HEADER_PROBE = 64 << 10

Fetch = Callable[[int, int], None]
"""``fetch(begin, end)``: make the bytes [begin, end) of a file readable (a remote file's mirror)."""


def _parse_header(
    path: Path, fetch: Fetch | None = None
) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """Read and validate the header; returns (tensors, metadata, file size)."""
    where = show_path(path)
    try:
        with open_regular(path, where) as f:
            size = os.fstat(f.fileno()).st_size
            if fetch is not None:
                fetch(0, HEADER_PROBE)
            prefix = f.read(8)
            if len(prefix) < 8:
                raise QKEnergyError(
                    f"{where}: file has {size} bytes, too short for a safetensors header "
                    "(needs an 8-byte length first)"
                )
            # The length is whatever the first 8 bytes of the file hold: never echoed in a message.
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise QKEnergyError(
                    f"{where}: absurd header length (over the {MAX_HEADER_BYTES}-byte limit); "
                    "not a safetensors file"
                )
            if n > size - 8:
                raise QKEnergyError(
                    f"{where}: the header length is larger than the rest of the file "
                    f"({size - 8} bytes); truncated, or not a safetensors file"
                )
            if fetch is not None:
                fetch(8, 8 + n)
            raw = f.read(n)
    except OSError as exc:
        raise QKEnergyError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(raw) < n:
        raise QKEnergyError(f"{where}: file shrank while its header was read")
    header = parse_object(raw, where, "header")

    data_start = 8 + n
    data_len = size - data_start
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise QKEnergyError(f"{where}: __metadata__ must be an object of strings")

    tensors = {name: _tensor_info(name, entry, where, data_start, data_len) for name, entry in header.items()}

    # Overlap check: a sort of the header entries, cheap next to any real use.
    spans = sorted((i for i in tensors.values() if i.end > i.begin), key=lambda i: i.begin)
    for a, b in itertools.pairwise(spans):
        if b.begin < a.end:
            raise QKEnergyError(
                f"{where}: tensors {a.name!r} and {b.name!r} overlap in the data section "
                f"([{a.begin - data_start}, {a.end - data_start}] and "
                f"[{b.begin - data_start}, {b.end - data_start}])"
            )
    return tensors, metadata, size


def _tensor_info(name: str, entry: Any, where: str, data_start: int, data_len: int) -> TensorInfo:
    """One header entry validated: its dtype, shape and data offsets, inside the data section."""
    t = f"{where}: tensor {show_name(name)}"
    if not isinstance(entry, dict):
        raise QKEnergyError(f"{t} must be an object with dtype, shape, data_offsets; got {json_type(entry)}")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise QKEnergyError(f"{t}: field 'dtype' is {describe(dtype)}; expected one of {', '.join(DTYPES)}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise QKEnergyError(
            f"{t}: field 'shape' is {describe(shape)}; expected an array of at most "
            f"{MAX_RANK} non-negative integers"
        )
    for axis, d in enumerate(shape):
        if not _is_int(d) or d < 0:
            raise QKEnergyError(
                f"{t}: field 'shape' has entry {axis} = {describe(d)}; expected a non-negative integer"
            )
    offsets: Any = entry.get("data_offsets")
    pair = isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
    if not pair or not 0 <= offsets[0] <= offsets[1]:
        shown = f"[{offsets[0]}, {offsets[1]}]" if pair else describe(offsets)
        raise QKEnergyError(
            f"{t}: field 'data_offsets' is {shown}; expected [begin, end] with 0 <= begin <= end"
        )
    begin, end = offsets
    if end > data_len:
        raise QKEnergyError(
            f"{t} has data_offsets [{begin}, {end}] beyond the {data_len}-byte data "
            "section; file truncated or corrupt"
        )
    need = DTYPES[dtype].itemsize * math.prod(shape)  # shape <= MAX_RANK entries of <= 30 digits
    if end - begin != need:
        dims = ", ".join(map(str, shape))
        raise QKEnergyError(
            f"{t} has data_offsets [{begin}, {end}] ({end - begin} bytes) but "
            f"{dtype} [{dims}] needs {need} bytes"
        )
    return TensorInfo(name, dtype, tuple(shape), data_start + begin, data_start + end)


def _missing(name: str, names: Iterable[str], where: str) -> QKEnergyError:
    import difflib  # only to word an error

    close = difflib.get_close_matches(name, list(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return QKEnergyError(f"{where}: no tensor {name!r}{hint}")


class Closeable:
    """``with`` support for anything with a ``close()``."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _TensorIndex(Closeable):
    """The read-only container side shared by a file and a set of shards: names, info, dtype, shape, release.

    Subclasses keep ``_index`` (tensor name -> where it lives) and define ``info``.
    """

    _index: Mapping[str, object]

    @property
    def names(self) -> list[str]:
        """Tensor names (header order, shard by shard)."""
        return list(self._index)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def info(self, name: str) -> TensorInfo:  # pragma: no cover - overridden
        raise NotImplementedError

    def dtype(self, name: str) -> np.dtype:
        return self.info(name).np_dtype

    def shape(self, name: str) -> tuple[int, ...]:
        return self.info(name).shape

    def release(self) -> None:
        """Nothing to release: tensors are private arrays, freed with their last reference."""


class SafetensorsFile(_TensorIndex):
    """One ``.safetensors`` file: header validated on open, tensors read on demand.

    :meth:`tensor` reads the tensor's bytes with ``os.preadv`` into a private
    read-only array, through one descriptor kept open from the first read (so a
    file replaced meanwhile is not mixed in). Checked reads rather than a
    memory map: a mapped file truncated by another process kills the reader
    with SIGBUS, while a short read here is one line naming the file and the
    tensor. The array is freed with its last reference, so a layer-by-layer
    reader holds about one layer in memory (benchmarks/bench_checked_reads.py
    measures the cost against the mapped route).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    fetch : callable or None, optional
        ``fetch(begin, end)`` before each read of [begin, end): the file is a remote file's
        sparse mirror (:mod:`qkenergy.weights.range_cache`) and ``fetch`` fills it.

    Raises
    ------
    QKEnergyError
        The file cannot be read or its header is not a valid safetensors header.
    """

    _index: dict[str, TensorInfo]

    def __init__(self, path: str | os.PathLike[str], fetch: Fetch | None = None) -> None:
        self.path = Path(path)
        self.fetch = fetch
        self._index, self.metadata, self._size = _parse_header(self.path, fetch)
        self._fd: int | None = None
        self.read_threads = 1  # threads a large read is split over (see TensorSource.split_reads)

    def info(self, name: str) -> TensorInfo:
        try:
            return self._index[name]
        except KeyError:
            raise _missing(name, self._index, show_path(self.path)) from None

    def tensor(self, name: str) -> np.ndarray:
        """Read-only array of tensor ``name`` (a checked read of its bytes, no memory map); bfloat16
        and float8 as their stored bits (:mod:`qkenergy.base.small_floats`)."""
        info = self.info(name)
        check_memory(info.end - info.begin, f"{show_path(self.path)}: tensor {show_name(name)}")
        out = np.empty(info.shape, info.np_dtype)
        if info.end > info.begin:
            self._read_into(out.reshape(-1).view(np.uint8), info.begin, name)
        out.flags.writeable = False
        return out

    def _descriptor(self) -> int:
        if self._fd is None:
            where = show_path(self.path)
            with open_regular(self.path, where) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size != self._size:
                    raise QKEnergyError(
                        f"{where}: file changed size since its header was read ({self._size} -> {size} bytes)"
                    )
                self._fd = os.dup(fh.fileno())
        return self._fd

    def _read_into(self, buffer: np.ndarray, offset: int, name: str) -> None:
        """Fill ``buffer`` (uint8) from file offset ``offset``; a short read is a one-line error.

        With ``read_threads`` > 1 the buffer is read in up to as many contiguous
        parts of at least 8 MiB, each by a thread of its own (preadv releases the GIL).
        """
        if self.fetch is not None:
            self.fetch(offset, offset + len(buffer))
        parts = min(self.read_threads, len(buffer) // _SPLIT_BYTES)
        if parts <= 1:
            self._read_range(buffer, offset, name)
            return
        self._descriptor()  # opened once, before the threads share it
        bounds = [len(buffer) * k // parts // 4096 * 4096 for k in range(parts)] + [len(buffer)]
        with ThreadPoolExecutor(parts - 1) as helpers:
            rest = [
                helpers.submit(self._read_range, buffer[lo:hi], offset + lo, name)
                for lo, hi in itertools.pairwise(bounds[1:])
            ]
            self._read_range(buffer[: bounds[1]], offset, name)
            for part in rest:
                part.result()

    def _read_range(self, buffer: np.ndarray, offset: int, name: str) -> None:
        fd = self._descriptor()
        view = buffer.data
        done = 0
        while done < len(view):
            try:
                got = os.preadv(fd, [view[done : done + _READ_BYTES]], offset + done)
            except OSError as exc:
                raise QKEnergyError(
                    f"{show_path(self.path)}: cannot read tensor {show_name(name)}: {exc.strerror or exc}"
                ) from None
            if got == 0:
                raise QKEnergyError(
                    f"{show_path(self.path)}: file ended while tensor {show_name(name)} was read "
                    f"(it had {self._size} bytes when opened); truncated while in use?"
                )
            done += got

    def prefetch(self, name: str) -> None:
        """Read tensor ``name``'s bytes into the page cache (blocking: call it from a helper thread).

        The bytes go through a small scratch buffer, so the process's resident
        memory does not grow; a later :meth:`tensor` read then finds its pages
        in memory instead of waiting for the disk.
        """
        info = self.info(name)
        if self.fetch is not None:  # a remote file: fetching is the slow part, the page cache has it then
            self.fetch(info.begin, info.end)
            return
        scratch = bytearray(_PREFETCH_BYTES)
        view = memoryview(scratch)
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(info.begin)
            left = info.end - info.begin
            while left > 0:
                got = fh.readinto(view[: min(left, len(view))])
                if not got:
                    break
                left -= got

    def close(self) -> None:
        """Close the file descriptor; arrays already read stay valid."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, {len(self)} tensors)"


class TensorSource(_TensorIndex):
    """Tensors of one checkpoint spread over one or more safetensors files (shards).

    All headers are read and validated up front (cheap); a name present in two
    shards is an error.

    Parameters
    ----------
    files : iterable of str, os.PathLike or SafetensorsFile
        The shards (paths are opened).

    Raises
    ------
    QKEnergyError
        A shard cannot be read, a name appears in two shards, or no file is given.
    """

    def __init__(self, files: Iterable[str | os.PathLike[str] | SafetensorsFile]) -> None:
        self.files: list[SafetensorsFile] = []
        self._index: dict[str, SafetensorsFile] = {}
        try:
            for item in files:
                sf = item if isinstance(item, SafetensorsFile) else SafetensorsFile(item)
                self.files.append(sf)
                for name in sf.names:
                    other = self._index.setdefault(name, sf)
                    if other is not sf:
                        raise QKEnergyError(
                            f"tensor {name!r} appears in two shards: "
                            f"{show_path(other.path)} and {show_path(sf.path)}"
                        )
        except BaseException:
            self.close()
            raise
        if not self.files:
            raise QKEnergyError("no safetensors files given")

    @property
    def location(self) -> str:
        """The checkpoint in a message: its file, or its directory and shard count."""
        first = self.files[0].path
        if len(self.files) == 1:
            return show_path(first)
        return f"{show_path(first.parent)} ({len(self.files)} shards)"

    def file_of(self, name: str) -> SafetensorsFile:
        try:
            return self._index[name]
        except KeyError:
            raise _missing(name, self._index, self.location) from None

    def info(self, name: str) -> TensorInfo:
        return self.file_of(name).info(name)

    def tensor(self, name: str) -> np.ndarray:
        """Read-only array of tensor ``name`` (a checked read) from whichever shard holds it."""
        return self.file_of(name).tensor(name)

    @contextlib.contextmanager
    def split_reads(self, threads: int) -> Iterator[None]:
        """Inside the block, each read of a tensor is split over up to ``threads`` threads.

        For a read that nothing else overlaps, such as a run's first layer: most
        of its time goes in faulting in the pages of the fresh array, which two
        cores do in about half the time of one. Later layers are read while the
        current one is analysed, by one thread, which leaves the other cores to
        the statistics.
        """
        for sf in self.files:
            sf.read_threads = threads
        try:
            yield
        finally:
            for sf in self.files:
                sf.read_threads = 1

    def prefetch(self, names: Iterable[str]) -> None:
        """Read these tensors into the page cache (see SafetensorsFile.prefetch; blocking)."""
        for name in names:
            self.file_of(name).prefetch(name)

    def close(self) -> None:
        for sf in self.files:
            sf.close()

    def __repr__(self) -> str:
        return f"TensorSource({len(self.files)} files, {len(self)} tensors)"


class IndexedShards(TensorSource):
    """The shards of a checkpoint with a shard index, each opened when one of its tensors is first asked for.

    For a remote checkpoint (:mod:`qkenergy.weights.hub`), where opening a shard costs a request for
    its header: DeepSeek-V3 has 163 shards, of which an analysis of two layers reads one or two.
    The index routes each name to its shard; a shard is checked against the index when it opens
    (every tensor the index puts there must be in its header, and none of its tensors may be put
    elsewhere), so that a wrong index is one line, as for a checkpoint opened whole. ``files`` lists
    the shards opened so far (what was read from).

    Parameters
    ----------
    root : pathlib.Path
        The folder of the shards.
    weight_map : mapping of str to str
        The index's tensor name -> shard file name.
    opener : callable
        Opens a shard: ``opener(path) -> SafetensorsFile``.
    where : str
        The index in messages.
    """

    _index: dict[str, str]  # type: ignore[assignment]

    def __init__(
        self,
        root: Path,
        weight_map: Mapping[str, str],
        opener: Callable[[Path], SafetensorsFile],
        where: str,
    ) -> None:
        self.root = Path(root)
        self._index = dict(weight_map)
        self._opener = opener
        self._where = where
        self.files = []
        self._opened: dict[str, SafetensorsFile] = {}
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return f"{show_path(self.root)} ({len(set(self._index.values()))} shards)"

    def file_of(self, name: str) -> SafetensorsFile:
        shard = self._index.get(name)
        if shard is None:
            raise _missing(name, self._index, self.location)
        opened = self._opened.get(shard)
        return opened if opened is not None else self._open(shard)

    def _open(self, shard: str) -> SafetensorsFile:
        with self._lock:  # the read-ahead and hashing threads ask too
            if shard in self._opened:
                return self._opened[shard]
            sf = self._opener(self.root / shard)
            listed = [name for name, where in self._index.items() if where == shard]
            wrong = next((name for name in listed if name not in sf), None)
            if wrong is None:
                wrong = next((name for name in sf.names if self._index.get(name, shard) != shard), None)
            if wrong is not None:
                sf.close()
                found = f"in {shard!r}" if wrong in sf else "not there"
                raise QKEnergyError(
                    f"{self._where}: maps tensor {show_name(wrong)} to {show_name(self._index[wrong])} "
                    f"but it is {found}"
                )
            self._opened[shard] = sf
            self.files.append(sf)
            return sf

    def __repr__(self) -> str:
        return f"IndexedShards({len(self.files)} of {len(set(self._index.values()))} shards open, {len(self)} tensors)"
