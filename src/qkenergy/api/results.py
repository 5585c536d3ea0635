"""An analysis as one object: its tables, settings and null laws; it summarises, draws and writes.

:func:`qkenergy.analyze` (and :meth:`qkenergy.Model.analyze`) runs ``qkenergy analyze``'s
analysis and returns an :class:`Analysis`; :func:`qkenergy.read` reads one back from the
table ``analyze -o`` or :meth:`Analysis.write` wrote (csv, parquet or json with
its settings), exactly. Those two live with :func:`qkenergy.open` in
:mod:`qkenergy.api.model`, as they open models; an Analysis only holds what they give it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.analysis.analyze import AnalysisResult as Result
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.record import recorded_run
from qkenergy.api.shown import Shown
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.extras import require
from qkenergy.math.nulls import NULL_STATISTICS, NullLaw

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

    from qkenergy.api.head import Head
    from qkenergy.api.model import Model

__all__ = ["TOP_COLUMNS", "Analysis"]

TOP_COLUMNS: tuple[str, ...] = (
    "stack",
    "offset",
    "layer",
    "head",
    "symmetric_energy",
    "symmetric_energy_z",
    "symmetric_energy_p",
    "symmetric_energy_p_tail",
    "symmetric_energy_p_bh",
    "head_type",
)
"""The columns of :meth:`Analysis.top` by default (those the head table has; ``stack`` for a model of several)."""


class Analysis(Shown):
    """The per-head analysis of one model: tables, settings, null laws; summary, figures, files.

    Made by :func:`analyze`, :meth:`qkenergy.Model.analyze` and :func:`read`.

    Parameters
    ----------
    result : analysis.analyze.AnalysisResult
        The run's tables, settings and null laws.
    model : Model, optional
        The opened model it analysed (heads are read from it).
    opener : callable, optional
        Opens the model when a head is first asked for (given by :func:`qkenergy.analyze` and
        :func:`qkenergy.read`, which know where the weights are).
    layers_from : path, optional
        The table file whose layer table is read on first use (a read analysis).

    Attributes
    ----------
    heads : DataFrame
        One row per head (per stack and RoPE offset); the columns of docs/columns.md.
    layers : DataFrame or None
        One row per layer's whole form (``per_layer=True``), else None.
    settings : dict
        How the run was made (version, command, model source and fingerprints, null settings, ...).
    model : str
        The model's name.
    null : NullSpec or None
        The null laws' settings (None when the run drew none).

    Examples
    --------
    >>> import qkenergy as qk
    >>> result = qk.analyze(None, layers=[2], samples=200)
    >>> len(result.heads), result.null.samples
    (12, 200)
    >>> result.top(2)[["layer", "head", "symmetric_energy"]].round(6)  # no head of layer 2 is below 0.5013
       layer  head  symmetric_energy
    0      2     9          0.867132
    1      2     7          0.695529
    >>> "12 of 12 heads (100%) are significantly more symmetric" in result.summary()
    True
    """

    def __init__(
        self,
        result: Result,
        *,
        model: Model | None = None,
        opener: Callable[[], Model] | None = None,
        layers_from: str | os.PathLike[str] | None = None,
    ) -> None:
        self._result = result
        self._layers_from = layers_from  # a read analysis reads its layer table on first use
        self._model = model
        self._opener = opener
        self._laws: dict[tuple[int, int], NullLaw] = dict(result.null_laws)

    def __repr__(self) -> str:
        layers = "" if self.layers is None else f", {len(self.layers)} layer forms"
        return f"<Analysis of {self.model}: {len(self.heads)} heads{layers}>"

    # ---------------------------------------------------------------- the tables
    @property
    def heads(self) -> pd.DataFrame:
        return self._result.heads

    @property
    def layers(self) -> pd.DataFrame | None:
        self._load_layers()
        return self._result.layers

    def _load_layers(self) -> None:
        """A read analysis reads its layer table when first needed (plotting the heads needs none)."""
        if self._layers_from is not None:
            path, self._layers_from = self._layers_from, None
            object.__setattr__(self._result, "layers", _read_layers(path))

    @property
    def settings(self) -> dict[str, Any]:
        return self._result.settings

    @property
    def model(self) -> str:
        return self._result.model

    @property
    def null(self) -> NullSpec | None:
        return recorded_run(self.settings).null

    @property
    def null_laws(self) -> Mapping[tuple[int, int], NullLaw]:
        """The Gaussian null law of each head shape (n, N) the heads were judged against.

        An analysis read from a file draws them again from its settings (same samples,
        and seed: the same draws, bitwise).
        """
        spec = self.null
        if spec is not None and spec.gaussian:
            shapes = self.heads[["n", "N"]].drop_duplicates().itertuples(index=False)
            for n, N in shapes:
                if (int(n), int(N)) not in self._laws:
                    self._laws[(int(n), int(N))] = spec.null_law(int(n), int(N), names=NULL_STATISTICS)
        return dict(self._laws)

    def head(self, layer: int, head: int, *, stack: str | None = None, offset: int = 0) -> Head:
        """One head of the analysed model, with its weights (see :meth:`qkenergy.Model.head`).

        The model is the one analysed (an analysis read from a file reopens the model its
        settings name: a path, hub id or the embedded default). Its statistics equal the
        head's row of :attr:`heads`.

        Parameters
        ----------
        layer, head : int
            0-based indices as in the table.
        stack : str, optional
            The attention stack (default: the first).
        offset : int
            The RoPE offset d of the row.

        Returns
        -------
        Head
        """
        if self._model is None:
            if self._opener is None:
                raise QKEnergyError(f"the analysis of {self.model} has no model to read heads from")
            self._model = self._opener()
        return self._model.head(
            layer,
            head,
            stack=stack,
            offset=offset,
            fold_norm=bool(self.settings.get("fold_norm", False)),
            types=recorded_run(self.settings).types,
        )

    def top(self, k: int = 5, *, columns: str | Sequence[str] = "summary") -> pd.DataFrame:
        """The ``k`` most symmetric heads above the random baseline (largest s first), then the ``k`` most
        skew below it (smallest s first): the summary's "heads worth a look".

        Parameters
        ----------
        k : int
            Heads of each kind, at most.
        columns : "summary", "all" or sequence of str
            "summary" (default): where the head is, s, its z, its p-values
            (empirical, Beta tail, BH-adjusted) and its type (:data:`TOP_COLUMNS`, those the
            table has); "all": every column of :attr:`heads`; or these columns.

        Returns
        -------
        DataFrame
            Rows of :attr:`heads`.

        Raises
        ------
        QKEnergyError
            ``columns`` names a column the table lacks.
        """
        import pandas as pd

        from qkenergy.analysis.summary import notable_heads
        from qkenergy.base.errors import check_integer

        k = check_integer(k, "k")
        table = self._table()
        if columns == "all":
            names = list(table.columns)
        elif columns == "summary":
            names = [
                name
                for name in TOP_COLUMNS
                if name in table.columns and (name != "stack" or table[name].nunique() > 1)
            ]
        else:
            names = [columns] if isinstance(columns, str) else list(columns)
            missing = [name for name in names if name not in table.columns]
            if missing:
                raise QKEnergyError(
                    f"columns: the head table has no column {', '.join(map(repr, missing))} "
                    "(give 'summary', 'all' or column names of .heads)",
                    parameter="columns",
                )
        symmetric, skew = notable_heads(table, k)
        rows = pd.concat([pd.DataFrame(symmetric), pd.DataFrame(skew)], ignore_index=True)
        return rows[names]

    def _table(self) -> pd.DataFrame:
        table = self.heads
        if "offset" in table.columns:  # as the summary: the smallest offset
            table = table[table["offset"] == table["offset"].min()]
        return table

    # ---------------------------------------------------------------- text
    def print_to(self, console: Any, *, top: int = 5, **options: Any) -> None:
        """Print the terminal summary ``qkenergy analyze`` prints: tables on a terminal, plain off it.

        ``summary(top=..., width=...)`` and ``print_summary(console, top=...)`` print it too.

        Parameters
        ----------
        console : rich.console.Console
            Where to print.
        top : int
            Heads worth a look of each kind (:meth:`top`).
        **options
            None.
        """
        from qkenergy.analysis.summary import print_summary

        self._load_layers()
        print_summary(self._result, console, top=top)

    def _repr_html_(self) -> str:
        import html

        from qkenergy.analysis.summary import verdict

        spec = self.null
        null = (
            "no null laws" if spec is None else f"{spec.kind} null, {spec.samples} samples, seed {spec.seed}"
        )
        top = self.top(3)
        shown = [
            c
            for c in ("stack", "layer", "head", "symmetric_energy", "symmetric_energy_z", "head_type")
            if c in top
        ]
        return (
            f"<div><strong>{html.escape(self.model)}</strong> · {len(self.heads)} heads · {html.escape(null)}"
            f"<p>{html.escape(verdict(self._table(), null=spec is not None))}</p>"
            f"<p>Most symmetric, then most skew heads:</p>{top[shown].to_html(index=False)}</div>"
        )

    # ---------------------------------------------------------------- figures and files
    def figure(self, name: str, ax: Any = None, *, head: tuple[int, int] | None = None) -> Figure:
        """One figure that ``qkenergy plot`` draws, as a matplotlib Figure (no file written).

        Parameters
        ----------
        name : str
            symmetric_energy_heatmap, symmetric_energy_null, symmetric_profiles, lobes or
            symmetric_energy_offsets (RoPE offsets): ``figures.plots.FIGURES``.
        ax : matplotlib Axes, optional
            Draw into these axes (a pair of axes for lobes).
        head : (int, int), optional
            The (layer, head) of the lobes figure (default: the most extreme).

        Returns
        -------
        matplotlib.figure.Figure
            The null histogram shows the null laws this analysis used.
        """
        require("plot", "matplotlib", "figures are drawn with it")
        from qkenergy.figures.plots import figure

        spec = self.null or NullSpec()
        laws = self.null_laws if name == "symmetric_energy_null" else {}
        return figure(
            self.heads,
            name,
            head=head,
            ax=ax,
            null_laws=laws,
            null=spec,
            settings=self.settings,
        )

    def write(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        plots: str | os.PathLike[str] | None = None,
        **plot_options: Any,
    ) -> list[Path]:
        """Write the tables with their settings (and the figures), all in one transaction.

        Every file lands, or none does; :func:`read` reads the table back.

        Parameters
        ----------
        path : path, optional
            ``.csv`` (with ``.meta.json`` sidecars and ``NAME.layers.csv``), ``.parquet`` or
            ``.json`` (one file holding both tables): what ``qkenergy analyze -o`` writes.
        plots : path, optional
            A directory for the figures of ``qkenergy analyze --plot``.
        **plot_options
            head, formats, null (a NullSpec), cache_dir (default: this analysis' null settings).

        Returns
        -------
        list of pathlib.Path
            The files written.

        Raises
        ------
        QKEnergyError
            ``path`` of another format.
        """
        from qkenergy.formats.tables import FORMATS
        from qkenergy.report.outputs import write_outputs

        if path is not None and Path(path).suffix.lower() not in FORMATS:
            raise QKEnergyError(f"path: expected a file ending in {', '.join(FORMATS)}, got {str(path)!r}")
        if plots is not None:
            require("plot", "matplotlib", "figures are drawn with it")
            # a run without null laws still recorded its seed: the figures' laws are drawn with it
            plot_options.setdefault("null", self.null or NullSpec(seed=int(self.settings.get("seed", 0))))
            plot_options.setdefault("cache_dir", self.settings.get("cache_dir"))
        self._load_layers()
        return write_outputs(self._result, output=path, plot_dir=plots, **plot_options)

    def plot(self, outdir: str | os.PathLike[str], **options: Any) -> list[Path]:
        """Write the figures of ``qkenergy plot`` into ``outdir`` (atomically).

        Parameters
        ----------
        outdir : path
            The figures' folder.
        **options
            As :func:`qkenergy.figures.plots.plot_results`: head, null (a NullSpec), cache_dir,
            formats (its defaults, not this analysis' null settings: see :meth:`write`).

        Returns
        -------
        list of pathlib.Path
            The files written.
        """
        require("plot", "matplotlib", "figures are drawn with it")
        from qkenergy.figures.plots import plot_results

        return plot_results(self.heads, outdir, **options)


def _read_layers(path: str | os.PathLike[str]) -> pd.DataFrame | None:
    """The layer table written with the head table at ``path`` (the json member, NAME.layers.csv), or None."""
    from qkenergy.formats.tables import STRING_COLUMNS, layers_path, read_table, text_column

    layers: pd.DataFrame | None = None
    if Path(path).suffix.lower() == ".json":
        try:
            layers = read_table(path, table="layers")
        except QKEnergyError:
            layers = None
    elif layers_path(path).is_file():
        layers = read_table(layers_path(path), table="layers")
    if layers is not None:
        layers.attrs.pop("settings", None)
        for name in (*STRING_COLUMNS, "route", "null_route", "null_note"):
            if name in layers.columns:  # an empty text column reads back from csv as all-NaN floats
                layers[name] = text_column(layers[name])
    return layers
