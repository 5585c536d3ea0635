"""One run of the analysis as one frozen, checked :class:`RunConfig`: what is read, how it is judged.

The command line and the API (``qk.analyze``, ``Model.analyze``, ``analyze_model``) build
it once, from their options (:class:`AnalyzeOptions`, the one declaration of the keywords
an editor completes), and hand it whole to the analysis. Its parts: the
:class:`Selection` of layers, heads and RoPE offsets; the :class:`Reading` of the
checkpoint (model type, layout, revision, norm folding, name, non-finite heads); the null
laws (whether drawn, and the :class:`~qkenergy.analysis.nullspec.NullSpec`); the
:class:`~qkenergy.analysis.type_rule.TypeRule`; and how the run goes (layer forms, cache,
threads, progress). Every default lives with its class, every limit is checked when the
class is made.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from qkenergy.analysis.nullspec import NullSpec, null_kinds
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.parallel import resolve_threads

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.weights.layout import Layout

__all__ = ["AnalyzeOptions", "Reading", "RunConfig", "Selection"]

MAX_NAME = 200  # characters of a model name given with a name

Indices = Sequence[int | range]


class AnalyzeOptions(TypedDict, total=False):
    """The keywords of ``qk.analyze``, ``Model.analyze`` and ``analyze_model`` (all optional).

    ``config`` (mapping, optional)
        The config.json dict of a mapping of arrays.
    ``model_type`` (str, optional)
        Read the checkpoint as this supported type.
    ``layout`` (Layout or path, optional)
        A Layout or a TOML layout file for an architecture qkenergy does not ship.
    ``rope_offsets`` ("log" or sequence of int or range, optional)
        RoPE models: "log" (0, 1, 2, 4, ... up to the context length) or offsets d, read as
        the forms L_d = W_K^T R_d W_Q between a query and a key d positions earlier, one row
        per head and offset (column ``offset``); without it a RoPE model's heads are read at
        offset 0 (L = W_K^T W_Q).
    ``layers``, ``heads`` (sequence of int or range, optional)
        0-based indices as in the checkpoint (query heads; None = all).
    ``per_layer`` (bool)
        Add a table of the layers' whole forms (see :func:`~qkenergy.analysis.analyze.layer_form_statistics`).
    ``fold_norm`` (bool)
        Fold the gain of the norm feeding attention into W_Q, W_K.
    ``samples``, ``seed`` (int)
        The null laws' Monte Carlo size and seed.
    ``radius`` (float)
        The radius rule's Type II tolerance on c_sym + d_sym.
    ``type_rule`` (str or TypeRule)
        How head_type is named (a :class:`~qkenergy.analysis.type_rule.TypeRule` sets the rule,
        its cuts and radius together): "imbalance" (the default, the paper's published rule: Type II
        when c + d <= ``edge_cut``, else I+ / I- / II as the imbalance (c - d)/(c + d) is above
    ``imbalance_cut``, below minus it, or in between) or "radius" (Type II when
        c_sym + d_sym <= ``radius``, else the sign of c_sym - d_sym); :mod:`qkenergy.math.head_types`.
    ``imbalance_cut``, ``edge_cut`` (float)
        The imbalance rule's tolerances.
    ``null`` (bool or NullSpec)
        False skips the null laws (null columns NaN); a
        :class:`~qkenergy.analysis.nullspec.NullSpec` sets samples, seed, null_kind and
        rotation_samples together (then none of those may be given).
    ``cache_dir`` (path, optional)
        Keep null laws on disk.
    ``progress`` (bool)
        Show progress bars on stderr.
    ``null_kind`` (str)
        A registered null law (:data:`~qkenergy.analysis.nullspec.KINDS`: "gaussian", the law of
        a Gaussian head of the same shape; "rotation", the head's own W_K, W_Q with the query's
        input space rotated at random) or a selection of several ("both").
    ``rotation_samples`` (int)
        Draws of the rotation null per head.
    ``threads`` (int or None)
        Heads and null samples are spread over this many threads with BLAS on one thread each
        (None: every core this process may use; pass 1 inside Dask workers or other process
        pools); results do not depend on it.
    ``name`` (str, optional)
        The model's name in every output (the ``model`` column, ``settings["model"]``, the
        figures' labels) instead of the one MODEL gives, e.g. to tell two runs of one
        checkpoint apart (``settings["model_source"]`` still says what was read).
    ``revision`` (str, optional)
        The snapshot of a hub id or Hugging Face cache folder (as open_model).
    ``skip_nonfinite`` (bool)
        Heads whose forms are not finite are left out of the table instead of stopping the
        analysis; ``settings["skipped_heads"]`` lists each (stack, layer, head, why) and the
        summary says how many. A NaN in one head's rows reaches that head alone, one in a
        shared norm gain every head of its layer; the whole form of such a layer (``per_layer``)
        sums its finite heads alone (its ``n_heads`` says how many).
    """

    config: Mapping[str, Any] | None
    model_type: str | None
    layout: Layout | str | os.PathLike[str] | None
    revision: str | None
    layers: Indices | None
    heads: Indices | None
    rope_offsets: Indices | str | None
    per_layer: bool
    fold_norm: bool
    null: bool | NullSpec
    samples: int
    seed: int
    null_kind: str
    rotation_samples: int
    type_rule: str | TypeRule
    imbalance_cut: float
    edge_cut: float
    radius: float
    cache_dir: str | os.PathLike[str] | None
    threads: int | None
    progress: bool
    name: str | None
    skip_nonfinite: bool


_NULL_KEYS = ("samples", "seed", "null_kind", "rotation_samples")
_RULE_KEYS = ("imbalance_cut", "edge_cut", "radius")


@dataclass(frozen=True)
class Selection:
    """What is read.

    Parameters
    ----------
    layers, heads : sequence of int or range, optional
        Layers and query heads (None: all).
    rope_offsets : "log" or sequence of int or range, optional
        RoPE offsets d at which each head is read (None: offset 0 only).
    """

    layers: Indices | None = None
    heads: Indices | None = None
    rope_offsets: Indices | str | None = None


@dataclass(frozen=True)
class Reading:
    """How the checkpoint is read and named (each as in :class:`AnalyzeOptions`).

    Parameters
    ----------
    model_type : str, optional
        Read the checkpoint as this supported type.
    layout : Layout or path, optional
        A Layout or a TOML layout file.
    revision : str, optional
        The snapshot of a hub id or Hugging Face cache folder.
    config : mapping, optional
        The config.json dict of a mapping of arrays.
    fold_norm : bool
        Fold the gain of the norm feeding attention into W_Q, W_K.
    name : str, optional
        The model's name in every output (checked: one line, at most MAX_NAME characters).
    skip_nonfinite : bool
        Leave out heads with non-finite weights instead of stopping.
    """

    model_type: str | None = None
    layout: Layout | str | os.PathLike[str] | None = None
    revision: str | None = None
    config: Mapping[str, Any] | None = None
    fold_norm: bool = False
    name: str | None = None
    skip_nonfinite: bool = False

    def __post_init__(self) -> None:
        if self.name is not None:
            object.__setattr__(self, "name", model_name(self.name))

    @property
    def layout_file(self) -> str | None:
        """The TOML layout file given (None for none, or for a Layout object)."""
        from qkenergy.weights.layout import Layout

        return None if self.layout is None or isinstance(self.layout, Layout) else str(self.layout)


@dataclass(frozen=True)
class RunConfig:
    """One analysis run, checked when made.

    Parameters
    ----------
    selection : Selection
        Layers, heads, RoPE offsets.
    reading : Reading
        How the checkpoint is read.
    null : bool
        Whether null laws are drawn (``spec`` still gives the seed the settings record).
    spec : NullSpec
        How they are drawn.
    types : TypeRule
        How head types are named.
    per_layer : bool
        Add the layers' whole forms.
    cache_dir : path or None
        The null-law cache (and, in its hub/, the byte ranges of hub models).
    threads : int or None
        Threads for heads and null draws (None: every core; resolved when made).
    progress : bool
        Progress bars on stderr.
    """

    selection: Selection = field(default_factory=Selection)
    reading: Reading = field(default_factory=Reading)
    null: bool = True
    spec: NullSpec = field(default_factory=NullSpec)
    types: TypeRule = field(default_factory=TypeRule)
    per_layer: bool = False
    cache_dir: str | os.PathLike[str] | None = None
    threads: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "threads", resolve_threads(self.threads, "threads"))
        object.__setattr__(self, "null", bool(self.null))
        object.__setattr__(self, "per_layer", bool(self.per_layer))

    @property
    def gaussian(self) -> bool:
        """Whether the Gaussian null law is drawn."""
        return self.null and self.spec.gaussian

    @property
    def hub_cache(self) -> Path | None:
        """Where the byte ranges of hub models are kept (the cache's hub/)."""
        return None if self.cache_dir is None else Path(self.cache_dir) / "hub"

    @classmethod
    def of(cls, options: Mapping[str, Any], public: str = "analyze_model()") -> RunConfig:
        """The configuration of :class:`AnalyzeOptions` keywords (defaults for those not given).

        Parameters
        ----------
        options : mapping
            Keywords of :class:`AnalyzeOptions`.
        public : str
            The function the user called, named in a TypeError for an unknown keyword.

        Returns
        -------
        RunConfig

        Raises
        ------
        TypeError
            A keyword :class:`AnalyzeOptions` does not declare (the nearest one named).
        QKEnergyError
            A value out of range, or the null laws or the type rule given twice.
        """
        check_keywords(options, public)
        get = options.get
        return cls(
            selection=Selection(get("layers"), get("heads"), get("rope_offsets")),
            reading=Reading(
                **{k: options[k] for k in ("model_type", "layout", "revision", "config") if k in options},
                fold_norm=bool(get("fold_norm", False)),
                name=get("name"),
                skip_nonfinite=bool(get("skip_nonfinite", False)),
            ),
            null=bool(get("null", True)),
            spec=_null_spec(options),
            types=_type_rule(options),
            per_layer=bool(get("per_layer", False)),
            cache_dir=get("cache_dir"),
            threads=get("threads"),
            progress=bool(get("progress", False)),
        )


def check_keywords(options: Mapping[str, Any], public: str) -> None:
    """TypeError for a keyword :class:`AnalyzeOptions` does not declare, naming the function called."""
    taken = list(AnalyzeOptions.__annotations__)
    for key in options:
        if key not in taken:
            near = difflib.get_close_matches(str(key), taken, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; it takes {', '.join(taken)}"
            raise TypeError(f"{public} got an unexpected keyword argument {str(key)!r:.80}{hint}")


def _null_spec(options: Mapping[str, Any]) -> NullSpec:
    """The NullSpec of ``null`` (when one) or of the loose values; those a run does not use are not checked."""
    null = options.get("null", True)
    if isinstance(null, NullSpec):
        given = [key for key in _NULL_KEYS if key in options]
        if given:
            raise QKEnergyError(
                f"{given[0]}: give the null laws once, as null=NullSpec(...) or as loose values",
                parameter=given[0],
            )
        return null
    kind = options.get("null_kind", NullSpec.kind)
    if kind not in null_kinds():
        raise QKEnergyError(
            f"null_kind must be one of {', '.join(null_kinds())}, got {kind!r}", parameter="null_kind"
        )
    drawn = NullSpec(kind=kind)  # the defaults stand in for values the run does not use
    return NullSpec(
        samples=options.get("samples", drawn.samples) if null else drawn.samples,
        seed=options.get("seed", drawn.seed),
        kind=kind,
        rotation_samples=options.get("rotation_samples", drawn.rotation_samples)
        if null and drawn.draws("rotation_samples")
        else drawn.rotation_samples,
    )


def _type_rule(options: Mapping[str, Any]) -> TypeRule:
    """The TypeRule of ``type_rule`` (when one) or of the rule's name and loose tolerances."""
    rule = options.get("type_rule", TypeRule.rule)
    if isinstance(rule, TypeRule):
        given = [key for key in _RULE_KEYS if key in options]
        if given:
            raise QKEnergyError(
                f"{given[0]}: give the type rule once, as type_rule=TypeRule(...) or as loose values",
                parameter=given[0],
            )
        return rule
    return TypeRule(rule, **{key: options[key] for key in _RULE_KEYS if key in options})


def model_name(name: Any) -> str:
    """A model's ``name``: text on one line, not empty, at most MAX_NAME characters.

    Parameters
    ----------
    name : object
        The name given.

    Returns
    -------
    str
        The name, stripped.
    """
    if not isinstance(name, str) or not name.strip():
        raise ArgumentError(f"name: expected a non-empty name, got {name!r:.60}", parameter="name")
    if len(name) > MAX_NAME or any(not c.isprintable() for c in name):
        raise ArgumentError(
            f"name: expected at most {MAX_NAME} printable characters on one line, got {name!r:.60}",
            parameter="name",
        )
    return name.strip()
