"""How head types are named, as one frozen :class:`TypeRule`: the rule and its tolerances.

The rule, ``imbalance_cut``, ``edge_cut`` and the radius rule's ``radius`` travel
together from the API and the command line to analyze, the survey's units and the
tables' settings (keys ``type_rule``, ``imbalance_cut``, ``edge_cut``, ``radius``, written
and read back by :mod:`qkenergy.analysis.record`).
They only name head types: no null law depends on them (nor the null-law cache's
keys). The rules are :mod:`qkenergy.math.head_types`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qkenergy.math.head_types import EDGE_CUT, IMBALANCE_CUT, RADIUS, TYPE_RULES, check_type_rule

__all__ = ["TypeRule"]


@dataclass(frozen=True)
class TypeRule:
    """The head-type rule of a run (frozen; checked when made).

    Parameters
    ----------
    rule : {"imbalance", "radius"}
        "imbalance" (the published rule): Type II when c + d <= ``edge_cut``, else I+ / I- /
        II as the imbalance (c - d)/(c + d) is above ``imbalance_cut``, below minus it, or in
        between; "radius": Type II when c_sym + d_sym <= ``radius``, else the sign of
        c_sym - d_sym.
    imbalance_cut, edge_cut : float
        The imbalance rule's tolerances, in [0, 1).
    radius : float
        The radius rule's Type II tolerance on c_sym + d_sym, in [0, 1).

    Examples
    --------
    >>> TypeRule().keywords()
    {'radius': 0.02, 'type_rule': 'imbalance', 'imbalance_cut': 0.2, 'edge_cut': 0.01}
    >>> TypeRule("nope")
    Traceback (most recent call last):
    ...
    qkenergy.base.errors.QKEnergyError: type_rule must be one of imbalance, radius, got 'nope'
    """

    rule: str = TYPE_RULES[0]
    imbalance_cut: float = IMBALANCE_CUT
    edge_cut: float = EDGE_CUT
    radius: float = RADIUS

    def __post_init__(self) -> None:
        check_type_rule(
            self.rule, radius=self.radius, imbalance_cut=self.imbalance_cut, edge_cut=self.edge_cut
        )
        for name in ("imbalance_cut", "edge_cut", "radius"):
            object.__setattr__(self, name, float(getattr(self, name)))

    def keywords(self) -> dict[str, Any]:
        """The keywords of :func:`qkenergy.math.statistics.gram_statistics` and its kin.

        Returns
        -------
        dict
            radius, type_rule, imbalance_cut, edge_cut.
        """
        return {
            "radius": self.radius,
            "type_rule": self.rule,
            "imbalance_cut": self.imbalance_cut,
            "edge_cut": self.edge_cut,
        }
