"""Rank one (move, split) with a retriever and score the run: the one "rank, then score" helper.

Serves the evaluate command (`evaluation/scoring`) and the stages that score a retriever. Writes, when `out_dir`
is given, `<out_dir>/<system>/<move>/<split>.parquet` and `.trec` and `.metrics.json` (scores, number of
queries, retriever settings).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ..dataset.benchmark import Benchmark, EvalSet
from ..io import write_json_atomic
from ..retrieval.base import Retriever
from ..retrieval.runs import run_path, write_run
from ..schema import Move, Split
from .metrics import DEFAULT_KS, evaluate_run, per_query_metrics


def rank_and_score(retriever: Retriever, evalset: EvalSet, ks: tuple[int, ...] = DEFAULT_KS, *, k: int | None = None,
                   ndcg_ks: tuple[int, ...] = ()) -> tuple[pd.DataFrame, dict[str, float]]:
    """Rank an evaluation set's queries against its pool (the top `k`, default the largest cut-off) and score the run
    at the cut-offs up to `k`: the one "rank, then score" every scorer calls (evaluate, fine-tuning's validation,
    selection and test scores, the tuned ColBERT, the unified retriever)."""
    k = k or max(ks)
    run = retriever.search(evalset.queries, evalset.pool, k=k)
    scores = evaluate_run(run, evalset.qrels, ks=[c for c in ks if c <= k] or [k], ndcg_ks=[c for c in ndcg_ks if c <= k])
    return run, scores


def run_and_score(
    retriever: Retriever,
    bench: Benchmark,
    move: Move | str,
    split: Split | str,
    *,
    k: int = 100,
    out_dir: Path | None = None,
    ks: tuple[int, ...] = DEFAULT_KS,
    max_queries: int | None = None,
    ndcg_ks: tuple[int, ...] = (),
    per_query: bool = False,
):
    """Search the split's pool for every query of (move, split); metrics as fractions in [0, 1].

    `max_queries` keeps the first n queries by id (ids are hashes, so this is a fixed pseudo-random
    sample) for smoke runs; the pool is never cut. `ndcg_ks`: also nDCG at these cut-offs. `per_query`: return
    (scores, per-query values of every metric, one row per query) instead of the scores alone, for intervals.
    """
    move, split = Move.parse(move), Split.parse(split)
    evalset = bench.eval_set(move, split, max_queries=max_queries)
    queries, qrels, pool = evalset.queries, evalset.qrels, evalset.pool
    started = time.perf_counter()
    run, scores = rank_and_score(retriever, evalset, ks, k=k, ndcg_ks=ndcg_ks)
    seconds = time.perf_counter() - started
    if out_dir is not None:
        path = run_path(out_dir, retriever.name, move, split)
        write_run(run, path, retriever.name)
        write_json_atomic(
            path.with_suffix(".metrics.json"),
            {
                "system": retriever.name,
                "retriever": retriever.describe(),
                "move": move.value,
                "split": split.value,
                "k": k,
                "queries": int(len(queries)),
                "pairs": int(len(qrels)),
                "pool": int(len(pool)),
                "search_seconds": round(seconds, 3),
                "scores": scores,
            },
        )
    if per_query:
        return scores, per_query_metrics(run, qrels, list(scores))
    return scores
