"""Rank one (move, split) of a benchmark with a retriever, write the run, return its metrics.

Serves notebooks 08–12 and the evaluate command. `record_run` writes a run with its sidecar
(`runs.RunInfo`, benchmark checksum included), the form Tables 1, 7, 8 are assembled from
(ratio_utils.reporting.paper_tables); `get_or_record_run` does so only where no run file has the same key
(`runs.get_or_compute`). `run_and_score` (the evaluate command) writes, when `out_dir` is given,
`<out_dir>/<system>/<move>/<split>.parquet` and `.trec` and `.metrics.json` (scores, number of
queries, retriever settings).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from ..dataset.benchmark import Benchmark
from ..evaluation.metrics import DEFAULT_KS, evaluate_run
from ..io import write_json_atomic
from ..schema import Move, Split
from .base import Retriever
from .runs import RunInfo, StoredRun, get_or_compute, run_path, write_run, write_system_run


def benchmark_queries(
    bench: Benchmark, move: Move | str, split: Split | str, *, max_queries: int | None = None,
    qids: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queries: qid, text — each query sentence once; qrels: qid, docid) of one move and split.

    A query sentence that occurs in two pairs of the same move is one query with two relevant
    candidates (ids are text hashes); the count is logged in the metrics file, not hidden.
    `qids` keeps those queries; `max_queries` keeps the first n by id (ids are hashes, so this is a
    fixed pseudo-random sample, the same in every stage that scores the run).
    """
    pairs = bench.queries(move, split)
    queries = (
        pairs[["query_id", "querySentence"]]
        .rename(columns={"query_id": "qid", "querySentence": "text"})
        .drop_duplicates("qid")
        .reset_index(drop=True)
    )
    if qids is not None:
        queries = queries[queries["qid"].isin(set(qids))].reset_index(drop=True)
    if max_queries is not None and len(queries) > max_queries:
        queries = queries.sort_values("qid").head(max_queries).reset_index(drop=True)
    qrels = bench.qrels(move, split)
    return queries, qrels[qrels["qid"].isin(set(queries["qid"]))].reset_index(drop=True)


def run_queries(bench: Benchmark, info: RunInfo) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queries, qrels) of exactly the queries a run covers (its sidecar says which)."""
    return benchmark_queries(bench, info.move, info.split, max_queries=info.max_queries, qids=info.qids)


def record_run(retriever: Retriever, bench: Benchmark, info: RunInfo, runs_dir: Path) -> pd.DataFrame:
    """Search the queries the sidecar names against the split's pool; write the run and its sidecar."""
    queries, _ = run_queries(bench, info)
    run = retriever.search(queries, bench.pool(info.split), k=info.k)
    write_system_run(run, runs_dir, dataclasses.replace(info, retriever=retriever.describe()))
    return run


def get_or_record_run(
    make_retriever: Callable[[], Retriever], bench: Benchmark, info: RunInfo, runs_dir: Path, *,
    prefixes: tuple[str, str] | None = None, stand_ins: Sequence[Path] = (),
) -> StoredRun:
    """`record_run` unless a run file with the same key is there (runs.get_or_compute); the retriever is
    built only when the run must be computed."""
    def compute():
        retriever = make_retriever()
        queries, _ = run_queries(bench, info)
        return retriever.search(queries, bench.pool(info.split), k=info.k), retriever.describe()

    return get_or_compute(runs_dir, info, compute, prefixes=prefixes, stand_ins=stand_ins)


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
    queries, qrels = benchmark_queries(bench, move, split, max_queries=max_queries)
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
