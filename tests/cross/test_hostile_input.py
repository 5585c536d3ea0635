"""Hostile input through the command line: every class answers with one line, a status, and no output file.

Classes (issue 6): JSON anywhere in a checkpoint (header, config.json, shard index), counts that size
allocations, the header length. Each case runs the real entry point in-process; one subprocess case
checks that refusing absurd counts stays within a small memory bound.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from qkenergy import cli

Q = "model.layers.{i}.self_attn.q_proj.weight"
K = "model.layers.{i}.self_attn.k_proj.weight"
CONFIG: dict[str, object] = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "hidden_size": 16,
    "head_dim": 4,
}
DEEP = 100_000  # nesting levels: far beyond Python's recursion limit


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else int(code)), out, err


def header_entries(layers: int = 2) -> dict[str, dict[str, object]]:
    entries: dict[str, dict[str, object]] = {}
    offset = 0
    for i in range(layers):
        for name in (Q.format(i=i), K.format(i=i)):
            entries[name] = {"dtype": "F32", "shape": [8, 16], "data_offsets": [offset, offset + 512]}
            offset += 512
    return entries


def write_model(root: Path, header: bytes | dict | None = None, config: bytes | dict | None = None) -> Path:
    """A llama checkpoint directory: model.safetensors written byte by byte, config.json as given."""
    root.mkdir(parents=True)
    head = header if header is not None else header_entries()
    raw = head if isinstance(head, bytes) else json.dumps(head).encode()
    data = np.random.default_rng(0).standard_normal(512).astype("<f4").tobytes()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    conf = config if config is not None else CONFIG
    (root / "config.json").write_bytes(conf if isinstance(conf, bytes) else json.dumps(conf).encode())
    return root


def write_sharded(root: Path, index: bytes | dict) -> Path:
    """Two shards of one layer each and a model.safetensors.index.json given as is."""
    root.mkdir(parents=True)
    data = np.random.default_rng(0).standard_normal(512).astype("<f4").tobytes()
    for i in range(2):
        entries = {
            name: {"dtype": "F32", "shape": [8, 16], "data_offsets": [j * 512, (j + 1) * 512]}
            for j, name in enumerate((Q.format(i=i), K.format(i=i)))
        }
        raw = json.dumps(entries).encode()
        (root / f"shard-{i}.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    (root / "config.json").write_text(json.dumps(CONFIG))
    (root / "model.safetensors.index.json").write_bytes(
        index if isinstance(index, bytes) else json.dumps(index).encode()
    )
    return root


def entry_with(**change: object) -> dict[str, dict[str, object]]:
    entries = header_entries()
    entries[Q.format(i=0)].update(change)
    return entries


def config_with(**change: object) -> dict[str, object]:
    return {**CONFIG, **change}


def deep(levels: int = DEEP) -> bytes:
    return b"[" * levels + b"]" * levels


WEIGHT_MAP = {Q.format(i=i): f"shard-{i}.safetensors" for i in range(2)} | {
    K.format(i=i): f"shard-{i}.safetensors" for i in range(2)
}

# case -> (build the MODEL under a directory, text the one line must contain)
JSON_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "header nested 100k deep": (lambda d: write_model(d, b'{"a": ' + deep() + b"}"), "nested more than"),
    "header 5000-digit offset": (
        lambda d: write_model(
            d, b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + b"9" * 5000 + b"]}}"
        ),
        "integer longer than",
    ),
    "header 5000-digit shape": (
        lambda d: write_model(
            d, b'{"x": {"dtype": "F32", "shape": [' + b"7" * 5000 + b'], "data_offsets": [0, 4]}}'
        ),
        "integer longer than",
    ),
    "dtype as list": (lambda d: write_model(d, entry_with(dtype=["F32"])), "field 'dtype' is an array"),
    "dtype as object": (lambda d: write_model(d, entry_with(dtype={"F32": 1})), "field 'dtype' is an object"),
    "dtype as number": (lambda d: write_model(d, entry_with(dtype=32)), "field 'dtype' is 32"),
    "shape entry float": (
        lambda d: write_model(d, entry_with(shape=[8.0, 16])),
        "field 'shape' has entry 0 = 8.0",
    ),
    "shape entry string": (
        lambda d: write_model(d, entry_with(shape=[8, "16"])),
        "field 'shape' has entry 1 = '16'",
    ),
    "shape entry bool": (
        lambda d: write_model(d, entry_with(shape=[True, 16])),
        "field 'shape' has entry 0 = true",
    ),
    "shape entry negative": (lambda d: write_model(d, entry_with(shape=[-8, 16])), "has entry 0 = -8"),
    "shape entry list": (lambda d: write_model(d, entry_with(shape=[[8], 16])), "has entry 0 = an array"),
    "shape as object": (lambda d: write_model(d, entry_with(shape={"8": 16})), "field 'shape' is an object"),
    "offsets as strings": (
        lambda d: write_model(d, entry_with(data_offsets=["0", "512"])),
        "field 'data_offsets' is an array",
    ),
    "metadata not strings": (
        lambda d: write_model(d, {**header_entries(), "__metadata__": {"format": ["pt"]}}),
        "__metadata__ must be an object of strings",
    ),
    "header top-level array": (lambda d: write_model(d, b"[1, 2]"), "must be a JSON object, got an array"),
    "header invalid UTF-8": (lambda d: write_model(d, b'{"\xff": 1}'), "not valid UTF-8 JSON"),
    "config nested 100k deep": (
        lambda d: write_model(d, config=b'{"model_type": ' + deep() + b"}"),
        "config.json: the config is nested",
    ),
    "config 5000-digit count": (
        lambda d: write_model(d, config=b'{"model_type": "llama", "hidden_size": ' + b"1" * 5000 + b"}"),
        "integer longer than",
    ),
    "config count as string": (
        lambda d: write_model(d, config=config_with(num_attention_heads="2")),
        "field 'num_attention_heads' is '2'",
    ),
    "config count as float": (
        lambda d: write_model(d, config=config_with(hidden_size=16.0)),
        "field 'hidden_size' is 16.0",
    ),
    "config count as list": (
        lambda d: write_model(d, config=config_with(head_dim=[4])),
        "field 'head_dim' is an array",
    ),
    "config count negative": (
        lambda d: write_model(d, config=config_with(num_key_value_heads=-2)),
        "field 'num_key_value_heads' is -2",
    ),
    "config model_type as list": (
        lambda d: write_model(d, config=config_with(model_type=["llama"])),
        "field 'model_type' is an array",
    ),
    "config model_type as object": (
        lambda d: write_model(d, config=config_with(model_type={"a": 1})),
        "field 'model_type' is an object",
    ),
    "config flag as string": (
        lambda d: write_model(d, config=config_with(model_type="opt", do_layer_norm_before="no")),
        "field 'do_layer_norm_before' is 'no'",
    ),
    "config top-level array": (lambda d: write_model(d, config=b"[]"), "must be a JSON object, got an array"),
    "index nested 100k deep": (
        lambda d: write_sharded(d, b'{"weight_map": ' + deep() + b"}"),
        "index is nested",
    ),
    "index 5000-digit integer": (
        lambda d: write_sharded(d, b'{"metadata": {"total_size": ' + b"3" * 5000 + b'}, "weight_map": {}}'),
        "integer longer than",
    ),
    "index weight_map as list": (
        lambda d: write_sharded(d, {"weight_map": [["a", "b"]]}),
        '"weight_map" object',
    ),
    "index shard as list": (
        lambda d: write_sharded(d, {"weight_map": {**WEIGHT_MAP, Q.format(i=0): ["shard-0.safetensors"]}}),
        '"weight_map" object',
    ),
    "index top-level string": (lambda d: write_sharded(d, b'"x"'), "must be a JSON object, got a string"),
}


@pytest.mark.parametrize("case", list(JSON_CASES))
def test_hostile_json_is_one_line_status_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    make, needle = JSON_CASES[case]
    model = make(tmp_path / "model")
    output = tmp_path / "out" / "heads.csv"
    code, out, err = run(capsys, "analyze", str(model), "--no-null", "--quiet", "-o", str(output))
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1 and err.startswith(f"qkenergy: error: {tmp_path}"), err
    assert needle in err, err
    assert len(err) < 400  # nothing of the file is echoed at length
    assert not output.parent.exists()


def test_header_length_is_never_echoed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for i, length in enumerate([2**64 - 1, 123_456_789_012, 10**8 + 1, 4096]):
        root = tmp_path / f"m{i}"
        root.mkdir()
        (root / "config.json").write_text(json.dumps(CONFIG))
        (root / "model.safetensors").write_bytes(struct.pack("<Q", length) + b"{}" * 10)
        code, _, err = run(capsys, "analyze", str(root), "--no-null", "--quiet")
        assert code == 1 and err.count("\n") == 1
        assert str(length) not in err and "header length" in err


# case -> (arguments after the command, extra config (None: the 2-layer model), exit status, text)
COUNT_CASES: dict[str, tuple[tuple[str, ...], dict[str, object] | None, int, str]] = {
    "--layers 0-100000000": (("--layers", "0-100000000"), None, 2, "valid layers are 0..1"),
    "--layers 0-1e18": (("--layers", "0-1e18"), None, 2, "valid layers are 0..1"),
    "--layers 5,0-3": (("--layers", "5,0-3"), None, 2, "valid layers are 0..1"),
    "--heads 1-1e30": (("--heads", "1-1e30"), None, 2, "valid query heads are 0..1"),
    "--samples 1e12": (("--samples", "1000000000000"), None, 2, "of memory"),
    "--samples 10^30": (("--samples", "1" + "0" * 30), None, 2, "--samples"),
    "config layers 1e18 as number": (
        (),
        {"num_hidden_layers": 1e18},
        1,
        "field 'num_hidden_layers' is 1e+18",
    ),
    "config layers 10^18 as integer": ((), {"num_hidden_layers": 10**18}, 1, "field 'num_hidden_layers'"),
    "config layers beyond the checkpoint": (
        (),
        {"num_hidden_layers": 1000},
        1,
        "missing tensor 'model.layers.2.self_attn.q_proj.weight'",
    ),
    "config heads 10^12": (
        (),
        {"num_attention_heads": 10**12, "num_key_value_heads": 10**12},
        1,
        "num_attention_heads",
    ),
    "config hidden 2^40": ((), {"hidden_size": 2**40}, 1, "field 'hidden_size'"),
}


@pytest.mark.parametrize("case", list(COUNT_CASES))
def test_absurd_counts_are_refused_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    args, config, status, needle = COUNT_CASES[case]
    model = write_model(tmp_path / "model", config=None if config is None else config_with(**config))
    output = tmp_path / "heads.csv"
    code, out, err = run(capsys, "analyze", str(model), "--quiet", "-o", str(output), *args)
    assert (code, out) == (status, ""), err
    assert err.count("\n") == 1 and err.startswith("qkenergy: error: ") and needle in err, err
    assert not output.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("baseline", "--n", "1", "--N", "1000000000000"),
        ("baseline", "--n", "100000", "--N", "1000000"),
        ("baseline", "--n", "1", "--N", "3", "--samples", "100000000000"),
        ("baseline", "--n", "1", "--N", "3", "--dist", "rademacher", "--samples", "100000000000"),
        ("lobes", "--n", "10,1000000000000000"),
        ("lobes", "--repeats", "10000000000000"),
        ("verify", "--samples", "100000000000000"),
        ("plot", "x.csv", "-o", "figs", "--samples", "1000000000000"),
    ],
)
def test_absurd_counts_of_other_commands(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, out, err = run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "of memory" in err, err


_PEAK_OF_CHILDREN = """
import json, resource, subprocess, sys
codes = [subprocess.run([sys.executable, "-m", "qkenergy.cli", *args], capture_output=True, text=True)
         for args in json.loads(sys.argv[1])]
print(json.dumps([[c.returncode, c.stderr] for c in codes]))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def test_refusals_stay_small_in_a_real_process(tmp_path: Path) -> None:
    """Memory bound of issue 6 (300 MB) on the worst cases, in real processes (peak RSS of the children)."""
    model = write_model(tmp_path / "model")
    cases = [
        ["analyze", str(model), "--layers", "0-100000000", "--no-null"],
        ["analyze", str(model), "--samples", "1000000000000"],
        ["baseline", "--n", "1", "--N", "1000000000000"],
    ]
    # A fresh parent, so the peak covers these children only (not earlier tests' ones).
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILDREN, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    results, peak_kib = done.stdout.splitlines()
    for code, err in json.loads(results):
        assert code == 2 and err.count("\n") == 1, err
    assert int(peak_kib) < 300 * 1024, peak_kib


# ---------------------------------------------------------------------------
# signals: one line, temporary files removed, status 128 + signal; also during start-up

_SLOW_WRITE = """
import os, sys, time
from pathlib import Path
ready, out_dir, real = Path(sys.argv[1]), Path(sys.argv[2]), os.replace

def slow(src, dst, *args, **kwargs):
    # the first file about to land in the output directory: its temporary copy is there now
    if Path(dst).parent == out_dir and not ready.exists():
        ready.write_text("temporary file written")
        time.sleep(120)
    return real(src, dst, *args, **kwargs)

os.replace = slow
sys.argv = ["qkenergy", *sys.argv[3:]]
from qkenergy.console import main
main()
"""


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    import time

    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("signum", [15, 2])
def test_signal_while_writing_leaves_nothing(tmp_path: Path, signum: int) -> None:
    model = write_model(tmp_path / "model")
    out_dir = tmp_path / "out"
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SLOW_WRITE,
            str(ready),
            str(out_dir),
            "analyze",
            str(model),
            "--no-null",
            "--quiet",
            "-o",
            str(out_dir / "heads.csv"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: ready.exists() or child.poll() is not None, "the temporary file")
        assert child.poll() is None, child.communicate()
        assert list(out_dir.iterdir()), "no temporary file to clean up"
        child.send_signal(signum)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    name = {15: "SIGTERM", 2: "SIGINT"}[signum]
    assert child.returncode == 128 + signum, err
    assert err == f"qkenergy: error: interrupted by {name}\n" and out == ""
    assert not out_dir.exists() or list(out_dir.iterdir()) == []  # temporary files gone, no output


def _catches_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the handlers")
def test_ctrl_c_during_start_up_is_one_line() -> None:
    """SIGINT as soon as the console script's first handlers are in, while the imports still run."""
    child = subprocess.Popen(
        [sys.executable, "-c", "from qkenergy.console import main; main()", "verify"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: child.poll() is not None or _catches_sigterm(child.pid), "the handlers")
        child.send_signal(2)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130
    assert err == "qkenergy: error: interrupted by SIGINT\n" and "Traceback" not in err


def test_unexpected_exceptions_are_one_line_unless_debugging(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from qkenergy.math import lobes

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(lobes, "lobe_departure_curve", broken)
    monkeypatch.setenv("QKENERGY_DEBUG", "0")
    code, out, err = run(capsys, "lobes")
    assert (code, out) == (1, "")
    assert err == "qkenergy: error: unexpected KeyError: 'a bug' (set QKENERGY_DEBUG=1 for the traceback)\n"
    monkeypatch.setenv("QKENERGY_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main(["lobes"])


def test_signal_as_a_temporary_file_is_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SIGTERM right after the temporary file exists, before the transaction has noted it: the
    # signal waits for the note, then the rollback removes the file (it used to stay behind).
    import os
    import signal
    import tempfile

    from qkenergy.base import atomic as transaction
    from qkenergy.base.interrupt import Interrupted, signals_raise

    real = tempfile.mkstemp

    def mkstemp_then_signal(*args: object, **kwargs: object) -> tuple[int, str]:
        made = real(*args, **kwargs)  # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGTERM)
        return made

    monkeypatch.setattr(transaction.tempfile, "mkstemp", mkstemp_then_signal)
    with pytest.raises(Interrupted), signals_raise(), transaction.OutputTransaction() as outputs:
        outputs.stage(tmp_path / "table.csv")
    assert list(tmp_path.iterdir()) == []
