"""The README and docs/ stand on their own, and docs/columns.md names every column analyze writes."""

from __future__ import annotations

import re
from pathlib import Path

from qkenergy.analysis.analyze import analyze_model

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKDOWN_TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)")  # [text](target) and ![alt](target)


def test_docs_link_to_nothing_outside_the_repository() -> None:
    problems = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        name = doc.relative_to(ROOT)
        for lineno, line in enumerate(text.splitlines(), 1):
            if re.search(r"(?<!\.)\.\./", line):  # "../", not an ellipsis ".../"
                problems.append(f"{name}:{lineno}: a path leaving its folder ('../'): {line.strip()}")
            if re.search(r"\b(https?|ftp)://", line):
                problems.append(f"{name}:{lineno}: a link outside the repository: {line.strip()}")
        for target in MARKDOWN_TARGET.findall(text):
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if target.startswith("/") or not path.is_relative_to(ROOT) or not path.exists():
                problems.append(f"{name}: link target {target!r} is not a file of the repository")
    assert not problems, "\n".join(problems)


def test_every_column_analyze_writes_is_documented() -> None:
    result = analyze_model(layers=[0], per_layer=True, null=False)
    columns_md = (ROOT / "docs" / "columns.md").read_text(encoding="utf-8")
    assert result.layers is not None
    missing = [
        f"{table} table: {column}"
        for table, frame in (("head", result.heads), ("layer", result.layers))
        for column in frame.columns
        if f"`{column}`" not in columns_md
    ]
    assert not missing, (
        "docs/columns.md does not document these columns of `qkenergy analyze` on MiniLM: "
        + "; ".join(missing)
        + ". Add a row with the column name in backquotes to the table of its section."
    )
