"""Reading one layer's head weights from a tensor source, in the shared convention.

Head weights come back as ``(heads, n, N)``, the head's row block of an
``nn.Linear`` weight ``[out_features, in_features]``, so the head's bilinear
form is ``L = W_K^T W_Q`` and its score is ``x_q^T L^T x_k`` up to the
attention scale. Biases are not part of L and are never read. Optionally the
gain of the norm feeding attention is folded into the weights, qk-norm gains
are folded in, and latent (low-rank) projections are multiplied out.
:func:`present_stacks` says which of a model's stacks a checkpoint holds and
:func:`select` checks the layers and heads asked for: what opening a model needs,
without the analysis.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.small_floats import as_float
from qkenergy.weights.architecture import Architecture
from qkenergy.weights.layout import Layout, QKNorm, TensorReader

__all__ = [
    "LayerWeights",
    "find_prefix",
    "layer_tensors",
    "present_stacks",
    "read_layer",
    "select",
    "stacks_text",
]


@dataclass(frozen=True)
class LayerWeights:
    """Query/key weights of one layer's heads; ``kv_head[h]`` is query head h's key head.

    Parameters
    ----------
    layer : int
        The layer's index in the model.
    w_query : (H, n, N) ndarray
        W_Q of each query head.
    w_key : (H_kv, n, N) ndarray
        W_K of each key head.
    kv_head : (H,) ndarray of int
        The key head of each query head.
    norm_gain : (N,) ndarray or None
        The gain of the norm feeding attention, folded in (``fold_norm``); None when not folded.
    key_norm_gain : (N,) ndarray or None
        Cross-attention or KV sharing: the gain folded into W_K (the key stream's own norm).
    """

    layer: int
    w_query: np.ndarray  # (H, n, N)
    w_key: np.ndarray  # (H_kv, n, N)
    kv_head: np.ndarray  # (H,) int
    norm_gain: np.ndarray | None  # (N,) effective gain folded in, or None
    key_norm_gain: np.ndarray | None = None


def _where(tensors: object) -> str:
    """How to name the checkpoint in a message: its ``location`` (a TensorSource), ``path`` or ``name``."""
    for attr in ("location", "path", "name"):
        value = getattr(tensors, attr, None)
        if value:
            return str(value)
    return "the checkpoint"


def find_prefix(tensors: TensorReader, arch: Architecture) -> str:
    """The checkpoint's name prefix ('' or ending in '.'), from the layer-0 query tensor.

    The shortest match wins, so a base model nested inside a larger one (``bert.``
    in a BertForMaskedLM) is found and a stray deeper copy is not.

    Parameters
    ----------
    tensors : TensorReader
        The checkpoint's tensors.
    arch : Architecture
        The stack (its layout's query name, and the tower it lies ``within``).

    Returns
    -------
    str

    Raises
    ------
    QKEnergyError
        No tensor has the layer-0 query's name with any prefix.
    """
    suffix = arch.layout.query.format(i=arch.attention_layers[0])  # a hybrid's first attention layer
    dotted = "." + suffix
    found = [n[: len(n) - len(suffix)] for n in tensors.names if n == suffix or n.endswith(dotted)]
    if arch.layout.within is not None:  # a multimodal tower: only prefixes inside it
        found = [p for p in found if arch.layout.within in p]
    if not found:
        what = f"the {arch.stack} stack of " if arch.stack else ""
        raise QKEnergyError(
            f"{_where(tensors)}: no tensor named {suffix!r} (with any prefix); "
            f"is this {what}a {arch.model_type} checkpoint?"
        )
    return min(found, key=lambda p: (len(p), p))


def _check_shape(tensors: TensorReader, name: str, expected: tuple[int, ...], what: str) -> None:
    shape = tuple(tensors.shape(name))
    if shape != expected:
        raise QKEnergyError(
            f"{_where(tensors)}: tensor {name!r} has shape {list(shape)}, expected "
            f"{list(expected)} ({what} from config.json)"
        )


def _norm_name(layout: Layout, layer: int) -> str | None:
    """The norm whose output feeds layer ``layer``'s attention (relative name), if any."""
    if layer == 0 and (layout.post_norm or layout.first_norm is not None):
        return layout.first_norm
    if layout.norm is None:
        return None
    return layout.norm.format(i=layer - 1 if layout.post_norm else layer)


def _float(w: np.ndarray) -> np.dtype:
    """The dtype forms are folded in: float32, or float64 for weights stored so."""
    return np.dtype(np.float64 if w.dtype == np.float64 else np.float32)


def layer_tensors(tensors: TensorReader, arch: Architecture, layer: int, *, prefix: str = "") -> list[str]:
    """Names of the tensors holding layer ``layer``'s W_Q and W_K (those present), e.g. to prefetch them.

    Parameters
    ----------
    tensors : TensorReader
        The checkpoint's tensors.
    arch : Architecture
        The stack.
    layer : int
        The layer's index.
    prefix : str
        The checkpoint's name prefix (see :func:`find_prefix`).

    Returns
    -------
    list of str
        Full names, query first.
    """
    lay = arch.layout
    relative = [lay.query.format(i=arch.tensor_layer(layer))]  # a shared block: its first layer's
    if lay.storage == "separate" and lay.key is not None:
        relative.append(lay.key.format(i=arch.key_layer(layer)))  # KV sharing: the source layer's
    names = set(tensors.names)
    return [prefix + r for r in relative if prefix + r in names]


def _check_layer(arch: Architecture, layer: int) -> None:
    """One line unless ``layer`` is in range and has softmax attention."""
    if not 0 <= layer < arch.n_layers:
        raise QKEnergyError(
            f"layer {layer} out of range: the model has {arch.n_layers} layers (0..{arch.n_layers - 1})"
        )
    if not arch.has_layer(layer):
        raise QKEnergyError(
            f"layer {layer} of this {arch.model_type} model has no softmax attention; the layers with "
            f"attention are {', '.join(map(str, arch.attention_layers))}"
        )


def read_layer(
    tensors: TensorReader,
    arch: Architecture,
    layer: int,
    *,
    fold_norm: bool = False,
    prefix: str | None = None,
) -> LayerWeights:
    """Read one layer's W_Q (H, n, N) and W_K (H_kv, n, N), reading only that layer's tensors.

    The dtype is kept as stored, except when something is folded in: then the weights
    come back in float32 (float64 if stored so). qk-norm gains (and a LayerNorm's
    centring) and the latent norms of latent attention are part of the form and always
    folded in. With ``fold_norm`` the columns of W_Q and W_K are also multiplied by the
    gain of the norm feeding attention (L -> D L D; for cross-attention the keys' own
    norm: L -> D_K L D_Q). Norm biases are not part of L and are ignored. ``prefix``
    skips prefix detection (see :func:`find_prefix`).

    Parameters
    ----------
    tensors : TensorReader
        The checkpoint's tensors.
    arch : Architecture
        The stack.
    layer : int
        The layer's index, 0 <= layer < ``arch.n_layers``, a layer with softmax attention.
    fold_norm : bool
        Also fold the gain of the norm feeding attention into W_Q and W_K.
    prefix : str or None
        The checkpoint's name prefix; None to find it.

    Returns
    -------
    LayerWeights

    Raises
    ------
    QKEnergyError
        A layer out of range or without attention, a tensor missing, or one whose shape does
        not fit the architecture.
    """
    _check_layer(arch, layer)
    if prefix is None:
        prefix = find_prefix(tensors, arch)
    lay = arch.layout
    at = arch.tensor_layer(layer)  # a shared block (zamba2): its tensors live under its first layer
    source_layer = arch.key_layer(layer)  # KV sharing: keys from an earlier layer's projection
    names = set(tensors.names)

    def need(relative: str, *fallbacks: str) -> str:
        name = prefix + relative
        for alt in fallbacks:
            if name not in names and prefix + alt in names:
                name = prefix + alt
        if name not in names:
            raise QKEnergyError(
                f"{_where(tensors)}: missing tensor {name!r} (layer {layer} of a "
                f"{arch.model_type} checkpoint)"
            )
        return name

    def gain(
        template: str, size: int | tuple[int, ...], what: str, offset: float = 0.0, at: int = at
    ) -> np.ndarray:
        # Checkpoints from the original BERT code name LayerNorm weights 'gamma'.
        relative = template.format(i=at)
        legacy = relative[: -len(".weight")] + ".gamma" if relative.endswith(".weight") else relative
        name = need(relative, legacy)
        _check_shape(tensors, name, size if isinstance(size, tuple) else (size,), what)
        return as_float(tensors.tensor(name), np.float64) + offset

    wq, wk = _read_projections(tensors, arch, layer, need, gain)
    if lay.qk_norm is not None and lay.qk_norm.query is not None:  # a gain-free norm folds nothing
        wq, wk = _fold_qk_norm(lay.qk_norm, wq, wk, gain, source_layer)

    query_gain = key_gain = None
    if fold_norm:
        wq, wk, query_gain, key_gain = _fold_input_norms(arch, layer, wq, wk, gain)
    cross_gain = key_gain if lay.key_stack is not None or source_layer != at else None
    return LayerWeights(layer, wq, wk, arch.layer_kv_head(layer), query_gain, cross_gain)


def _read_projections(
    tensors: TensorReader,
    arch: Architecture,
    layer: int,
    need: Callable[..., str],
    gain: Callable[..., np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """W_Q (H, n, N) and W_K (H_kv, n, N) of one layer as its layout stores them.

    Views into the tensors read (a Conv1D's transposed columns, a fused tensor's rows), not
    copies: the Gram products convert each head into float32/64 anyway, and that copy reads
    a strided head as fast as a contiguous one (a copy here costs a transpose and fresh pages).
    """
    lay = arch.layout
    H, N = arch.n_heads, arch.hidden_size
    Hkv, n = arch.layer_kv_heads(layer), arch.layer_head_dim(layer)  # per-layer shapes (gemma4)
    at, source_layer = arch.tensor_layer(layer), arch.key_layer(layer)
    sizes = f"{H} heads x head_dim {n}, hidden {N}"
    qname = need(lay.query.format(i=at))
    if lay.storage == "separate":
        assert lay.key is not None, "a separate layout names its key tensor"
        kname = need(lay.key.format(i=source_layer))
        gate = 2 if lay.query_gate else 1
        what = f"{H} heads x 2 x head_dim {n} (query, gate), hidden {N}" if lay.query_gate else sizes
        _check_shape(tensors, qname, (gate * H * n, N), what)
        _check_shape(tensors, kname, (Hkv * n, N), f"{Hkv} key heads x head_dim {n}, hidden {N}")
        wq = tensors.tensor(qname).reshape(H, -1, N)[:, :n]  # a gated head: n query rows, then n gate rows
        wk = tensors.tensor(kname).reshape(Hkv, n, N)
        application = arch.adapter(layer)
        if application is not None and lay.shared_blocks is not None:  # W + B_k A_k (zamba2's adapters)
            wq = _with_adapter(tensors, lay.shared_blocks.query_adapter, wq, at, application, need, "query")
            wk = _with_adapter(tensors, lay.shared_blocks.key_adapter, wk, at, application, need, "key")
    elif lay.storage in ("stacked", "grouped"):
        _check_shape(
            tensors,
            qname,
            ((H + 2 * Hkv) * n, N),
            f"({H} + 2 x {Hkv} key/value heads) x head_dim {n}, hidden {N}",
        )
        w = tensors.tensor(qname)
        if lay.storage == "stacked":
            wq = w[: H * n].reshape(H, n, N)
            wk = w[H * n : (H + Hkv) * n].reshape(Hkv, n, N)
        else:
            groups = w.reshape(Hkv, H // Hkv + 2, n, N)
            wq = groups[:, :-2].reshape(H, n, N)
            wk = groups[:, -2]
    elif lay.storage == "conv1d":
        _check_shape(tensors, qname, (N, 3 * H * n), f"Conv1D [in, out]: {sizes}")
        w = tensors.tensor(qname)
        wq = w[:, : H * n].T.reshape(H, n, N)
        wk = w[:, H * n : 2 * H * n].T.reshape(H, n, N)
    elif lay.storage == "interleaved":
        _check_shape(tensors, qname, (3 * H * n, N), f"fused q, k, v per head: {sizes}")
        w = tensors.tensor(qname).reshape(H, 3, n, N)
        wq, wk = w[:, 0], w[:, 1]
    elif lay.storage == "latent":
        assert lay.latent is not None and lay.key is not None, "a latent layout names its latents"
        return _read_latent(tensors, arch, layer, qname, need(lay.key.format(i=layer)), need, gain)
    else:  # pragma: no cover - guarded by the Storage literal
        raise AssertionError(f"unknown storage {lay.storage!r}")
    return wq, wk


def _fold_input_norms(
    arch: Architecture, layer: int, wq: np.ndarray, wk: np.ndarray, gain: Callable[..., np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """W_Q and W_K times the gains of the norms feeding their inputs (L -> D_K L D_Q), and those gains."""
    lay, N = arch.layout, arch.hidden_size
    at, source_layer = arch.tensor_layer(layer), arch.key_layer(layer)
    query_gain = key_gain = None
    norm = _norm_name(lay, at)
    if norm is not None:
        query_gain = gain(norm, N, f"hidden {N}", lay.norm_offset).astype(_float(wq))
        wq = as_float(wq, query_gain.dtype) * query_gain
    key_norm = norm if lay.key_stack is None else arch.key_norm
    if source_layer != at:  # a KV-shared layer: its keys read the source layer's input
        key_norm = _norm_name(lay, source_layer)
    if key_norm is not None:
        key_gain = gain(key_norm, N, f"hidden {N}", lay.norm_offset, source_layer).astype(_float(wk))
        wk = as_float(wk, key_gain.dtype) * key_gain
    return wq, wk, query_gain, key_gain


def _with_adapter(
    tensors: TensorReader,
    names: tuple[str, str] | None,
    w: np.ndarray,
    at: int,
    application: int,
    need: Callable[..., str],
    side: str,
) -> np.ndarray:
    """W + B A per head: a low-rank adapter (down A: (r, N), up B: (heads * n, r)) added to a projection."""
    if names is None:
        return w
    heads, n, N = w.shape
    down = need(names[0].format(i=at, k=application))
    up = need(names[1].format(i=at, k=application))
    rank = tensors.shape(down)[0]
    what = f"{side} adapter {application} of rank {rank}"
    _check_shape(tensors, down, (rank, N), f"{what}, hidden {N}")
    _check_shape(tensors, up, (heads * n, rank), f"{what}, {heads} heads x head_dim {n}")
    dtype = _float(w)
    product: np.ndarray = as_float(tensors.tensor(up), dtype) @ as_float(tensors.tensor(down), dtype)
    out: np.ndarray = as_float(w, dtype) + product.reshape(heads, n, N)
    return out


def _fold_qk_norm(
    qk: QKNorm, wq: np.ndarray, wk: np.ndarray, gain: Callable[..., np.ndarray], key_layer: int
) -> tuple[np.ndarray, np.ndarray]:
    """W -> diag(g) P W per head (P: the LayerNorm's centring, or the identity for RMSNorm).

    The key norm is the one of ``key_layer``, the layer whose keys these are (KV sharing)."""
    out = []
    for template, w, side in ((qk.query, wq, "query"), (qk.key, wk, "key")):
        assert template is not None, "a qk-norm with gains names both"
        if side == "key":
            gain = functools.partial(gain, at=key_layer)
        heads, n, N = w.shape
        w = as_float(w, _float(w))
        if qk.scope == "projection":
            if qk.centred:
                w = w - w.reshape(heads * n, N).mean(axis=0)
            g = gain(template, heads * n, f"{side} norm over {heads} heads x head_dim {n}", qk.offset)
            g = g.reshape(heads, n)
        else:
            if qk.centred:
                w = w - w.mean(axis=1, keepdims=True)
            if qk.scope == "head_rows":  # one gain row per head, stored as one (heads, n) tensor
                g = gain(
                    template, (heads, n), f"{side} norm gains of {heads} heads x head_dim {n}", qk.offset
                )
            elif "{h}" in template:
                g = np.stack(
                    [
                        gain(template.replace("{h}", str(h)), n, f"{side} norm of head {h}", qk.offset)
                        for h in range(heads)
                    ]
                )
            else:
                g = np.broadcast_to(
                    gain(template, n, f"{side} norm over head_dim {n}", qk.offset), (heads, n)
                )
        out.append(w * g.astype(w.dtype)[:, :, None])
    return out[0], out[1]


def _read_latent(
    tensors: TensorReader,
    arch: Architecture,
    layer: int,
    qname: str,
    kname: str,
    need: Callable[..., str],
    gain: Callable[..., np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Per-head W_Q, W_K of multi-head latent attention, latent gains folded in (see LatentAttention)."""
    lat = arch.layout.latent
    assert lat is not None and arch.latent is not None
    H, n, N = arch.n_heads, arch.head_dim, arch.hidden_size
    d_nope, d_rope, d_value, rank = arch.latent
    _check_shape(tensors, kname, (rank + d_rope, N), f"kv rank {rank} + rope dim {d_rope}, hidden {N}")
    up = need(lat.key_up.format(i=layer))
    _check_shape(
        tensors, up, (H * (d_nope + d_value), rank), f"{H} heads x (nope {d_nope} + value {d_value})"
    )
    w_kva = tensors.tensor(kname)
    dtype = _float(w_kva)
    w_kva = as_float(w_kva, dtype)
    g_k = gain(lat.key_norm, rank, f"kv rank {rank}").astype(dtype)
    w_kvb = as_float(tensors.tensor(up), dtype).reshape(H, d_nope + d_value, rank)[:, :d_nope]
    k_nope = w_kvb @ (g_k[:, None] * w_kva[:rank])
    k_rope = np.broadcast_to(w_kva[rank:], (H, d_rope, N))  # decoupled RoPE key: shared by all heads
    wk = np.concatenate([k_nope, k_rope], axis=1)
    if lat.query_up is None:
        _check_shape(tensors, qname, (H * n, N), f"{H} heads x head_dim {n}, hidden {N}")
        return as_float(tensors.tensor(qname), dtype).reshape(H, n, N), wk
    assert lat.query_norm is not None
    q_rank = tensors.shape(qname)[0]
    _check_shape(tensors, qname, (q_rank, N), f"q rank x hidden {N}")
    q_up = need(lat.query_up.format(i=layer))
    _check_shape(tensors, q_up, (H * n, q_rank), f"{H} heads x head_dim {n}, q rank {q_rank}")
    g_q = gain(lat.query_norm, q_rank, f"q rank {q_rank}").astype(dtype)
    w_qb = as_float(tensors.tensor(q_up), dtype).reshape(H, n, q_rank)
    return w_qb @ (g_q[:, None] * as_float(tensors.tensor(qname), dtype)), wk


def present_stacks(tensors: TensorReader, archs: Sequence[Architecture]) -> list[tuple[Architecture, str]]:
    """The stacks whose weights the checkpoint holds, each with its name prefix.

    A checkpoint may hold part of a model (a T5 encoder alone): its other stacks are
    left out. With none present, the first stack's error names what was looked for.

    Parameters
    ----------
    tensors : TensorReader
        The checkpoint's tensors.
    archs : sequence of Architecture
        The model's attention stacks.

    Returns
    -------
    list of (Architecture, str)
        Each stack present, with the name prefix of its tensors.

    Raises
    ------
    QKEnergyError
        No stack is present (the error names the first stack's tensor).
    """
    found = []
    for arch in archs:
        with contextlib.suppress(QKEnergyError):
            found.append((arch, find_prefix(tensors, arch)))
    if not found:
        find_prefix(tensors, archs[0])  # raises, naming the tensor looked for
    return found


def select(
    option: str, chosen: Sequence[int | range] | int | range | None, count: int, what: str
) -> list[int]:
    """Validated, sorted, de-duplicated 0-based indices (all when ``chosen`` is None).

    ``chosen`` holds indices and/or ``range`` objects (the command line's ``0-3``); a range is
    checked by its ends, never expanded before it is known to fit, so ``0-100000000`` costs nothing.
    Raises ArgumentError: the option is fine on the command line but does not fit this checkpoint.

    Parameters
    ----------
    option : str
        The option's name, as the error shows it ("--layers").
    chosen : int, range, sequence of int and range, or None
        The indices asked for; None for all.
    count : int
        How many there are (valid indices are 0..count-1).
    what : str
        What is indexed ("layers", "heads"), for the error.

    Returns
    -------
    list of int
        The sorted, distinct indices.

    Raises
    ------
    ArgumentError
        An index is not an integer or out of range.
    """
    if chosen is None:
        return list(range(count))  # count <= layouts.MAX_CONFIG_SIZE
    if isinstance(chosen, int | np.integer | range):
        chosen = [chosen]
    valid = f"valid {what} are 0..{count - 1} (the model has {count})"
    picked: set[int] = set()
    for value in chosen:
        if isinstance(value, range):
            if not value:
                continue
            low, high = min(value[0], value[-1]), max(value[0], value[-1])
            if low < 0 or high >= count:
                shown = str(low) if low == high else f"{low}-{high}"  # `--layers 9` is range(9, 10)
                raise ArgumentError(f"{option}: {shown} is out of range; {valid}", parameter=option)
            picked.update(value)
            continue
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ArgumentError(f"{option}: {value!r} is not an integer; {valid}", parameter=option)
        if not 0 <= value < count:
            raise ArgumentError(f"{option}: {int(value)} is out of range; {valid}", parameter=option)
        picked.add(int(value))
    if not picked:
        raise ArgumentError(f"{option}: empty selection; {valid}", parameter=option)
    return sorted(picked)


def stacks_text(stacks: Sequence[str]) -> str:
    """What attention stacks a model has, for a message about a stack asked for that it lacks.

    Parameters
    ----------
    stacks : sequence of str
        The model's stacks ("" is the one stack of a single-stack model).

    Returns
    -------
    str
        "it has one attention stack, unnamed: leave `stack` out" or "its stacks are 'encoder', 'decoder'".
    """
    named = [s for s in stacks if s]
    if not named:
        return "it has one attention stack, unnamed: leave `stack` out"
    return f"its stacks are {', '.join(map(repr, named))}"
