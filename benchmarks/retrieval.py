"""Retrieval performance, measured side by side in one run (issue 6, "Performance").

    .venv/bin/python benchmarks/retrieval.py [--params params/default.yaml] [--benchmark DIR] [--encode 2000]

Prints:
1. encoding speed of all-MiniLM-L6-v2 (sentences/s) on pool sentences, and the embedding cache: a
   second search with the same model, prefix and pool (texts encoded, wall time);
2. search time of BM25 and of the dense retriever over the benchmark's test pool for one move;
3. metric time of ratio_utils.evaluation.metrics against ranx on the same run (and that the values agree);
4. peak memory of a pool of 404,371 x 384 embeddings (the paper's test pool size, synthetic vectors)
   in a faiss exact inner-product index, float32 vs float16 storage, each measured in a fresh
   process (goal: <= 2 GB), with the time of 100 exact searches. Peak = resident memory sampled every
   5 ms while the cached .npy is memory-mapped, indexed and searched, minus the memory before; it counts
   the mapped file pages read while indexing as well as the index itself.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAPER_TEST_POOL = 404_371


class _PeakRSS:
    """Samples this process's resident memory every 5 ms in a thread and keeps the maximum."""

    def __init__(self):
        import threading

        import psutil

        self._process = psutil.Process()
        self.base = self._process.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(0.005)

    def stop_mb(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)
        return (self.peak - self.base) / 2**20


def _pool_memory_child(n: int, dim: int, fp16: bool, queue) -> None:
    """In a fresh process: baseline RSS after imports, then build the index from a memory-mapped .npy."""
    import faiss  # noqa: F401

    from ratio_utils.retrieval.dense import build_inner_product_index

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pool.npy"
        dtype = np.float16 if fp16 else np.float32
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, dim))
        rng = np.random.default_rng(0)
        for start in range(0, n, 50_000):  # written in chunks: the writer must not hold the pool twice
            block = rng.standard_normal((min(50_000, n - start), dim)).astype(np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            out[start : start + len(block)] = block.astype(dtype)
        out.flush()
        del out
        meter = _PeakRSS()  # from here on: what searching a cached pool costs
        vectors = np.load(path, mmap_mode="r")
        started = time.perf_counter()
        index = build_inner_product_index(vectors, fp16=fp16)
        build = time.perf_counter() - started
        queries = np.ascontiguousarray(vectors[:100], dtype=np.float32)
        started = time.perf_counter()
        scores, hits = index.search(queries, 101)
        search = time.perf_counter() - started
        assert (hits[:, 0] == np.arange(100)).all()  # each vector finds itself first: the search is exact
        peak = meter.stop_mb()
    queue.put({"peak_mb": peak, "build_s": build, "search_100_s": search,
               "file_mb": n * dim * (2 if fp16 else 4) / 2**20})


def pool_memory(n: int = PAPER_TEST_POOL, dim: int = 384) -> list[dict]:
    rows = []
    ctx = mp.get_context("spawn")
    for fp16 in (False, True):
        queue = ctx.Queue()
        proc = ctx.Process(target=_pool_memory_child, args=(n, dim, fp16, queue))
        proc.start()
        result = queue.get()
        proc.join()
        rows.append({"storage": "float16" if fp16 else "float32", **result})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params/default.yaml")
    parser.add_argument("--benchmark", type=Path, default=None, help="default: the params' benchmark")
    parser.add_argument("--move", default="specify")
    parser.add_argument("--encode", type=int, default=2000, help="pool sentences to encode for the speed test")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import pandas as pd
    from ranx import Qrels, Run, evaluate

    from ratio_utils.config import load_config
    from ratio_utils.dataset.benchmark import load_benchmark
    from ratio_utils.evaluation.metrics import DEFAULT_KS, evaluate_run, order_run
    from ratio_utils.retrieval import BM25Retriever, DenseRetriever
    from ratio_utils.schema import GENERIC_PREFIXES

    cfg = load_config(args.params)
    bench = load_benchmark(args.benchmark or cfg.paths.benchmark)
    pool = bench.pool("test")
    evalset = bench.eval_set(args.move, "test")
    queries, qrels = evalset.queries, evalset.qrels
    sample = pool.head(args.encode)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other processes slow the timings down)")
    print(f"benchmark {bench.root}: test pool {len(pool)} sentences, {len(queries)} {args.move} test queries\n")

    # 1. encoding speed and the cache
    with tempfile.TemporaryDirectory() as cache:
        first = DenseRetriever("all-MiniLM-L6-v2", *GENERIC_PREFIXES, cache_dir=Path(cache))
        first.model  # load outside the timing
        started = time.perf_counter()
        first.search(queries.head(50), sample, k=10)
        cold = time.perf_counter() - started
        second = DenseRetriever("all-MiniLM-L6-v2", *GENERIC_PREFIXES, cache_dir=Path(cache))
        second._model = first.model
        started = time.perf_counter()
        second.search(queries.head(50), sample, k=10)
        warm = time.perf_counter() - started
    texts = first.encoded_texts
    print("1. encoding (all-MiniLM-L6-v2, batch 64, CPU threads: %d)" % __import__("torch").get_num_threads())
    print(pd.DataFrame([
        {"run": "first (cache empty)", "texts encoded": texts, "seconds": round(cold, 2),
         "sentences/s": round(texts / cold, 1)},
        {"run": "second (cache hit)", "texts encoded": second.encoded_texts, "seconds": round(warm, 2),
         "sentences/s": None},
    ]).to_string(index=False))

    # 2. search over the whole test pool
    rows = []
    bm25 = BM25Retriever(1)
    started = time.perf_counter()
    bm25_run = bm25.search(queries, pool, k=100)
    rows.append({"system": "BM25-unigram (index + search)", "seconds": time.perf_counter() - started})
    with tempfile.TemporaryDirectory() as cache:
        dense = DenseRetriever(first.model, *GENERIC_PREFIXES, cache_dir=Path(cache))
        started = time.perf_counter()
        dense_run = dense.search(queries, pool, k=100)
        encode_and_search = time.perf_counter() - started
        dense_again = DenseRetriever(first.model, *GENERIC_PREFIXES, cache_dir=Path(cache))
        started = time.perf_counter()
        dense_again.search(queries, pool, k=100)
        search_only = time.perf_counter() - started
    rows.append({"system": "MiniLM generic (encode pool+queries, search)", "seconds": encode_and_search})
    rows.append({"system": "MiniLM generic (cached embeddings: index + search)", "seconds": search_only})
    print(f"\n2. search of {len(queries)} queries over the test pool ({len(pool)} sentences), top 100")
    print(pd.DataFrame(rows).round(3).to_string(index=False))

    # 3. metrics against ranx on the same run
    metrics = [f"{m}@{k}" for k in DEFAULT_KS for m in ("recall", "mrr", "hit_rate")]
    ordered = order_run(dense_run)
    run_dict, qrels_dict = {}, {}
    for qid, docid, rank in ordered[["qid", "docid", "rank"]].itertuples(index=False):
        run_dict.setdefault(qid, {})[docid] = 1.0 / rank
    for qid, docid in qrels.itertuples(index=False):
        qrels_dict.setdefault(qid, {})[docid] = 1
    evaluate(Qrels(qrels_dict), Run(run_dict), metrics, make_comparable=True)  # numba compile outside the timing
    started = time.perf_counter()
    ours = evaluate_run(dense_run, qrels)
    ours_s = time.perf_counter() - started
    started = time.perf_counter()
    theirs = evaluate(Qrels(qrels_dict), Run(run_dict), metrics, make_comparable=True)
    ranx_s = time.perf_counter() - started
    started = time.perf_counter()
    Run(run_dict), Qrels(qrels_dict)
    build_s = time.perf_counter() - started
    gap = max(abs(ours[{"recall": "R", "mrr": "MRR", "hit_rate": "HR"}[m.split("@")[0]] + "@" + m.split("@")[1]] - v)
              for m, v in theirs.items())
    print(f"\n3. metrics on the same run ({len(dense_run)} rows, {len(qrels)} judgements), 15 values")
    print(pd.DataFrame([
        {"implementation": "ratio_utils.evaluation.metrics.evaluate_run (from the DataFrame)",
         "seconds": round(ours_s, 4)},
        {"implementation": "ranx.evaluate (dicts prebuilt)", "seconds": round(ranx_s, 4)},
        {"implementation": "ranx Run+Qrels construction from dicts", "seconds": round(build_s, 4)},
    ]).to_string(index=False))
    print(f"largest difference between the two: {gap:.2e}; BM25 MRR@10 "
          f"{100 * evaluate_run(bm25_run, qrels)['MRR@10']:.1f}, MiniLM MRR@10 {100 * ours['MRR@10']:.1f}")

    # 4. memory of a paper-size pool
    if not args.skip_memory:
        print(f"\n4. a {PAPER_TEST_POOL:,} x 384 pool (synthetic unit vectors) in a faiss exact inner-product index, "
              "fresh process each")
        frame = pd.DataFrame(pool_memory())
        frame["goal <= 2048 MB"] = frame["peak_mb"] <= 2048
        print(frame.round(2).to_string(index=False))


if __name__ == "__main__":
    main()
