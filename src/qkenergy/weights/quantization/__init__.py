"""Quantised safetensors checkpoints: ``quantization_config`` read, weights dequantised exactly.

A quantised checkpoint stores a linear weight W (``[out_features, in_features]``)
as integers or 8-bit floats q plus scales s (and zero points z), each scale
shared by a block of entries. Every method read here is one formula,

    W[i, j] = (q[i, j] - z[r(i), c(j)]) * s[r(i), c(j)],

(:mod:`~qkenergy.weights.quantization.grids`) with its own storage of q, s, z
and its own grid. Each method is one class
(:class:`~qkenergy.weights.quantization.method.QuantMethod`: parse, stored
parts, dequantise) registered below, in the order messages list them:

- ``fp8``, ``fbgemm_fp8``: :mod:`~qkenergy.weights.quantization.fp8`;
- ``compressed-tensors``: :mod:`~qkenergy.weights.quantization.compressed_tensors`;
- ``gptq``, ``awq``: :mod:`~qkenergy.weights.quantization.gptq_awq`.

A new method is one class and one line of the registration.
:func:`~qkenergy.weights.quantization.config.parse_quantization` reads the
config through the registry; anything else (bitsandbytes, HQQ, EETQ, unknown
methods, other packings) is refused in one line naming the method and the config
file. :class:`~qkenergy.weights.quantization.tensors.QuantizedTensors` reads the
weights.
"""

from __future__ import annotations

from qkenergy.weights.quantization.compressed_tensors import CompressedTensors, Scheme
from qkenergy.weights.quantization.config import SIDE_FILES, parse_quantization, read_quantization
from qkenergy.weights.quantization.fp8 import FbgemmFp8, Fp8
from qkenergy.weights.quantization.gptq_awq import Awq, Gptq
from qkenergy.weights.quantization.grids import (
    dequantize_awq,
    dequantize_gptq,
    dequantize_grid,
    product_dtype,
    unpack_fields,
)
from qkenergy.weights.quantization.method import METHODS, Quantization, QuantMethod, Storage, register
from qkenergy.weights.quantization.tensors import QuantizedTensors, quantized_tensors, stored_quantization

__all__ = [
    "METHODS",
    "SIDE_FILES",
    "QuantMethod",
    "Quantization",
    "QuantizedTensors",
    "Scheme",
    "Storage",
    "dequantize_awq",
    "dequantize_gptq",
    "dequantize_grid",
    "parse_quantization",
    "product_dtype",
    "quantized_tensors",
    "read_quantization",
    "register",
    "stored_quantization",
    "unpack_fields",
]

for _method in (Fp8(), FbgemmFp8(), CompressedTensors(), Gptq(), Awq()):
    register(_method)
