"""The experiment's pieces (examples/encoder_vs_decoder.py) and the result docs/training.md quotes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy.analysis.analyze import analyze_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _experiment() -> Any:
    spec = importlib.util.spec_from_file_location(
        "encoder_vs_decoder", ROOT / "examples" / "encoder_vs_decoder.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_checkpoints_are_log_spaced_and_end_at_the_last_step() -> None:
    checkpoint_steps = _experiment().checkpoint_steps
    # four per decade: 10^(k/4) rounded
    assert checkpoint_steps(1000) == [1, 2, 3, 6, 10, 18, 32, 56, 100, 178, 316, 562, 1000]
    assert checkpoint_steps(20) == [1, 2, 3, 6, 11, 20]
    assert checkpoint_steps(3)[-1] == 3


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_symmetric_init_makes_every_head_symmetric(kind: str) -> None:
    experiment = _experiment()
    torch.manual_seed(0)
    if kind == "encoder":
        config = transformers.BertConfig(
            vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
        model = transformers.BertForMaskedLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16)
        model = transformers.GPT2LMHeadModel(config)
    before = analyze_model(model, null=False).heads["symmetric_energy"].to_numpy()
    assert np.all(before < 0.9)
    experiment.symmetric_init(model)
    after = analyze_model(model, null=False).heads["symmetric_energy"].to_numpy()
    np.testing.assert_allclose(after, 1.0, rtol=0, atol=1e-12)  # L = W_Q^T W_Q is symmetric


@pytest.mark.parametrize(
    ("record", "marker", "inits"),
    [
        ("encoder_vs_decoder.json", "encoder_vs_decoder", {"default", "symmetric"}),
        ("encoder_vs_decoder_lr3e-3.json", "encoder_vs_decoder lr3e-3", {"default", "symmetric"}),
    ],
)
def test_the_docs_quote_the_recorded_results(record: str, marker: str, inits: set[str]) -> None:
    """docs/training.md's result tables are the ones the recorded runs' summaries give."""
    experiment = _experiment()
    summary = json.loads((ROOT / "docs" / record).read_text(encoding="utf-8"))
    start, end = f"<!-- {marker}: start -->\n", f"<!-- {marker}: end -->"
    for page in ("docs/training.md", *(["README.md"] if marker == "encoder_vs_decoder" else [])):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert start in text and end in text, page
        assert text.split(start, 1)[1].split(end, 1)[0] == experiment.results_markdown(summary), page
    assert summary["steps"] == 1000 and set(summary["split"]) == inits
    assert max(summary["tracked_equals_survey"]["max_abs_difference"].values()) <= 1e-9
