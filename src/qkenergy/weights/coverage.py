"""Which config.json ``model_type`` values qkenergy reads, and why the others are not read.

Every model_type falls in one of three classes: ``supported`` (a family of
:data:`qkenergy.weights.families.FAMILIES`, proven against the transformers
class it names), ``not bilinear`` (the model has no attention whose scores are
a bilinear form of two tokens: :data:`NOT_BILINEAR` gives the reason, decided
by reading the model's code, never guessed at run time) or ``not yet
supported`` (it has softmax attention, but no layout has been written and
proven for it). :func:`coverage` classifies a list of model types, e.g. every
type of the installed transformers (``qkenergy layouts --coverage``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from qkenergy.weights.families import FAMILIES

__all__ = ["COVERAGE_COLUMNS", "NOT_BILINEAR", "STATUSES", "coverage", "coverage_counts", "coverage_line"]

STATUSES: tuple[str, ...] = ("supported", "not bilinear", "not yet supported")
COVERAGE_COLUMNS: tuple[str, ...] = ("model_type", "status", "detail")

_CONVOLUTION = "convolution only: no attention"
_CODEC = "audio codec or vocoder: convolutions (and recurrences), no attention"
_OCR_DETECTION = "text detection network: convolutions, no attention"
_HEAD = "no attention of its own: a convolutional head over a backbone of another model_type"
_MAMBA = "state-space model (Mamba selective scan): no attention"

# model_type -> why its scores are not a bilinear form (read from each model's code).
NOT_BILINEAR: dict[str, str] = {
    # vision backbones without attention
    "bit": _CONVOLUTION,
    "convnext": _CONVOLUTION,
    "convnextv2": _CONVOLUTION,
    "dinov3_convnext": _CONVOLUTION,
    "efficientnet": _CONVOLUTION,
    "hgnet_v2": _CONVOLUTION,
    "mobilenet_v1": _CONVOLUTION,
    "mobilenet_v2": _CONVOLUTION,
    "regnet": _CONVOLUTION,
    "resnet": _CONVOLUTION,
    "pp_lcnet": _CONVOLUTION,
    "pp_lcnet_v3": _CONVOLUTION,
    "pp_lcnet_v4": _CONVOLUTION,
    "textnet": _CONVOLUTION,
    "superpoint": _CONVOLUTION,
    "uvdoc": _CONVOLUTION,
    "pp_ocrv5_mobile_det": _OCR_DETECTION,
    "pp_ocrv5_server_det": _OCR_DETECTION,
    "pp_ocrv6_medium_det": _OCR_DETECTION,
    "pp_ocrv6_small_det": _OCR_DETECTION,
    # token mixers that are not attention
    "poolformer": "token mixing by average pooling: no attention",
    "fnet": "token mixing by a Fourier transform: no attention",
    "focalnet": "focal modulation (convolutions and gating): no pairwise token scores",
    # heads over a backbone
    "upernet": _HEAD,
    "depth_anything": _HEAD,
    "prompt_depth_anything": _HEAD,
    "vitmatte": _HEAD,
    # audio codecs and vocoders
    "dac": _CODEC,
    "encodec": _CODEC,
    "univnet": _CODEC,
    "higgs_audio_v2_tokenizer": _CODEC,
    "vibevoice_acoustic_tokenizer": _CODEC,
    "vibevoice_acoustic_tokenizer_encoder": _CODEC,
    "vibevoice_acoustic_tokenizer_decoder": _CODEC,
    "fastspeech2_conformer_hifigan": _CODEC,
    "speecht5_hifigan": _CODEC,
    # recurrences and state-space models
    "mamba": _MAMBA,
    "mamba2": "state-space model (Mamba-2 state-space duality): no softmax attention",
    "falcon_mamba": _MAMBA,
    "rwkv": "linear attention only: RWKV's time-mixing recurrence (WKV), no softmax over token pairs",
    "xlstm": "recurrent cells (mLSTM, sLSTM): no softmax attention",
    "yoso": "linear attention only: scores estimated by LSH Bernoulli sampling, no softmax of q . k",
    # issue 18, second round: attention-like mixers without token-pair scores
    "swiftformer": "efficient additive attention: a learned vector scores each query alone (q_i . w), "
    "pooled into one global query; no token-pair q . k",
    "mobilevitv2": "separable self-attention: a one-channel projection scores each patch alone, softmax "
    "over patches; no token-pair q . k",
    "cvt": "convolutional projections: each query and key is a depthwise convolution over a 3 x 3 "
    "neighbourhood of tokens, so a score is not a form of the two tokens alone",
    "nystromformer": "Nystrom approximation: scores against segment-mean landmarks, never the token-pair "
    "q_i . k_j (exact softmax only when num_landmarks equals the sequence length)",
}


def coverage(model_types: Iterable[str]) -> list[dict[str, str]]:
    """One row per model_type (sorted): its status and, for ``supported`` the class that proves it,
    for ``not bilinear`` the reason (columns COVERAGE_COLUMNS).

    Parameters
    ----------
    model_types : iterable of str
        The model types to classify (duplicates are counted once).

    Returns
    -------
    list of dict of str to str
        Rows with the keys ``model_type``, ``status`` and ``detail``.
    """
    rows = []
    for model_type in sorted(set(model_types)):
        if model_type in FAMILIES:
            proof = FAMILIES[model_type].proof
            status, detail = "supported", f"proven by transformers {proof}" if proof else "not proven"
        elif model_type in NOT_BILINEAR:
            status, detail = "not bilinear", NOT_BILINEAR[model_type]
        else:
            status, detail = "not yet supported", ""
        rows.append({"model_type": model_type, "status": status, "detail": detail})
    return rows


def coverage_counts(rows: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """How many rows have each status (every status of STATUSES, zero included).

    Parameters
    ----------
    rows : iterable of mapping
        Rows of :func:`coverage` (their ``status``).

    Returns
    -------
    dict of str to int
        Status -> number of rows.
    """
    counts = dict.fromkeys(STATUSES, 0)
    for row in rows:
        counts[row["status"]] += 1
    return counts


def coverage_line(rows: Iterable[Mapping[str, str]], where: str) -> str:
    """The counts in one sentence (the README's line): ``where`` names the list, e.g. its transformers.

    Parameters
    ----------
    rows : iterable of mapping
        Rows of :func:`coverage`.
    where : str
        What the list of model types is, in the sentence.

    Returns
    -------
    str
    """
    rows = list(rows)
    counts = coverage_counts(rows)
    return (
        f"{counts['supported']} of the {len(rows)} model types of {where} are supported, "
        f"{counts['not bilinear']} have no bilinear attention, {counts['not yet supported']} are not yet supported"
    )
