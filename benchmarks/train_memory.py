"""Peak memory of one fine-tuning step (notebook 09), with and without gradient checkpointing, side by side.

    .venv/bin/python benchmarks/train_memory.py [--batches 16 32 64] [--length 128] [--steps 3]

Each setting runs in a fresh process (so one setting's allocator cache does not hide the next one's peak):
all-MiniLM-L6-v2 with MultipleNegativesRankingLoss, as ratio_utils.train builds it, takes `--steps` optimizer
steps on batches of `--batch` query/gold pairs whose texts are all `--length` tokens long (a batch is padded
to its longest text, so one long sentence gives the whole batch this length: the worst case a run meets).
Printed per batch size: peak RSS (ru_maxrss) after loading the model and after the steps, seconds per step,
without and with `gradient_checkpointing` (`train.gradient_checkpointing`), and the ratios of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def one_setting(batch: int, length: int, steps: int, checkpointing: bool) -> dict:
    """Run in a child process: load, then `steps` optimizer steps; peaks in MB and seconds per step."""
    import torch
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    from ratio_utils.models import load_sentence_transformer, resolve_model_path

    torch.manual_seed(13)
    model = load_sentence_transformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    model.max_seq_length = length
    if checkpointing:
        model[0].auto_model.gradient_checkpointing_enable()  # what the trainer's gradient_checkpointing sets
    loss = MultipleNegativesRankingLoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    loaded = peak_mb()
    # Distinct word sequences, each longer than `length` tokens and truncated to it: every row is full length.
    words = model.tokenizer.convert_ids_to_tokens(list(range(2000, 2000 + 4 * length)))
    texts = [" ".join(words[(i * 7) % len(words):] + words)[: 20 * length] for i in range(2 * batch)]
    model.train()
    started = time.perf_counter()
    for _ in range(steps):
        features = [model.tokenize(texts[:batch]), model.tokenize(texts[batch:])]
        assert features[0]["input_ids"].shape == (batch, length)
        optimizer.zero_grad()
        loss(features, labels=None).backward()
        optimizer.step()
    return {"batch": batch, "length": length, "checkpointing": checkpointing, "loaded_mb": round(loaded),
            "peak_mb": round(peak_mb()), "s_per_step": round((time.perf_counter() - started) / steps, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON of one setting, run in this process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_setting(**json.loads(args.child))))
        return
    rows = []
    for batch in args.batches:
        for checkpointing in (False, True):
            setting = {"batch": batch, "length": args.length, "steps": args.steps, "checkpointing": checkpointing}
            out = subprocess.run([sys.executable, __file__, "--child", json.dumps(setting)], check=True,
                                 capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(f"  batch {batch}, checkpointing {checkpointing}: {rows[-1]}", file=sys.stderr)
    print("| batch | length | loaded MB | peak MB | peak MB, checkpointing | peak ratio | s/step | s/step, "
          "checkpointing | time ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for plain, checked in zip(rows[::2], rows[1::2]):
        print(f"| {plain['batch']} | {plain['length']} | {plain['loaded_mb']} | {plain['peak_mb']} | "
              f"{checked['peak_mb']} | {checked['peak_mb'] / plain['peak_mb']:.2f} | {plain['s_per_step']} | "
              f"{checked['s_per_step']} | {checked['s_per_step'] / plain['s_per_step']:.2f} |")


if __name__ == "__main__":
    main()
