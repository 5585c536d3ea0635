"""What a quantisation method is (parse, stored parts, dequantise), its validated settings, the registry,
and the tensor source whose quantised weights read dequantised through it.

A method is one :class:`QuantMethod` subclass, registered once with
:func:`register` (the package's ``__init__`` registers the methods read here):
its ``name`` is the ``quant_method`` of config.json, :meth:`QuantMethod.parse`
turns the ``quantization_config`` into a frozen :class:`Quantization`, its
``storages`` say which stored parts hold a weight (:class:`Storage`: the tensor
names beside ``<module>``), and :meth:`QuantMethod.shape` /
:meth:`QuantMethod.dequantize` read one weight from them (a
:class:`StoredWeight`: checked reads of its parts).

:class:`QuantizedTensors` sees how a weight is stored from the tensors beside
it, and reads it through the checkpoint's :class:`Quantization`: its method
must read that storage. Modules that the config leaves unquantised are stored
as plain float weights and read as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError, check_memory
from qkenergy.weights.quantization.grids import FLOAT_CODES, dtype_code

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.weights.quantization.compressed_tensors import Scheme

__all__ = [
    "METHODS",
    "PACKED",
    "QWEIGHT",
    "SCALED",
    "STORAGES",
    "QuantMethod",
    "Quantization",
    "QuantizedTensors",
    "Storage",
    "StoredWeight",
    "as_grid",
    "check_float8",
    "quantized_tensors",
    "register",
    "stored_quantization",
]


@dataclass(frozen=True)
class Storage:
    """How a quantised weight lies in a checkpoint: the tensors ``<module>.<part>`` that hold it.

    Parameters
    ----------
    name : str
        The storage's name ("qweight", "packed", "scaled").
    parts : tuple of str
        Every part it may have, in the order the fingerprints hash them.
    marker : str or None
        The part stored instead of ``<module>.weight`` (the weight is read under that name);
        None: ``<module>.weight`` itself is stored, in float8 or int8, with a scale beside it.
    """

    name: str
    parts: tuple[str, ...]
    marker: str | None = None


QWEIGHT = Storage("qweight", ("qweight", "qzeros", "scales", "g_idx"), "qweight")
"""GPTQ, AWQ: 32-bit words packing the integers, zero points, scales, groups."""
PACKED = Storage(
    "packed",
    ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx"),
    "weight_packed",
)
"""compressed-tensors pack-quantized: int32 words packing the integers."""
SCALED = Storage(
    "scaled", ("weight", "weight_scale_inv", "weight_scale", "weight_zero_point", "weight_g_idx")
)
"""A float8 / int8 weight with scales beside it (FP8, compressed-tensors float / int)."""
STORAGES: dict[str, Storage] = {s.name: s for s in (QWEIGHT, PACKED, SCALED)}
"""Every storage a registered method reads, by name (a new method's storage is added on registration)."""
SCALE_PARTS = ("weight_scale_inv", "weight_scale")
"""The parts beside a stored ``weight`` that make it a SCALED one."""
SCALED_CODES = ("F8_E4M3", "F8_E5M2", "I8")
"""The dtypes of a SCALED weight."""


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's ``quantization_config``, validated: how its quantised weights are stored.

    Parameters
    ----------
    method : str
        The registered method's name (a key of :data:`METHODS`).
    format : str
        fp8: e4m3; gptq: gptq or gptq_v2; awq: gemm; compressed-tensors: the global format.
    bits : int
        Bits per stored weight.
    where : str
        The config file, for messages.
    group_size : int or None
        GPTQ, AWQ: input columns per scale (-1: one group per column).
    block_size : (int, int) or None
        fp8: the block each scale covers; None: one scale per tensor.
    desc_act : bool
        GPTQ act-order (a ``g_idx`` gives each column's group).
    symmetric : bool or None
        Whether the zero point is fixed; None when the method does not say.
    ignore : tuple of str
        Modules the config leaves unquantised.
    schemes : tuple of Scheme
        compressed-tensors: its config groups.
    """

    method: str  # a key of METHODS
    format: str  # fp8: e4m3; gptq: gptq or gptq_v2; awq: gemm; compressed-tensors: the global format
    bits: int
    where: str  # the config file, for messages
    group_size: int | None = None  # gptq, awq (-1: one group per column)
    block_size: tuple[int, int] | None = None  # fp8 (None: one scale per tensor)
    desc_act: bool = False  # gptq act-order
    symmetric: bool | None = None
    ignore: tuple[str, ...] = ()  # modules the config leaves unquantised
    schemes: tuple[Scheme, ...] = ()  # compressed-tensors config groups

    @property
    def rule(self) -> QuantMethod:
        """The registered method that reads these weights."""
        return METHODS[self.method]

    def label(self) -> str:
        """The method in a table cell (compressed-tensors: see Scheme.label).

        Returns
        -------
        str
        """
        return self.rule.label(self)

    def settings(self) -> dict[str, Any]:
        """What the analysis settings record (method, format, bits, group or block size, ...).

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {
            "method": self.method,
            "format": self.format,
            "bits": self.bits,
            "group_size": self.group_size,
            "block_size": None if self.block_size is None else list(self.block_size),
            "desc_act": self.desc_act,
            "symmetric": self.symmetric,
            "ignore": list(self.ignore),
            "config": self.where,
        }
        if self.schemes:
            out["schemes"] = [s.settings() for s in self.schemes]
        return out


class QuantMethod:
    """One quantisation method: its config parsed, the parts it stores, a weight dequantised from them.

    Subclasses set ``name`` (the ``quant_method``), ``storages`` and ``needs`` and implement
    :meth:`parse`, :meth:`label` and :meth:`dequantize`; :func:`register` makes them read.
    """

    name: ClassVar[str]
    """The ``quant_method`` of config.json (lower case)."""
    storages: ClassVar[tuple[Storage, ...]]
    """How its weights may be stored."""
    needs: ClassVar[str]
    """What it stores for a weight, in messages ("qweight, qzeros and scales")."""

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        """The validated settings of a ``quantization_config`` naming this method.

        Parameters
        ----------
        raw : mapping
            The ``quantization_config`` object.
        where : str
            The config file and key, for messages.

        Returns
        -------
        Quantization
        """
        raise NotImplementedError

    def label(self, q: Quantization) -> str:
        """The method in a table cell ("fp8 e4m3 block 128x128").

        Parameters
        ----------
        q : Quantization
            The checkpoint's settings.

        Returns
        -------
        str
        """
        raise NotImplementedError

    def module_label(self, q: Quantization, module: str) -> str:
        """The ``quantization`` cell of one quantised module ("" when none applies): :meth:`label` by default.

        Parameters
        ----------
        q : Quantization
            The checkpoint's settings.
        module : str
            The module (the weight's name without ``.weight``).

        Returns
        -------
        str
        """
        return self.label(q)

    def prepare(self, weight: StoredWeight) -> None:
        """Checks of one module's settings when its weight is opened (none by default).

        Parameters
        ----------
        weight : StoredWeight
            The weight being opened.
        """

    def shape(self, weight: StoredWeight) -> tuple[int, int]:
        """(out, in) of a weight from the shapes of its parts (no weight bytes read).

        The default reads a SCALED weight: the stored ``weight`` must be 2-D.

        Parameters
        ----------
        weight : StoredWeight
            The weight.

        Returns
        -------
        (int, int)
        """
        stored = weight.stored_shape("weight")
        if len(stored) != 2:
            raise QKEnergyError(f"{weight.where}: a quantised weight must be 2-D, got shape {list(stored)}")
        return int(stored[0]), int(stored[1])

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        """The float32 weight [rows, cols] from its checked parts.

        Parameters
        ----------
        weight : StoredWeight
            The weight.
        rows, cols : int
            Its shape, from :meth:`shape`.

        Returns
        -------
        ndarray
        """
        raise NotImplementedError


METHODS: dict[str, QuantMethod] = {}
"""The registered methods by ``quant_method``, in the order messages list them."""


def register(method: QuantMethod) -> QuantMethod:
    """Make ``method`` read: its ``name`` in :data:`METHODS`, its storages in :data:`STORAGES`.

    Parameters
    ----------
    method : QuantMethod
        The method.

    Returns
    -------
    QuantMethod
        ``method``.
    """
    if method.name in METHODS:
        raise ValueError(f"quantisation method {method.name!r} is registered twice")
    for storage in method.storages:
        STORAGES.setdefault(storage.name, storage)
    METHODS[method.name] = method
    return method


class StoredWeight:
    """One quantised weight of a :class:`QuantizedTensors`: checked reads of its stored parts.

    Parameters
    ----------
    source : QuantizedTensors
        The tensor source.
    module : str
        The weight's module (its name without ``.weight``).
    kind : str
        Its storage's name.
    """

    def __init__(self, source: QuantizedTensors, module: str, kind: str) -> None:
        self.source = source
        self.module = module
        self.kind = kind
        q = source.quantization
        assert q is not None
        self.q = q
        self.scheme: Scheme | None = None  # compressed-tensors: the config group of this module
        q.rule.prepare(self)

    @property
    def where(self) -> str:
        """The weight, in messages."""
        return f"{self.source.location}: {show_name(self.module + '.weight')}"

    def name(self, part: str, *, required: bool = True) -> str | None:
        """The stored tensor of ``part`` (None, or one line when ``required``, if absent)."""
        name = f"{self.module}.{part}"
        if name in self.source._stored:
            return name
        if required:
            held = ", ".join(p.rpartition(".")[2] for p in self.source.stored_names(self.module + ".weight"))
            raise QKEnergyError(
                f"{self.where}: missing tensor {show_name(name)}; the checkpoint holds {held} of this "
                f"weight, and {self.q.method} stores {self.q.rule.needs}"
            )
        return None

    def stored_shape(self, part: str) -> tuple[int, ...]:
        """The stored shape of a part that must be there."""
        name = self.name(part)
        assert name is not None
        return tuple(self.source.inner.shape(name))

    def read(self, part: str, kinds: str, *, required: bool = True) -> np.ndarray | None:
        """A part's array, checked to have a float dtype (``kinds`` "f"), an integer one ("iu"),
        either ("fiu"), or to be 32-bit packed words ("w": I32 or U32).

        Parameters
        ----------
        part : str
            The part.
        kinds : str
            The dtypes accepted.
        required : bool
            Whether its absence is an error (else None).

        Returns
        -------
        ndarray or None
        """
        name = self.name(part, required=required)
        if name is None:
            return None
        array: np.ndarray = self.source.inner.tensor(name)
        code = dtype_code(array.dtype)
        if kinds == "w":
            ok, expected = code in ("I32", "U32"), "I32 (packed words)"
        else:
            ok = array.dtype.kind in kinds.replace("f", "") or ("f" in kinds and code in FLOAT_CODES)
            expected = {"f": "a float dtype", "iu": "an integer dtype"}.get(kinds, "a float or integer dtype")
        if not ok:
            raise QKEnergyError(
                f"{self.source.location}: tensor {show_name(name)} has dtype {code}; expected {expected}"
            )
        return array

    def expect(self, part: str, shape: tuple[int, ...], got: tuple[int, ...], what: str) -> None:
        """One line unless part ``part`` has shape ``shape`` (``got``); ``what`` says why."""
        if tuple(got) != tuple(shape):
            raise QKEnergyError(
                f"{self.source.location}: tensor {show_name(self.module + '.' + part)} has shape "
                f"{list(got)}, expected {list(shape)} ({what})"
            )

    def groups(self, g_idx: np.ndarray | None, cols: int, groups: int, part: str) -> np.ndarray | None:
        """A per-column group index checked against ``groups`` groups (None passes through)."""
        if g_idx is None:
            return None
        self.expect(part, (cols,), g_idx.shape, "one group per input column")
        g = g_idx.astype(np.int64)
        if g.size and (g.min() < 0 or g.max() >= groups):
            raise QKEnergyError(
                f"{self.source.location}: tensor {show_name(self.module + '.' + part)} names groups "
                f"outside 0..{groups - 1}"
            )
        return g


def as_grid(array: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """A scale or zero point stored as a scalar, a vector or (R, C), as the (R, C) grid when it fits.

    Parameters
    ----------
    array : ndarray
        The stored scales or zero points.
    grid : (int, int)
        The grid expected.

    Returns
    -------
    ndarray
    """
    if array.size == grid[0] * grid[1] and array.ndim <= 1:
        return array.reshape(grid)
    return array


def check_float8(dtype: np.dtype, weight: StoredWeight) -> None:
    """One line unless ``dtype`` is float8 (e4m3 or e5m2).

    Parameters
    ----------
    dtype : numpy.dtype
        The stored weight's dtype.
    weight : StoredWeight
        The weight, for messages.
    """
    code = dtype_code(dtype)
    if code not in ("F8_E4M3", "F8_E5M2"):
        raise QKEnergyError(f"{weight.where}: stored as {code}; expected float8 (F8_E4M3 or F8_E5M2)")


class QuantizedTensors:
    """A tensor source whose quantised linear weights read as dequantised float32 ``<module>.weight``.

    Wraps a :class:`~qkenergy.weights.safetensors_io.TensorSource` (or any reader
    with ``names``, ``shape``, ``dtype``, ``tensor``). A module's weight is
    quantised when its stored parts say so: ``qweight`` (GPTQ, AWQ),
    ``weight_packed`` (compressed-tensors), or a float8 / int8 ``weight`` with a
    scale beside it; the name ``<module>.weight`` the layouts ask for then reads
    as the dequantised float32 array. Every other tensor, and a module stored in
    floats (left unquantised by the config), reads as stored. The parts are read
    (checked reads) only when the weight is; :meth:`stored_names` names them
    (the fingerprints hash their bytes). With ``quantization`` None (a config
    without quantization_config) a quantised weight is one error line.

    Parameters
    ----------
    inner : object
        The wrapped reader (``names``, ``shape``, ``dtype``, ``tensor``).
    quantization : Quantization or None
        The checkpoint's settings; None for a config without quantization_config.
    config : str
        The config file, for messages.
    """

    def __init__(self, inner: Any, quantization: Quantization | None, config: str) -> None:
        self.inner = inner
        self.quantization = quantization
        self.config = config  # the config file, for messages
        stored = list(inner.names)
        self._stored = set(stored)
        # <module>.weight -> its storage's name, for weights stored without one (a marker part instead)
        self._virtual: dict[str, str] = {}
        markers = {s.marker: s.name for s in STORAGES.values() if s.marker is not None}
        for name in stored:
            module, _, part = name.rpartition(".")
            if part in markers and module + ".weight" not in self._stored:
                kind = next(k for m, k in markers.items() if f"{module}.{m}" in self._stored)
                self._virtual.setdefault(module + ".weight", kind)
        self._names = stored + list(self._virtual)

    @property
    def names(self) -> Collection[str]:
        return self._names

    def __contains__(self, name: object) -> bool:
        return name in self._virtual or name in self._stored

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    @property
    def location(self) -> str:
        """How messages name the checkpoint (that of the wrapped source)."""
        return str(getattr(self.inner, "location", "the checkpoint"))

    def __getattr__(self, name: str) -> Any:
        # files, file_of, split_reads, release, close, ...: the wrapped source's
        if name in ("inner", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def storage(self, name: str) -> str | None:
        """How tensor ``name`` is stored: "qweight", "packed", "scaled", or None (as it reads)."""
        if name in self._virtual:
            return self._virtual[name]
        if not name.endswith(".weight") or name not in self._stored:
            return None
        module = name[: -len(".weight")]
        if not any(f"{module}.{s}" in self._stored for s in SCALE_PARTS):
            return None
        return SCALED.name if dtype_code(self.inner.dtype(name)) in SCALED_CODES else None

    def stored_names(self, name: str) -> list[str]:
        """The stored tensors that ``name`` is read from: its parts when dequantised, else itself."""
        kind = self.storage(name)
        if kind is None:
            return [name]
        module = name[: -len(".weight")]
        return [p for p in (f"{module}.{s}" for s in STORAGES[kind].parts) if p in self._stored]

    def quantization_of(self, name: str) -> str:
        """The quantisation of tensor ``name`` for a table cell: its label, "" when read as stored."""
        if self.storage(name) is None or self.quantization is None:
            return ""
        return self.quantization.rule.module_label(self.quantization, name[: -len(".weight")])

    def shape(self, name: str) -> tuple[int, ...]:
        kind = self._checked(name)
        if kind is None:
            return tuple(self.inner.shape(name))
        weight = StoredWeight(self, name[: -len(".weight")], kind)
        return weight.q.rule.shape(weight)

    def dtype(self, name: str) -> np.dtype:
        if self._checked(name) is None:
            dtype: np.dtype = self.inner.dtype(name)
            return dtype
        return np.dtype(np.float32)

    def tensor(self, name: str) -> np.ndarray:
        """Read-only array of ``name``: dequantised float32 for a quantised weight, else as stored."""
        kind = self._checked(name)
        if kind is None:
            array: np.ndarray = self.inner.tensor(name)
            return array
        weight = StoredWeight(self, name[: -len(".weight")], kind)
        rows, cols = weight.q.rule.shape(weight)
        check_memory(8 * rows * cols, f"{self.location}: dequantised tensor {show_name(name)}")
        out = weight.q.rule.dequantize(weight, rows, cols)
        out.flags.writeable = False
        return out

    def prefetch(self, names: Iterable[str]) -> None:
        """Read the stored tensors behind ``names`` into the page cache (TensorSource.prefetch)."""
        fetch = getattr(self.inner, "prefetch", None)
        if fetch is not None:
            fetch([p for n in names for p in self.stored_names(n)])

    def _checked(self, name: str) -> str | None:
        """storage(name), with one error line when the config does not say how to read it."""
        kind = self.storage(name)
        if kind is None:
            return None
        parts = ", ".join(p.rpartition(".")[2] for p in self.stored_names(name))
        q = self.quantization
        if q is None:
            raise QKEnergyError(
                f"{self.location}: tensor {show_name(name)} is stored quantised ({parts}) but "
                f"{self.config} has no quantization_config saying how; add the checkpoint's own "
                "quantization_config (its quantize_config.json for old GPTQ exports)"
            )
        if kind not in (s.name for s in q.rule.storages):
            raise QKEnergyError(
                f"{self.location}: tensor {show_name(name)} is stored as {parts}, not as "
                f"{q.method} stores a weight ({q.rule.needs}; {self.config})"
            )
        return kind

    def __repr__(self) -> str:
        label = "no quantization_config" if self.quantization is None else self.quantization.label()
        return f"QuantizedTensors({label!r}, {self.inner!r})"


def quantized_tensors(
    tensors: Any, quantization: Quantization | None, config: str
) -> tuple[Any, dict[str, Any]]:
    """``tensors`` read through the checkpoint's quantisation, and the facts for the analysis settings.

    ``quantization``: :func:`parse_quantization` of the config (``config``: the
    file, for messages). A plain checkpoint comes back as it is, without notes.
    The wrapper is installed whenever the config has a quantization_config or
    the tensors hold quantised parts, so that a weight stored quantised under a
    config that does not say so is one error line, not integers read as weights.

    Parameters
    ----------
    tensors : object
        The checkpoint's tensor reader.
    quantization : Quantization or None
        The checkpoint's settings, from :func:`parse_quantization`.
    config : str
        The config file, for messages.

    Returns
    -------
    tensors : object
        ``tensors`` itself, or a :class:`QuantizedTensors` over it.
    notes : dict
        ``{"quantization": ...}`` (the settings) when the config has some, else empty.
    """
    wrapped = QuantizedTensors(tensors, quantization, config)
    if quantization is None and not any(wrapped.storage(name) for name in wrapped.names):
        return tensors, {}
    notes = {} if quantization is None else {"quantization": quantization.settings()}
    return wrapped, notes


def stored_quantization(tensors: Any, names: Iterable[str]) -> str:
    """The ``quantization`` cell of the heads read from ``names``: their labels, "" for plain weights.

    Parameters
    ----------
    tensors : object
        The tensor reader (its ``quantization_of``, where it has one).
    names : iterable of str
        The tensors the heads are read from.

    Returns
    -------
    str
        The distinct labels joined by " + ".
    """
    label = getattr(tensors, "quantization_of", None)
    if label is None:
        return ""
    return " + ".join(dict.fromkeys(text for name in names if (text := label(name))))
