"""The one retriever interface of stage 08/09 and the evaluate command (paper §5.1).

A retriever ranks every query against a candidate pool and returns a run: one row per
(query, candidate) with columns `qid, docid, rank, score` (schema.RUN_COLUMNS), rank 1..k.
The query's own sentence is never a candidate for itself: a pool may contain the query
sentence (ids are text hashes, so `docid == qid` means the same sentence), and it is removed
from that query's ranking before the top k is cut (architecture.md, "Conventions").
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import pandas as pd

from ..io import require_columns
from ..schema import RUN_COLUMNS


def check_queries(queries: pd.DataFrame) -> pd.DataFrame:
    """queries with string columns qid, text; duplicate qids are an error (ids are text hashes)."""
    require_columns(queries, ("qid", "text"), "queries")
    frame = queries.loc[:, ["qid", "text"]].astype(str).reset_index(drop=True)
    if frame["qid"].duplicated().any():
        raise ValueError(f"queries repeat {int(frame['qid'].duplicated().sum())} qid(s); give each query once")
    return frame


def check_pool(pool: pd.DataFrame) -> pd.DataFrame:
    """pool with string columns docid, text; duplicate docids are an error."""
    require_columns(pool, ("docid", "text"), "pool")
    frame = pool.loc[:, ["docid", "text"]].astype(str).reset_index(drop=True)
    dup = frame["docid"].duplicated()
    if dup.any():
        raise ValueError(f"pool repeats {int(dup.sum())} docid(s), e.g. {frame.loc[dup, 'docid'].iloc[0]}")
    return frame


def run_from_hits(
    qids: list[str], docids: np.ndarray, hit_index: np.ndarray, hit_score: np.ndarray, k: int
) -> pd.DataFrame:
    """Build a run from per-query candidate indices and scores (rows aligned with qids).

    `hit_index` may hold -1 for "no candidate" (faiss pads with -1). The query's own sentence is
    dropped, candidates are ordered by score desc then docid asc (metrics.order_run's order), and
    the top k are kept.
    """
    n_queries, width = hit_index.shape
    flat_index = hit_index.reshape(-1)
    valid = flat_index >= 0
    frame = pd.DataFrame(
        {
            "qid": np.repeat(np.asarray(qids, dtype=object), width)[valid],
            "docid": np.asarray(docids, dtype=object)[flat_index[valid]],
            "score": hit_score.reshape(-1)[valid].astype(float),
        }
    )
    frame = frame[frame["qid"] != frame["docid"]]
    frame = frame.sort_values(["qid", "score", "docid"], ascending=[True, False, True], kind="mergesort")
    frame["rank"] = frame.groupby("qid", sort=False).cumcount() + 1
    frame = frame[frame["rank"] <= k]
    return frame.reset_index(drop=True)[list(RUN_COLUMNS)]


class Retriever(ABC):
    """Ranks queries against a pool. Subclasses implement `_search` on checked frames."""

    name: str = "retriever"
    # Progress bars of encoding and search; a caller looping over many searches under its own bar turns them
    # off, so that bars never nest (nested text bars leave cursor-up escapes in notebook output).
    show_progress: bool = True

    def search(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int = 100) -> pd.DataFrame:
        """Top-k candidates of every query (queries: qid, text; pool: docid, text) as a run."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        queries = check_queries(queries)
        pool = check_pool(pool)
        if queries.empty or pool.empty:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(RUN_COLUMNS, (str, str, int, float))})
        return self._search(queries, pool, k)

    @abstractmethod
    def _search(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        """Search with validated frames; return RUN_COLUMNS with the query's own sentence excluded."""

    def describe(self) -> dict:
        """Settings that identify this system in result files."""
        return {"name": self.name, "class": type(self).__name__}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
