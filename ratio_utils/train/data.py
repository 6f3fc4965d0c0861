"""Fine-tuning data (stage 09): a move's training pairs and a split's evaluation set from the benchmark.

Reads:  the benchmark (queries, qrels and pools of one move and split).
Writes: nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..benchmark import Benchmark
from ..schema import Move, Split


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass
class EvalSet:
    """Queries of one move and split, their qrels and the split's shared pool."""

    queries: pd.DataFrame  # qid, text
    qrels: pd.DataFrame  # qid, docid
    pool: pd.DataFrame  # docid, text

    @classmethod
    def load(cls, bench: Benchmark, move: Move, split: Split | str) -> "EvalSet":
        frame = bench.queries(move, split)
        queries = frame[["query_id", "querySentence"]].rename(columns={"query_id": "qid", "querySentence": "text"})
        return cls(queries.drop_duplicates("qid").reset_index(drop=True), bench.qrels(move, split), bench.pool(split)[["docid", "text"]])


def training_pairs(bench: Benchmark, move: Move, max_pairs: int | None, seed: int) -> pd.DataFrame:
    """The move's training pairs as (anchor, positive), a seeded sample when `max_pairs` caps them."""
    frame = bench.queries(move, Split.TRAIN)
    pairs = frame[["querySentence", "goldSentence"]].rename(columns={"querySentence": "anchor", "goldSentence": "positive"})
    empty = pairs["anchor"].isna() | pairs["positive"].isna() | (pairs["anchor"].str.strip() == "") | (pairs["positive"].str.strip() == "")
    if empty.any():
        raise ValueError(f"{int(empty.sum())} training pair(s) of {move.value} have an empty query or gold sentence")
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = pairs.sample(n=max_pairs, random_state=seed)
    return pairs.reset_index(drop=True)
