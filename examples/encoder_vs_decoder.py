"""Encoder against decoder, trained from scratch on CPU: does masked training make heads symmetric?

    python examples/encoder_vs_decoder.py --steps 1000 --out runs/evd [--symmetric-init] [--seed 0] [--learning-rate 1e-3]

Trains, with transformers' Trainer on the CPU, a BERT-style masked-language-model
encoder and a GPT-2-style causal decoder of the same size (2 layers, d = 128,
4 heads of 32, context 128, byte-level vocabulary) on the same text: the
Python sources of the standard library this interpreter runs on (the *.py
files directly in ``sysconfig.get_paths()["stdlib"]``, sorted by name,
concatenated as bytes; their count, size and sha256 are recorded). The two
runs go in parallel, one core each. ``--symmetric-init`` also trains both
models from W_Q = W_K in every head (the initialisation of Saponati et al.
2025, arXiv:2502.10927) to compare with the default initialisation; runs
already in DIR with the same settings are reused.

Writes, in DIR:

    encoder/checkpoint-STEP/, decoder/checkpoint-STEP/   Hugging Face checkpoints (safetensors) at
                                                         log-spaced steps (and *-symmetric/ runs)
    <run>/qkenergy/heads.parquet/                         the QKEnergyCallback's table of that run
    tracking.parquet                                      all runs' tracked heads: step, model, init,
                                                          run, layer, head, symmetric_energy, ..._z, ...
    survey.toml, survey/, report.html                     the checkpoints surveyed (step, group) and
                                                          qkenergy report's page (s per layer against
                                                          step, loss curves)
    encoder_vs_decoder.png                                the same two views, drawn with matplotlib
    summary.json                                          the figures printed at the end

Every tracked row at a checkpoint's step is checked against the survey of that
checkpoint (the analysis of the saved file): the script fails if they differ by
more than 1e-9.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

LAYERS, WIDTH, HEADS, CONTEXT = 2, 128, 4, 128
VOCAB, MASK, PAD = 258, 256, 257  # bytes 0-255, then [MASK] and [PAD]
BATCH, LEARNING_RATE = 16, 1e-3
LOG_EVERY = 10  # training loss and tracked heads every LOG_EVERY steps (and at every checkpoint)
SAMPLES = 2000  # null-law draws (one head shape: n = 32, N = 128)
MODELS = ("encoder", "decoder")


@dataclass(frozen=True)
class Run:
    model: str  # encoder or decoder
    init: str  # default or symmetric
    steps: int
    seed: int
    out: str
    learning_rate: float = LEARNING_RATE

    @property
    def name(self) -> str:
        return self.model if self.init == "default" else f"{self.model}-symmetric"


# ----------------------------------------------------------------------------- data


def corpus() -> tuple[bytes, dict[str, Any]]:
    """The training text: the standard library's top-level *.py files, sorted, as bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    data = b"".join(f.read_bytes() for f in files)
    return data, {
        "corpus": f"{root}/*.py",
        "python": sys.version.split()[0],
        "files": len(files),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def checkpoint_steps(steps: int) -> list[int]:
    """Log-spaced steps from 1 to ``steps``, four per decade (rounded, distinct)."""
    count = 1 + max(1, round(4 * math.log10(max(steps, 2))))
    return sorted({round(s) for s in np.geomspace(1, steps, count)} | {steps})


# ----------------------------------------------------------------------------- one run (a worker process)


def _train(run: Run) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # one core per run; the two runs share the machine's two
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from qkenergy.training import QKEnergyCallback

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # one bar per checkpoint written otherwise
    data, _ = corpus()
    tokens = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))
    chunks = tokens[: len(tokens) // CONTEXT * CONTEXT].reshape(-1, CONTEXT)

    class Chunks(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return len(chunks)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": chunks[i]}

    masking = torch.Generator().manual_seed(run.seed)

    def masked(batch: list[dict[str, Any]]) -> dict[str, Any]:
        # BERT's rule: 15% of positions predicted; of those 80% [MASK], 10% a random byte, 10% kept.
        ids = torch.stack([b["input_ids"] for b in batch])
        chosen = torch.rand(ids.shape, generator=masking) < 0.15
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        draw = torch.rand(ids.shape, generator=masking)
        ids = torch.where(chosen & (draw < 0.8), torch.full_like(ids, MASK), ids)
        swap = chosen & (draw >= 0.8) & (draw < 0.9)
        ids = torch.where(swap, torch.randint(0, 256, ids.shape, generator=masking), ids)
        return {"input_ids": ids, "labels": labels}

    def causal(batch: list[dict[str, Any]]) -> dict[str, Any]:
        ids = torch.stack([b["input_ids"] for b in batch])
        return {"input_ids": ids, "labels": ids.clone()}  # the model shifts the labels itself

    torch.manual_seed(run.seed)
    if run.model == "encoder":
        config = transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=4 * WIDTH,
            max_position_embeddings=CONTEXT,
            type_vocab_size=1,
            pad_token_id=PAD,
        )
        model: Any = transformers.BertForMaskedLM(config)
        collate = masked
    else:
        config = transformers.GPT2Config(
            vocab_size=VOCAB,
            n_embd=WIDTH,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=CONTEXT,
            bos_token_id=PAD,
            eos_token_id=PAD,
        )
        model = transformers.GPT2LMHeadModel(config)
        collate = causal
    if run.init == "symmetric":
        symmetric_init(model)

    saves = set(checkpoint_steps(run.steps))

    class LogSpacedCheckpoints(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step in saves:
                control.should_save = True
                control.should_log = True  # so the heads are tracked at every checkpoint
            return control

    out = Path(run.out) / run.name
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=run.steps,
        per_device_train_batch_size=BATCH,
        learning_rate=run.learning_rate,
        warmup_steps=min(100, run.steps // 10),
        weight_decay=0.01,
        logging_steps=LOG_EVERY,
        save_strategy="no",  # the checkpoints come from LogSpacedCheckpoints
        save_only_model=True,
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=run.seed,
        data_seed=run.seed,
    )
    tracking = QKEnergyCallback(samples=SAMPLES, seed=0, name=run.model, threads=1)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Chunks(),
        data_collator=collate,
        callbacks=[LogSpacedCheckpoints(), tracking],  # in this order: the checkpoint steps are tracked
    )
    trainer.remove_callback(transformers.PrinterCallback)  # the losses are in trainer_state.json
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    record = {**asdict(run), "seconds": seconds}
    (out / "experiment.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def symmetric_init(model: Any) -> None:
    """W_K := W_Q (and the key bias := the query bias) in every layer, so every head starts symmetric."""
    import torch

    with torch.no_grad():
        if hasattr(model, "bert"):
            for layer in model.bert.encoder.layer:
                attention = layer.attention.self
                attention.key.weight.copy_(attention.query.weight)
                attention.key.bias.copy_(attention.query.bias)
        else:
            width = model.config.n_embd
            for block in model.transformer.h:
                # GPT-2's Conv1D weight is [N, 3N]: columns q, k, v.
                block.attn.c_attn.weight[:, width : 2 * width].copy_(block.attn.c_attn.weight[:, :width])
                block.attn.c_attn.bias[width : 2 * width].copy_(block.attn.c_attn.bias[:width])


def _done(run: Run) -> bool:
    """Whether DIR already holds this run, trained with the same settings, to its last checkpoint."""
    record = Path(run.out) / run.name / "experiment.json"
    if not record.is_file():
        return False
    try:
        old = json.loads(record.read_text())
    except ValueError:
        return False
    same = all(old.get(k) == v for k, v in asdict(run).items() if k != "out")
    return same and (Path(run.out) / run.name / f"checkpoint-{run.steps}").is_dir()


# ----------------------------------------------------------------------------- after training


def losses(out: Path, runs: list[Run]) -> Any:
    """The training loss of every run at every logging step (from its last trainer_state.json)."""
    import pandas as pd

    rows = []
    for run in runs:
        state = json.loads((out / run.name / f"checkpoint-{run.steps}" / "trainer_state.json").read_text())
        for entry in state["log_history"]:
            if "loss" in entry:
                rows.append({"run": run.name, "model": run.model, "init": run.init, **entry})
    return pd.DataFrame(rows)[["run", "model", "init", "step", "loss"]]


def tracking_table(out: Path, runs: list[Run]) -> Any:
    import pandas as pd

    from qkenergy.training import read_tracking

    parts = []
    for run in runs:
        table = read_tracking(out / run.name / "qkenergy" / "heads.parquet")
        parts.append(table.assign(init=run.init, run=run.name))
    table = pd.concat(parts, ignore_index=True)
    first = ["step", "model", "init", "run", "layer", "head", "symmetric_energy", "symmetric_energy_z"]
    return table[first + [c for c in table.columns if c not in first]]


def write_manifest(out: Path, runs: list[Run]) -> Path:
    lines = []
    for run in runs:
        for step in checkpoint_steps(run.steps):
            lines += [
                "[[model]]",
                # a JSON string is a TOML basic string: quotes and backslashes in DIR are escaped
                f"source = {json.dumps(str(out / run.name / f'checkpoint-{step}'))}",
                f'name = "{run.name}-step-{step:06d}"',
                f"step = {step}",
                f'group = "{run.name}"',
                "",
            ]
    path = out / "survey.toml"
    path.write_text("\n".join(lines))
    return path


def check_against_survey(tracked: Any, survey: Path) -> dict[str, Any]:
    """Largest difference between tracked rows and the survey's analysis of the checkpoints."""
    from qkenergy import load_survey

    heads, _ = load_survey(survey)
    keys = ["group", "step", "layer", "head"]
    mine = tracked.rename(columns={"run": "group"})
    joined = heads.merge(mine, on=keys, suffixes=("_survey", "_tracked"))
    if len(joined) != len(heads):
        raise SystemExit(f"{len(heads) - len(joined)} surveyed heads have no tracked row at their step")
    worst = {}
    for column in ("symmetric_energy", "symmetric_energy_z", "symmetric_energy_p", "pairing"):
        difference = joined[f"{column}_survey"].to_numpy(float) - joined[f"{column}_tracked"].to_numpy(float)
        worst[column] = float(np.nanmax(np.abs(difference)))
    if max(worst.values()) > 1e-9:
        raise SystemExit(f"tracked rows differ from the survey of the checkpoints: {worst}")
    return {"rows": len(joined), "max_abs_difference": worst}


def split(tracked: Any, init: str) -> dict[str, Any]:
    """The encoder's median s minus the decoder's at each tracked step, in null standard deviations."""
    part = tracked[tracked["init"] == init]
    medians = part.groupby(["step", "model"])["symmetric_energy"].median().unstack("model")
    sd = float(part["symmetric_energy_null_sd"].iloc[0])  # one head shape: one null law
    gap = (medians["encoder"] - medians["decoder"]) / sd
    above = gap > 3
    # the first step from which the encoder stays more than 3 null sd above the decoder
    stays = [int(s) for s in gap.index if bool(above.loc[s:].all())]
    last = int(gap.index.max())
    layers = part[part["step"] == last].groupby(["model", "layer"])["symmetric_energy"]
    return {
        "null_mean": float(part["symmetric_energy_null_mean"].iloc[0]),
        "null_sd": sd,
        "split_from_step": stays[0] if stays else None,
        "last_step": last,
        "gap_in_null_sd_at_last_step": float(gap.loc[last]),
        "largest_gap_in_null_sd": float(gap.max()),
        "largest_gap_step": int(gap.idxmax()),
        "median_s_at_last_step": {m: float(medians.loc[last, m]) for m in MODELS},
        "range_s_at_last_step": {
            m: [
                float(part[(part["step"] == last) & (part["model"] == m)]["symmetric_energy"].min()),
                float(part[(part["step"] == last) & (part["model"] == m)]["symmetric_energy"].max()),
            ]
            for m in MODELS
        },
        "median_s_per_layer_at_last_step": {
            f"{m} layer {l}": float(v) for (m, l), v in layers.median().items()
        },
        "median_z_at_last_step": {
            m: float(part[(part["step"] == last) & (part["model"] == m)]["symmetric_energy_z"].median())
            for m in MODELS
        },
    }


def figure(tracked: Any, loss: Any, path: Path) -> None:
    """s per layer against step (one panel per model) and the loss curves, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    axes[1].sharey(axes[0])  # the two models' s on one scale
    styles = {"default": "-", "symmetric": "--"}
    for ax, model in zip(axes[:2], MODELS, strict=True):
        part = tracked[tracked["model"] == model]
        for (init, layer), line in part.groupby(["init", "layer"]):
            medians = line.groupby("step")["symmetric_energy"].median()
            ax.plot(
                medians.index,
                medians.to_numpy(),
                styles[init],
                color=f"C{layer}",
                label=f"layer {layer}, {init} init",
            )
        mean = float(part["symmetric_energy_null_mean"].iloc[0])
        sd = float(part["symmetric_energy_null_sd"].iloc[0])
        ax.axhspan(mean - 2 * sd, mean + 2 * sd, color="0.85", label="null mean ± 2 sd")
        ax.axhline(mean, color="k", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("median s over the layer's heads")
        ax.set_title(f"{model} ({'masked LM' if model == 'encoder' else 'causal LM'})")
        ax.legend(fontsize=8)
    for (run, init, model), line in loss.groupby(["run", "init", "model"]):
        axes[2].plot(
            line["step"], line["loss"], styles[init], color="C0" if model == "encoder" else "C3", label=run
        )
    axes[2].set_xscale("log")
    axes[2].set_xlabel("training step")
    axes[2].set_ylabel("training loss (nats per predicted byte)")
    axes[2].set_title("loss")
    axes[2].legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def results_markdown(summary: dict[str, Any]) -> str:
    """The result table that docs/training.md shows (a test compares it with the recorded summary)."""
    lines = [
        "| init | model | loss, last 100 steps | median s at the last step (min-max) | median z | "
        "encoder - decoder (null sd) | > 3 sd from step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for init, part in summary["split"].items():
        for model in MODELS:
            run = model if init == "default" else f"{model}-symmetric"
            low, high = part["range_s_at_last_step"][model]
            gap = f"{part['gap_in_null_sd_at_last_step']:+.1f}" if model == "encoder" else ""
            since = str(part["split_from_step"] or "never") if model == "encoder" else ""
            lines.append(
                f"| {init} | {model} | {summary['loss_last_100_steps'][run]:.3f} | "
                f"{part['median_s_at_last_step'][model]:.4f} ({low:.3f}-{high:.3f}) | "
                f"{part['median_z_at_last_step'][model]:+.1f} | {gap} | {since} |"
            )
    part = next(iter(summary["split"].values()))
    lines.append("")
    lines.append(
        f"Last step {part['last_step']}; the null law of a random head of this shape (n = 32, N = 128) has "
        f"mean {part['null_mean']:.4f} and sd {part['null_sd']:.4f}. Largest encoder - decoder gap of the "
        "median s over the tracked steps: "
        + "; ".join(
            f"{init} init {p['largest_gap_in_null_sd']:+.1f} sd at step {p['largest_gap_step']}"
            for init, p in summary["split"].items()
        )
        + "."
    )
    return "\n".join(lines) + "\n"


def _qkenergy(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "qkenergy", *args], check=True)


def _browser() -> bool:
    import shutil

    return bool(os.environ.get("BROWSER_PATH")) or any(
        shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps per run (default 1000)")
    parser.add_argument("--out", type=Path, required=True, help="output folder DIR")
    parser.add_argument("--symmetric-init", action="store_true", help="also train from W_Q = W_K")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, the data order, the masks")
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=LEARNING_RATE,
        help=f"AdamW's peak rate (default {LEARNING_RATE})",
    )
    options = parser.parse_args(argv)
    if options.steps < 2:
        parser.error("--steps must be at least 2")
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    inits = ["default", "symmetric"] if options.symmetric_init else ["default"]
    runs = [
        Run(m, i, options.steps, options.seed, str(out), options.learning_rate) for i in inits for m in MODELS
    ]
    todo = [r for r in runs if not _done(r)]
    _, text = corpus()
    print(f"corpus: {text['files']} files, {text['bytes']:,} bytes, sha256 {text['sha256'][:16]}...")
    start = time.perf_counter()
    if todo:
        print(f"training {', '.join(r.name for r in todo)} for {options.steps} steps, two runs at a time")
        with ProcessPoolExecutor(min(2, len(todo)), mp_context=get_context("spawn")) as pool:
            for record in pool.map(_train, todo):
                print(f"  {Run(**{k: record[k] for k in asdict(runs[0])}).name}: {record['seconds']:.1f} s")
    trained = time.perf_counter() - start

    tracked = tracking_table(out, runs)
    tracked.to_parquet(out / "tracking.parquet", index=False)
    loss = losses(out, runs)
    manifest = write_manifest(out, runs)
    _qkenergy("survey", str(manifest), "-o", str(out / "survey"), "--samples", str(SAMPLES), "--seed", "0")
    report = ["report", str(out / "survey"), "-o", str(out / "report.html")]
    _qkenergy(*report, *([] if _browser() else ["--no-static"]))
    figure(tracked, loss, out / "encoder_vs_decoder.png")
    check = check_against_survey(tracked, out / "survey")

    # the mean logged loss over the last 100 steps: one 10-step value is noisy
    tail = loss[loss["step"] > options.steps - 100].groupby("run")["loss"].mean()
    seconds = {r.name: json.loads((out / r.name / "experiment.json").read_text())["seconds"] for r in runs}
    summary = {
        "command": " ".join(["python", "examples/encoder_vs_decoder.py", *(argv or sys.argv[1:])]),
        "data": text,
        "models": {"layers": LAYERS, "width": WIDTH, "heads": HEADS, "context": CONTEXT, "batch": BATCH},
        "steps": options.steps,
        "seed": options.seed,
        "learning_rate": options.learning_rate,
        "run_seconds": seconds,  # each run's Trainer.train(), two runs at a time on the two cores
        "training_seconds_this_call": trained,
        "total_seconds_this_call": time.perf_counter() - start,
        "checkpoint_steps": checkpoint_steps(options.steps),
        "loss_last_100_steps": {str(k): float(v) for k, v in tail.items()},
        "split": {init: split(tracked, init) for init in inits},
        "tracked_equals_survey": check,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(results_markdown(summary))
    for init in inits:
        part = summary["split"][init]
        medians = part["median_s_at_last_step"]
        print(
            f"{init} init, step {part['last_step']}: median s encoder {medians['encoder']:.4f}, decoder "
            f"{medians['decoder']:.4f} (null {part['null_mean']:.4f} ± {part['null_sd']:.4f}); gap "
            f"{part['gap_in_null_sd_at_last_step']:.1f} null sd; more than 3 sd from step "
            f"{part['split_from_step']}"
        )
    print(
        "loss over the last 100 steps: "
        + ", ".join(f"{k} {v:.3f}" for k, v in summary["loss_last_100_steps"].items())
    )
    print(
        f"tracked rows = survey of the checkpoints ({check['rows']} rows, max |difference| "
        f"{max(check['max_abs_difference'].values()):.1e}); report: {out / 'report.html'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
