"""benchmarks/hub_shapes.py: repositories with the real shapes of three large checkpoints, as sparse
files, read by qkenergy's own reader; the floor it computes is what that reader reads; and the harness
of benchmarks/bench_hub.py on a small shape (when tests/loopback_hub.py is there)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qkenergy as qk
from qkenergy.base.small_floats import as_float, is_small_float
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.safetensors_io import SafetensorsFile

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


hs = _module(ROOT / "benchmarks" / "hub_shapes.py")


def _params(repo: Any, prefix: str = "") -> float:
    """Parameters (elements of every tensor but the FP8 block scales) whose name starts with prefix, in billions."""
    return (
        sum(
            math.prod(t.shape)
            for t in repo.tensors.values()
            if t.name.startswith(prefix) and not t.name.endswith("weight_scale_inv")
        )
        / 1e9
    )


@pytest.mark.parametrize(
    ("key", "shards", "first", "gb", "billions"),
    [
        ("llama", 191, "model-00001-of-00191.safetensors", 810, 405.85),  # Llama 3 paper: 405B
        ("qwen3", 118, "model-00001-of-00118.safetensors", 470, 235.1),  # model card: 235B total
        ("deepseek", 163, "model-00001-of-000163.safetensors", 690, 684.5),  # model card: 685B total
    ],
)
def test_real_shapes(key: str, shards: int, first: str, gb: int, billions: float) -> None:
    """The real shard count and names, sizes of the published repositories, state-dict order kept."""
    repo = hs.plan(key)
    assert len(repo.shards) == shards and repo.shards[0].name == first
    assert abs(hs.repo_size(repo) / 1e9 / gb - 1) < 0.01
    assert abs(_params(repo) - billions) < 0.05
    # every tensor in one shard; the shards cut the state-dict order into consecutive runs
    order = list(repo.tensors)
    assert [repo.where[n] for n in order] == sorted(repo.where[n] for n in order)
    assert sum(len(s.ranges) for s in repo.shards) == len(order)
    index = json.loads(repo.index_bytes)
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in repo.tensors.values())
    assert set(index["weight_map"]) == set(order)


def test_deepseek_main_and_mtp() -> None:
    """DeepSeek-V3's card: 671B of main model and the MTP module as layer 61, outside num_hidden_layers."""
    repo = hs.plan("deepseek")
    assert abs(_params(repo) - _params(repo, "model.layers.61.") - 671.0) < 0.1
    assert repo.attention_layers == 61 and "model.layers.61.self_attn.q_a_proj.weight" in repo.tensors
    assert repo.tensors["model.layers.61.self_attn.kv_a_proj_with_mqa.weight_scale_inv"].shape == (5, 56)
    assert repo.tensors["model.layers.3.mlp.gate.e_score_correction_bias"].dtype == "F32"
    with pytest.raises(ValueError, match="layer 61 out of range"):
        hs.floor(repo, [61])


def _recorded_reads(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names qkenergy reads from safetensors files from now on."""
    read: set[str] = set()
    original = SafetensorsFile.tensor

    def tensor(self: SafetensorsFile, name: str) -> np.ndarray:
        read.add(name)
        return original(self, name)

    monkeypatch.setattr(SafetensorsFile, "tensor", tensor)
    return read


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Qwen3-235B-A22B's widths with 2 layers (3 shards), layer 0 filled."""
    folder, repo = hs.build(tmp_path_factory.mktemp("hub-shapes"), "qwen3", layers=2, filled=[0])
    return folder, repo


def test_sparse_headers_read_by_qkenergy(qwen: tuple[Path, Any]) -> None:
    """The holes take no disk; qkenergy's header parser finds every tensor where the plan put it."""
    folder, repo = qwen
    assert len(repo.shards) == 3
    assert hs.disk_usage(folder) < 0.05 * hs.repo_size(repo)
    for shard in repo.shards:
        sf = SafetensorsFile(folder / shard.name)
        assert sf.metadata == {"format": "pt"}
        for name, (begin, end) in shard.ranges.items():
            info = sf.info(name)
            assert (info.begin, info.end) == (shard.header_bytes + begin, shard.header_bytes + end)
            assert (info.dtype, info.shape) == (repo.tensors[name].dtype, repo.tensors[name].shape)
        sf.close()


@pytest.mark.parametrize("fold_norm", [False, True])
def test_floor_is_what_qkenergy_reads(
    qwen: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch, fold_norm: bool
) -> None:
    """Analysing layer 0 reads exactly the floor's tensors and gives finite heads near the random baseline."""
    folder, repo = qwen
    read = _recorded_reads(monkeypatch)
    result = qk.analyze(str(folder), layers=[0], null=False, fold_norm=fold_norm)
    fl = hs.floor(repo, [0], fold_norm=fold_norm)
    assert read == set(fl.tensors)
    assert set(fl.headers) == {repo.shards[repo.where[n]].name for n in read}
    assert fl.total == sum(fl.files.values()) + sum(fl.headers.values()) + sum(fl.tensors.values())
    heads = result.heads
    assert len(heads) == 64 and set(heads["n"]) == {128} and set(heads["N"]) == {4096}
    s = heads["symmetric_energy"].to_numpy()
    # Gaussian heads: s has mean (N+1)/(2N) and sd about 1e-4 here; 0.01 is far outside chance
    assert np.all(np.isfinite(s)) and np.all(np.abs(s - 0.5) < 0.01)


def test_deepseek_fp8_blocks(tmp_path: Path) -> None:
    """FP8 weights dequantise through qkenergy to the seeded values within e4m3's rounding; holes read 0."""
    folder, repo = hs.build(tmp_path, "deepseek", layers=4, shards=4, filled=[3])
    assert repo.config["num_hidden_layers"] == 4 and "model.layers.4.eh_proj.weight" in repo.tensors
    with open_model(folder) as source:
        name = "model.layers.3.self_attn.kv_a_proj_with_mqa.weight"  # 576 rows: a partial last block
        w = source.tensors.tensor(name)
        assert w.shape == (576, 7168) and w.dtype == np.float32
        raw = source.tensors.inner.tensor(name)  # the stored float8 bits, widened by as_float
        assert is_small_float(raw.dtype) and raw.dtype.itemsize == 1
        scale = source.tensors.inner.tensor(name + "_scale_inv")
        assert scale.shape == (5, 56) and np.all(scale > 0) and np.all(np.isfinite(scale))
        # each block's largest code is e4m3's largest finite value, 448: the scale is amax / 448
        codes = np.abs(as_float(raw))
        assert codes[:128, :128].max() == 448.0 and codes[512:, 7040:].max() == 448.0
        assert abs(float(w.std()) - 0.02) < 0.001  # 4.1M draws of sd 0.02, e4m3 rounding ~3% each
        gain = as_float(source.tensors.tensor("model.layers.3.self_attn.kv_a_layernorm.weight"))
        assert gain.shape == (512,) and abs(float(gain.mean()) - 1) < 0.02  # 1 + 0.1 x normal: se 0.0044
        assert not np.any(as_float(source.tensors.tensor("model.layers.0.self_attn.q_a_proj.weight")))


def _tiny_llama() -> Any:
    """The Llama-3.1-405B layout at a tiny size: 3 layers of 4 heads over 3 shards."""
    return dataclasses.replace(
        hs.MODELS["llama"],
        repo_id="tiny/llama",
        config={
            **hs.LLAMA_405B,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 512,
            "vocab_size": 1000,
            "num_hidden_layers": 3,
        },
        shards=3,
    )


def test_build_is_cached(tmp_path: Path) -> None:
    """A second build keeps the files; another seed rewrites them; a folder not built here is refused."""
    small = _tiny_llama()
    folder, repo = hs.build(tmp_path, small)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    hs.build(tmp_path, small)
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps
    q = "model.layers.1.self_attn.q_proj.weight"
    before = SafetensorsFile(folder / repo.shards[repo.where[q]].name).tensor(q).copy()
    hs.build(tmp_path, small, seed=1)
    after = SafetensorsFile(folder / repo.shards[repo.where[q]].name).tensor(q)
    assert np.any(before != after)
    foreign = tmp_path / "other"
    (foreign / "tiny--llama").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="not written by hub_shapes"):
        hs.build(foreign, small)


def test_bench_hub_harness(tmp_path: Path) -> None:
    """bench_hub.measure on a tiny llama shape through the loopback hub: every run succeeds, the hub's
    table equals the local one, the rerun fetches nothing, and at least the floor is fetched."""
    pytest.importorskip("huggingface_hub")
    bench = _module(ROOT / "benchmarks" / "bench_hub.py")
    small = _tiny_llama()
    (result,) = list(bench.measure([small], tmp_path / "repos", [0, 1], work=tmp_path, log=None))
    for run in (result.local, result.hub, result.rerun, result.offline):
        assert run.returncode == 0, run.stderr
    assert result.equal_tables is True
    assert result.hub.fetched >= result.floor and result.rerun.fetched == 0
    assert result.hub.fetched <= result.bound
    assert "tiny/llama" in bench.report(result)
