"""How head types are named, as one frozen :class:`TypeRule`: the rule and its two tolerances.

The rule, ``imbalance_cut`` and ``edge_cut`` travel together from the API and
the command line to analyze, the survey's units and the tables' settings
(keys ``type_rule``, ``imbalance_cut``, ``edge_cut``). The Type II radius of
the radius rule is the null's (:class:`~qkenergy.analysis.nullspec.NullSpec`
``radius``): one value serves both. The rules are
:mod:`qkenergy.math.head_types`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qkenergy.math.head_types import EDGE_CUT, IMBALANCE_CUT, RADIUS, check_type_rule

__all__ = ["TypeRule"]


@dataclass(frozen=True)
class TypeRule:
    """The head-type rule of a run (frozen; checked when made).

    Parameters
    ----------
    rule : {"imbalance", "radius"}
        "imbalance" (the published rule): Type II when c + d <= ``edge_cut``, else I+ / I- /
        II as the imbalance (c - d)/(c + d) is above ``imbalance_cut``, below minus it, or in
        between; "radius": Type II when c_sym + d_sym <= the null's radius, else the sign of
        c_sym - d_sym.
    imbalance_cut, edge_cut : float
        The imbalance rule's tolerances, in [0, 1).

    Examples
    --------
    >>> TypeRule().settings()
    {'type_rule': 'imbalance', 'imbalance_cut': 0.2, 'edge_cut': 0.01}
    >>> TypeRule("nope")
    Traceback (most recent call last):
    ...
    qkenergy.base.errors.QKEnergyError: type_rule must be one of imbalance, radius, got 'nope'
    """

    rule: str = "imbalance"
    imbalance_cut: float = IMBALANCE_CUT
    edge_cut: float = EDGE_CUT

    def __post_init__(self) -> None:
        check_type_rule(self.rule, imbalance_cut=self.imbalance_cut, edge_cut=self.edge_cut)
        object.__setattr__(self, "imbalance_cut", float(self.imbalance_cut))
        object.__setattr__(self, "edge_cut", float(self.edge_cut))

    def settings(self) -> dict[str, Any]:
        """The rule under the keys of a table's settings.

        Returns
        -------
        dict
            type_rule, imbalance_cut, edge_cut.
        """
        return {"type_rule": self.rule, "imbalance_cut": self.imbalance_cut, "edge_cut": self.edge_cut}

    def keywords(self, radius: float = RADIUS) -> dict[str, Any]:
        """The keywords of :func:`qkenergy.math.statistics.gram_statistics` and its kin (``radius``: the null's).

        Parameters
        ----------
        radius : float
            The radius rule's tolerance (the null spec's).

        Returns
        -------
        dict
            The keywords of ``gram_statistics``, ``head_statistics`` and ``analyze_model``.
        """
        return {"radius": radius, **self.settings()}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> TypeRule:
        """The rule a table's (or a survey's) settings record; defaults for what they lack.

        Parameters
        ----------
        settings : mapping
            A table's or a survey's settings.

        Returns
        -------
        TypeRule
        """
        return cls(
            str(settings.get("type_rule", "imbalance")),
            float(settings.get("imbalance_cut", IMBALANCE_CUT)),
            float(settings.get("edge_cut", EDGE_CUT)),
        )
