"""What the figures say about a run, read from the run's own recorded settings (never a default).

A figure's caption or title that states how heads were judged (the head-type rule and its
tolerances) comes from here, so that it cannot contradict the table it draws: the rule is read
from the settings recorded with the table or the survey (``type_rule``, ``imbalance_cut``,
``edge_cut``, and the radius rule's ``radius``; :mod:`qkenergy.math.head_types`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qkenergy.analysis.record import recorded_run
from qkenergy.analysis.type_rule import TypeRule

__all__ = ["recorded_type_rule", "report_type_rules", "type_rule_text"]


def recorded_type_rule(settings: Mapping[str, Any] | None) -> tuple[TypeRule, float] | None:
    """The head-type rule and the radius a run recorded; None when its settings say nothing of types.

    Tables written before the imbalance rule record a ``radius`` and no ``type_rule``: theirs
    was the radius rule (:func:`~qkenergy.analysis.record.recorded_run`).

    Parameters
    ----------
    settings : mapping or None
        A table's or a survey's settings.

    Returns
    -------
    (TypeRule, float) or None
        The rule and the radius rule's tolerance.
    """
    if not settings or not ({"type_rule", "radius"} & set(settings)):
        return None
    rule = recorded_run(settings).types
    return rule, rule.radius


def type_rule_text(settings: Mapping[str, Any] | None) -> str | None:
    """One sentence naming the head types by the rule the run recorded, with its tolerances.

    Parameters
    ----------
    settings : mapping or None
        A table's or a survey's settings.

    Returns
    -------
    str or None
        The sentence; None when the settings record no rule.

    Examples
    --------
    >>> type_rule_text({"radius": 0.05})[:40]
    'Radius rule: Type II (paired lobes) when'
    >>> type_rule_text({"samples": 300}) is None
    True
    """
    recorded = recorded_type_rule(settings)
    if recorded is None:
        return None
    rule, radius = recorded
    if rule.rule == "radius":
        return (
            f"Radius rule: Type II (paired lobes) when c_sym + d_sym <= {radius:g}, else Type I+ "
            "(excess positive-lobe energy) when c_sym > d_sym, else Type I- (excess negative-lobe energy)."
        )
    return (
        f"Imbalance rule: Type II when c + d <= {rule.edge_cut:g} or |c - d|/(c + d) <= "
        f"{rule.imbalance_cut:g} (paired lobes), else Type I+ (excess positive-lobe energy) when "
        "c > d, else Type I- (excess negative-lobe energy)."
    )


def report_type_rules(settings: Mapping[str, Any] | None) -> str | None:
    """The head-type rule(s) behind a report, from the settings it records (a survey's, or each table's).

    Parameters
    ----------
    settings : mapping or None
        The report's settings: ``{"settings": ...}`` of a survey, ``{"tables": {path: settings}}``
        of head tables, or one table's settings.

    Returns
    -------
    str or None
        The rule's sentence; with tables that record different rules, each table's; None when
        no rule is recorded.
    """
    settings = settings or {}
    survey, tables = settings.get("settings"), settings.get("tables")
    if isinstance(survey, Mapping):
        recorded = {"": type_rule_text(survey)}
    elif isinstance(tables, Mapping):
        recorded = {str(k): type_rule_text(v) for k, v in tables.items() if isinstance(v, Mapping)}
    else:
        recorded = {"": type_rule_text(settings)}
    texts = {text for text in recorded.values() if text is not None}
    if len(texts) != len(set(recorded.values())) or not texts:
        return None  # some table records no rule: no one sentence is true of every model
    if len(texts) == 1:
        return texts.pop()
    return "The tables record different rules. " + " ".join(f"{k}: {v}" for k, v in recorded.items())
