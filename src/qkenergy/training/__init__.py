"""Symmetric energy followed through training (the ``train`` extra: torch and transformers).

- :class:`Tracker` (``qkenergy.Tracker``): ``tracker.log(step)`` in a plain PyTorch loop.
- :class:`QKEnergyCallback`: the same inside a ``transformers.Trainer``.

Both write the table of one row per head and tracked step; see docs/training.md.
Only the callback imports transformers, and only when it is asked for.
"""

from __future__ import annotations

from typing import Any

from qkenergy.base.extras import require
from qkenergy.training.tracker import PREFIX, Tracker, part_path, read_tracking, step_scalars

__all__ = ["PREFIX", "QKEnergyCallback", "Tracker", "part_path", "read_tracking", "step_scalars"]


def __getattr__(name: str) -> Any:
    if name == "QKEnergyCallback":
        require("train", "transformers", "QKEnergyCallback is a transformers TrainerCallback")
        from qkenergy.training.callback import QKEnergyCallback

        return QKEnergyCallback
    raise AttributeError(f"module 'qkenergy.training' has no attribute {name!r}")
