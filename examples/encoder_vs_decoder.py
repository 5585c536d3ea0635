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

The sweep: seeds, a factor study and Saponati et al.'s per-layer scores, as Dask tasks:

    python examples/encoder_vs_decoder.py --sweep --out DIR [--preset full|quick] [--seeds 5]
        [--scheduler ADDRESS | --workers K] [--train-only] [--record docs]

trains every setting of the design (``--preset full``, the default: the models
above for 1000 steps; the default set-up, then one factor at a time: constant
rate, peak rate, weight decay, mask rate, batch, width, heads, the text, and the
prototype's set-up, a constant rate without weight decay, for 5000 steps, whose
prefixes are the steps factor) with seeds 0 .. K-1, each run a Dask task on a
LocalCluster of ``--workers`` single-threaded workers (default 1) or on the
scheduler at ``--scheduler`` (the cluster helper of ``qkenergy survey``). Each run
writes DIR/runs/<model>-seed<k>-<digest>/ (heads.parquet/ and layers.parquet/
from the QKEnergyCallback with ``per_layer=True``: the heads, and each layer's
symmetry and directionality scores, at the same steps; run.json written last) and the client
records every run in DIR/ledger.sqlite. A rerun skips the finished runs; a
killed worker loses only the run it was training, which Dask gives to another
worker (or the next rerun trains). Then it writes DIR/summary.json (per setting
and model the median s over heads of every seed, the mean over seeds with a
bootstrap 95 % interval, the encoder - decoder difference in s and in null sd),
DIR/sweep_factors.png and DIR/sweep_training.png, and prints the table.
``--preset quick`` is the design cut to what a shared 2-core machine trains in
about an hour (width 64, context 64, 400 steps; the steps factor read from the
prototype's runs at 100, 200 and 400 steps). ``--preset long`` answers what the
quick sweep left open: the quick model for 1000 steps, the prototype's set-up
run to 5000 steps (read at 250, 500, 1000 and 5000), and the prototype's size
(width 128, context 128) under the prototype's set-up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import socket
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


CORPORA = ("stdlib", "docs")


def corpus(name: str = "stdlib") -> tuple[bytes, dict[str, Any]]:
    """A training text, as bytes, with its provenance (size and sha256).

    ``stdlib``: the standard library's top-level *.py files, sorted by name.
    ``docs``: the Python reference documentation that every Python ships as
    ``pydoc_data.topics`` (prose with code examples; the topics sorted by name).
    """
    if name == "docs":
        from pydoc_data.topics import topics

        data = "".join(topics[k] for k in sorted(topics)).encode("utf-8")
        return data, {
            "corpus": "pydoc_data.topics (the Python reference documentation)",
            "python": sys.version.split()[0],
            "topics": len(topics),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    if name != "stdlib":
        raise ValueError(f"corpus {name!r}: expected one of {', '.join(CORPORA)}")
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


def _dataset(name: str, context: int) -> Any:
    """The corpus cut into sequences of ``context`` bytes, as a torch Dataset of ``input_ids``."""
    import torch

    data, _ = corpus(name)
    tokens = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))
    chunks = tokens[: len(tokens) // context * context].reshape(-1, context)

    class Chunks(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return len(chunks)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": chunks[i]}

    return Chunks()


def _collator(model: str, masking: Any, mask_rate: float = 0.15) -> Any:
    """The batches of one objective: BERT's masking for the encoder, the sequence itself for the decoder."""
    import torch

    def masked(batch: list[dict[str, Any]]) -> dict[str, Any]:
        # BERT's rule: mask_rate of the positions predicted; of those 80% [MASK], 10% a random byte, 10% kept.
        ids = torch.stack([b["input_ids"] for b in batch])
        chosen = torch.rand(ids.shape, generator=masking) < mask_rate
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        draw = torch.rand(ids.shape, generator=masking)
        ids = torch.where(chosen & (draw < 0.8), torch.full_like(ids, MASK), ids)
        swap = chosen & (draw >= 0.8) & (draw < 0.9)
        ids = torch.where(swap, torch.randint(0, 256, ids.shape, generator=masking), ids)
        return {"input_ids": ids, "labels": labels}

    def causal(batch: list[dict[str, Any]]) -> dict[str, Any]:
        ids = torch.stack([b["input_ids"] for b in batch])
        return {"input_ids": ids, "labels": ids.clone()}  # the model shifts the labels itself

    return masked if model == "encoder" else causal


def build_model(model: str, width: int, heads: int, layers: int, context: int) -> Any:
    """A BERT-style masked-LM encoder or a GPT-2-style decoder over the byte vocabulary."""
    import transformers

    if model == "encoder":
        config = transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=width,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=4 * width,
            max_position_embeddings=context,
            type_vocab_size=1,
            pad_token_id=PAD,
        )
        return transformers.BertForMaskedLM(config)
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=width,
        n_layer=layers,
        n_head=heads,
        n_positions=context,
        bos_token_id=PAD,
        eos_token_id=PAD,
    )
    return transformers.GPT2LMHeadModel(config)


def _quiet_transformers() -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # one bar per checkpoint written otherwise
    return transformers


def _train(run: Run) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # one core per run; the two runs share the machine's two
    transformers = _quiet_transformers()
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from qkenergy.training import QKEnergyCallback

    dataset = _dataset("stdlib", CONTEXT)
    masking = torch.Generator().manual_seed(run.seed)
    torch.manual_seed(run.seed)
    model = build_model(run.model, WIDTH, HEADS, LAYERS, CONTEXT)
    collate = _collator(run.model, masking)
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
        train_dataset=dataset,
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


# ----------------------------------------------------------------------------- the sweep: seeds and factors


@dataclass(frozen=True)
class Config:
    """One training run of the sweep: everything that changes its result (its key is their digest)."""

    model: str  # encoder or decoder
    seed: int
    steps: int
    width: int = WIDTH
    heads: int = HEADS
    layers: int = LAYERS
    context: int = CONTEXT
    batch: int = BATCH
    learning_rate: float = LEARNING_RATE
    schedule: str = "linear"  # the Trainer's warm-up then linear decay, or "constant" (no warm-up)
    weight_decay: float = 0.01
    mask_rate: float = 0.15  # the encoder's; the decoder's runs ignore it (set to 0.15 for them)
    corpus: str = "stdlib"
    track_every: int = LOG_EVERY

    @property
    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.model}-seed{self.seed}-{digest}"


@dataclass(frozen=True)
class Design:
    """The sweep's default set-up and, per factor, the levels tried one at a time from it."""

    steps: int  # every setting is compared at this step
    long_steps: int  # the prototype's runs (constant rate) go on to here: the steps factor
    width: int
    heads: int
    context: int
    batch: int
    track_every: int
    levels: dict[str, list[tuple[str, dict[str, Any]]]]

    def default(self, model: str, seed: int) -> Config:
        return Config(
            model,
            seed,
            self.steps,
            width=self.width,
            heads=self.heads,
            context=self.context,
            batch=self.batch,
            track_every=self.track_every,
        )


def _width_levels(width: int, heads: int, factors: tuple[int, ...]) -> list[tuple[str, dict[str, Any]]]:
    # the width scaled with the head count, so that the heads keep their size n
    return [(f"{width * f // 2}", {"width": width * f // 2, "heads": heads * f // 2}) for f in factors]


def design(preset: str) -> Design:
    """``full``: the issue's design (1000 steps of the shipped models, 5000 for the prototype's set-up);
    ``quick``: a smaller model, fewer steps and fewer levels that a shared 2-core machine runs in an hour.
    """
    if preset == "full":
        width, heads = WIDTH, HEADS
        return Design(
            steps=1000,
            long_steps=5000,
            width=width,
            heads=heads,
            context=CONTEXT,
            batch=BATCH,
            track_every=LOG_EVERY,
            levels={
                "schedule": [("constant", {"schedule": "constant"})],
                "learning rate": [("3e-4", {"learning_rate": 3e-4}), ("3e-3", {"learning_rate": 3e-3})],
                "weight decay": [("0", {"weight_decay": 0.0}), ("0.1", {"weight_decay": 0.1})],
                "mask rate": [("0.05", {"mask_rate": 0.05}), ("0.3", {"mask_rate": 0.3})],
                "batch": [("8", {"batch": 8}), ("32", {"batch": 32})],
                "width": _width_levels(width, heads, (1, 4)),
                "heads": [("2", {"heads": 2}), ("8", {"heads": 8})],
                "text": [("docs", {"corpus": "docs"})],
                "prototype": [("constant, wd 0", {"schedule": "constant", "weight_decay": 0.0})],
            },
        )
    if preset == "quick":
        width, heads = 64, 4
        return Design(
            steps=400,
            long_steps=400,
            width=width,
            heads=heads,
            context=64,
            batch=16,
            track_every=20,
            levels={
                "schedule": [("constant", {"schedule": "constant"})],
                "learning rate": [("3e-3", {"learning_rate": 3e-3})],
                "weight decay": [("0", {"weight_decay": 0.0}), ("0.1", {"weight_decay": 0.1})],
                "mask rate": [("0.3", {"mask_rate": 0.3})],
                "batch": [("8", {"batch": 8})],
                "width": _width_levels(width, heads, (1,)),
                "heads": [("2", {"heads": 2})],
                "text": [("docs", {"corpus": "docs"})],
                "prototype": [("constant, wd 0", {"schedule": "constant", "weight_decay": 0.0})],
            },
        )
    if preset == "long":
        # the quick model run long, and the prototype's size: the two questions the quick sweep left open
        prototype_size = {"width": WIDTH, "heads": HEADS, "context": CONTEXT}
        return Design(
            steps=1000,
            long_steps=5000,
            width=64,
            heads=4,
            context=64,
            batch=16,
            track_every=100,
            levels={
                "prototype": [("constant, wd 0", {"schedule": "constant", "weight_decay": 0.0})],
                # the prototype's size under the prototype's set-up: against "prototype" at 1000 steps it
                # isolates the size (the Trainer's set-up at this size would double the sweep's cost)
                "size": [
                    (
                        f"{WIDTH}, constant, wd 0",
                        {**prototype_size, "schedule": "constant", "weight_decay": 0.0},
                    ),
                ],
            },
        )
    if preset == "tiny":  # the tests' sweep: seconds
        return Design(
            steps=6,
            long_steps=8,
            width=16,
            heads=2,
            context=16,
            batch=2,
            track_every=2,
            levels={
                "mask rate": [("0.3", {"mask_rate": 0.3})],
                "prototype": [("constant, wd 0", {"schedule": "constant", "weight_decay": 0.0})],
            },
        )
    raise ValueError(f"preset {preset!r}: expected full, quick, long or tiny")


FIRST = ("default", "prototype", "schedule constant", "weight decay 0", "learning rate 3e-3", "size")
"""The settings trained first: where the Trainer's set-up and the prototype's differ, and the peak rate."""

DEFAULT_LEVELS = {
    "schedule": "linear",
    "learning rate": "1e-3",
    "weight decay": "0.01",
    "mask rate": "0.15",
    "batch": "",
    "width": "",
    "heads": "",
    "text": "stdlib",
    "prototype": "Trainer",
    "size": "",
}


REFERENCE = {"size": "prototype"}
"""Factors varied from another setting than the default: the size is run in the prototype's set-up."""


def plan(d: Design, seeds: list[int]) -> list[dict[str, Any]]:
    """Every (factor, level, model, seed) of the sweep with its Config; ``default`` first.

    A setting that leaves a model's run unchanged (the mask rate for the decoder)
    points at the default run: the same Config, trained once.
    """
    rows = []
    settings: list[tuple[str, str, dict[str, Any]]] = [("default", "default", {})]
    settings += [(f, label, o) for f, levels in d.levels.items() for label, o in levels]
    for factor, label, overrides in settings:
        for seed in seeds:
            for model in MODELS:
                base = d.default(model, seed)
                changes = {
                    k: v for k, v in overrides.items() if not (k == "mask_rate" and model == "decoder")
                }
                if factor == "prototype":
                    # at a constant rate the first t steps of a run are the run of t steps (same data
                    # order, same masks): the prototype's runs, read at every tracked step up to
                    # long_steps, are the steps factor
                    changes["steps"] = d.long_steps
                config = Config(**{**asdict(base), **changes})
                rows.append(
                    {"factor": factor, "level": label, "model": model, "seed": seed, "config": config}
                )
    return rows


def run_folder(out: Path, config: Config) -> Path:
    return out / "runs" / config.key


def finished_record(folder: Path, config: Config) -> dict[str, Any] | None:
    """The run.json in ``folder`` if it is complete (it is written last) and of this Config, else None."""
    try:
        record = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("config") == asdict(config) else None


def finished(out: Path, config: Config) -> bool:
    """Whether the run is on disk, complete and of this Config."""
    return finished_record(run_folder(out, config), config) is not None


def train_config(config: Config, folder: str) -> dict[str, Any]:
    """Train one run of the sweep (a Dask task): heads tracked, per-layer scores, losses; run.json last.

    A run already finished returns its run.json untrained: Dask computes a task again when the worker
    holding its result dies before the client has taken it, and that must not cost the run again.
    """
    done = finished_record(Path(folder), config)
    if done is not None:
        return done
    import shutil

    import torch

    torch.set_num_threads(1)
    transformers = _quiet_transformers()
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from qkenergy.training import QKEnergyCallback

    out = Path(folder)
    if out.exists():  # a run interrupted earlier (its worker killed): start it afresh
        shutil.rmtree(out)
    out.mkdir(parents=True)
    dataset = _dataset(config.corpus, config.context)
    masking = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    model = build_model(config.model, config.width, config.heads, config.layers, config.context)
    collate = _collator(config.model, masking, config.mask_rate)
    early = set(checkpoint_steps(config.steps))  # the first steps, log-spaced, where s moves fastest

    class Track(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step in early:
                control.should_log = True
            return control

    args = TrainingArguments(
        output_dir=str(out / "trainer"),
        max_steps=config.steps,
        per_device_train_batch_size=config.batch,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.schedule,
        warmup_steps=min(100, config.steps // 10) if config.schedule == "linear" else 0,
        weight_decay=config.weight_decay,
        logging_steps=config.track_every,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=config.seed,
        data_seed=config.seed,
    )
    # the heads, and Saponati et al.'s scores of each layer's whole form, at the same steps
    tracking = QKEnergyCallback(
        samples=SAMPLES,
        seed=0,
        name=config.model,
        threads=1,
        out=out / "heads.parquet",
        layers_out=out / "layers.parquet",
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=collate,
        callbacks=[Track(), tracking],
    )
    trainer.remove_callback(transformers.PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    layers = tracking.tracker.last_layers  # judged against the Gaussian law of a layer of this shape
    record = {
        "config": asdict(config),
        "seconds": seconds,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loss": [[e["step"], e["loss"]] for e in trainer.state.log_history if "loss" in e],
        "layer_null": {
            name: {
                "mean": float(layers[f"{name}_null_mean"].iloc[0]),
                "sd": float(layers[f"{name}_null_sd"].iloc[0]),
            }
            for name in ("symmetric_energy", "directionality")
        },
    }
    shutil.rmtree(out / "trainer", ignore_errors=True)
    temporary = out / ".run.json"
    temporary.write_text(json.dumps(record, indent=1) + "\n")
    temporary.replace(out / "run.json")  # written last, atomically: the run counts as finished
    return record


LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    seed INTEGER NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    finished TEXT,
    seconds REAL,
    error TEXT
);
"""


def _ledger(out: Path) -> Any:
    """OUT/ledger.sqlite: every run's state and attempts; only the client writes it."""
    import sqlite3

    ledger = sqlite3.connect(out / "ledger.sqlite", timeout=5.0)
    ledger.executescript(LEDGER_SCHEMA)
    return ledger


def run_sweep(
    out: Path, configs: list[Config], scheduler: str | None = None, workers: int | None = 1
) -> dict[str, Any]:
    """Train the configs not finished in OUT as Dask tasks; record each in the ledger as it ends.

    A rerun skips the finished runs. Each run is its own task writing its own
    folder, and counts as finished only once its run.json is written: a worker
    killed mid-run loses that run alone, which Dask gives to another worker
    (the finished runs whose results it held come back from their run.json).
    """
    from distributed import as_completed

    from qkenergy.surveys.cluster import dask_client

    unique = list(dict.fromkeys(configs))
    todo = [c for c in unique if not finished(out, c)]
    ledger = _ledger(out)
    with ledger:
        for c in unique:
            status = "pending" if c in todo else "done"
            ledger.execute(
                "INSERT INTO runs (key, model, seed, config, status) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET status = CASE WHEN status = 'done' AND ? = 'done' "
                "THEN 'done' ELSE excluded.status END",
                (c.key, c.model, c.seed, json.dumps(asdict(c), sort_keys=True), status, status),
            )
    print(f"{len(unique)} runs: {len(unique) - len(todo)} finished before, {len(todo)} to train", flush=True)
    counts = {"runs": len(unique), "skipped": len(unique) - len(todo), "trained": 0, "failed": 0}
    if not todo:
        return counts
    with dask_client(scheduler, workers) as (client, where):
        print(f"on {where}", flush=True)
        futures = {
            client.submit(
                train_config,
                c,
                str(run_folder(out, c)),
                key=f"evd-{c.key}",
                priority=len(todo) - i,
                pure=False,
            ): c
            for i, c in enumerate(todo)
        }
        for future in as_completed(futures):
            c = futures.pop(future)  # released: a worker need not hold a result the client has taken
            try:
                record = future.result()
            except Exception as error:  # one failed run must not stop the others
                counts["failed"] += 1
                with ledger:
                    ledger.execute(
                        "UPDATE runs SET status = 'failed', attempts = attempts + 1, error = ? WHERE key = ?",
                        (f"{type(error).__name__}: {error}", c.key),
                    )
                print(f"  {c.key} failed: {type(error).__name__}: {error}", flush=True)
                continue
            counts["trained"] += 1
            with ledger:
                ledger.execute(
                    "UPDATE runs SET status = 'done', attempts = attempts + 1, worker = ?, finished = ?, "
                    "seconds = ?, error = NULL WHERE key = ?",
                    (record["worker"], record["finished"], record["seconds"], c.key),
                )
            print(
                f"  [{counts['trained'] + counts['failed']}/{len(todo)}] {c.key} ({c.steps} steps): "
                f"{record['seconds']:.1f} s",
                flush=True,
            )
    ledger.close()
    return counts


# ----------------------------------------------------------------------------- the sweep's summary

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def bootstrap_interval(
    a: Any,
    b: Any = None,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> dict[str, float]:
    """Mean of ``a`` (minus mean of ``b``) with a percentile bootstrap interval over the seeds.

    ``a`` and ``b`` are independent samples (one value per seed; the encoder's
    seed k and the decoder's seed k share nothing), so each is resampled on its
    own. A fixed seed makes the interval reproducible. With one value per
    sample the interval is the point itself: nothing to resample.
    """
    a = np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    estimate = float(a.mean())
    if b is not None:
        b = np.asarray(b, dtype=np.float64)
        draws = draws - b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
        estimate -= float(b.mean())
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return {"estimate": estimate, "low": float(low), "high": float(high)}


def collect(out: Path, configs: list[Config]) -> dict[str, Any]:
    """The finished runs' tracked heads (median s over heads per step), layer scores and losses."""
    import pandas as pd

    from qkenergy.training import read_tracking

    medians, layers, records = [], [], {}
    for config in dict.fromkeys(configs):
        if not finished(out, config):
            continue
        folder = run_folder(out, config)
        heads = read_tracking(folder / "heads.parquet")
        step = heads.groupby("step")
        medians.append(
            pd.DataFrame(
                {
                    "median_s": step["symmetric_energy"].median(),
                    "median_z": step["symmetric_energy_z"].median(),
                    "null_mean": step["symmetric_energy_null_mean"].first(),
                    "null_sd": step["symmetric_energy_null_sd"].first(),
                }
            )
            .reset_index()
            .assign(key=config.key)
        )
        scores = folder / "layers.parquet"  # a single file in runs trained before the callback tracked layers
        scores_table = read_tracking(scores) if scores.is_dir() else pd.read_parquet(scores)
        layers.append(scores_table.assign(key=config.key))
        records[config.key] = json.loads((folder / "run.json").read_text())
    return {
        "medians": pd.concat(medians, ignore_index=True) if medians else None,
        "layers": pd.concat(layers, ignore_index=True) if layers else None,
        "records": records,
    }


def _tail_loss(record: dict[str, Any], step: int) -> float:
    """Mean logged loss over the last tenth of the steps up to ``step``."""
    values = [loss for s, loss in record["loss"] if step - max(step // 10, 1) < s <= step]
    return float(np.mean(values)) if values else math.nan


def _setting(
    factor: str, level: str, step: int, runs: dict[str, list[Config]], data: dict[str, Any]
) -> dict[str, Any] | None:
    """One setting at one step: per-seed medians, their means and the encoder - decoder difference."""
    table = data["medians"]
    per_model: dict[str, dict[int, float]] = {}
    null: tuple[float, float] | None = None
    losses: dict[str, float] = {}
    for model in MODELS:
        values = {}
        for config in runs[model]:
            rows = table[(table["key"] == config.key) & (table["step"] == step)]
            if len(rows):
                values[config.seed] = float(rows["median_s"].iloc[0])
                null = (float(rows["null_mean"].iloc[0]), float(rows["null_sd"].iloc[0]))
        per_model[model] = values
        tails = [_tail_loss(data["records"][c.key], step) for c in runs[model] if c.key in data["records"]]
        losses[model] = float(np.mean(tails)) if tails else math.nan
    if null is None or not all(per_model.values()):
        return None
    mean, sd = null
    encoder, decoder = (list(per_model[m].values()) for m in MODELS)
    difference = bootstrap_interval(encoder, decoder)
    return {
        "factor": factor,
        "level": level,
        "step": step,
        "seeds": {m: sorted(per_model[m]) for m in MODELS},
        "median_s": {m: [per_model[m][k] for k in sorted(per_model[m])] for m in MODELS},
        "null_mean": mean,
        "null_sd": sd,
        "mean_median_s": {m: bootstrap_interval(list(per_model[m].values())) for m in MODELS},
        "difference_s": difference,
        "difference_null_sd": {k: v / sd for k, v in difference.items()},
        "loss": losses,
    }


def analyse(out: Path, d: Design, rows: list[dict[str, Any]], preset: str) -> dict[str, Any]:
    """The sweep's summary from every finished run in OUT (a partial sweep gives a partial summary)."""
    configs = [r["config"] for r in rows]
    data = collect(out, configs)
    if data["medians"] is None:
        raise SystemExit(f"{out}: no finished run to summarise")
    groups: dict[tuple[str, str], dict[str, list[Config]]] = {}
    for r in rows:
        groups.setdefault((r["factor"], r["level"]), {m: [] for m in MODELS})[r["model"]].append(r["config"])
    settings = []
    for (factor, level), runs in groups.items():
        entry = _setting(factor, level, d.steps, runs, data)
        if entry is not None:
            settings.append(entry)
    # the steps factor: the prototype's runs (constant rate) read at fewer and more steps
    prototype = next(((f, lv) for f, lv in groups if f == "prototype"), None)
    if prototype is not None:
        every = d.track_every
        for step in sorted(
            {d.steps // 4 // every * every, d.steps // 2 // every * every, d.steps, d.long_steps}
        ):
            entry = _setting("steps", str(step), step, groups[prototype], data)
            if entry is not None:
                settings.append(entry)
    trajectories = {}
    table = data["medians"]
    for (factor, level), runs in groups.items():
        if factor not in ("default", "prototype", "schedule"):
            continue
        steps = sorted(set(table[table["key"].isin([c.key for c in runs["encoder"]])]["step"]))
        by_step = [_setting(factor, level, int(s), runs, data) for s in steps]
        kept = [e for e in by_step if e is not None]
        trajectories[f"{factor}: {level}"] = {
            "step": [e["step"] for e in kept],
            "median_s": {m: [e["median_s"][m] for e in kept] for m in MODELS},
            "difference_s": [e["difference_s"] for e in kept],
            "difference_null_sd": [e["difference_null_sd"] for e in kept],
        }
    layer_scores = _layer_scores(groups, data)
    _, stdlib = corpus("stdlib")
    _, docs = corpus("docs")
    seconds = [r["seconds"] for r in data["records"].values()]
    finished_at = [r["finished"] for r in data["records"].values()]
    return {
        "preset": preset,
        "design": {k: v for k, v in asdict(d).items() if k != "levels"},
        "levels": {f: [label for label, _ in levels] for f, levels in d.levels.items()},
        "default_levels": DEFAULT_LEVELS,
        "data": {"stdlib": stdlib, "docs": docs},
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "level": 0.95},
        "runs_finished": len(data["records"]),
        "runs_planned": len(dict.fromkeys(configs)),
        "run_seconds": {"sum": float(np.sum(seconds)), "median": float(np.median(seconds))},
        "finished_between": [min(finished_at), max(finished_at)],
        "settings": settings,
        "trajectories": trajectories,
        "layer_scores": layer_scores,
    }


def _layer_scores(
    groups: dict[tuple[str, str], dict[str, list[Config]]], data: dict[str, Any]
) -> dict[str, Any]:
    """Saponati et al.'s per-layer scores against step, mean over seeds, in the default and prototype runs."""
    table = data["layers"]
    out: dict[str, Any] = {}
    for (factor, level), runs in groups.items():
        if factor not in ("default", "prototype"):
            continue
        entry: dict[str, Any] = {}
        for model in MODELS:
            keys = [c.key for c in runs[model] if c.key in data["records"]]
            if not keys:
                continue
            part = table[table["key"].isin(keys)]
            means = part.groupby(["layer", "step"])[["symmetry_score", "directionality"]].mean().reset_index()
            entry[model] = {
                "seeds": len(keys),
                "layer_null": data["records"][keys[0]]["layer_null"],
                "layers": {
                    str(layer): {
                        "step": [int(s) for s in rows["step"]],
                        "symmetry_score": [float(v) for v in rows["symmetry_score"]],
                        "directionality": [float(v) for v in rows["directionality"]],
                    }
                    for layer, rows in means.groupby("layer")
                },
            }
        out[f"{factor}: {level}"] = entry
    return out


def _interval(value: dict[str, float], digits: int, sign: bool = False, interval: bool = True) -> str:
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    if not interval:  # one seed: nothing to resample
        return f"{f.format(value['estimate'])} (one seed)"
    return f"{f.format(value['estimate'])} [{f.format(value['low'])}, {f.format(value['high'])}]"


def sweep_markdown(summary: dict[str, Any]) -> str:
    """The sweep's table (docs/training.md and README show it; a test compares it with the record)."""
    design = summary["design"]
    lines = [
        "| factor | level | seeds | step | encoder median s | decoder median s | encoder - decoder (s) | "
        "encoder - decoder (null sd) | loss encoder / decoder |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in summary["settings"]:
        level = e["level"] if e["factor"] != "default" else "default"
        counts = [len(e["seeds"][m]) for m in MODELS]
        seeds, both = "/".join(map(str, counts)), min(counts) > 1
        encoder, decoder = (
            _interval(e["mean_median_s"][m], 4, interval=len(e["seeds"][m]) > 1) for m in MODELS
        )
        lines.append(
            f"| {e['factor']} | {level} | {seeds} | {e['step']} | {encoder} | {decoder} | "
            f"{_interval(e['difference_s'], 4, True, both)} | {_interval(e['difference_null_sd'], 1, True, both)} | "
            f"{e['loss']['encoder']:.2f} / {e['loss']['decoder']:.2f} |"
        )
    first = summary["settings"][0]
    lines += [
        "",
        f"Preset `{summary['preset']}`: {LAYERS} layers, width "
        f"{design['width']}, {design['heads']} heads, context {design['context']}, batch {design['batch']}, "
        f"{design['steps']} steps; the steps factor is the prototype's runs (constant rate, no weight decay, "
        f"{design['long_steps']} steps) read along the way, where a constant-rate run's first t steps are the "
        "t-step run; "
        f"{summary['runs_finished']} of {summary['runs_planned']} runs finished. Each s is the mean over seeds of the "
        "median s over a run's heads, with a percentile bootstrap 95 % interval over seeds "
        f"({summary['bootstrap']['resamples']:,} resamples, seed {summary['bootstrap']['seed']}); the null law of "
        f"the default's heads has mean {first['null_mean']:.4f} and sd {first['null_sd']:.4f}. The runs' "
        f"Trainer.train() took {summary['run_seconds']['sum'] / 60:.0f} min in all (median "
        f"{summary['run_seconds']['median']:.0f} s a run); the runs finished between "
        f"{summary['finished_between'][0]} and {summary['finished_between'][1]}.",
        "",
        _verdicts(summary["settings"]),
    ]
    return "\n".join(lines) + "\n"


def _verdicts(settings: list[dict[str, Any]]) -> str:
    """Which settings' 95 % interval of encoder - decoder lies above 0, below 0, or holds 0."""

    def name(e: dict[str, Any]) -> str:
        if e["factor"] == "default":
            return "default"
        return f"{e['factor']} ({e['level']})" if "," in e["level"] else f"{e['factor']} {e['level']}"

    def few(e: dict[str, Any]) -> bool:  # one seed on a side: no interval
        return min(len(e["seeds"][m]) for m in MODELS) < 2

    groups = {"above 0 (encoder more symmetric)": [], "below 0 (decoder more symmetric)": [], "holding 0": []}
    for e in settings:
        if few(e):
            continue
        d = e["difference_s"]
        key = (
            "above 0 (encoder more symmetric)"
            if d["low"] > 0
            else "below 0 (decoder more symmetric)"
            if d["high"] < 0
            else "holding 0"
        )
        groups[key].append(name(e))
    parts = [f"{k}: {', '.join(v) if v else 'none'}" for k, v in groups.items()]
    return "Encoder - decoder interval " + "; ".join(parts) + "."


def sweep_figures(out: Path, summary: dict[str, Any]) -> None:
    """sweep_factors.png (the split against each factor) and sweep_training.png (s and the layer scores)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = summary["settings"]
    default = next(e for e in settings if e["factor"] == "default")
    factors = list(dict.fromkeys(e["factor"] for e in settings if e["factor"] != "default"))
    columns = min(4, max(1, len(factors)))
    rows = max(1, math.ceil(len(factors) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), sharey=True, squeeze=False)
    for ax, factor in zip(axes.flat, factors, strict=False):
        entries = [e for e in settings if e["factor"] == factor]
        if factor in REFERENCE:  # run under another setting's set-up: that setting is its reference
            reference = next(e for e in settings if e["factor"] == REFERENCE[factor])
            level = f"{summary['design']['width']}, {reference['level']}"
            entries = [{**reference, "level": level}, *entries]
        elif factor != "steps":  # the default's level first; the steps are all the prototype's runs
            entries = [{**default, "level": summary["default_levels"].get(factor) or "default"}, *entries]
        for i, e in enumerate(entries):
            d = e["difference_null_sd"]
            color = "C0" if e is entries[0] and factor != "steps" else "C3"
            ax.errorbar(
                i,
                d["estimate"],
                yerr=[[d["estimate"] - d["low"]], [d["high"] - d["estimate"]]],
                fmt="o",
                color=color,
                capsize=3,
            )
        ax.axhline(0, color="k", lw=0.8, ls=":")
        ax.set_xticks(range(len(entries)), [str(e["level"]) for e in entries], fontsize=8)
        ax.set_xlim(-0.5, len(entries) - 0.5)
        ax.set_title(factor if factor != "steps" else "steps (prototype's set-up)", fontsize=10)
    for ax in axes.flat[len(factors) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("encoder - decoder median s\n(null sd; 95 % bootstrap)")
    fig.suptitle(
        f"preset {summary['preset']}: the split against each factor, one at a time from its reference (blue), "
        f"at step {summary['design']['steps']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out / "sweep_factors.png", dpi=100)
    plt.close(fig)

    panels = [k for k in summary["trajectories"] if k.split(":")[0] in ("default", "prototype")]
    fig, axes = plt.subplots(3, len(panels), figsize=(5.5 * len(panels), 10), squeeze=False, sharex="col")
    colors = {"encoder": "C0", "decoder": "C3"}
    for column, name in enumerate(panels):
        trajectory = summary["trajectories"][name]
        steps = np.asarray(trajectory["step"])
        ax = axes[0, column]
        for model in MODELS:
            values = np.asarray(trajectory["median_s"][model], dtype=float)
            ax.plot(steps, values.mean(axis=1), color=colors[model], label=f"{model} (mean over seeds)")
            ax.fill_between(steps, values.min(axis=1), values.max(axis=1), color=colors[model], alpha=0.2)
        entry = next(e for e in settings if e["factor"] == name.split(":")[0])
        mean, sd = entry["null_mean"], entry["null_sd"]
        ax.axhspan(mean - 2 * sd, mean + 2 * sd, color="0.85", label="null mean ± 2 sd")
        ax.set_ylabel("median s over heads\n(band: min-max over seeds)")
        ax.set_title(name)
        ax.legend(fontsize=8)
        scores = summary["layer_scores"].get(name, {})
        for row, score, null_name in (
            (1, "symmetry_score", "symmetric_energy"),
            (2, "directionality", "directionality"),
        ):
            ax = axes[row, column]
            for model, part in scores.items():
                for layer, values in part["layers"].items():
                    ax.plot(
                        values["step"],
                        values[score],
                        color=colors[model],
                        ls="-" if layer == "0" else "--",
                        label=f"{model} layer {layer}",
                    )
                law = part["layer_null"][null_name]
                # symmetry score = 2 s - 1: the law of s scaled
                mean, sd = (
                    (2 * law["mean"] - 1, 2 * law["sd"])
                    if score == "symmetry_score"
                    else (law["mean"], law["sd"])
                )
            if scores:
                ax.axhspan(mean - 2 * sd, mean + 2 * sd, color="0.85", label="Gaussian layer ± 2 sd")
            ax.set_ylabel(f"{score.replace('_', ' ')} (Saponati et al.)\nmean over seeds")
            ax.legend(fontsize=7)
        axes[2, column].set_xlabel("training step")
    for ax in axes.flat:
        ax.set_xscale("symlog", linthresh=10)
    fig.tight_layout()
    fig.savefig(out / "sweep_training.png", dpi=100)
    plt.close(fig)


def _qkenergy(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "qkenergy", *args], check=True)


def _browser() -> bool:
    import shutil

    return bool(os.environ.get("BROWSER_PATH")) or any(
        shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
    )


def sweep_main(options: argparse.Namespace, argv: list[str] | None) -> int:
    """--sweep: train what is missing on Dask, then (unless --train-only) summarise every finished run."""
    if options.seeds < 1:
        raise SystemExit("--seeds must be at least 1")
    d = design(options.preset)
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = plan(d, list(range(options.seeds)))

    # The set-up of the Trainer against the prototype's first, then the rest; within each, seed by seed:
    # a sweep stopped early holds all its seeds for the first and the first seeds of every setting.
    def first(row: dict[str, Any]) -> bool:
        return row["factor"] in FIRST or f"{row['factor']} {row['level']}" in FIRST

    configs = [r["config"] for r in sorted(rows, key=lambda r: (not first(r), r["seed"]))]
    start = time.perf_counter()
    counts = run_sweep(out, configs, options.scheduler, options.workers)
    trained = time.perf_counter() - start
    print(
        f"trained {counts['trained']}, skipped {counts['skipped']} finished, failed {counts['failed']}: "
        f"{trained:.0f} s",
        flush=True,
    )
    if options.train_only:
        return 1 if counts["failed"] else 0
    summary = analyse(out, d, rows, options.preset)
    summary["command"] = " ".join(["python", "examples/encoder_vs_decoder.py", *(argv or sys.argv[1:])])
    summary["this_call"] = {**counts, "training_seconds": trained}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    sweep_figures(out, summary)
    print(sweep_markdown(summary))
    if options.record is not None:
        import shutil

        options.record.mkdir(parents=True, exist_ok=True)
        name = f"encoder_vs_decoder_sweep_{options.preset}"
        shutil.copyfile(out / "summary.json", options.record / f"{name}.json")
        for figure_name in ("factors", "training"):
            shutil.copyfile(out / f"sweep_{figure_name}.png", options.record / f"{name}_{figure_name}.png")
    return 1 if counts["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=1000, help="optimizer steps per run (default 1000; not with --sweep)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder DIR")
    parser.add_argument("--symmetric-init", action="store_true", help="also train from W_Q = W_K")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, the data order, the masks")
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=LEARNING_RATE,
        help=f"AdamW's peak rate (default {LEARNING_RATE})",
    )
    sweep = parser.add_argument_group("the sweep (--sweep): seeds and factors, as Dask tasks")
    sweep.add_argument("--sweep", action="store_true", help="run the factor study instead of one pair")
    sweep.add_argument(
        "--preset",
        choices=("full", "quick", "long", "tiny"),
        default="full",
        help="full: the issue's design (1000 steps of the models above, 5000 in the prototype's set-up); "
        "quick: width 64, context 64, 400 steps, fewer levels; long: the quick model for 1000 steps, "
        "the prototype's set-up to 5000 steps and at the prototype's size; tiny: the tests'",
    )
    sweep.add_argument("--seeds", type=int, default=5, help="seeds 0 .. K-1 of every setting (default 5)")
    sweep.add_argument("--scheduler", help="address of a running Dask scheduler (default: a LocalCluster)")
    sweep.add_argument(
        "--workers", type=int, default=1, help="LocalCluster workers, one thread each (default 1)"
    )
    sweep.add_argument("--train-only", action="store_true", help="train the missing runs, skip the summary")
    sweep.add_argument("--record", type=Path, help="also copy summary.json and the figures to this folder")
    options = parser.parse_args(argv)
    if options.sweep:
        return sweep_main(options, argv)
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
