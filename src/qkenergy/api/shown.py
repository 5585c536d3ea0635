"""The base of the API's results: the text their command prints, their JSON, their notebook view.

Every result (:class:`~qkenergy.api.results.Analysis`, :class:`~qkenergy.api.baseline.Baseline`,
:class:`~qkenergy.api.lobes.LobeDeparture`, :class:`~qkenergy.api.verification.Verification`,
:class:`~qkenergy.api.survey.Survey`, :class:`~qkenergy.api.layouts.Layouts` and ``Coverage``)
prints itself on a rich Console (:meth:`Shown.print_to`); ``summary`` and ``print_summary``,
``_repr_html_`` and, for those with a JSON form, ``to_json`` are written here once.
"""

from __future__ import annotations

import functools
import html
import json
from typing import TYPE_CHECKING, Any, ClassVar

from qkenergy.base.formatting import plain_text

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

__all__ = ["Shown", "ShownAsJson"]


class Shown:
    """A result that prints what its command prints, gives its JSON and shows itself in a notebook.

    A subclass defines :meth:`print_to` (and, with a JSON form, derives from :class:`ShownAsJson`
    and defines :meth:`~ShownAsJson.records`); the notebook view is :meth:`heading`, :meth:`html_table` and :meth:`notes` unless it defines its own.
    """

    def print_to(self, console: Console, **options: Any) -> None:
        """Print the result on ``console``, as its command does (each subclass says how).

        Parameters
        ----------
        console : rich.console.Console
            Where to print: boxed tables on a terminal, plain aligned text off it.
        **options
            The subclass's own (an analysis: ``top``).
        """
        raise NotImplementedError(f"{type(self).__name__} does not print itself")

    def summary(self, *, width: int = 80, **options: Any) -> str:
        """The text the command prints in a pipe ``width`` columns wide.

        Parameters
        ----------
        width : int
            Console width.
        **options
            As for :meth:`print_to`.

        Returns
        -------
        str
        """
        return plain_text(functools.partial(self.print_to, **options), width)

    def print_summary(self, console: Any = None, **options: Any) -> None:
        """Print the result on a rich Console (default: stdout), as the command does.

        Parameters
        ----------
        console : rich.console.Console, optional
            Where to print.
        **options
            As for :meth:`print_to`.
        """
        from rich.console import Console

        self.print_to(Console() if console is None else console, **options)

    def heading(self) -> str:
        """The heading of the notebook view.

        Returns
        -------
        str
        """
        return type(self).__name__

    def html_table(self) -> str:
        """The notebook view's table (default: ``self.table`` without its index).

        Returns
        -------
        str
        """
        table: Any = getattr(self, "table")  # noqa: B009 (each subclass has its own table)
        return str(table.to_html(index=False))

    def notes(self) -> list[str]:
        """The lines under the notebook view's table (default: none).

        Returns
        -------
        list of str
        """
        return []

    def _repr_html_(self) -> str:
        notes = "".join(f"<p>{html.escape(line)}</p>" for line in self.notes())
        return f"<div><strong>{html.escape(self.heading())}</strong>{self.html_table()}{notes}</div>"


class ShownAsJson(Shown):
    """A :class:`Shown` result with a JSON form (its command's ``--json``): :meth:`records`, :meth:`to_json`."""

    json_indent: ClassVar[int] = 1
    """Indentation of :meth:`to_json` (as the command's ``--json`` prints it)."""

    def records(self) -> Any:
        """The JSON-ready form of the result (what the command's ``--json`` prints).

        Returns
        -------
        object
        """
        raise NotImplementedError(f"{type(self).__name__} has no JSON form")

    def to_json(self) -> str:
        """The JSON text the command's ``--json`` prints.

        Returns
        -------
        str
        """
        return json.dumps(self.records(), indent=self.json_indent)
