"""A tensor source whose quantised weights read dequantised, through the registered methods.

How a weight is stored is seen from the tensors beside it (the storages of
:mod:`~qkenergy.weights.quantization.method`), how to read it from the
checkpoint's :class:`~qkenergy.weights.quantization.method.Quantization`: its
method must read that storage. Modules that the config leaves unquantised are
stored as plain float weights and read as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

import numpy as np

from qkenergy.base.display import show_name
from qkenergy.base.errors import QKEnergyError, check_memory
from qkenergy.weights.quantization.grids import dtype_code
from qkenergy.weights.quantization.method import (
    SCALE_PARTS,
    SCALED,
    SCALED_CODES,
    STORAGES,
    Quantization,
    StoredWeight,
)

__all__ = ["QuantizedTensors", "quantized_tensors", "stored_quantization"]


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
