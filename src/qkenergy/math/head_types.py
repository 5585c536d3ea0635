"""Head types from the profile (a, b, c, d): the published imbalance rule and the radius rule.

Two rules name a head Type II, I+ or I-:

- ``"imbalance"`` (the default, the rule the paper's analysis publishes): with
  the profile imbalance (c - d)/(c + d), Type II whenever c + d <= edge_cut
  (default 0.01: the head sits near the a-b edge of the profile simplex), else
  I+ above imbalance_cut (default 0.20), I- below -imbalance_cut, II in between;
- ``"radius"`` (qkenergy's earlier rule): Type II when c_sym + d_sym <= radius
  (default 0.02), else I+ when c_sym > d_sym, else I-.

Heads with an undefined symmetric profile (S = 0, or failed heads) get "".
"""

from __future__ import annotations

import math

import numpy as np

from qkenergy.base.errors import QKEnergyError
from qkenergy.math.defaults import EDGE_CUT, IMBALANCE_CUT, RADIUS
from qkenergy.math.energies import divide_or_nan

__all__ = [
    "EDGE_CUT",
    "IMBALANCE_CUT",
    "RADIUS",
    "TYPE_RULES",
    "check_type_rule",
    "head_types",
    "profile_imbalance",
]

TYPE_RULES: tuple[str, ...] = ("imbalance", "radius")


def profile_imbalance(c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(c - d)/(c + d) in [-1, 1]: which lobe carries the unpaired energy.

    Parameters
    ----------
    c, d : (...) ndarray
        The profile's unpaired positive and negative shares.

    Returns
    -------
    (...) ndarray
        NaN where c + d = 0.
    """
    c, d = np.asarray(c, dtype=np.float64), np.asarray(d, dtype=np.float64)
    return divide_or_nan(c - d, c + d)


def check_type_rule(
    type_rule: str,
    *,
    radius: float = RADIUS,
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
) -> None:
    """Refuse an unknown head-type rule or tolerances out of range.

    Parameters
    ----------
    type_rule : str
        "imbalance" or "radius".
    radius : float
        The radius rule's tolerance on c_sym + d_sym, in [0, 1).
    imbalance_cut : float
        The imbalance rule's cut on |(c - d)/(c + d)|, in [0, 1).
    edge_cut : float
        The imbalance rule's tolerance on c + d, in [0, 1).

    Raises
    ------
    QKEnergyError
        Naming the parameter (``type_rule``, ``radius``, ...) and what it must be.
    """
    if type_rule not in TYPE_RULES:
        raise QKEnergyError(
            f"type_rule must be one of {', '.join(TYPE_RULES)}, got {type_rule!r}", parameter="type_rule"
        )
    for parameter, value in (("radius", radius), ("imbalance_cut", imbalance_cut), ("edge_cut", edge_cut)):
        if isinstance(value, bool) or not (
            isinstance(value, int | float) and math.isfinite(value) and 0 <= value < 1
        ):
            raise QKEnergyError(f"{parameter} must be a number in [0, 1), got {value!r}", parameter=parameter)


def head_types(
    c: np.ndarray,
    d: np.ndarray,
    c_sym: np.ndarray,
    d_sym: np.ndarray,
    *,
    type_rule: str = "imbalance",
    radius: float = RADIUS,
    imbalance_cut: float = IMBALANCE_CUT,
    edge_cut: float = EDGE_CUT,
) -> np.ndarray:
    """ "II", "I+", "I-" per head by ``type_rule``; "" where the profile is undefined.

    "imbalance": II when c + d <= edge_cut, else I+ when (c - d)/(c + d) > imbalance_cut,
    I- below -imbalance_cut, II in between. "radius": II when c_sym + d_sym <= radius,
    else I+ when c_sym > d_sym, else I- (docs/mathematics.md §3, "Head types").

    Parameters
    ----------
    c, d : (...) ndarray
        The profile's unpaired positive and negative shares of ||L||^2.
    c_sym, d_sym : (...) ndarray
        The same in units of ||S||^2.
    type_rule : str
        "imbalance" (the published rule, default) or "radius".
    radius, imbalance_cut, edge_cut : float
        The rules' tolerances (see :func:`check_type_rule`).

    Returns
    -------
    (...) ndarray of str
        The type of each head (dtype ``<U2``).

    Examples
    --------
    >>> import numpy as np
    >>> from qkenergy.math.head_types import head_types
    >>> c, d = np.array([0.3, 0.001, 0.05]), np.array([0.05, 0.001, 0.3])
    >>> head_types(c, d, 2 * c, 2 * d).tolist()
    ['I+', 'II', 'I-']
    """
    c, d = np.asarray(c, dtype=np.float64), np.asarray(d, dtype=np.float64)
    c_sym, d_sym = np.asarray(c_sym, dtype=np.float64), np.asarray(d_sym, dtype=np.float64)
    if type_rule == "radius":
        off_diagonal = c_sym + d_sym
        types = np.where(off_diagonal <= radius, "II", np.where(c_sym > d_sym, "I+", "I-"))
    elif type_rule == "imbalance":
        unpaired = c + d
        imbalance = profile_imbalance(c, d)
        signed = np.where(imbalance > imbalance_cut, "I+", np.where(imbalance < -imbalance_cut, "I-", "II"))
        types = np.where(unpaired <= edge_cut, "II", signed)
    else:
        raise ValueError(f"unknown type rule {type_rule!r}; valid: {', '.join(TYPE_RULES)}")
    # S = 0 (a skew form) has no symmetric profile, hence no type, under either rule
    undefined = np.isnan(c_sym + d_sym) | np.isnan(c + d)
    return np.where(undefined, "", types).astype("<U2")
