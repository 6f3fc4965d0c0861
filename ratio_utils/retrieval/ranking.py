"""Rank one (move, split) of a benchmark with a retriever and write the run.

Serves notebooks 08–12. `record_run` writes a run with its sidecar
(`runs.RunInfo`, benchmark checksum included), the form Tables 1, 7, 8 are assembled from
(ratio_utils.reporting.paper_tables); `get_or_record_run` does so only where no run file has the same key
(`runs.get_or_compute`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from ..dataset.benchmark import Benchmark
from .base import Retriever
from .runs import RunInfo, StoredRun, get_or_compute, write_system_run


def run_queries(bench: Benchmark, info: RunInfo) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queries, qrels) of exactly the queries a run covers (its sidecar says which)."""
    evalset = bench.eval_set(info.move, info.split, max_queries=info.max_queries, qids=info.qids)
    return evalset.queries, evalset.qrels


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
