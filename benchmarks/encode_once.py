"""One encoding per (model, prefix, pool), measured side by side in one run (issue 36, "Benchmark"): not a timed test.

    .venv/bin/python benchmarks/encode_once.py [--benchmark DIR] [--model all-MiniLM-L6-v2] [--pool N]
        [--max-queries N]

Counts the sentences sent through the model (every `SentenceTransformer.encode` call, whoever makes it) and the wall
time of four runs, each from a cold start (empty in-process memo, a fresh embedding cache folder):

1. `evaluate` before: three moves x two splits (test, and silver where present, else validation) by the old path, one
   new retriever per move without a cache (`ratio_utils.evaluate` before issue 36: each move encodes its split's pool);
2. `evaluate` after: `ratio_utils.evaluate` per split, one retriever for the moves, memo and on-disk cache on;
3. `ratio-mteb --compare` before: MTEB's own SentenceTransformer wrapper (one pool encoding per task and split, MTEB's
   former 100-candidate heap), then the old per-move evaluation;
4. `ratio-mteb --compare` after: `mteb_model` (the project's memo and cache) and `project_scores`.

It checks that the scores before and after are identical and prints the speed-up. Goal: each pool encoded once per
(model, prefix, split); --compare at least 3x faster.

`--pool N` / `--max-queries N` run a reduced copy of the benchmark (each split's pool cut to N sentences, always
keeping the gold candidates of the kept queries; at most N queries per move and split, the first by id): on a busy
machine the full default benchmark (a 7,059-sentence test pool, encoded 12 times by the old --compare) takes hours.

Reads: the benchmark (default: the rebuilt one of params/default.yaml) and the model. Writes: temporary folders only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COUNT = {"sentences": 0, "calls": 0}


def _count_encodes() -> None:
    """Wrap SentenceTransformer.encode so every sentence sent through any model is counted."""
    from sentence_transformers import SentenceTransformer

    original = SentenceTransformer.encode
    if getattr(original, "_counted", False):
        return

    def encode(self, sentences, *args, **kwargs):
        COUNT["calls"] += 1
        COUNT["sentences"] += 1 if isinstance(sentences, str) else len(sentences)
        return original(self, sentences, *args, **kwargs)

    encode._counted = True
    SentenceTransformer.encode = encode


def _reduced_copy(source: Path, target: Path, pool_size: int | None, max_queries: int | None) -> Path:
    """A copy of the benchmark with at most `max_queries` queries per move and split and pools of `pool_size`."""
    import pandas as pd

    from ratio_utils.dataset.benchmark import candidates_path, load_benchmark, pairs_path, write_pairs, write_pool
    from ratio_utils.schema import MOVES, Split

    shutil.copytree(source, target)
    bench = load_benchmark(target)
    gold_by_pool: dict[Split, set[str]] = {Split.TEST: set(), Split.VALIDATION: set()}
    for move in MOVES:
        for split in (Split.TEST, Split.SILVER, Split.VALIDATION):
            if not bench.has(move, split):
                continue
            pairs = pd.read_parquet(pairs_path(target, move, split))
            if max_queries is not None and "query_id" in pairs:
                keep = sorted(pairs["query_id"].unique())[:max_queries]
                pairs = pairs[pairs["query_id"].isin(keep)]
                write_pairs(pairs, target, move, split)
            pool_split = Split.TEST if split is Split.SILVER else split
            gold_by_pool[pool_split] |= set(pairs["gold_id"].astype(str))
    if pool_size is not None:
        for split, golds in gold_by_pool.items():
            pool = pd.read_parquet(candidates_path(target, split))
            ids = pool["docid"].astype(str)
            rest = pool[~ids.isin(golds)].sample(frac=1.0, random_state=13)
            kept = pd.concat([pool[ids.isin(golds)], rest.head(max(pool_size - int(ids.isin(golds).sum()), 0))])
            write_pool(kept.sort_index(), target, split)
    return target


def _timed(label: str, function):
    from ratio_utils.retrieval import dense

    dense.clear_embedding_memo()
    COUNT["sentences"] = COUNT["calls"] = 0
    started = time.perf_counter()
    value = function()
    seconds = time.perf_counter() - started
    row = {"run": label, "sentences encoded": COUNT["sentences"], "encode calls": COUNT["calls"],
           "seconds": round(seconds, 1)}
    print(json.dumps(row), flush=True)
    return value, row


def _splits(bench) -> list:
    from ratio_utils.schema import MOVES, Split

    second = Split.SILVER if any(bench.has(m, Split.SILVER) and len(bench.queries(m, Split.SILVER)) for m in MOVES) \
        else Split.VALIDATION
    return [Split.TEST, second]


def evaluate_before(model: str, root: Path, prefixes: tuple[str, str], splits: list | None = None) -> dict:
    """The pre-issue-36 path: one retriever per move, no cache, no memo (`splits`: default test and
    silver/validation)."""
    from ratio_utils.dataset.benchmark import load_benchmark
    from ratio_utils.evaluation.metrics import NDCG_KS
    from ratio_utils.evaluation.run_scoring import run_and_score
    from ratio_utils.retrieval import DenseRetriever
    from ratio_utils.schema import MOVES

    bench = load_benchmark(root)
    scores = {}
    for split in splits or _splits(bench):
        for move in MOVES:
            if not bench.has(move, split) or len(bench.queries(move, split)) == 0:
                continue
            retriever = DenseRetriever(model, *prefixes)  # a new retriever per move, as scoring.py built them
            scores[f"{move.value}/{split.value}"] = run_and_score(retriever, bench, move, split, k=100,
                                                                  ndcg_ks=NDCG_KS)
    return scores


def evaluate_after(model: str, root: Path, prefixes: tuple[str, str], cache: Path) -> dict:
    from ratio_utils.dataset.benchmark import load_benchmark
    from ratio_utils.evaluation.scoring import evaluate

    bench = load_benchmark(root)
    scores = {}
    for split in _splits(bench):
        result = evaluate(model, root, split.value, "all", query_prefix=prefixes[0], doc_prefix=prefixes[1],
                          cache_dir=cache, intervals=False)
        scores |= {f"{move}/{result['splits'][move]}": s for move, s in result["scores"].items()}
    return scores


def mteb_before(model: str, root: Path, prompts: dict) -> object:
    """MTEB's own SentenceTransformer wrapper (a pool encoding per task and split) and the old per-move evaluation."""
    from mteb.models import SentenceTransformerEncoderWrapper

    from ratio_utils.evaluation.mteb_tasks import SCORE_NAMES, mteb_scores, ratio_tasks, side_by_side
    from ratio_utils.models import load_sentence_transformer

    tasks = ratio_tasks(root)
    for task in tasks:
        task._top_k = 100  # the former heap (99 candidates for a query whose own sentence is in the pool)
    frame = mteb_scores(SentenceTransformerEncoderWrapper(load_sentence_transformer(model), model_prompts=prompts),
                        tasks)
    import pandas as pd

    from ratio_utils.schema import Split

    # the former project_scores: test and silver (where present), a retriever per move
    old = evaluate_before(model, root, (prompts["query"], prompts["document"]),
                          [Split.parse(s) for s in sorted(set(frame["split"]))])
    ours = pd.DataFrame([{"move": key.split("/")[0], "split": key.split("/")[1],
                          **{name: 100 * s[name] for name in SCORE_NAMES}}
                         for key, s in old.items() if key.split("/")[1] in set(frame["split"])])
    return side_by_side(frame.drop(columns=["queries"], errors="ignore"), ours)


def mteb_after(model: str, root: Path, prompts: dict, cache: Path) -> object:
    from ratio_utils.evaluation.mteb_tasks import mteb_model, mteb_scores, project_scores, ratio_tasks, side_by_side

    encoder = mteb_model(model, prompts, cache_dir=cache)
    frame = mteb_scores(encoder, ratio_tasks(root), output=cache.parent / "mteb_results")
    return side_by_side(frame, project_scores(encoder.retriever.ref, root, prompts, cache_dir=cache))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/encode_once.py", description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", type=Path, default=None, help="default: the rebuilt benchmark of --params")
    parser.add_argument("--params", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--pool", type=int, default=None, help="cut each split's pool to N sentences (golds kept)")
    parser.add_argument("--max-queries", type=int, default=None, help="at most N queries per move and split")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: evaluate, mteb")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ratio_utils.config import load_config
    from ratio_utils.evaluation.mteb_tasks import SCORE_NAMES, generic_prompts

    source = args.benchmark or load_config(args.params).paths.benchmark
    if not Path(source).is_dir():
        print(f"no benchmark at {source}: build it with ./run_all.sh --to 06", file=sys.stderr)
        return 2
    _count_encodes()
    prompts = generic_prompts()
    prefixes = (prompts["query"], prompts["document"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="encode-once-") as tmp:
        tmp = Path(tmp)
        root = source
        if args.pool is not None or args.max_queries is not None:
            root = _reduced_copy(Path(source), tmp / "benchmark", args.pool, args.max_queries)
        from ratio_utils.dataset.benchmark import load_benchmark

        bench = load_benchmark(root)
        sizes = {s.value: len(bench.pool(s)) for s in _splits(bench) if s.value != "silver"}
        print(json.dumps({"benchmark": str(source), "reduced": root != source, "pool sizes": sizes,
                          "model": args.model}), flush=True)
        skip = {s.strip() for s in args.skip.split(",") if s.strip()}
        if "evaluate" not in skip:
            before, row_b = _timed("evaluate, before (a retriever per move, no cache)",
                                   lambda: evaluate_before(args.model, root, prefixes))
            after, row_a = _timed("evaluate, after (one retriever per split, memo + cache)",
                                  lambda: evaluate_after(args.model, root, prefixes, tmp / "cache-evaluate"))
            same = before.keys() == after.keys() and all(before[k] == after[k] for k in before)
            rows += [row_b, row_a]
            print(json.dumps({"evaluate": "scores identical" if same else "SCORES DIFFER",
                              "speed-up": round(row_b["seconds"] / max(row_a["seconds"], 1e-9), 2)}), flush=True)
        if "mteb" not in skip:
            old, row_b = _timed("mteb --compare, before (MTEB's wrapper, per-move evaluate)",
                                lambda: mteb_before(args.model, root, prompts))
            new, row_a = _timed("mteb --compare, after (project memo + cache)",
                                lambda: mteb_after(args.model, root, prompts, tmp / "cache-mteb"))
            rows += [row_b, row_a]
            columns = [f"{n} (MTEB)" for n in SCORE_NAMES] + [f"{n} (ratio_utils)" for n in SCORE_NAMES]
            old_scores = old.set_index(["move", "split"])[columns].sort_index()
            new_scores = new.set_index(["move", "split"])[columns].sort_index()
            difference = float((old_scores - new_scores).abs().max().max())
            print(json.dumps({"mteb --compare": "scores identical" if difference < 1e-9 else
                              f"scores differ by up to {difference:.6f} points",
                              "speed-up": round(row_b["seconds"] / max(row_a["seconds"], 1e-9), 2)}), flush=True)
            print(new.round(2).to_string(index=False))
    print()
    width = max(len(r["run"]) for r in rows) if rows else 10
    for row in rows:
        print(f"{row['run']:<{width}}  {row['sentences encoded']:>8,} sentences  {row['seconds']:>8.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
