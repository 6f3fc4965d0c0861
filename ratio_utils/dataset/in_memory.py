"""Stage 06 in one process: de-duplicate the mined pairs, split them, build the shared pools, resolve the
train/test overlap and run the leakage checks, on whole in-memory tables (paper §4.2, App. B.2).

Paper §4.2 and App. B.2: pairs are de-duplicated on (query, gold), then partitioned by the publication
date of their paper. Each split has one candidate pool shared by the three moves: the gold sentences of
all moves plus the distractors from that split's papers (`dataset.distractor_fraction` < 1: a seeded
draw of them), de-duplicated, with no distractor equal to a gold sentence. Nothing of the test split
reaches training: a test-pool sentence or test query that also occurs in the train pool is removed from
it, and train pairs built on it are dropped (all counted).
Reads and writes no file (`ratio_utils.stages.split_and_pool` does); `dataset/bounded` gives the same benchmark
bucket by bucket.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..mining import counts_to_report, read_mined
from ..param_sections import SPLITS, DatasetParams
from ..parts import table_bytes
from ..schema import MOVES, SEEDED_HASH_RANGE, seeded_hash
from .leakage import run_leakage_checks
from .splits import paper_splits


def publication_time(frame: pd.DataFrame) -> pd.Series:
    """When each row's paper appeared: its date, else 1 Jan of its year, else NaT."""
    when = pd.to_datetime(frame["date"], errors="coerce")
    years = pd.to_numeric(frame["year"], errors="coerce")
    fallback = pd.to_datetime(years.dropna().astype(int).astype(str) + "-01-01", errors="coerce").reindex(frame.index)
    return when.fillna(fallback)


def _time_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Earliest paper first (date, else 1 Jan of its year), then paper and position: the copy dedupe keeps."""
    order = frame.assign(_when=publication_time(frame))
    order = order.sort_values(["_when", "corpus", "paper_id", "para", "sent"], kind="stable", na_position="last")
    return order.drop(columns="_when")


@dataclass
class BuiltBenchmark:
    pairs: pd.DataFrame  # every kept pair with its `split`
    pools: dict[str, pd.DataFrame]  # split -> docid, text, source, corpusid
    papers: pd.DataFrame  # paper_splits() of the mined papers
    counts: Counter

    def report(self) -> dict[str, Any]:
        return counts_to_report(self.counts)


def build_benchmark(pairs: pd.DataFrame, distractors: pd.DataFrame, params: DatasetParams) -> BuiltBenchmark:
    """De-duplicate, split, pool, resolve train/test overlap, and run the leakage checks."""
    counts: Counter = Counter()
    counts["pairs.mined"] = len(pairs)
    ordered = _time_order(pairs)
    deduped = ordered.drop_duplicates(["query", "gold"], keep="first")
    counts["pairs.dropped.duplicate_query_gold"] = len(ordered) - len(deduped)

    papers = paper_splits([pairs, distractors], params)
    for reason, n in papers["excluded_reason"].value_counts().items():
        counts[f"papers.excluded.{reason}"] = int(n)
    for split, n in papers["split"].value_counts().items():
        counts[f"papers.assigned.{split}"] = int(n)
    split_of = papers.set_index(["corpus", "paper_id"])["split"]
    kept = with_split(deduped, split_of, counts, "pairs")
    kept_distractors = with_split(distractors, split_of, counts, "distractors")

    all_gold_ids = set(kept["gold_id"])
    is_gold = kept_distractors["docid"].isin(all_gold_ids)
    counts["distractors.dropped.equal_to_a_gold"] = int(is_gold.sum())
    kept_distractors = sample_distractors(kept_distractors[~is_gold], params, counts)

    pools = {split: pool_of_split(kept[kept["split"] == split], kept_distractors[kept_distractors["split"] == split],
                                  counts, split) for split in SPLITS}
    kept, pools = _remove_test_sentences_from_train(kept, pools, counts)
    for split in SPLITS:
        counts[f"pool.size.{split}"] = len(pools[split])
        for move in MOVES:
            counts[f"pairs.kept.{split}.{move.value}"] = int(((kept["split"] == split)
                                                              & (kept["move"] == move.value)).sum())
    run_leakage_checks(kept, pools)
    return BuiltBenchmark(kept, pools, papers, counts)


def with_split(frame: pd.DataFrame, split_of: pd.Series, counts: Counter, what: str) -> pd.DataFrame:
    """The rows whose paper has a split, with that split; the others dropped and counted (`split_of`: the
    split per (corpus, paper_id), from paper_splits)."""
    keys = pd.MultiIndex.from_frame(frame[["corpus", "paper_id"]].astype(object)) if len(frame) else None
    frame = frame.assign(split=split_of.reindex(keys).to_numpy() if keys is not None else [])
    excluded = frame["split"].isna()
    counts[f"{what}.dropped.paper_without_usable_date"] += int(excluded.sum())
    return frame[~excluded].reset_index(drop=True)


def sample_distractors(distractors: pd.DataFrame, params: DatasetParams, counts: Counter) -> pd.DataFrame:
    """The distractors drawn for the pools: every one at `dataset.distractor_fraction` 1 (the paper's pools), else
    those whose docid hashes below that share of the hash range (the rest counted). The draw is per docid, so
    every copy of a sentence goes the same way and a build that sees one docid bucket at a time draws the same."""
    if params.distractor_fraction >= 1:
        return distractors
    below = int(params.distractor_fraction * SEEDED_HASH_RANGE)
    drawn = np.fromiter((seeded_hash(params.hash_seed, docid) < below for docid in distractors["docid"]),
                        dtype=bool, count=len(distractors))
    counts["distractors.dropped.not_drawn"] += int((~drawn).sum())
    return distractors[drawn]


def pool_of_split(pairs: pd.DataFrame, distractors: pd.DataFrame, counts: Counter, split: str,
                  carry: tuple[str, ...] = ()) -> pd.DataFrame:
    """The split's pool: its golds, then its distractors, one row per docid. `carry`: columns of both inputs
    kept beside the pool's (the bounded build carries its row order)."""
    golds = pd.DataFrame({"docid": pairs["gold_id"], "text": pairs["gold"], "source": pairs["move"],
                          "corpusid": pairs["paper_id"], **{c: pairs[c] for c in carry}})
    others = pd.DataFrame({"docid": distractors["docid"], "text": distractors["text"],
                           "source": distractors["category"], "corpusid": distractors["paper_id"],
                           **{c: distractors[c] for c in carry}})
    pool = pd.concat([golds, others], ignore_index=True)
    unique = pool.drop_duplicates("docid", keep="first")  # golds come first, so a gold keeps its move as source
    counts[f"pool.dropped_duplicates.{split}"] += len(pool) - len(unique)
    return unique.reset_index(drop=True)


def _remove_test_sentences_from_train(pairs: pd.DataFrame, pools: dict[str, pd.DataFrame], counts: Counter):
    """A sentence of the test pool or a test query that also occurs in the train pool stays in test
    only; train pairs whose gold or query is such a sentence are dropped (counted), so that training
    never sees a test query or candidate (paper §4.2)."""
    test_ids = set(pools["test"]["docid"]) | set(pairs.loc[pairs["split"] == "test", "query_id"])
    train_pool = pools["train"]
    shared = train_pool["docid"].isin(test_ids)
    counts["pool.dropped_from_train_as_in_test"] = int(shared.sum())
    pools = {**pools, "train": train_pool[~shared].reset_index(drop=True)}
    in_train = pairs["split"] == "train"
    leaks = in_train & (pairs["gold_id"].isin(test_ids) | pairs["query_id"].isin(test_ids))
    counts["pairs.dropped.train_pair_touching_test"] = int(leaks.sum())
    return pairs[~leaks].reset_index(drop=True), pools


def fits_in_memory(pairs_table, distractors_table, params: DatasetParams) -> bool:
    """Whether stage 05's tables (a file or a folder of parts each) take at most `dataset.max_in_memory_bytes`; past
    it the benchmark is built bucket by bucket (`dataset/bounded`, the same benchmark)."""
    return table_bytes(pairs_table) + table_bytes(distractors_table) <= params.max_in_memory_bytes


def build_from_tables(pairs_table, distractors_table, params: DatasetParams) -> BuiltBenchmark:
    """`build_benchmark` on stage 05's tables: a single file each, or the parts of a partitioned run (a polars
    scan)."""
    return build_benchmark(read_mined(pairs_table), read_mined(distractors_table), params)
