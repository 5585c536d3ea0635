"""Every head of a model measured while it trains: the table of one row per head and step.

A :class:`Tracker` holds a model that is being trained (a transformers
``PreTrainedModel``, a TransformerLens model, or any object with
``state_dict()`` given with ``config=``) and, on each :meth:`Tracker.log`,
reads its query and key weights in place through the in-memory route of
:func:`qkenergy.analysis.analyze.analyze_model` (numpy views of the live
tensors, one layer at a time; no float64 copy of the model), computes every
head's statistics and judges them against the exact Gaussian null laws. The
null laws depend only on a head's shape (n, N), so they are drawn on the first
call and reused at every later step: a step costs the statistics alone.

The rows are ``analyze_model(model).heads`` with a ``step`` column in front,
equal to what ``qkenergy analyze`` reports on a checkpoint saved at that step
with the same ``samples``, ``seed`` and head-type rule. With ``out`` they are
written as a Parquet dataset, one part file per step
(``out/step-<SSSSSSSSS>.parquet``), each written atomically with the run's
settings in its metadata: an interrupted run leaves no partial file, a
resumed one replaces the parts of the steps it repeats, and pandas, pyarrow
and DuckDB read the folder as one table (:func:`read_tracking`).

With ``per_layer`` each step also measures every layer's whole form (the
table of ``analyze_model(model, per_layer=True).layers``: Saponati et al.'s
symmetry score 2s - 1 and directionality, judged against the Gaussian law of
a layer of the same shape, drawn once like the heads' laws), kept as
:attr:`Tracker.last_layers`, written with ``layers_out`` as a second dataset
of the same form, and summarised in the step's scalars.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.run_config import Reading, RunConfig
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.math.defaults import SAMPLES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.analysis.analyze import AnalysisResult
    from qkenergy.math.nulls import NullLaw

__all__ = ["PREFIX", "Tracker", "layer_scalars", "part_path", "read_tracking", "step_scalars"]

_log = logging.getLogger(__name__)

PREFIX = "qkenergy/"
"""Prefix of the scalars :meth:`Tracker.log` returns (the keys in a Trainer's logs)."""


def part_path(out: str | os.PathLike[str], step: int) -> Path:
    """The part file of one step: ``out/step-<SSSSSSSSS>.parquet`` (zero-padded, so names sort by step).

    Parameters
    ----------
    out : path
        The table's folder.
    step : int
        The training step.

    Returns
    -------
    pathlib.Path
    """
    return Path(out) / f"step-{step:09d}.parquet"


class Tracker:
    """Measure a training model's heads at chosen steps; see the module docstring.

    Parameters
    ----------
    model : object
        The model being trained (read anew at every :meth:`log`, so the values are those of
        its weights at that moment).
    out : path, optional
        The folder of the table's part files (None: keep nothing on disk).
    samples, seed : int
        The null laws' Monte Carlo size and seed, as for ``qkenergy analyze``.
    types : TypeRule, optional
        How ``head_type`` is named (default: analyze's, ``TypeRule()``).
    stack : str, optional
        Keep the heads of one attention stack only (``encoder``, ``decoder``, ...: multi-stack
        models).
    name : str, optional
        The ``model`` column (default: the model's own name).
    config : mapping, optional
        config.json as a dict, for a model that is not a transformers or TransformerLens model
        (its ``state_dict()`` is read under the checkpoint's names).
    threads : int or None
        As for analyze_model (1 keeps the measurement off the cores a training loop may use in
        other processes).
    cache_dir : path, optional
        Keep the null laws on disk too.
    per_layer : bool
        Also measure each layer's whole form at every step (see the module docstring).
    layers_out : path, optional
        The folder of the layer table's part files (implies ``per_layer``; None: keep them in
        memory only). It must not be ``out``: the two tables have different columns.
    skip_nonfinite : bool
        True (the default): heads whose weights hold NaN or infinite values are left out of
        the step's rows, named in a logged warning (logger ``qkenergy.training.tracker``) and
        in the part's settings (``skipped_heads``), and counted in the scalar
        ``qkenergy/skipped_heads``; training goes on. False: such a step is the one-line
        error of ``qkenergy analyze``. A step at which every head is non-finite is an error
        either way: nothing is left to measure.

    Notes
    -----
    Non-finite weights during training mean a diverged run, which its loss already shows; a
    measurement that stopped the run would take the remaining steps with it, so by default
    the tracker measures the finite heads and says which ones it could not.
    """

    def __init__(
        self,
        model: Any,
        out: str | os.PathLike[str] | None = None,
        *,
        samples: int = SAMPLES,
        seed: int = 0,
        types: TypeRule | None = None,
        stack: str | None = None,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        threads: int | None = 1,
        cache_dir: str | os.PathLike[str] | None = None,
        per_layer: bool = False,
        layers_out: str | os.PathLike[str] | None = None,
        skip_nonfinite: bool = True,
    ) -> None:
        self.model = model
        self.out = None if out is None else Path(out)
        self.layers_out = None if layers_out is None else Path(layers_out)
        self.per_layer = bool(per_layer) or self.layers_out is not None
        self.stack = stack
        self.name = name
        self.cache_dir = cache_dir
        # every step's analysis, checked once here (the null laws are drawn once, with cache_dir)
        self.run = RunConfig(
            reading=Reading(
                config=None if config is None else dict(config), skip_nonfinite=bool(skip_nonfinite)
            ),
            spec=NullSpec(samples=samples, seed=seed),
            types=types or TypeRule(),
            threads=threads,
        )
        self.laws: dict[tuple[int, int], NullLaw] = {}
        self.layer_laws: dict[tuple[tuple[int, ...], int, int], NullLaw] = {}
        self.last: pd.DataFrame | None = None
        """The rows of the latest :meth:`log`."""
        self.last_layers: pd.DataFrame | None = None
        """With ``per_layer``: the layer rows of the latest :meth:`log`."""
        for folder, parameter in ((self.out, "out"), (self.layers_out, "layers_out")):
            if folder is not None and folder.exists() and not folder.is_dir():
                raise QKEnergyError(
                    f"{parameter}={str(folder)!r:.200}: exists and is not a folder (the table's part files go there)",
                    parameter=parameter,
                )
        if (
            self.layers_out is not None
            and self.out is not None
            and self.layers_out.resolve() == self.out.resolve()
        ):
            raise QKEnergyError(
                f"layers_out={str(self.layers_out)!r:.200}: the same folder as out; expected a folder of its own "
                "(the layer table's columns differ from the head table's)",
                parameter="layers_out",
            )

    def _weights(self) -> Any:
        if self.run.reading.config is None:
            return self.model
        state = getattr(self.model, "state_dict", None)
        return state() if callable(state) else self.model

    def _analyze(self, **changes: Any) -> AnalysisResult:
        from qkenergy.analysis.analyze import analyze_run

        run = dataclasses.replace(self.run, **changes)
        return analyze_run(self._weights(), run, null_laws=self.laws, layer_null_laws=self.layer_laws)

    def _draw_laws(self) -> None:
        """The Gaussian null law of every head shape of the model, drawn once for the whole run."""
        from qkenergy.math.nulls import NULL_STATISTICS

        shapes = self._analyze(null=False).heads[["n", "N"]].drop_duplicates()
        for n, N in shapes.itertuples(index=False):
            self.laws[(int(n), int(N))] = self.run.spec.null_law(
                int(n), int(N), cache_dir=self.cache_dir, names=NULL_STATISTICS, threads=self.run.threads
            )

    def measure(self, step: int) -> pd.DataFrame:
        """The head table of the model's current weights, with ``step`` as its first column.

        Parameters
        ----------
        step : int
            The training step.

        Returns
        -------
        DataFrame
        """
        step = check_integer(step, "step", 0)
        if not self.laws:
            self._draw_laws()
        analysis = self._analyze(per_layer=self.per_layer)
        self.layer_laws.update(analysis.layer_null_laws)  # with per_layer: each layer shape's law, drawn once
        heads = analysis.heads
        skipped = analysis.settings.get("skipped_heads") or []
        if skipped:
            from qkenergy.analysis.summary import skipped_lines

            _log.warning(
                "qkenergy: step %d: %d heads left out, their weights hold NaN or infinite values: %s",
                step,
                len(skipped),
                " | ".join(skipped_lines(skipped)),
            )
        if self.stack is not None:
            stacks = sorted(set(heads["stack"].astype(str)))
            if self.stack not in stacks:
                from qkenergy.weights.reading import stacks_text

                raise QKEnergyError(
                    f"stack={self.stack!r:.80}: the model has no such attention stack; {stacks_text(stacks)}",
                    parameter="stack",
                )
            # The BH adjustment stays the one over all the model's heads, as analyze reports it.
            heads = heads[heads["stack"] == self.stack].reset_index(drop=True)
        settings = {**analysis.settings, "step": step, "tracked_stack": self.stack}
        heads = self._step_rows(heads, step, settings)
        if analysis.layers is not None:
            layers = analysis.layers
            if self.stack is not None:
                layers = layers[layers["stack"] == self.stack].reset_index(drop=True)
            self.last_layers = self._step_rows(layers, step, settings)
        return heads

    def _step_rows(self, rows: pd.DataFrame, step: int, settings: dict[str, Any]) -> pd.DataFrame:
        """``rows`` (this step's analysis owns them) with ``step`` in front and the settings attached."""
        if self.name is not None:
            rows = rows.assign(model=self.name)
        rows.insert(0, "step", np.int64(step))
        rows.attrs["settings"] = settings
        return rows

    def log(self, step: int) -> dict[str, float]:
        """Measure the heads at ``step``, write their rows (with ``out``), return the step's scalars.

        The scalars are :func:`step_scalars` of the rows, keyed ``qkenergy/...``.

        Parameters
        ----------
        step : int
            The training step.

        Returns
        -------
        dict of str to float
        """
        from qkenergy.formats.tables import write_table

        heads = self.measure(step)
        if self.out is not None:
            write_table(heads, part_path(self.out, int(step)), settings=heads.attrs["settings"])
        self.last = heads
        scalars = step_scalars(heads)
        if self.per_layer and self.last_layers is not None:
            if self.layers_out is not None:
                write_table(
                    self.last_layers, part_path(self.layers_out, int(step)), settings=heads.attrs["settings"]
                )
            scalars.update(layer_scalars(self.last_layers))
        skipped = heads.attrs["settings"].get("skipped_heads") or []
        if skipped:
            scalars[f"{PREFIX}skipped_heads"] = float(len(skipped))
        return scalars


def step_scalars(heads: pd.DataFrame) -> dict[str, float]:
    """One step's summary: median s overall and per layer, median z, shares above / below the null.

    Keys (under :data:`PREFIX`): ``symmetric_energy_median``,
    ``symmetric_energy_median/layer_<i>`` (``/<stack>_layer_<i>`` for
    multi-stack models), ``symmetric_energy_z_median``, ``share_above`` and
    ``share_below``: the share of the heads with a defined s whose
    Benjamini-Hochberg adjusted p is below 0.05 with a positive (negative)
    z-score, as in ``qkenergy report``. Values that cannot be defined (no
    head with a finite s) are NaN.

    Parameters
    ----------
    heads : DataFrame
        One step's head table (the columns of docs/columns.md).

    Returns
    -------
    dict of str to float
        The scalars by key.
    """
    from qkenergy.analysis.summary import SIGNIFICANCE

    s = heads["symmetric_energy"].to_numpy(np.float64)
    z = heads["symmetric_energy_z"].to_numpy(np.float64)
    p = heads["symmetric_energy_p_bh"].to_numpy(np.float64)
    defined = np.isfinite(s)

    def median(values: np.ndarray) -> float:
        values = values[np.isfinite(values)]
        return float(np.median(values)) if len(values) else math.nan

    significant = defined & np.isfinite(p) & (p < SIGNIFICANCE)
    count = int(defined.sum())
    out = {
        f"{PREFIX}symmetric_energy_median": median(s),
        f"{PREFIX}symmetric_energy_z_median": median(z),
        f"{PREFIX}share_above": float((significant & (z > 0)).sum() / count) if count else math.nan,
        f"{PREFIX}share_below": float((significant & (z < 0)).sum() / count) if count else math.nan,
    }
    stacks = heads["stack"].astype(str).to_numpy()
    layers = heads["layer"].to_numpy(np.int64)
    for stack, layer in sorted(set(zip(stacks.tolist(), layers.tolist(), strict=True))):
        where = f"{stack}_layer_{layer}" if stack else f"layer_{layer}"
        out[f"{PREFIX}symmetric_energy_median/{where}"] = median(s[(stacks == stack) & (layers == layer)])
    return out


def layer_scalars(layers: pd.DataFrame) -> dict[str, float]:
    """One step's layer scores: ``symmetry_score/layer_<i>`` and ``directionality/layer_<i>``.

    Saponati et al.'s scores of each layer's whole form (``/<stack>_layer_<i>`` for
    multi-stack models, ``@<offset>`` appended with RoPE offsets), under :data:`PREFIX`.

    Parameters
    ----------
    layers : DataFrame
        One step's layer table (``analyze_model(..., per_layer=True).layers``).

    Returns
    -------
    dict of str to float
    """
    out: dict[str, float] = {}
    offsets = layers["offset"].tolist() if "offset" in layers.columns else [None] * len(layers)
    for stack, layer, offset, symmetry, direction in zip(
        layers["stack"].astype(str).tolist(),
        layers["layer"].tolist(),
        offsets,
        layers["symmetry_score"].tolist(),
        layers["directionality"].tolist(),
        strict=True,
    ):
        where = (f"{stack}_layer_{layer}" if stack else f"layer_{layer}") + (
            "" if offset is None else f"@{offset}"
        )
        out[f"{PREFIX}symmetry_score/{where}"] = float(symmetry)
        out[f"{PREFIX}directionality/{where}"] = float(direction)
    return out


def read_tracking(out: str | os.PathLike[str], *, table: str | None = None) -> pd.DataFrame:
    """The tracked table (every part file under ``out``) as one DataFrame, sorted by step, layer, head.

    Parameters
    ----------
    out : path
        The folder a :class:`Tracker` wrote its part files to (``out`` or ``layers_out``).
    table : {"heads", "layers"}, optional
        Which table the folder holds (default: told by the first part's columns).

    Returns
    -------
    DataFrame
    """
    import pandas as pd
    import pyarrow.parquet as pq

    from qkenergy.formats.tables import read_table

    parts = sorted(Path(out).glob("step-*.parquet"))
    if not parts:
        raise QKEnergyError(f"{out}: no tracked steps (step-*.parquet) in this folder")
    if table is None:
        table = "heads" if "head" in pq.read_schema(parts[0]).names else "layers"
    elif table not in ("heads", "layers"):
        raise QKEnergyError(f"table={table!r:.80}: expected 'heads' or 'layers'", parameter="table")
    frame = pd.concat([read_table(p, table=table) for p in parts], ignore_index=True)
    keys = [c for c in ("step", "model", "stack", "layer", "head", "offset") if c in frame.columns]
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)
