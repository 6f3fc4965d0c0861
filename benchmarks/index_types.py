"""Index types of `ratio-search index --index-type` side by side on >= 1M vectors: build time, memory, query latency,
recall@10 against flat, and the search tuning that keeps recall@10 >= 0.95 (docs/search.md, "Index types").

    .venv/bin/python benchmarks/index_types.py [--size 1000000] [--queries 200] [--noise 0.02] [--index DIR]

The vectors: the sentence vectors of a built flat index (`--index`, default data/search_index/all-MiniLM-L6-v2: the
default corpus's 14,996 sentences of 2019 on, MiniLM) tiled to `--size` rows, each row its sentence's vector plus
Gaussian noise of `--noise` per dimension, re-normalised (at 0.02 a copy keeps a cosine of about 0.93 with its
sentence); without such an index, random unit vectors (a harder case: no structure for an index to exploit). The
queries are `--queries` of those sentences held out of the tiling (real sentence vectors the database does not hold).
Each type is built by the app's own code (`search.index_spec`, `search.make_index`, the factory strings recorded in
index.json), recall@10 is measured for each setting of a small grid of search parameters, the cheapest with recall@10
>= 0.95 is kept, and then a fresh process opens the written file as `SearchIndex.open` does (memory-mapped where faiss
allows) and answers the queries one at a time, as a person's searches come: its latency (median, 90th percentile) and
its resident memory after those searches (file-backed pages counted) are printed beside the file's size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

K = 10
RECALL_GOAL = 0.95
# cheapest first; the first setting that reaches RECALL_GOAL is kept
GRIDS = {
    "flat": [{}],
    "hnsw": [{"efSearch": e} for e in (16, 32, 64, 128, 256, 512, 1024, 2048)],
    "ivfpq": [{"nprobe": p, "k_factor": f} for f, p in ((4, 8), (4, 16), (4, 32), (8, 32), (8, 64), (16, 64),
                                                        (16, 128), (32, 64), (32, 128), (64, 64), (64, 128))],
}

# A fresh process: open the index file as SearchIndex.open does, set the chosen search parameters, answer each query
# alone; print latency and resident memory (VmRSS counts the memory-mapped pages the searches touched).
PROBE = r"""
import json, sys, time
import numpy as np, faiss
from ratio_utils.apps.search import IndexSpec, tune_index
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) * 1024
path, spec, queries = sys.argv[1], json.loads(sys.argv[2]), np.load(sys.argv[3])
before = rss()
started = time.perf_counter()
index = faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
opened = time.perf_counter() - started
tune_index(index, IndexSpec(spec["type"], spec["factory"], spec["build"], spec["search"]))
index.search(queries[:1], 10)
times = []
for q in queries:
    t = time.perf_counter(); index.search(q[None, :], 10); times.append(time.perf_counter() - t)
print(json.dumps({"open_s": opened, "median_ms": 1000 * float(np.median(times)),
                  "p90_ms": 1000 * float(np.quantile(times, 0.9)), "rss_bytes": rss() - before}))
"""


def base_vectors(index_dir: Path, seed: int) -> tuple[np.ndarray, str]:
    import faiss

    meta_path = index_dir / "index.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if (meta.get("index_type") or {"type": "flat"})["type"] == "flat":
            index = faiss.read_index(str(index_dir / "index.faiss"))
            return index.reconstruct_n(0, index.ntotal), (
                f"{index.ntotal:,} sentence vectors of {index_dir} ({meta.get('model')}), tiled with noise")
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((15_000, 384), dtype=np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True),
            "15,000 random unit vectors (no index found), tiled with noise")


def tiled(base: np.ndarray, size: int, noise: float, seed: int, chunk: int = 100_000) -> np.ndarray:
    """`size` rows: row i is base[i % len(base)] plus N(0, noise^2) per dimension, L2-normalised."""
    rng = np.random.default_rng(seed)
    out = np.empty((size, base.shape[1]), dtype=np.float32)
    for start in range(0, size, chunk):
        rows = np.arange(start, min(size, start + chunk)) % len(base)
        block = base[rows] + noise * rng.standard_normal((len(rows), base.shape[1]), dtype=np.float32)
        out[start : start + len(rows)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)]))


def main() -> int:
    import faiss

    from ratio_utils.apps.search import index_spec, make_index, tune_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--index", type=Path, default=Path("data/search_index/all-MiniLM-L6-v2"))
    parser.add_argument("--types", default="flat,ivfpq,hnsw")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    base, how = base_vectors(args.index, args.seed)
    rng = np.random.default_rng(args.seed)
    held_out = rng.choice(len(base), size=args.queries, replace=False)
    queries = np.ascontiguousarray(base[held_out])
    vectors = tiled(np.delete(base, held_out, axis=0), args.size, args.noise, args.seed + 1)
    print(f"{args.size:,} x {vectors.shape[1]} vectors: {how} (noise {args.noise} per dimension); "
          f"{args.queries} held-out sentences as queries; faiss {faiss.__version__}, "
          f"{faiss.omp_get_max_threads()} threads")
    truth = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "queries.npy", queries)
        for kind in args.types.split(","):
            spec = index_spec(kind, len(vectors), vectors.shape[1])
            started = time.perf_counter()
            index = make_index(vectors, spec)
            build_s = time.perf_counter() - started
            grid = []
            for setting in GRIDS[kind]:
                tuned = index_spec(kind, len(vectors), vectors.shape[1], **setting)
                tune_index(index, tuned)
                found = index.search(queries, K)[1]
                if truth is None and kind == "flat":
                    truth = found
                grid.append((tuned, recall_at_k(found, truth)))
                if grid[-1][1] >= RECALL_GOAL:
                    break
            chosen, recall = grid[-1]
            path = Path(tmp) / f"{kind}.faiss"
            faiss.write_index(index, str(path))
            del index
            probe = subprocess.run([sys.executable, "-c", PROBE, str(path), json.dumps(chosen.to_dict()),
                                    str(Path(tmp) / "queries.npy")], capture_output=True, text=True, check=True)
            measured = json.loads(probe.stdout.strip().splitlines()[-1])
            tried = ", ".join(f"{json.dumps(s.search)} {r:.3f}" for s, r in grid) if chosen.search else "exact"
            print(f"{kind}: {chosen.factory}, build {json.dumps(chosen.build)} -> built in {build_s:.1f} s; "
                  f"recall@10 by setting: {tried}", flush=True)
            rows.append((kind, chosen, build_s, path.stat().st_size, measured, recall))
            path.unlink()
    print()
    print("| index type | factory | search setting | build (s) | file (MB) | resident after queries (MB) | "
          "query median (ms) | query p90 (ms) | recall@10 vs flat |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, spec, build_s, size, measured, recall in rows:
        print(f"| {kind} | `{spec.factory}` | {json.dumps(spec.search) if spec.search else 'exact'} | {build_s:.1f} | "
              f"{size / 1e6:,.0f} | {measured['rss_bytes'] / 1e6:,.0f} | {measured['median_ms']:.2f} | "
              f"{measured['p90_ms']:.2f} | {recall:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
