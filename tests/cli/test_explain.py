"""``qkenergy explain`` and ``qk.explain``: every page of docs/ by topic, inside the built package too,
and every pointer of the command line names a topic, never a repository path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import qkenergy
from qkenergy import cli
from qkenergy.api import explain as docs
from qkenergy.base.errors import ArgumentError

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
MENTION = re.compile(r"qkenergy explain ([A-Za-z0-9_-]+)")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the console entry point in-process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else int(code)), out, err


def test_every_page_of_docs_is_a_topic_and_reads_as_its_file() -> None:
    listed = docs.topics()
    for page in PAGES:
        topic = page.stem.lower()
        assert topic in listed, topic
        assert qkenergy.explain(topic) == docs.readable(page.read_text(encoding="utf-8"))
    assert list(listed)[: len(PAGES)] == [name for name in listed if name not in docs.SECTIONS]


def test_explain_columns_prints_the_column_glossary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "explain", "columns")
    assert code == 0 and not err
    assert out == qkenergy.explain("columns")  # into a pipe: the markdown text itself
    assert out.startswith("# Every column and term of qkenergy's output\n")
    for column in ("symmetric_energy", "symmetric_energy_p_bh", "head_type", "lobe_departure"):
        assert f"`{column}`" in out, column
    assert not any(line != line.rstrip() for line in out.splitlines())


def test_without_topic_the_list_has_one_line_per_topic(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain")
    assert code == 0
    rows = [line.split(None, 1) for line in out.splitlines()[2:]]
    assert [name for name, _ in rows] == list(docs.topics())
    assert dict((name, line) for name, line in rows)["head-types"] == "Head types (a section of mathematics)"
    assert dict((name, line) for name, line in rows)["statistics"] == "Statistics beyond the per-head table"


def test_a_section_is_its_heading_up_to_the_next_of_its_level() -> None:
    text = qkenergy.explain("head-types")
    assert text.startswith("### Head types\n")
    assert "imbalance = (c - d)/(c + d)" in text
    assert "### Balance, pairing" not in text and "## 4. The Gram route" not in text
    for topic, (_page, heading) in docs.SECTIONS.items():  # every section names a heading of its page
        assert qkenergy.explain(topic).lstrip("#").lstrip().startswith(heading), topic


def test_a_fenced_comment_is_no_heading() -> None:
    page = "# Page\n\n## One\n\n```python\n# a comment in code\n```\n\ntext\n\n## Two\n"
    assert docs._section(page, "One", "page.md") == "## One\n\n```python\n# a comment in code\n```\n\ntext\n"


def test_links_read_outside_the_repository() -> None:
    page = (
        "See [docs/columns.md](docs/columns.md), [the tail](statistics.md#p-values) and "
        "[`layouts/llama.toml`](layouts/llama.toml).\n\n<!-- generated: demo -->\n```\nout\n```\n"
        "<!-- end -->\n\n\n\n![a heatmap](minilm_heatmap.png)\n(docs/gguf.md; docs/layouts/llama.toml)\n"
        "Count: <!-- count: start -->3 types<!-- count: end -->.\n<!-- a -->kept<!-- b -->\n"
    )
    assert docs.readable(page) == (
        "See `qkenergy explain columns`, the tail (`qkenergy explain statistics`) and "
        "`layouts/llama.toml`.\n\n```\nout\n```\n\n[figure: a heatmap]\n"
        "(qkenergy explain gguf; docs/layouts/llama.toml)\nCount: 3 types.\nkept\n"
    )
    for page_file in PAGES:  # no page keeps a link to a repository file or a block marker
        text = qkenergy.explain(page_file.stem)
        assert "<!--" not in text and not re.search(r"\]\([^)]*\.(md|png)\b", text), page_file.name
        assert not re.search(r"docs/[A-Za-z_]+\.md", text), page_file.name


def test_an_unknown_topic_is_one_line_naming_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "explain", "heads-types")
    assert code == 2 and not out
    assert err.count("\n") == 1 and "did you mean head-types?" in err and "columns" in err
    with pytest.raises(ArgumentError, match="topic 'nothing'"):
        qkenergy.explain("nothing")
    assert qkenergy.explain("docs/Columns.md") == qkenergy.explain("columns")


def test_on_a_terminal_the_page_is_rendered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run(capsys, "explain", "summary")
    assert code == 0
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert "The terminal summary" in plain and "### The terminal summary" not in plain
    assert "• a header" in plain


def test_every_topic_the_package_and_docs_name_exists() -> None:
    """`qkenergy explain X` in the source, the README and docs/ names a topic that exists."""
    listed = docs.topics()
    texts = [path for path in (ROOT / "src" / "qkenergy").rglob("*.py")]
    texts += [ROOT / "README.md", *PAGES]
    unknown = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in texts
        for name in MENTION.findall(path.read_text(encoding="utf-8"))
        if name not in listed and name != "TOPIC"
    ]
    assert not unknown, unknown


def _helps(command: click.Command, context: click.Context) -> list[tuple[str, str]]:
    """(command path, its --help text) of ``command`` and of every subcommand."""
    found = [(context.command_path, command.get_help(context))]
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            assert sub is not None
            found += _helps(sub, click.Context(sub, info_name=name, parent=context))
    return found


def test_no_help_names_a_repository_path() -> None:
    """--help of every command points to topics (`qkenergy explain X`), which an installed package has."""
    helps = _helps(cli.cli, click.Context(cli.cli, info_name="qkenergy"))
    assert len(helps) > 8
    found = [path for path, text in helps if re.search(r"docs/|\.md\b", text)]
    assert not found, f"--help naming a repository path: {found}"


def test_a_built_package_carries_the_pages(tmp_path: Path) -> None:
    """setup.py's build copies docs/*.md into qkenergy/docs, and the built package reads them there."""
    built = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(built)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    assert sorted(p.name for p in (built / "qkenergy" / "docs").iterdir()) == [p.name for p in PAGES]
    probe = (
        "import qkenergy, qkenergy.api.explain as e; print(e._pages_folder()); "
        "print(qkenergy.explain('columns').splitlines()[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(built), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    )
    folder, title = done.stdout.splitlines()
    assert Path(folder) == built / "qkenergy" / "docs"
    assert title == "# Every column and term of qkenergy's output"
