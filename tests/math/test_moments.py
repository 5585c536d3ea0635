"""The normalised spectrum of S (Lemmas 7 to 10), the moment statistics, the head-type rules, their null laws."""

from __future__ import annotations

import decimal

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import moments, nulls
from qkenergy.math.head_types import check_type_rule, head_types
from qkenergy.math.moments import MOMENT_STATISTICS
from qkenergy.math.statistics import head_statistics, spectra_statistic_columns, statistic_columns

NEW_COLUMNS = ("imbalance", *MOMENT_STATISTICS)


def dense_columns(w_query: np.ndarray, w_key: np.ndarray, zero_tol: float = 1e-9) -> dict[str, np.ndarray]:
    """The new columns straight from numpy's eigvalsh of the N x N S, by their definitions."""
    L = np.swapaxes(w_key, -1, -2).astype(np.float64) @ w_query.astype(np.float64)
    S = 0.5 * (L + np.swapaxes(L, -1, -2))
    out: dict[str, list[float]] = {name: [] for name in NEW_COLUMNS}
    for eigs, l_sq in zip(np.linalg.eigvalsh(S), np.sum(L * L, axis=(-2, -1))):
        lam = eigs[np.abs(eigs) > zero_tol * np.max(np.abs(eigs))]
        lam = lam / np.linalg.norm(lam)
        plus = np.sort(lam[lam > 0])[::-1]
        minus = np.sort(-lam[lam < 0])[::-1]
        m = max(plus.size, minus.size)
        plus, minus = np.pad(plus, (0, m - plus.size)), np.pad(minus, (0, m - minus.size))
        unit = np.linalg.norm(eigs) ** 2 / l_sq  # s: the lobes in units of ||L||
        c = np.sum(np.maximum(plus - minus, 0) ** 2) * unit
        d = np.sum(np.maximum(minus - plus, 0) ** 2) * unit
        out["imbalance"].append((c - d) / (c + d))
        out["lobe_imbalance"].append(np.sum(plus**2) - np.sum(minus**2))
        out["lobe_overlap"].append(np.sum(plus * minus))
        out["moment_O"].append(np.sum(lam / (1 - lam**2)))
        out["moment_E"].append(np.sum(lam**2 / (1 - lam**2)))
        out["moment_R"].append(np.sum(1 / (1 - lam)))
    return {name: np.array(values) for name, values in out.items()}


@pytest.mark.parametrize(
    "shape",
    ["random", "wide (n > N/2)", "repeated rows", "W_K = W_Q", "anisotropic"],
)
def test_new_columns_equal_the_dense_eigenvalues(shape: str) -> None:
    rng = np.random.default_rng(sum(map(ord, shape)))
    if shape == "wide (n > N/2)":
        w_query, w_key = rng.standard_normal((2, 5, 6, 8))
    else:
        w_query, w_key = rng.standard_normal((2, 5, 4, 20))
    if shape == "repeated rows":
        w_query[:, 2:] = w_query[:, :2]  # [W_K; W_Q] of rank 6 < 8
    elif shape == "W_K = W_Q":
        w_key = w_query  # S positive semidefinite, k = n
    elif shape == "anisotropic":
        w_key = w_key * 10.0 ** -np.arange(4)[:, None]
    stats = head_statistics(w_query, w_key)
    dense = dense_columns(w_query, w_key)
    for name in NEW_COLUMNS:
        got = getattr(stats, name)
        if shape == "W_K = W_Q" and name == "imbalance":
            np.testing.assert_array_equal(got, 1.0)  # d = 0: all the unpaired energy is positive
            continue
        np.testing.assert_allclose(got, dense[name], rtol=1e-9, atol=1e-9, err_msg=name)
    # Lemma 7 in the columns' own terms: 2C = b_sym, I = (1 - rho^2)/(1 + rho^2), P = 1 - sqrt(1 - 2C)
    np.testing.assert_allclose(2 * stats.lobe_overlap, stats.b_sym, atol=1e-12)
    rho = np.where(np.isfinite(stats.rho), stats.rho, 0.0)
    np.testing.assert_allclose(stats.lobe_imbalance, (1 - rho**2) / (1 + rho**2), atol=1e-12)
    np.testing.assert_allclose(stats.pairing, 1 - np.sqrt(1 - 2 * stats.lobe_overlap), atol=1e-12)


def test_moments_need_two_nonzero_eigenvalues() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 1, 9))
    stats = head_statistics(w, w)  # L = w^T w: S of rank one, lambda = (1)
    for name in ("moment_O", "moment_E", "moment_R"):
        assert np.all(np.isnan(getattr(stats, name))), name
    np.testing.assert_allclose(stats.lobe_imbalance, 1.0)
    np.testing.assert_allclose(stats.lobe_overlap, 0.0)
    skew = head_statistics(
        np.concatenate([w[:, :, ::-1], -w], axis=1), np.concatenate([w, w[:, :, ::-1]], axis=1)
    )
    assert np.all(np.isnan(skew.lobe_imbalance)) and np.all(np.isnan(skew.moment_R))  # S = 0: no lambda


def test_a_nearly_single_eigenvalue_keeps_its_digits() -> None:
    eigs = np.array([[1.0, 1e-6, -1e-7, 0.0]])
    lam, kept = moments.normalised_spectrum(eigs)
    got = moments.moment_statistics(lam, kept)
    decimal.getcontext().prec = 50
    values = [decimal.Decimal(x) for x in (1.0, 1e-6, -1e-7)]
    norm = sum(v * v for v in values).sqrt()
    exact = {"moment_O": decimal.Decimal(0), "moment_E": decimal.Decimal(0), "moment_R": decimal.Decimal(0)}
    for v in values:
        x = v / norm
        exact["moment_O"] += x / (1 - x * x)
        exact["moment_E"] += x * x / (1 - x * x)
        exact["moment_R"] += 1 / (1 - x)
    for name, value in exact.items():
        np.testing.assert_allclose(got[name], float(value), rtol=1e-9, err_msg=name)  # about 1e12 in size


def test_type_rules_at_their_boundaries() -> None:
    # exact binary values: c + d = 2^-7 on the edge; imbalance 0.125/0.625 = 0.2 at the cut
    edge = 2.0**-7
    c = np.array([2.0**-8 + 2.0**-9, 0.375, 0.375 + 2.0**-20, 0.25 - 2.0**-20, 0.25, 0.0])
    d = np.array([2.0**-9, 0.25, 0.25 - 2.0**-20, 0.375 + 2.0**-20, 0.25, 0.0])
    s = np.full(c.shape, 0.75)
    c_sym, d_sym = c / s, d / s
    c_sym[-1] = d_sym[-1] = np.nan  # S = 0: no symmetric profile
    #          on the edge, at the cut, above, below, between, S = 0
    assert head_types(c, d, c_sym, d_sym, edge_cut=edge).tolist() == ["II", "II", "I+", "I-", "II", ""]
    assert head_types(c, d, c_sym, d_sym, edge_cut=edge / 2).tolist() == ["I+", "II", "I+", "I-", "II", ""]
    assert head_types(c, d, c_sym, d_sym, edge_cut=edge, imbalance_cut=0.1).tolist()[1] == "I+"
    # the radius rule reads the symmetric profile only: the sign of c_sym - d_sym beyond the radius
    radius = head_types(c, d, c_sym, d_sym, type_rule="radius").tolist()
    assert radius == ["II", "I+", "I+", "I-", "I-", ""]
    with pytest.raises(ValueError, match="unknown type rule"):
        head_types(c, d, c_sym, d_sym, type_rule="nope")
    with pytest.raises(QKEnergyError, match="type_rule must be one of imbalance, radius"):
        check_type_rule("nope")
    with pytest.raises(QKEnergyError, match=r"edge_cut must be a number in \[0, 1\)"):
        check_type_rule("imbalance", edge_cut=1.5)


def test_null_law_of_the_new_statistics() -> None:
    """Odd statistics (I, O) have null mean exactly 0: W_Q -> -W_Q keeps the Gaussian law and maps lambda to iota lambda."""
    law = nulls.null_law(4, 16, samples=4000, seed=3)
    assert set(MOMENT_STATISTICS) <= set(law.names) and set(MOMENT_STATISTICS) <= set(nulls.NULL_STATISTICS)
    for name in ("lobe_imbalance", "moment_O"):
        assert abs(law.mean(name)) <= 5 * law.stderr(name), name  # 5 standard errors
    assert np.all(law.samples("moment_E") >= 1)
    two_c = 2 * law.samples("lobe_overlap")
    assert np.all((two_c >= 0) & (two_c <= 1))
    # Lemma 9 in the mean: E[R] = k + E[E] since E[O] = 0, k = 2n = 8
    R, E = law.samples("moment_R"), law.samples("moment_E")
    se = np.std(R - E, ddof=1) / np.sqrt(R.size)
    assert abs(np.mean(R - E) - 8) <= 5 * se


def test_fast_null_path_equals_the_gram_route() -> None:
    names = ("pairing", *MOMENT_STATISTICS)
    fast = spectra_statistic_columns(nulls.bartlett_spectra(np.random.default_rng(5), 8, 40, 64), 40, names)
    slow = statistic_columns(nulls.bartlett_gram(np.random.default_rng(5), 8, 40, 64), 40, names)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-12)
