"""Encode speed of EmbeddingGemma-300m, all-mpnet-base-v2 and all-MiniLM-L6-v2, side by side in one run (issue 38).

    .venv/bin/python benchmarks/encode_speed.py [--n 200] [--batch-size 64] [--models embeddinggemma-300m ...]

Why one run: on a shared 2-core machine absolute speeds move with the load, so a model's cost is read as a ratio to
mpnet's measured minutes apart, not hours apart. Every model encodes the same sentences (a seeded sample of the
default corpus's kept sentences, data/interim/sentences.parquet; else sentences of ../shared's NeurIPS 2025 corpus)
once as warm-up on 16 of them, then timed, all with the paper's generic "document: " prefix (EmbeddingGemma's
baseline in the paper uses it too; a prompt a few tokens longer barely changes the speed). Prints sentences/s, the
ratio to mpnet, and what that speed means for the ML instance's encoding (its test pool and queries, results/ml).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_MODELS = ["embeddinggemma-300m", "all-mpnet-base-v2", "all-MiniLM-L6-v2"]
# The ML instance's test pool plus the queries one prefix encodes (test and silver of the three moves: 7,115 + 1,694
# with the nested Specify silver set), to scale the ratios; docs/models.md has what its cold notebook 08 took.
ML_TEXTS = 27_625 + 8_809


def sample_sentences(n: int, seed: int = 13) -> tuple[list[str], str]:
    """n kept sentences of 40-300 characters, and where they came from."""
    table = REPO / "data" / "interim" / "sentences.parquet"
    if table.is_file():
        import polars as pl

        frame = pl.read_parquet(table, columns=["text_clean", "drop_reason"])
        texts = frame.filter(pl.col("drop_reason").is_null())["text_clean"].drop_nulls().to_list()
        source = str(table.relative_to(REPO))
    else:
        shared = Path(os.environ.get("RATIO_SHARED") or REPO.parent / "shared")
        path = shared / "corpora" / "neurips2025" / "papers.jsonl.gz"
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            paragraphs = [p for line in handle for p in json.loads(line)["paragraphs"]][:5000]
        texts = [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+", p)]
        source = str(path)
    texts = [t for t in texts if 40 <= len(t) <= 300]
    return random.Random(seed).sample(texts, min(n, len(texts))), source


def measure(name: str, sentences: list[str], batch_size: int) -> dict:
    from ratio_utils.models import load_sentence_transformer, resolve_model

    ref = resolve_model(name)
    start = time.perf_counter()
    model = load_sentence_transformer(ref, device="cpu")
    load_s = time.perf_counter() - start
    kwargs = {"prompt": ref.prefixes("generic").document}  # the paper's generic prefix, as the untuned baselines
    model.encode(sentences[:16], batch_size=batch_size, **kwargs)  # warm-up: first-call allocations, thread pools
    start = time.perf_counter()
    model.encode(sentences, batch_size=batch_size, **kwargs)
    seconds = time.perf_counter() - start
    return {"model": ref.name, "source": ref.source, "load_s": load_s, "encode_s": seconds,
            "per_s": len(sentences) / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="sentences to encode (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    args = parser.parse_args(argv)

    import torch

    sentences, source = sample_sentences(args.n)
    mean_chars = sum(map(len, sentences)) / len(sentences)
    print(f"{len(sentences)} sentences from {source} (mean {mean_chars:.0f} characters), batch {args.batch_size}, "
          f"CPU, {torch.get_num_threads()} torch threads, load average {os.getloadavg()[0]:.1f}")
    rows = []
    for name in args.models:
        try:
            rows.append(measure(name, sentences, args.batch_size))
        except Exception as exc:  # noqa: BLE001 - a model missing here is reported, the others still measured
            print(f"{name}: not measured ({type(exc).__name__}: {str(exc)[:300]})")
    mpnet = next((r for r in rows if r["model"] == "all-mpnet-base-v2"), None)
    print(f"\n{'model':22} {'source':9} {'load s':>7} {'encode s':>9} {'sent/s':>8} {'vs mpnet':>9} {'ML encode':>10}")
    for r in rows:
        ratio = r["per_s"] / mpnet["per_s"] if mpnet else float("nan")
        ml_min = ML_TEXTS / r["per_s"] / 60
        print(f"{r['model']:22} {r['source']:9} {r['load_s']:7.1f} {r['encode_s']:9.1f} {r['per_s']:8.1f} "
              f"{ratio:8.2f}x {ml_min:8.0f} min")
    if mpnet:
        print(f"\nML encode: the ML instance's {ML_TEXTS:,} texts (test pool + queries) at this speed; a model at "
              "0.5x mpnet takes twice mpnet's encoding time.")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
