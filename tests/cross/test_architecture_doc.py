"""docs/ARCHITECTURE.md names what exists: every module it lists is a file of src/qkenergy, every module
of src/qkenergy is listed, and every dotted name it cites (``gram.head_gram``, ``qk.open``,
``NullSpec.null_law``, ``analysis.analyze.rotation_seed``) resolves by import."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "qkenergy"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
TREE_START = "```\nsrc/qkenergy/\n"

DOTTED = re.compile(r"(?<![\w./<>-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
# a file name, not a Python name: model.safetensors.index.json, survey.json, fuzz/README.md
FILE_SUFFIXES = {"json", "md", "py", "toml", "parquet", "png", "svg", "csv", "npz", "sqlite", "html"}
FILE_SUFFIXES |= {"safetensors", "gguf", "txt", "bin", "pt", "js", "tmp"}


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _tree() -> list[str]:
    """The module map's entries, as paths below src/qkenergy (``api/``, ``api/model.py``)."""
    text = DOC.read_text(encoding="utf-8")
    assert TREE_START in text, "docs/ARCHITECTURE.md has no module map starting with src/qkenergy/"
    block = text.split(TREE_START, 1)[1].split("```", 1)[0]
    entries: list[str] = []
    folders: list[str] = []  # the folder open at each depth: src/qkenergy/ is depth 0
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        names = []
        for word in line.split():
            if not (word.endswith(".py") or word.endswith("/")):
                break
            names.append(word)
        if not names or depth < 1:
            continue
        del folders[depth - 1 :]
        prefix = "".join(folders)
        entries += [prefix + name for name in names]
        folders.append(names[0] if names[0].endswith("/") else "")
    return entries


def test_every_module_listed_exists_and_every_module_is_listed() -> None:
    listed = _tree()
    missing = [entry for entry in listed if not (PACKAGE / entry).exists()]
    assert not missing, f"docs/ARCHITECTURE.md lists modules that do not exist: {missing}"
    present = [
        str(path.relative_to(PACKAGE))
        for path in MODULES.values()
        if path.name != "__init__.py" or path.parent == PACKAGE
    ]
    present += sorted({str(path.parent.relative_to(PACKAGE)) + "/" for path in MODULES.values()} - {"./"})
    unlisted = sorted(set(present) - set(listed))
    assert not unlisted, f"modules of src/qkenergy missing from docs/ARCHITECTURE.md's map: {unlisted}"


@cache
def _classes() -> dict[str, list[str]]:
    """Class name -> the modules that define a top-level class of that name (read, not imported)."""
    found: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(name)
    return found


def _starts(first: str) -> list[Any] | None:
    """What the first part of a cited name can be: the package (qk), a package or module of it by
    its last part, or a class of it; None when it names nothing of qkenergy (numpy, os, a variable)."""
    if first in ("qk", "qkenergy"):
        return [importlib.import_module("qkenergy")]
    modules = [name for name in MODULES if name.rsplit(".", 1)[-1] == first]
    starts: list[Any] = [importlib.import_module(name) for name in modules]
    for module in _classes().get(first, []):
        starts.append(getattr(importlib.import_module(module), first))
    return starts or None


def _has(owner: Any, name: str) -> Any:
    """``owner``'s attribute ``name``: an attribute, a submodule, a dataclass field, an annotated or
    assigned instance attribute (``self.name = ...``); raises AttributeError otherwise."""
    if hasattr(owner, name):
        return getattr(owner, name)
    if isinstance(owner, ModuleType) and hasattr(owner, "__path__"):
        try:
            return importlib.import_module(f"{owner.__name__}.{name}")
        except ModuleNotFoundError:
            pass
    if isinstance(owner, type):
        for cls in owner.__mro__:
            if name in getattr(cls, "__annotations__", {}) or name in getattr(
                cls, "__dataclass_fields__", {}
            ):
                return None
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                continue
            if re.search(rf"self\.{name}\s*[:=]", source):
                return None
    raise AttributeError(name)


def _resolves(dotted: str) -> bool | None:
    """True when ``dotted`` names something that exists, False when not, None when it is not ours."""
    first, *rest = dotted.split(".")
    starts = _starts(first)
    if starts is None:
        return None
    for start in starts:
        owner = start
        try:
            for part in rest:
                owner = _has(owner, part)
        except AttributeError:
            continue
        return True
    return False


def _cited() -> list[str]:
    """Every dotted name of the page (code spans and the module map), once each, in order."""
    text = DOC.read_text(encoding="utf-8")
    names = []
    for match in DOTTED.finditer(text):
        name = match.group(1)
        if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES and name not in names:
            names.append(name)
    return names


def test_every_dotted_name_cited_exists() -> None:
    cited = _cited()
    checked = [name for name in cited if _resolves(name) is not None]
    assert len(checked) > 150, f"only {len(checked)} names of ours found: the parsing broke"
    missing = [name for name in checked if not _resolves(name)]
    assert not missing, f"docs/ARCHITECTURE.md cites names that do not exist: {missing}"


@pytest.mark.parametrize(
    ("dotted", "expected"),
    [
        ("gram.head_gram", True),
        ("qk.open", True),
        ("analysis.analyze.rotation_seed", True),
        ("NullSpec.null_law", True),
        ("Layout.stack", True),  # a dataclass field
        ("QKEnergyError.parameter", True),  # set in __init__
        ("gram.no_such_function", False),
        ("NullSpec.no_such_method", False),
        ("os.replace", None),
        ("df.attrs", None),
    ],
)
def test_the_checker_tells_names_apart(dotted: str, expected: bool | None) -> None:
    assert _resolves(dotted) is expected


def test_the_map_parser_reads_packages_and_shared_lines() -> None:
    listed = _tree()
    assert "__init__.py" in listed and "api/" in listed and "api/model.py" in listed
    assert {"cli/verify.py", "cli/layouts.py"} <= set(listed)  # the line of one command each
