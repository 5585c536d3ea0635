"""QKEnergyCallback in a transformers Trainer and Tracker in a plain loop: same rows as analyze on checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkenergy import cli  # noqa: E402
from qkenergy.base.errors import QKEnergyError  # noqa: E402
from qkenergy.formats.tables import read_table  # noqa: E402
from qkenergy.training import PREFIX, QKEnergyCallback, Tracker, read_tracking  # noqa: E402

SAMPLES = 64  # the null laws' draws: equality with analyze needs the same K, not a large one
STEPS = 4
VOCAB, T = 40, 16


def _gpt2(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=T, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


class _Tokens(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.ids = torch.randint(0, VOCAB, (32, T), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class _Integration(transformers.TrainerCallback):
    """Stands for a report_to integration (TensorBoard, W&B): what its on_log is handed."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        self.seen.append(dict(logs))


def _train(out: Path, callback: QKEnergyCallback) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-2,  # large: the heads must move away from their initial values in 4 steps
        logging_steps=2,
        save_strategy="steps",
        save_steps=STEPS,
        save_only_model=True,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )
    trainer = transformers.Trainer(model=_gpt2(), args=args, train_dataset=_Tokens())
    trainer.integration = _Integration()
    trainer.callback_handler.callbacks.insert(1, trainer.integration)  # where report_to puts them
    callback.attach(trainer)
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("trainer")
    return out, _train(out, QKEnergyCallback(samples=SAMPLES, name="tiny"))


def _numeric(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if pd.api.types.is_float_dtype(frame[c])]


def _same_rows(tracked: pd.DataFrame, analyzed: pd.DataFrame) -> None:
    tracked = tracked.sort_values(["layer", "head"]).reset_index(drop=True)
    analyzed = analyzed.sort_values(["layer", "head"]).reset_index(drop=True)
    assert tracked[["layer", "head"]].equals(analyzed[["layer", "head"]])
    columns = _numeric(analyzed)
    assert "symmetric_energy" in columns and "symmetric_energy_z" in columns
    assert "symmetric_energy_p_bh" in columns
    for column in columns:
        np.testing.assert_allclose(
            tracked[column].to_numpy(np.float64),
            analyzed[column].to_numpy(np.float64),
            rtol=0,
            atol=1e-9,
            equal_nan=True,
            err_msg=column,
        )
    for column in ("head_type", "reason", "stack", "n", "N"):
        assert tracked[column].tolist() == analyzed[column].tolist(), column


def test_scalars_reach_the_trainer_log_history(trained: tuple[Path, Any]) -> None:
    _, trainer = trained
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logged] == [2, 4]
    for entry in logged:
        for key in ("symmetric_energy_median", "share_above", "share_below", "symmetric_energy_z_median"):
            assert np.isfinite(entry[PREFIX + key]), key
        assert {f"{PREFIX}symmetric_energy_median/layer_{i}" for i in (0, 1)} <= set(entry)
    # attach() ran the callback before the integrations: they were handed the keys with the loss
    handed = [entry for entry in trainer.integration.seen if "loss" in entry]
    assert [PREFIX + "share_above" in entry for entry in handed] == [True, True]
    # the trainer's own log entries are left alone
    assert all(not any(k.startswith(PREFIX) for k in e) for e in trainer.state.log_history if "loss" not in e)


def test_tracked_rows_equal_analyze_of_the_checkpoint(
    trained: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = trained
    table = read_tracking(out / "qkenergy" / "heads.parquet")
    assert sorted(table["step"].unique().tolist()) == [2, 4]
    assert set(table["model"]) == {"tiny"}
    # pandas reads the folder as one table too
    assert len(pd.read_parquet(out / "qkenergy" / "heads.parquet")) == len(table) == 16
    last = table[table["step"] == STEPS]
    analyzed = tmp_path / "analyzed.parquet"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(
            ["analyze", str(out / f"checkpoint-{STEPS}"), "-o", str(analyzed), "--samples", str(SAMPLES)]
        )
    capsys.readouterr()
    assert exit_info.value.code in (0, None)
    _same_rows(last, read_table(analyzed))
    # training moved the heads: the two tracked steps differ
    first = table[table["step"] == 2]["symmetric_energy"].to_numpy()
    assert np.abs(first - last["symmetric_energy"].to_numpy()).max() > 1e-6


def test_plain_loop_tracker_gives_the_same_rows(trained: tuple[Path, Any], tmp_path: Path) -> None:
    out, _ = trained
    model = transformers.GPT2LMHeadModel.from_pretrained(out / f"checkpoint-{STEPS}")
    tracker = Tracker(model, tmp_path / "heads.parquet", samples=SAMPLES, name="tiny")
    scalars = tracker.log(STEPS)
    tracked = read_tracking(out / "qkenergy" / "heads.parquet")
    _same_rows(read_tracking(tmp_path / "heads.parquet"), tracked[tracked["step"] == STEPS])
    history = next(e for e in _history(out) if e.get("step") == STEPS and "loss" in e)
    for key, value in scalars.items():
        assert value == pytest.approx(history[key], abs=1e-12), key


def _history(out: Path) -> list[dict[str, Any]]:
    import json

    state = json.loads((out / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    return list(state["log_history"])


def test_plain_loop_with_a_state_dict_and_config(tmp_path: Path) -> None:
    model = _gpt2(seed=3)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.randint(0, VOCAB, (4, T), generator=torch.Generator().manual_seed(2))
    tracker = Tracker(model.transformer, tmp_path / "t", samples=SAMPLES, config=model.config.to_dict())
    values = []
    for step in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        values.append(tracker.log(step)[f"{PREFIX}symmetric_energy_median"])
    assert len(set(values)) == 3  # read anew at every step
    direct = Tracker(model, samples=SAMPLES).measure(2)
    _same_rows(tracker.last, direct)  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [f"step-{s:09d}.parquet" for s in range(3)]


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match="every must be an integer >= 1"):
        QKEnergyCallback(every=0)
    with pytest.raises(QKEnergyError, match="stack='encoder'.*has no such attention stack"):
        Tracker(_gpt2(), samples=SAMPLES, stack="encoder").log(0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(QKEnergyError, match="not a folder"):
        Tracker(_gpt2(), tmp_path / "file")


def test_the_report_draws_the_loss_curves_of_trainer_checkpoints(trained: tuple[Path, Any]) -> None:
    from qkenergy.figures.survey_figures import report_figures
    from qkenergy.report.page import training_losses

    out, trainer = trained
    checkpoint = str(out / f"checkpoint-{STEPS}")
    losses = training_losses(
        [{"name": "a", "path": checkpoint, "group": "tiny", "step": STEPS}, {"name": "b"}]
    )
    assert losses is not None
    expected = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    assert list(zip(losses["step"], losses["loss"], strict=True)) == expected
    assert set(losses["run"]) == {"tiny"}
    assert training_losses([{"name": "b", "path": str(out)}]) is None  # no trainer_state.json there
    heads = read_tracking(out / "qkenergy" / "heads.parquet")
    names = [f.name for f in report_figures(heads.assign(model="tiny"), pd.DataFrame(), losses=losses)]
    assert "training_loss" in names
    assert "training_loss" not in [f.name for f in report_figures(heads.assign(model="tiny"), pd.DataFrame())]


def test_every_k_steps_makes_those_steps_log(tmp_path: Path) -> None:
    trainer = _train(tmp_path, QKEnergyCallback(every=3, samples=SAMPLES, out=tmp_path / "table"))
    steps = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    assert sorted(steps) == [2, 3, 4]  # logging_steps=2, and step 3 tracked
    assert [s for s, e in steps.items() if PREFIX + "share_above" in e] == [3]
    assert sorted(read_tracking(tmp_path / "table")["step"].unique()) == [3]


def test_tracker_is_exported_lazily() -> None:
    import qkenergy

    assert qkenergy.Tracker is Tracker


def test_per_layer_scores_are_tracked_and_equal_analyze_per_layer(tmp_path: Path) -> None:
    """per_layer: the layer table of each step is analyze_model(per_layer=True)'s of the weights then."""
    from qkenergy.analysis.analyze import analyze_model

    out = tmp_path / "run"
    trainer = _train(out, QKEnergyCallback(samples=SAMPLES, name="tiny", per_layer=True))
    layers = read_tracking(out / "qkenergy" / "layers.parquet")
    assert sorted(layers["step"].unique().tolist()) == [2, 4]
    assert layers.groupby("step")["layer"].apply(list).tolist() == [[0, 1], [0, 1]]
    for column in ("symmetry_score", "directionality", "symmetric_energy_z", "directionality_z"):
        assert np.isfinite(layers[column].to_numpy(np.float64)).all(), column
    # the heads' table is the one without per_layer
    assert len(read_tracking(out / "qkenergy" / "heads.parquet")) == 16
    # the last step's rows are analyze_model's of the trained weights (same draws of the layer law)
    expected = analyze_model(trainer.model, per_layer=True, samples=SAMPLES, threads=1).layers
    last = layers[layers["step"] == STEPS].reset_index(drop=True)
    for column in ("symmetry_score", "directionality", "symmetric_energy_z", "directionality_p"):
        np.testing.assert_allclose(last[column], expected[column], rtol=0, atol=1e-9, err_msg=column)
    # the scalars reach the log history, and equal the table's
    entry = next(e for e in trainer.state.log_history if e.get("step") == STEPS and "loss" in e)
    for layer in (0, 1):
        row = last[last["layer"] == layer].iloc[0]
        assert entry[f"{PREFIX}symmetry_score/layer_{layer}"] == pytest.approx(
            row["symmetry_score"], abs=1e-12
        )
        assert entry[f"{PREFIX}directionality/layer_{layer}"] == pytest.approx(
            row["directionality"], abs=1e-12
        )


def test_layers_out_must_be_a_folder_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(QKEnergyError, match="^layers_out=.*the same folder as out"):
        Tracker(_gpt2(), tmp_path / "t", layers_out=tmp_path / "t")
    (tmp_path / "file").write_text("x")
    with pytest.raises(QKEnergyError, match="^layers_out=.*not a folder"):
        Tracker(_gpt2(), layers_out=tmp_path / "file")
    tracker = Tracker(_gpt2(), samples=SAMPLES, per_layer=True)  # in memory only
    scalars = tracker.log(0)
    assert tracker.last_layers is not None and tracker.last_layers["layer"].tolist() == [0, 1]
    assert {f"{PREFIX}symmetry_score/layer_0", f"{PREFIX}directionality/layer_1"} <= set(scalars)
