"""Public names carry numpydoc sections, and docstrings cite docs/mathematics.md sections that exist.

The public names are derived, never listed: every name of ``qkenergy.__all__`` (with the public
methods of its classes), every function and class of a ``qkenergy.math`` module's ``__all__`` (of
the module, where it has none), every function and class of the ``__all__`` of each module of the
sub-packages in ``DOCUMENTED_PACKAGES`` (all but the command line),
what the tours users copy from (docs/api_tour.py, docs/quickstart.py) import from qkenergy, and
the functions and classes README.md and docs/*.md name by their dotted path. For each, ``numpydoc.validate``
must find a docstring whose Parameters section documents exactly the signature's parameters,
and a Returns section where the function returns something.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import qkenergy
import qkenergy.math

numpydoc_validate = pytest.importorskip("numpydoc.validate")

ROOT = Path(__file__).resolve().parents[2]
TOURS = [ROOT / "docs" / "api_tour.py", ROOT / "docs" / "quickstart.py"]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOTTED = re.compile(r"\bqkenergy(?:\.\w+)+")

# Sub-packages whose modules' ``__all__`` names are all checked (walked with pkgutil); one package a line.
DOCUMENTED_PACKAGES = (
    "weights",
    "base",
    "analysis",
    "figures",
    "formats",
    "report",
    "surveys",
    "training",
)

CHECKS = {
    "GL08": "no docstring",
    "PR01": "a parameter of the signature is not documented",
    "PR02": "a documented parameter is not in the signature",
    "RT01": "no Returns section",
}


def _canonical(obj: Any) -> str | None:
    """``module.qualname`` of a function or class defined in qkenergy, else None (constants, re-exports of others)."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return None
    module = getattr(obj, "__module__", "") or ""
    return f"{module}.{obj.__qualname__}" if module.startswith("qkenergy") else None


def _tour_imports(path: Path) -> list[Any]:
    """The objects a tour imports from qkenergy (``from qkenergy.x import y``; ``qk.name`` for the root)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[Any] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qkenergy"):
            module = importlib.import_module(node.module)
            found += [getattr(module, alias.name) for alias in node.names]
    return found


def _documented(path: Path) -> list[Any]:
    """The functions and classes a page names by their dotted path (``qkenergy.formats.tables.read_table``)."""
    found: list[Any] = []
    for dotted in DOTTED.findall(path.read_text(encoding="utf-8")):
        module_name, _, attribute = dotted.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a module named by its path, or a page naming a name that is gone
            continue
        if hasattr(module, attribute):
            found.append(getattr(module, attribute))
    return found


def _package_exports() -> list[Any]:
    """Every name of the ``__all__`` of every module of the sub-packages in DOCUMENTED_PACKAGES."""
    found: list[Any] = []
    for package_name in DOCUMENTED_PACKAGES:
        package = importlib.import_module(f"qkenergy.{package_name}")
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            found += [getattr(module, name) for name in getattr(module, "__all__", ())]
    return found


def public_objects() -> dict[str, Any]:
    """Canonical name -> object of every public name (see the module docstring)."""
    objects = [getattr(qkenergy, name) for name in qkenergy.__all__ if name != "__version__"]
    # and the public methods of its classes (Analysis.top, Law.ppf, ...)
    objects += [
        getattr(method, "__func__", method)  # a classmethod's or staticmethod's function
        for cls in objects
        if inspect.isclass(cls)
        for name, method in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(getattr(method, "__func__", method))
    ]
    for info in pkgutil.iter_modules(qkenergy.math.__path__):
        module = importlib.import_module(f"qkenergy.math.{info.name}")
        public = getattr(module, "__all__", None)
        if public is None:  # a module without __all__: the functions and classes it defines
            public = [name for name, obj in vars(module).items() if not name.startswith("_")]
            public = [
                name for name in public if getattr(vars(module)[name], "__module__", "") == module.__name__
            ]
        objects += [getattr(module, name) for name in public]
    objects += _package_exports()
    for tour in TOURS:
        objects += _tour_imports(tour)
    for doc in DOCS:
        objects += _documented(doc)
    named = {_canonical(obj): obj for obj in objects}
    return {name: named[name] for name in sorted(n for n in named if n is not None)}


def public_names() -> list[str]:
    return list(public_objects())


def test_the_checked_names_cover_the_public_api() -> None:
    names = public_names()
    for expected in (
        "qkenergy.api.model.open",
        "qkenergy.api.results.Analysis",
        "qkenergy.api.verification.verify",
        "qkenergy.math.nulls.null_law",
        "qkenergy.math.lobes.lobe_departure_curve",
        "qkenergy.math.statistics.head_statistics",  # imported by the tour
        "qkenergy.api.results.Analysis.top",  # a method of a class of qk.__all__
        "qkenergy.analysis.record.recorded_run",  # in a module's __all__ of DOCUMENTED_PACKAGES
        "qkenergy.formats.tables.read_table",  # named in docs/
        "qkenergy.weights.gguf_io.read_header",  # in a module's __all__ of DOCUMENTED_PACKAGES
        "qkenergy.base.parallel.thread_map",
        "qkenergy.surveys.ledger.iso",
        "qkenergy.figures.captions.type_rule_text",
    ):
        assert expected in names
    assert len(names) > 80


PUBLIC = public_objects()


@pytest.mark.parametrize(("name", "obj"), PUBLIC.items(), ids=list(PUBLIC))
def test_numpydoc_sections(name: str, obj: Any) -> None:
    # a Protocol is never instantiated: it needs a docstring, and has no parameters to document
    checks = {"GL08"} if getattr(obj, "_is_protocol", False) else set(CHECKS)
    errors = [
        f"{code} ({CHECKS[code]}): {message}"
        for code, message in numpydoc_validate.validate(name)["errors"]
        if code in checks
    ]
    assert not errors, f"{name}:\n  " + "\n  ".join(errors)


# ---------------------------------------------------------------------------
# citations of docs/mathematics.md

CITATION = re.compile(r"mathematics\.md(?:,? section |,? ?§)(\d+)(?:\s*[-–]\s*§?(\d+))?(?:,\s*\"([^\"]+)\")?")


def _sections() -> dict[int, str]:
    """Section number -> its text (from its ``## N.`` heading to the next one)."""
    text = (ROOT / "docs" / "mathematics.md").read_text(encoding="utf-8")
    parts = re.split(r"^## (\d+)\. ", text, flags=re.MULTILINE)
    return {int(number): f"## {body}" for number, body in zip(parts[1::2], parts[2::2])}


def test_citations_name_sections_that_exist() -> None:
    sections = _sections()
    problems, cited = [], 0
    for path in sorted((ROOT / "src" / "qkenergy").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for match in CITATION.finditer(" ".join(text.split())):  # a citation may break across lines
            cited += 1
            first, last, title = int(match[1]), int(match[2] or match[1]), match[3]
            where = f"{path.relative_to(ROOT)}: {match[0]!r}"
            missing = [n for n in range(first, last + 1) if n not in sections]
            if missing or last < first:
                problems.append(f"{where}: no section {missing or last} in docs/mathematics.md")
            elif title is not None and not re.search(
                rf"^#+ .*{re.escape(title)}", sections[first], flags=re.MULTILINE | re.IGNORECASE
            ):
                problems.append(f"{where}: section {first} has no heading {title!r}")
    assert cited > 40  # the pattern finds the citations (they are many)
    assert not problems, "\n".join(problems)


def test_the_citation_pattern_reads_every_form() -> None:
    forms = {
        "docs/mathematics.md §3": ("3", None, None),
        "docs/mathematics.md, section 5": ("5", None, None),
        "docs/mathematics.md §2-§9": ("2", "9", None),
        'docs/mathematics.md §3, "Proportional lobes"': ("3", None, "Proportional lobes"),
    }
    for text, groups in forms.items():
        match = CITATION.search(text)
        assert match is not None and match.groups() == groups, text
