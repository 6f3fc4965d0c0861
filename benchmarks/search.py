"""Inspiration-search latency on a pool of the paper's size (issue 12): printed, not a timed test.

    .venv/bin/python benchmarks/search.py [--size 404371] [--queries 20] [--threads 2]

Builds an index folder in the layout of `ratio_utils.apps.search` over `--size` synthetic unit vectors
(384 dimensions, all-MiniLM-L6-v2's width; random vectors cost faiss exactly what real ones do in an
exhaustive search) with synthetic sentence rows, fingerprinted for the real all-MiniLM-L6-v2, then
answers real statements through `search.search_index`: one real encode of each statement with
MiniLM plus the exact search plus the row lookup. Prints the build and open times, and per query the
encode-only, search-only and end-to-end latency (median and max).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAPER_TEST_POOL = 404_371
DIM = 384
STATEMENTS = [
    "Neural parsers overfit when the treebank is small.",
    "Annotating named entities by hand is slow and expensive.",
    "Beam search returns generic and repetitive responses.",
    "Evaluation metrics for summarisation reward lexical overlap.",
    "Morphologically rich languages pose problems for statistical translation.",
]


def synthetic_index(folder: Path, size: int, fingerprint: str, seed: int = 13) -> float:
    import faiss

    from ratio_utils.apps.search import CHECKED_FILES, INDEX_FILE, INDEX_FORMAT, META_FILE, ROWS_FILE
    from ratio_utils.io import sha256_file, write_json_atomic
    from ratio_utils.retrieval.dense import build_inner_product_index

    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    vectors = rng.standard_normal((size, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = build_inner_product_index(vectors, use_gpu=False)
    faiss.write_index(index, str(folder / INDEX_FILE))
    rows = pd.DataFrame({
        "docid": [f"{i:016x}" for i in range(size)],
        "paper_id": [f"P{i // 200:05d}" for i in range(size)],
        "title": [f"Paper {i // 200}" for i in range(size)],
        "year": pd.array([2000 + (i // 200) % 20 for i in range(size)], dtype="Int64"),
        "previous": [f"Sentence {i - 1} of the pool." for i in range(size)],
        "sentence": [f"Sentence {i} of the pool." for i in range(size)],
        "next": [f"Sentence {i + 1} of the pool." for i in range(size)],
    })
    rows.to_parquet(folder / ROWS_FILE, index=False)
    write_json_atomic(folder / META_FILE, {"format": INDEX_FORMAT, "model": "all-MiniLM-L6-v2",
                                           "model_fingerprint": fingerprint,
                                           "doc_prefix": "document: ", "lowercase": True, "size": size, "dim": DIM,
                                           "checksums": {name: sha256_file(folder / name) for name in CHECKED_FILES}})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=PAPER_TEST_POOL)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import faiss
    import torch

    from ratio_utils.apps.search import SearchIndex, search_index
    from ratio_utils.retrieval import DenseRetriever

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    encoder = DenseRetriever("all-MiniLM-L6-v2", doc_prefix="document: ")
    started = time.perf_counter()
    encoder.encode(["warm-up"], "query: ")
    print(f"model load + first encode: {time.perf_counter() - started:.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build = synthetic_index(folder, args.size, encoder.fingerprint())
        print(f"synthetic index of {args.size:,} x {DIM} float32 vectors built and written in {build:.1f} s")
        started = time.perf_counter()
        index = SearchIndex.open(folder, encoder.fingerprint())
        print(f"index opened (faiss file + sentence rows) in {time.perf_counter() - started:.2f} s")
        encode_s, search_s, total_s = [], [], []
        for i in range(args.queries):
            statement = STATEMENTS[i % len(STATEMENTS)] + f" ({i})"
            t0 = time.perf_counter()
            vector = encoder.encode([statement.lower()], "query: ")
            t1 = time.perf_counter()
            index.index.search(np.ascontiguousarray(vector), 11)
            t2 = time.perf_counter()
            results = search_index(statement, "specify", encoder, index, "query: ", top=10)
            t3 = time.perf_counter()
            encode_s.append(t1 - t0)
            search_s.append(t2 - t1)
            total_s.append(t3 - t2)
            assert len(results) == 10
    print(f"per query over {args.queries} statements, {args.threads} threads (median / max):")
    for name, values in (("encode one statement (MiniLM)", encode_s), ("exact faiss search, top 11", search_s),
                         ("end to end (search.search_index)", total_s)):
        print(f"  {name:<34} {1000 * statistics.median(values):8.1f} ms / {1000 * max(values):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
