"""A quantisation method is one class and one registration: a toy method, registered here, reads through analyze.

The toy stores each weight as int8 values ``<module>.weight_toy`` and one float32
scale per output row ``<module>.toy_scale`` (a storage of its own, W = q * s):
nothing outside this file knows it, yet config.json naming it is parsed, its parts
are found, named and fingerprinted, and analyze gives the symmetric energy of the
dequantised weights (the same independent reference as every other method).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.quantization import (
    METHODS,
    Quantization,
    QuantMethod,
    Storage,
    parse_quantization,
    register,
)
from qkenergy.weights.quantization.grids import dequantize_grid
from qkenergy.weights.quantization.method import STORAGES, StoredWeight
from tests.weights.test_quantization import (
    LAYERS,
    SHAPES,
    check,
    module,
    spread_scales,
    torch,
    write_checkpoint,
)

TOY = Storage("toy", ("weight_toy", "toy_scale"), marker="weight_toy")


class ToyRows(QuantMethod):
    """int8 values, one scale per output row."""

    name = "toy-rows"
    storages = (TOY,)
    needs = "weight_toy (int8) and toy_scale"

    def parse(self, raw: Mapping[str, Any], where: str) -> Quantization:
        return Quantization(self.name, "int8", 8, where, symmetric=True)

    def label(self, q: Quantization) -> str:
        return "toy int8 rows"

    def shape(self, weight: StoredWeight) -> tuple[int, int]:
        rows, cols = weight.stored_shape("weight_toy")
        return rows, cols

    def dequantize(self, weight: StoredWeight, rows: int, cols: int) -> np.ndarray:
        values, scale = weight.read("weight_toy", "iu"), weight.read("toy_scale", "f")
        assert values is not None and scale is not None
        weight.expect("toy_scale", (rows, 1), scale.shape, "one scale per output row")
        return dequantize_grid(values, scale, rows_per_scale=1)


@pytest.fixture
def toy() -> Iterator[None]:
    methods, storages = dict(METHODS), dict(STORAGES)
    register(ToyRows())
    yield
    METHODS.clear()
    METHODS.update(methods)
    STORAGES.clear()
    STORAGES.update(storages)


def _toy_checkpoint(root: Path) -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    tensors, dequantised, unscaled = {}, {}, {}
    for layer in range(LAYERS):
        for proj, (rows, cols) in SHAPES.items():
            name = module(layer, proj)
            values = rng.integers(-127, 128, size=(rows, cols), dtype=np.int8)
            scale = spread_scales(rng, (rows, 1)).astype(np.float32)
            tensors[name + ".weight_toy"] = torch.from_numpy(values)
            tensors[name + ".toy_scale"] = torch.from_numpy(scale)
            dequantised[name] = values.astype(np.float64) * scale.astype(np.float64)
            unscaled[name] = values.astype(np.float64)
    return write_checkpoint(root, tensors, {"quant_method": "Toy-Rows"}), dequantised, unscaled


def test_a_registered_toy_method_reads_through_analyze(toy: None, tmp_path: Path) -> None:
    root, dequantised, unscaled = _toy_checkpoint(tmp_path)
    check(root, dequantised, unscaled, "toy int8 rows")
    with open_model(str(root)) as source:
        weight = module(0, "q_proj") + ".weight"
        assert source.tensors.stored_names(weight) == [
            module(0, "q_proj") + ".weight_toy",
            module(0, "q_proj") + ".toy_scale",
        ]
        assert source.notes["quantization"]["method"] == "toy-rows"


def test_the_toy_is_listed_while_registered_and_refused_after(tmp_path: Path) -> None:
    config = {"quantization_config": {"quant_method": "toy-rows"}}
    with pytest.raises(
        QKEnergyError,
        match=r"quant_method 'toy-rows', which qkenergy does not read \(it dequantises fp8, fbgemm_fp8, compressed-tensors, gptq, awq\)",
    ):
        parse_quantization(config, "config.json")
    methods, storages = dict(METHODS), dict(STORAGES)
    try:
        register(ToyRows())
        assert parse_quantization(config, "config.json") == Quantization(
            "toy-rows", "int8", 8, "config.json (quantization_config)", symmetric=True
        )
        with pytest.raises(
            QKEnergyError,
            match=r"\(it dequantises fp8, fbgemm_fp8, compressed-tensors, gptq, awq, toy-rows\)",
        ):
            parse_quantization({"quantization_config": {"quant_method": "hqq"}}, "config.json")
        with pytest.raises(ValueError, match="registered twice"):
            register(ToyRows())
    finally:
        METHODS.clear()
        METHODS.update(methods)
        STORAGES.clear()
        STORAGES.update(storages)
