"""The reranker's own statistic (paper §5.2): of the queries whose gold sentence is in the first stage's top 100,
the share the LLM reranker puts in its top 10 ("gold promotion"), with n and an exact 95% binomial interval, beside
the first stage's recall@100 that bounds the reranker's gain and the paper's rates; and which queries of a reranked
run kept their first-stage order (never sent, or sent without an answer), so a paired comparison counts only the
queries that can differ. Serves notebook 10's `rerank_summary` table (ratio_utils.stages.llm_rerank), the rerank
comparisons (`intervals.paired_cell(fixed=...)`) and the summary page.

Reads and writes nothing: it takes per-query values (one per query) or run frames and returns table cells or qids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..paper_values import paper_section, where
from .stats import bootstrap_ci, dagger, format_ci, proportion_ci

# The paper's rates (§5.2): GPT-5-mini reranking the top 100 of the fine-tuned ModernBERT, share of the queries with
# the gold in that top 100 whose gold it puts in its top 10, in percent (ratio_utils/paper_values.toml).
PAPER_PROMOTION = dict(paper_section("rerank_promotion")["rates"])
PAPER_FIRST_STAGE = paper_section("rerank_promotion")["first_stage"]
PAPER_PROMOTION_WHERE = where("rerank_promotion")

PROMOTION_NOTE = (
    "Gold promotion: of the answered queries whose gold is in the first stage's top {n} (n), the share the reranker "
    "puts in its top {k}, with an exact (Clopper–Pearson) 95% interval; beside it the first stage's recall@{n} on the "
    "reranked sample (exact where every query's recall is 0 or 1, else a 95% bootstrap interval over queries), "
    "which bounds the reranker's gain (a gold outside the top {n} is never shown to it), and the paper's rate "
    "(GPT-5-mini over the " + PAPER_FIRST_STAGE + ", " + PAPER_PROMOTION_WHERE + ": "
    + ", ".join(f"{move.capitalize()} {rate:.1f} %" for move, rate in PAPER_PROMOTION.items()) + "). Rates are not "
    "pooled over first stages: they rerank the same sampled queries, so their counts are not independent draws. A "
    "rate far above the paper's says more about the model that answered than about the retriever. † fewer than 30 "
    "queries."
)


def promotion_columns(top_n: int, k: int) -> dict[str, str]:
    """The column names of `promotion_cells` (keys: the short names used in code)."""
    return {"recall": f"first stage R@{top_n} % [95% CI]", "n_first": f"n (first-stage R@{top_n})",
            "promoted": f"gold promoted to top {k} % [95% CI]", "n_promoted": "n (promoted)",
            "paper": f"paper: gold promoted to top {k} % ({PAPER_FIRST_STAGE})"}


def _cell(values: Sequence[float], seed: int) -> str:
    """Mean with its 95% interval: exact (Clopper–Pearson) where every value is 0 or 1 (a proportion: a bootstrap
    collapses to [100, 100] on 5 of 5), else the percentile bootstrap over queries."""
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return ""
    if np.isin(array, (0.0, 1.0)).all():
        low, high = proportion_ci(int(array.sum()), int(array.size))
    else:
        low, high = bootstrap_ci(array, seed=seed)
    return format_ci(float(array.mean()), low, high) + dagger(array.size)


def promotion_cells(move: str, recall_at_n: Sequence[float], promoted: Sequence[bool], *, top_n: int = 100,
                    k: int = 10, seed: int = 13) -> dict[str, object]:
    """One row's cells: the first stage's recall@top_n over the reranked sample's queries (`recall_at_n`, one value
    per query in the first-stage run) and the share of the answered queries with the gold in the first-stage top n
    whose gold the reranker put in its top k (`promoted`, one bool per such query), each with n and a 95% interval
    (exact binomial for a proportion, `stats.proportion_ci`; bootstrap for a recall over several golds), and the
    paper's rate for the move."""
    names = promotion_columns(top_n, k)
    paper = PAPER_PROMOTION.get(move)
    return {names["recall"]: _cell(recall_at_n, seed), names["n_first"]: len(recall_at_n),
            names["promoted"]: _cell([float(p) for p in promoted], seed), names["n_promoted"]: len(promoted),
            names["paper"]: "" if paper is None else f"{paper:.1f}"}


def promotion_note(top_n: int = 100, k: int = 10) -> str:
    """One sentence on what the gold-promotion columns mean (the table's note)."""
    return PROMOTION_NOTE.format(n=top_n, k=k)


def kept_first_stage_order(reranked: pd.DataFrame, first_stage: pd.DataFrame, k: int = 10) -> set[str]:
    """The qids whose reranked top `k` is the first stage's top `k`, in the same order: queries never sent (gold
    outside the top n) and sent queries without an answer, which keep their first-stage ranking by construction, so
    no top-k metric of theirs can differ (pass them as `intervals.paired_cell(fixed=...)`). An answer that returns
    the first stage's own top k unchanged reads the same from the run files, and is counted the same way.
    `reranked`, `first_stage`: run frames (qid, docid, rank); qids missing from either are not returned."""
    def top(run: pd.DataFrame) -> pd.Series:
        ordered = run.sort_values(["qid", "rank"], kind="stable")
        return ordered.groupby(ordered["qid"].astype(str), sort=False)["docid"].apply(
            lambda d: tuple(d.astype(str)[:k]))

    ours, theirs = top(reranked), top(first_stage)
    common = ours.index.intersection(theirs.index)
    return {qid for qid in common if ours[qid] == theirs[qid]}
