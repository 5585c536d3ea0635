"""Non-finite weights: which heads they reach, and where they lie in the files, in the files' own terms.

A NaN or an infinity in a weight, a scale or a norm gain that enters a head's form makes
the head's statistics undefined. The analysis notices such heads for free (the Gram route
marks a head whose weights are not finite, :data:`qkenergy.math.statistics.REASON_NON_FINITE`);
only then is the layer read again here to say where the value lies: the file, the stored
tensor, the element (a float8 weight's byte), the block whose scale it is (FP8 block scales,
GPTQ / AWQ / compressed-tensors group scales) or the GGUF block whose float16 scale is not
finite. With several tensors at fault each is charged with exactly the heads it reaches: the
layer is read once more with the other tensors' non-finite values zeroed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.small_floats import as_float
from qkenergy.weights.architecture import Architecture
from qkenergy.weights.reading import LayerWeights, _where, read_layer

__all__ = [
    "Finding",
    "NonFiniteWeights",
    "bad_heads",
    "heads_text",
    "locate_nonfinite",
    "nonfinite_error",
    "nonfinite_findings",
    "skip_reason",
]


@dataclass(frozen=True)
class Finding:
    """One stored tensor with non-finite values and the query heads of its layer they reach.

    Parameters
    ----------
    text : str
        Where the first non-finite value lies: file, tensor, element or block, the value.
    heads : tuple of int
        The layer's query heads whose form it makes non-finite.
    """

    text: str
    heads: tuple[int, ...]


class NonFiniteWeights(QKEnergyError):
    """A layer's weights hold NaN or infinite values that reach heads asked for.

    Parameters
    ----------
    message : str
        The one line: file, tensor, block, layer and heads.
    layer : int
        The layer.
    stack : str
        The attention stack ("" for a single-stack model).
    heads : tuple of int
        The query heads reached.
    findings : sequence of Finding
        Every stored tensor at fault, with the heads it reaches.
    """

    def __init__(
        self,
        message: str,
        *,
        layer: int = -1,
        stack: str = "",
        heads: tuple[int, ...] = (),
        findings: Sequence[Finding] = (),
    ) -> None:
        super().__init__(message)
        self.layer = layer
        self.stack = stack
        self.heads = tuple(heads)
        self.findings = tuple(findings)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled whole (a survey's worker sends it to the client), not rebuilt from the message alone
        return (type(self), (str(self),), dict(self.__dict__))


def bad_heads(weights: LayerWeights, heads: Sequence[int] | None = None) -> np.ndarray:
    """Whether each query head's W_Q, or its key head's W_K, holds a NaN or an infinity.

    Parameters
    ----------
    weights : LayerWeights
        One layer's weights.
    heads : sequence of int, optional
        The query heads to look at (default: all; only their rows are read).

    Returns
    -------
    ndarray of bool, shape (H,) or (len(heads),)
    """

    def finite(w: np.ndarray) -> np.ndarray:
        if w.dtype.kind != "f":  # bfloat16 and float8 come as their stored bits: their values, widened
            w = as_float(w)
        out: np.ndarray = np.isfinite(w).all(axis=(1, 2))
        return out

    kv = np.asarray(weights.kv_head)
    chosen = np.arange(len(kv)) if heads is None else np.asarray(heads, dtype=np.int64)
    keys, key_of = np.unique(kv[chosen], return_inverse=True)
    query = weights.w_query if heads is None else weights.w_query[chosen]  # all heads: no copy
    out: np.ndarray = ~finite(query) | ~finite(weights.w_key[keys])[key_of]
    return out


def _value_text(value: float) -> str:
    return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _first(array: np.ndarray) -> tuple[int, tuple[int, ...], float] | None:
    """(count of non-finite values, index of the first, its value), or None when all are finite."""
    values = array if array.dtype.kind == "f" else as_float(array)
    flags = ~np.isfinite(values)
    count = int(flags.sum())
    if not count:
        return None
    flat = int(np.argmax(flags.reshape(-1)))
    index = tuple(int(i) for i in np.unravel_index(flat, values.shape))
    return count, index, float(values.reshape(-1)[flat])


def _file(tensors: Any, name: str) -> str:
    """The file holding tensor ``name`` (shards: its shard), or the checkpoint's name in memory."""
    file_of = getattr(tensors, "file_of", None)
    if file_of is not None:
        with contextlib.suppress(QKEnergyError, AttributeError):
            return show_path(file_of(name).path)
    return _where(tensors)


def _in_all(count: int) -> str:
    return f"{count} non-finite value{'s' if count != 1 else ''} in all"


# Where a GGUF block keeps its float16 scales: byte offsets in the block (negative: from its end),
# as ggml lays the block structs out (ggml-common.h); types not listed are named without them.
_GGUF_SCALES: dict[str, tuple[tuple[str, int], ...]] = {
    "Q4_0": (("d", 0),),
    "Q4_1": (("d", 0), ("m", 2)),
    "Q5_0": (("d", 0),),
    "Q5_1": (("d", 0), ("m", 2)),
    "Q8_0": (("d", 0),),
    "Q2_K": (("d", -4), ("dmin", -2)),
    "Q3_K": (("d", -2),),
    "Q4_K": (("d", 0), ("dmin", 2)),
    "Q5_K": (("d", 0), ("dmin", 2)),
    "Q6_K": (("d", -2),),
    "IQ4_NL": (("d", 0),),
    "IQ4_XS": (("d", 0),),
}


def _gguf_block(tensors: Any, name: str) -> str | None:
    """A GGUF block-quantised tensor: its first block that dequantises to a non-finite value."""
    file_of = getattr(tensors, "file_of", None)
    if file_of is None:
        return None
    try:
        file = file_of(name)
        info = file.info(name)
    except (QKEnergyError, AttributeError):
        return None
    if not getattr(info, "quantized", False) or not hasattr(info, "gguf_name"):
        return None
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(info.type_code)]
    dequantised = np.asarray(tensors.tensor(name))
    found = _first(dequantised)
    if found is None:
        return None
    _, index, value = found
    flat = int(np.ravel_multi_index(index, info.shape))
    row_length = info.shape[-1]
    number = flat // block
    row, first = divmod(number * block, row_length)
    blocks = math.prod(info.shape) // block
    bad_blocks = int((~np.isfinite(dequantised.reshape(-1, block))).any(axis=1).sum())
    where = (
        f"{show_path(file.path)}: tensor {show_name(info.gguf_name)} ({info.dtype}): block {number} of "
        f"{blocks} (row {row}, values {first}..{first + block - 1} of the row) dequantises to "
        f"{_value_text(value)}"
    )
    scales = []
    raw = np.empty(block_bytes, np.uint8)
    file._read_into(raw, info.begin + number * block_bytes, info.gguf_name)
    for field, at in _GGUF_SCALES.get(info.dtype, ()):
        start = at % block_bytes
        scale = float(raw[start : start + 2].view("<f2")[0])
        if not math.isfinite(scale):
            scales.append(f"its float16 scale {field} is {_value_text(scale)}")
    text = f"{where}{': ' + ', '.join(scales) if scales else ''}"
    return f"{text} ({bad_blocks} block{'s' if bad_blocks != 1 else ''} of {blocks} in all)"


def _part_role(part: str, weight: str, index: tuple[int, ...]) -> str:
    """What one element of a quantised weight's stored part is, in the format's terms."""
    kind = part.rpartition(".")[2]
    if kind == "scales" and len(index) == 2:  # GPTQ, AWQ: (groups, out)
        return f", the scale of group {index[0]} of output row {index[1]} of {show_name(weight)}"
    if kind in ("weight_scale_inv", "weight_scale") and len(index) == 2:
        return f", the scale of block {list(index)} of {show_name(weight)}"
    if kind in ("weight_scale_inv", "weight_scale"):
        return f", the scale of {show_name(weight)}"
    return ""


def locate_nonfinite(tensors: Any, name: str) -> str | None:
    """Where the first non-finite value behind tensor ``name`` lies, or None when there is none.

    A quantised weight is looked at in its stored parts (the float8 values, the scales), a
    GGUF block-quantised tensor block by block, any other tensor element by element.

    Parameters
    ----------
    tensors : TensorReader
        The checkpoint's tensors (a QuantizedTensors, a GGUF or safetensors source, arrays in memory).
    name : str
        The tensor as the layouts name it.

    Returns
    -------
    str or None
        "FILE: tensor NAME holds NaN at [i, j] ..." (or the GGUF block and its scale).
    """
    storage = getattr(tensors, "storage", None)
    inner: Any = getattr(tensors, "inner", None)
    quantised = storage is not None and inner is not None and storage(name) is not None
    if quantised:
        for part in tensors.stored_names(name):
            stored = inner.tensor(part)
            if stored.dtype.kind in "iub":  # packed integers, zero points: always finite
                continue
            found = _first(stored)
            if found is None:
                continue
            count, index, value = found
            byte = ""
            if stored.dtype.itemsize == 1:  # float8: the stored byte is what the user can look up
                raw = stored.reshape(-1).view(np.uint8)[np.ravel_multi_index(index, stored.shape)]
                byte = f" (byte 0x{int(raw):02x})"
            return (
                f"{_file(inner, part)}: tensor {show_name(part)} holds {_value_text(value)}{byte} at "
                f"{list(index)}{_part_role(part, name, index)} ({_in_all(count)})"
            )
    elif (block := _gguf_block(tensors, name)) is not None:
        return block
    found = _first(tensors.tensor(name))
    if found is None:
        return None
    count, index, value = found
    if quantised:
        return (
            f"{_file(inner, name)}: tensor {show_name(name)} dequantises to {_value_text(value)} at "
            f"{list(index)} although its stored parts are finite (the product overflows float32, "
            f"{_in_all(count)})"
        )
    shown = name
    info = getattr(tensors, "info", None)
    if info is not None:
        with contextlib.suppress(QKEnergyError, AttributeError):
            shown = getattr(info(name), "gguf_name", name)
    return (
        f"{_file(tensors, name)}: tensor {show_name(shown)} holds {_value_text(value)} at {list(index)} "
        f"({_in_all(count)})"
    )


class _Recording:
    """A tensor reader that notes the names read (in order), or reads some with non-finite values zeroed."""

    def __init__(self, inner: Any, cleaned: Collection[str] = ()) -> None:
        self._inner = inner
        self._cleaned = set(cleaned)
        self.read: list[str] = []

    def tensor(self, name: str) -> np.ndarray:
        if name not in self.read:
            self.read.append(name)
        array: np.ndarray = self._inner.tensor(name)
        if name in self._cleaned:
            values = array if array.dtype.kind == "f" else as_float(array)
            array = np.where(np.isfinite(values), values, 0).astype(values.dtype)
        return array

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def nonfinite_findings(
    tensors: Any, arch: Architecture, layer: int, *, fold_norm: bool = False, prefix: str | None = None
) -> list[Finding]:
    """The stored tensors with non-finite values behind one layer's forms, each with the heads it reaches.

    Reads the layer again (the error path only): once noting every tensor read, and, when
    several tensors hold non-finite values, once per tensor with the others' zeroed.

    Parameters
    ----------
    tensors : TensorReader
        The checkpoint's tensors.
    arch : Architecture
        The stack.
    layer : int
        The layer.
    fold_norm : bool
        Whether the norm feeding attention is folded in (its gain then enters the forms).
    prefix : str or None
        The checkpoint's name prefix.

    Returns
    -------
    list of Finding
        Empty when the layer's forms are all finite.
    """
    recording = _Recording(tensors)
    weights = read_layer(recording, arch, layer, fold_norm=fold_norm, prefix=prefix)
    bad = bad_heads(weights)
    if not bad.any():
        return []
    located = [(name, text) for name in recording.read if (text := locate_nonfinite(tensors, name))]
    heads = tuple(int(h) for h in np.flatnonzero(bad))
    if not located:
        where = _file(tensors, recording.read[0]) if recording.read else _file(tensors, "")
        text = (
            f"{where}: every stored value of layer {layer} is finite, but folding its norm gains "
            "into W_Q, W_K overflows float32"
        )
        return [Finding(text, heads)]
    if len(located) == 1:
        return [Finding(located[0][1], heads)]

    def reached(name: str) -> tuple[int, ...]:
        others = _Recording(tensors, [n for n, _ in located if n != name])
        alone = bad_heads(read_layer(others, arch, layer, fold_norm=fold_norm, prefix=prefix))
        return tuple(int(h) for h in np.flatnonzero(alone))

    return [Finding(text, reached(name)) for name, text in located]


def heads_text(heads: Sequence[int]) -> str:
    """'head 3', 'heads 1, 3', or the first 12 and how many more.

    Parameters
    ----------
    heads : sequence of int
        The head indices.

    Returns
    -------
    str
    """
    shown = 12
    listed = ", ".join(map(str, heads[:shown])) + (
        f", ... ({len(heads) - shown} more)" if len(heads) > shown else ""
    )
    return f"head{'s' if len(heads) != 1 else ''} {listed}"


def nonfinite_error(
    findings: Sequence[Finding],
    arch: Architecture,
    layer: int,
    heads: Sequence[int],
    hint: str = "`skip_nonfinite` analyses the other heads",
) -> NonFiniteWeights:
    """The one-line error for non-finite weights reaching ``heads`` of one layer.

    Parameters
    ----------
    findings : sequence of Finding
        From :func:`nonfinite_findings` (the first is named).
    arch : Architecture
        The stack.
    layer : int
        The layer.
    heads : sequence of int
        The query heads asked for that the values reach.
    hint : str
        What the user can do, at the end in parentheses.

    Returns
    -------
    NonFiniteWeights
    """
    first = findings[0].text if findings else f"layer {layer}: non-finite weights"
    others = len(findings) - 1
    more = f"; {others} more tensor{'s' if others > 1 else ''} too" if others > 0 else ""
    stack = f"{arch.stack} " if arch.stack else ""
    verb = "has a" if len(heads) == 1 else "have"
    message = (
        f"{first}{more}: {stack}layer {layer}'s query {heads_text(list(heads))} (of {arch.n_heads}) "
        f"{verb} non-finite form{'' if len(heads) == 1 else 's'} ({hint})"
    )
    return NonFiniteWeights(message, layer=layer, stack=arch.stack, heads=tuple(heads), findings=findings)


def skip_reason(findings: Sequence[Finding], head: int) -> str:
    """Why one head is skipped: the findings that reach it (the first when none is charged with it alone).

    Parameters
    ----------
    findings : sequence of Finding
        The layer's findings.
    head : int
        The query head.

    Returns
    -------
    str
    """
    texts = [f.text for f in findings if head in f.heads] or [f.text for f in findings[:1]]
    return "; ".join(texts)
