"""What a quantisation method is (parse, stored parts, dequantise), its validated settings, and the registry.

A method is one :class:`QuantMethod` subclass, registered once with
:func:`register` (the package's ``__init__`` registers the methods read here):
its ``name`` is the ``quant_method`` of config.json, :meth:`QuantMethod.parse`
turns the ``quantization_config`` into a frozen :class:`Quantization`, its
``storages`` say which stored parts hold a weight (:class:`Storage`: the tensor
names beside ``<module>``), and :meth:`QuantMethod.shape` /
:meth:`QuantMethod.dequantize` read one weight from them (a
:class:`StoredWeight`: checked reads of its parts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.quantization.grids import FLOAT_CODES, dtype_code

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.weights.quantization.compressed_tensors import Scheme
    from qkenergy.weights.quantization.tensors import QuantizedTensors

__all__ = [
    "METHODS",
    "PACKED",
    "QWEIGHT",
    "SCALED",
    "STORAGES",
    "QuantMethod",
    "Quantization",
    "Storage",
    "StoredWeight",
    "as_grid",
    "check_float8",
    "register",
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
