"""A model opened for analysis: its architecture, its heads on demand, and its analysis.

``qk.open(model)`` reads the config and the tensor index only (safetensors
headers); a layer's weights are read when one of its heads is asked for, and
the few layers read last are kept. :func:`analyze` and :func:`read` make an
:class:`~qkenergy.api.results.Analysis` (run, or read back from a table) and give
it the means to open its model again when one of its heads is asked for.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.weights.architecture import Architecture, architectures
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.finite import bad_heads, nonfinite_error, nonfinite_findings
from qkenergy.weights.layout import Layout
from qkenergy.weights.reading import LayerWeights, present_stacks, read_layer, select, stacks_text

# Opening a model reads weights only: the analysis and the heads' mathematics are imported
# when a head or an analysis is first asked for (the start-up of `qk.open`).
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from qkenergy.analysis.run_config import AnalyzeOptions, RunConfig
    from qkenergy.analysis.type_rule import TypeRule
    from qkenergy.api.head import Head
    from qkenergy.api.results import Analysis
    from qkenergy.weights.source import ModelSource

__all__ = ["Model", "analyze", "open", "read"]

_KEPT_LAYERS = 4  # layers kept in memory for further heads


class Model:
    """A model whose heads carry their spectra and null laws (made by :func:`open`).

    Parameters
    ----------
    source : ModelSource
        The opened weights: config, tensor source, origin (``weights.checkpoint.open_model``).
    stacks : list of (Architecture, str)
        Each attention stack present, with the prefix of its tensor names.
    argument : object
        The ``model`` argument :func:`open` was given (analysis reads it again).
    options : dict
        The other arguments of :func:`open` (model_type, layout, revision, config).

    Attributes
    ----------
    name : str
        The model as given (a path or hub id), or its name (the embedded MiniLM).
    model_type : str
        config.json's ``model_type`` (or the type it is read as).
    stacks : tuple of str
        The attention stacks present ("" for a single-stack model; encoder, decoder, cross, ...).
    layers, heads : int
        Layers and query heads of the first stack (see :meth:`architecture` for the others).
    source : str
        Where the weights come from: "embedded", "file", "directory", "cache", "hub" or in memory.

    Examples
    --------
    >>> import qkenergy as qk
    >>> model = qk.open()
    >>> model.name, model.model_type, model.layers, model.heads
    ('sentence-transformers/all-MiniLM-L6-v2', 'bert', 6, 12)
    >>> model.head(0, 0)
    <Head layer 0 head 0: n=32, N=384>
    """

    def __init__(
        self,
        source: ModelSource,
        stacks: list[tuple[Architecture, str]],
        *,
        argument: Any,
        options: dict[str, Any],
    ) -> None:
        self._source = source
        self._stacks = stacks
        self._argument = argument
        self._options = options
        self._layers: OrderedDict[tuple[str, int, bool], LayerWeights] = OrderedDict()

    def __repr__(self) -> str:
        stacks = "" if self.stacks == ("",) else f", stacks {', '.join(self.stacks)}"
        return f"<Model {self.name} ({self.model_type}): {self.layers} layers x {self.heads} heads{stacks}>"

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the tensor source (open files); heads already read stay usable."""
        self._layers.clear()
        self._source.close()

    @property
    def name(self) -> str:
        return self._source.name

    @property
    def model_type(self) -> str:
        return self._stacks[0][0].model_type

    @property
    def stacks(self) -> tuple[str, ...]:
        return tuple(arch.stack for arch, _ in self._stacks)

    @property
    def layers(self) -> int:
        return self._stacks[0][0].n_layers

    @property
    def heads(self) -> int:
        return self._stacks[0][0].n_heads

    @property
    def source(self) -> str:
        return self._source.origin

    @property
    def config(self) -> dict[str, Any]:
        """The parsed config.json."""
        return self._source.config

    def architecture(self, stack: str | None = None) -> Architecture:
        """The sizes and layout of one stack (the first one when ``stack`` is None).

        Parameters
        ----------
        stack : str, optional
            One of :attr:`stacks`.

        Returns
        -------
        Architecture
        """
        return self._stack(stack)[0]

    def _stack(self, stack: str | None) -> tuple[Architecture, str]:
        if stack is None:
            return self._stacks[0]
        for arch, prefix in self._stacks:
            if arch.stack == stack:
                return arch, prefix
        raise ArgumentError(
            f"stack: {stack!r:.80} is not a stack of {self.name}; {stacks_text(self.stacks)}",
            parameter="stack",
        )

    def _layer(self, arch: Architecture, prefix: str, layer: int, fold_norm: bool) -> LayerWeights:
        key = (arch.stack, layer, fold_norm)
        if key in self._layers:
            self._layers.move_to_end(key)
            return self._layers[key]
        weights = read_layer(self._source.tensors, arch, layer, fold_norm=fold_norm, prefix=prefix)
        self._layers[key] = weights
        while len(self._layers) > _KEPT_LAYERS:
            self._layers.popitem(last=False)
        return weights

    def head(
        self,
        layer: int,
        head: int,
        *,
        stack: str | None = None,
        offset: int = 0,
        fold_norm: bool = False,
        types: TypeRule | None = None,
    ) -> Head:
        """One head, read from its layer's weights (the layer is read once and kept).

        Parameters
        ----------
        layer, head : int
            0-based indices as in the checkpoint (query heads).
        stack : str, optional
            The attention stack (default: the first; see :attr:`stacks`).
        offset : int
            RoPE models: the relative offset d of the form L_d = W_K^T R_d W_Q (docs/models.md).
        fold_norm : bool
            Fold the gain of the norm feeding attention into W_Q, W_K (as analyze's option).
        types : TypeRule, optional
            How the head's ``head_type`` is named (default: analyze's default rule).

        Returns
        -------
        Head
            Its weights, Gram matrix, spectra, statistics and null laws.

        Raises
        ------
        QKEnergyError
            A layer, head or stack the model does not have, an offset without RoPE, or a head
            whose weights hold NaN or infinite values (``NonFiniteWeights``, naming where).
        """
        arch, prefix = self._stack(stack)
        (layer,) = select("layer", [layer], arch.n_layers, "layers")
        (head,) = select("head", [head], arch.n_heads, "query heads")
        rope = None
        if offset:
            from qkenergy.analysis.rope_offsets import plan_offsets
            from qkenergy.weights.rope_settings import has_rope

            if not has_rope(self._source.config, arch):
                raise ArgumentError(
                    f"offset: {offset} needs a rotary position embedding; {self.name} has {arch.positional} positions",
                    parameter="offset",
                )

            plan = plan_offsets([offset], self._source.config, arch, self._source.config_where)
            assert plan is not None
            rope = plan[0][layer]
        weights = self._layer(arch, prefix, layer, fold_norm)
        kv = int(weights.kv_head[head])
        if bad_heads(weights, [head])[0]:  # another head's NaN does not stop this one
            findings = nonfinite_findings(
                self._source.tensors, arch, layer, fold_norm=fold_norm, prefix=prefix
            )
            raise nonfinite_error(
                findings, arch, layer, [head], "heads the values do not reach read as usual"
            )
        from qkenergy.api.head import Head

        return Head(
            weights.w_query[head],
            weights.w_key[kv],
            layer=layer,
            head=head,
            kv_head=kv,
            stack=arch.stack,
            offset=offset,
            rope=rope,
            types=types,
            model=self.name,
        )

    def analyze(self, **options: Unpack[AnalyzeOptions]) -> Analysis:
        """The whole analysis of this model (every head against its null laws): see :func:`qkenergy.analyze`.

        Parameters
        ----------
        **options
            :func:`qkenergy.analyze`'s options (:class:`~qkenergy.analysis.run_config.AnalyzeOptions`).

        Returns
        -------
        Analysis
        """
        from qkenergy.analysis.run_config import RunConfig

        return run(self, RunConfig.of({**self._options, **options}, "Model.analyze()"))


def open(
    model: Any = None,
    *,
    model_type: str | None = None,
    layout: Layout | str | os.PathLike[str] | None = None,
    revision: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> Model:
    """Open MODEL for analysis: everything ``qkenergy analyze`` accepts.

    Parameters
    ----------
    model : path, str, object or None
        None (the embedded all-MiniLM-L6-v2), a .safetensors file, a directory, a GGUF file,
        a Hugging Face cache folder, a hub id, a transformers or TransformerLens model, or a
        mapping of tensor names to arrays (with ``config``).
    model_type : str, optional
        Read the checkpoint as this supported ``model_type`` (``qkenergy layouts`` lists them).
    layout : Layout or path, optional
        A Layout, or a TOML layout file, for an architecture qkenergy does not ship (docs/models.md).
    revision : str, optional
        Branch, tag or commit of a hub id or cache folder.
    config : mapping, optional
        The config.json dict of a mapping of arrays.

    Returns
    -------
    Model
        Reads config and headers now, weights when a head is asked for. Close it (or use
        ``with``) to release open files.
    """
    if isinstance(model, Model):
        raise QKEnergyError("model is already an opened Model; use it as it is")
    given = None
    if isinstance(layout, Layout):
        given = layout
    elif layout is not None:
        from qkenergy.weights.layout_toml import load_layout

        given = load_layout(layout)
    source = open_model(model, config=config, revision=revision)
    try:
        found = architectures(
            source.config, source.config_where, model_type=model_type, layout=given or source.layout
        )
        stacks = present_stacks(source.tensors, found)
    except BaseException:
        source.close()
        raise
    options: dict[str, Any] = {"model_type": model_type, "revision": revision, "config": config}
    if layout is not None:
        options["layout"] = layout if isinstance(layout, Layout) else Path(os.fspath(layout))
    return Model(source, stacks, argument=model, options=options)


def _reopen(settings: Mapping[str, Any]) -> Model:
    """The model a read table's settings name (its file, folder or hub id), opened again."""
    source = settings.get("model_source") or {}
    origin = source.get("origin")
    if origin == "embedded":
        return open(None)
    target = source.get("path") if origin in ("file", "directory", "cache") else source.get("hub_id")
    if not target:
        raise QKEnergyError(
            f"the analysis of {settings.get('model', 'this model')} does not say where its weights are "
            f"(origin {origin!r}); open the model with qk.open and analyze it"
        )
    return open(target, revision=source.get("revision"))


def run(model: Any, config: RunConfig) -> Analysis:
    """The analysis of MODEL (an opened Model, or anything :func:`open` takes) as ``config`` says.

    Parameters
    ----------
    model : Model, path, str, object or None
        What to analyse.
    config : RunConfig
        The run, checked (the command line builds it from its options).

    Returns
    -------
    Analysis
    """
    from qkenergy.analysis.analyze import analyze_run
    from qkenergy.api.results import Analysis

    if isinstance(model, Model):
        return Analysis(analyze_run(model._argument, config), model=model)
    r = config.reading
    # the model is read once, by the analysis; Analysis.head opens it when a head is asked for
    return Analysis(
        analyze_run(model, config),
        opener=lambda: open(
            model, model_type=r.model_type, layout=r.layout, revision=r.revision, config=r.config
        ),
    )


def analyze(model: Any = None, **options: Unpack[AnalyzeOptions]) -> Analysis:
    """Analyze every selected head of MODEL against its null laws, as ``qkenergy analyze`` does.

    Parameters
    ----------
    model : Model, path, str, object or None
        An opened :class:`~qkenergy.api.model.Model`, or anything :func:`qkenergy.open` takes.
    **options
        :class:`~qkenergy.analysis.run_config.AnalyzeOptions`: ``model_type``, ``layout``,
        ``revision``, ``config`` (when ``model`` is not opened yet), and analyze's own:
        ``layers``, ``heads`` (indices and/or ranges), ``rope_offsets``, ``per_layer``,
        ``fold_norm``, ``null`` (False, or a :class:`NullSpec`), ``samples``, ``seed``,
        ``null_kind``, ``rotation_samples``, ``type_rule`` (a name or a :class:`TypeRule`),
        ``imbalance_cut``, ``edge_cut``, ``radius``, ``cache_dir``, ``threads``, ``progress``,
        ``name``, ``skip_nonfinite`` (see :func:`qkenergy.analysis.analyze.analyze_model`).

    Returns
    -------
    Analysis

    Raises
    ------
    TypeError
        A setting ``qk.analyze()`` does not take (the message names the nearest one).
    QKEnergyError
        A model that cannot be read, or non-finite weights in a head asked for
        (``NonFiniteWeights``, naming the file, tensor and element or block) unless
        ``skip_nonfinite``.
    """
    from qkenergy.analysis.run_config import RunConfig

    if isinstance(model, Model):
        return run(model, RunConfig.of({**model._options, **options}, "qk.analyze()"))
    return run(model, RunConfig.of(options, "qk.analyze()"))


def read(path: str | os.PathLike[str]) -> Analysis:
    """The analysis a table file holds (``analyze -o`` or :meth:`Analysis.write`): heads, layers, settings.

    The round trip is exact: ``read(p).heads`` equals the written table, column by column, and
    ``layers`` (read when first used) the layer table.

    Parameters
    ----------
    path : path
        A ``.csv`` (with its ``.meta.json`` sidecar and ``NAME.layers.csv``), ``.parquet`` or ``.json``
        table.

    Returns
    -------
    Analysis
        Without the model's weights: :meth:`Analysis.head` reopens the model its settings name.
    """
    from qkenergy.analysis.analyze import AnalysisResult as Result
    from qkenergy.api.results import Analysis
    from qkenergy.formats.columns import Columns
    from qkenergy.formats.tables import read_table

    heads = read_table(path)
    settings = heads.attrs.get("settings") or {}
    columns: Columns = {str(name): heads[name].to_numpy() for name in heads.columns}
    result = Result(columns=columns, layers=None, model=str(settings.get("model", "")), settings=settings)
    result.__dict__["heads"] = heads  # the table as read (Result.heads is a cached property)
    return Analysis(result, layers_from=path, opener=lambda: _reopen(settings))
