"""The one scorer of a run: `score_run` scores a run in memory or from its file, aggregate or per query, against
the qrels; `score_run_file` scores a recorded system run on exactly the queries its sidecar names (`ScoredRun`, what
Tables 1, 7, 8 are assembled from); `rank_and_score` and `run_and_score` rank with a retriever, then score.

Serves the evaluate command (`evaluation/scoring`), the tables (`reporting/paper_tables`), fine-tuning's validation,
selection and test scores, and notebooks 11 and 13. Writes, when `run_and_score` has an `out_dir`,
`<out_dir>/<system>/<move>/<split>.parquet` and `.trec` and `.metrics.json` (scores, number of queries, retriever
settings).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..dataset.benchmark import Benchmark, EvalSet
from ..io import InputError, write_json_atomic
from ..retrieval.base import Retriever
from ..retrieval.runs import RunInfo, read_run, run_path, write_run
from ..schema import Move, Split
from ..systems.runs import run_queries
from .metrics import DEFAULT_KS, evaluate_run, per_query_metrics


def score_run(run: pd.DataFrame | Path, qrels: pd.DataFrame, *, ks: Sequence[int] = DEFAULT_KS,
              ndcg_ks: Sequence[int] = (), metrics: Sequence[str] | None = None, per_query: bool = False):
    """Score a run (a frame, or the path of its .parquet or .trec file) against `qrels`, metrics as fractions in [0,
    1].

    Aggregate (default): {metric: mean} at the cut-offs `ks` (R, MRR, HR) and `ndcg_ks` (metrics.evaluate_run).
    `per_query`: one row per query of the qrels (index qid, sorted), one column per metric of `metrics`
    (metrics.per_query_metrics): what intervals and paired tests resample."""
    frame = read_run(run) if isinstance(run, (str, Path)) else run
    if per_query:
        if metrics is None:
            raise ValueError("score_run(per_query=True) needs the metrics to compute, e.g. ['MRR@10', 'R@10']")
        return per_query_metrics(frame, qrels, metrics)
    return evaluate_run(frame, qrels, ks=ks, ndcg_ks=ndcg_ks)


@dataclass(frozen=True)
class ScoredRun:
    """One run file, scored per query on the queries its sidecar names."""

    info: RunInfo  # its sidecar
    path: Path  # the run file
    per_query: pd.DataFrame  # index qid (sorted), one column per metric name ('MRR@10', ...)
    all_queries: int  # the queries of its move and split in the benchmark, covered or not

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.info.model, self.info.prefix, self.info.setup)

    @property
    def sample_note(self) -> str | None:
        """What a run on a listed sample of the queries covers (notebook 10's rerank.max_queries), or None."""
        if self.info.qids is None or len(self.per_query) >= self.all_queries:
            return None
        return (f"a seeded sample of {len(self.per_query):,} of the {self.all_queries:,} {self.info.split} queries "
                "(rerank.max_queries, the same queries for every first stage)")

    @property
    def scope_note(self) -> str | None:
        """What a comparison on this run must say beside its numbers: the sample it covers and the run's own notes
        (e.g. reranking requests without an answer, whose queries keep their first-stage ranking), or None."""
        return "; ".join(filter(None, [self.sample_note, *self.info.notes])) or None


def score_run_file(bench: Benchmark, info: RunInfo, path: Path, metrics: Sequence[str]) -> ScoredRun:
    """A recorded system run scored per query on the queries its sidecar names; none of them in the benchmark is an
    error naming the file."""
    _, qrels = run_queries(bench, info)
    if qrels.empty:
        raise InputError(path, f"no query of {info.move}/{info.split} in the benchmark matches this run")
    per_query = score_run(path, qrels, metrics=metrics, per_query=True).sort_index()
    return ScoredRun(info, path, per_query, bench.queries(info.move, info.split)["query_id"].nunique())


def rank_and_score(retriever: Retriever, evalset: EvalSet, ks: tuple[int, ...] = DEFAULT_KS, *, k: int | None = None,
                   ndcg_ks: tuple[int, ...] = ()) -> tuple[pd.DataFrame, dict[str, float]]:
    """Rank an evaluation set's queries against its pool (the top `k`, default the largest cut-off) and score the run
    at the cut-offs up to `k`: the one "rank, then score" every scorer calls (evaluate, fine-tuning's validation,
    selection and test scores, the tuned ColBERT, the unified retriever)."""
    k = k or max(ks)
    run = retriever.search(evalset.queries, evalset.pool, k=k)
    scores = score_run(run, evalset.qrels, ks=[c for c in ks if c <= k] or [k], ndcg_ks=[c for c in ndcg_ks if c <= k])
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
        return scores, score_run(run, qrels, metrics=list(scores), per_query=True)
    return scores
