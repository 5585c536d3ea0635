"""RoPE offsets: the rotation math, the settings read from configs, the offset rows of analyze, the plot.

The end-to-end proof against transformers' attention scores is tests/cross/test_rope_reference.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from qkenergy import cli
from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.base.errors import ArgumentError
from qkenergy.figures.plots import plot_results
from qkenergy.math.rope import Rope, inverse_frequencies, log_offsets, rotate, rotated_gram
from qkenergy.math.statistics import head_statistics
from qkenergy.weights.architecture import architecture
from qkenergy.weights.rope_settings import layer_ropes

KINDS = {
    "default": Rope(8, 500.0),
    "linear": Rope(8, 500.0, "linear", factor=3.0),
    "dynamic": Rope(8, 500.0, "dynamic", factor=2.0, max_position_embeddings=16),
    "llama3": Rope(8, 500.0, "llama3", factor=8.0, original_max_position_embeddings=64),
    "yarn": Rope(8, 500.0, "yarn", factor=4.0, original_max_position_embeddings=64),
    "longrope": Rope(
        8,
        500.0,
        "longrope",
        max_position_embeddings=256,
        original_max_position_embeddings=32,
        short_factor=(1.0, 1.5, 2.0, 3.0),
        long_factor=(1.0, 3.0, 6.0, 12.0),
    ),
    # Gemma 4's full layers: 2 of the 4 pairs turn (theta^(-2k/8)), divided by the factor
    "proportional": Rope(8, 500.0, "proportional", factor=2.0, rotated_fraction=0.5),
}


def _transformers_config(rope: Rope) -> dict:
    """The same settings as a transformers-5 llama config dict (head_dim = rotary_dim)."""
    params = {"rope_type": rope.kind, "rope_theta": rope.theta}
    for key in ("factor", "original_max_position_embeddings"):
        if getattr(rope, key) is not None:
            params[key] = getattr(rope, key)
    if rope.kind == "llama3":
        params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if rope.kind == "longrope":
        params.update(short_factor=list(rope.short_factor), long_factor=list(rope.long_factor))
    if rope.kind == "proportional":
        params.update(partial_rotary_factor=rope.rotated_fraction)
    return dict(
        model_type="llama",
        hidden_size=16,
        num_attention_heads=2,
        num_hidden_layers=1,
        head_dim=8,
        max_position_embeddings=rope.max_position_embeddings or 512,
        rope_parameters=params,
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_frequencies_and_attention_factor_match_transformers(kind: str) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from qkenergy.math.rope import attention_factor

    rope = KINDS[kind]
    config = transformers.LlamaConfig(**_transformers_config(rope))
    # Our settings reader gives back the same Rope from the config's dict.
    read = layer_ropes(config.to_dict(), architecture(config.to_dict()))[0]
    assert read.kind == kind and read.theta == rope.theta and read.rotary_dim == 8
    for seq_len in (None, 8, 100, 300):
        if kind == "default":
            want = 1.0 / rope.theta ** (np.arange(0, 8, 2) / 8)
            factor = 1.0
        else:
            torch_freq, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len=seq_len)
            want = torch_freq.double().numpy()
        got = inverse_frequencies(read, seq_len)
        np.testing.assert_allclose(got, want, rtol=2e-6, err_msg=f"{kind} seq_len={seq_len}")
        assert attention_factor(read) == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("pairs", ["half", "interleaved"])
def test_rotation_is_a_relative_rotation(pairs: str) -> None:
    rng = np.random.default_rng(0)
    rope = Rope(6, 100.0, pairs=pairs, rotary_start=1)  # partial: coordinates 1..6 of 8 rotate
    w = rng.standard_normal((3, 8, 20))
    r5 = rotate(w, rope, 5)
    np.testing.assert_allclose(np.linalg.norm(r5, axis=1), np.linalg.norm(w, axis=1), rtol=1e-12)
    np.testing.assert_array_equal(r5[:, [0, 7]], w[:, [0, 7]])  # coordinates outside the rotary range
    np.testing.assert_allclose(rotate(rotate(w, rope, 2), rope, 3), r5, atol=1e-12)  # R_2 R_3 = R_5
    np.testing.assert_allclose(rotate(r5, rope, -5), w, atol=1e-12)
    np.testing.assert_array_equal(rotate(w, rope, 0), w)
    # The two pairings differ by a permutation of the rotated coordinates.
    other = Rope(6, 100.0, pairs="interleaved" if pairs == "half" else "half", rotary_start=1)
    assert not np.allclose(rotate(w, other, 5), r5)


def test_rotated_gram_is_the_gram_of_the_rotated_head() -> None:
    rng = np.random.default_rng(1)
    wq, wk = rng.standard_normal((2, 4, 8, 40))
    rope = KINDS["yarn"]  # attention factor != 1: R_d is not orthogonal, the identity still holds
    C = np.concatenate([wk, wq], axis=1)
    G = C @ np.swapaxes(C, 1, 2)
    for d in (0, 1, 7, 1000):
        Cd = np.concatenate([wk, rotate(wq, rope, d)], axis=1)
        np.testing.assert_allclose(
            rotated_gram(G, rope, d), Cd @ np.swapaxes(Cd, 1, 2), rtol=1e-12, atol=1e-10
        )


def test_log_offsets() -> None:
    assert log_offsets(1) == [0]
    assert log_offsets(2) == [0, 1]
    assert log_offsets(9) == [0, 1, 2, 4, 8]
    assert log_offsets(2048) == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2047]


def test_settings_from_older_configs() -> None:
    def read(config: dict) -> list[Rope]:
        base = {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 32}
        full = {**base, **config}
        return layer_ropes(full, architecture(full))

    neox = read(
        {"model_type": "gpt_neox", "rotary_pct": 0.25, "rotary_emb_base": 500, "max_position_embeddings": 64}
    )
    assert neox[0] == Rope(4, 500.0, max_position_embeddings=64)
    llama = read(
        {
            "model_type": "llama",
            "rope_theta": 500000.0,
            "rope_scaling": {"type": "linear", "factor": 2.0},
        }
    )[1]
    assert (llama.kind, llama.theta, llama.factor, llama.rotary_dim) == ("linear", 500000.0, 2.0, 16)
    # gemma3 before transformers 5: sliding layers use rope_local_base_freq.
    gemma = read(
        {
            "model_type": "llama",
            "rope_theta": 1e6,
            "rope_local_base_freq": 1e4,
            "layer_types": ["sliding_attention", "full_attention"],
        }
    )
    assert [r.theta for r in gemma] == [1e4, 1e6]
    with pytest.raises(ArgumentError, match="has no rotary position embedding"):
        read({"model_type": "bert"})
    with pytest.raises(Exception, match="rope_type 'mrope' is not supported"):
        read({"model_type": "llama", "rope_scaling": {"rope_type": "mrope"}})


def _llama_dir(root: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 48,
        "head_dim": 8,
        "max_position_embeddings": 100,
        "rope_theta": 100.0,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    tensors = {}
    for i in range(2):
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = rng.standard_normal((32, 48)).astype(
            np.float32
        )
        tensors[f"model.layers.{i}.self_attn.k_proj.weight"] = rng.standard_normal((16, 48)).astype(
            np.float32
        )
    save_file(tensors, str(root / "model.safetensors"))
    return tensors


def test_offset_rows_are_the_rotated_heads(tmp_path: Path) -> None:
    tensors = _llama_dir(tmp_path / "m")
    cache = tmp_path / "cache"
    result = analyze_model(
        tmp_path / "m", rope_offsets=[3, 0, 17], samples=200, cache_dir=cache, per_layer=True
    )
    df = result.heads
    assert list(df.columns[:6]) == ["model", "stack", "layer", "head", "kv_head", "offset"]
    assert len(df) == 2 * 3 * 4 and result.settings["rope_offsets"] == [0, 3, 17]
    rope = Rope(8, 100.0, max_position_embeddings=100)
    wq = tensors["model.layers.1.self_attn.q_proj.weight"].reshape(4, 8, 48).astype(np.float64)
    wk = tensors["model.layers.1.self_attn.k_proj.weight"].reshape(2, 8, 48).astype(np.float64)[[0, 0, 1, 1]]
    for d in (0, 3, 17):
        rows = df[(df["layer"] == 1) & (df["offset"] == d)]
        direct = head_statistics(rotate(wq, rope, d), wk).columns()
        for name in ("symmetric_energy", "pairing", "lobe_departure"):
            np.testing.assert_allclose(rows[name], direct[name], rtol=1e-9, err_msg=f"{name} d={d}")
        # L_d has the null law of L: the same null columns at every offset.
        np.testing.assert_array_equal(
            rows["symmetric_energy_null_mean"], df["symmetric_energy_null_mean"].iloc[0]
        )
    plain = analyze_model(tmp_path / "m", null=False).heads
    np.testing.assert_allclose(
        df[df["offset"] == 0]["symmetric_energy"], plain["symmetric_energy"], rtol=1e-12
    )
    assert not np.allclose(df[df["offset"] == 17]["symmetric_energy"], plain["symmetric_energy"])
    assert result.layers is not None and list(result.layers["offset"]) == [0, 3, 17, 0, 3, 17]

    paths = plot_results(df, tmp_path / "figs", null=NullSpec(samples=200), cache_dir=cache, formats=["png"])
    assert paths[0].name == "symmetric_energy_offsets.png" and paths[0].stat().st_size > 5000

    log = analyze_model(tmp_path / "m", rope_offsets="log", null=False)
    assert sorted(log.heads["offset"].unique()) == [0, 1, 2, 4, 8, 16, 32, 64, 99]


def test_rope_offsets_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _llama_dir(tmp_path / "m")
    out = tmp_path / "heads.csv"
    with pytest.raises(SystemExit) as status:
        cli.main(
            [
                "analyze",
                str(tmp_path / "m"),
                "--rope-offsets",
                "0,2-3",
                "--no-null",
                "--quiet",
                "-o",
                str(out),
            ]
        )
    assert status.value.code in (0, None)
    import pandas as pd

    assert sorted(pd.read_csv(out)["offset"].unique()) == [0, 2, 3]
    for args in (["--rope-offsets", "x"], ["--rope-offsets", "-1"], ["--rope-offsets", "0-100000000"]):
        with pytest.raises(SystemExit) as status:
            cli.main(["analyze", str(tmp_path / "m"), *args, "--no-null", "--quiet"])
        err = capsys.readouterr().err
        assert status.value.code == 2 and len(err.splitlines()) == 1 and "--rope-offsets" in err
    # The embedded MiniLM (BERT) has no rotary embedding: a bad argument for it.
    with pytest.raises(SystemExit) as status:
        cli.main(["analyze", "--rope-offsets", "log", "--no-null", "--quiet"])
    err = capsys.readouterr().err
    assert status.value.code == 2 and "no rotary position embedding" in err and len(err.splitlines()) == 1


def test_summary_reads_each_head_once_at_the_first_offset(tmp_path: Path) -> None:
    """With --rope-offsets the summary's tables hold each head once (the first offset), not (head, offset)."""
    from rich.console import Console

    from qkenergy.analysis.summary import print_summary

    _llama_dir(tmp_path / "m")
    result = analyze_model(tmp_path / "m", rope_offsets=[5, 2], null=False, per_layer=True)
    console = Console(record=True, width=200)
    print_summary(result, console, top=2)
    text = console.export_text()
    assert "8 heads in 2 layers" in text  # 2 layers x 4 heads, not 16 (head, offset) rows
    assert "the tables below read offset d = 2" in text and "5: " in text
    first = result.heads[result.heads["offset"] == 2]
    assert f"{first['symmetric_energy'].max():.4f}" in text  # the most symmetric head at d = 2
