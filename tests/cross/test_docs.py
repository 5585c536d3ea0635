"""The Python tour (docs/api_tour.py) keeps running as shown; the families page lists every layout."""

import runpy
from pathlib import Path

import numpy as np

from qkenergy.weights.families import FAMILIES

TOUR = Path(__file__).resolve().parents[2] / "docs" / "api_tour.py"


def test_api_tour_runs(capsys) -> None:
    namespace = runpy.run_path(str(TOUR))
    out = capsys.readouterr().out
    assert "I+" in out  # MiniLM layer 2 heads are judged in the printed table
    # The figures the README quotes from this script.
    assert namespace["law"].mean("symmetric_energy") == 385 / 768
    assert np.isclose(namespace["est"].expectation_of_ratio.value, 0.766862, atol=1e-6)
    assert len(namespace["result"].heads) == 12
    # the notebook API's part: the same heads, one object each
    analysis, head = namespace["analysis"], namespace["head"]
    row = analysis.heads[(analysis.heads["layer"] == 2) & (analysis.heads["head"] == 3)].iloc[0]
    assert (
        head.symmetric_energy
        == row["symmetric_energy"]
        == namespace["result"].heads["symmetric_energy"].iloc[3]
    )
    s_law = namespace["s_law"]
    assert s_law.pvalue(head.symmetric_energy, tail="empirical") == row["symmetric_energy_p"] == 2 / 501
    assert (
        s_law.pvalue(head.symmetric_energy)
        == s_law.p_tail(head.symmetric_energy)
        == row["symmetric_energy_p_tail"]
    )
    assert namespace["fig"].axes
    # the survey's part: a Survey of the MiniLM's first layer, its null spec and a report figure
    survey = namespace["survey"]
    assert survey.ok and survey.null == namespace["spec"] and len(survey.heads) == 12
    assert namespace["survey_figure"].data


def test_families_page_lists_the_supported_layouts() -> None:
    """docs/families.md's supported-types table is exactly `qkenergy layouts --markdown`."""
    from click.testing import CliRunner

    from qkenergy.cli import cli

    result = CliRunner().invoke(cli, ["layouts", "--markdown"])
    assert result.exit_code == 0, result.output
    page = (TOUR.parent / "families.md").read_text(encoding="utf-8")
    start, end = "<!-- generated: layouts -->\n", "<!-- end -->"
    assert start in page
    block = page.split(start, 1)[1].split(end, 1)[0]
    assert block == result.output
    assert block.count("\n") == 2 + len(FAMILIES)  # header, rule, one line per model_type
