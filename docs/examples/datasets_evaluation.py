"""Ratio through Hugging Face `datasets` and two general libraries: sentence-transformers encodes, ranx scores.

    python docs/examples/datasets_evaluation.py [BENCHMARK_DIR] [--model all-MiniLM-L6-v2]

Reads a benchmark directory with its dataset card (`ratio_utils.dataset.card`; the default run's is
`data/processed/ratio/`) through `datasets.load_dataset` alone, and prints MRR@10 and Recall@10 per move on test and
silver. The conventions are the benchmark's (docs/evaluate_your_model.md): one shared pool per split, silver queries
search the test pool, a query's own sentence is never a candidate for it.
"""

from __future__ import annotations

import argparse

import numpy as np
from datasets import get_dataset_config_names, load_dataset
from ranx import Qrels, Run, evaluate

from ratio_utils.models import load_sentence_transformer  # the packaged MiniLM; elsewhere SentenceTransformer(name)

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("benchmark", nargs="?", default="data/processed/ratio")
parser.add_argument("--model", default="all-MiniLM-L6-v2")
args = parser.parse_args()

model = load_sentence_transformer(args.model)
pool = load_dataset(args.benchmark, "corpus", split="test")
docs = model.encode(pool["text"], prompt="document: ", normalize_embeddings=True, batch_size=64)
doc_ids = np.array(pool["docid"])

for move in ("address", "broaden", "specify"):
    if move not in get_dataset_config_names(args.benchmark):
        continue
    pairs = load_dataset(args.benchmark, move)
    for split in ("test", "silver"):
        if split not in pairs:
            continue
        table = pairs[split].to_pandas()
        queries = table.drop_duplicates("query_id")
        scores = model.encode(queries["querySentence"].tolist(), prompt="query: ", normalize_embeddings=True) @ docs.T
        scores[np.array(queries["query_id"])[:, None] == doc_ids[None, :]] = -np.inf  # never the query itself
        top = np.argsort(-scores, axis=1, kind="stable")[:, :100]
        run = Run({q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(queries["query_id"])})
        qrels = Qrels({q: dict.fromkeys(g["gold_id"], 1) for q, g in table.groupby("query_id")})
        result = evaluate(qrels, run, ["mrr@10", "recall@10"])
        print(f"{move:8} {split:7} queries {len(queries):5,}  MRR@10 {100 * result['mrr@10']:5.1f}  "
              f"R@10 {100 * result['recall@10']:5.1f}")
