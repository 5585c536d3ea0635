"""The supported model types and the coverage of transformers' model types, as objects.

``qk.layouts() -> Layouts``: one row per supported ``model_type`` (stacks, positions,
qk-norm, variants, the transformers class that proves the layout), what ``qkenergy
layouts`` prints. ``qk.coverage() -> Coverage``: every ``model_type`` of the installed
transformers classified as supported, not a bilinear attention (and why) or not yet
supported, with the counts in one sentence: ``qkenergy layouts --coverage``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qkenergy.api.shown import ShownAsJson
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.formatting import markdown_table, print_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from qkenergy.weights.layout import Family

__all__ = ["Coverage", "Layouts", "coverage", "installed_model_types", "layouts"]


class _Rows(ShownAsJson):
    """Shared by Layouts and Coverage: rows of text keyed by ``columns``, as records, DataFrame, text."""

    rows: tuple[Mapping[str, str], ...]
    columns: tuple[str, ...]
    title: str
    shown: tuple[str, ...] | None = None
    """The columns of the text table (None: all): it fits 80 columns, the rest is in the JSON and markdown."""
    note: str | None = None
    """A line printed under the text table."""

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.records())

    def records(self) -> list[dict[str, str]]:
        """The rows as dicts (copies), keyed by :attr:`columns`.

        Returns
        -------
        list of dict
        """
        return [dict(row) for row in self.rows]

    @property
    def model_types(self) -> list[str]:
        """The ``model_type`` of each row, sorted."""
        return [row["model_type"] for row in self.rows]

    @property
    def table(self) -> pd.DataFrame:
        """The rows as a DataFrame (one column per name of :attr:`columns`)."""
        import pandas as pd

        return pd.DataFrame(self.records(), columns=list(self.columns))

    def print_to(self, console: Any, **options: Any) -> None:
        """Print the table on a rich Console: boxed on a terminal, plain off it, fitted to its width.

        Parameters
        ----------
        console : rich.console.Console
            Where to print: the widest cells wrap to fit it.
        **options
            None.
        """
        from rich.table import Table

        shown = self.columns if self.shown is None else self.shown
        table = Table(title=self.title, title_justify="left")
        for column in shown:  # the model type whole, long words broken rather than cut
            table.add_column(column, no_wrap=column == "model_type", overflow="fold")
        for row in self.rows:
            table.add_row(*(row[c] for c in shown))
        print_table(console, table)
        if self.note is not None:
            console.print(self.note, highlight=False)

    def heading(self) -> str:
        """The table's title.

        Returns
        -------
        str
        """
        return self.title


@dataclass(frozen=True, repr=False)
class Layouts(_Rows):
    """The supported model types, one row each (made by :func:`layouts`).

    Parameters
    ----------
    rows : tuple of dict
        One row per supported ``model_type``, sorted, keyed by ``columns``
        (``weights.families.describe_families``).
    columns : tuple of str
        model_type, models, stacks, positional, qk_norm, variants, proven by
        (``weights.families.LAYOUT_COLUMNS``).

    Attributes
    ----------
    model_types : list of str
        The supported ``model_type`` values.
    table : DataFrame
        The rows as a DataFrame.

    Examples
    --------
    >>> import qkenergy as qk
    >>> supported = qk.layouts()
    >>> "llama" in supported.model_types and "t5" in supported.model_types
    True
    >>> next(row for row in supported if row["model_type"] == "t5")["stacks"]
    'encoder, decoder, cross'
    >>> supported.to_markdown().splitlines()[0]
    '| model_type | models | stacks | positional | qk_norm | variants | proven by |'
    """

    rows: tuple[Mapping[str, str], ...]
    columns: tuple[str, ...]
    title = "qkenergy layouts: supported model types"
    shown = ("model_type", "models", "stacks", "positional", "qk_norm")
    note = "variants, and the transformers class proving each layout: --markdown, --json"

    def __repr__(self) -> str:
        return f"<Layouts: {len(self)} supported model types>"

    json_indent = 2

    def to_markdown(self) -> str:
        """The markdown table ``qkenergy layouts --markdown`` prints (docs/families.md's list).

        Returns
        -------
        str
        """
        return markdown_table(self.columns, self.rows)


@dataclass(frozen=True, repr=False)
class Coverage(_Rows):
    """Model types classified: supported, not a bilinear attention, or not yet supported (made by :func:`coverage`).

    Parameters
    ----------
    rows : tuple of dict
        One row per ``model_type``, sorted: its ``status`` and ``detail`` (the class that proves a
        supported layout, the reason a type has no bilinear attention; ``weights.coverage.coverage``).
    where : str
        What the list is, in the counts' sentence ("transformers 4.57.1").
    columns : tuple of str
        model_type, status, detail (``weights.coverage.COVERAGE_COLUMNS``).

    Attributes
    ----------
    line : str
        The counts in one sentence (the README's line).
    counts : dict
        Rows per status, every status of ``weights.coverage.STATUSES``.

    Examples
    --------
    >>> import qkenergy as qk
    >>> found = qk.coverage(["llama", "mamba", "no_such_type"], where="three types")
    >>> [row["status"] for row in found]
    ['supported', 'not bilinear', 'not yet supported']
    >>> found.line
    '1 of the 3 model types of three types are supported, 1 have no bilinear attention, 1 are not yet supported'
    """

    rows: tuple[Mapping[str, str], ...]
    where: str
    columns: tuple[str, ...]

    def __repr__(self) -> str:
        return f"<Coverage: {self.line}>"

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"qkenergy layouts --coverage: {self.line}"

    @property
    def line(self) -> str:
        from qkenergy.weights.coverage import coverage_line

        return coverage_line(self.rows, self.where)

    @property
    def counts(self) -> dict[str, int]:
        from qkenergy.weights.coverage import coverage_counts

        return coverage_counts(self.rows)

    def to_json(self) -> str:
        """The JSON object ``qkenergy layouts --coverage --json`` prints: the sentence and the rows.

        Returns
        -------
        str
        """
        return json.dumps({"summary": self.line, "model_types": self.records()}, indent=2)

    def to_markdown(self) -> str:
        """The sentence, then the markdown table (``qkenergy layouts --coverage --markdown``, docs/families.md).

        Returns
        -------
        str
        """
        return self.line + "\n\n" + markdown_table(self.columns, self.rows)


def _matching(
    rows: Iterable[Mapping[str, str]], name: str | None, fields: tuple[str, ...]
) -> tuple[Mapping[str, str], ...]:
    """The rows whose ``fields`` contain ``name`` (case-insensitive; QKEnergyError when none does); all of
    them without a name."""
    rows = tuple(rows)
    if name is None:
        return rows
    wanted = name.strip().casefold()
    found = tuple(row for row in rows if any(wanted in row[field].casefold() for field in fields))
    if not found:
        raise QKEnergyError(f"no model type matches {name!r} (by model_type or model names, ignoring case)")
    return found


def layouts(families: Mapping[str, Family] | None = None, *, name: str | None = None) -> Layouts:
    """The supported model types and where their heads live, as ``qkenergy layouts [NAME]`` lists them.

    Parameters
    ----------
    families : mapping of str to Family, optional
        The families to describe (default: every supported one, ``weights.families.FAMILIES``).
    name : str, optional
        Keep the rows whose ``model_type`` or model names contain it, ignoring case
        (``"llama"``: llama, llama4, mllama, ...).

    Returns
    -------
    Layouts
        One row per ``model_type``, sorted.

    Raises
    ------
    QKEnergyError
        No supported model type matches ``name``.
    """
    from qkenergy.weights.families import LAYOUT_COLUMNS, describe_families

    rows = _matching(describe_families(families), name, ("model_type", "models"))
    return Layouts(rows, columns=LAYOUT_COLUMNS)


def installed_model_types() -> tuple[list[str], str]:
    """Every ``model_type`` the installed transformers defines (its config mapping), and its version.

    Returns
    -------
    model_types : list of str
        Sorted.
    version : str
        transformers' version.

    Raises
    ------
    QKEnergyError
        transformers is not installed (``parameter`` "model_types": :func:`coverage` needs a list).
    """
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # type: ignore[attr-defined]
    except ImportError:
        raise QKEnergyError(
            "model_types: none given, and listing the installed transformers' model types needs "
            "transformers: pip install transformers",
            parameter="model_types",
        ) from None
    return sorted(CONFIG_MAPPING_NAMES), str(transformers.__version__)


def coverage(
    model_types: Iterable[str] | None = None, *, where: str | None = None, name: str | None = None
) -> Coverage:
    """Every model type classified: supported (and its proof), not a bilinear attention (and why), or not yet.

    Parameters
    ----------
    model_types : iterable of str, optional
        The ``model_type`` values to classify (default: every one of the installed transformers).
    where : str, optional
        What the list is, for the counts' sentence (default "transformers VERSION" for the
        installed list, else "the given list").
    name : str, optional
        Keep the model types that contain it, ignoring case (the counts then count those).

    Returns
    -------
    Coverage
        One row per distinct ``model_type``, sorted.

    Raises
    ------
    QKEnergyError
        ``model_types`` not given and transformers not installed; no model type matches ``name``.
    """
    from qkenergy.weights.coverage import COVERAGE_COLUMNS
    from qkenergy.weights.coverage import coverage as classify

    if model_types is None:
        model_types, version = installed_model_types()
        where = f"transformers {version}" if where is None else where
    rows = _matching(classify(model_types), name, ("model_type",))
    return Coverage(rows, where="the given list" if where is None else where, columns=COVERAGE_COLUMNS)
