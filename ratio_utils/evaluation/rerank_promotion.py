"""The reranker's own statistic (paper §5.2): of the queries whose gold sentence is in the first stage's top 100,
the share the LLM reranker puts in its top 10 ("gold promotion"), with n and a 95% bootstrap interval, beside the
first stage's recall@100 that bounds the reranker's gain and the paper's rates. Serves notebook 10's
`rerank_summary` table (ratio_utils.stages.llm_rerank) and the summary page.

Reads and writes nothing: it takes per-query values (one per query) and returns table cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .stats import bootstrap_ci, dagger, format_ci

# The paper's rates (§5.2): GPT-5-mini reranking the top 100 of the fine-tuned ModernBERT, share of the queries with
# the gold in that top 100 whose gold it puts in its top 10, in percent.
PAPER_PROMOTION = {"specify": 86.6, "address": 85.1, "broaden": 71.6}
PAPER_FIRST_STAGE = "fine-tuned ModernBERT"

PROMOTION_NOTE = (
    "Gold promotion: of the answered queries whose gold is in the first stage's top {n} (n), the share the reranker "
    "puts in its top {k}, with a 95% bootstrap interval over queries; beside it the first stage's recall@{n} on the "
    "reranked sample, which bounds the reranker's gain (a gold outside the top {n} is never shown to it), and the "
    "paper's rate (GPT-5-mini over the " + PAPER_FIRST_STAGE + ": Specify 86.6 %, Address 85.1 %, Broaden 71.6 %). A "
    "rate far above the paper's says more about the model that answered than about the retriever. † fewer than 30 "
    "queries."
)


def promotion_columns(top_n: int, k: int) -> dict[str, str]:
    """The column names of `promotion_cells` (keys: the short names used in code)."""
    return {"recall": f"first stage R@{top_n} % [95% CI]", "n_first": f"n (first-stage R@{top_n})",
            "promoted": f"gold promoted to top {k} % [95% CI]", "n_promoted": "n (promoted)",
            "paper": f"paper: gold promoted to top {k} % ({PAPER_FIRST_STAGE})"}


def _cell(values: Sequence[float], seed: int) -> str:
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return ""
    low, high = bootstrap_ci(array, seed=seed)
    return format_ci(float(array.mean()), low, high) + dagger(array.size)


def promotion_cells(move: str, recall_at_n: Sequence[float], promoted: Sequence[bool], *, top_n: int = 100,
                    k: int = 10, seed: int = 13) -> dict[str, object]:
    """One row's cells: the first stage's recall@top_n over the reranked sample's queries (`recall_at_n`, one value
    per query in the first-stage run) and the share of the answered queries with the gold in the first-stage top n
    whose gold the reranker put in its top k (`promoted`, one bool per such query), each with n and a 95% bootstrap
    interval (`evaluation.stats.bootstrap_ci`), and the paper's rate for the move."""
    names = promotion_columns(top_n, k)
    paper = PAPER_PROMOTION.get(move)
    return {names["recall"]: _cell(recall_at_n, seed), names["n_first"]: len(recall_at_n),
            names["promoted"]: _cell([float(p) for p in promoted], seed), names["n_promoted"]: len(promoted),
            names["paper"]: "" if paper is None else f"{paper:.1f}"}


def promotion_note(top_n: int = 100, k: int = 10) -> str:
    """One sentence on what the gold-promotion columns mean (the table's note)."""
    return PROMOTION_NOTE.format(n=top_n, k=k)
