"""A system's runs: which queries a run covers, the one search that ranks them, the one rule by which a stage
reuses a run file instead of ranking again (`get_or_compute`, `reusable`: same retriever, benchmark, move, split
and queries), and recording (`record_run` always writes; `get_or_record_run` writes only what no file holds).

The files themselves (parquet + TREC, the `.run.json` sidecar `RunInfo`, system names, setting aside another
benchmark's runs) are `retrieval/runs`, the format notebook 10's reranker writes too. Serves notebooks 08, 09
(`train/tuned_runs`), 11 (`retrieval_analysis/analysed_runs`) and 12.

Writes: <runs_dir>/<system>/<move>/<split>.{parquet,trec,run.json} (record_run, get_or_compute).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..dataset.benchmark import Benchmark
from ..retrieval.base import Retriever
from ..retrieval.runs import RunInfo, info_path, read_run, read_run_info, recorded_prefixes, run_path, write_system_run
from ..schema import MOVES, Move, Split
from .families import ranking_rule


def runnable(bench: Benchmark, splits: list[Split]) -> list[tuple[Move, Split]]:
    """The (move, split) pairs of `splits` that the benchmark has, with at least one query."""
    return [(m, s) for m in MOVES for s in splits if bench.has(m, s) and len(bench.queries(m, s)) > 0]


def run_queries(bench: Benchmark, info: RunInfo) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queries, qrels) of exactly the queries a run covers (its sidecar says which)."""
    evalset = bench.eval_set(info.move, info.split, max_queries=info.max_queries, qids=info.qids)
    return evalset.queries, evalset.qrels


def search_run(retriever: Retriever, bench: Benchmark, info: RunInfo) -> tuple[pd.DataFrame, dict]:
    """The one search of a system run: the queries the sidecar names against the split's pool, top `info.k`;
    returns the run and the retriever's `describe()` (what the sidecar records)."""
    queries, _ = run_queries(bench, info)
    return retriever.search(queries, bench.pool(info.split), k=info.k), retriever.describe()


def record_run(retriever: Retriever, bench: Benchmark, info: RunInfo, runs_dir: Path) -> pd.DataFrame:
    """Search (`search_run`) and write the run and its sidecar under runs_dir, whatever is there."""
    run, described = search_run(retriever, bench, info)
    write_system_run(run, runs_dir, _stamped(info, described))
    return run


def _stamped(info: RunInfo, described: dict) -> RunInfo:
    """The sidecar of a run just computed: the retriever's description and its family's ranking rule."""
    return dataclasses.replace(info, retriever=described, ranking=ranking_rule(info.family))


# -- reuse: one rule for every stage that would otherwise rank again what a run file holds ----------


def reusable(path: Path, wanted: RunInfo, prefixes: tuple[str, str] | None = None) -> bool:
    """Whether the run file at `path` holds the ranking `wanted` asks for, so that it need not be computed.

    The key: the retriever (family and its ranking rule, `Family.ranking`; the model fingerprint where both
    sidecars record one, else the model source, as notebook 08 records an installed model by name; the prefixes,
    where given), the benchmark checksum, the move and split, and the queries (max_queries sample or qids list).
    The file must rank at least `wanted.k` candidates. The display name and the stage that wrote it are not part of
    the key, so notebook 11 can read notebook 08's run of the same model. The pool is the split's: a caller that
    ranks another pool keeps those runs in their own folder.
    """
    path = Path(path)
    if not (path.exists() and info_path(path).exists()):
        return False
    found = read_run_info(path)
    if wanted.model_fingerprint and found.model_fingerprint:
        same_model = found.model_fingerprint == wanted.model_fingerprint
    else:
        same_model = found.source == wanted.source
    return (same_model and found.ranking == ranking_rule(wanted.family) and found.family == wanted.family
            and found.benchmark_checksum == wanted.benchmark_checksum
            and (found.move, found.split) == (wanted.move, wanted.split)
            and found.max_queries == wanted.max_queries and found.qids == wanted.qids and found.k >= wanted.k
            and (prefixes is None or recorded_prefixes(found) == tuple(prefixes)))


@dataclass(frozen=True)
class StoredRun:
    """A run got through `get_or_compute`: the ranking, the file that holds it, whether it was read back."""

    run: pd.DataFrame
    path: Path
    reused: bool


def get_or_compute(
    runs_dir: Path, wanted: RunInfo, compute: Callable[[], tuple[pd.DataFrame, dict]], *,
    prefixes: tuple[str, str] | None = None, stand_ins: Sequence[Path] = (),
) -> StoredRun:
    """The run `wanted` describes: read back where a file has its key (`reusable`), else computed and written.

    `stand_ins` are other stages' run files that may hold the same ranking (notebook 08's or 09's), read
    and never written; then runs_dir/<system>/<move>/<split>. Otherwise `compute()` returns the run and
    its retriever's `describe()`, and the run is written under runs_dir with its sidecar.
    """
    own = run_path(runs_dir, wanted.system, wanted.move, wanted.split)
    for path in (*stand_ins, own):
        if reusable(path, wanted, prefixes):
            return StoredRun(read_run(path), Path(path), True)
    run, described = compute()
    write_system_run(run, runs_dir, _stamped(wanted, described))
    return StoredRun(run, own, False)


def get_or_record_run(
    make_retriever: Callable[[], Retriever], bench: Benchmark, info: RunInfo, runs_dir: Path, *,
    prefixes: tuple[str, str] | None = None, stand_ins: Sequence[Path] = (),
) -> StoredRun:
    """`record_run` unless a run file with the same key is there (`get_or_compute`); the retriever is built only
    when the run must be computed."""
    return get_or_compute(runs_dir, info, lambda: search_run(make_retriever(), bench, info), prefixes=prefixes,
                          stand_ins=stand_ins)
