"""Rank one (move, split) of a benchmark with a retriever, write the run, return its metrics.

Serves notebooks 08–09 and the evaluate command. Writes, when `out_dir` is given:
`<out_dir>/<system>/<move>/<split>.parquet` and `.trec` (the run) and `.metrics.json` (scores,
number of queries, retriever settings, benchmark checksum-free so it stays cheap to write).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ..benchmark import Benchmark
from ..io import write_json_atomic
from ..metrics import DEFAULT_KS, evaluate_run
from ..schema import Move, Split
from .base import Retriever
from .runs import run_path, write_run


def benchmark_queries(bench: Benchmark, move: Move | str, split: Split | str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queries: qid, text — each query sentence once; qrels: qid, docid) of one move and split.

    A query sentence that occurs in two pairs of the same move is one query with two relevant
    candidates (ids are text hashes); the count is logged in the metrics file, not hidden.
    """
    pairs = bench.queries(move, split)
    queries = (
        pairs[["query_id", "querySentence"]]
        .rename(columns={"query_id": "qid", "querySentence": "text"})
        .drop_duplicates("qid")
        .reset_index(drop=True)
    )
    return queries, bench.qrels(move, split)


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
) -> dict[str, float]:
    """Search the split's pool for every query of (move, split); metrics as fractions in [0, 1].

    `max_queries` keeps the first n queries by id (ids are hashes, so this is a fixed pseudo-random
    sample) for smoke runs; the pool is never cut.
    """
    move, split = Move.parse(move), Split.parse(split)
    queries, qrels = benchmark_queries(bench, move, split)
    if max_queries is not None and len(queries) > max_queries:
        queries = queries.sort_values("qid").head(max_queries).reset_index(drop=True)
        qrels = qrels[qrels["qid"].isin(set(queries["qid"]))]
    pool = bench.pool(split)
    started = time.perf_counter()
    run = retriever.search(queries, pool, k=k)
    seconds = time.perf_counter() - started
    scores = evaluate_run(run, qrels, ks=[c for c in ks if c <= k] or [k])
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
    return scores
