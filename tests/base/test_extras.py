"""Optional dependencies: the core runs without them, and a missing one is one line naming its extra.

A missing module is simulated by blocking its import (``sys.modules[name] = None``) in a fresh
interpreter, so that nothing imported earlier by the test session hides it.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from qkenergy.base.extras import EXTRAS, MissingExtra, missing_extra, require

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = (
    "pandas",
    "pyarrow",
    "matplotlib",
    "plotly",
    "kaleido",
    "distributed",
    "dask",
    "huggingface_hub",
    "ml_dtypes",
)


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["optional-dependencies"]


def _installs(extra: str, distribution: str) -> bool:
    """Whether ``pip install 'qkenergy[extra]'`` installs ``distribution`` (self-references followed)."""
    for requirement in _extras()[extra]:
        if requirement.startswith("qkenergy["):
            inner = requirement.removeprefix("qkenergy[").removesuffix("]").split(",")
            if any(_installs(e.strip(), distribution) for e in inner):
                return True
        elif requirement.split(">")[0].split("=")[0].strip().replace("-", "_") == distribution:
            return True
    return False


def test_each_module_maps_to_an_extra_that_installs_it() -> None:
    dist = {"dask": "distributed"}  # dask comes with distributed
    for module, extra in EXTRAS.items():
        assert _installs(extra, dist.get(module, module)), (module, extra)
        assert _installs("all", dist.get(module, module)) or extra == "train", module
    core = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert not any(r.split(">")[0].replace("-", "_") in EXTRAS for r in core)
    assert "qkenergy[all]" in _extras()["test"]


def test_require_finds_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    require("plot", "numpy.linalg")  # present: nothing raised
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    with pytest.raises(MissingExtra) as info:
        require("plot", "matplotlib.pyplot", "--plot draws with it")
    assert (
        str(info.value) == "matplotlib is not installed (--plot draws with it): pip install 'qkenergy[plot]'"
    )


def test_missing_extra_of_an_import_error() -> None:
    error = ModuleNotFoundError("No module named 'plotly.graph_objects'", name="plotly.graph_objects")
    assert str(missing_extra(error)) == "plotly is not installed: pip install 'qkenergy[report]'"
    assert missing_extra(ModuleNotFoundError("x", name="no_such_module")) is None


def _cli(blocked: tuple[str, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    probe = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from qkenergy.cli.main import main\n"
        "main(sys.argv[1:])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_the_core_analyses_and_writes_csv_and_json_without_any_extra(tmp_path: Path) -> None:
    for table in ("heads.csv", "heads.json"):
        done = _cli(OPTIONAL, "analyze", "--layers", "0", "--samples", "200", "-o", table, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "sentence-transformers/all-MiniLM-L6-v2" in done.stdout and (tmp_path / table).is_file()


@pytest.mark.parametrize(
    ("blocked", "args", "extra"),
    [
        (("matplotlib",), ["analyze", "--layers", "0", "--plot", "plots"], "plot"),
        (("pyarrow",), ["analyze", "--layers", "0", "-o", "heads.parquet"], "tables"),
        (("pandas",), ["analyze", "--layers", "0", "--per-layer"], "pandas"),
        (("pyarrow",), ["plot", "heads.csv", "-o", "plots"], "tables"),
        (("matplotlib", "pyarrow"), ["plot", "heads.csv", "-o", "plots"], "plot"),
        (("plotly",), ["report", "heads.csv", "-o", "report.html"], "report"),
        (("distributed",), ["survey", "models.txt", "-o", "survey"], "survey"),
        (("huggingface_hub",), ["analyze", "org/name"], "hub"),
    ],
)
def test_a_missing_extra_is_one_line(
    tmp_path: Path, blocked: tuple[str, ...], args: list[str], extra: str
) -> None:
    (tmp_path / "models.txt").write_text("minilm\n", encoding="utf-8")
    if "heads.csv" in args:
        assert (
            _cli(
                (), "analyze", "--layers", "0", "--samples", "200", "-o", "heads.csv", cwd=tmp_path
            ).returncode
            == 0
        )
    done = _cli(blocked, *args, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.endswith(f"pip install 'qkenergy[{extra}]'"), line
    assert "Symmetric energy" not in done.stdout  # refused before the analysis, not after
