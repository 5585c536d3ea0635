"""The README's few lines of Python: one layer of the embedded all-MiniLM-L6-v2 as a table."""

import qkenergy

result = qkenergy.analyze_model(layers=[2], samples=500)  # no model given: the embedded MiniLM
print(result.heads[["layer", "head", "symmetric_energy", "symmetric_energy_z", "head_type"]].head(4))
print(result.model, "·", result.settings["samples"], "null samples ·", len(result.heads), "heads")
