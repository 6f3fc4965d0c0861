"""Stage 06 with bounded memory: the benchmark of `dataset/in_memory`, built hash bucket by hash bucket.

`stages/split_and_pool` takes this path when the mined rows exceed `dataset.max_in_memory_bytes`. It reads the
pairs and distractors one part at a time (a single file is one part), works in a temporary folder under
the benchmark's parent (removed at the end) and writes the release layout, each file through a temporary
name renamed when complete. The rows, their order and every count equal the in-memory build's
(`tests/test_dataset.py::test_bounded_build_equals_the_in_memory_build`).

Every step of the in-memory build is a rule about rows that share a key, so it runs on the rows of one
hash bucket of that key at a time:

1. per mined part: its papers (kept: one small row per paper, the only global table), its pairs into
   buckets of hash(query, gold), its distractors into buckets of hash(docid);
2. per pair bucket: de-duplication on (query, gold) keeping the earliest copy, the split of each
   paper; the kept pairs go on to buckets of hash(gold_id), their query ids to buckets of hash(query_id);
3. per id bucket: distractors equal to a gold dropped (and, under `distractor_fraction`, those not drawn),
   the pools (golds first, one row per docid), the test sentences of that bucket taken out of the train
   pool, and the row keys of train pairs built on a test sentence (kept: 8 bytes per dropped pair, the
   second global set);
4. per id bucket: those train pairs dropped, the leakage checks on the bucket, rows handed to output chunks;
5. per output file: its chunks in order (pairs by year, pools by year then corpus and paper-id prefix),
   each sorted in memory and appended.

The row order of the in-memory build is a total order on columns every row carries (the time order: date,
corpus, paper, paragraph, sentence, then the row's part and position), so a bucket sorted by it holds its
rows in their global order, and output chunks cut along its leading column concatenate to the whole.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from ..io import require_columns, write_parquet_chunks_atomic
from ..mining import DISTRACTOR_TABLE_COLUMNS, PAIR_TABLE_COLUMNS
from ..param_sections import SPLITS, DatasetParams
from ..parts import object_text, part_files, table_bytes
from ..schema import CANDIDATE_COLUMNS, MOVES, Move, Split
from .benchmark import candidates_path, pairs_path
from .in_memory import BuiltBenchmark, pool_of_split, publication_time, sample_distractors, with_split
from .leakage import (
    check_golds_in_pool,
    check_no_distractor_equals_gold,
    check_no_pair_in_two_splits,
    check_test_pool_disjoint_from_train,
    check_test_queries_not_in_train,
)
from .release import release_pairs
from .splits import paper_splits

# The total row order: publication time (pairs only; NaT for distractors), the mined order, the row's place.
ORDER = ("_when", "_corpus", "_paper", "_para", "_sent", "_part", "_row")
SPLIT_PAPER_COLUMNS = ["corpus", "paper_id", "year", "date"]  # what splitting needs of a paper
POOL_COLUMNS = list(CANDIDATE_COLUMNS)
LAST_YEAR = "~"  # a chunk name after every year (pairs without a publication time sort last)


def bucket_of(values: pd.DataFrame | pd.Series, buckets: int) -> np.ndarray:
    """The hash bucket of each row (pandas' fixed-key SipHash: the same in every process and run)."""
    return (pd.util.hash_pandas_object(values, index=False).to_numpy() % np.uint64(buckets)).astype(np.int64)


class _Buckets:
    """A folder of hash buckets, each a folder of parquet files written by different steps."""

    def __init__(self, root: Path, columns: list[str]):
        self.root = root
        self.columns = columns

    def scatter(self, frame: pd.DataFrame, buckets: np.ndarray, name: str) -> None:
        for bucket, rows in frame.groupby(buckets, sort=True):
            folder = self.root / f"b{int(bucket):05d}"
            folder.mkdir(parents=True, exist_ok=True)
            rows.to_parquet(folder / f"{name}.parquet", index=False)

    def read(self, bucket: int) -> pd.DataFrame:
        files = sorted((self.root / f"b{bucket:05d}").glob("*.parquet"))
        frames = [object_text(pd.read_parquet(f)) for f in files]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=self.columns)


def _with_order(frame: pd.DataFrame, part: int, timed: bool) -> pd.DataFrame:
    """The ORDER columns of rows read from mined part `part` (each part is sorted in the mined order)."""
    return frame.assign(
        _when=publication_time(frame) if timed else pd.Series(pd.NaT, index=frame.index, dtype="datetime64[ns]"),
        _corpus=frame["corpus"], _paper=frame["paper_id"], _para=frame["para"], _sent=frame["sent"],
        _part=part, _row=np.arange(len(frame), dtype=np.int64),
    )  # fmt: skip


def _in_order(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(ORDER), na_position="last").reset_index(drop=True)


def _row_keys(frame: pd.DataFrame) -> pd.Series:
    return frame["_part"].astype(np.int64) * (1 << 40) + frame["_row"].astype(np.int64)


def _chunk_name(frame: pd.DataFrame, with_source: bool) -> pd.Series:
    """The output chunk of each row, as text whose order is the rows' order: the year (golds and pairs), or, for
    pool distractors (after every gold), the corpus and the paper id's first two characters."""
    years = frame["_when"].dt.year
    year = years.map(lambda y: LAST_YEAR if pd.isna(y) else f"{int(y):04d}")
    if not with_source:
        return year
    is_gold = frame["_source_rank"].eq(0)
    mined = "1" + frame["_corpus"].astype(str) + "\x1f" + frame["_paper"].astype(str).str[:2]
    return ("0" + year).where(is_gold, mined)


def _scatter_chunks(frame: pd.DataFrame, names: pd.Series, root: Path, bucket: int) -> None:
    for name, rows in frame.groupby(names, sort=True):
        # hex keeps the byte order of the name, so folders sort as chunks do
        folder = root / name.encode("utf-8").hex()
        folder.mkdir(parents=True, exist_ok=True)
        rows.to_parquet(folder / f"b{bucket:05d}.parquet", index=False)


def _chunks(root: Path) -> Iterator[pd.DataFrame]:
    for folder in sorted(p for p in root.glob("*") if p.is_dir()):
        yield _in_order(pd.concat([object_text(pd.read_parquet(f)) for f in sorted(folder.glob("*.parquet"))],
                                  ignore_index=True))


def _release_chunks(root: Path, empty: pd.DataFrame, transform) -> Iterator[pd.DataFrame]:
    """The chunks under `root` in order, transformed; the empty table's columns when there are none."""
    wrote = False
    for chunk in _chunks(root) if root.is_dir() else ():
        wrote = True
        yield transform(chunk)
    if not wrote:
        yield transform(empty)


def _zero_counts(counts: Counter) -> None:
    """Every count the in-memory build sets, present even when nothing adds to it."""
    for key in ("pairs.dropped.duplicate_query_gold", "pairs.dropped.paper_without_usable_date",
                "distractors.dropped.paper_without_usable_date", "distractors.dropped.equal_to_a_gold",
                "pool.dropped_from_train_as_in_test", "pairs.dropped.train_pair_touching_test"):
        counts[key] += 0
    for split in SPLITS:
        counts[f"pool.dropped_duplicates.{split}"] += 0
        counts[f"pool.size.{split}"] += 0
        for move in MOVES:
            counts[f"pairs.kept.{split}.{move.value}"] += 0


def build_bounded(pairs_table: "str | Path", distractors_table: "str | Path", params: DatasetParams,
                  root: "str | Path", buckets: int | None = None) -> BuiltBenchmark:
    """Build, check and write the benchmark under `root` (release layout), bucket by bucket; the BuiltBenchmark holds
    the papers, the counts and, of the rows, only what Table 5 and the figures read (see `_summary`).

    `buckets`: how many hash buckets; by default enough for `dataset.bucket_bytes` of mined rows each (every
    bucket writes a file per output chunk, so more buckets than the memory needs cost time, not rows)."""
    pairs_table, distractors_table, root = Path(pairs_table), Path(distractors_table), Path(root)
    if buckets is None:
        buckets = max(1, -(-(table_bytes(pairs_table) + table_bytes(distractors_table)) // params.bucket_bytes))
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".dataset-buckets-", dir=root.parent))
    try:
        return _build(pairs_table, distractors_table, params, root, work, buckets)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class _Work:
    """What the phases of `_build` hand on: the counts every phase adds to and the bucket folders one phase
    writes and a later one reads (under the work folder, removed by `build_bounded`)."""

    folder: Path
    n: int  # hash buckets
    counts: Counter
    pair_columns: list[str]
    by_pair: _Buckets
    by_doc: _Buckets
    by_gold: _Buckets
    by_query: _Buckets
    pools_of: _Buckets

    @classmethod
    def start(cls, folder: Path, n: int) -> _Work:
        counts: Counter = Counter()
        _zero_counts(counts)
        pair_columns = list(PAIR_TABLE_COLUMNS) + list(ORDER)
        return cls(
            folder, n, counts, pair_columns,
            by_pair=_Buckets(folder / "pairs_by_query_gold", pair_columns),
            by_doc=_Buckets(folder / "distractors_by_docid", list(DISTRACTOR_TABLE_COLUMNS) + list(ORDER)),
            by_gold=_Buckets(folder / "pairs_by_gold_id", pair_columns + ["split"]),
            by_query=_Buckets(folder / "queries_by_query_id", ["query_id", "split", "_part", "_row"]),
            pools_of=_Buckets(folder / "pools_by_docid", POOL_COLUMNS + ["split", "_source_rank", *ORDER]),
        )  # fmt: skip


def _build(pairs_table: Path, distractors_table: Path, params: DatasetParams, root: Path, work: Path,
           n: int) -> BuiltBenchmark:
    state = _Work.start(work, n)
    papers = _scatter_mined(pairs_table, distractors_table, state)
    papers = _split_papers(papers, params, state.counts)
    split_of = papers.set_index(["corpus", "paper_id"])["split"]
    _dedupe_and_split(state, split_of)
    leaks = _pools_and_leaks(state, split_of, params)
    _drop_leaks_check_and_chunk(state, leaks)
    _write_release(state, root)
    return BuiltBenchmark(_summary(root), _pool_sources(root), papers, state.counts)


def _scatter_mined(pairs_table: Path, distractors_table: Path, state: _Work) -> list[pd.DataFrame]:
    """Phase 1: every mined part read once; its papers kept, its rows scattered."""
    papers = []
    counts, n = state.counts, state.n
    counts["pairs.mined"] = 0
    for part, path in enumerate(part_files(pairs_table)):
        frame = object_text(pd.read_parquet(path))
        require_columns(frame, PAIR_TABLE_COLUMNS, path)
        counts["pairs.mined"] += len(frame)
        papers.append(frame[SPLIT_PAPER_COLUMNS].drop_duplicates(["corpus", "paper_id"]))
        state.by_pair.scatter(_with_order(frame, part, timed=True), bucket_of(frame[["query", "gold"]], n),
                              f"part-{part:05d}")
    for part, path in enumerate(part_files(distractors_table)):
        frame = object_text(pd.read_parquet(path))
        require_columns(frame, DISTRACTOR_TABLE_COLUMNS, path)
        papers.append(frame[SPLIT_PAPER_COLUMNS].drop_duplicates(["corpus", "paper_id"]))
        state.by_doc.scatter(_with_order(frame, part, timed=False), bucket_of(frame["docid"], n), f"part-{part:05d}")
    return papers


def _split_papers(papers: list[pd.DataFrame], params: DatasetParams, counts: Counter) -> pd.DataFrame:
    """The end of phase 1: the split of every paper (the one global table), counted."""
    papers = paper_splits(papers, params)
    for reason, count in papers["excluded_reason"].value_counts().items():
        counts[f"papers.excluded.{reason}"] = int(count)
    for split, count in papers["split"].value_counts().items():
        counts[f"papers.assigned.{split}"] = int(count)
    return papers


def _dedupe_and_split(state: _Work, split_of: pd.Series) -> None:
    """Phase 2, per (query, gold) bucket: dedupe (the earliest copy) and split."""
    counts, n = state.counts, state.n
    for bucket in range(n):
        ordered = _in_order(state.by_pair.read(bucket))
        deduped = ordered.drop_duplicates(["query", "gold"], keep="first")
        counts["pairs.dropped.duplicate_query_gold"] += len(ordered) - len(deduped)
        kept = with_split(deduped, split_of, counts, "pairs")
        state.by_gold.scatter(kept, bucket_of(kept["gold_id"], n), f"from-{bucket:05d}")
        state.by_query.scatter(kept[["query_id", "split", "_part", "_row"]], bucket_of(kept["query_id"], n),
                               f"from-{bucket:05d}")


def _pools_and_leaks(state: _Work, split_of: pd.Series, params: DatasetParams) -> set[int]:
    """Phase 3, per id bucket: distractors equal to a gold, pools, test sentences out of the train pool.
    Returns the row keys of the train pairs built on a test sentence."""
    counts = state.counts
    leaks: set[int] = set()
    for bucket in range(state.n):
        golds = _in_order(state.by_gold.read(bucket))
        distractors = with_split(_in_order(state.by_doc.read(bucket)), split_of, counts, "distractors")
        is_gold = distractors["docid"].isin(set(golds["gold_id"]))
        counts["distractors.dropped.equal_to_a_gold"] += int(is_gold.sum())
        distractors = sample_distractors(distractors[~is_gold], params, counts)
        carry = ("split", "_source_rank", *ORDER)
        pools = {split: pool_of_split(golds[golds["split"] == split].assign(_source_rank=0),
                              distractors[distractors["split"] == split].assign(_source_rank=1), counts, split, carry)
                 for split in SPLITS}  # fmt: skip
        queries = state.by_query.read(bucket)
        test_ids = set(pools["test"]["docid"]) | set(queries.loc[queries["split"] == "test", "query_id"])
        shared = pools["train"]["docid"].isin(test_ids)
        counts["pool.dropped_from_train_as_in_test"] += int(shared.sum())
        pools["train"] = pools["train"][~shared]
        train_golds, train_queries = golds[golds["split"] == "train"], queries[queries["split"] == "train"]
        leaks.update(_row_keys(train_golds[train_golds["gold_id"].isin(test_ids)]))
        leaks.update(_row_keys(train_queries[train_queries["query_id"].isin(test_ids)]))
        pool_rows = pd.concat(list(pools.values()), ignore_index=True)
        if len(pool_rows):
            state.pools_of.scatter(pool_rows, np.full(len(pool_rows), bucket), "pools")
    counts["pairs.dropped.train_pair_touching_test"] = len(leaks)
    return leaks


def _drop_leaks_check_and_chunk(state: _Work, leaks: set[int]) -> None:
    """Phase 4, per id bucket: the train pairs built on a test sentence dropped, leakage checks, output chunks."""
    counts, out = state.counts, state.folder / "out"
    leak_keys = np.fromiter(leaks, dtype=np.int64, count=len(leaks))
    for bucket in range(state.n):
        golds = state.by_gold.read(bucket)
        golds = golds[~_row_keys(golds).isin(leak_keys)] if len(golds) else golds
        queries = state.by_query.read(bucket)
        queries = queries[~_row_keys(queries).isin(leak_keys)] if len(queries) else queries
        pool_rows = state.pools_of.read(bucket)
        pools = {split: pool_rows[pool_rows["split"] == split] for split in SPLITS}
        check_no_pair_in_two_splits(golds)  # the same (query, gold) has the same gold id: one bucket
        check_test_pool_disjoint_from_train(pools)
        check_test_queries_not_in_train(pools, queries)
        check_no_distractor_equals_gold(pools, golds)
        check_golds_in_pool(pools, golds)
        for split in SPLITS:
            counts[f"pool.size.{split}"] += len(pools[split])
            if len(pools[split]):
                _scatter_chunks(pools[split], _chunk_name(pools[split], with_source=True), out / "pool" / split,
                                bucket)
            for move in MOVES:
                rows = golds[(golds["split"] == split) & (golds["move"] == move.value)]
                counts[f"pairs.kept.{split}.{move.value}"] += len(rows)
                if len(rows):
                    _scatter_chunks(rows, _chunk_name(rows, with_source=False), out / "pairs" / split / move.value,
                                    bucket)


def _write_release(state: _Work, root: Path) -> None:
    """Phase 5: the release files, chunk by chunk."""
    out = state.folder / "out"
    empty_pairs = pd.DataFrame(columns=state.pair_columns)
    empty_pool = pd.DataFrame(columns=POOL_COLUMNS)
    for split in SPLITS:
        for move in MOVES:
            write_parquet_chunks_atomic(_release_chunks(out / "pairs" / split / move.value, empty_pairs,
                                                        release_pairs),
                                        pairs_path(root, Move.parse(move), Split.parse(split)))
        write_parquet_chunks_atomic(_release_chunks(out / "pool" / split, empty_pool, lambda c: c[POOL_COLUMNS]),
                                    candidates_path(root, Split.parse(split)))


def _summary(root: Path) -> pd.DataFrame:
    """The kept pairs' columns that Table 5, its notes and the figures read (about 100 bytes a pair), from the
    release."""
    frames = []
    for split in SPLITS:
        for move in MOVES:
            frame = pd.read_parquet(pairs_path(root, move, Split.parse(split)),
                                    columns=["corpusid", "year", "queryTerm", "query_id"])
            frames.append(frame.rename(columns={"corpusid": "paper_id", "queryTerm": "marker"})
                          .assign(split=split, move=move.value))
    return pd.concat(frames, ignore_index=True).astype({"split": "category", "move": "category"})


def _pool_sources(root: Path) -> dict[str, pd.DataFrame]:
    """Each pool's `source` column only (one byte a sentence as a category): what Table 5 counts."""
    return {split: pd.read_parquet(candidates_path(root, Split.parse(split)), columns=["source"]).astype("category")
            for split in SPLITS}
