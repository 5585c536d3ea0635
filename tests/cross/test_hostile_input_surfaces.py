"""Hostile input on the surfaces of issue 21, through the command line: result tables given to plot
and report, names written into CSV / the terminal / the page, manifests and layout files, Hugging
Face cache folders. Every case ends in one line on stderr, exit status 1 or 2, within a bounded
time, and writes nothing outside its output. (Survey output folders: test_hostile_input_survey.py.)
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from qkenergy import cli
from tests.survey_checkpoints import write_checkpoint

SECONDS = 20.0  # far above any case's time here (they take milliseconds); a hang or a crawl fails
DEEP = 50_000
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


def run(*args: str | os.PathLike[str]) -> Result:
    """The real entry point in-process: exit status, stdout, stderr and its duration."""
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main([os.fspath(a) for a in args])
        except SystemExit as exit_info:
            code = exit_info.code
    return Result(int(code or 0), out.getvalue(), err.getvalue(), time.monotonic() - start)


def assert_one_line(result: Result, *needles: str, statuses: tuple[int, ...] = (1, 2)) -> None:
    assert result.code in statuses, result
    assert result.err.startswith("qkenergy: error: ") and result.err.count("\n") == 1, result.err[:2000]
    assert len(result.err) < 600, result.err[:2000]  # nothing is echoed at length
    assert "unexpected" not in result.err, result.err  # a catch-all line is a missing check
    assert result.seconds < SECONDS, result
    for needle in needles:
        assert needle in result.err, result.err


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# ----------------------------------------------------------------------------- result tables


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A valid head table of a 2-layer model in each format, with null columns (20 samples)."""
    root = tmp_path_factory.mktemp("tables")
    model = write_checkpoint(root / "model", "llama", layers=2, N=16, heads=2, head_dim=4)
    out = {}
    for ext in ("csv", "parquet", "json"):
        out[ext] = root / f"heads.{ext}"
        done = run("analyze", model, "--samples", "20", "--quiet", "-o", out[ext])
        assert done.code == 0, done
    return out


def _csv_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _csv_with(tables: dict[str, Path], target: Path, change: Callable[[list[list[str]]], None]) -> Path:
    rows = _csv_rows(tables["csv"])
    change(rows)
    with open(target, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    sidecar = tables["csv"].with_name(tables["csv"].name + ".meta.json")
    target.with_name(target.name + ".meta.json").write_text(sidecar.read_text())
    return target


def _set_cell(column: str, value: str, row: int = 1) -> Callable[[list[list[str]]], None]:
    def change(rows: list[list[str]]) -> None:
        rows[row][rows[0].index(column)] = value

    return change


def _json_with(tables: dict[str, Path], target: Path, change: Callable[[dict], object]) -> Path:
    document = json.loads(tables["json"].read_text())
    document = change(document) or document
    target.write_text(json.dumps(document))
    return target


def _json_cell(column: str, value: object) -> Callable[[dict], None]:
    def change(document: dict) -> None:
        document["heads"][0][column] = value

    return change


def _parquet_with(tables: dict[str, Path], target: Path, *, column=None, values=None, metadata=None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(tables["parquet"])
    if column is not None:
        i = table.schema.get_field_index(column)
        table = table.set_column(i, column, pa.array(values))
    if metadata is not None:
        table = table.replace_schema_metadata({b"qkenergy": metadata})
    pq.write_table(table, target)
    return target


def _wide_csv(tables: dict[str, Path], target: Path) -> Path:
    def change(rows: list[list[str]]) -> None:
        for i, row in enumerate(rows):
            row.extend(f"x{j}" if i == 0 else "1" for j in range(5000))

    return _csv_with(tables, target, change)


def _sidecar(tables: dict[str, Path], target: Path, text: str) -> Path:
    _csv_with(tables, target, lambda rows: None)
    target.with_name(target.name + ".meta.json").write_text(text)
    return target


# case -> (build the table in a directory from the valid ones, text the line must contain)
TABLE_CASES: dict[str, tuple[Callable[[dict[str, Path], Path], Path], str]] = {
    "csv 5000 extra columns": (lambda t, d: _wide_csv(t, d / "t.csv"), "columns"),
    "csv duplicate column": (
        lambda t, d: _csv_with(t, d / "t.csv", lambda r: r[0].__setitem__(r[0].index("head"), "layer")),
        "layer",
    ),
    "csv ragged row": (lambda t, d: _csv_with(t, d / "t.csv", lambda r: r[2].pop()), "row"),
    "csv layer as text": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("layer", "one")), "'layer'"),
    "csv head a fraction": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("head", "0.5")), "'head'"),
    "csv n missing": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("n", "")), "'n'"),
    "csv N is nan": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("N", "nan")), "'N'"),
    "csv N is zero": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("N", "0")), "'N'"),
    "csv s infinite": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("symmetric_energy", "inf")),
        "'symmetric_energy'",
    ),
    "csv s above 1": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("symmetric_energy", "3.5")),
        "'symmetric_energy'",
    ),
    "csv p negative": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("symmetric_energy_p", "-0.25")),
        "'symmetric_energy_p'",
    ),
    "csv z as text": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("symmetric_energy_z", "big")),
        "'symmetric_energy_z'",
    ),
    "csv alpha unbalanced": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("alpha", "[0.5, 0.2")),
        "'alpha'",
    ),
    "csv alpha nested": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("alpha", "[[0.5]]")), "'alpha'"),
    "csv alpha deep": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("alpha", "[" * DEEP + "]" * DEEP)),
        "'alpha'",
    ),
    "csv count negative": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("n_pos", "-3")), "'n_pos'"),
    "csv flag as text": (lambda t, d: _csv_with(t, d / "t.csv", _set_cell("qk_norm", "maybe")), "'qk_norm'"),
    "csv not UTF-8": (
        lambda t, d: write(d / "t.csv", t["csv"].read_bytes().replace(b"rope", b"\xff\xfe", 1)),
        "UTF-8",
    ),
    "csv 2 MiB name": (
        lambda t, d: _csv_with(t, d / "t.csv", _set_cell("model", "m" * (2 << 20))),
        "longer than",
    ),
    "csv sidecar nested": (
        lambda t, d: _sidecar(t, d / "t.csv", '{"settings": ' + "[" * DEEP + "]" * DEEP + "}"),
        "nested",
    ),
    "csv sidecar radius text": (
        lambda t, d: _sidecar(t, d / "t.csv", json.dumps({"settings": {"radius": "wide", "samples": 20}})),
        "'radius'",
    ),
    "csv sidecar settings a list": (
        lambda t, d: _sidecar(t, d / "t.csv", '{"settings": [1, 2]}'),
        "settings",
    ),
    "json records not objects": (
        lambda t, d: _json_with(t, d / "t.json", lambda doc: doc.update(heads=[1, 2])),
        "record",
    ),
    "json nested": (
        lambda t, d: write(d / "t.json", '{"heads": ' + "[" * DEEP + "]" * DEEP + "}"),
        "nested",
    ),
    "json layer as text": (lambda t, d: _json_with(t, d / "t.json", _json_cell("layer", "0")), "'layer'"),
    "json layer 40 digits": (lambda t, d: _json_with(t, d / "t.json", _json_cell("layer", 10**40)), "digits"),
    "json alpha an object": (
        lambda t, d: _json_with(t, d / "t.json", _json_cell("alpha", {"a": 1})),
        "'alpha'",
    ),
    "json model a number": (lambda t, d: _json_with(t, d / "t.json", _json_cell("model", 7)), "'model'"),
    "json settings samples text": (
        lambda t, d: _json_with(t, d / "t.json", lambda doc: doc["settings"].update(samples="many")),
        "'samples'",
    ),
    "parquet garbage": (
        lambda t, d: write(d / "t.parquet", b"PAR1" + os.urandom(3000)),
        "t.parquet",
    ),
    "parquet truncated": (
        lambda t, d: write(d / "t.parquet", t["parquet"].read_bytes()[:-40]),
        "t.parquet",
    ),
    "parquet layer as text": (
        lambda t, d: _parquet_with(t, d / "t.parquet", column="layer", values=["0", "0", "1", "1"]),
        "'layer'",
    ),
    "parquet alpha a number": (
        lambda t, d: _parquet_with(t, d / "t.parquet", column="alpha", values=[0.5, 0.5, 0.5, 0.5]),
        "'alpha'",
    ),
    "parquet s infinite": (
        lambda t, d: _parquet_with(
            t, d / "t.parquet", column="symmetric_energy", values=[0.5, float("inf"), 0.5, 0.5]
        ),
        "'symmetric_energy'",
    ),
    "parquet metadata not UTF-8": (
        lambda t, d: _parquet_with(t, d / "t.parquet", metadata=b"\xff\x00{"),
        "settings",
    ),
    "parquet metadata an array": (
        lambda t, d: _parquet_with(t, d / "t.parquet", metadata=b"[1, 2]"),
        "settings",
    ),
    "parquet metadata nested": (
        lambda t, d: _parquet_with(t, d / "t.parquet", metadata=b'{"a": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        "nested",
    ),
    "parquet metadata odd values": (
        lambda t, d: _parquet_with(
            t, d / "t.parquet", metadata=json.dumps({"radius": [], "samples": -4, "model": {}}).encode()
        ),
        "settings",
    ),
}


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize("case", list(TABLE_CASES))
def test_hostile_tables(tables: dict[str, Path], tmp_path: Path, case: str, command: str) -> None:
    make, needle = TABLE_CASES[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    table = make(tables, inputs)
    before = files_under(tmp_path)
    if command == "plot":
        result = run("plot", table, "-o", tmp_path / "figs", "--samples", "2")
    else:
        result = run("report", table, "-o", tmp_path / "r" / "report.html", "--no-static")
    assert_one_line(result, needle)
    assert table.name in result.err
    assert files_under(tmp_path) == before  # no figure, no page, no folder


_PEAK = """
import json, resource, sys
import pandas, pyarrow.csv, pyarrow.parquet
from qkenergy.base.errors import QKEnergyError
from qkenergy.formats.tables import read_table
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rows = []
for path in sys.argv[1:]:
    try:
        rows.append(len(read_table(path)))
    except QKEnergyError as error:
        rows.append(str(error).count("\\n"))
print(json.dumps([rows, before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


def test_tables_are_read_in_bounded_memory(tables: dict[str, Path], tmp_path: Path) -> None:
    """A 24 MiB table (some 18,000 heads) and the largest refused inputs, in a real process: the
    peak memory stays near the size of what is read (the body parsed by Arrow, not cell by cell)."""
    header, *body = tables["csv"].read_text().splitlines(keepends=True)
    copies = (24 << 20) // len("".join(body))
    big = write(tmp_path / "big.csv", header + "".join(body) * copies)
    cases = [big, _wide_csv(tables, tmp_path / "wide.csv")]
    cases.append(write(tmp_path / "deep.json", '{"heads": ' + "[" * DEEP + "]" * DEEP + "}"))
    cases.append(_csv_with(tables, tmp_path / "cell.csv", _set_cell("model", "m" * (2 << 20))))
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *map(str, cases)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    rows, imported_kib, peak_kib = json.loads(done.stdout)
    assert rows[0] == copies * len(body) > 10_000 and rows[1:] == [0, 0, 0], (rows, done.stderr[-2000:])
    # beyond what the imports take: the 24 MiB table, its Arrow strings and its frame
    assert peak_kib - imported_kib < 300 * 1024, (imported_kib, peak_kib)


def test_the_message_docs_columns_shows(tables: dict[str, Path], tmp_path: Path) -> None:
    table = _csv_with(tables, tmp_path / "t.csv", _set_cell("layer", "one"))
    result = run("plot", table, "-o", tmp_path / "figs")
    shown = "t.csv: column 'layer' row 1: 'one' is not an integer >= 0"
    assert result.err.rstrip().endswith(shown), result.err
    docs = Path(__file__).resolve().parents[2] / "docs" / "columns.md"
    assert f"(`{shown}`)" in " ".join(docs.read_text(encoding="utf-8").split())


def test_long_path_components_in_a_text_manifest(tmp_path: Path) -> None:
    """Found by fuzz/fuzz_parsers.py: a source whose file name is too long for the system."""
    from qkenergy.surveys.manifest import read_manifest

    manifest = write(tmp_path / "m.txt", "./" + "p" * 300 + "\n/" + "q/" * 2000 + "\n")
    entries, _ = read_manifest(manifest)
    assert [len(e.name.encode()) <= 200 for e in entries] == [True, True]


def test_tables_as_fifo_and_device_never_block(tmp_path: Path) -> None:
    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    (tmp_path / "z.parquet").symlink_to("/dev/zero")
    for table in (fifo, tmp_path / "z.parquet"):
        assert_one_line(run("plot", table, "-o", tmp_path / "figs"), table.name)


def test_valid_tables_still_read(tables: dict[str, Path], tmp_path: Path) -> None:
    from qkenergy.formats.tables import read_table

    frames = [read_table(p) for p in tables.values()]
    for frame in frames[1:]:
        assert list(frame.columns) == list(frames[0].columns)
        assert frame["layer"].tolist() == frames[0]["layer"].tolist()
    result = run("report", *tables.values(), "-o", tmp_path / "r.html", "--no-static")
    assert result.code == 1 and "already in" in result.err  # the same model thrice: one clean line


# ----------------------------------------------------------------------------- names are data


def _table_of(names: list[str], tables: dict[str, Path], target: Path, **columns: list[str]) -> Path:
    """The valid json table with its rows repeated, one copy per name."""
    document = json.loads(tables["json"].read_text())
    rows = []
    for i, name in enumerate(names):
        for row in document["heads"]:
            rows.append({**row, "model": name, **{k: v[i] for k, v in columns.items()}})
    document["heads"] = rows
    target.write_text(json.dumps(document))
    return target


FORMULAS = ['=HYPERLINK("http://x","y")', "@SUM(A1:A9)", "+1+1", "-2+3", "\tcmd", "\rcmd", "'=quoted"]


def _cells(path: Path) -> list[str]:
    return [cell for row in _csv_rows(path) for cell in row]


def test_report_csv_cells_are_neutralised(tables: dict[str, Path], tmp_path: Path) -> None:
    groups = ["=1+2", "@x", "+g", "-g", "\tg", "\rg", "ok"]
    table = _table_of(FORMULAS, tables, tmp_path / "t.json", group=groups)
    result = run("report", table, "-o", tmp_path / "r.html", "--no-static", "--baseline", FORMULAS[0])
    assert result.code == 0, result
    written = list((tmp_path / "r_files").glob("*.csv"))
    assert {p.name for p in written} == {"models.csv", "baseline_difference.csv"}
    for path in written:
        text_cells = [c for c in _cells(path) if c and not _is_number(c)]
        assert text_cells and not [c for c in text_cells if c.startswith(TRIGGERS)], path
    models = [row[0] for row in _csv_rows(tmp_path / "r_files" / "models.csv")[1:]]
    assert sorted(models) == sorted("'" + name for name in FORMULAS)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_analyze_csv_neutralises_and_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path / "=1+2", "llama", layers=1, N=16, heads=2, head_dim=4)
    monkeypatch.chdir(tmp_path)
    assert run("analyze", "=1+2", "--no-null", "--quiet", "-o", "h.csv").code == 0
    assert {row[0] for row in _csv_rows(tmp_path / "h.csv")[1:]} == {"'=1+2"}
    from qkenergy.formats.tables import read_table

    assert set(read_table(tmp_path / "h.csv")["model"]) == {"=1+2"}  # the name comes back as given


def test_mathtext_in_names_draws_literally() -> None:
    """matplotlib reads $...$ as a formula (and fails on a bad one): names in plot labels are escaped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from qkenergy.figures import plots
    from qkenergy.formats.provenance import population_label

    for name in ["$\\foo{$", "$x^2$ and $", "$$"]:
        title = plots._title(pd.DataFrame({"model": [name]}))
        label = plots._plain(population_label({"model": name}))
        fig, ax = plt.subplots()
        ax.set_title(title)
        ax.plot([0, 1], label=label)
        ax.legend()
        fig.canvas.draw()  # raised ValueError (mathtext) before the names were escaped
        assert ax.get_title().replace("\\$", "$") == name
        plt.close(fig)


@pytest.mark.parametrize("name", ["[red]m", "[bold]x[/]", "[/]", "a[/b]c", "[link=https://example.org]l"])
def test_markup_in_names_prints_literally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    write_checkpoint(tmp_path / name.replace("/", "%"), "llama", layers=1, N=16, heads=2, head_dim=4)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    result = run("analyze", name.replace("/", "%"), "--no-null")
    assert result.code == 0 and result.err == "", result
    assert name.replace("/", "%") in result.out


HTML_NAMES = [
    "</script><script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '"><svg onload=alert(3)>',
    "<b>bold</b> & <a href='https://example.org'>link</a>",
]


def test_names_in_the_page_are_text(tables: dict[str, Path], tmp_path: Path) -> None:
    table = _table_of(HTML_NAMES, tables, tmp_path / "t.json", group=["<b>g</b>"] * len(HTML_NAMES))
    title = "<script>alert(4)</script>"
    result = run("report", table, "-o", tmp_path / "r.html", "--no-static", "--title", title)
    assert result.code == 0, result
    page = (tmp_path / "r.html").read_text()
    for needle in ("<script>alert", "<img src=x", "<svg onload", "<b>g</b>", "<b>bold", "<a href='https"):
        assert needle not in page, needle
    # in the figures too: plotly renders <b> and <a href> in labels; escaped, they print as written
    from qkenergy.analysis.comparison import model_summary
    from qkenergy.figures.survey_figures import report_figures
    from qkenergy.formats.tables import read_table

    heads = read_table(table)
    names = {t.name for f in report_figures(heads, model_summary(heads, None)) for t in f.figure.data}
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;a href='https://example.org'&gt;link&lt;/a&gt;" in names, (
        sorted(map(str, names))
    )
    assert not any("<" in str(n) for n in names)


# ----------------------------------------------------------------------------- manifests and layouts


def _survey(manifest: Path, out: Path) -> Result:
    return run("survey", manifest, "-o", out, "--samples", "2", "--workers", "1", "--quiet")


MANIFEST_CASES: dict[str, tuple[str, bytes | str, str]] = {
    "arrays 50k deep": (
        "m.toml",
        '[[model]]\nsource = "a"\nlayers = ' + "[" * DEEP + "]" * DEEP + "\n",
        "nested",
    ),
    "inline tables 50k deep": (
        "m.toml",
        '[[model]]\nsource = "a"\nx = ' + "{a = " * DEEP + "1" + "}" * DEEP,
        "nested",
    ),
    "dotted key 5000 deep": (
        "m.toml",
        "[[model]]\nsource = 'a'\n" + ".".join(["k"] * 5000) + " = 1\n",
        "m.toml",
    ),
    "step of 5000 digits": ("m.toml", '[[model]]\nsource = "a"\nstep = ' + "9" * 5000 + "\n", "digits"),
    "layers range 1e13": ("m.toml", '[[model]]\nsource = "a"\nlayers = "0-10000000000000"\n', "layers"),
    "layers range of 40 digits": (
        "m.toml",
        '[[model]]\nsource = "a"\nlayers = "0-' + "9" * 40 + '"\n',
        "layers",
    ),
    "layers a float": ("m.toml", '[[model]]\nsource = "a"\nlayers = [0, 1.5]\n', "layers"),
    "source of 100k characters": ("m.toml", '[[model]]\nsource = "' + "s" * 100_000 + '"\n', "m.toml"),
    "group a list of 50k": ("m.toml", '[[model]]\nsource = "a"\ngroup = [' + "1," * 50_000 + "]\n", "group"),
    "text line of 100k characters": ("m.txt", "/" + "p" * 100_000 + "\n", "m.txt"),
    "manifest of 3 MiB": ("m.txt", "# x\n" * (3 << 18), "limit"),
    "not UTF-8": ("m.toml", b'[[model]]\nsource = "\xff"\n', "UTF-8"),
    "model an array of strings": ("m.toml", 'model = ["a", "b"]\n', "model"),
    "NUL in a text manifest": ("m.txt", "a\x00b\n", "m.txt"),
    "NUL in a name": ("m.toml", '[[model]]\nsource = "a"\nname = "a\\u0000b"\n', "control character"),
    "escape sequence in a group": (
        "m.toml",
        '[[model]]\nsource = "a"\ngroup = "\\u001b[31mred"\n',
        "control character",
    ),
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_hostile_manifests(tmp_path: Path, case: str) -> None:
    name, content, needle = MANIFEST_CASES[case]
    manifest = tmp_path / name
    manifest.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = _survey(manifest, tmp_path / "out")
    assert_one_line(result, needle)
    assert not (tmp_path / "out").exists()


LAYOUT = (
    'query = "layers.{i}.self_attn.q_proj.weight"\nkey = "layers.{i}.self_attn.k_proj.weight"\n'
    'head_dim_key = "head_dim"\n'
)
LAYOUT_CASES: dict[str, tuple[str, str]] = {
    "field {j}": (LAYOUT.replace("{i}.self_attn.q", "{j}.self_attn.q"), "{j}"),
    "field {0}": (LAYOUT.replace("{i}.self_attn.q", "{0}.self_attn.q"), "{0}"),
    "unbalanced {": (LAYOUT.replace("{i}.self_attn.k", "{i.self_attn.k"), "key"),
    "unbalanced }": (LAYOUT.replace("{i}.self_attn.q", "}.self_attn.q"), "query"),
    "conversion {i!r}": (LAYOUT.replace("{i}.self_attn.q", "{i!r}.self_attn.q"), "query"),
    "format spec of 1e9 width": (LAYOUT.replace("{i}.self_attn.q", "{i:>999999999}.self_attn.q"), "query"),
    "attribute {i.real}": (LAYOUT.replace("{i}.self_attn.q", "{i.__class__}.self_attn.q"), "query"),
    "norm field {h}": (LAYOUT + 'norm = "layers.{h}.norm.weight"\n', "norm"),
    "kv_heads 0": (LAYOUT + "kv_heads = 0\n", "kv_heads"),
    "kv_heads -2": (LAYOUT + "kv_heads = -2\n", "kv_heads"),
    "kv_heads of 40 digits": (LAYOUT + "kv_heads = " + "9" * 40 + "\n", "digits"),
    "kv_heads not dividing": (LAYOUT + "kv_heads = 3\n", "multiple"),
    "norm_offset inf": (LAYOUT + "norm_offset = inf\n", "norm_offset"),
    "nested 50k": (LAYOUT + "x = " + "[" * DEEP + "]" * DEEP + "\n", "nested"),
    "key of 100k characters": (LAYOUT + "k" * 100_000 + " = 1\n", "unknown key"),
    "value of 100k characters": (LAYOUT + 'stack = "' + "s" * 100_000 + '"\n', "stack"),
}


@pytest.fixture(scope="module")
def custom_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("custom")
    model = write_checkpoint(root / "m", "llama", layers=1, N=16, heads=2, head_dim=4)
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = "not-a-shipped-type"
    (model / "config.json").write_text(json.dumps(config))
    return model


@pytest.mark.parametrize("case", list(LAYOUT_CASES))
def test_hostile_layouts(custom_model: Path, tmp_path: Path, case: str) -> None:
    text, needle = LAYOUT_CASES[case]
    layout = tmp_path / "layout.toml"
    layout.write_text(text)
    result = run(
        "analyze", custom_model, "--layout", layout, "--no-null", "--quiet", "-o", tmp_path / "o.csv"
    )
    assert_one_line(result, needle, "layout.toml" if case != "kv_heads not dividing" else "")
    assert not (tmp_path / "o.csv").exists()


def test_the_plain_layout_works(custom_model: Path, tmp_path: Path) -> None:
    (tmp_path / "layout.toml").write_text(LAYOUT)
    assert (
        run("analyze", custom_model, "--layout", tmp_path / "layout.toml", "--no-null", "--quiet").code == 0
    )


_FIFO_CHILD = """
import contextlib, io, json, sys
from qkenergy.cli import main
results = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args)
        except SystemExit as exit_info:
            results.append([exit_info.code, err.getvalue()])
print(json.dumps(results))
"""


def test_fifos_and_devices_are_refused_at_once(custom_model: Path, tmp_path: Path) -> None:
    """In a real process (a blocking open would hang it; the timeout turns that into a failure)."""
    fifo = tmp_path / "m.toml"
    os.mkfifo(fifo)
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    layout_fifo = tmp_path / "l.toml"
    os.mkfifo(layout_fifo)
    cases = [
        ["survey", str(fifo), "-o", str(tmp_path / "out")],
        ["survey", str(tmp_path / "zero.toml"), "-o", str(tmp_path / "out")],
        ["survey", str(tmp_path / "zero.txt"), "-o", str(tmp_path / "out")],
        ["analyze", str(custom_model), "--layout", str(layout_fifo), "--no-null"],
        ["analyze", str(custom_model), "--layout", str(tmp_path / "zero.toml"), "--no-null"],
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "QKENERGY_DEBUG": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _FIFO_CHILD, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    results = json.loads(done.stdout)
    assert len(results) == len(cases), done.stderr[-2000:]
    for args, (code, err) in zip(cases, results, strict=True):
        assert code == 1 and err.count("\n") == 1 and "regular file" in err, (args, err[:500])
    assert not (tmp_path / "out").exists()


def test_long_values_on_the_command_line_are_cut(custom_model: Path, tmp_path: Path) -> None:
    """A value of 100,000 characters (click quotes a bad one whole; so do some messages) is cut."""
    long = "x" * 100_000
    cases = [
        ("analyze", custom_model, "--no-null", "--heads", long),
        ("analyze", custom_model, "--no-null", "--model-type", long),
        ("analyze", "/" + "p" * 100_000),
        ("analyze", custom_model, "--no-null", "--layers", "0-" + "9" * 100_000),
    ]
    for args in cases:
        assert_one_line(run(*args))


def test_config_head_counts(tmp_path: Path) -> None:
    for i, (kv, heads) in enumerate([(0, 2), (3, 2), (2, 3)]):
        model = write_checkpoint(tmp_path / f"m{i}", "llama", layers=1, N=16, heads=2, head_dim=4)
        config = json.loads((model / "config.json").read_text())
        config.update(num_key_value_heads=kv, num_attention_heads=heads)
        (model / "config.json").write_text(json.dumps(config))
        assert_one_line(run("analyze", model, "--no-null", "--quiet"), "num_")


# ----------------------------------------------------------------------------- Hugging Face cache folders

COMMIT = "a" * 40


def _cache_repo(root: Path, tmp_model: Path) -> Path:
    """models--org--tiny with one snapshot whose files are symlinks into blobs/, refs/main naming it."""
    repo = root / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        blob = repo / "blobs" / f"blob-{name}"
        blob.write_bytes((tmp_model / name).read_bytes())
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    # the repository folder itself looks like a snapshot: reading it would be the escape
    (repo / "config.json").write_bytes((tmp_model / "config.json").read_bytes())
    (repo / "model.safetensors").write_bytes((tmp_model / "model.safetensors").read_bytes())
    return repo


def _refs(text: str | bytes) -> Callable[[Path], list[str]]:
    def make(repo: Path) -> list[str]:
        (repo / "refs" / "main").write_bytes(text if isinstance(text, bytes) else text.encode())
        return []

    return make


def _revision(revision: str) -> Callable[[Path], list[str]]:
    return lambda repo: ["revision", revision]


def _outside_link(name: str, target: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    def make(repo: Path) -> list[str]:
        link = repo / "snapshots" / COMMIT / name
        link.unlink()
        link.symlink_to(target(repo))
        return []

    return make


def _snapshot_link(repo: Path) -> list[str]:
    snapshot = repo / "snapshots" / COMMIT
    elsewhere = repo.parent / "elsewhere"
    snapshot.rename(elsewhere)
    snapshot.symlink_to(elsewhere)
    return []


def _fifo_ref(repo: Path) -> list[str]:
    (repo / "refs" / "main").unlink()
    os.mkfifo(repo / "refs" / "main")
    return []


CACHE_CASES: dict[str, Callable[[Path], list[str]]] = {
    "refs/main ..": _refs(".."),
    "refs/main ../..": _refs("../.."),
    "refs/main ../../models--org--tiny": _refs("../../models--org--tiny"),
    "refs/main with a newline and ..": _refs(f"{COMMIT}\n.."),
    "refs/main of 20 MB": _refs("b" * 20_000_000),
    "refs/main binary": _refs(b"\x00\xff\xfe" * 10),
    "refs/main a FIFO": _fifo_ref,
    "revision ..": _revision(".."),
    "revision ../..": _revision("../.."),
    "revision x/../../..": _revision("x/../../.."),
    "revision of 100k characters": _revision("r" * 100_000),
    "revision with NUL": _revision("ma\x00in"),
    "revision refs/main/..": _revision("main/.."),
    "revision an absolute path": _revision("/etc"),
    "config outside blobs": _outside_link("config.json", lambda repo: repo / "config.json"),
    "weights outside the repository": _outside_link(
        "model.safetensors", lambda repo: repo.parent / "stolen.safetensors"
    ),
    "snapshot a link out of snapshots/": _snapshot_link,
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(
        tmp_path_factory.mktemp("tiny") / "m", "llama", layers=1, N=16, heads=2, head_dim=4
    )


@pytest.mark.parametrize("case", list(CACHE_CASES))
def test_hostile_cache_folders(tiny_model: Path, tmp_path: Path, case: str) -> None:
    repo = _cache_repo(tmp_path, tiny_model)
    (tmp_path / "stolen.safetensors").write_bytes((tiny_model / "model.safetensors").read_bytes())
    extra = CACHE_CASES[case](repo)
    if extra:  # a revision: the manifest's key, given to open_model
        from qkenergy.base.errors import QKEnergyError
        from qkenergy.weights.checkpoint import open_model

        start = time.monotonic()
        with pytest.raises(QKEnergyError) as info:
            open_model(str(repo), revision=extra[1]).close()
        message = str(info.value)
        assert "\n" not in message and len(message) < 600 and time.monotonic() - start < SECONDS, message
        return
    result = run("analyze", repo, "--no-null", "--quiet", "-o", tmp_path / "o.csv")
    assert_one_line(result)
    assert not (tmp_path / "o.csv").exists()


def test_the_plain_cache_folder_works(tiny_model: Path, tmp_path: Path) -> None:
    repo = _cache_repo(tmp_path, tiny_model)
    assert run("analyze", repo, "--no-null", "--quiet").code == 0
    from qkenergy.weights.checkpoint import open_model

    for revision in (COMMIT, "main"):
        with open_model(str(repo), revision=revision) as source:
            assert source.root == repo / "snapshots" / COMMIT
