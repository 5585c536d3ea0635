"""The command line: verify, baseline and lobes output, exit statuses, one-line errors, --help."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qkenergy import cli
from qkenergy.base.errors import QKEnergyError
from qkenergy.math import lobes, verify

QUANTILE_KEYS = {"0.01", "0.05", "0.5", "0.95", "0.99"}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the console entry point in-process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else int(code)), out, err


def strict_json(text: str) -> object:
    """JSON without NaN or Infinity (which the standard forbids)."""

    def reject(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the default null-law cache lives under XDG_CACHE_HOME: keep tests out of the user's cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # rich wraps tables to the terminal width; make it wide enough to keep words whole
    monkeypatch.setenv("COLUMNS", "200")


# ---------------------------------------------------------------------------
# verify


def test_verify_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "verify", "--samples", "400", "--seed", "3", "--json")
    rows = strict_json(out)
    assert code == 0, [r for r in rows if not r["passed"]]
    assert isinstance(rows, list) and len(rows) > 50
    for row in rows:
        assert {"claim", "setting", "theory", "estimate", "stderr", "passed"} <= set(row)
        assert isinstance(row["claim"], str) and isinstance(row["setting"], str)
        assert row["theory"] is None or isinstance(row["theory"], (int, float))
        assert isinstance(row["estimate"], (int, float))
        assert row["stderr"] is None or isinstance(row["stderr"], (int, float))
        assert isinstance(row["passed"], bool)
    assert {row["claim"] for row in rows} >= {
        "Lemma 5",
        "Corollary 1",
        "Corollary 2",
        "Proposition 6",
        "Lemma 6",
    }


def _broken_check(samples: int, seed: int) -> list[verify.Check]:
    return [verify.Check("Broken", "a deliberately failing row", 1.0, 2.0, 0.01, False, "tolerance 5 SE")]


def test_verify_exit_status_is_one_when_a_check_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify, "CHECKS", (verify.check_lemma5, _broken_check))
    code, out, _ = run(capsys, "verify", "--samples", "100", "--json")
    rows = strict_json(out)
    assert code == 1
    assert [row["passed"] for row in rows if row["claim"] == "Broken"] == [False]
    assert all(row["passed"] for row in rows if row["claim"] == "Lemma 5")

    code, out, _ = run(capsys, "verify", "--samples", "100")
    assert code == 1 and "FAIL" in out and "1 FAILED" in out


def test_verify_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "CHECKS", (verify.check_lemma5, verify.check_lemma6))
    code, out, _ = run(capsys, "verify", "--samples", "100")
    assert code == 0
    for word in ("claim", "setting", "theory", "estimate", "stderr", "status", "Lemma 5", "Lemma 6", "pass"):
        assert word in out
    assert "checks passed" in out


# ---------------------------------------------------------------------------
# baseline


def test_baseline_gaussian_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "baseline", "--n", "4", "--N", "16", "--samples", "300", "--json")
    assert code == 0, err
    result = strict_json(out)
    assert result["n"] == 4 and result["N"] == 16 and result["dist"] == "gaussian"
    for name in ("symmetric_energy", "pairing", "lobe_departure"):
        row = result[name]
        assert {"mean", "stderr", "sd", "quantiles"} <= set(row)
        assert set(row["quantiles"]) == QUANTILE_KEYS
        q = [row["quantiles"][k] for k in ("0.01", "0.05", "0.5", "0.95", "0.99")]
        assert q == sorted(q)
        assert row["sd"] > 0
    energy = result["symmetric_energy"]
    # Proposition 6: exact, not estimated
    assert energy["mean"] == 17 / 32 and energy["stderr"] == 0
    assert energy["ratio_of_expectations"] == 17 / 32 and energy["expectation_of_ratio"] == 17 / 32
    assert result["pairing"]["stderr"] > 0


def test_baseline_skewed_law_reports_both_expectations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "baseline",
        "--n",
        "2",
        "--N",
        "2",
        "--dist",
        "bernoulli:0.1",
        "--samples",
        "3000",
        "--seed",
        "1",
        "--json",
    )
    assert code == 0, err
    energy = strict_json(out)["symmetric_energy"]
    assert energy["ratio_of_expectations"] == 0.75  # Corollary 2, every law
    assert energy["expectation_of_ratio_stderr"] > 0
    # sparse Bernoulli heads are far more symmetric on average than the ratio of expectations says
    assert energy["expectation_of_ratio"] - 0.75 > 5 * energy["expectation_of_ratio_stderr"]
    assert (
        abs(energy["ratio_of_expectations_estimate"] - 0.75)
        < 5 * energy["ratio_of_expectations_estimate_stderr"]
    )
    assert set(energy["quantiles"]) == QUANTILE_KEYS


def test_baseline_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "baseline", "--n", "2", "--N", "8", "--dist", "rademacher", "--samples", "200")
    assert code == 0
    assert "symmetric_energy" in out and "pairing" in out and "ratio of expectations" in out


# ---------------------------------------------------------------------------
# lobes


def test_lobes_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "lobes",
        "--law",
        "exponential",
        "--rho",
        "0.5",
        "--n",
        "10,100,1e4",
        "--repeats",
        "5",
        "--json",
    )
    assert code == 0
    rows = strict_json(out)
    assert [row["n"] for row in rows] == [10, 100, 10_000]
    assert all({"n", "mean", "stderr"} <= set(row) for row in rows)
    assert rows[-1]["mean"] < rows[0]["mean"]

    code, out, _ = run(capsys, "lobes", "--law", "pareto:1.5", "--n", "10,1000", "--repeats", "3")
    assert code == 0 and "D_n" in out and "1,000" in out and "infinite second moment" in out


# ---------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("baseline", "--n", "0", "--N", "4"), "--n"),
        (("baseline", "--n", "x", "--N", "4"), "--n"),
        (("baseline", "--n", "5", "--N", "4"), "--n"),
        (("baseline", "--n", "2"), "--N"),
        (("baseline", "--n", "2", "--N", "4", "--dist", "cauchy"), "--dist"),
        (("baseline", "--n", "2", "--N", "4", "--dist", "bernoulli:2"), "--dist"),
        (("baseline", "--n", "2", "--N", "4", "--samples", "1"), "--samples"),
        (("lobes", "--law", "cauchy"), "--law"),
        (("lobes", "--n", "0"), "--n"),
        (("lobes", "--n", "10,abc"), "--n"),
        (("lobes", "--rho", "-1"), "--rho"),
        (("lobes", "--repeats", "1.5"), "--repeats"),
        (("verify", "--samples", "many"), "--samples"),
        (("verify", "--seed", "-3"), "--seed"),
        (("verify", "--bogus"), "--bogus"),
        (("frobnicate",), "frobnicate"),
        (("analyze", "--layers", "3-1"), "--layers"),
        (("analyze", "-o", "out.txt"), "--output"),
        (("plot", "results.csv", "-o", "figs", "--head", "1"), "--head"),
        (("plot", "results.csv"), "-o"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], names: str
) -> None:
    code, _out, err = run(capsys, *args)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("qkenergy: error: ")
    assert names in lines[0]


def test_analyze_selection_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--layers can only be checked against the checkpoint, yet it is still a bad argument: status 2."""
    code, out, err = run(capsys, "analyze", "--layers", "99", "--no-null", "--quiet")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("qkenergy: error: --layers")


def test_plot_head_not_in_the_table_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--head can only be checked against the table, yet it is still a bad argument: status 2."""
    table = tmp_path / "heads.csv"
    table.write_text("model,layer,head,n,N,symmetric_energy\nm,0,0,2,8,0.6\n")
    code, out, err = run(capsys, "plot", str(table), "-o", str(tmp_path / "figs"), "--head", "3,1")
    assert code == 2 and out == ""
    assert err == "qkenergy: error: --head: layer 3, head 1 is not in the table\n"


def test_library_errors_give_one_line_and_status_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise QKEnergyError("lobes: something the user can fix\nsecond line")

    monkeypatch.setattr(lobes, "lobe_departure_curve", fail)
    code, out, err = run(capsys, "lobes")
    assert code == 1 and out == ""
    assert err == "qkenergy: error: lobes: something the user can fix second line\n"

    code, _, err = run(capsys, "plot", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "figs"))
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("qkenergy: error: ") and "missing.csv" in err


# ---------------------------------------------------------------------------
# analyze on bad checkpoints: status 1, one line naming the file or tensor, no -o file left behind

_H, _N_HEAD, _N = 2, 4, 16  # heads, head_dim, hidden size of the small llama checkpoints below
_Q = "model.layers.0.self_attn.q_proj.weight"
_K = "model.layers.0.self_attn.k_proj.weight"
_LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 1,
    "num_attention_heads": _H,
    "num_key_value_heads": _H,
    "hidden_size": _N,
    "head_dim": _N_HEAD,
}


def _checkpoint(
    root: Path, tensors: dict[str, tuple[int, int]] | None = None, config: dict[str, object] | None = None
) -> Path:
    """A directory with config.json and a model.safetensors holding float32 tensors of these shapes."""
    from safetensors.numpy import save_file

    root.mkdir()
    (root / "config.json").write_text(json.dumps(_LLAMA if config is None else config))
    shapes = {_Q: (_H * _N_HEAD, _N), _K: (_H * _N_HEAD, _N)} if tensors is None else tensors
    rng = np.random.default_rng(0)
    save_file(
        {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()},
        str(root / "model.safetensors"),
    )
    return root


def _file_checkpoint(root: Path, name: str, content: bytes) -> Path:
    """A directory with config.json and one weights file ``name`` holding ``content``."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps(_LLAMA))
    (root / name).write_bytes(content)
    return root


def _raw_checkpoint(root: Path, header: bytes, data: bytes = b"", length: int | None = None) -> Path:
    """A directory whose model.safetensors is written byte by byte: 8-byte length, header, data."""
    size = len(header) if length is None else length
    return _file_checkpoint(root, "model.safetensors", struct.pack("<Q", size) + header + data)


def _header(entries: dict[str, dict[str, object]]) -> bytes:
    return json.dumps(entries).encode()


BAD_CHECKPOINTS = {
    # case: (make the MODEL argument under tmp_path, text the one line must contain)
    "missing path": (lambda tmp: tmp / "no-such-model", "no-such-model: no such file or directory"),
    "truncated file": (
        lambda tmp: _file_checkpoint(tmp / "m", "model.safetensors", b"abc"),
        "model.safetensors: file has 3 bytes, too short",
    ),
    "header length beyond the file": (
        lambda tmp: _raw_checkpoint(tmp / "m", b"{}", length=10**6),
        "model.safetensors: the header length is larger than the rest of the file",
    ),
    "header not JSON": (
        lambda tmp: _raw_checkpoint(tmp / "m", b"{not json"),
        "model.safetensors: header is not valid UTF-8 JSON",
    ),
    "offsets outside the file": (
        lambda tmp: _raw_checkpoint(
            tmp / "m", _header({_Q: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}), b"\0" * 4
        ),
        f"model.safetensors: tensor '{_Q}' has data_offsets [0, 8] beyond the 4-byte data section",
    ),
    "dtype and shape inconsistent with the byte range": (
        lambda tmp: _raw_checkpoint(
            tmp / "m", _header({_Q: {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}), b"\0" * 8
        ),
        f"model.safetensors: tensor '{_Q}' has data_offsets [0, 8] (8 bytes) but F32 [3] needs 12 bytes",
    ),
    "missing tensor": (
        lambda tmp: _checkpoint(tmp / "m", {_Q: (_H * _N_HEAD, _N)}),
        f"model.safetensors: missing tensor '{_K}'",
    ),
    "shape inconsistent with config.json": (
        lambda tmp: _checkpoint(tmp / "m", {_Q: (_H * _N_HEAD, _N), _K: (_H * _N_HEAD, _N + 1)}),
        f"model.safetensors: tensor '{_K}' has shape [8, 17], expected [8, 16]",
    ),
    "unsupported architecture": (
        lambda tmp: _checkpoint(tmp / "m", config={**_LLAMA, "model_type": "xlnet"}),
        "config.json: model_type 'xlnet' is not supported",
    ),
    "no model_type (the library's `model_type` and `layout` shown as flags)": (
        lambda tmp: _checkpoint(tmp / "m", config={k: v for k, v in _LLAMA.items() if k != "model_type"}),
        "has no 'model_type' (pass --model-type TYPE to read it as a supported type, or --layout FILE.toml to "
        "describe it); ",
    ),
    "pickled weights only": (
        lambda tmp: _file_checkpoint(tmp / "m", "pytorch_model.bin", b"never unpickled"),
        "pytorch_model.bin: pickled PyTorch checkpoints are not loaded",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CHECKPOINTS))
def test_analyze_bad_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    make, needle = BAD_CHECKPOINTS[case]
    model = make(tmp_path)
    output = tmp_path / "out" / "heads.csv"
    code, out, err = run(capsys, "analyze", str(model), "--no-null", "--quiet", "-o", str(output))
    assert code == 1, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"qkenergy: error: {tmp_path}"), lines[0]  # the file, by its full path
    assert needle in lines[0]
    assert not output.exists() and not output.parent.exists()


def test_analyze_good_checkpoint_writes_the_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The control case for the checkpoints above: the same small llama, intact."""
    output = tmp_path / "heads.csv"
    code, _, err = run(
        capsys, "analyze", str(_checkpoint(tmp_path / "m")), "--no-null", "--quiet", "-o", str(output)
    )
    assert code == 0, err
    assert output.is_file()
    # --threads: any count >= 1 (same table); 0 is a usage error
    again = tmp_path / "heads-2.csv"
    code, _, err = run(
        capsys, "analyze", str(tmp_path / "m"), "--no-null", "--quiet", "--threads", "2", "-o", str(again)
    )
    assert code == 0, err
    assert again.read_text() == output.read_text()
    code, _, err = run(capsys, "analyze", str(tmp_path / "m"), "--no-null", "--threads", "0")
    assert code == 2 and "--threads" in err


def test_unwritable_cache_directory_is_one_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The run goes on without caching; stderr holds one warning line naming the directory."""
    (tmp_path / "a-file").write_text("")
    output = tmp_path / "heads.csv"
    code, _, err = run(
        capsys,
        "analyze",
        str(_checkpoint(tmp_path / "m")),
        "--samples",
        "50",
        "--quiet",
        "--cache-dir",
        str(tmp_path / "a-file" / "cache"),
        "-o",
        str(output),
    )
    assert code == 0, err
    assert len(err.splitlines()) == 1 and err.startswith("qkenergy: warning: ") and "a-file" in err
    assert output.is_file()


def test_cache_file_that_is_a_fifo_is_recomputed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A FIFO planted at the cache path would block a plain open for ever: it is a miss instead."""
    from qkenergy.analysis.null_cache import null_cache_path
    from qkenergy.analysis.nullspec import NullSpec

    os.mkfifo(null_cache_path(tmp_path, NullSpec(samples=50), 1, 3))
    code, out, err = run(
        capsys, "baseline", "--n", "1", "--N", "3", "--samples", "50", "--cache-dir", str(tmp_path), "--json"
    )
    assert code == 0 and err == ""
    assert strict_json(out)["samples"] == 50
    assert null_cache_path(tmp_path, NullSpec(samples=50), 1, 3).is_file()


def test_console_script_one_line_error() -> None:
    """The real process: stderr holds exactly one line, status 2."""
    done = subprocess.run(
        [sys.executable, "-m", "qkenergy.cli", "baseline", "--n", "0", "--N", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        done.stderr.count("\n") == 1 and done.stderr.startswith("qkenergy: error: ") and "--n" in done.stderr
    )


# ---------------------------------------------------------------------------
# help


@pytest.mark.parametrize("command", [(), ("verify",), ("baseline",), ("lobes",), ("analyze",), ("plot",)])
def test_help(capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    code, out, err = run(capsys, *command, "--help")
    assert code == 0 and err == ""
    assert "Usage:" in out


def test_verify_help_states_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "verify", "--help")
    assert f"default: {verify.DEFAULT_SAMPLES}]" in out
    assert "DEFAULT_SAMPLES" not in out  # the number, not the code's name for it


def test_one_layer_out_of_range_names_the_layers_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run(capsys, "analyze", "--layers", "9", "--no-null", "--quiet")
    assert err == "qkenergy: error: --layers: 9 is out of range; valid layers are 0..5 (the model has 6)\n"


def test_bare_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    assert code == 0 and "verify" in out and "baseline" in out


def test_analyze_rotation_null(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--null rotation fills the rotation columns and says so in the summary; a bad --null is status 2."""
    output = tmp_path / "heads.csv"
    args = ["analyze", str(_checkpoint(tmp_path / "m")), "--null", "rotation", "--rotation-samples", "50"]
    code, out, err = run(capsys, *args, "-o", str(output))
    assert code == 0, err
    assert "rotation null 50 draws per head" in out and "Rotation null" in out
    import pandas as pd

    table = pd.read_csv(output)
    assert table["symmetric_energy_rotation_z"].notna().all()
    assert table["symmetric_energy_z"].isna().all()  # the Gaussian null was not asked for
    code, out, err = run(capsys, "analyze", "--null", "uniform", "--quiet")
    assert code == 2 and "--null" in err


def test_layouts_lists_every_supported_type(capsys: pytest.CaptureFixture[str]) -> None:
    from qkenergy.weights.families import supported_model_types

    code, out, _ = run(capsys, "layouts", "--json")
    assert code == 0
    rows = strict_json(out)
    assert isinstance(rows, list) and [r["model_type"] for r in rows] == supported_model_types()
    t5 = next(r for r in rows if r["model_type"] == "t5")
    assert (
        t5["stacks"] == "encoder, decoder, cross"
        and t5["proven by"] == "transformers T5ForConditionalGeneration"
    )
    code, out, _ = run(capsys, "layouts")
    assert code == 0 and "deepseek_v3" in out


def test_analyze_name_tells_two_runs_of_one_checkpoint_apart(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--name is the model's name in the summary, the table, its settings and the figures; report
    compares two runs of one checkpoint (with and without --fold-norm) under their names."""
    import pandas as pd

    from qkenergy.formats.provenance import read_settings

    common = ["--layers", "0", "--samples", "50", "--cache-dir", str(tmp_path / "cache")]
    tables = {}
    for name, extra in (("minilm", []), ("minilm-folded", ["--fold-norm"])):
        tables[name] = tmp_path / f"{name}.csv"
        args = ["analyze", *common, *extra, "--name", name, "-o", str(tables[name])]
        if name == "minilm":
            args += ["--plot", str(tmp_path / "plots")]
        code, out, err = run(capsys, *args)
        assert code == 0, err
        assert out.startswith(f"{name} · 12 heads in 1 layer · ")
        table = pd.read_csv(tables[name])
        assert set(table["model"]) == {name}
        settings = read_settings(tables[name])
        assert settings is not None and settings["model"] == name
        assert settings["model_source"]["argument"] is None  # what was read: the embedded MiniLM
    with (tmp_path / "plots" / "symmetric_energy_heatmap.png").open("rb") as fh:
        assert b'"model": "minilm"' in fh.read()  # the settings the figure carries name the model
    page = tmp_path / "report.html"
    code, out, err = run(capsys, "report", *map(str, tables.values()), "-o", str(page), "--no-static")
    assert code == 0, err
    models = pd.read_csv(tmp_path / "report_files" / "models.csv")
    assert models["model"].tolist() == ["minilm", "minilm-folded"]
    code, _, err = run(capsys, "analyze", "--name", " ", "--quiet")
    assert code == 2 and err.startswith("qkenergy: error: --name: expected a non-empty name")


def test_help_texts_carry_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    # click prints docstrings as they are: no RST (``x``) or markdown (`x`) quoting in --help (issue 39).
    from qkenergy.cli.main import cli as group

    for name in ("", *group.commands):
        code, out, _ = run(capsys, *([name] if name else []), "--help")
        assert code == 0 and "`" not in out, name
