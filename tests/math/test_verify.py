"""verify.run_checks: every claim of the specification has rows, they pass, and a broken library fails them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from qkenergy.base.errors import QKEnergyError
from qkenergy.math import baselines, energies, verify

CLAIMS = {
    "Lemma 5",
    "Corollary 1",
    "Corollary 2",
    "Proposition 6",
    "Lemma 6",
    "E[ratio] vs ratio of E",
    "Exact samplers",
    "Rotation null",
    "Layer null",
    "Beta tail",
    "Lemma 7",
    "Lemma 8",
    "Lemma 9",
    "Lemma 10",
    "Theorem 4",
}


@pytest.fixture(scope="module")
def quick_checks() -> list[verify.Check]:
    return verify.run_checks(samples=600, seed=1)


def test_every_claim_has_rows_and_all_pass(quick_checks: list[verify.Check]) -> None:
    assert {check.claim for check in quick_checks} == CLAIMS
    failed = [check for check in quick_checks if not check.passed]
    assert not failed, failed


def test_rows_are_well_formed(quick_checks: list[verify.Check]) -> None:
    for check in quick_checks:
        assert isinstance(check.claim, str) and check.claim
        assert isinstance(check.setting, str) and check.setting
        assert isinstance(check.passed, bool)
        assert math.isfinite(check.estimate)
        assert check.theory is None or math.isfinite(check.theory)
        assert check.stderr is None or (math.isfinite(check.stderr) and check.stderr >= 0)
        # each row states its tolerance
        text = check.setting + " " + check.note
        assert any(word in text for word in ("5 SE", "p > 0.001", "1e-10", "1e-12", "1/10", "1/2 of")), check


def test_monte_carlo_rows_use_five_standard_errors(quick_checks: list[verify.Check]) -> None:
    rows = [
        c for c in quick_checks if c.claim in {"Corollary 1", "Corollary 2", "Proposition 6"} and c.stderr
    ]
    assert len(rows) >= 40
    for check in rows:
        assert "5 SE" in check.note
        assert abs(check.z) <= verify.TOLERANCE_SE


def test_settings_cover_the_brief(quick_checks: list[verify.Check]) -> None:
    settings = " | ".join(c.setting for c in quick_checks)
    for needle in (
        "symmetric",
        "antisymmetric",
        "rank-one",
        "nilpotent",
        "1e-30",
        "1e+30",
        "n = 1, N = 12",
        "n = 12, N = 12",
        "sigma_K^2 = 0.5, sigma_Q^2 = 2",
        "pareto",
        "exponential entries",
        "lognormal entries",
        "bernoulli:0.1 entries",
        "Bartlett-Wishart G vs direct",
        "Beta(N(N+1)/4",
        "rank-one law",
    ):
        assert needle in settings, needle
    lemma6 = [c for c in quick_checks if c.claim == "Lemma 6"]
    assert any("does NOT decrease" in c.setting for c in lemma6)
    assert any("decreases towards 0" in c.setting for c in lemma6)
    assert "100,000" in lemma6[0].setting


def test_skewed_laws_are_reported_as_expected_departures(quick_checks: list[verify.Check]) -> None:
    rows = [c for c in quick_checks if c.claim == "E[ratio] vs ratio of E"]

    def row(law: str) -> verify.Check:
        prefix = f"N = 2, {law} entries, K = {verify.MIN_DEPARTURE_SAMPLES}"
        (found,) = [c for c in rows if c.setting.startswith(prefix)]
        return found

    for law in ("exponential", "lognormal", "bernoulli:0.1"):
        check = row(law)
        assert check.passed and abs(check.z) > verify.TOLERANCE_SE
        assert check.estimate > check.theory == 0.75
        assert "expected departure, not a failure" in check.note
    control = row("rademacher")
    assert control.passed and abs(control.z) <= verify.TOLERANCE_SE


def test_check_properties() -> None:
    row = verify.Check("c", "s", 1.0, 1.5, 0.25, True)
    assert row.z == pytest.approx(2.0) and row.error == pytest.approx(0.5)
    exact = verify.Check("c", "s", 0.0, 1e-16, None, True)
    assert exact.z is None and exact.error == pytest.approx(1e-16)
    behaviour = verify.Check("c", "s", None, 0.3, None, True)
    assert behaviour.z is None and behaviour.error is None


def test_seeded_and_independent_of_order() -> None:
    first = verify.check_corollary2(300, 7)
    again = verify.check_corollary2(300, 7)
    assert first == again
    other = verify.check_corollary2(300, 8)
    assert [c.estimate for c in first] != [c.estimate for c in other]


def test_bad_arguments_raise() -> None:
    with pytest.raises(QKEnergyError, match="samples"):
        verify.run_checks(samples=1)
    with pytest.raises(QKEnergyError, match="seed"):
        verify.run_checks(samples=100, seed=-1)


def test_broken_energies_fail_lemma5(monkeypatch: pytest.MonkeyPatch) -> None:
    real = energies.energies

    def broken(L: np.ndarray) -> energies.Energies:
        e = real(L)
        # an off-by-a-little symmetric energy, as a sign or factor slip would give
        return energies.Energies(
            e.norm_l_sq, e.norm_s_sq * (1 + 1e-6), e.norm_t_sq, e.trace_l_sq, e.symmetric_ratio, e.skew_ratio
        )

    monkeypatch.setattr(energies, "energies", broken)
    rows = verify.check_lemma5(100, 0)
    assert not all(row.passed for row in rows)


def test_wrong_closed_form_fails_corollary1(monkeypatch: pytest.MonkeyPatch) -> None:
    real = baselines.iid_square_expectations

    def wrong(N: int, sigma2: float = 1.0) -> baselines.EnergyExpectations:
        e = real(N, sigma2)
        # N(N+1)/2 replaced by N^2/2: the diagonal's contribution forgotten
        return baselines.EnergyExpectations(e.total, N * N / 2 * sigma2, e.skew, 0.5, e.skew_ratio)

    monkeypatch.setattr(baselines, "iid_square_expectations", wrong)
    rows = verify.check_corollary1(20_000, 0)
    assert any(not row.passed and "E||S||^2" in row.setting for row in rows)


@pytest.mark.slow
def test_default_run_passes() -> None:
    """The full default run (as `qkenergy verify`), once."""
    checks = verify.run_checks()
    assert all(check.passed for check in checks), [c for c in checks if not c.passed]


def test_broken_moments_fail_the_spectrum_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkenergy.math import statistics

    real = statistics.lobe_moments

    def broken(*args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        values = real(*args, **kwargs)
        # a factor slip in O and a lobe overlap off by a little
        return {
            **values,
            "moment_O": values["moment_O"] * (1 + 1e-6),
            "lobe_overlap": values["lobe_overlap"] + 1e-6,
        }

    monkeypatch.setattr(statistics, "lobe_moments", broken)
    for check in (verify.check_lemma7, verify.check_lemma9, verify.check_lemma10):
        assert not all(row.passed for row in check(100, 0)), check.__name__


def test_a_profile_off_its_face_fails_theorem4(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkenergy.math import statistics

    real = statistics.lobes

    def shifted(eigs: np.ndarray, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        alpha, beta = real(eigs, **kwargs)
        return alpha * (1 + 1e-3), beta  # the positive lobe a little too large: c > 0 where it is 0

    monkeypatch.setattr(statistics, "lobes", shifted)
    assert not all(row.passed for row in verify.check_theorem4(100, 0))
