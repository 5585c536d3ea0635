"""The documentation, by topic: ``qk.explain(topic)`` and ``qkenergy explain [TOPIC]``.

The pages are the markdown files of the repository's docs/ folder, one source of truth: an
installed wheel carries them as ``qkenergy/docs/*.md`` (setup.py copies them there when the
package is built), a source tree or an editable install reads docs/ in place. A topic is a page
(its file name: ``columns`` is docs/columns.md) or one section of a page (``head-types`` is the
"Head types" section of docs/mathematics.md, see :data:`SECTIONS`).

What is returned reads outside the repository: a link to another page names its topic
(``qkenergy explain statistics``), a figure its caption, the generated-block markers are gone.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from qkenergy.base.errors import ArgumentError, QKEnergyError

__all__ = ["SECTIONS", "explain", "topics"]

SECTIONS: dict[str, tuple[str, str]] = {
    "head-types": ("mathematics", "Head types"),
    "p-values": ("statistics", "p-values beyond the Monte Carlo floor"),
    "rotation-null": ("statistics", "The rotation null"),
    "summary": ("columns", "The terminal summary"),
    "settings": ("columns", "The settings recorded with every table"),
    "non-finite": ("columns", "Non-finite weights"),
    "quantization": ("models", "Quantised checkpoints"),
    "layout-files": ("models", "Architectures qkenergy does not ship"),
    "rope": ("models", "RoPE"),
}
"""Topics that are one section of a page: topic -> (page, the start of the section's heading)."""

_ORDER = (
    "columns",
    "mathematics",
    "statistics",
    "models",
    "gguf",
    "hub",
    "families",
    "decoder",
    "python",
    "survey",
    "report",
    "training",
    "performance",
    "architecture",
)
"""The order of the pages in the list of topics (a page not named here comes after, by name)."""

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_COMMENT = re.compile(r"^[ \t]*<!--(?:(?!-->).)*-->[ \t]*$|<!--(?:(?!-->).)*-->", re.S | re.M)
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(\s*<?([^)\s>]+)>?\s*\)")
_MENTION = re.compile(r"(?<![\w/.-])docs/([A-Za-z_]+)\.md\b")


def _pages_folder() -> Traversable:
    """The folder of the pages: qkenergy/docs in an installed wheel, else the source tree's docs/."""
    packaged = resources.files("qkenergy") / "docs"
    if packaged.is_dir() and (packaged / "columns.md").is_file():
        return packaged
    source = Path(__file__).resolve().parents[3] / "docs"  # src/qkenergy/api/explain.py -> the tree
    if (source / "columns.md").is_file():
        return source
    raise QKEnergyError(
        "the documentation pages are not installed: neither qkenergy/docs in the package nor docs/ "
        "in a source tree holds columns.md; reinstall qkenergy"
    )


def _pages() -> dict[str, Traversable]:
    """Page topic (the file name, lower case, without .md) -> its file, in the order of the list."""
    found = {
        entry.name[: -len(".md")].lower(): entry
        for entry in _pages_folder().iterdir()
        if entry.name.endswith(".md") and entry.is_file()
    }
    rank = {name: i for i, name in enumerate(_ORDER)}
    return {name: found[name] for name in sorted(found, key=lambda n: (rank.get(n, len(rank)), n))}


def _headings(lines: list[str]) -> Iterator[tuple[int, int, str]]:
    """(line index, level, text) of every markdown heading outside fenced code blocks."""
    fenced = False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := _HEADING.match(line)):
            yield i, len(match.group(1)), match.group(2)


def _title(text: str) -> str:
    """The page's first heading, without markdown backquotes."""
    for _, _, heading in _headings(text.splitlines()):
        return heading.replace("`", "")
    return ""


def _section(text: str, start: str, where: str) -> str:
    """The section of ``text`` whose heading begins with ``start``, up to the next heading of its
    level or above."""
    lines = text.splitlines()
    headings = list(_headings(lines))
    for k, (i, level, heading) in enumerate(headings):
        if heading.startswith(start):
            end = next((j for j, lv, _ in headings[k + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[i:end]).rstrip() + "\n"
    raise QKEnergyError(f"{where} has no section {start!r}")


def _link(match: re.Match[str]) -> str:
    """One markdown link as it reads outside the repository (see :func:`readable`)."""
    image, text, target = match.groups()
    if image:
        return f"[figure: {text}]"
    path = target.split("#", 1)[0]
    if path.endswith(".md") and "/" not in path.removeprefix("docs/"):
        topic = path.rsplit("/", 1)[-1][: -len(".md")].lower()
        command = f"`qkenergy explain {topic}`"
        return command if text.strip("`").endswith(".md") else f"{text} ({command})"
    return text


def readable(markdown: str) -> str:
    """A page's markdown as it reads outside the repository.

    A link to a page becomes the command that shows it (``[the statistics](statistics.md)`` ->
    ``the statistics (`qkenergy explain statistics`)``), and so does a page named in the text
    (``docs/gguf.md`` -> ``qkenergy explain gguf``); a link to another file becomes its text, a
    figure its caption, and the HTML comments (the generated-block markers) are dropped.

    Parameters
    ----------
    markdown : str
        A page of docs/ (or the README).

    Returns
    -------
    str
        The same text, without lines left empty twice over.
    """
    text = _LINK.sub(_link, _COMMENT.sub("", markdown))
    text = _MENTION.sub(lambda m: f"qkenergy explain {m.group(1).lower()}", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def topics() -> dict[str, str]:
    """Every topic of :func:`explain`, with one line saying what it covers.

    Returns
    -------
    dict of str to str
        Topic -> the page's title, or for a section its heading and page; the pages first,
        in reading order, then the sections.
    """
    pages = _pages()
    listed = {name: _title(page.read_text(encoding="utf-8")) for name, page in pages.items()}
    for name, (page, heading) in SECTIONS.items():
        if page in pages:
            listed[name] = f"{heading} (a section of {page})"
    return listed


def explain(topic: str | None = None) -> str:
    """The documentation of ``topic`` as markdown text, or the list of topics.

    Parameters
    ----------
    topic : str, optional
        A page (``columns``, ``mathematics``, ``statistics``, ``hub``, ...) or a section
        (``head-types``, ``p-values``, ...): :func:`topics` lists them. Case does not matter.

    Returns
    -------
    str
        The page or section, links to other pages naming their topic (:func:`readable`);
        without ``topic``, the list of topics, one line each.

    Raises
    ------
    ArgumentError
        For a topic that is neither a page nor a section, naming the closest topics.
    """
    if topic is None:
        listed = topics()
        width = max(map(len, listed))
        rows = "\n".join(f"    {name:<{width}}  {line}" for name, line in listed.items())
        return f"qkenergy explain TOPIC shows one of these pages or sections:\n\n{rows}\n"
    pages = _pages()
    key = topic.strip().lower().replace("_", "-").replace(" ", "-").removesuffix(".md")
    key = key.rsplit("/", 1)[-1]  # "docs/columns.md" is columns
    if key in pages:
        return readable(pages[key].read_text(encoding="utf-8"))
    if key in SECTIONS and SECTIONS[key][0] in pages:
        page, heading = SECTIONS[key]
        return readable(_section(pages[page].read_text(encoding="utf-8"), heading, f"{page}.md"))
    names = [*pages, *SECTIONS]
    close = difflib.get_close_matches(key, names, n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ArgumentError(
        f"topic {topic!r} is not a page of the documentation: {hint}the topics are {', '.join(names)}",
        parameter="topic",
    )
