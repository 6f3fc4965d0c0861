"""Retrieval metrics of the benchmark (paper §5, Appendix C "Metrics"): Recall@k, MRR@k, hit rate, and nDCG@k
(binary relevance; the figure most retrieval papers and MTEB lead with, reported by the evaluate and MTEB commands).

Serves every score of notebooks 08–14 and `evaluation/scoring`. Input frames:

* run:   qid, docid, rank, score  (schema.RUN_COLUMNS); one row per retrieved candidate;
* qrels: qid, docid               (schema.QREL_COLUMNS); one row per relevant candidate.

Conventions (the same everywhere in the compendium):

* **Order.** A query's candidates are ordered by score, highest first; equal scores are broken by
  docid in ascending (lexicographic) order. The `rank` column of the input is ignored and the order
  is recomputed, so two runs holding the same scores always get the same metrics whatever order the
  retriever wrote its ties in.
* **Denominator.** Every query in the qrels counts. A query whose relevant candidate is not
  retrieved (or not retrieved within k) scores 0; a query that is in the run but not in the
  qrels is ignored.
* **Definitions** (per query, then averaged over queries): Recall@k = relevant candidates in the
  top k / relevant candidates; MRR@k = 1 / rank of the first relevant candidate if it is within
  the top k, else 0; HR@k = 1 if any relevant candidate is in the top k, else 0. With one gold
  sentence per query (the benchmark's case) Recall@k equals HR@k.

Hand-written rather than taken from ranx because the tie order must be our documented one and
the frames stay in pandas; the tests check every value against ranx on the same order.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..io import require_columns
from ..schema import QREL_COLUMNS, RUN_COLUMNS

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10, 100)
PRIMARY_METRIC = "MRR@10"
NDCG_KS: tuple[int, ...] = (10,)  # nDCG cut-offs the evaluate and MTEB commands report


def order_run(run: pd.DataFrame) -> pd.DataFrame:
    """The run in its canonical order (qid, score desc, docid asc) with `rank` recomputed from 1."""
    require_columns(run, ("qid", "docid", "score"), "run")
    frame = run.loc[:, ["qid", "docid", "score"]].copy()
    frame["qid"] = frame["qid"].astype(str)
    frame["docid"] = frame["docid"].astype(str)
    frame["score"] = frame["score"].astype(float)
    if frame["score"].isna().any():
        raise ValueError(f"run has {int(frame['score'].isna().sum())} missing score(s)")
    duplicated = frame.duplicated(["qid", "docid"])
    if duplicated.any():
        example = frame.loc[duplicated].iloc[0]
        raise ValueError(
            f"run lists {int(duplicated.sum())} (qid, docid) pair(s) twice, e.g. ({example.qid}, {example.docid})"
        )
    frame = frame.sort_values(["qid", "score", "docid"], ascending=[True, False, True], kind="mergesort")
    frame["rank"] = frame.groupby("qid", sort=False).cumcount() + 1
    return frame.reset_index(drop=True)[list(RUN_COLUMNS)]


def _clean_qrels(qrels: pd.DataFrame) -> pd.DataFrame:
    require_columns(qrels, QREL_COLUMNS, "qrels")
    frame = qrels.loc[:, list(QREL_COLUMNS)].astype(str)
    # The same (query, gold) pair listed twice is one judgement, not two.
    return frame.drop_duplicates().reset_index(drop=True)


def relevant_ranks(run: pd.DataFrame, qrels: pd.DataFrame) -> pd.DataFrame:
    """One row per (qid, relevant docid): the candidate's rank in the run, NaN when not retrieved."""
    ordered = order_run(run)
    judged = _clean_qrels(qrels)
    merged = judged.merge(ordered[["qid", "docid", "rank"]], on=["qid", "docid"], how="left")
    return merged


def _per_query(ranks: pd.DataFrame, k: int) -> pd.DataFrame:
    within = ranks["rank"].le(k)  # NaN compares False: not retrieved
    rank = ranks["rank"].to_numpy(dtype=float, na_value=np.inf)
    inverse = np.where(within, 1.0 / rank, 0.0)
    gain = np.where(within, 1.0 / np.log2(np.where(within, rank, 1.0) + 1.0), 0.0)
    frame = pd.DataFrame({"qid": ranks["qid"], "hit": within.astype(float), "inv": inverse, "gain": gain})
    grouped = frame.groupby("qid", sort=True)
    relevant = grouped["hit"].size().clip(upper=k)
    ideal = relevant.map(lambda n: float(np.sum(1.0 / np.log2(np.arange(2, n + 2)))))
    return pd.DataFrame(
        {"recall": grouped["hit"].mean(), "rr": grouped["inv"].max(), "hr": grouped["hit"].max(),
         "ndcg": grouped["gain"].sum() / ideal}
    )


def per_query_scores(run: pd.DataFrame, qrels: pd.DataFrame, k: int) -> pd.DataFrame:
    """Recall, reciprocal rank and hit at cut-off k for every query of the qrels (index qid)."""
    if k < 1:
        raise ValueError(f"cut-off k must be >= 1, got {k}")
    return _per_query(relevant_ranks(run, qrels), k)


_PER_QUERY_COLUMN = {"R": "recall", "MRR": "rr", "HR": "hr", "nDCG": "ndcg"}


def parse_metric(metric: str) -> tuple[str, int]:
    """'MRR@10' -> ('MRR', 10); the names evaluate_run returns ('R@k', 'MRR@k', 'HR@k', 'nDCG@k')."""
    kind, _, k = str(metric).partition("@")
    if kind not in _PER_QUERY_COLUMN or not k.isdigit() or int(k) < 1:
        raise ValueError(f"unknown metric {metric!r}; expected R@k, MRR@k, HR@k or nDCG@k with k >= 1")
    return kind, int(k)


def per_query_metrics(run: pd.DataFrame, qrels: pd.DataFrame, metrics: Iterable[str]) -> pd.DataFrame:
    """One row per query of the qrels (index qid, sorted), one column per metric ('R@10', 'MRR@10', ...).

    The per-query values whose mean is evaluate_run's score: what bootstrap intervals and paired
    tests resample (ratio_utils.evaluation.stats).
    """
    metrics = list(dict.fromkeys(metrics))
    parsed = {m: parse_metric(m) for m in metrics}
    ranks = relevant_ranks(run, qrels)
    if ranks.empty:
        raise ValueError("qrels are empty: nothing to evaluate")
    by_k = {k: _per_query(ranks, k) for k in sorted({k for _, k in parsed.values()})}
    return pd.DataFrame({m: by_k[k][_PER_QUERY_COLUMN[kind]] for m, (kind, k) in parsed.items()})


def evaluate_run(run: pd.DataFrame, qrels: pd.DataFrame, ks: Iterable[int] = DEFAULT_KS,
                 ndcg_ks: Iterable[int] = ()) -> dict[str, float]:
    """Mean Recall@k, MRR@k and HR@k over the queries of the qrels; keys 'R@k', 'MRR@k', 'HR@k', and 'nDCG@k' for
    the cut-offs `ndcg_ks` (none by default, so the stages' score tables keep their columns; the evaluate and MTEB
    commands ask for NDCG_KS)."""
    ks = sorted(set(int(k) for k in ks))
    ndcg_ks = sorted(set(int(k) for k in ndcg_ks))
    if not ks or ks[0] < 1 or (ndcg_ks and ndcg_ks[0] < 1):
        raise ValueError(f"cut-offs must be positive integers, got {ks} {ndcg_ks}")
    ranks = relevant_ranks(run, qrels)
    if ranks.empty:
        raise ValueError("qrels are empty: nothing to evaluate")
    scores: dict[str, float] = {}
    for k in ks:
        per_query = _per_query(ranks, k)
        scores[f"R@{k}"] = float(per_query["recall"].mean())
        scores[f"MRR@{k}"] = float(per_query["rr"].mean())
        scores[f"HR@{k}"] = float(per_query["hr"].mean())
    for k in ndcg_ks:
        scores[f"nDCG@{k}"] = float(_per_query(ranks, k)["ndcg"].mean())
    return scores


