"""The paper's analyses of the fine-tuned retrievers (Appendix F), as functions over runs and the benchmark.

* Lexical overlap (F.1, Figure 4): mean word-level Jaccard similarity between a query and its top-k
  candidates, with the query–gold Jaccard as a reference. Words are the BM25 tokens (lower case, word
  characters, English stopwords removed, Snowball stems), taken from `retrieval.bm25.BM25Tokenizer`.
* Oracle move filtering (F.2, Table 10): candidate pools restricted to the gold sentences of one move.
* Cross-move transfer (F.3): per-query scores of retrievers tuned on one move, on another move's queries.

Serves stage 11 (ratio_utils.stages.analyses), which runs the retrievers and writes the tables and
figures; nothing here reads or writes files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from .benchmark_release import Benchmark
from .metrics import order_run
from .retrieval.bm25 import BM25Tokenizer
from .schema import Move, Split
from .params import OVERLAP_KS

# -- F.1 lexical overlap ------------------------------------------------------------------------------


class WordSets:
    """Texts as sets of BM25 unigram tokens (the BM25 preprocessing, imported, not re-spelled)."""

    def __init__(self):
        self._tokenize = BM25Tokenizer(ngram=1)
        self._memo: dict[str, frozenset[str]] = {}

    def __call__(self, text: str) -> frozenset[str]:
        words = self._memo.get(text)
        if words is None:
            words = self._memo[text] = frozenset(self._tokenize(text))
        return words


def jaccard(first: frozenset[str] | set[str], second: frozenset[str] | set[str]) -> float:
    """|A ∩ B| / |A ∪ B|; two texts with no content word at all share nothing (0.0)."""
    union = len(first | second)
    return len(first & second) / union if union else 0.0


def overlap_at_k(
    run: pd.DataFrame, query_text: Mapping[str, str], doc_text: Mapping[str, str],
    ks: Iterable[int] = OVERLAP_KS, words: WordSets | None = None,
) -> pd.DataFrame:
    """Per query (index qid): mean Jaccard between the query and its top-k candidates, one column per k.

    Candidates are taken in the canonical order of ratio_utils.metrics; a query with fewer than k
    candidates is averaged over those it has; a query with none is left out (NaN).
    """
    words = words or WordSets()
    ks = sorted(set(int(k) for k in ks))
    ordered = order_run(run)
    ordered = ordered[ordered["rank"] <= ks[-1]]
    similarity = [
        jaccard(words(query_text[qid]), words(doc_text[docid]))
        for qid, docid in zip(ordered["qid"], ordered["docid"])
    ]
    frame = ordered.assign(jaccard=similarity)
    columns = {}
    for k in ks:
        columns[k] = frame[frame["rank"] <= k].groupby("qid")["jaccard"].mean()
    return pd.DataFrame(columns).sort_index()


def gold_overlap(qrels: pd.DataFrame, query_text: Mapping[str, str], doc_text: Mapping[str, str],
                 words: WordSets | None = None) -> pd.Series:
    """Per query: Jaccard between the query and its gold sentence (mean over golds when it has several)."""
    words = words or WordSets()
    values = [jaccard(words(query_text[q]), words(doc_text[d])) for q, d in zip(qrels["qid"], qrels["docid"])]
    return pd.Series(values, index=qrels["qid"].to_numpy()).groupby(level=0).mean().sort_index().rename("gold")


# -- F.2 oracle move filtering ------------------------------------------------------------------------


def oracle_pool(bench: Benchmark, move: Move | str, split: Split | str) -> pd.DataFrame:
    """The gold sentences of every pair of one move and split, once each (docid, text).

    Pool (a) of Table 10 is `oracle_pool(bench, move, "test")`; pool (b) `oracle_pool(bench, move, "silver")`.
    """
    pairs = bench.queries(move, split)
    pool = pairs[["gold_id", "goldSentence"]].rename(columns={"gold_id": "docid", "goldSentence": "text"})
    return pool.drop_duplicates("docid").sort_values("docid").reset_index(drop=True)


# -- F.3 cross-move transfer --------------------------------------------------------------------------


def relative_change(tuned: float, untuned: float) -> float:
    """(tuned - untuned) / untuned; NaN when the untuned score is 0."""
    return (tuned - untuned) / untuned if untuned else float("nan")


def transfer_matrix(scores: Mapping[tuple[str, str], float], untuned: Mapping[str, float]) -> pd.DataFrame:
    """Relative change of MRR@10 against the untuned model: rows = move tuned on, columns = queried move.

    `scores[(tuned_on, queried)]` is the tuned retriever's MRR@10 on the queried move's queries,
    `untuned[queried]` the untuned model's on the same queries. Pairs with no score stay NaN.
    """
    tuned_on = sorted({t for t, _ in scores}, key=lambda m: Move.parse(m).value)
    queried = sorted(untuned, key=lambda m: Move.parse(m).value)
    matrix = pd.DataFrame(np.nan, index=tuned_on, columns=queried, dtype=float)
    for (t, q), value in scores.items():
        if q in untuned:
            matrix.loc[t, q] = relative_change(value, untuned[q])
    matrix.index.name, matrix.columns.name = "tuned on", "queries of"
    return matrix
