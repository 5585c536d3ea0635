"""One proof for every family, through transformers itself: the forms read are the model's scores.

For every case of ``tiny_models.CASES`` a tiny random model (norm gains drawn in
(0.5, 1.5), every bias zero: biases are not part of the form) is saved as
safetensors and read back with qkenergy. The model then runs once with an
attention function registered in transformers' ``AttentionInterface``, which
records the query and key states each attention module hands it: after the
projections, the qk-norms and the rotary embedding, exactly what enters the
score ``q_i . k_j``. Modules that compute their scores themselves (bloom, falcon,
gpt_neo, mpt) are watched instead for the first product of two activations in
their forward: the score product. Forward pre-hooks give the attention input x
of every call (the inputs of the query and key projections, found by value: the
modules owning the tensors the layout names).

For every stack, layer with softmax attention and head, all pairs (i, j) must
satisfy

    q_i . k_j = c_i c_j  x_j^T L_d x_i,   d = p_i - p_j,   L_d = W_K^T R_d W_Q,

where R_d comes from qkenergy.math.rope with the settings qkenergy reads from
config.json (the identity in a NoPE layer or a stack without RoPE), and c_i,
c_j are per-token positive factors: the ratio of the model's vector norm to
ours. A qk-norm divides each token's query and key by such a number and
changes nothing else; where no norm follows the projections the factors must
be one constant (a scale folded into the projection), so a missing gain, a
wrong pairing of rotary coordinates, a wrong head split or a wrong layer index
all fail. Latent attention has two key factors, one per part (the key latent's
norm divides only the part without RoPE). With ``fold_norm`` the same identity
must hold with x replaced by the gain-free output of the norm that feeds
attention (the model's own norm module run with gain 1 and no bias), which
also checks that the norm the layout names is the one feeding attention.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.overrides import TorchFunctionMode  # noqa: E402
from transformers import AttentionInterface  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, eager_mask  # noqa: E402

from qkenergy.math.rope import Rope, attention_factor, rotate  # noqa: E402
from qkenergy.weights import families, reading  # noqa: E402
from qkenergy.weights.architecture import Architecture, architectures  # noqa: E402
from qkenergy.weights.checkpoint import open_model  # noqa: E402
from qkenergy.weights.rope_settings import layer_ropes  # noqa: E402
from tests.cross.tiny_models import CASES, TOKENS, VOCAB, Tiny, tiny_config  # noqa: E402

pytestmark = pytest.mark.slow

CAPTURE = "qkenergy_capture"  # the attention implementation registered below
WEIGHT_STD = 0.25  # large enough that scores are O(1), so the comparison has teeth
Key = tuple[str, int]  # (stack, layer)


class Recorder:
    """The query and key states of every call of the attention modules watched, per (stack, layer)."""

    def __init__(self) -> None:
        self.owners: dict[int, Key] = {}  # id(query projection module) -> (stack, layer)
        self.states: dict[Key, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.unread: list[str] = []  # attention modules called that no layout reads

    def key_of(self, module: Any) -> Key | None:
        for sub in module.modules():
            found = self.owners.get(id(sub))
            if found is not None:
                return found
        return None

    def add(self, key: Key, query: Any, keys: Any) -> None:
        """Batch 1: (heads, T, n) each; a fused batch-and-heads axis (bloom) is one axis already."""

        def heads(t: Any) -> np.ndarray:
            a = t.detach().double().numpy()
            return a.reshape(-1, a.shape[-2], a.shape[-1])

        self.states.setdefault(key, []).append((heads(query), heads(keys)))


_ACTIVE: list[Recorder] = []


def _capture(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any, **kwargs: Any
) -> Any:
    """Record the states, then attend as the model's own eager function does."""
    if _ACTIVE:
        found = _ACTIVE[-1].key_of(module)
        if found is not None:
            _ACTIVE[-1].add(found, query, key)
        else:
            _ACTIVE[-1].unread.append(type(module).__name__)
    defined = sys.modules[type(module).__module__]
    own = getattr(defined, "eager_attention_forward", None)
    if "Vision" in type(module).__name__:  # llama4's vision tower has an eager function of its own
        own = getattr(defined, "vision_eager_attention_forward", own)
    if own is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward as own
    return own(module, query, key, value, attention_mask, *args, **kwargs)


AttentionInterface.register(CAPTURE, _capture)
AttentionMaskInterface.register(CAPTURE, eager_mask)


class ScoreProducts(TorchFunctionMode):
    """For modules that compute scores themselves: the operands of the first product in their forward."""

    def __init__(self) -> None:
        super().__init__()
        self.active: list[list[Any]] = []  # [key, (query, key) or None] per module running

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.active and self.active[-1][1] is None:
            pair = None
            if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm):
                if args[0].dim() >= 3 and args[1].dim() >= 3:
                    pair = (args[0], args[1].transpose(-1, -2))
            elif func in (torch.baddbmm, torch.Tensor.baddbmm):  # bloom: alibi.baddbmm(q, k^T)
                pair = (kwargs.get("batch1", args[1] if len(args) > 1 else None), None)
                batch2 = kwargs.get("batch2", args[2] if len(args) > 2 else None)
                pair = (pair[0], batch2.transpose(-1, -2))
            elif func is torch.nn.functional.scaled_dot_product_attention:
                pair = (args[0], args[1])
            if pair is not None:
                self.active[-1][1] = pair
        return func(*args, **kwargs)


@contextlib.contextmanager
def _projection_weights(model: Any, calls: Calls, rec: Recorder) -> Any:
    """torch's multi_head_attention_forward with the projection weights passed in (wavlm).

    The modules owning those weights never run, so their inputs are recorded here, as their
    pre-hooks would record them, and the operands of the function's first score product
    (``torch.baddbmm(bias, q_scaled, k^T)``, or ``torch.bmm`` without a bias) are the states.
    """
    functional = torch.nn.functional
    real, products = functional.multi_head_attention_forward, (torch.baddbmm, torch.bmm)
    owner_of = {id(p): m for m in model.modules() for p in m.parameters(recurse=False)}

    def wrapper(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        q_owner = owner_of.get(id(kwargs.get("q_proj_weight")))
        found = None if q_owner is None else rec.owners.get(id(q_owner))
        if found is None:
            rec.unread.append("multi_head_attention_forward")
            return real(query, key, value, *args, **kwargs)
        for x, name in ((query, "q_proj_weight"), (key, "k_proj_weight")):
            module = owner_of[id(kwargs[name])]
            calls.inputs[id(module)].append(x.detach().double().numpy().reshape(-1, x.shape[-1]))
        seen: list[Any] = []

        def first(product: Any, *operands: Any) -> Any:
            if not seen:
                q, k_t = operands[-2:]
                seen.append(q)
                rec.add(found, q, k_t.transpose(-1, -2))
            return product(*operands)

        torch.baddbmm = lambda *a: first(products[0], *a)
        torch.bmm = lambda *a: first(products[1], *a)
        try:
            return real(query, key, value, *args, **kwargs)
        finally:
            torch.baddbmm, torch.bmm = products
            assert seen, "no score product in multi_head_attention_forward"

    functional.multi_head_attention_forward = wrapper
    try:
        yield
    finally:
        functional.multi_head_attention_forward = real


def _set_implementation(config: Any, name: str) -> None:
    """The attention implementation of a config and all its sub-configs."""
    seen: set[int] = set()
    todo = [config]
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        c._attn_implementation_internal = name
        todo.extend(
            sub
            for key in getattr(c, "sub_configs", {})
            if hasattr(sub := getattr(c, key, None), "sub_configs")
        )


def _gain_offset(module: Any) -> float | None:
    """0 for a norm multiplying by its weight w, 1 for one multiplying by 1 + w (gemma); None: no gain."""
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.nn.Parameter) or w.dim() != 1:
        return None
    x = torch.randn(3, w.shape[0], generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            out = torch.func.functional_call(module, {"weight": torch.zeros_like(w)}, (x,))
    except (TypeError, AttributeError):  # a norm that needs more than its input (a gated norm)
        return None
    return 0.0 if float(out.abs().max()) < 1e-6 else 1.0


def _randomise(model: Any) -> None:
    """O(1) random weights, norm gains in (0.5, 1.5), every bias zero (not part of the form)."""
    gen = torch.Generator().manual_seed(1234)
    offsets = {}
    for name, module in model.named_modules():
        if "Norm" in type(module).__name__:
            offset = _gain_offset(module)
            if offset is not None:
                offsets[f"{name}.weight" if name else "weight"] = offset
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in offsets:
                p.uniform_(0.5 - offsets[name], 1.5 - offsets[name], generator=gen)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, WEIGHT_STD, generator=gen)


def _inputs(kind: str, config: Any) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, VOCAB, (1, TOKENS), generator=gen)
    pixels = torch.randn((1, 3, 12, 12), generator=gen)
    if kind == "text":
        return dict(input_ids=ids)
    if kind == "seq2seq":
        return dict(input_ids=ids, decoder_input_ids=torch.randint(3, VOCAB, (1, TOKENS - 2), generator=gen))
    if kind == "speech":
        features = torch.randn((1, config.num_mel_bins, 2 * config.max_source_positions), generator=gen)
        return dict(input_features=features, decoder_input_ids=ids)
    if kind == "image":
        return dict(pixel_values=pixels)
    if kind == "audio":
        return dict(input_values=torch.randn((1, 400), generator=gen))
    if kind == "siglip2":  # patches already cut: (batch, patches, 3 p^2), a 3 x 3 grid
        patches = torch.randn((1, 9, 3 * 4 * 4), generator=gen)
        mask = torch.ones((1, 9), dtype=torch.long)
        return dict(
            input_ids=ids,
            pixel_values=patches,
            pixel_attention_mask=mask,
            spatial_shapes=torch.tensor([[3, 3]]),
        )
    if kind == "mistral3":  # a 16 x 16 image: 4 x 4 patches merged 2 x 2 into 4 image tokens
        ids[0, 1:5] = config.image_token_index
        image = torch.randn((1, 3, 16, 16), generator=gen)
        return dict(input_ids=ids, pixel_values=image, image_sizes=torch.tensor([[16, 16]]))
    if kind == "gemma4":  # 2 x 2 patches (already cut, 3 p^2 values each) pooled into one image token
        ids[0, 1] = config.image_token_id
        patches = torch.randn((1, 4, 3 * config.vision_config.patch_size**2), generator=gen)
        grid = torch.tensor([[[0, 0], [1, 0], [0, 1], [1, 1]]])
        return dict(input_ids=ids, pixel_values=patches, image_position_ids=grid)
    if kind == "qwen_vl":  # two images, 8 x 8 and 4 x 4 patches of 2 x 2 pixels: 16 + 4 merged tokens
        grids = torch.tensor([[1, 8, 8], [1, 4, 4]])
        patches = int(grids.prod(-1).sum())
        merged = patches // config.vision_config.spatial_merge_size**2
        ids = torch.randint(7, VOCAB, (1, merged + TOKENS), generator=gen)  # 3..6: vision token ids
        ids[0, 2 : 2 + merged] = config.image_token_id
        pixels = torch.randn((patches, 3 * 2 * 2 * 2), generator=gen)  # channels x time x rows x columns
        # 1-D text positions for every token (the image tokens' M-RoPE positions are not a single offset;
        # a text token's are): the text stack is proven on those, the vision tower on its patches.
        positions = torch.arange(ids.shape[1])[None]
        return dict(input_ids=ids, pixel_values=pixels, image_grid_thw=grids, position_ids=positions)
    if kind == "llama4":  # a 16 x 16 image: 4 x 4 patches and a class token (the towers run apart)
        return dict(input_ids=ids, pixel_values=torch.randn((1, 3, 16, 16), generator=gen))
    if kind == "gemma3":  # one image token (mm_tokens_per_image 1) among the text
        ids[0, 1] = config.image_token_index
        return dict(input_ids=ids, pixel_values=pixels)
    more = _more_inputs(kind, config, gen)
    if more is not None:
        return more
    assert kind == "clip", kind
    return dict(input_ids=ids, pixel_values=pixels)


def _tied_copies(model: Any) -> dict[int, list[Any]]:
    """id(module) -> the other modules holding the very same parameters (weights tied: zamba)."""
    holders: dict[int, list[Any]] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            holders.setdefault(id(p), []).append(module)
    out: dict[int, list[Any]] = {}
    for modules in holders.values():
        for m in modules:
            out.setdefault(id(m), [c for c in modules if c is not m])
    return out


def _more_inputs(kind: str, config: Any, gen: Any) -> dict[str, Any] | None:
    """Inputs of the towers saved on their own and of the vision-language wrappers (issue 18, second round)."""
    if kind == "image16":  # a 16 x 16 image: 4 x 4 patches of 4 x 4 pixels
        return dict(pixel_values=torch.randn((1, 3, 16, 16), generator=gen))
    if kind == "siglip2_vision":  # patches already cut, a 3 x 3 grid
        return dict(
            pixel_values=torch.randn((1, 9, 3 * 4 * 4), generator=gen),
            pixel_attention_mask=torch.ones((1, 9), dtype=torch.long),
            spatial_shapes=torch.tensor([[3, 3]]),
        )
    if kind == "qwen_vision":  # the Qwen vision encoders alone: two images of 8 x 8 and 4 x 4 patches
        grids = torch.tensor([[1, 8, 8], [1, 4, 4]])
        patches = int(grids.prod(-1).sum())
        return dict(hidden_states=torch.randn((patches, 3 * 2 * 2 * 2), generator=gen), grid_thw=grids)
    if kind == "llava":  # one image among the text: as many image tokens as the projector gives
        vision = config.vision_config
        side = vision.image_size // vision.patch_size
        tokens = side**2 // getattr(config, "downsample_factor", 1) ** 2
        token = getattr(config, "image_token_id", None) or config.image_token_index
        ids = torch.randint(6, VOCAB, (1, TOKENS + tokens), generator=gen)
        ids[0, 1 : 1 + tokens] = token
        image = torch.randn((1, 3, vision.image_size, vision.image_size), generator=gen)
        return dict(input_ids=ids, pixel_values=image)
    if kind == "speech_to_text":  # 16 frames of filterbank features, subsampled 4 x by two convolutions
        features = torch.randn((1, 16, config.input_feat_per_channel * config.input_channels), generator=gen)
        return dict(input_features=features, decoder_input_ids=torch.randint(3, VOCAB, (1, 5), generator=gen))
    if kind == "audio_encoder":  # a Whisper-like audio encoder alone: mel features of 2 x its positions
        features = torch.randn((1, config.num_mel_bins, 2 * config.max_source_positions), generator=gen)
        return dict(input_features=features)
    if kind == "idefics3":  # one 16 x 16 image: 4 x 4 patches, pixel-shuffled 2 x 2 into 4 image tokens
        tokens = (
            config.vision_config.image_size // config.vision_config.patch_size
        ) ** 2 // config.scale_factor**2
        ids = torch.randint(6, VOCAB, (1, TOKENS + tokens), generator=gen)
        ids[0, 1 : 1 + tokens] = config.image_token_id
        image = torch.randn((1, 1, 3, 16, 16), generator=gen)
        return dict(input_ids=ids, pixel_values=image)
    return None


def _owners(model: Any) -> dict[tuple[tuple[int, ...], bytes], Any]:
    """(shape, bytes) of every parameter -> the module owning it (random weights: each is unique)."""
    modules = dict(model.named_modules())
    out = {}
    for name, p in model.named_parameters():
        owner = modules[name.rsplit(".", 1)[0]] if "." in name else model
        arr = p.detach().float().numpy()
        out[(arr.shape, arr.tobytes())] = owner
    return out


class Calls:
    """Inputs (pre-hooks) and input/output pairs (hooks) of the modules watched, in call order."""

    def __init__(self) -> None:
        self.inputs: dict[int, list[np.ndarray]] = {}
        self.io: dict[int, list[tuple[Any, np.ndarray]]] = {}
        self.hooks: list[Any] = []

    def watch_input(self, module: Any, copies: Any = ()) -> int:
        """``copies``: modules tied to this one (the same parameters: zamba's shared block), one record."""
        key = id(module)
        if key not in self.inputs:
            self.inputs[key] = []

            def hook(mod: Any, args: Any, kwargs: Any, key: int = key) -> None:
                x = args[0] if args else next(iter(kwargs.values()))
                self.inputs[key].append(x.detach().double().numpy().reshape(-1, x.shape[-1]))

            for m in (module, *copies):
                self.hooks.append(m.register_forward_pre_hook(hook, with_kwargs=True))
        return key

    def watch_io(self, module: Any, copies: Any = ()) -> int:
        key = id(module)
        if key not in self.io:
            self.io[key] = []

            def hook(mod: Any, args: Any, out: Any, key: int = key) -> None:
                self.io[key].append((args[0].detach(), out.detach().double().numpy()))

            for m in (module, *copies):
                self.hooks.append(m.register_forward_hook(hook))
        return key

    def remove(self) -> None:
        for h in self.hooks:
            h.remove()


def _gain_free(module: Any, offset: float, h: Any) -> np.ndarray:
    """The norm module's output on h with gain 1 (weight 1 - offset) and no bias."""
    params = {"weight": torch.full_like(module.weight, 1.0 - offset)}
    if getattr(module, "bias", None) is not None:
        params["bias"] = torch.zeros_like(module.bias)
    with torch.no_grad():
        return torch.func.functional_call(module, params, (h,)).double().numpy()


def _identity_rotation(module: Any, args: Any, out: Any) -> Any:
    """A rotary module's output made the identity rotation: (cos, sin) -> (1, 0), angles -> 0, e^(i angle) -> 1."""
    if isinstance(out, tuple) and len(out) == 2:
        return torch.ones_like(out[0]), torch.zeros_like(out[1])
    if out.is_complex():  # unit complex numbers to multiply by (llama4's vision tower): 1
        return torch.ones_like(out)
    return torch.zeros_like(out)


def _per_vector(rope: Rope) -> Rope:
    """The rotation one query (or key) carries: cos and sin times the attention factor, not its square."""
    return dataclasses.replace(rope, attention_factor=math.sqrt(attention_factor(rope)))


@dataclasses.dataclass
class Stage:
    """One (stack, layer) to prove: its architecture, prefix and the module keys watched."""

    arch: Architecture
    prefix: str
    layer: int
    query: int
    key: int
    norms: dict[str, tuple[Any, int]]


def _plan(
    model: Any, tensors: Any, archs: tuple[Architecture, ...], calls: Calls, rec: Recorder
) -> list[Stage]:
    owners = _owners(model)

    def owner(name: str) -> Any:
        arr = np.asarray(tensors.tensor(name), dtype=np.float32)
        found = owners.get((arr.shape, arr.tobytes()))
        assert found is not None, f"no module of the model holds the checkpoint tensor {name!r}"
        return found

    copies = _tied_copies(model)
    modules = dict(model.named_modules())

    def own(layer_name: str, stored: str) -> Any:
        """The module named for this layer, when it is (a tied copy of) the one holding the tensor read."""
        held = owner(stored)
        mine = modules.get(layer_name.rsplit(".", 1)[0])
        tied = mine is not None and (mine is held or any(c is mine for c in copies.get(id(held), [])))
        return mine if tied else held

    planned = []  # (arch, prefix, layer, query module, key module, {side: norm module})
    for arch in archs:
        prefix = reading.find_prefix(tensors, arch)
        lay = arch.layout
        for layer in arch.attention_layers:
            at = arch.tensor_layer(layer)  # a shared block (zamba2): stored under its first layer
            source = arch.key_layer(layer)  # KV sharing: the keys of an earlier layer, from its input
            keys_at = layer if source == at else source  # the layer whose key module runs
            q_mod = own(prefix + lay.query.format(i=layer), prefix + lay.query.format(i=at))
            key = lay.key or lay.query
            k_mod = own(prefix + key.format(i=keys_at), prefix + key.format(i=source))
            norms = {}
            for side, mine, stored in (
                ("query", reading._norm_name(lay, layer), reading._norm_name(lay, at)),
                ("key", reading._norm_name(lay, keys_at), reading._norm_name(lay, source)),
            ):
                if side == "key" and lay.key_stack:
                    mine = stored = arch.key_norm
                if stored is not None:
                    norms[side] = own(prefix + (mine or stored), prefix + stored)
            planned.append((arch, prefix, layer, q_mod, k_mod, norms))
    # Tied copies that no layer reads as its own (zamba's one shared block, applied at several
    # layers) are watched with the module read: each application is checked against its form.
    claimed = {id(m) for *_, q, k, norms in planned for m in (q, k, *norms.values())}

    def extra(module: Any) -> list[Any]:
        return [c for c in copies.get(id(module), []) if id(c) not in claimed]

    stages = []
    for arch, prefix, layer, q_mod, k_mod, norm_mods in planned:
        for m in (q_mod, *extra(q_mod)):
            rec.owners[id(m)] = (arch.stack, layer)
        watched = {side: (m, calls.watch_io(m, extra(m))) for side, m in norm_mods.items()}
        query = calls.watch_input(q_mod, extra(q_mod))
        key = calls.watch_input(k_mod, extra(k_mod))
        stages.append(Stage(arch, prefix, layer, query, key, watched))
    return stages


def _watch_score_products(model: Any, stages: list[Stage], tensors: Any, calls: Calls, rec: Recorder) -> Any:
    """Hooks on the attention modules (the query projection's parent) around a ScoreProducts mode."""
    mode = ScoreProducts()
    parents = {id(child): module for module in model.modules() for child in module.children()}
    owners = _owners(model)
    for stage in stages:
        arr = np.asarray(
            tensors.tensor(stage.prefix + stage.arch.layout.query.format(i=stage.layer)), np.float32
        )
        attention = parents[id(owners[(arr.shape, arr.tobytes())])]
        key = (stage.arch.stack, stage.layer)

        def pre(mod: Any, args: Any, key: Key = key) -> None:
            mode.active.append([key, None])

        def post(mod: Any, args: Any, out: Any) -> None:
            key, pair = mode.active.pop()
            assert pair is not None, f"no score product in {type(mod).__name__}"
            rec.add(key, *pair)

        calls.hooks += [attention.register_forward_pre_hook(pre), attention.register_forward_hook(post)]
    return mode


def _feeding(stage: Stage, side: str, x: np.ndarray, calls: Calls) -> np.ndarray | None:
    """The gain-free normalised input of the norm whose output is x (x itself when none feeds it)."""
    if side not in stage.norms:
        return x
    module, key = stage.norms[side]
    for h, out in calls.io[key]:
        out = out.reshape(-1, out.shape[-1])
        if out.shape == x.shape and np.allclose(out, x, rtol=1e-5, atol=1e-5):
            return _gain_free(module, stage.arch.layout.norm_offset, h).reshape(x.shape)
    return None


def _module_calls(
    states: list[tuple[np.ndarray, np.ndarray]], rows: list[int], what: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The states of each module call: the attention calls one module call made, joined in token order.

    A vision encoder over a sequence of patches (Qwen2.5-VL's windows, Qwen3-VL's images) splits
    one module call's queries and keys into chunks and attends within each: the chunks are
    consecutive runs of the call's tokens, so joining them gives every token's query and key
    (the mask between chunks is not part of the form). Elsewhere each call is one chunk.
    """
    out: list[tuple[np.ndarray, np.ndarray]] = []
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    for q, k in states:
        chunks.append((q, k))
        assert len(out) < len(rows), f"{what}: more attention calls than calls of its query projection"
        tokens = sum(c[0].shape[1] for c in chunks)
        assert tokens <= rows[len(out)], f"{what}: {tokens} queries for {rows[len(out)]} input tokens"
        if tokens == rows[len(out)]:
            queries, keys = zip(*chunks)
            out.append((np.concatenate(queries, axis=1), np.concatenate(keys, axis=1)))
            chunks = []
    assert not chunks, f"{what}: attention calls that cover only part of a call's tokens"
    return out


def _rotated(vectors: np.ndarray, rope: Rope | None, positions: np.ndarray) -> np.ndarray:
    """(heads, T, n) vectors, each rotated as the model rotates it at its own position."""
    if rope is None:
        return vectors
    one = _per_vector(rope)
    return np.stack([rotate(vectors[:, t, :], one, int(p), axis=-1) for t, p in enumerate(positions)], axis=1)


def _check_stage(
    case: Tiny,
    stage: Stage,
    call: int,
    states: tuple[np.ndarray, np.ndarray],
    calls: Calls,
    cfg: Any,
    tensors: Any,
    at_zero: bool,
) -> float:
    """The identity of the module docstring for one call of one layer; returns the scores' largest |value|."""
    arch, layer = stage.arch, stage.layer
    q, k = states
    H, n = arch.n_heads, arch.layer_head_dim(layer)  # per-layer shapes (gemma4's full layers)
    what = f"{arch.stack or 'stack'} layer {layer} call {call}"
    assert q.shape[0] == H and q.shape[-1] == n, f"{what}: query states {q.shape}, expected {H} heads of {n}"
    run = call // case.calls_per_projection  # the projections' run this attention call uses
    x_q, x_k = calls.inputs[stage.query][run], calls.inputs[stage.key][run]
    z_q, z_k = (
        _feeding(stage, "query", x_q, calls),
        _feeding(stage, "key", x_k, calls),  # the key stream's own norm (cross-attention, KV sharing)
    )
    if z_q is None or z_k is None:
        assert case.unfed_first_call and call == 0, (
            f"{what}: the norm the layout names does not feed attention"
        )
    rope = None
    if arch.layer_positional(layer) == "rope":
        section = cfg[arch.layout.config_section] if arch.layout.config_section else cfg
        rope = layer_ropes(section, arch)[layer]
    Tq, Tk = q.shape[1], k.shape[1]
    p_q = np.zeros(Tq, int) if at_zero else np.arange(Tq)
    p_k = np.zeros(Tk, int) if at_zero else np.arange(Tk)
    offsets = p_q[:, None] - p_k[None, :]
    kv = arch.layer_kv_head(layer)
    model_kv = np.arange(H) if k.shape[0] == H else kv  # some modules hand over keys already repeated
    k = k[model_kv]
    parts = [slice(0, n)] if arch.latent is None else [slice(0, arch.latent[0]), slice(arch.latent[0], n)]
    scores = np.einsum("hin,hjn->hij", q, k)
    scale = float(np.abs(scores).max())
    plain = reading.read_layer(tensors, arch, layer, prefix=stage.prefix)
    folded = reading.read_layer(tensors, arch, layer, fold_norm=True, prefix=stage.prefix)
    for weights, xq, xk, label in ((plain, x_q, x_k, ""), (folded, z_q, z_k, " (fold_norm)")):
        if xq is None or xk is None:
            continue
        ours_q = np.einsum("hnN,iN->hin", weights.w_query.astype(np.float64), xq)
        ours_k = np.einsum("hnN,jN->hjn", weights.w_key.astype(np.float64), xk)[kv]
        # Per-token factors: the model's vector norms over ours (rotated as the model rotates them).
        c_q = np.linalg.norm(q, axis=-1) / np.linalg.norm(_rotated(ours_q, rope, p_q), axis=-1)
        rotated_k = _rotated(ours_k, rope, p_k)
        c_k = [np.linalg.norm(k[..., p], axis=-1) / np.linalg.norm(rotated_k[..., p], axis=-1) for p in parts]
        if not (arch.qk_norm or case.scaled_queries):  # nothing normalises after the projections
            for c in (c_q, *c_k):
                np.testing.assert_allclose(
                    c, c.flat[0], rtol=1e-4, err_msg=f"{what}{label}: factors vary by token"
                )
        want = np.zeros_like(scores)
        for d in np.unique(offsets):
            q_d = ours_q if rope is None else rotate(ours_q, rope, int(d), axis=-1)  # R_d W_Q x_i
            form = sum(
                c[:, None, :] * np.einsum("hin,hjn->hij", q_d[..., p], ours_k[..., p])
                for c, p in zip(c_k, parts)
            )
            mask = offsets == d
            want[:, mask] = (c_q[:, :, None] * form)[:, mask]
        np.testing.assert_allclose(
            scores, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case.model} {what}{label}"
        )
    return scale


def prove(case: Tiny, tmp_path: Path) -> int:
    """Run the proof of one case; returns the number of (layer, call) score matrices compared."""
    config = tiny_config(case)
    _set_implementation(config, "eager" if case.scores_in_module else CAPTURE)
    torch.manual_seed(0)
    model = getattr(transformers, case.model)(config).float().eval()
    _randomise(model)
    model.save_pretrained(tmp_path)
    source = open_model(tmp_path)
    cfg, tensors = source.config, source.tensors
    archs = architectures(cfg)
    rec, calls = Recorder(), Calls()
    stages = _plan(model, tensors, archs, calls, rec)
    mode = _watch_score_products(model, stages, tensors, calls, rec) if case.scores_in_module else None
    if case.identity_rope is not None:
        calls.hooks += [
            m.register_forward_hook(_identity_rotation)
            for name, m in model.named_modules()
            if ("Rope" in type(m).__name__ or "Rotary" in type(m).__name__) and case.identity_rope in name
        ]
    inputs = _inputs(case.inputs, config)
    # A qk-norm after the rotary embedding: the form read is the one at position 0.
    at_zero = any(a.layout.qk_norm is not None and a.layout.qk_norm.after_rope for a in archs)
    if at_zero:
        inputs["position_ids"] = torch.zeros_like(inputs["input_ids"])
    _ACTIVE.append(rec)
    wrapped = _projection_weights(model, calls, rec) if case.mha_forward else contextlib.nullcontext()
    try:
        with torch.no_grad(), mode if mode is not None else contextlib.nullcontext(), wrapped:
            for part in case.run.split(","):
                module = model.get_submodule(part) if part else model
                named = inspect.signature(module.forward).parameters
                module(**({k: v for k, v in inputs.items() if k in named} if "," in case.run else inputs))
    finally:
        _ACTIVE.pop()
        calls.remove()
    # Every softmax attention the model ran is one the layouts read (a hybrid's pattern misses none).
    assert set(rec.unread) <= set(case.unread), f"attention modules not read: {sorted(set(rec.unread))}"
    compared, spread = 0, 0.0
    for stage in stages:
        states = rec.states.get((stage.arch.stack, stage.layer), [])
        assert states, f"{stage.arch.stack} layer {stage.layer}: no attention call recorded"
        # each run of the projections: calls_per_projection module calls of its tokens (diffllama: 2)
        rows = [len(x) for x in calls.inputs[stage.query] for _ in range(case.calls_per_projection)]
        for call, pair in enumerate(_module_calls(states, rows, f"{stage.arch.stack} layer {stage.layer}")):
            spread = max(spread, _check_stage(case, stage, call, pair, calls, cfg, tensors, at_zero))
            compared += 1
    assert spread > 0.5, "scores too flat for the comparison to mean anything"
    return compared


@pytest.mark.parametrize("case", list(CASES))
def test_forms_reproduce_the_models_scores(case: str, tmp_path: Path) -> None:
    assert prove(CASES[case], tmp_path) > 0


def _model_type(case: Tiny) -> str:
    return str(getattr(transformers, case.config).model_type)


def test_every_family_is_proven_by_its_named_class() -> None:
    """Each supported model_type has a case, and a case of each builds the class `qkenergy layouts` names."""
    proven: dict[str, set[str]] = {}
    for case in CASES.values():
        proven.setdefault(_model_type(case), set()).add(case.model)
    assert set(proven) == set(families.FAMILIES)
    for model_type, family in families.FAMILIES.items():
        assert family.proof in proven[model_type], model_type


# A layout changed in one point the proof must notice: (case, stack field, wrong value).
_WRONG = [
    ("llama", "rope_pairs", "interleaved"),  # the wrong rotary pairing
    ("gemma3_text", "norm_offset", 0.0),  # the gain w instead of 1 + w
    ("qwen3", "qk_norm", None),  # the qk-norm gains not folded
    ("bert", "post_norm", False),  # the wrong norm feeding attention
]


@pytest.mark.parametrize(("case", "field", "value"), _WRONG)
def test_a_wrong_layout_fails_the_proof(
    case: str, field: str, value: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    model_type = _model_type(CASES[case])
    family = families.FAMILIES[model_type]
    wrong = dataclasses.replace(family, stacks=(dataclasses.replace(family.stacks[0], **{field: value}),))
    monkeypatch.setitem(families.FAMILIES, model_type, wrong)
    with pytest.raises(AssertionError):
        prove(CASES[case], tmp_path)


@pytest.mark.parametrize(
    ("case", "change"),
    [
        ("qwen2_5_vl", "storage"),  # the fused qkv read per head (q, k, v of head 0, then head 1, ...)
        ("qwen2_5_vl", "rope"),  # the vision tower's 2-D RoPE left on: not the form at offset (0, 0)
        ("llama4", "rope"),
    ],
)
def test_a_wrong_vision_tower_fails_the_proof(
    case: str, change: str, tmp_path: Path, monkeypatch: Any
) -> None:
    tiny = CASES[case]
    if change == "rope":
        tiny = dataclasses.replace(tiny, identity_rope=None)
    else:
        model_type = _model_type(tiny)
        family = families.FAMILIES[model_type]
        stacks = tuple(
            dataclasses.replace(s, storage="interleaved") if s.stack == "vision" else s for s in family.stacks
        )
        monkeypatch.setitem(families.FAMILIES, model_type, dataclasses.replace(family, stacks=stacks))
    with pytest.raises(AssertionError, match="vision layer 0"):
        prove(tiny, tmp_path)


# Families whose analysis is compared with s computed from the model's own modules (one hybrid: jamba).
_ENERGY_CASES = [
    "gpt_oss",
    "llama4_text",
    "qwen3_next",
    "smollm3",
    "cohere2",
    "glm4",
    "gemma3",
    "jamba",
    "gemma4",  # per-layer head sizes and key heads, KV-shared layers, both towers
    "mimo_v2_flash",
]
_ENERGY_CASES += ["llama4", "qwen2_5_vl"]  # both towers of multimodal decoders (qwen: a fused qkv)
_ENERGY_CASES += ["llava-siglip-qwen3"]  # a wrapper's towers read as their own model_types (Qwen3: qk-norm)


def _module_energies(
    model: Any, owner_of: dict[int, Key], config_of: dict[str, Any]
) -> dict[tuple[str, int, int], float]:
    """s = ||S||^2 / ||L||^2 per (stack, layer, head), from the attention modules' own parameters."""
    out = {}
    # KV sharing (gemma4): a layer without k_proj attends with the keys its layer type's storing
    # layer computed (transformers' kv_sharing_modes), so its key side is that module's.
    storing = {m.layer_type: m for m in model.modules() if getattr(m, "store_full_length_kv", False)}

    def weight(proj: Any) -> Any:
        return getattr(proj, "linear", proj).weight  # gemma4's clippable linear holds an nn.Linear

    for module in model.modules():
        q_proj = getattr(module, "q_proj", None)
        keys = storing[module.layer_type] if getattr(module, "is_kv_shared_layer", False) else module
        k_proj = getattr(keys, "k_proj", None)
        qkv = getattr(module, "qkv", None)  # one fused projection (Qwen's vision encoders)
        if qkv is not None and id(qkv) in owner_of:
            q_proj = k_proj = qkv
        owner = id(getattr(q_proj, "linear", q_proj))  # the module owning the query weight
        if q_proj is None or k_proj is None or owner not in owner_of:
            continue
        stack, layer = owner_of[owner]
        heads, kv_heads, n = config_of[stack]
        n = int(getattr(module, "head_dim", n))  # per-layer head sizes (gemma4's full layers)
        N = weight(q_proj).shape[1]
        if q_proj is qkv:  # the module splits its output into q, k and v, each (heads, n)
            fused = weight(qkv).detach().double().numpy().reshape(3, heads, n, N)
            wq, wk = fused[0], fused[1]
        else:
            wq = (
                weight(q_proj).detach().double().numpy().reshape(heads, -1, N)[:, :n]
            )  # a gated head: its query rows
            wk = weight(k_proj).detach().double().numpy().reshape(-1, n, N)
        kv_heads = wk.shape[0]
        for side, name in (("q", "q_norm"), ("k", "k_norm")):
            norm = getattr(module if side == "q" else keys, name, None)
            offset = None if norm is None else _gain_offset(norm)
            if offset is not None:
                g = norm.weight.detach().double().numpy() + offset
                if side == "q":
                    wq = wq * g[:, None]
                else:
                    wk = wk * g[:, None]
        for h in range(heads):
            L = wk[h // (heads // kv_heads)].T @ wq[h]
            out[(stack, layer, h)] = float(np.sum(((L + L.T) / 2) ** 2) / np.sum(L**2))
    return out


@pytest.mark.parametrize("case", _ENERGY_CASES)
def test_symmetric_energy_equals_the_modules_own(case: str, tmp_path: Path) -> None:
    """analyze's per-head symmetric energy equals the one of the model's own q/k modules (norm gains in)."""
    from qkenergy.analysis.analyze import analyze_model

    tiny = CASES[case]
    config = tiny_config(tiny)
    _set_implementation(config, "eager")
    torch.manual_seed(0)
    model = getattr(transformers, tiny.model)(config).float().eval()
    _randomise(model)
    model.save_pretrained(tmp_path)
    source = open_model(tmp_path)
    archs = architectures(source.config)
    rec, calls = Recorder(), Calls()
    _plan(model, source.tensors, archs, calls, rec)
    calls.remove()
    sizes = {a.stack: (a.n_heads, a.n_kv_heads, a.head_dim) for a in archs}
    want = _module_energies(model, rec.owners, sizes)
    heads = analyze_model(tmp_path, null=False).heads
    got = {(str(r.stack), int(r.layer), int(r.head)): float(r.symmetric_energy) for r in heads.itertuples()}
    assert set(got) == set(want) and want
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def _saved(case: Tiny, tmp_path: Path) -> Path:
    config = tiny_config(case)
    _set_implementation(config, "eager")
    torch.manual_seed(0)
    model = getattr(transformers, case.model)(config).float().eval()
    _randomise(model)
    model.save_pretrained(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("case", "vision_positional"),
    [
        ("qwen2_5_vl", "rope_2d"),
        ("qwen3_vl", "rope_2d"),
        ("qwen3_5", "rope_2d"),
        ("qwen3_5_moe", "rope_2d"),
        ("llama4", "rope_2d"),
        ("mistral3", "rope_2d"),
        ("gemma3", "absolute"),
        ("llava-siglip-qwen3", "absolute"),
        ("idefics3", "absolute"),
    ],
)
def test_a_multimodal_checkpoint_has_rows_for_each_tower(
    case: str, vision_positional: str, tmp_path: Path
) -> None:
    """analyze on a saved multimodal checkpoint: a row per head of every tower, sizes from transformers' config."""
    from qkenergy.analysis.analyze import analyze_model

    config = tiny_config(CASES[case])
    text, vision = config.text_config, config.vision_config
    types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    want = {
        ("text", layer, head)
        for layer, kind in enumerate(types)
        if kind != "linear_attention"  # Qwen3.5's Gated DeltaNet layers
        for head in range(text.num_attention_heads)
    }
    vision_heads = getattr(vision, "num_heads", None) or vision.num_attention_heads
    vision_layers = getattr(vision, "depth", None) or vision.num_hidden_layers
    want |= {("vision", layer, head) for layer in range(vision_layers) for head in range(vision_heads)}
    heads = analyze_model(_saved(CASES[case], tmp_path), null=False).heads
    assert {(str(r.stack), int(r.layer), int(r.head)) for r in heads.itertuples()} == want
    positional = heads.groupby("stack")["positional"].unique().to_dict()
    assert list(positional["vision"]) == [vision_positional]
    assert "rope" in set(positional["text"])


def test_a_hybrid_has_rows_for_its_attention_layers_only(tmp_path: Path) -> None:
    """qwen3_next with attention in layers 1 and 3 of 4: rows there, model's own index, a note, --layers checked."""
    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.base.errors import ArgumentError

    kwargs = dict(
        CASES["qwen3_next"].kwargs,
        num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention"] * 2,
    )
    path = _saved(dataclasses.replace(CASES["qwen3_next"], kwargs=kwargs), tmp_path)
    result = analyze_model(path, null=False, per_layer=True)
    assert sorted(set(result.heads["layer"])) == [1, 3]
    assert list(result.layers["layer"]) == [1, 3]
    assert result.settings["stacks"][0]["attention_layers"] == [1, 3]
    assert any(
        "2 of its 4 layers have softmax attention (layers 1, 3)" in n for n in result.settings["notes"]
    )
    assert set(analyze_model(path, null=False, layers=[2, 3]).heads["layer"]) == {3}
    with pytest.raises(ArgumentError, match="none of the layers chosen has softmax attention"):
        analyze_model(path, null=False, layers=[0, 2])


def test_nope_layers_are_positional_none_at_every_offset(tmp_path: Path) -> None:
    """smollm3 with layer 1 NoPE: positional none there; with offsets its rows repeat the unrotated form."""
    from qkenergy.analysis.analyze import analyze_model

    path = _saved(CASES["smollm3"], tmp_path)
    heads = analyze_model(path, null=False, rope_offsets=[0, 3]).heads
    positional = heads.groupby("layer")["positional"].first().to_dict()
    assert positional == {0: "rope", 1: "none"}
    s = heads.pivot_table(index=["layer", "head"], columns="offset", values="symmetric_energy")
    assert (s.loc[1][0] == s.loc[1][3]).all()  # NoPE: the same form at every offset
    assert not np.allclose(s.loc[0][0], s.loc[0][3])  # RoPE: the form turns with the offset


def test_per_layer_shapes_and_kv_sharing_reach_every_output(tmp_path: Path) -> None:
    """gemma4_text: heads of 8 and 16 in one table, each judged by its own law; notes, settings, survey."""
    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.surveys.engine import _plan_shapes
    from qkenergy.surveys.manifest import ModelEntry
    from qkenergy.surveys.plan import resolve_entry
    from qkenergy.surveys.summary import model_summary

    path = _saved(CASES["gemma4_text"], tmp_path)
    result = analyze_model(path, samples=20, per_layer=True)
    heads = result.heads
    assert heads.groupby("layer")["n"].first().to_dict() == {0: 8, 1: 16, 2: 8, 3: 16}
    assert set(heads.loc[heads["layer"] == 1, "kv_head"]) == {0}  # one key head in the full layers
    assert set(result.null_laws) == {(8, 32), (16, 32)}
    sds = {n: result.null_laws[(n, 32)]["symmetric_energy"].std() for n in (8, 16)}
    assert sds[8] != pytest.approx(sds[16], rel=0.05)  # the two shapes' laws differ
    for n in (8, 16):  # each head against the law of its own shape
        rows = heads[heads["n"] == n]
        law = result.null_laws[(n, 32)]["symmetric_energy"]
        np.testing.assert_allclose(rows["symmetric_energy_null_sd"], law.std(), rtol=1e-12)
    assert list(result.layers["n"]) == [4 * 8, 4 * 16, 4 * 8, 4 * 16]
    assert list(result.layers["n_kv_heads"]) == [2, 1, 2, 1]
    stack = result.settings["stacks"][0]
    assert stack["layer_shapes"] == [
        {"layer": 1, "n_kv_heads": 1, "head_dim": 16},
        {"layer": 3, "n_kv_heads": 1, "head_dim": 16},
    ]
    assert stack["key_layers"] == {"2": 0, "3": 1}
    notes = " ".join(result.settings["notes"])
    assert "layers 1, 3 have heads of n = 16 with 1 key heads" in notes
    assert "KV sharing: layers reuse the keys of an earlier layer (2 <- 0, 3 <- 1)" in notes
    assert model_summary(heads)["n"].tolist() == ["8/16"]
    plan = resolve_entry(ModelEntry(str(path), "gemma4"))
    assert plan.error is None and _plan_shapes(plan) == {(8, 32), (16, 32)}  # one shared law per shape


def test_a_wrapper_reads_each_tower_as_its_own_model_type(tmp_path: Path, monkeypatch: Any) -> None:
    """llava over a Qwen3 decoder: read with llava's default (Llama) text layout, the qk-norm gains are missed."""
    family = families.FAMILIES["llava"]
    fixed = tuple(dataclasses.replace(s, adjust=None) for s in family.stacks)  # no delegation by model_type
    monkeypatch.setitem(families.FAMILIES, "llava", dataclasses.replace(family, stacks=fixed))
    with pytest.raises(AssertionError, match="text layer 0"):
        prove(CASES["llava-siglip-qwen3"], tmp_path)
