"""The experiment's pieces (examples/encoder_vs_decoder.py) and the result docs/training.md quotes."""

from __future__ import annotations

import importlib.util
import json
import math
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy.analysis.analyze import analyze_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _experiment() -> Any:
    spec = importlib.util.spec_from_file_location(
        "encoder_vs_decoder", ROOT / "examples" / "encoder_vs_decoder.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_checkpoints_are_log_spaced_and_end_at_the_last_step() -> None:
    checkpoint_steps = _experiment().checkpoint_steps
    # four per decade: 10^(k/4) rounded
    assert checkpoint_steps(1000) == [1, 2, 3, 6, 10, 18, 32, 56, 100, 178, 316, 562, 1000]
    assert checkpoint_steps(20) == [1, 2, 3, 6, 11, 20]
    assert checkpoint_steps(3)[-1] == 3


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_symmetric_init_makes_every_head_symmetric(kind: str) -> None:
    experiment = _experiment()
    torch.manual_seed(0)
    if kind == "encoder":
        config = transformers.BertConfig(
            vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
        model = transformers.BertForMaskedLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16)
        model = transformers.GPT2LMHeadModel(config)
    before = analyze_model(model, null=False).heads["symmetric_energy"].to_numpy()
    assert np.all(before < 0.9)
    experiment.symmetric_init(model)
    after = analyze_model(model, null=False).heads["symmetric_energy"].to_numpy()
    np.testing.assert_allclose(after, 1.0, rtol=0, atol=1e-12)  # L = W_Q^T W_Q is symmetric


@pytest.mark.parametrize(
    ("record", "marker", "inits"),
    [
        ("encoder_vs_decoder.json", "encoder_vs_decoder", {"default", "symmetric"}),
        ("encoder_vs_decoder_lr3e-3.json", "encoder_vs_decoder lr3e-3", {"default", "symmetric"}),
    ],
)
def test_the_docs_quote_the_recorded_results(record: str, marker: str, inits: set[str]) -> None:
    """docs/training.md's result tables are the ones the recorded runs' summaries give."""
    experiment = _experiment()
    summary = json.loads((ROOT / "docs" / record).read_text(encoding="utf-8"))
    start, end = f"<!-- {marker}: start -->\n", f"<!-- {marker}: end -->"
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    assert start in text and end in text
    assert text.split(start, 1)[1].split(end, 1)[0] == experiment.results_markdown(summary)
    assert summary["steps"] == 1000 and set(summary["split"]) == inits
    assert max(summary["tracked_equals_survey"]["max_abs_difference"].values()) <= 1e-9


# ----------------------------------------------------------------------------- the sweep


def test_the_full_design_varies_every_factor_of_the_issue_with_five_seeds() -> None:
    experiment = _experiment()
    design = experiment.design("full")
    assert {
        "schedule",
        "learning rate",
        "weight decay",
        "mask rate",
        "batch",
        "width",
        "heads",
        "text",
    } <= set(design.levels)
    assert [label for label, _ in design.levels["weight decay"]] == ["0", "0.1"]  # with the default's 0.01
    assert design.long_steps >= 5000 and design.steps == 1000
    rows = experiment.plan(design, list(range(5)))
    for (factor, level), group in _groups(rows).items():
        assert sorted(r["seed"] for r in group if r["model"] == "encoder") == list(range(5)), (factor, level)
        assert sorted(r["seed"] for r in group if r["model"] == "decoder") == list(range(5)), (factor, level)
    default = {(r["model"], r["seed"]): r["config"] for r in rows if r["factor"] == "default"}
    for r in rows:
        if r["factor"] == "mask rate" and r["model"] == "decoder":
            assert r["config"] == default[("decoder", r["seed"])]  # the decoder masks nothing: one run
        if r["factor"] == "prototype":
            assert r["config"].steps == design.long_steps and r["config"].schedule == "constant"
    # the parser's default is that design
    assert "--preset" in _experiment_source() and 'default="full"' in _experiment_source()


def _experiment_source() -> str:
    return (ROOT / "examples" / "encoder_vs_decoder.py").read_text(encoding="utf-8")


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["factor"], r["level"]), []).append(r)
    return groups


def test_the_bootstrap_interval_has_the_width_of_the_standard_error() -> None:
    """Percentile bootstrap of a difference of means, fixed seeds (data 1, bootstrap 0).

    The bootstrap distribution of a mean has sd sqrt(var/n) (var with ddof 0), so
    the 95 % interval of a difference of independent means spans 2 x 1.96 x the
    plug-in standard error. The tolerance, 5 %, is about 3.5 times the Monte Carlo
    error of a 2.5 % / 97.5 % quantile of 10,000 resamples (about 1.4 % of the
    half-width for a nearly normal distribution).
    """
    bootstrap = _experiment().bootstrap_interval
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.0, 1.0, 50), rng.normal(1.0, 2.0, 40)
    result = bootstrap(a, b)
    assert result["estimate"] == pytest.approx(a.mean() - b.mean(), abs=1e-12)
    standard_error = math.sqrt(a.var() / len(a) + b.var() / len(b))
    half_width = (result["high"] - result["low"]) / 2
    assert half_width == pytest.approx(1.959964 * standard_error, rel=0.05)
    centre = (result["high"] + result["low"]) / 2
    assert abs(centre - result["estimate"]) < 0.1 * standard_error
    assert bootstrap(a, b) == result  # the fixed seed: the same interval every time
    one = bootstrap(a)
    assert one["low"] < a.mean() < one["high"]
    assert (one["high"] - one["low"]) / 2 == pytest.approx(1.959964 * a.std() / math.sqrt(len(a)), rel=0.05)
    single = bootstrap([0.5])
    assert single == {"estimate": 0.5, "low": 0.5, "high": 0.5}  # one seed: no interval to draw


def test_the_sweep_runs_on_dask_and_a_rerun_skips_the_finished_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiny sweep (6 steps, width 16) on a LocalCluster of one worker, run three times."""
    # Run as a script, the tasks travel by value (Dask pickles __main__'s functions so); loaded here by
    # path, they travel by reference to the module encoder_vs_decoder, which the workers import from
    # examples/ (spawned workers start with this process's sys.path).
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    experiment = _experiment()
    out = tmp_path / "sweep"
    command = ["--sweep", "--preset", "tiny", "--seeds", "2", "--out", str(out)]
    assert experiment.main(command) == 0
    printed = capsys.readouterr().out
    assert "10 runs: 0 finished before, 10 to train" in printed and "LocalCluster(1 workers" in printed
    summary = json.loads((out / "summary.json").read_text())
    factors = [(e["factor"], e["level"]) for e in summary["settings"]]
    assert factors[:3] == [("default", "default"), ("mask rate", "0.3"), ("prototype", "constant, wd 0")]
    assert [int(level) for factor, level in factors if factor == "steps"] == [2, 6, 8]  # tracked every 2
    assert summary["runs_finished"] == summary["runs_planned"] == 10
    default = summary["settings"][0]
    for model in ("encoder", "decoder"):
        assert default["seeds"][model] == [0, 1]
        medians = default["median_s"][model]
        assert default["mean_median_s"][model]["estimate"] == pytest.approx(np.mean(medians), abs=1e-12)
    difference = default["difference_s"]
    assert difference["low"] <= difference["estimate"] <= difference["high"]
    assert default["difference_null_sd"]["estimate"] == pytest.approx(
        difference["estimate"] / default["null_sd"], rel=1e-12
    )
    assert printed.count("| default | default | 2/2 | 6 |") == 1
    assert (out / "sweep_factors.png").stat().st_size > 0 and (out / "sweep_training.png").stat().st_size > 0
    scores = summary["layer_scores"]["default: default"]["encoder"]
    assert set(scores["layers"]) == {"0", "1"} and scores["layers"]["0"]["step"][-1] == 6
    ledger = sqlite3.connect(out / "ledger.sqlite")
    assert ledger.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall() == [("done", 10)]

    # a rerun trains nothing
    assert experiment.main([*command, "--train-only"]) == 0
    assert "10 runs: 10 finished before, 0 to train" in capsys.readouterr().out

    # a run whose worker died before it wrote run.json is trained again, and only that run
    victim = sorted((out / "runs").iterdir())[0]
    (victim / "run.json").unlink()
    assert experiment.main([*command, "--train-only"]) == 0
    printed = capsys.readouterr().out
    assert "10 runs: 9 finished before, 1 to train" in printed and victim.name in printed
    assert (victim / "run.json").is_file()
    attempts = dict(ledger.execute("SELECT key, attempts FROM runs").fetchall())
    assert attempts[victim.name] == 2 and sorted(set(attempts.values())) == [1, 2]
    ledger.close()


def _worker_processes() -> list[Any]:
    """This process's Dask worker processes (LocalCluster spawns them with multiprocessing)."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in command and "resource_tracker" not in command:
            found.append(child)
    return found


def test_a_worker_killed_mid_sweep_loses_only_its_own_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of one of two workers once a run has finished: the sweep still ends with every run, and
    no run finished before the kill is trained again (its run.json is the same file, untouched)."""
    import os
    import signal
    import threading
    import time

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    experiment = _experiment()
    out = tmp_path / "sweep"
    configs = [row["config"] for row in experiment.plan(experiment.design("tiny"), [0, 1])]
    total = len(dict.fromkeys(configs))
    killed: dict[str, Any] = {}

    def kill_a_worker_after_the_first_run() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            workers = _worker_processes()
            if any(out.glob("runs/*/run.json")) and len(workers) == 2:
                victim = max(workers, key=lambda w: w.pid)
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait(timeout=30)
                killed["pid"] = victim.pid  # what is on disk now was finished before the kill
                killed["before"] = {
                    p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("runs/*/run.json")
                }
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_a_worker_after_the_first_run, daemon=True)
    watcher.start()
    out.mkdir()
    counts = experiment.run_sweep(out, configs, workers=2)
    watcher.join(timeout=5)
    assert "pid" in killed, "no run finished while both workers were up"
    assert len(killed["before"]) < total, "the sweep had finished before the kill"
    assert counts == {"runs": total, "skipped": 0, "trained": total, "failed": 0}
    records = {p: json.loads(p.read_text()) for p in (out / "runs").glob("*/run.json")}
    assert len(records) == total
    for path, (content, mtime) in killed["before"].items():  # finished before the kill: not trained again
        assert path.read_bytes() == content and path.stat().st_mtime_ns == mtime
    after = [r for p, r in records.items() if p not in killed["before"]]
    assert after and all(not r["worker"].endswith(f":{killed['pid']}") for r in after)
    ledger = sqlite3.connect(out / "ledger.sqlite")
    assert ledger.execute(
        "SELECT status, attempts, count(*) FROM runs GROUP BY status, attempts"
    ).fetchall() == [("done", 1, total)]
    ledger.close()


@pytest.mark.parametrize("preset", ["quick", "long"])
def test_the_recorded_sweeps_are_what_the_script_computes(preset: str) -> None:
    """The recorded intervals are recomputed from the recorded per-seed medians (same bootstrap,
    same seed), so a record cannot drift from what the script computes; the docs' tables of the
    records are generated blocks (docs/generate_examples.py, tests/cross/test_docs_generated.py).
    """
    experiment = _experiment()
    summary = json.loads(
        (ROOT / "docs" / f"encoder_vs_decoder_sweep_{preset}.json").read_text(encoding="utf-8")
    )
    for name in ("factors", "training"):
        assert (ROOT / "docs" / f"encoder_vs_decoder_sweep_{preset}_{name}.png").stat().st_size > 0
    assert summary["preset"] == preset and summary["command"].startswith(
        "python examples/encoder_vs_decoder.py"
    )
    for e in summary["settings"]:
        encoder, decoder = e["median_s"]["encoder"], e["median_s"]["decoder"]
        assert e["difference_s"] == experiment.bootstrap_interval(encoder, decoder), (e["factor"], e["level"])
        assert e["mean_median_s"]["encoder"] == experiment.bootstrap_interval(encoder)
        assert e["difference_null_sd"]["estimate"] == pytest.approx(
            e["difference_s"]["estimate"] / e["null_sd"]
        )
