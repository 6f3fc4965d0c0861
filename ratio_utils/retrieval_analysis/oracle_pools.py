"""Oracle move filtering (paper Appendix F.2, Table 10): a split's candidate pool restricted to the gold
sentences of one move, as if the retriever knew which move a candidate answers.

Serves stage 11 (ratio_utils.stages.analyses); reads and writes no file.
"""

from __future__ import annotations

import pandas as pd

from ..dataset.benchmark import Benchmark
from ..schema import Move, Split


def oracle_pool(bench: Benchmark, move: Move | str, split: Split | str) -> pd.DataFrame:
    """The gold sentences of every pair of one move and split, once each (docid, text).

    Pool (a) of Table 10 is `oracle_pool(bench, move, "test")`; pool (b) `oracle_pool(bench, move, "silver")`.
    """
    pairs = bench.queries(move, split)
    pool = pairs[["gold_id", "goldSentence"]].rename(columns={"gold_id": "docid", "goldSentence": "text"})
    return pool.drop_duplicates("docid").sort_values("docid").reset_index(drop=True)
