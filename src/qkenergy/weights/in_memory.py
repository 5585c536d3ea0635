"""Models that live in memory: a mapping of arrays, a transformers model, a TransformerLens model.

Each is turned into a :class:`~qkenergy.weights.source.ModelSource` whose
``tensors`` answer the same questions as a safetensors
:class:`~qkenergy.weights.safetensors_io.TensorSource` (``names``, ``shape``,
``dtype``, ``tensor``, ``release``, ``close``), so the layouts and the analysis
read them exactly as they read a checkpoint on disk.

- A mapping of names to arrays (numpy, torch, anything ``numpy.asarray``
  takes) with a config dict (what config.json would hold).
- A transformers ``PreTrainedModel``: its ``config.to_dict()`` and its
  ``state_dict()``. Tensors are handed over as zero-copy numpy views (bfloat16
  as its stored bits, :mod:`qkenergy.base.small_floats`) one at a time, when a layer is read; a tensor on an
  accelerator is copied to the CPU alone, in its own dtype. Nothing is turned
  into float64 here.
- A TransformerLens model (a ``TransformerBridge`` of TransformerLens 4, or a
  ``HookedTransformer`` of earlier releases): its per-layer ``W_Q`` and ``W_K``
  (``[heads, d_model, d_head]``, key heads not repeated under grouped-query
  attention), presented as ``nn.Linear``-style ``[heads * d_head, d_model]``
  weights under the layout :data:`TRANSFORMER_LENS_LAYOUT`. Whether
  TransformerLens has folded the layer norms into them is recorded in the
  source's ``notes``.

torch is never imported here: tensors are recognised by their methods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.small_floats import BFLOAT16
from qkenergy.weights.layout import Layout
from qkenergy.weights.quantization import parse_quantization, quantized_tensors
from qkenergy.weights.source import ModelSource

__all__ = ["TRANSFORMER_LENS_LAYOUT", "ArrayTensors", "is_in_memory", "open_in_memory", "to_numpy"]

TRANSFORMER_LENS_MODEL_TYPE = "transformer_lens"
TRANSFORMER_LENS_LAYOUT = Layout(
    query="blocks.{i}.attn.W_Q",
    key="blocks.{i}.attn.W_K",
    norm="blocks.{i}.ln1.w",
    heads_keys=("n_heads",),
    hidden_keys=("d_model",),
    layers_keys=("n_layers",),
    kv_heads_key="n_key_value_heads",
    head_dim_key="d_head",
)


def to_numpy(value: Any, what: str = "tensor") -> np.ndarray:
    """A numpy view of an array or torch tensor, without a copy where one is not needed.

    torch bfloat16 (which numpy cannot take) is viewed through its 16-bit
    pattern as :data:`~qkenergy.base.small_floats.BFLOAT16` (no ml_dtypes import); a tensor on an accelerator is first
    copied to the CPU (that tensor only, same dtype).

    Parameters
    ----------
    value : array_like or torch.Tensor
        The tensor.
    what : str
        What it is, in error messages.

    Returns
    -------
    ndarray
        Same shape and dtype (torch bfloat16 as its stored bits, ``small_floats.BFLOAT16``).

    Raises
    ------
    QKEnergyError
        The value cannot be read as an array.
    """
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        tensor = value.detach()
        if str(getattr(tensor, "device", "cpu")) != "cpu":
            tensor = tensor.cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            import torch  # present: the tensor is one

            return tensor.view(torch.int16).numpy().view(BFLOAT16)
        try:
            return tensor.numpy()
        except (TypeError, RuntimeError) as exc:
            raise QKEnergyError(
                f"{what}: cannot read a torch {tensor.dtype} tensor as an array ({exc})"
            ) from None
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise QKEnergyError(f"{what}: not an array ({type(value).__name__}: {exc})") from None


class ArrayTensors:
    """Named arrays in memory, read like a safetensors TensorSource.

    ``tensors`` maps each name to an array, or to a zero-argument callable
    returning one (computed when asked for: TransformerLens weights).

    Parameters
    ----------
    tensors : mapping of str to array or callable
        Name -> array (numpy array or torch tensor), or a zero-argument callable returning one.
    location : str
        What the tensors are, in error messages.
    shapes : mapping of str to tuple of int or None
        The shapes of tensors given as callables, so that they are known without computing them.

    Raises
    ------
    QKEnergyError
        A tensor name is not a string.
    """

    def __init__(
        self,
        tensors: Mapping[str, Any],
        location: str,
        shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        for name in tensors:
            if not isinstance(name, str):
                raise QKEnergyError(f"{location}: tensor names must be strings, got {name!r}")
        self._tensors = dict(tensors)
        self._shapes = dict(shapes or {})
        self.location = location

    @property
    def names(self) -> Collection[str]:
        return list(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __len__(self) -> int:
        return len(self._tensors)

    def _raw(self, name: str) -> Any:
        try:
            return self._tensors[name]
        except KeyError:
            raise QKEnergyError(f"{self.location}: no tensor {name!r}") from None

    def tensor(self, name: str) -> np.ndarray:
        value = self._raw(name)
        if callable(value) and not hasattr(value, "shape"):
            value = value()
        return to_numpy(value, f"{self.location}: tensor {name!r}")

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self._shapes:
            return self._shapes[name]
        value = self._raw(name)
        shape = getattr(value, "shape", None)
        return tuple(int(d) for d in shape) if shape is not None else self.tensor(name).shape

    def dtype(self, name: str) -> np.dtype:
        return self.tensor(name).dtype

    def release(self) -> None:
        """Nothing to release: the arrays belong to the caller."""

    def close(self) -> None:
        """Nothing to close: the arrays belong to the caller."""

    def __repr__(self) -> str:
        return f"ArrayTensors({self.location!r}, {len(self)} tensors)"


def is_in_memory(model: object) -> bool:
    """Whether ``model`` is an in-memory model rather than a path, hub id or None.

    Parameters
    ----------
    model : object
        The ``model`` argument.

    Returns
    -------
    bool
    """
    return (
        model is not None and not isinstance(model, str | bytes | Path) and not hasattr(model, "__fspath__")
    )


def open_in_memory(model: Any, config: Mapping[str, Any] | None = None) -> ModelSource:
    """A :class:`ModelSource` over an in-memory model (see the module docstring).

    Parameters
    ----------
    model : object
        A transformers PreTrainedModel, a TransformerLens model, or a mapping of tensor names to arrays.
    config : mapping or None
        The config.json dict of a mapping of arrays (with ``model_type``); only for one.

    Returns
    -------
    ModelSource

    Raises
    ------
    QKEnergyError
        A model of another kind, a mapping without ``config``, or a ``config`` where the model has its own.
    """
    cfg = getattr(model, "cfg", None)
    if cfg is not None and hasattr(cfg, "d_head") and hasattr(model, "blocks"):  # TransformerLens
        if config is not None:
            raise QKEnergyError(
                "config= is only for a mapping of arrays; a TransformerLens model has its own cfg"
            )
        return _transformer_lens(model)
    if hasattr(model, "state_dict") and hasattr(getattr(model, "config", None), "to_dict"):
        if config is not None:
            raise QKEnergyError(
                "config= is only for a mapping of arrays; a transformers model has its own config"
            )
        own = model.config.to_dict()
        name = str(own.get("_name_or_path") or type(model).__name__)
        tensors = ArrayTensors(
            model.state_dict(keep_vars=False), f"in-memory {type(model).__name__} ({name})"
        )
        return _source(name, own, tensors, "transformers")
    if isinstance(model, Mapping):
        if config is None:
            raise QKEnergyError(
                "a mapping of tensors needs config=, the model's config.json as a dict (with 'model_type')"
            )
        if not isinstance(config, Mapping):
            raise QKEnergyError(
                f"config= must be a dict (config.json's content), got {type(config).__name__}"
            )
        name = str(config.get("_name_or_path") or "arrays")
        return _source(name, dict(config), ArrayTensors(model, f"in-memory tensors ({name})"), "arrays")
    raise QKEnergyError(
        f"cannot analyze a {type(model).__name__}: expected a path or hub id, a transformers "
        "PreTrainedModel, a TransformerLens model, or a mapping of tensor names to arrays with config="
    )


def _source(
    name: str,
    config: dict[str, Any],
    tensors: ArrayTensors,
    origin: str,
    layout: Layout | None = None,
    notes: dict[str, Any] | None = None,
) -> ModelSource:
    where = f"the config of {name}"
    # a quantised model's weights (a mapping of a quantised checkpoint's tensors) dequantised as from files
    read, quantization = quantized_tensors(tensors, parse_quantization(config, where), where)
    return ModelSource(
        name,
        config,
        read,  # reads like a TensorSource
        Path("."),
        origin,
        config_label=where,
        layout=layout,
        notes={**(notes or {}), **quantization},
    )


def _transformer_lens(model: Any) -> ModelSource:
    cfg = model.cfg
    H, n, N, layers = int(cfg.n_heads), int(cfg.d_head), int(cfg.d_model), int(cfg.n_layers)
    blocks = list(model.blocks)

    def weight(attn: Any, which: str) -> Any:
        # Legacy HookedTransformer's grouped-query W_K repeats the key heads; _W_K does not.
        w = getattr(attn, f"_W_{which}", None)
        w = getattr(attn, f"W_{which}") if w is None else w
        if len(w.shape) == 2:  # [d_model, heads * d_head], as TransformerBridge reshapes it
            w = w.reshape(N, -1, n).permute(1, 0, 2)
        return w

    def linear(layer: int, which: str) -> Callable[[], np.ndarray]:
        # [heads, d_model, d_head] -> nn.Linear rows [heads * d_head, d_model]: one layer's copy.
        def read() -> np.ndarray:
            w = to_numpy(weight(blocks[layer].attn, which), f"TransformerLens blocks.{layer}.attn.W_{which}")
            return np.ascontiguousarray(w.transpose(0, 2, 1)).reshape(-1, w.shape[1])

        return read

    kv = int(weight(blocks[0].attn, "K").shape[0])
    tensors: dict[str, Any] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    gains = 0
    for i, block in enumerate(blocks):
        for which, heads in (("Q", H), ("K", kv)):
            tensors[f"blocks.{i}.attn.W_{which}"] = linear(i, which)
            shapes[f"blocks.{i}.attn.W_{which}"] = (heads * n, N)
        ln = getattr(block, "ln1", None)
        gain = next((getattr(ln, a) for a in ("w", "weight") if getattr(ln, a, None) is not None), None)
        if gain is not None and tuple(gain.shape) == (N,):
            tensors[f"blocks.{i}.ln1.w"] = gain
            gains += 1
    normalization = str(getattr(cfg, "normalization_type", None))
    folded = bool(getattr(model, "_weights_processed", False)) or normalization.endswith("Pre")
    config: dict[str, Any] = {
        "model_type": TRANSFORMER_LENS_MODEL_TYPE,
        "n_layers": layers,
        "n_heads": H,
        "n_key_value_heads": kv,
        "d_head": n,
        "d_model": N,
        **_transformer_lens_rope(cfg, n),
    }
    layout = TRANSFORMER_LENS_LAYOUT
    if gains != len(blocks):  # a block without an ln1 gain: no norm to fold
        layout = dataclasses.replace(layout, norm=None)
    name = str(getattr(cfg, "model_name", None) or type(model).__name__)
    notes = {
        "transformer_lens_normalization": normalization,
        "transformer_lens_layer_norm_folded": folded,
    }
    return _source(
        name,
        config,
        ArrayTensors(tensors, f"TransformerLens {name}", shapes),
        "transformer_lens",
        layout,
        notes,
    )


def _transformer_lens_rope(cfg: Any, head_dim: int) -> dict[str, Any]:
    """TransformerLens rotary settings in config.json terms (read by the RoPE settings reader)."""
    if getattr(cfg, "positional_embedding_type", None) != "rotary":
        return {}
    rotary_dim = getattr(cfg, "rotary_dim", None) or head_dim
    parameters: dict[str, Any] = {
        "rope_type": "default",
        "rope_theta": float(getattr(cfg, "rotary_base", 10000)),
    }
    if getattr(cfg, "use_NTK_by_parts_rope", False):
        parameters.update(
            rope_type="llama3",
            factor=float(cfg.NTK_by_parts_factor),
            low_freq_factor=float(cfg.NTK_by_parts_low_freq_factor),
            high_freq_factor=float(cfg.NTK_by_parts_high_freq_factor),
            original_max_position_embeddings=int(cfg.NTK_original_ctx_len),
        )
    parameters["partial_rotary_factor"] = rotary_dim / head_dim
    return {
        "rope_parameters": parameters,
        "rope_interleaved": bool(getattr(cfg, "rotary_adjacent_pairs", False)),
        "max_position_embeddings": int(getattr(cfg, "n_ctx", 0) or 0) or None,
    }
