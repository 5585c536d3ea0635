"""Cost of one tracking call (Tracker.log) against one training step, on one core.

Models: the encoder and the decoder of examples/encoder_vs_decoder.py (2 layers,
d = 128, 4 heads, batch 16 x 128 bytes), and a GPT-2-shaped model of 125M
parameters (12 layers, d = 768, 12 heads, vocabulary 50257; one sequence of
--context tokens per step). A training step is forward, backward and an AdamW
update; a tracking call reads the heads in place, computes every head's
statistics and judges them against the null laws, which the first call draws
(reported apart: it is paid once per run). Times are medians of --repeat
calls on one thread (torch and BLAS); the ratios are measured in this one run.

    python benchmarks/bench_training.py [--repeat 5] [--context 256] [--samples 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import transformers

from qkenergy.training import Tracker


def _median_seconds(work: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _models(context: int) -> list[tuple[str, Any, torch.Tensor]]:
    torch.manual_seed(0)
    encoder = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=258,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=512,
            max_position_embeddings=128,
            type_vocab_size=1,
            pad_token_id=257,
        )
    )
    decoder = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=258,
            n_embd=128,
            n_layer=2,
            n_head=4,
            n_positions=128,
            bos_token_id=257,
            eos_token_id=257,
        )
    )
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_positions=max(context, 1024)))
    small = torch.randint(0, 256, (16, 128))
    return [
        ("encoder (experiment)", encoder, small),
        ("decoder (experiment)", decoder, small),
        ("GPT-2 shape, 125M", gpt2, torch.randint(0, 50257, (1, context))),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--context", type=int, default=256, help="tokens per step of the 125M model")
    parser.add_argument("--samples", type=int, default=2000, help="null-law draws")
    options = parser.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    print(f"one thread; medians of {options.repeat}; null laws of {options.samples} draws")
    print(f"{'model':<22} {'params':>8} {'step s':>9} {'track s':>9} {'track/step':>10} {'first call s':>12}")
    for name, model, ids in _models(options.context):
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(model: Any = model, ids: torch.Tensor = ids, optimiser: Any = optimiser) -> None:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()

        with tempfile.TemporaryDirectory() as out:
            tracker = Tracker(model, out, samples=options.samples, threads=1)
            start = time.perf_counter()
            tracker.log(0)  # draws the null laws
            first = time.perf_counter() - start
            step()  # warm-up: the optimiser's state is allocated
            counter = iter(range(1, 10**6))
            track = _median_seconds(
                lambda tracker=tracker, counter=counter: tracker.log(next(counter)), options.repeat
            )
        train = _median_seconds(step, options.repeat)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"{name:<22} {params:>7.1f}M {train:>9.4f} {track:>9.4f} {track / train:>10.3f} {first:>12.3f}")


if __name__ == "__main__":
    main()
