"""Rotary position embeddings (RoPE): the head's form at every relative offset.

With RoPE the query at position i is R_i W_Q x and the key at position j is
R_j W_K y, where R_p rotates pairs of head coordinates by the angles p * w_k.
Since R_i^T R_j = R_{j-i}, the score is

    (R_j W_K y)^T (R_i W_Q x) = y^T W_K^T R_d W_Q x = y^T L_d x,   d = i - j,

so the head has one bilinear form per offset, L_d = W_K^T R_d W_Q, and L_0 = L
is the form read without positions. R_d W_Q is a Gaussian head whenever W_Q
is (R_d is orthogonal), so each L_d has the same null law as L.

On the Gram route (docs/mathematics.md §4) the head with W_Q replaced by R_d W_Q has
C_d = [W_K; R_d W_Q] = P_d C with P_d = diag(I, R_d), hence
G_d = P_d G P_d^T: one rotation of the query rows and columns of the Gram
matrix already computed, O(n^2) per head and offset, whatever N.

Two pairings of the rotated coordinates are in use: ``half`` (GPT-NeoX,
llama and most others: coordinate k pairs with k + r/2) and ``interleaved``
(GPT-J: 2k pairs with 2k + 1). Only the first ``rotary_dim`` coordinates
(from ``rotary_start``) rotate (partial rotary); the others pass unchanged.

The angular frequencies w_k follow the model's rope kind, as transformers
computes them (``modeling_rope_utils``): ``default`` theta^(-2k/r),
``linear`` (divided by a factor), ``dynamic`` (NTK-aware: the base grows with
the sequence length), ``llama3`` (low frequencies divided by a factor, a
smooth ramp in between), ``yarn`` (a ramp between interpolated and
extrapolated frequencies, plus an attention factor), ``longrope``
(per-frequency factors, short or long by the sequence length) and
``proportional`` (Gemma 4's full-attention layers: the pairs span the whole head,
frequencies theta^(-2k/n) for the first ``rotated_fraction`` of them and 0 for
the rest, whose pairs do not turn; all divided by the factor). The kinds that
depend on the sequence length are evaluated at the shortest sequence that
holds the offset, d + 1 positions.

The attention factor a of yarn and longrope multiplies cos and sin of both
the query and the key, so it scales the rotated coordinates only:
R_d = diag(a^2 Rot(d w), I). With full rotary that scales L_d by a^2 and
changes no normalised statistic; with partial
rotary (phi-4-mini's longrope, latent attention's decoupled RoPE part) it
reweights the rotated block against the rest, and then even R_0 is not the
identity: the offset rows include it, the plain form L (read without
--rope-offsets) does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from qkenergy.base.small_floats import as_float, is_small_float

__all__ = [
    "ROPE_KINDS",
    "Rope",
    "attention_factor",
    "inverse_frequencies",
    "log_offsets",
    "rotate",
    "rotated_gram",
]

ROPE_KINDS: tuple[str, ...] = ("default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional")
Pairs = Literal["half", "interleaved"]


@dataclass(frozen=True)
class Rope:
    """The rotary settings of one attention layer (names as in transformers' ``rope_parameters``).

    Parameters
    ----------
    rotary_dim : int
        r: rotated coordinates per head (even).
    theta : float
        Base of the frequencies.
    kind : str
        One of ROPE_KINDS: default, linear, dynamic, llama3, yarn, longrope, proportional.
    pairs : str
        How coordinates pair: "half" (i with i + r/2) or "interleaved" (2i with 2i + 1).
    rotary_start : int
        First rotated coordinate (multi-head latent attention rotates the tail).
    factor : float, optional
        The scaling kinds' factor.
    max_position_embeddings, original_max_position_embeddings : int, optional
        The model's context length, and the one it was trained at.
    low_freq_factor, high_freq_factor : float
        llama3's bands.
    beta_fast, beta_slow, mscale, mscale_all_dim : float
        yarn's ramp and attention scaling (mscale, mscale_all_dim optional).
    truncate : bool
        yarn: round the ramp's ends.
    attention_factor : float, optional
        yarn, longrope: the factor on cos and sin (None: the kind's default).
    short_factor, long_factor : tuple of float, optional
        longrope's per-frequency factors.
    rotated_fraction : float
        proportional: the share of the r/2 pairs that turn, with the frequencies of the whole
        head size (the rest have frequency 0); 1 for the other kinds.
    """

    rotary_dim: int  # r: rotated coordinates per head (even)
    theta: float = 10000.0  # base of the frequencies
    kind: str = "default"  # one of ROPE_KINDS
    pairs: Pairs = "half"
    rotary_start: int = 0  # first rotated coordinate (multi-head latent attention rotates the tail)
    factor: float | None = None
    max_position_embeddings: int | None = None  # the model's context length
    original_max_position_embeddings: int | None = None
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    truncate: bool = True  # yarn
    attention_factor: float | None = None  # yarn, longrope: None = the kind's default
    short_factor: tuple[float, ...] | None = None  # longrope
    long_factor: tuple[float, ...] | None = None  # longrope
    rotated_fraction: float = 1.0  # proportional: the share of the pairs that turn (partial_rotary_factor)

    def __post_init__(self) -> None:
        if self.kind not in ROPE_KINDS:
            raise ValueError(f"rope kind {self.kind!r} is not one of {', '.join(ROPE_KINDS)}")
        if self.rotary_dim <= 0 or self.rotary_dim % 2:
            raise ValueError(f"rotary_dim must be a positive even integer, got {self.rotary_dim}")
        if self.pairs not in ("half", "interleaved"):
            raise ValueError(f"pairs must be 'half' or 'interleaved', got {self.pairs!r}")
        if not 0.0 <= self.rotated_fraction <= 1.0:
            raise ValueError(f"rotated_fraction must be in [0, 1], got {self.rotated_fraction}")

    @property
    def scale_factor(self) -> float:
        """The kind's scaling factor (yarn and longrope default it to context / original context)."""
        if self.factor is not None:
            return float(self.factor)
        if self.max_position_embeddings and self.original_max_position_embeddings:
            return self.max_position_embeddings / self.original_max_position_embeddings
        return 1.0


def _default_frequencies(rotary_dim: int, theta: float) -> np.ndarray:
    return 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def _original_context(rope: Rope) -> float:
    context = rope.original_max_position_embeddings or rope.max_position_embeddings
    if not context:
        raise ValueError(f"rope kind {rope.kind!r} needs original_max_position_embeddings")
    return float(context)


def _yarn_frequencies(rope: Rope) -> np.ndarray:
    r, base, factor = rope.rotary_dim, rope.theta, rope.scale_factor
    context = _original_context(rope)
    extrapolated = _default_frequencies(r, base)
    interpolated = extrapolated / factor

    def correction_dim(rotations: float) -> float:
        return r * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001  # as transformers: avoid a zero-width ramp
    ramp = np.clip((np.arange(r // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    return interpolated * ramp + extrapolated * (1.0 - ramp)


def _llama3_frequencies(rope: Rope) -> np.ndarray:
    base = _default_frequencies(rope.rotary_dim, rope.theta)
    factor = rope.scale_factor
    context = _original_context(rope)
    wavelength = 2 * math.pi / base
    low_wavelength = context / rope.low_freq_factor
    high_wavelength = context / rope.high_freq_factor
    smooth = (context / wavelength - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    out = np.where(wavelength > low_wavelength, base / factor, base)
    medium = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
    return np.where(medium, (1 - smooth) * base / factor + smooth * base, out)


def inverse_frequencies(rope: Rope, seq_len: int | None = None) -> np.ndarray:
    """Angular frequencies w_k (k < r/2) of the rotation, float64.

    Parameters
    ----------
    rope : Rope
        The layer's settings.
    seq_len : int, optional
        The sequence length, for the dynamic kinds.

    Returns
    -------
    (r/2,) ndarray
    """
    r, theta = rope.rotary_dim, rope.theta
    if rope.kind == "default":
        return _default_frequencies(r, theta)
    if rope.kind == "linear":
        return _default_frequencies(r, theta) / rope.scale_factor
    if rope.kind == "dynamic":
        context = rope.max_position_embeddings
        if not context:
            raise ValueError("rope kind 'dynamic' needs max_position_embeddings")
        length = max(seq_len or context, context)
        factor = rope.scale_factor
        base = theta * ((factor * length / context) - (factor - 1)) ** (r / (r - 2))
        return _default_frequencies(r, base)
    if rope.kind == "llama3":
        return _llama3_frequencies(rope)
    if rope.kind == "proportional":
        # as transformers: int(p * r // 2) turning pairs at theta^(-2k/r), the other pairs still
        turning = int(rope.rotated_fraction * r // 2)
        w = _default_frequencies(r, theta)
        w[turning:] = 0.0
        return w / (1.0 if rope.factor is None else float(rope.factor))
    if rope.kind == "yarn":
        return _yarn_frequencies(rope)
    # longrope: per-frequency factors, the long set beyond the original context
    original = _original_context(rope)
    factors = rope.long_factor if seq_len and seq_len > original else rope.short_factor
    if factors is None or len(factors) != r // 2:
        raise ValueError(f"rope kind 'longrope' needs short_factor and long_factor of length {r // 2}")
    return _default_frequencies(r, theta) / np.asarray(factors, dtype=np.float64)


def attention_factor(rope: Rope) -> float:
    """The factor multiplying cos and sin (yarn, longrope; 1 otherwise): L_d scales by its square.

    Parameters
    ----------
    rope : Rope

    Returns
    -------
    float
    """
    if rope.attention_factor is not None:
        return float(rope.attention_factor)
    factor = rope.scale_factor
    if rope.kind == "yarn":

        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if rope.mscale and rope.mscale_all_dim:
            return mscale(factor, rope.mscale) / mscale(factor, rope.mscale_all_dim)
        return mscale(factor)
    if rope.kind == "longrope" and factor > 1:
        return math.sqrt(1 + math.log(factor) / math.log(_original_context(rope)))
    return 1.0


def _pair_indices(rope: Rope) -> tuple[np.ndarray, np.ndarray]:
    half = rope.rotary_dim // 2
    k = np.arange(half)
    if rope.pairs == "half":
        first, second = k, k + half
    else:
        first, second = 2 * k, 2 * k + 1
    return rope.rotary_start + first, rope.rotary_start + second


def rotate(x: np.ndarray, rope: Rope, offset: int, *, axis: int = -2) -> np.ndarray:
    """R_d x: rotate the head coordinates (along ``axis``) of x by offset d; a new float array.

    ``x`` may be W_Q batched over heads, (..., n, N), or any array whose
    ``axis`` runs over the n head coordinates. Coordinates a, b of pair k
    become g ((cos t) x_a - (sin t) x_b) and g ((sin t) x_a + (cos t) x_b)
    with t = d w_k and g the square of the attention factor (query and key
    each carry one): the relative rotation between a query at position j + d
    and a key at position j, as transformers applies them.

    Parameters
    ----------
    x : (..., n, N) ndarray
        W_Q (batched over heads), or any array whose ``axis`` runs over the n head coordinates.
    rope : Rope
        The layer's rotary settings.
    offset : int
        The relative offset d.
    axis : int
        The axis of the head coordinates.

    Returns
    -------
    ndarray
        R_d x, float, of the shape of ``x``.
    """
    x = np.asarray(x)
    # bfloat16 and float8 bits (base.small_floats) widen to float32, as ml_dtypes' types promote
    out = as_float(
        x, np.float32 if is_small_float(x.dtype) else np.result_type(x.dtype, np.float32), copy=True
    )
    gain = attention_factor(rope) ** 2
    if offset == 0 and gain == 1.0:
        return out
    angles = offset * inverse_frequencies(rope, seq_len=abs(offset) + 1)
    first, second = _pair_indices(rope)
    if second[-1] >= x.shape[axis]:
        raise ValueError(
            f"rotary coordinates up to {int(second[-1])} do not fit a head of {x.shape[axis]} coordinates"
        )
    cos = (gain * np.cos(angles)).astype(out.dtype)
    sin = (gain * np.sin(angles)).astype(out.dtype)
    view = np.moveaxis(out, axis, -1)  # writes through to out
    a, b = view[..., first], view[..., second]  # copies of x's values in out's dtype
    view[..., first] = cos * a - sin * b
    view[..., second] = sin * a + cos * b
    return out


def rotated_gram(G: np.ndarray, rope: Rope, offset: int) -> np.ndarray:
    """G_d = P_d G P_d^T, P_d = diag(I, R_d): the Gram matrix of (R_d W_Q, W_K) from that of (W_Q, W_K).

    ``G``: (..., 2n, 2n) with C = [W_K; W_Q] (keys first, as gram.head_gram).
    Equal to ``head_gram(rotate(w_query, rope, d), w_key)`` up to rounding.

    Parameters
    ----------
    G : (..., 2n, 2n) ndarray
        Gram matrices of C = [W_K; W_Q].
    rope : Rope
        The layer's rotary settings.
    offset : int
        The relative offset d.

    Returns
    -------
    (..., 2n, 2n) ndarray
        G_d.
    """
    G = np.asarray(G, dtype=np.float64)
    n = G.shape[-1] // 2
    out = G.copy()
    out[..., n:, :] = rotate(G[..., n:, :], rope, offset, axis=-2)  # query rows
    out[..., :, n:] = rotate(out[..., :, n:], rope, offset, axis=-1)  # query columns
    return out


def log_offsets(context: int) -> list[int]:
    """0, 1, 2, 4, ... (powers of two below ``context``) and ``context - 1``: log-spaced offsets.

    Parameters
    ----------
    context : int
        The model's context length.

    Returns
    -------
    list of int

    Examples
    --------
    >>> from qkenergy.math.rope import log_offsets
    >>> log_offsets(10)
    [0, 1, 2, 4, 8, 9]
    """
    if context < 1:
        raise ValueError(f"context length must be positive, got {context}")
    offsets = [0] + [2**k for k in range(int(math.log2(context)) + 1) if 2**k < context]
    if context - 1 not in offsets:
        offsets.append(context - 1)
    return offsets
