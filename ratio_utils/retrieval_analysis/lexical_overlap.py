"""Lexical overlap (paper Appendix F.1, Figure 4): mean word-level Jaccard similarity between a query and its
top-k candidates, with the query–gold Jaccard as a reference. Words are the BM25 tokens (lower case, word
characters, English stopwords removed, Snowball stems), taken from `retrieval.bm25.BM25Tokenizer`.

Serves stage 11 (ratio_utils.stages.analyses); reads and writes no file (the interval cache it is handed
is saved by the stage).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from ..dataset.benchmark import Benchmark
from ..evaluation.intervals import Cell, IntervalCache, cell, paired_cell
from ..evaluation.metrics import order_run
from ..param_sections import OVERLAP_KS
from ..retrieval.bm25 import BM25Tokenizer
from ..schema import MOVES, Move, Split


def query_split(bench: Benchmark, move: Move | str) -> str:
    """The query set of the analyses: silver where the benchmark has it, else the unfiltered test set."""
    return bench.query_split(move).value


def query_set_name(split: str) -> str:
    """The label of a query set; where silver is absent and the unfiltered set stands in, the notes say so."""
    return "silver" if split == Split.SILVER.value else "unfiltered test"


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

    Candidates are taken in the canonical order of ratio_utils.evaluation.metrics; a query with fewer than k
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


@dataclass(frozen=True)
class OverlapComparison:
    """Tuned vs untuned overlap at one k over the same queries: each mean with its interval, the query–gold
    reference, the paired difference (tuned - baseline) with its interval and permutation p."""

    k: int
    baseline: Cell
    tuned: Cell
    gold: Cell
    difference: Cell
    p: float
    tuned_overlaps_less: bool


@dataclass
class MoveOverlap:
    """One move and query set: per query (index qid) the mean Jaccard with the top-k candidates of each retriever
    (one column per k), and with its gold sentence."""

    per_system: dict[str, pd.DataFrame]  # "baseline", "tuned" (when there is a tuned retriever)
    gold: pd.Series

    def cells(self, ks: Iterable[int], cache: IntervalCache) -> list[dict]:
        """Rows (system, k, value, low, high, n): each retriever's mean at each k, and the query–gold mean at every k."""
        rows = []
        for system, frame in self.per_system.items():
            for k in frame.columns:
                c = cell(frame[k].dropna(), cache)
                rows.append({"system": system, "k": int(k), "value": c.value, "low": c.low, "high": c.high, "n": c.n})
        c = cell(self.gold, cache)
        rows += [{"system": "gold", "k": int(k), "value": c.value, "low": c.low, "high": c.high, "n": c.n} for k in ks]
        return rows

    def comparison(self, k: int, cache: IntervalCache) -> OverlapComparison:
        tuned, base = self.per_system["tuned"][k], self.per_system["baseline"][k]
        difference, p = paired_cell(cache, tuned, base)
        return OverlapComparison(k, cell(base.dropna(), cache), cell(tuned.dropna(), cache), cell(self.gold, cache),
                                 difference, p, bool(tuned.mean() < base.mean()))


class OverlapMeasure:
    """Word overlap between a benchmark's queries and the candidates a retriever returns from the full test pool."""

    def __init__(self, bench: Benchmark):
        self.bench = bench
        self.words = WordSets()
        pool = bench.pool(Split.TEST)
        self.pool_text = dict(zip(pool["docid"], pool["text"]))

    def of_move(self, move: str, split: str, queries: pd.DataFrame, qrels: pd.DataFrame,
                runs: Mapping[str, pd.DataFrame], ks: Iterable[int]) -> MoveOverlap:
        """`runs`: system -> its run on these queries; `queries` (qid, text) and `qrels` the queries asked."""
        query_text = dict(zip(queries["qid"], queries["text"]))
        pairs = self.bench.queries(move, split)
        texts = {**self.pool_text, **dict(zip(pairs["gold_id"], pairs["goldSentence"]))}
        gold = gold_overlap(qrels, query_text, texts, self.words)
        per_system = {system: overlap_at_k(run, query_text, texts, ks, self.words) for system, run in runs.items()}
        return MoveOverlap(per_system, gold)


def overlap_table(per_k: pd.DataFrame) -> pd.DataFrame:
    """The shown lexical-overlap table: one row per query set, move and retriever, a J@k cell per k."""
    rows = []
    for (split, move, system), group in per_k.groupby(["query_set", "move", "system"], sort=True):
        row = {"Query set": query_set_name(split), "Move": move.capitalize(), "Retriever": system, "Queries": int(group["n"].max())}
        for r in group.sort_values("k").itertuples():
            row[f"J@{r.k}"] = Cell(r.value, r.low, r.high, int(r.n)).text(1, 3)
        rows.append(row)
    return pd.DataFrame(rows)


def overlap_count(comparisons: pd.DataFrame, comparison_ks: Iterable[int]) -> pd.DataFrame:
    """Comparisons in which the tuned retriever overlaps less, per query set and move and in all, beside the number
    the paper's design makes (every k compared, every move, two query sets)."""
    possible = len(list(comparison_ks)) * len(MOVES) * 2
    if comparisons.empty:
        return pd.DataFrame([{"Query set": "all", "Move": "all", "Tuned overlaps less": 0, "Comparisons made": 0,
                              "Comparisons in the paper's design": possible}])
    grouped = comparisons.groupby(["Query set", "Move"], sort=True)["Tuned overlaps less"]
    rows = [{"Query set": s, "Move": m, "Tuned overlaps less": int((g == "yes").sum()), "Comparisons made": int(len(g))}
            for (s, m), g in grouped]
    rows.append({"Query set": "all", "Move": "all", "Tuned overlaps less": sum(r["Tuned overlaps less"] for r in rows),
                 "Comparisons made": int(len(comparisons)), "Comparisons in the paper's design": possible})
    return pd.DataFrame(rows)
