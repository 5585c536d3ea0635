"""analysis.analyze_model end to end: embedded MiniLM and a small synthetic GQA checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkenergy.analysis.analyze import (
    NULL_STATISTICS,
    analyze_model,
    layer_form_statistics,
)
from qkenergy.base.errors import QKEnergyError
from qkenergy.math.directionality import directionality, directionality_raw
from qkenergy.math.statistics import STATISTICS, dense_statistics, head_statistics

SAMPLES = 300


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One cache for the session: the MiniLM null law is drawn once for all test modules.
    return tmp_path_factory.getbasetemp() / "qkenergy-null-cache"


@pytest.fixture(scope="module")
def minilm(cache_dir: Path):
    return analyze_model(samples=SAMPLES, seed=0, cache_dir=cache_dir, per_layer=True)


# ----------------------------------------------------------------------------- MiniLM


def test_rows_and_numbering(minilm) -> None:
    df = minilm.heads
    assert len(df) == 72
    assert df["layer"].tolist() == [layer for layer in range(6) for _ in range(12)]
    assert df["head"].tolist() == list(range(12)) * 6
    assert (df["kv_head"] == df["head"]).all()  # no GQA in BERT
    assert (df["n"] == 32).all() and (df["N"] == 384).all()
    assert df["model"].nunique() == 1 and minilm.model == df["model"].iloc[0]


def test_columns(minilm) -> None:
    cols = list(minilm.heads.columns)
    assert cols[:10] == [
        "model", "stack", "layer", "head", "kv_head", "n", "N", "positional", "qk_norm", "quantization"
    ]  # fmt: skip
    assert cols[10 : 10 + len(STATISTICS)] == list(STATISTICS)
    assert (minilm.heads["quantization"] == "").all()  # plain float weights
    assert (minilm.heads["stack"] == "").all() and (minilm.heads["positional"] == "absolute").all()
    assert not minilm.heads["qk_norm"].any()
    for x in NULL_STATISTICS:
        for suffix in ("null_mean", "null_sd", "z", "p"):
            assert f"{x}_{suffix}" in cols
    assert {"head_type", "reason", "symmetric_energy_p_bh"} <= set(cols)
    assert cols[-2:] == ["alpha", "beta"]


def test_statistics_match_direct_call(minilm) -> None:
    """The table row of layer 2, head 5 equals head_statistics on the raw tensors."""
    from safetensors.numpy import load_file

    from qkenergy.weights.checkpoint import open_model

    with open_model(None) as source:
        root = source.root
    tensors = load_file(root / "model.safetensors")
    wq = tensors["encoder.layer.2.attention.self.query.weight"][5 * 32 : 6 * 32]
    wk = tensors["encoder.layer.2.attention.self.key.weight"][5 * 32 : 6 * 32]
    cols = head_statistics(wq, wk).columns()
    row = minilm.heads.query("layer == 2 and head == 5").iloc[0]
    for name in STATISTICS:
        np.testing.assert_allclose(row[name], cols[name][0], rtol=1e-12, atol=1e-15, err_msg=name)
    assert row["head_type"] == cols["head_type"][0]
    # Trimmed lobes: positive, decreasing, and s = ||alpha||^2 + ||beta||^2 in units of ||L||.
    alpha, beta = np.asarray(row["alpha"]), np.asarray(row["beta"])
    assert alpha.size == row["n_pos"] and beta.size == row["n_neg"]
    assert np.all(alpha > 0) and np.all(np.diff(alpha) <= 0)
    np.testing.assert_allclose(alpha @ alpha + beta @ beta, row["symmetric_energy"], rtol=1e-9)


def test_null_columns_sane(minilm) -> None:
    df = minilm.heads
    N = 384
    assert (df["symmetric_energy_null_mean"] == (N + 1) / (2 * N)).all()
    for x in NULL_STATISTICS:
        assert (df[f"{x}_null_sd"] > 0).all()
        p = df[f"{x}_p"].dropna()
        assert ((p > 0) & (p <= 1)).all()
        assert p.min() >= 1 / (SAMPLES + 1) - 1e-15
    z = df["symmetric_energy_z"]
    expected = (df["symmetric_energy"] - df["symmetric_energy_null_mean"]) / df["symmetric_energy_null_sd"]
    np.testing.assert_allclose(z, expected, rtol=1e-9)
    # Benjamini-Hochberg never lowers the p-value it is given and keeps the order; an
    # empirical p at the floor 2/(K+1) is given as its Beta tail approximation.
    p, tail = df["symmetric_energy_p"].to_numpy(), df["symmetric_energy_p_tail"].to_numpy()
    p = np.where(p <= 2 / (SAMPLES + 1) * (1 + 1e-12), tail, p)
    adj = df["symmetric_energy_p_bh"].to_numpy()
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)


def test_settings(minilm, cache_dir: Path) -> None:
    s = minilm.settings
    assert s["fold_norm"] is False and s["null"] is True and s["samples"] == SAMPLES
    assert s["layers"] == list(range(6)) and s["heads"] == list(range(12))
    assert s["cache_dir"] == str(cache_dir)
    json.dumps(s)  # settings are plain data


def test_per_layer_forms(minilm) -> None:
    layers = minilm.layers
    assert layers is not None and layers["layer"].tolist() == list(range(6))
    assert (layers["n"] == 384).all()
    np.testing.assert_allclose(layers["symmetry_score"], 2 * layers["symmetric_energy"] - 1)
    assert ((layers["directionality"] >= -1) & (layers["directionality"] <= 1)).all()
    # Saponati et al. 2025, all-MiniLM-L6-v2, as published (symmetry score and directionality).
    published = [-0.4108, -0.1128, -0.0568, -0.0835, -0.0586, -0.2128]
    np.testing.assert_allclose(layers["directionality"], published, atol=5e-5)
    np.testing.assert_allclose(layers["directionality_raw"], -layers["directionality"])
    assert (layers["symmetric_energy_baseline"] == 385 / 768).all()


def test_rotation_null_and_tail_columns(cache_dir: Path) -> None:
    """--null both on two MiniLM heads: rotation columns next to the Gaussian ones, Beta tails, BH."""
    a = analyze_model(
        layers=[0], heads=[0, 5], samples=SAMPLES, cache_dir=cache_dir, null_kind="both", rotation_samples=200
    )
    df = a.heads
    assert a.settings["null_kind"] == "both" and a.settings["rotation_samples"] == 200
    for x in NULL_STATISTICS:
        for suffix in ("rotation_null_mean", "rotation_null_sd", "rotation_z", "rotation_p"):
            assert df[f"{x}_{suffix}"].notna().all(), (x, suffix)
    # The exact mean (N+1)/(2N) holds under the rotation null of any head; its sd is near the Gaussian one.
    assert (df["symmetric_energy_rotation_null_mean"] == 385 / 768).all()
    ratio = df["symmetric_energy_rotation_null_sd"] / df["symmetric_energy_null_sd"]
    assert ((ratio > 0.7) & (ratio < 1.4)).all()
    for prefix in ("symmetric_energy", "symmetric_energy_rotation"):
        p, tail, adjusted = (df[f"{prefix}_{c}"].to_numpy() for c in ("p", "p_tail", "p_bh"))
        assert ((tail >= 0) & (tail <= 1)).all()
        # Both heads sit at the empirical floor, so BH runs on their Beta tails (far below it).
        assert (p == p.min()).all() and (adjusted < p).all()
    cols = list(df.columns)
    assert cols.index("symmetric_energy_p_bh") < cols.index("symmetric_energy_rotation_null_mean")
    assert cols[-2:] == ["alpha", "beta"]
    again = analyze_model(layers=[0], heads=[5], null_kind="rotation", rotation_samples=200)
    np.testing.assert_array_equal(  # seeded per (seed, layer, head): selection does not change a head's draws
        again.heads["pairing_rotation_null_sd"], df["pairing_rotation_null_sd"].iloc[1:]
    )
    assert again.heads["symmetric_energy_z"].isna().all()
    with pytest.raises(QKEnergyError, match="^null_kind must be one of"):
        analyze_model(layers=[0], null_kind="uniform")


def test_selection_and_no_null(cache_dir: Path) -> None:
    a = analyze_model(layers=[4, 1, 4], heads=[11, 0], null=False, cache_dir=cache_dir)
    df = a.heads
    assert df[["layer", "head"]].values.tolist() == [[1, 0], [1, 11], [4, 0], [4, 11]]
    null_cols = [c for c in df.columns if c.endswith(("_null_mean", "_null_sd", "_z", "_p", "_p_bh"))]
    assert len(null_cols) == 66 and df[null_cols].isna().all().all()  # Gaussian and rotation nulls
    assert a.layers is None and a.settings["samples"] == 0
    assert df["symmetric_energy"].notna().all()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"layers": [6]}, "layers: 6 is out of range; valid layers are 0..5"),
        ({"layers": [-1]}, "layers"),
        ({"layers": []}, "layers: empty"),
        ({"heads": [12]}, "heads: 12 is out of range; valid query heads are 0..11"),
        ({"heads": ["a"]}, "heads"),
        ({"samples": 0, "null": True}, "samples"),
        ({"radius": 1.5}, "radius"),
    ],
)
def test_selection_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(QKEnergyError, match="^" + needle.replace(".", r"\.").replace("-", r"\-")):
        analyze_model(**{"null": False, **kwargs})


# ----------------------------------------------------------------------------- synthetic GQA


def _llama_checkpoint(root: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """2 layers, N = 64, 8 query heads sharing 2 key heads, head_dim 8.

    Key head g equals query head 4g, so exactly heads 0 and 4 have a
    symmetric form (s = 1) when keys are mapped as h // 4.
    """
    from safetensors.numpy import save_file

    H, Hkv, n, N = 8, 2, 8, 64
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": H,
        "num_key_value_heads": Hkv,
        "hidden_size": N,
        "head_dim": n,
    }
    (root / "config.json").write_text(json.dumps(config))
    tensors = {}
    for i in range(2):
        wq = rng.standard_normal((H * n, N)).astype(np.float32)
        wk = wq.reshape(H, n, N)[:: H // Hkv].reshape(Hkv * n, N).copy()
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = wq
        tensors[f"model.layers.{i}.self_attn.k_proj.weight"] = wk
        tensors[f"model.layers.{i}.input_layernorm.weight"] = rng.uniform(0.5, 2, N).astype(np.float32)
    save_file(tensors, str(root / "model.safetensors"))
    return tensors


def test_gqa_mapping(tmp_path: Path, cache_dir: Path) -> None:
    tensors = _llama_checkpoint(tmp_path, np.random.default_rng(7))
    a = analyze_model(tmp_path, samples=SAMPLES, cache_dir=cache_dir, per_layer=True)
    df = a.heads
    assert len(df) == 16
    assert (df["kv_head"] == df["head"] // 4).all()
    assert (df["n"] == 8).all() and (df["N"] == 64).all()
    symmetric = df["head"].isin([0, 4])
    np.testing.assert_allclose(df.loc[symmetric, "symmetric_energy"], 1.0, rtol=1e-12)
    assert (df.loc[~symmetric, "symmetric_energy"] < 0.9).all()
    # Every row equals the direct computation with key head h // 4.
    wq = tensors["model.layers.1.self_attn.q_proj.weight"].reshape(8, 8, 64)
    wk = tensors["model.layers.1.self_attn.k_proj.weight"].reshape(2, 8, 64)
    direct = head_statistics(wq, wk[np.arange(8) // 4]).columns()
    layer1 = df[df["layer"] == 1]
    np.testing.assert_allclose(layer1["symmetric_energy"], direct["symmetric_energy"], rtol=1e-12)
    np.testing.assert_allclose(layer1["lobe_departure"], direct["lobe_departure"], rtol=1e-12)
    # The layer form is sum_h W_K^{h//4 T} W_Q^h.
    form = sum(wk[h // 4].astype(np.float64).T @ wq[h] for h in range(8))
    dense = dense_statistics(form).columns()
    row = a.layers[a.layers["layer"] == 1].iloc[0]
    assert row["n_heads"] == 8 and row["n_kv_heads"] == 2 and row["n"] == 64
    np.testing.assert_allclose(row["symmetric_energy"], dense["symmetric_energy"][0], rtol=1e-10)


def test_gqa_fold_norm(tmp_path: Path) -> None:
    tensors = _llama_checkpoint(tmp_path, np.random.default_rng(3))
    plain = analyze_model(tmp_path, null=False)
    folded = analyze_model(tmp_path, null=False, fold_norm=True)
    assert folded.settings["fold_norm"] is True and plain.settings["fold_norm"] is False
    gain = tensors["model.layers.0.input_layernorm.weight"].astype(np.float64)
    wq = tensors["model.layers.0.self_attn.q_proj.weight"].reshape(8, 8, 64) * gain
    wk = tensors["model.layers.0.self_attn.k_proj.weight"].reshape(2, 8, 64) * gain
    direct = head_statistics(wq, wk[np.arange(8) // 4]).columns()
    got = folded.heads[folded.heads["layer"] == 0]["symmetric_energy"]
    np.testing.assert_allclose(got, direct["symmetric_energy"], rtol=1e-6)
    assert not np.allclose(got, plain.heads[plain.heads["layer"] == 0]["symmetric_energy"])


# ----------------------------------------------------------------------------- layer forms


def test_layer_form_routes_agree() -> None:
    rng = np.random.default_rng(0)
    wq, wk = rng.standard_normal((2, 12, 40))
    gram, route_g = layer_form_statistics(wq, wk, route="gram")
    dense, route_d = layer_form_statistics(wq, wk, route="dense")
    assert (route_g, route_d) == ("gram", "dense")
    assert layer_form_statistics(wq, wk)[1] == "gram"  # 2Hn = 24 <= N = 40
    for name in ("symmetric_energy", "symmetry_score", "b_sym", "pairing", "trace_ratio", "directionality"):
        np.testing.assert_allclose(gram[name], dense[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_directionality_worked_by_hand() -> None:
    """Saponati et al.'s score on norms worked by hand: excess above mean + 2 sd (ddof = 1)."""
    rows = np.array([1.0] * 9 + [11.0])
    # mean 2, sample variance (9 x 1 + 81)/9 = 10: threshold 2 + 2 sqrt(10), excess R = 9 - 2 sqrt(10)
    R = 9 - 2 * np.sqrt(10)
    cols = np.array([1.0] * 8 + [3.0, 11.0])
    # mean 2.2, sample variance (8 x 1.44 + 0.64 + 77.44)/9 = 89.6/9: only 11 exceeds the threshold
    C = 11 - (2.2 + 2 * np.sqrt(89.6 / 9))
    raw = (C - R) / (C + R)
    assert raw == pytest.approx(-0.0360, abs=5e-5)  # ddof = 0 would give -0.0321, whole norms 0
    assert directionality_raw(rows, cols) == pytest.approx(raw, rel=1e-12)
    assert directionality(rows, cols) == pytest.approx(-raw, rel=1e-12)  # the published sign
    flat = np.ones(50)
    assert directionality_raw(flat, flat) == 0.0  # C + R = 0
    assert np.isnan(directionality(np.zeros(5), np.zeros(5)))  # L = 0
    spiky = np.array([1.0] * 19 + [30.0])
    assert directionality_raw(np.ones(20), spiky) == 1.0  # one dominant column only
    assert directionality(np.ones(20), spiky) == -1.0
    # Vectorised over a batch, row by row as above.
    batch = directionality_raw(np.stack([rows, np.ones(10)]), np.stack([cols, np.ones(10)]))
    np.testing.assert_allclose(batch, [raw, 0.0], rtol=1e-12)


def test_directionality_orientation() -> None:
    # M = W_Q^T W_K = K when W_Q = I: one key-side feature (column 7 of M) reaches every
    # query-side feature equally, every row has the same norm: raw +1, published -1.
    N = 64
    K = np.zeros((N, N))
    K[:, 7] = 1.0
    others = [j for j in range(N) if j != 7]
    K[np.arange(N), [others[i % len(others)] for i in range(N)]] = 0.1
    for route in ("gram", "dense"):
        forward, _ = layer_form_statistics(np.eye(N), K, route=route)
        backward, _ = layer_form_statistics(K, np.eye(N), route=route)  # M -> M^T
        assert forward["directionality_raw"] == pytest.approx(1.0)
        assert forward["directionality"] == pytest.approx(-1.0)
        assert backward["directionality_raw"] == pytest.approx(-1.0)
        assert backward["directionality"] == pytest.approx(1.0)


def test_threads_change_nothing(tmp_path: Path, cache_dir: Path) -> None:
    # Heads and null blocks spread over threads give bitwise the same table as one thread.
    _llama_checkpoint(tmp_path, np.random.default_rng(11))
    one = analyze_model(tmp_path, samples=SAMPLES, seed=5, threads=1)
    two = analyze_model(tmp_path, samples=SAMPLES, seed=5, threads=2)
    assert one.settings["threads"] == 1 and two.settings["threads"] == 2
    columns = [c for c in one.heads.columns if c not in ("alpha", "beta")]
    assert one.heads[columns].equals(two.heads[columns])
    with pytest.raises(QKEnergyError, match="^threads must be"):
        analyze_model(tmp_path, null=False, threads=0)
