"""Every output shown in README.md and docs/ is what the code prints today (docs/generate_examples.py).

A failure shows the difference; `python docs/generate_examples.py` rewrites the blocks.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("generate_examples", ROOT / "docs" / "generate_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("generate_examples", module)
    spec.loader.exec_module(module)
    return module


generator = _generator()


def _marked() -> dict[str, list[str]]:
    """Block name -> the documents that carry it."""
    found: dict[str, list[str]] = {}
    for doc in generator.DOCUMENTS:
        for name, _ in generator.marked_blocks(doc.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(doc.name)
    return found


@pytest.mark.parametrize("example", list(generator.EXAMPLES))
def test_generated_blocks_are_what_the_code_prints(example: str) -> None:
    blocks = generator.generate([example], quick=True)
    stale = generator.stale(blocks)
    assert not stale, (
        "these blocks no longer match what the code prints; run `python docs/generate_examples.py "
        f"{example}` and commit the result:\n\n" + "\n\n".join(stale)
    )


def test_every_block_has_one_example_and_one_place() -> None:
    marked = _marked()
    written = [block for _, blocks in generator.EXAMPLES.values() for block in blocks]
    assert sorted(marked) == sorted(written), (
        "a marked block without an example, or an example's block nowhere"
    )
    assert all(len(docs) == 1 for docs in marked.values()), marked


def test_comparable_masks_only_what_varies_between_runs() -> None:
    first = "12 units · 13.8 s · err=2.653e-16 sd 0.0017936394717377826 s 0.5636"
    second = "12 units · 25.0 s · err=2.2e-16 sd 0.0017936394717377817 s 0.5636"
    assert generator.comparable(first) == generator.comparable(second)
    for changed in ("13 units · 13.8 s", "s 0.5637", "err=0.3", "sd 0.0017936394718"):
        assert generator.comparable(changed) != generator.comparable(changed.replace(changed[-1], "9"))


def test_readme_synopsis_names_every_option_of_every_command() -> None:
    """The README's command-line synopsis lists each command with all of its options."""
    from qkenergy.cli import cli

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The command line", 1)[1].split("\n## ", 1)[0]
    synopsis = section.split("```\n", 2)[1]
    commands = re.split(r"^(?=qkenergy )", synopsis, flags=re.M)
    by_name = {part.split()[1]: part for part in commands if part.startswith("qkenergy ")}
    context = click.Context(cli)
    assert sorted(by_name) == sorted(cli.list_commands(context))
    missing = []
    for name, text in by_name.items():
        command = cli.get_command(context, name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                options = [*param.opts, *param.secondary_opts]
                if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in options):
                    missing.append(f"{name} {options[0]}")
    assert not missing, f"options missing from the README's synopsis: {missing}"
