"""Reading ``.gguf`` files (llama.cpp, ollama, LM Studio): the header, then tensors dequantised on demand.

Format (llama.cpp's ``docs/gguf.md``), little-endian throughout: the magic
``GGUF``, a u32 version (2 or 3), a u64 tensor count and a u64 key count; each
key is a string (u64 byte length, UTF-8), a u32 value type and the value (a
scalar, a string, or an array: u32 item type, u64 count, the items); each
tensor is its name, a u32 axis count, one u64 per axis (innermost first), a
u32 ggml type and a u64 offset into the data section, which begins at the
first multiple of ``general.alignment`` (32 when absent) after the table.

The header is parsed here rather than by ``gguf.GGUFReader``, which memory-maps the whole file (a
file truncated while mapped kills it with SIGBUS) and answers a malformed header with a numpy error
naming neither key nor tensor. Here every count and length is checked against the rest of the file
and the 100 MB header bound before anything is read or sized by it (a claim past either is refused
at once), arrays of keys qkenergy does not read are skipped by length, and every error is one line
naming the file and the key or tensor. Tensor bytes are read with the checked ``preadv`` reads of
safetensors (:class:`GGUFFile` is a :class:`~qkenergy.weights.safetensors_io.SafetensorsFile` with
another header); their values come from the ``gguf`` package, llama.cpp's own Python library (its
type table and numpy dequantisation of every type it knows). tests/weights/test_gguf.py checks the
header read here against ``gguf.GGUFReader`` field by field.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError, check_memory
from qkenergy.base.json_input import open_regular
from qkenergy.base.small_floats import BFLOAT16
from qkenergy.weights.safetensors_io import HEADER_PROBE, Fetch, SafetensorsFile, TensorSource
from qkenergy.weights.safetensors_io import MAX_HEADER_BYTES as MAX_HEADER

__all__ = [
    "GGUF_MAGIC",
    "GGUFArray",
    "GGUFFile",
    "GGUFHeader",
    "GGUFTensorInfo",
    "GGUFTensors",
    "gguf_files",
    "is_gguf",
    "one_gguf",
    "read_header",
    "split_files",
]

GGUF_MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_AXES = 4  # ggml tensors have at most 4 axes (GGML_MAX_DIMS)
KEEP_ITEMS = 4096  # longer arrays (a vocabulary, its merges) are skipped or walked, not kept
MAX_NESTING = 4  # arrays nested deeper are no real file's
MAX_STRING = 1 << 24  # longer text (a key, a name, a chat template) is no real file's
MAX_ENTRIES = 1 << 24  # more keys or tensors is no real file's (a 671B model has about 1,100 tensors)
# llama.cpp's gguf-split names the parts of a split model NAME-00001-of-00003.gguf.
_SPLIT_NAME = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")
# Header bytes read at a time; at most this many when a long string array is walked (its minimum is known).
_CHUNK, _WALK = 1 << 20, 16 << 20
# qkenergy reads no array under these prefixes (gguf_archs): their arrays are skipped by length, never kept.
_UNUSED_ARRAYS = ("general.", "tokenizer.")
_Entry = tuple[list[int], int, int]  # a tensor table entry: see _read_table


# value type code -> (name, struct format) of the scalars; 8 is a string, 9 an array.
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<B"),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}
_STRING, _ARRAY, _BOOL = 8, 9, 7
# ggml types stored as plain little-endian arrays: read as they are, no dequantisation.
_PLAIN = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}


def is_gguf(path: Path) -> bool:
    """Whether the file starts with the GGUF magic (a ``.gguf`` file, or an ollama blob ``sha256-...``).

    Parameters
    ----------
    path : pathlib.Path
        The file.

    Returns
    -------
    bool
        False also for a file that cannot be read or is not a regular file.
    """
    try:
        with open_regular(path, show_path(path)) as fh:
            return fh.read(4) == GGUF_MAGIC
    except QKEnergyError:
        return False


@dataclass(frozen=True)
class GGUFArray:
    """A long array value (a tokenizer's vocabulary): its item type and length, its items not kept.

    Parameters
    ----------
    item_type : str
        The GGUF value type of its items.
    count : int
        Its length.
    """

    item_type: str
    count: int


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One tensor of the table: ``shape`` in numpy order (outermost first); ``begin``/``end`` absolute offsets.

    Parameters
    ----------
    name : str
        The name the tensor is read under.
    gguf_name : str
        Its name in the file.
    dtype : str
        The ggml type's name: F32, F16, BF16, Q4_1, Q4_K, IQ2_XS, ...
    type_code : int
        The ggml type's number.
    shape : tuple of int
        In numpy order (outermost first).
    begin, end : int
        Absolute byte offsets of its data in the file.
    """

    name: str
    gguf_name: str
    dtype: str
    type_code: int
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def quantized(self) -> bool:
        """Whether the tensor is stored in blocks that are dequantised when read (not a plain array)."""
        return self.dtype not in _PLAIN and self.dtype != "BF16"

    @property
    def np_dtype(self) -> np.dtype:
        """The dtype :meth:`GGUFFile.tensor` returns: the stored one, or float32 for a quantised type."""
        if self.dtype in _PLAIN:
            return np.dtype(_PLAIN[self.dtype])
        if self.dtype == "BF16":
            return BFLOAT16  # its stored bits, widened where used: no ml_dtypes import
        return np.dtype(np.float32)


@dataclass(frozen=True)
class GGUFHeader:
    """What the header of a GGUF file holds: its version, key-value metadata and tensor table.

    Parameters
    ----------
    version : int
        The GGUF format version.
    fields : dict of str to object
        Key -> value (int, float, bool, str, tuple, or :class:`GGUFArray` for long arrays).
    tensors : list of GGUFTensorInfo
        The tensor table in file order (``name`` is ``gguf_name`` here).
    data_start : int
        The first byte of the data section.
    size : int
        The file's size when the header was read.
    """

    version: int
    fields: dict[str, Any]  # key -> value (int, float, bool, str, tuple, or GGUFArray for long arrays)
    tensors: list[GGUFTensorInfo]  # file order; ``name`` = ``gguf_name`` here
    data_start: int  # the first byte of the data section (the header, padded, ends there)
    size: int  # the file's size when the header was read


class _Cursor:
    """Sequential reads of a header, each checked against the file's size and the 100 MB bound (weights.hub's)."""

    def __init__(self, fh: IO[bytes], where: str, fetch: Fetch | None = None) -> None:
        self._fh, self._fetch, self.where = fh, fetch, where
        self.size, self.pos = os.fstat(fh.fileno()).st_size, 0
        self._buf, self._start = b"", 0  # _start: the file offset of _buf[0]
        # a remote file is read ahead by less: what is read past the header's end is fetched for nothing
        self._chunk = _CHUNK if fetch is None else HEADER_PROBE

    def room(self, n: int, what: str) -> None:
        """Refuse at once ``n`` bytes that the rest of the file or the bound cannot hold."""
        if n > self.size - self.pos:
            raise QKEnergyError(
                f"{self.where}: the file ends ({self.size} bytes) inside {what}; truncated, or not a GGUF file"
            )
        if n > MAX_HEADER - self.pos:
            raise QKEnergyError(
                f"{self.where}: {what} runs past byte {MAX_HEADER}, the bound on a GGUF header (its keys "
                "and tensor table); corrupt, or not a GGUF file"
            )

    def take(self, n: int, what: str, ahead: int = 0) -> bytes:
        """The next ``n`` bytes; a refill reads at least ``ahead`` bytes (what is known to follow)."""
        self.room(n, what)
        end = self.pos + n
        if end > self._start + len(self._buf):
            keep = self._buf[self.pos - self._start :]
            want = max(n - len(keep), self._chunk, ahead)
            if self._fetch is not None:  # the bytes read next: [pos + len(keep), + want)
                self._fetch(self.pos + len(keep), min(self.pos + len(keep) + want, self.size))
            more = self._fh.read(want)
            self._buf, self._start = keep + more, self.pos
            if end > self._start + len(self._buf):
                raise QKEnergyError(f"{self.where}: file shrank while its header was read")
        out = self._buf[self.pos - self._start : end - self._start]
        self.pos = end
        return out

    def skip(self, n: int, what: str) -> None:
        self.room(n, what)
        self.pos += n
        if self.pos > self._start + len(self._buf):
            self._fh.seek(self.pos)
            self._buf, self._start = b"", self.pos

    def scalar(self, code: int, what: str, ahead: int = 0) -> Any:
        fmt = _SCALARS[code][1]
        (value,) = struct.unpack(fmt, self.take(struct.calcsize(fmt), what, ahead))
        if code == _BOOL and value > 1:
            raise QKEnergyError(f"{self.where}: {what} is a bool holding {value}; expected 0 or 1")
        return bool(value) if code == _BOOL else value

    def string(self, what: str, keep: bool = True, ahead: int = 0) -> str:
        """A u64 length and that many bytes of UTF-8; skipped (returned as "") unless ``keep``."""
        n = self.scalar(10, f"the length of {what}", ahead)
        if n > MAX_STRING:
            raise QKEnergyError(
                f"{self.where}: {what} claims {n} bytes of text (at most {MAX_STRING}); corrupt, or not a GGUF file"
            )
        if not keep:
            self.skip(n, what)
            return ""
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise QKEnergyError(f"{self.where}: {what} is not UTF-8 text") from None

    def value(self, code: int, what: str, depth: int = 0, keep: bool = True) -> Any:
        """A value of type ``code``; an array longer than KEEP_ITEMS, or any array unless ``keep``, as GGUFArray."""
        if code in _SCALARS:
            return self.scalar(code, what)
        if code == _STRING:
            return self.string(what)
        if code != _ARRAY:
            raise QKEnergyError(f"{self.where}: {what} has value type {code}; expected 0 to 12")
        if depth >= MAX_NESTING:
            raise QKEnergyError(f"{self.where}: {what} nests arrays more than {MAX_NESTING} deep")
        item = self.scalar(4, f"the item type of {what}")
        count = self.scalar(10, f"the length of {what}")
        keep = keep and count <= KEEP_ITEMS
        if item in _SCALARS:
            name, fmt = _SCALARS[item]
            width = struct.calcsize(fmt)
            self.room(count * width, f"{what} ({count} {name} items, {count * width} bytes)")
            if not keep:
                self.skip(count * width, what)
                return GGUFArray(name, count)
            items = struct.unpack(f"<{count}{fmt[1]}", self.take(count * width, what))
            return tuple(bool(v) for v in items) if item == _BOOL else items
        if item not in (_STRING, _ARRAY):
            raise QKEnergyError(f"{self.where}: {what} has item type {item}; expected 0 to 12")
        # each string or array takes at least its u64 length: a bound before the walk
        self.room(count * 8, f"{what} ({count} items, at least {count * 8} bytes)")
        if keep:
            return tuple(self.value(item, f"item {k} of {what}", depth + 1) for k in range(count))
        # walked to the next key, read ahead by up to _WALK bytes: what is known to follow
        for k in range(count):
            if item == _STRING:
                self.string(f"item {k} of {what}", keep=False, ahead=min(8 * (count - k), _WALK))
            else:
                self.value(item, f"item {k} of {what}", depth + 1, keep=False)
        return GGUFArray("string" if item == _STRING else "array", count)


def _preamble(cur: _Cursor) -> tuple[int, int, int]:
    """The version, tensor count and key count, checked."""
    if cur.take(4, "the magic") != GGUF_MAGIC:
        raise QKEnergyError(f"{cur.where}: does not start with the GGUF magic; not a GGUF file")
    version = cur.scalar(4, "the version")
    if version & 0xFFFF == 0 and version:
        raise QKEnergyError(f"{cur.where}: a big-endian GGUF file; only little-endian files are read")
    if version not in VERSIONS:
        raise QKEnergyError(
            f"{cur.where}: GGUF version {version}; this reader knows versions "
            f"{', '.join(map(str, VERSIONS))} (reconvert with a current llama.cpp)"
        )
    n_tensors, n_keys = cur.scalar(10, "the tensor count"), cur.scalar(10, "the key count")
    # Each key and tensor entry is read before the next, so a truncated file stops at the
    # first one it cuts (named in the error); only counts no real file has are refused here.
    if n_keys > MAX_ENTRIES or n_tensors > MAX_ENTRIES:
        raise QKEnergyError(
            f"{cur.where}: header claims {n_keys} keys and {n_tensors} tensors (at most "
            f"{MAX_ENTRIES} each); corrupt, or not a GGUF file"
        )
    return version, n_tensors, n_keys


def _read_fields(cur: _Cursor, n_keys: int) -> tuple[dict[str, Any], int]:
    """The key-value metadata (arrays of unused keys skipped by length) and the alignment."""
    fields: dict[str, Any] = {}
    for k in range(n_keys):
        key = cur.string(f"the name of key {k}")
        code = cur.scalar(4, f"the value type of key {show_name(key)}")
        if key in fields:
            raise QKEnergyError(f"{cur.where}: key {show_name(key)} appears twice")
        fields[key] = cur.value(code, f"key {show_name(key)}", keep=not key.startswith(_UNUSED_ARRAYS))
    alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):  # a bool is no alignment
        raise QKEnergyError(f"{cur.where}: key 'general.alignment' is {alignment!r}; expected a power of two")
    return fields, alignment


def _read_table(cur: _Cursor, n_tensors: int) -> dict[str, _Entry]:
    """The tensor table as read: name -> (dims innermost first, ggml type, data offset), in file order."""
    entries: dict[str, _Entry] = {}
    for t in range(n_tensors):
        name = cur.string(f"the name of tensor {t}")
        what = f"tensor {show_name(name)}"
        if name in entries:
            raise QKEnergyError(f"{cur.where}: {what} appears twice in the tensor table")
        axes = cur.scalar(4, f"the axis count of {what}")
        if not 1 <= axes <= MAX_AXES:
            raise QKEnergyError(f"{cur.where}: {what} has {axes} axes; expected 1 to {MAX_AXES}")
        dims = [cur.scalar(10, f"the shape of {what}") for _ in range(axes)]
        code = cur.scalar(4, f"the type of {what}")
        offset = cur.scalar(10, f"the offset of {what}")
        entries[name] = (dims, code, offset)
    return entries


def _tensor_info(where: str, name: str, entry: _Entry, layout: tuple[int, int, int]) -> GGUFTensorInfo:
    """One table entry checked: a known ggml type, whole blocks, aligned data inside the file."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    (dims, code, offset), (data_start, alignment, size) = entry, layout
    what = f"{where}: tensor {show_name(name)}"
    try:
        qtype = GGMLQuantizationType(code)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise QKEnergyError(
            f"{what} has ggml type {code}, which the installed gguf package does not know (pip install -U gguf)"
        ) from None
    if any(d <= 0 for d in dims) or dims[0] % block:
        shown = ", ".join(map(str, dims))
        raise QKEnergyError(
            f"{what} has shape [{shown}] (innermost first); expected positive sizes, the innermost "
            f"a multiple of {qtype.name}'s block of {block}"
        )
    nbytes = math.prod(dims) // block * block_bytes  # at most 4 factors below 2^64
    begin = data_start + offset
    if offset % alignment:
        raise QKEnergyError(f"{what}: data offset {offset} is not a multiple of the alignment {alignment}")
    if begin + nbytes > size:
        raise QKEnergyError(
            f"{what}: its {nbytes} bytes at data offset {offset} (file offset {begin}: the tensor table counts "
            f"from the data section, which starts at byte {data_start}) run past the end of the "
            f"{size}-byte file, which would need {begin + nbytes} bytes; truncated"
        )
    shape = tuple(int(d) for d in reversed(dims))
    return GGUFTensorInfo(name, name, qtype.name, int(code), shape, begin, begin + nbytes)


def read_header(path: Path, fetch: Fetch | None = None) -> GGUFHeader:
    """The version, metadata and tensor table of a GGUF file, each entry checked; one-line errors.

    Parameters
    ----------
    path : pathlib.Path
        The GGUF file.
    fetch : callable or None, optional
        ``fetch(begin, end)`` before each read: the file is a remote file's sparse mirror.

    Returns
    -------
    GGUFHeader

    Raises
    ------
    QKEnergyError
        Not a regular little-endian GGUF file of a known version, or a truncated or
        inconsistent header (counts, types, alignment, tensor offsets, sizes past
        the file or its first 100 MB).
    """
    where = show_path(path)
    try:
        with open_regular(path, where) as fh:
            cur = _Cursor(fh, where, fetch)
            version, n_tensors, n_keys = _preamble(cur)
            fields, alignment = _read_fields(cur, n_keys)
            entries = _read_table(cur, n_tensors)
    except OSError as exc:
        raise QKEnergyError(f"{where}: cannot read: {exc.strerror or exc}") from None
    data_start = -(-cur.pos // alignment) * alignment
    layout = (data_start, alignment, cur.size)
    tensors = [_tensor_info(where, name, entry, layout) for name, entry in entries.items()]
    for a, b in itertools.pairwise(sorted((i for i in tensors if i.end > i.begin), key=lambda i: i.begin)):
        if b.begin < a.end:
            raise QKEnergyError(
                f"{where}: tensors {show_name(a.gguf_name)} and {show_name(b.gguf_name)} overlap in the data section"
            )
    return GGUFHeader(int(version), fields, tensors, data_start, cur.size)


class GGUFFile(SafetensorsFile):
    """One GGUF file: header validated on open, each tensor read (checked ``preadv``) and dequantised on demand.

    ``names`` maps file names to the names tensors are read under (those not in
    it keep their own), e.g. llama.cpp's ``blk.0.attn_q.weight`` to the Hugging
    Face ``model.layers.0.self_attn.q_proj.weight`` that the layouts name.
    Plain types (F32, F16, BF16, ...) come back as stored; the others
    dequantised to float32 by the ``gguf`` package.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    header : GGUFHeader
        Its header (from :func:`read_header`).
    names : dict of str to str
        GGUF name -> the name the tensor is read under.
    fetch : callable or None, optional
        As for :class:`~qkenergy.weights.safetensors_io.SafetensorsFile`: a remote file's mirror.

    Raises
    ------
    QKEnergyError
        Two tensors would be read under the same name.
    """

    _index: dict[str, GGUFTensorInfo]  # type: ignore[assignment]

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: GGUFHeader,
        names: dict[str, str],
        fetch: Fetch | None = None,
    ) -> None:
        self.path = Path(path)
        self.fetch = fetch
        self.metadata: dict[str, str] = {}
        self._size = header.size
        self._fd: int | None = None
        self.read_threads = 1
        self.header_end = header.data_start  # what fingerprints hash as this file's header
        self._index = {}
        for info in header.tensors:
            name = names.get(info.gguf_name, info.gguf_name)
            if name in self._index:
                raise QKEnergyError(
                    f"{show_path(self.path)}: tensors {show_name(self._index[name].gguf_name)} and "
                    f"{show_name(info.gguf_name)} would both be read as {show_name(name)}"
                )
            self._index[name] = dataclasses.replace(info, name=name)

    def info(self, name: str) -> GGUFTensorInfo:  # type: ignore[override]
        return super().info(name)  # type: ignore[return-value]

    def tensor(self, name: str) -> np.ndarray:
        """Read-only array of tensor ``name``: as stored for plain types, else dequantised to float32."""
        info = self.info(name)
        where = f"{show_path(self.path)}: tensor {show_name(info.gguf_name)}"
        out_bytes = math.prod(info.shape) * info.np_dtype.itemsize
        check_memory(max(out_bytes, info.end - info.begin), where)
        raw = np.empty(info.end - info.begin, np.uint8)
        if info.end > info.begin:
            self._read_into(raw, info.begin, info.gguf_name)
        out = _dequantize(raw, info, where) if info.quantized else raw.view(info.np_dtype).reshape(info.shape)
        out.flags.writeable = False
        return out

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, {len(self)} tensors)"


class GGUFTensors(TensorSource):
    """The tensors of a GGUF model (one file, or the parts of a split one).

    Parameters
    ----------
    files : iterable of GGUFFile
        The file, or each part of a split model.

    Raises
    ------
    QKEnergyError
        A tensor name appears in two parts, or no file is given.
    """

    def quantization_of(self, name: str) -> str:
        """How tensor ``name`` is stored, for the heads read from it: "GGUF Q4_1", ...; "" for plain types."""
        info = self.file_of(name).info(name)
        return f"GGUF {info.dtype}" if isinstance(info, GGUFTensorInfo) and info.quantized else ""


def _dequantize(raw: np.ndarray, info: GGUFTensorInfo, where: str) -> np.ndarray:
    """The float32 values of a block-quantised tensor, by the gguf package's numpy dequantisation."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    qtype = GGMLQuantizationType(info.type_code)
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    rows = info.shape[:-1]
    try:
        # A block whose float16 scale is inf or NaN decodes to non-finite weights; the analysis
        # names such a block and its heads (weights.finite), so numpy's warnings are not wanted.
        with np.errstate(all="ignore"):
            values = dequantize(raw.reshape(*rows, info.shape[-1] // block * block_bytes), qtype)
    except NotImplementedError:
        raise QKEnergyError(
            f"{where} is stored as {info.dtype}, which the installed gguf package cannot dequantise "
            "(pip install -U gguf)"
        ) from None
    return np.asarray(values, dtype=np.float32).reshape(info.shape)


def gguf_files(root: Path) -> list[Path]:
    """The GGUF files of a directory: its ``*.gguf``, else the GGUF blobs of an ollama ``blobs`` folder.

    Parameters
    ----------
    root : pathlib.Path
        The directory.

    Returns
    -------
    list of pathlib.Path
        Sorted; empty when there is none.
    """
    found = sorted(p for p in root.glob("*.gguf") if p.is_file())
    return found or [p for p in sorted(root.glob("sha256-*")) if p.is_file() and is_gguf(p)]


def _split_parts(path: Path) -> tuple[str, int, int] | None:
    """(prefix, part, count) of a split file named as llama.cpp's gguf-split names them, else None."""
    match = _SPLIT_NAME.match(path.name)
    return None if match is None else (match[1], int(match[2]), int(match[3]))


def one_gguf(root: Path, found: list[Path]) -> Path:
    """The one GGUF file of a directory (or the first part of one split model), or a one-line error.

    Parameters
    ----------
    root : pathlib.Path
        The directory (for the message).
    found : list of pathlib.Path
        Its GGUF files (from :func:`gguf_files`), sorted.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    QKEnergyError
        Several GGUF files that are not the parts of one split model.
    """
    named = [parts for parts in map(_split_parts, found) if parts is not None]
    if len(found) == 1 or (
        len(named) == len(found) and len({(p[0], p[2]) for p in named}) == 1 and named[0][2] == len(found)
    ):
        return found[0]
    listed = ", ".join(p.name for p in found[:4]) + (", ..." if len(found) > 4 else "")
    raise QKEnergyError(f"{show_path(root)}: {len(found)} GGUF files ({listed}); pass one of them")


def split_files(path: Path, header: GGUFHeader) -> list[Path]:
    """Every part of a model split by llama.cpp's gguf-split (``split.count`` > 1), in order; else [path].

    The metadata lives in the first part: a later part given is read from the first.

    Parameters
    ----------
    path : pathlib.Path
        The file given.
    header : GGUFHeader
        Its header (its ``split.count``).

    Returns
    -------
    list of pathlib.Path

    Raises
    ------
    QKEnergyError
        A part not named as gguf-split names them, or a part missing.
    """
    count = header.fields.get("split.count", 1)
    if count == 1:
        return [path]
    parts = _split_parts(path)
    where = show_path(path)
    if not isinstance(count, int) or parts is None or parts[2] != count:
        raise QKEnergyError(
            f"{where}: part of a split model (split.count = {count!r}) but not named "
            "NAME-0000k-of-0000n.gguf; pass the first part, named as gguf-split names them"
        )
    files = [path.with_name(f"{parts[0]}-{k:05d}-of-{count:05d}.gguf") for k in range(1, count + 1)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise QKEnergyError(f"{where}: part {missing[0]} of this {count}-part model is missing")
    return files
