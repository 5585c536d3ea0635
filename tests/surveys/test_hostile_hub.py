"""A survey whose manifest holds hub ids served by a stalling and a lying server (issue 37).

One manifest: ``loopback/stall`` (its tensor ranges accepted and never answered), ``loopback/liar``
(its tensor ranges answered with a Content-Range 4 KiB further on than asked) and an honest local
checkpoint. The survey must end (a watchdog, not a timed assertion: a hang fails the test), report
the honest model's heads as its local analysis gives them, mark every unit of the hostile models
failed with one line naming the repository and what was wrong, write none of their rows, and record
nothing from the lying answers in the range cache: a following honest run of the liar's id equals
its local analysis. The bounds are 1 s (``QKENERGY_HUB_TIMEOUT``) and the waits between tries are
recorded instead of slept; the survey runs on one in-process Dask worker (threads), which sees the
environment and the patched wait of this process.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import qkenergy as qk
from tests.survey_checkpoints import thread_cluster, write_checkpoint
from tests.weights.test_hub_hostile import recorded

pytest.importorskip("huggingface_hub")

WEIGHTS = "model.safetensors"
WATCHDOG = 120.0  # seconds: far above the run's few (1 s bounds); a survey still running then hangs


def big(folder: Path, seed: int) -> Path:
    """A one-layer llama checkpoint whose tensors (128 kB each) lie beyond the header's first 64 KiB read."""
    return write_checkpoint(folder, layers=1, N=256, heads=4, head_dim=32, seed=seed)


def local_heads(folder: Path) -> pd.DataFrame:
    return qk.analyze(folder, null=False).heads.drop(columns="model")


def survey_within(watchdog: float, *args: Any, **kwargs: Any) -> qk.Survey:
    """``qk.survey(*args, **kwargs)`` in a thread; fails the test if it is still running after ``watchdog`` s."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["run"] = qk.survey(*args, **kwargs)
        except BaseException as error:  # handed to the test thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True, name="survey")
    thread.start()
    thread.join(watchdog)
    assert not thread.is_alive(), f"the survey still runs after {watchdog:.0f} s: a hostile server hangs it"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["run"]


def test_a_survey_reports_its_honest_model_past_a_stalling_and_a_lying_hub(
    loopback_hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qkenergy.weights import hub as hub_module

    for variable in ("QKENERGY_HUB_TIMEOUT", "QKENERGY_HUB_LOCK_TIMEOUT"):
        monkeypatch.setenv(variable, "1")
    monkeypatch.setenv("QKENERGY_HUB_MAX_WAIT", "5")
    waits: list[float] = []
    monkeypatch.setattr(hub_module, "_sleep", waits.append)

    stall_folder, liar_folder = big(tmp_path / "stall", 1), big(tmp_path / "liar", 2)
    honest_folder = big(tmp_path / "honest", 3)
    loopback_hub.add_repo("loopback/stall", stall_folder)
    loopback_hub.add_repo("loopback/liar", liar_folder)
    # The plan's read of each header (the file's first 64 KiB) is answered honestly; every tensor
    # range after it, at every try of the hub and of the survey, stalls or lies.
    loopback_hub.inject("loopback/stall", "stall", path=WEIGHTS, after=1, times=1000)
    loopback_hub.inject("loopback/liar", "shift", path=WEIGHTS, after=1, times=1000, by=4096)
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[[model]]\nsource = "loopback/stall"\nname = "stall"\n'
        '[[model]]\nsource = "loopback/liar"\nname = "liar"\n'
        f'[[model]]\nsource = "{honest_folder}"\nname = "honest"\n'
    )
    out, cache = tmp_path / "out", tmp_path / "c"
    with thread_cluster() as scheduler:
        result = survey_within(WATCHDOG, manifest, out, null=False, scheduler=scheduler, cache_dir=cache)
    run = result.last_run
    assert run is not None

    # the honest model: done, its heads those of its local analysis
    assert not run.model_errors, run.model_errors
    heads = result.heads
    assert set(heads["model"]) == {"honest"}  # no row of a hostile model
    ours = heads.drop(columns="model")[local_heads(honest_folder).columns].reset_index(drop=True)
    # the survey's dataset reads integer columns back as numpy int64, analyze gives nullable Int64
    pd.testing.assert_frame_equal(ours, local_heads(honest_folder), check_dtype=False)
    assert not list((out / "heads").glob("model=stall*")) and not list((out / "heads").glob("model=liar*"))

    # the hostile models: every unit failed, one line naming the repository and what was wrong
    with sqlite3.connect(out / "ledger.sqlite") as db:
        units = dict(
            ((model, layer), (status, error))
            for model, layer, status, error in db.execute("SELECT model, layer, status, error FROM units")
        )
    assert units[("honest", 0)][0] == "done"
    wrong = {
        "stall": ("loopback/stall", "no answer from 127.0.0.1:", "QKENERGY_HUB_TIMEOUT"),
        "liar": ("loopback/liar", "the server answered bytes ", "for a request of "),
    }
    assert sorted((model, layer) for model, layer, _ in run.failed) == [("liar", 0), ("stall", 0)]
    for model, layer, error in run.failed:
        status, recorded_error = units[(model, layer)]
        assert status == "failed" and recorded_error == error
        assert "\n" not in error and all(needle in error for needle in wrong[model]), error
        assert f"{model} layer {layer} failed: {error}" in result.summary(width=10_000)

    # nothing of the lying answers was recorded: the header's read only, and an honest run equals
    # the local analysis of the liar's files
    assert recorded(cache, WEIGHTS, "loopback/liar") == [(0, 64 << 10)]
    loopback_hub.clear_faults()
    remote = qk.analyze("loopback/liar", null=False, cache_dir=cache)
    pd.testing.assert_frame_equal(remote.heads.drop(columns="model"), local_heads(liar_folder))
