"""A transformers ``TrainerCallback`` that follows every head's symmetric energy while the model trains.

At each tracked step (by default each logging step) :class:`QKEnergyCallback`
measures the model's heads with a :class:`~qkenergy.training.tracker.Tracker`
(in place, null laws drawn once per head shape), appends their rows to
``<output_dir>/qkenergy/heads.parquet`` (a folder of one part file per step)
and adds the step's scalars, keyed ``qkenergy/...``, to the Trainer's logs:
they land in ``trainer.state.log_history`` and in every ``report_to``
integration (TensorBoard, W&B, MLflow ...) as any other logged value. With
``per_layer=True`` it also follows each layer's whole form (Saponati et al.'s
symmetry score and directionality, judged against a Gaussian layer's law) in
``<output_dir>/qkenergy/layers.parquet``, with the scalars
``qkenergy/symmetry_score/layer_<i>`` and ``qkenergy/directionality/layer_<i>``.

The measurement runs in ``on_step_end``, after the optimizer step and before
the Trainer saves a checkpoint of the same step, so the rows of a step are
those of the checkpoint saved at it. A tracked step that is not a logging
step is made one (``control.should_log``), so that its scalars have a log
entry to go into.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from transformers import DefaultFlowCallback, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.math.defaults import SAMPLES
from qkenergy.training.tracker import Tracker

__all__ = ["LAYER_TABLE", "TABLE", "QKEnergyCallback"]

TABLE = Path("qkenergy") / "heads.parquet"
"""Where the rows go, relative to the Trainer's ``output_dir``."""
LAYER_TABLE = Path("qkenergy") / "layers.parquet"
"""Where the layer rows go (``per_layer``), relative to the Trainer's ``output_dir``."""

_log = logging.getLogger(__name__)


class QKEnergyCallback(TrainerCallback):
    """Track every head against its exact null while a ``transformers.Trainer`` trains.

    Parameters
    ----------
    every : int, optional
        Track every that many optimizer steps (None: at each logging step, ``logging_steps``).
    samples : int
        The null laws' Monte Carlo size.
    stack : str, optional
        Only the heads of this attention stack (multi-stack models).
    seed : int
        The null laws' seed, as for :class:`~qkenergy.training.tracker.Tracker`.
    types : TypeRule, optional
        How ``head_type`` is named, as for the Tracker.
    name : str, optional
        The model's name in the table, as for the Tracker.
    threads : int or None
        Threads for the heads and null samples, as for the Tracker.
    cache_dir : path, optional
        The null-law cache, as for the Tracker.
    out : path, optional
        The table's folder (default ``<output_dir>/qkenergy/heads.parquet``).
    per_layer : bool
        Also track each layer's whole form (default False).
    layers_out : path, optional
        The layer table's folder (implies ``per_layer``; default
        ``<output_dir>/qkenergy/layers.parquet`` with ``per_layer``).
    skip_nonfinite : bool
        As for the Tracker: True (the default) leaves heads with NaN or infinite weights out of
        the step, with a logged warning naming them and the scalar ``qkenergy/skipped_heads``;
        False makes such a step an error that ends the training run.

    Notes
    -----

    The Trainer calls its callbacks in order, and those of ``report_to`` come
    before the ones passed as ``callbacks=``; for the integrations to see the
    ``qkenergy/`` keys, put this callback first with :meth:`attach`
    (``trainer.state.log_history`` holds them either way)::

        trainer = Trainer(model, args, train_dataset=data)
        QKEnergyCallback(every=50).attach(trainer)
        trainer.train()
    """

    def __init__(
        self,
        every: int | None = None,
        samples: int = SAMPLES,
        stack: str | None = None,
        *,
        seed: int = 0,
        types: TypeRule | None = None,
        name: str | None = None,
        threads: int | None = 1,
        cache_dir: str | os.PathLike[str] | None = None,
        out: str | os.PathLike[str] | None = None,
        per_layer: bool = False,
        layers_out: str | os.PathLike[str] | None = None,
        skip_nonfinite: bool = True,
    ) -> None:
        self.every = None if every is None else check_integer(every, "every", 1)
        # checked here, not at the first step
        self.null, self.types = NullSpec(samples=samples, seed=seed), types or TypeRule()
        # The Tracker's settings, kept as given: each step's Tracker is made with them.
        self.options: dict[str, Any] = {
            "samples": self.null.samples,
            "seed": self.null.seed,
            "types": self.types,
            "stack": stack,
            "name": name,
            "threads": threads,
            "cache_dir": cache_dir,
            "skip_nonfinite": bool(skip_nonfinite),
        }
        self.out = out
        self.layers_out = layers_out
        self.per_layer = bool(per_layer) or layers_out is not None
        self.tracker: Tracker | None = None
        self._pending: tuple[int, dict[str, float]] | None = None
        self._attached = False

    def attach(self, trainer: Any) -> QKEnergyCallback:
        """Add this callback to ``trainer`` ahead of its logging integrations; returns it.

        It goes right after transformers' ``DefaultFlowCallback``, which decides in
        ``on_step_end`` whether the step logs (what a tracked step follows by default).
        """
        handler = trainer.callback_handler
        if self in handler.callbacks:
            handler.callbacks.remove(self)
        flow = [i for i, c in enumerate(handler.callbacks) if isinstance(c, DefaultFlowCallback)]
        handler.callbacks.insert(flow[-1] + 1 if flow else 0, self)
        self._attached = True
        return self

    def _tracker(self, args: TrainingArguments, model: Any) -> Tracker:
        if model is None:
            raise QKEnergyError("QKEnergyCallback: the Trainer passed no model to the callback")
        if self.tracker is None or self.tracker.model is not model:
            root = Path(args.output_dir or ".")
            out = root / TABLE if self.out is None else Path(self.out)
            layers_out = None
            if self.per_layer:
                layers_out = root / LAYER_TABLE if self.layers_out is None else Path(self.layers_out)
            self.tracker = Tracker(model, out, layers_out=layers_out, **self.options)
        return self.tracker

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        reporting = [r for r in (args.report_to or []) if r != "none"]
        if reporting and not self._attached:
            _log.warning(
                "QKEnergyCallback runs after the report_to integrations (%s): their logs miss the qkenergy/ "
                "keys (log_history has them); add it with QKEnergyCallback(...).attach(trainer)",
                ", ".join(reporting),
            )

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        **kwargs: Any,
    ) -> TrainerControl:
        step = int(state.global_step)
        due = control.should_log if self.every is None else step % self.every == 0
        if due and state.is_world_process_zero:
            self._pending = (step, self._tracker(args, model).log(step))
            control.should_log = True
        return control

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._pending is None or self._pending[0] != state.global_step or logs is None:
            return
        scalars = self._pending[1]
        self._pending = None
        logs.update(scalars)
        # The Trainer appended a copy of logs to log_history before calling the callbacks.
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(scalars)
