"""Lexical overlap (paper Appendix F.1, Figure 4): mean word-level Jaccard similarity between a query and its
top-k candidates, with the query–gold Jaccard as a reference. Words are the BM25 tokens (lower case, word
characters, English stopwords removed, Snowball stems), taken from `retrieval.bm25.BM25Tokenizer`.

`overlap_analysis` is the whole of F.1 for stage 11 (ratio_utils.stages.analyses): the untuned and the tuned
retriever of each move on the unfiltered test and the silver queries, the tables and Figure 4.

Reads:  the benchmark, the analysed retrievers' runs (analysed_runs.RunSource), cfg.paths.bootstrap_cache.
Writes: tables/analysis_lexical_overlap, analysis_overlap_comparisons, analysis_overlap_count,
        figures/figure4_lexical_overlap (each with provenance); the runs RunSource keeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.intervals import Cell, IntervalCache, cell, cell_record, paired_cell
from ..evaluation.metrics import order_run
from ..evaluation.stats import DAGGER
from ..param_sections import OVERLAP_KS, AnalysisParams
from ..publish.label_sources import silver_sources
from ..publish.published import records_frame, save_figure, set_figure_style, write_table
from ..retrieval.bm25 import BM25Tokenizer
from ..schema import MOVES, Move, Split
from .analysed_runs import Retrievers, RunSource, interval_note, reduced_note


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
        """Rows (system, k, value, low, high, n): each retriever's mean at each k, and the query–gold mean at every
        k."""
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
        row = {"Query set": query_set_name(split), "Move": move.capitalize(), "Retriever": system,
               "Queries": int(group["n"].max())}
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
    rows = [{"Query set": s, "Move": m, "Tuned overlaps less": int((g == "yes").sum()),
             "Comparisons made": int(len(g))} for (s, m), g in grouped]
    rows.append({"Query set": "all", "Move": "all", "Tuned overlaps less": sum(r["Tuned overlaps less"] for r in rows),
                 "Comparisons made": int(len(comparisons)), "Comparisons in the paper's design": possible})
    return pd.DataFrame(rows)


# -- F.1 end to end (stage 11) ----------------------------------------------------------------------------------------


@dataclass
class OverlapResult:
    per_k: pd.DataFrame  # query_set, move, system, k, value, low, high, n
    comparisons: pd.DataFrame  # shown form, one row per (query set, move, k)
    count: pd.DataFrame
    notes: list[str]
    figure: object = None  # Figure 4 (closed after saving: a notebook shows it once, where it is asked for)


def overlap_analysis(cfg: Config, bench: Benchmark, params: AnalysisParams, retrievers: Retrievers, stage: str, *,
                     write: bool = True) -> OverlapResult:
    """Mean query–candidate Jaccard at each k, untuned vs tuned, on the unfiltered test and the silver set."""
    source = RunSource(cfg, bench, params, retrievers, stage)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, params.n_resamples)
    measure = OverlapMeasure(bench)
    rows, comparisons, notes, records = [], [], [], []
    for split in (Split.TEST.value, Split.SILVER.value):
        for move in (m.value for m in MOVES):
            if not (bench.has(move, split) and len(bench.queries(move, split))):
                if split == Split.SILVER.value:
                    notes.append(f"{move}: no silver split, so its silver comparisons cannot be made (the judge of "
                                 "notebook 07 has not run).")
                continue
            runs = {system: source.run(tuned_on, move, split)
                    for system, tuned_on in (("baseline", None), ("tuned", move))
                    if tuned_on is None or move in retrievers.tuned}
            overlap = measure.of_move(move, split, source.queries(move, split), source.qrels(move, split), runs,
                                      params.overlap_ks)
            rows += [{"query_set": split, "move": move, **row} for row in overlap.cells(params.overlap_ks, cache)]
            if "tuned" not in overlap.per_system:
                continue
            for k in params.comparison_ks:
                compared = overlap.comparison(k, cache)
                records.append(cell_record(compared.difference, compared.p, scale=1, move=move, query_set=split,
                                           metric=f"Jaccard@{k}", subject="tuned", reference="baseline"))
                comparisons.append({
                    "Query set": query_set_name(split), "Move": move.capitalize(), "k": k,
                    "Baseline": compared.baseline.text(1, 3), "Tuned": compared.tuned.text(1, 3),
                    "Gold": compared.gold.text(1, 3), "Tuned - baseline": compared.difference.text(1, 3),
                    "p": compared.p,
                    "Tuned overlaps less": "yes" if compared.tuned_overlaps_less else "no"})
    for move, why in retrievers.missing.items():
        notes.append(f"{move}: {why}; its tuned rows and comparisons are missing.")
    per_k = pd.DataFrame(rows)
    comparison_frame = pd.DataFrame(comparisons)
    comparisons_shown = stats.with_p_text(comparison_frame, params.n_resamples)
    count = overlap_count(comparison_frame, params.comparison_ks)
    if write and not per_k.empty:
        common = ["Jaccard over BM25 word sets (lower case, word tokens, English stopwords removed, Snowball stems; "
                  "ratio_utils.retrieval.bm25.BM25Tokenizer); top-k candidates against the full test pool; "
                  f"untuned = {retrievers.label}, tuned = notebook 09's model of the move (generic prefixes).",
                  interval_note(), *reduced_note(params), *notes]
        inputs = [cfg.paths.benchmark]
        write_table(overlap_table(per_k), "analysis_lexical_overlap", cfg, inputs=inputs, notes=common,
                    labels=silver_sources(bench),
                    caption="Lexical overlap (Appendix F.1): mean Jaccard between a query and its top-k candidates, "
                            "and between a query and its gold sentence, per query set and move.")
        labels = silver_sources(bench)
        write_table(comparison_frame, "analysis_overlap_comparisons", cfg, inputs=inputs, notes=common,
                    shown=comparisons_shown, labels=labels, records=records_frame(records),
                    caption="Lexical overlap, tuned vs untuned at k in {"
                            + ", ".join(map(str, params.comparison_ks)) + "}.")
        write_table(count, "analysis_overlap_count", cfg, inputs=inputs, notes=common, labels=labels,
                    caption="Comparisons in which the tuned retriever's top-k candidates overlap less with the "
                            "query than the untuned retriever's (paper: 24 of 24).")
        figure = _overlap_figure(cfg, bench, per_k, notes)
    cache.save()  # the next run looks the intervals up instead of resampling again
    return OverlapResult(per_k, comparisons_shown, count, notes, figure if write and not per_k.empty else None)


def _overlap_figure(cfg: Config, bench: Benchmark, per_k: pd.DataFrame, notes: list[str]):
    import matplotlib.pyplot as plt

    set_figure_style()
    moves = [m.value for m in MOVES]
    fig, axes = plt.subplots(1, len(moves), figsize=(4 * len(moves), 3.2), sharey=True)
    colors = {"baseline": "C0", "tuned": "C1"}
    shown_n: list[int] = []
    for ax, move in zip(axes, moves):
        split = query_split(bench, move)
        data = per_k[(per_k["query_set"] == split) & (per_k["move"] == move)]
        for system, marker in (("baseline", "o"), ("tuned", "s")):
            line = data[data["system"] == system].sort_values("k")
            if line.empty:
                continue
            ax.plot(line["k"], line["value"], marker=marker, color=colors[system], label=system, markersize=4)
            ax.fill_between(line["k"], line["low"], line["high"], color=colors[system], alpha=0.2, linewidth=0)
        gold = data[data["system"] == "gold"]
        if not gold.empty:
            ax.axhline(gold["value"].iloc[0], color="black", linestyle="--", linewidth=1, label="query–gold")
        ax.set_xscale("log")
        ticks = sorted(data["k"].unique())
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.minorticks_off()
        n = int(data["n"].max()) if not data.empty else 0
        shown_n.append(n)
        ax.set_title(f"{move.capitalize()}: {query_set_name(split)}, N={n}{DAGGER if stats.is_indicative(n) else ''}",
                     fontsize=9)
        ax.set_xlabel("k")
    axes[0].set_ylabel("mean Jaccard, query vs top-k")
    handles = {label: handle for ax in axes for handle, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8,
               bbox_to_anchor=(0.5, -0.06))
    small = any(stats.is_indicative(n) for n in shown_n if n)
    fig.suptitle("Figure 4: lexical overlap of the top-k candidates with the query (bands: 95% bootstrap intervals; "
                 "N: queries"
                 f"{f'; {DAGGER} fewer than {stats.INDICATIVE_BELOW}, indicative' if small else ''})", fontsize=10)
    fig.tight_layout()
    save_figure(fig, "figure4_lexical_overlap", cfg, inputs=[cfg.paths.benchmark], notes=notes,
                labels=silver_sources(bench))
    plt.close(fig)
    return fig
