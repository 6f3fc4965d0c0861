"""What verifying every embedding-cache entry costs, measured side by side in one run (issue 43): not a timed test.

    .venv/bin/python benchmarks/embedding_cache_checks.py [--benchmark DIR] [--model all-MiniLM-L6-v2] [--split test]
                                                         [--repeats 3] [--scale-rows 500000] [--scale-dim 768]

1. A warm `evaluate` (the cache already holds the model's pool and query vectors) in a new process each time,
   alternately with the checks of `EmbeddingCache` (sidecar key, shape, CRC-32 of the data) and without them (the
   entry memory-mapped and served as before issue 43), `--repeats` times each. The scores must be identical; the
   ratio of the median wall times of the `evaluate` call is printed. Goal: checks cost < 5 %.
2. At scale: an entry of `--scale-rows` x `--scale-dim` float16 vectors, loaded verified in a fresh state vs
   memory-mapped unverified, beside the exact block search of 1,000 queries over it (what a warm evaluation does with
   it next). The verification is paid once per entry and process.

Measured here (2 cores shared with other jobs, 2026-12-07, the default benchmark's test split, 7,059-sentence pool):
warm evaluate 1.69 s with the checks, 1.81 s without (medians of 3; single runs spread 1.4-2.2 s, so the checks'
cost is below what this machine can resolve); a 500,000 x 768 float16 entry (0.72 GiB) verifies in 0.23 s
(3.2 GiB/s), 1.7 % of one exact search of 1,000 queries over it (12.9 s).

Reads: the benchmark (default: the rebuilt one of params/default.yaml, `./run_all.sh --to 06`) and the model.
Writes: temporary folders only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from ratio_utils import evaluate
    from ratio_utils.retrieval.embedding_cache import EmbeddingCache
    if os.environ.get("BENCH_UNCHECKED") == "1":
        # the load before issue 43: an entry at the key's path is memory-mapped and served, nothing checked
        EmbeddingCache._problem = lambda self, path, key: (None, np.load(path, mmap_mode="r"))
    model, benchmark, split, cache = sys.argv[1:5]
    start = time.perf_counter()
    result = evaluate(model, benchmark, split=split, cache_dir=cache, intervals=False)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "scores": result["scores"]}))
""")


def _evaluate(model: str, benchmark: Path, split: str, cache: Path, unchecked: bool) -> dict:
    env = {**os.environ, "BENCH_UNCHECKED": "1" if unchecked else "0", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", _CHILD, model, str(benchmark), split, str(cache)], cwd=REPO,
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"evaluate failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm_evaluate(model: str, benchmark: Path, split: str, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ratio-cache-bench-") as tmp:
        cache = Path(tmp) / "embeddings"
        cold = _evaluate(model, benchmark, split, cache, unchecked=False)
        print(f"cold evaluate (fills the cache): {cold['seconds']:.1f} s")
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats):
            for unchecked in (False, True):
                run = _evaluate(model, benchmark, split, cache, unchecked)
                if run["scores"] != cold["scores"]:
                    sys.exit("the scores differ between runs: the benchmark is void")
                times[unchecked].append(run["seconds"])
        checked, unchecked = statistics.median(times[False]), statistics.median(times[True])
        print(f"warm evaluate, {model} on {benchmark} ({split}), median of {repeats} new processes each:")
        print(f"  with checks     {checked:7.2f} s   {['%.2f' % t for t in times[False]]}")
        print(f"  without checks  {unchecked:7.2f} s   {['%.2f' % t for t in times[True]]}")
        print(f"  checks cost {100 * (checked / unchecked - 1):+.1f} % (goal < 5 %); scores identical")


def at_scale(rows: int, dim: int) -> None:
    import numpy as np

    from ratio_utils.retrieval.blocks import search_blocks
    from ratio_utils.retrieval.embedding_cache import EmbeddingCache, EmbeddingKey

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="ratio-cache-bench-") as tmp:
        cache = EmbeddingCache(Path(tmp))
        key = EmbeddingKey("f" * 64, "{}", "", "a" * 64, rows, "float16")
        block = 1 << 16
        path = cache.path(key)
        path.parent.mkdir(parents=True)
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(rows, dim))
        for start in range(0, rows, block):
            out[start:start + block] = rng.standard_normal((min(block, rows - start), dim), dtype=np.float32)
        out.flush()
        del out
        cache.seal(key, "synthetic")
        EmbeddingCache._verified.clear()  # a new process: nothing verified yet
        start = time.perf_counter()
        vectors = cache.load(key)
        verified = time.perf_counter() - start
        assert vectors is not None
        start = time.perf_counter()
        mapped = np.load(path, mmap_mode="r")
        unverified = time.perf_counter() - start
        queries = rng.standard_normal((1000, dim), dtype=np.float32)
        start = time.perf_counter()
        search_blocks(queries, mapped, 100, 1 << 18)
        search = time.perf_counter() - start
        gib = rows * dim * 2 / 2**30
        print(f"an entry of {rows:,} x {dim} float16 ({gib:.2f} GiB):")
        print(f"  verified load {verified:.3f} s ({gib / verified:.1f} GiB/s)   unverified {unverified:.4f} s")
        print(f"  exact search of 1,000 queries over it {search:.2f} s: the check is "
              f"{100 * verified / search:.1f} % of one warm search")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", type=Path, default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--split", default="test")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale-rows", type=int, default=500_000)
    parser.add_argument("--scale-dim", type=int, default=768)
    args = parser.parse_args(argv)
    benchmark = args.benchmark
    if benchmark is None:
        from ratio_utils.config import load_config

        benchmark = load_config().paths.benchmark
    if not benchmark.is_dir():
        sys.exit(f"no benchmark at {benchmark}: run ./run_all.sh --to 06 or pass --benchmark DIR")
    warm_evaluate(args.model, benchmark, args.split, args.repeats)
    at_scale(args.scale_rows, args.scale_dim)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
