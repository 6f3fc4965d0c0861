"""Stage 11 (notebook 11_analyses): the analyses of Appendix F for any retriever named in the params.

* `lexical_overlap`   (F.1, Figure 4): query–candidate word overlap of the untuned vs the tuned retriever;
* `oracle_filtering`  (F.2, Table 10): the same queries against pools of one move's gold sentences only;
* `cross_move_transfer` (F.3): retrievers tuned on one move, on the queries of every move.

The untuned retriever is `analysis.base_model` (a model name or path) and the tuned ones are notebook 09's
models/<base>__<move>/ unless `analysis.tuned_models` names other folders, so a user's own retriever is
analysed by naming it. Queries are the silver set where it exists, else the unfiltered test set (said in
every caption). Runs on the full test pool are read from notebook 08/09's run files when they match
(the same key: retrieval.runs.get_or_compute); every other run is searched here and kept with its sidecar.

Reads:  cfg.paths.benchmark, cfg.paths.retrieval_runs, models/<base>__<move>/ (notebook 09)
Writes: data/analysis_runs/<pool>/<system>/<move>/<split>.{parquet,trec,run.json}
        tables/analysis_lexical_overlap, analysis_overlap_comparisons, analysis_overlap_count,
        table10_oracle_filtering, analysis_cross_move_transfer; figures/figure4_lexical_overlap,
        figure_cross_move_transfer (each with provenance)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..retrieval_analysis.lexical_overlap import OverlapMeasure, overlap_count, overlap_table, query_set_name, query_split
from ..retrieval_analysis.oracle_pools import oracle_pool
from ..retrieval_analysis.transfer import relative_change, transfer_matrix
from ..config import REPO_ROOT, Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..evaluation import stats
from ..evaluation.intervals import CONFIDENCE, Cell, IntervalCache, cell, cell_record, paired_cell
from ..evaluation.metrics import per_query_metrics
from ..models import model_name
from ..param_sections import AnalysisParams
from ..publish.display import Stage
from ..publish.label_sources import silver_sources
from ..reporting.paper_tables import DAGGER, FULL_COLUMNS, metric_key
from ..publish.published import records_frame
from ..retrieval import DenseRetriever
from ..retrieval.runs import RunInfo, get_or_compute, run_path, system_name
from ..schema import MOVES, Split

STAGE = "11_analyses"
FULL_POOL = "full"


def load_analysis_params(cfg: Config) -> AnalysisParams:
    return cfg.section("analysis", AnalysisParams)


class AnalysesStage(Stage):
    """What notebook 11 shows: the retrievers compared, then each analysis's tables and figures (each analysis
    computed and written once, on first use)."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = load_analysis_params(cfg)
        self.bench = load_benchmark(cfg.paths.benchmark)
        self.retrievers = find_retrievers(cfg, self.params)
        self._overlap: OverlapResult | None = None
        self._transfer: TransferResult | None = None

    def retrievers_table(self) -> pd.DataFrame:
        return retrievers_frame(self.retrievers)

    @property
    def overlap(self) -> OverlapResult:
        if self._overlap is None:
            self._overlap = lexical_overlap(self.cfg, self.bench, self.params, self.retrievers)
        return self._overlap

    def overlap_count(self) -> pd.DataFrame:
        return self.overlap.count

    def overlap_comparisons(self) -> pd.DataFrame:
        return self.overlap.comparisons

    def overlap_figure(self):
        return self.overlap.figure

    def oracle_filtering(self) -> pd.DataFrame:
        return oracle_filtering(self.cfg, self.bench, self.params, self.retrievers)

    @property
    def transfer(self) -> TransferResult:
        if self._transfer is None:
            self._transfer = cross_move_transfer(self.cfg, self.bench, self.params, self.retrievers)
        return self._transfer

    def transfer_table(self) -> pd.DataFrame:
        return self.transfer.table

    def transfer_figure(self):
        return self.transfer.figure


# -- retrievers and their runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Retrievers:
    """The untuned retriever and the tuned one of each move that exists."""

    base: str  # model name or path
    tuned: dict[str, Path]  # move -> model folder
    missing: dict[str, str]  # move -> why there is no tuned retriever

    @property
    def label(self) -> str:
        return model_name(self.base)


def find_retrievers(cfg: Config, params: AnalysisParams) -> Retrievers:
    """The untuned retriever and, per move, the tuned one named in the params or written by notebook 09."""
    from ..param_sections import TrainParams
    from ..train import FINAL_RESULTS_FILE, move_model_dir

    tuned, missing = {}, {}
    for move in MOVES:
        named = params.tuned_models.get(move.value)
        if named:  # relative to the repository root, like every path in a params file
            folder = Path(named) if Path(named).is_absolute() else REPO_ROOT / named
            found, why = folder.is_dir(), f"analysis.tuned_models.{move.value} names {named}, which does not exist"
        else:
            folder = move_model_dir(cfg, TrainParams(base_model=params.base_model), move)
            found, why = (folder / FINAL_RESULTS_FILE).exists(), f"no tuned retriever at models/{folder.name}/ (notebook 09 writes it)"
        if found:
            tuned[move.value] = folder
        else:
            missing[move.value] = why
    return Retrievers(params.base_model, tuned, missing)


class RunSource:
    """Runs of the analysed retrievers, searched once and kept (or read from notebook 08/09's run files with the
    same key: retrieval.runs.reusable)."""

    def __init__(self, cfg: Config, bench: Benchmark, params: AnalysisParams, retrievers: Retrievers):
        self.cfg, self.bench, self.params, self.retrievers = cfg, bench, params, retrievers
        self.checksum = bench.checksum()
        self._models: dict[str, DenseRetriever] = {}

    def _retriever(self, tuned_on: str | None) -> DenseRetriever:
        key = tuned_on or ""
        if key not in self._models:
            source = str(self.retrievers.tuned[tuned_on]) if tuned_on else self.retrievers.base
            self._models[key] = DenseRetriever(
                source, self.params.query_prefix, self.params.doc_prefix, batch_size=self.params.batch_size,
                cache_dir=self.cfg.paths.embedding_cache, name=self._model_label(tuned_on))
        return self._models[key]

    def _model_label(self, tuned_on: str | None) -> str:
        return self.retrievers.label if tuned_on is None else Path(self.retrievers.tuned[tuned_on]).name

    def _fingerprint(self, tuned_on: str | None) -> str:
        from ..models import model_fingerprint

        return model_fingerprint(self.retrievers.tuned[tuned_on] if tuned_on else self.retrievers.base)

    def run(self, tuned_on: str | None, move: str, split: str, pool_name: str = FULL_POOL,
            pool: pd.DataFrame | None = None) -> pd.DataFrame:
        """Top-k run of the untuned (tuned_on None) or a tuned retriever on one move's queries (runs.get_or_compute)."""
        setup = "Tuned" if tuned_on else "Baseline"
        info = RunInfo(self._model_label(tuned_on), "generic", setup, "dense", move, split,
                       self.checksum, STAGE, k=self.params.k, max_queries=self.params.max_queries,
                       source=str(self.retrievers.tuned[tuned_on]) if tuned_on else self.retrievers.base,
                       model_fingerprint=self._fingerprint(tuned_on), notes=[f"pool: {pool_name}"])
        stand_ins = []
        if pool_name == FULL_POOL and (tuned_on is None or tuned_on == move):
            # notebook 08's untuned run or notebook 09's tuned run of this move rank the same pool
            stand_ins.append(run_path(self.cfg.paths.retrieval_runs, system_name(self.retrievers.label, "generic", setup), move, split))

        def compute():
            queries = self.bench.eval_set(move, split, max_queries=self.params.max_queries).queries
            searched = self.bench.pool(split) if pool is None else pool
            retriever = self._retriever(tuned_on)
            return retriever.search(queries, searched, k=min(self.params.k, len(searched))), retriever.describe()

        return get_or_compute(self.cfg.paths.analysis_runs / pool_name, info, compute,
                              prefixes=(self.params.query_prefix, self.params.doc_prefix), stand_ins=stand_ins).run

    def qrels(self, move: str, split: str) -> pd.DataFrame:
        return self.bench.eval_set(move, split, max_queries=self.params.max_queries).qrels

    def queries(self, move: str, split: str) -> pd.DataFrame:
        return self.bench.eval_set(move, split, max_queries=self.params.max_queries).queries


def _interval_note(extra: str = "") -> str:
    return (f"Cells: mean over queries with a {int(CONFIDENCE * 100)}% percentile bootstrap interval over queries "
            f"(seeded; ratio_utils.evaluation.stats); differences: paired bootstrap interval and two-sided sign-flip permutation p "
            f"over the same queries. {DAGGER}: fewer than {stats.INDICATIVE_BELOW} queries, indicative only." + extra)


def _reduced_note(params: AnalysisParams) -> list[str]:
    return [f"Reduced run: at most {params.max_queries} queries per move and query set (the first by id)."] if params.max_queries else []


# -- F.1 lexical overlap ------------------------------------------------------------------------------


@dataclass
class OverlapResult:
    per_k: pd.DataFrame  # query_set, move, system, k, value, low, high, n
    comparisons: pd.DataFrame  # shown form, one row per (query set, move, k)
    count: pd.DataFrame
    notes: list[str]
    figure: object = None  # Figure 4 (closed after saving: a notebook shows it once, where it is asked for)


def lexical_overlap(cfg: Config, bench: Benchmark, params: AnalysisParams | None = None,
                    retrievers: Retrievers | None = None, *, write: bool = True) -> OverlapResult:
    """Mean query–candidate Jaccard at each k, untuned vs tuned, on the unfiltered test and the silver set."""
    from ..publish.published import write_table

    params = params or load_analysis_params(cfg)
    retrievers = retrievers or find_retrievers(cfg, params)
    source = RunSource(cfg, bench, params, retrievers)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, params.n_resamples)
    measure = OverlapMeasure(bench)
    rows, comparisons, notes, records = [], [], [], []
    for split in (Split.TEST.value, Split.SILVER.value):
        for move in (m.value for m in MOVES):
            if not (bench.has(move, split) and len(bench.queries(move, split))):
                if split == Split.SILVER.value:
                    notes.append(f"{move}: no silver split, so its silver comparisons cannot be made (the judge of notebook 07 has not run).")
                continue
            runs = {system: source.run(tuned_on, move, split) for system, tuned_on in (("baseline", None), ("tuned", move))
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
                    "Gold": compared.gold.text(1, 3), "Tuned - baseline": compared.difference.text(1, 3), "p": compared.p,
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
                  _interval_note(), *_reduced_note(params), *notes]
        inputs = [cfg.paths.benchmark]
        write_table(overlap_table(per_k), "analysis_lexical_overlap", cfg, inputs=inputs, notes=common, labels=silver_sources(bench),
                    caption="Lexical overlap (Appendix F.1): mean Jaccard between a query and its top-k candidates, and "
                            "between a query and its gold sentence, per query set and move.")
        labels = silver_sources(bench)
        write_table(comparison_frame, "analysis_overlap_comparisons", cfg, inputs=inputs, notes=common, shown=comparisons_shown,
                    labels=labels, records=records_frame(records),
                    caption="Lexical overlap, tuned vs untuned at k in {" + ", ".join(map(str, params.comparison_ks)) + "}.")
        write_table(count, "analysis_overlap_count", cfg, inputs=inputs, notes=common, labels=labels,
                    caption="Comparisons in which the tuned retriever's top-k candidates overlap less with the query than "
                            "the untuned retriever's (paper: 24 of 24).")
        figure = _overlap_figure(cfg, bench, per_k, notes)
    cache.save()  # the next run looks the intervals up instead of resampling again
    return OverlapResult(per_k, comparisons_shown, count, notes, figure if write and not per_k.empty else None)


def _overlap_figure(cfg: Config, bench: Benchmark, per_k: pd.DataFrame, notes: list[str]):
    import matplotlib.pyplot as plt

    from ..publish.published import save_figure, set_figure_style

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
        ax.set_title(f"{move.capitalize()}: {query_set_name(split)}, N={n}{DAGGER if stats.is_indicative(n) else ''}", fontsize=9)
        ax.set_xlabel("k")
    axes[0].set_ylabel("mean Jaccard, query vs top-k")
    handles = {label: handle for ax in axes for handle, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8, bbox_to_anchor=(0.5, -0.06))
    small = any(stats.is_indicative(n) for n in shown_n if n)
    fig.suptitle("Figure 4: lexical overlap of the top-k candidates with the query (bands: 95% bootstrap intervals; "
                 f"N: queries{f'; {DAGGER} fewer than {stats.INDICATIVE_BELOW}, indicative' if small else ''})", fontsize=10)
    fig.tight_layout()
    save_figure(fig, "figure4_lexical_overlap", cfg, inputs=[cfg.paths.benchmark], notes=notes, labels=silver_sources(bench))
    plt.close(fig)
    return fig


# -- F.2 oracle move filtering ------------------------------------------------------------------------


def oracle_filtering(cfg: Config, bench: Benchmark, params: AnalysisParams | None = None,
                     retrievers: Retrievers | None = None, *, write: bool = True) -> pd.DataFrame:
    """Table 10: the analysis queries against (a) the golds of all test pairs of the move, (b) of its silver pairs."""
    from ..publish.published import write_table

    params = params or load_analysis_params(cfg)
    retrievers = retrievers or find_retrievers(cfg, params)
    source = RunSource(cfg, bench, params, retrievers)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, params.n_resamples)
    metrics = [metric_key(c) for c in FULL_COLUMNS]
    rows, notes, records = [], [], []
    for move in (m.value for m in MOVES):
        split = query_split(bench, move)
        qrels = source.qrels(move, split)
        panels = [("(a) golds of all test pairs", Split.TEST.value)]
        if split == Split.SILVER.value:
            panels.append(("(b) golds of silver pairs", Split.SILVER.value))
        else:
            notes.append(f"{move}: silver absent, so the queries are the unfiltered test queries and pool (b) would equal pool (a); panel (b) is not shown.")
        for panel, pool_split in panels:
            pool = oracle_pool(bench, move, pool_split)
            pool_name = f"oracle-{pool_split}-{move}"
            per_system = {}
            for setup, tuned_on in (("Baseline", None), ("Tuned", move)):
                base_row = {"Panel": panel, "Move": move.capitalize(), "Pool size": len(pool), "Queries": len(qrels),
                            "Query set": query_set_name(split), "Setup": setup}
                if tuned_on and move not in retrievers.tuned:
                    rows.append({**base_row, "Tuned - baseline M@10": "", "p": None})
                    continue
                scores = per_query_metrics(source.run(tuned_on, move, split, pool_name, pool), qrels, metrics)
                per_system[setup] = scores
                row = {**base_row, **{c: oracle_cell_text(c, cell(scores[metric_key(c)], cache), len(pool)) for c in FULL_COLUMNS}}
                if setup == "Tuned":
                    diff, p = paired_cell(cache, scores["MRR@10"], per_system["Baseline"]["MRR@10"])
                    row.update({"Tuned - baseline M@10": diff.text(), "p": p})
                    records.append(cell_record(diff, p, scope=f"oracle pool {panel}", move=move, query_set=split, metric="M@10",
                                               subject="tuned", reference="baseline"))
                rows.append(row)
    for move, why in retrievers.missing.items():
        notes.append(f"{move}: {why}; its Tuned rows are empty.")
    table = pd.DataFrame(rows)
    columns = ["Panel", "Move", "Query set", "Pool size", "Queries", "Setup", *FULL_COLUMNS, "Tuned - baseline M@10", "p"]
    table = table.reindex(columns=[c for c in columns if c in table.columns])
    table = table.astype(object).where(table.notna(), None)
    shown = stats.with_p_text(table, params.n_resamples).fillna("")
    trivial = sorted({c for c in FULL_COLUMNS if c in shown and shown[c].astype(str).str.contains(TRIVIAL_MARK, regex=False).any()},
                     key=FULL_COLUMNS.index)
    if trivial:
        notes.append(f"'100{TRIVIAL_MARK} k)': the pool holds no more than k candidates, so every gold is in the top k by "
                     f"construction and R@k is 100 whatever the retriever ({', '.join(trivial)} of the panels marked); "
                     "not a result.")
    if write:
        write_table(table, "table10_oracle_filtering", cfg, inputs=[cfg.paths.benchmark], shown=shown,
                    labels=silver_sources(bench), records=records_frame(records),
                    caption=f"Table 10: oracle move filtering (%), {retrievers.label} before (Baseline) and after (Tuned) "
                            "fine-tuning on the move, with candidate pools of the move's gold sentences only.",
                    notes=["Pool (a): the gold sentences of all test pairs of the move; pool (b): only those of its silver "
                           "pairs; the query's own sentence is never a candidate. Scores are not comparable across pools of "
                           "different sizes: read each panel on its own.", _interval_note(), *_reduced_note(params), *notes])
    cache.save()
    return shown


TRIVIAL_MARK = " (pool ≤"  # R@k cells of pools with at most k candidates: '100 (pool ≤ 10)'


def oracle_cell_text(column: str, c: Cell, pool_size: int) -> str:
    """A Table 10 cell; R@k of a pool with at most k candidates is 100 by construction and says so."""
    kind, _, k = column.partition("@")
    if kind == "R" and pool_size <= int(k):
        return f"100{TRIVIAL_MARK} {k})" + (DAGGER if c.indicative else "")
    return c.text()


# -- F.3 cross-move transfer --------------------------------------------------------------------------


@dataclass
class TransferResult:
    table: pd.DataFrame
    matrix: pd.DataFrame  # relative change, rows = tuned on, columns = queried move
    notes: list[str]
    figure: object = None  # the heatmap (closed after saving)


def cross_move_transfer(cfg: Config, bench: Benchmark, params: AnalysisParams | None = None,
                        retrievers: Retrievers | None = None, *, write: bool = True) -> TransferResult:
    """MRR@10 of each tuned retriever on every move's queries, against the untuned model on the same queries."""
    from ..publish.published import write_table

    params = params or load_analysis_params(cfg)
    retrievers = retrievers or find_retrievers(cfg, params)
    source = RunSource(cfg, bench, params, retrievers)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, params.n_resamples)
    rows, scores, untuned, counts, notes, records = [], {}, {}, {}, [], []
    for queried in (m.value for m in MOVES):
        split = query_split(bench, queried)
        if split != Split.SILVER.value:
            notes.append(f"{queried}: silver absent, so its queries are the unfiltered test queries.")
        qrels = source.qrels(queried, split)
        base = per_query_metrics(source.run(None, queried, split), qrels, ["MRR@10"])["MRR@10"]
        untuned[queried] = float(base.mean())
        counts[queried] = len(base)
        base_cell = cell(base, cache)
        per_query = {}
        for tuned_on in sorted(retrievers.tuned):
            tuned = per_query_metrics(source.run(tuned_on, queried, split), qrels, ["MRR@10"])["MRR@10"]
            scores[(tuned_on, queried)] = float(tuned.mean())
            diff, p = paired_cell(cache, tuned, base)
            per_query[tuned_on] = tuned
            records.append(cell_record(diff, p, scope="tuned vs untuned", move=queried, query_set=split, metric="M@10",
                                   subject=f"tuned on {tuned_on}", reference="untuned"))
            change = relative_change(float(tuned.mean()), float(base.mean()))
            rows.append({"Queries of": queried.capitalize(), "Query set": query_set_name(split), "Tuned on": tuned_on.capitalize(),
                         "Own move": "yes" if tuned_on == queried else "", "Queries": len(base),
                         "Untuned M@10": base_cell.text(), "Tuned M@10": cell(tuned, cache).text(),
                         "Difference": diff.text(), "p": p,
                         "Relative change": "" if pd.isna(change) else f"{100 * change:+.0f}%"})
        # F.3's claim: on a move's queries, the retriever tuned on that move beats each one tuned on another move
        for other in sorted(set(per_query) - {queried}) if queried in per_query else []:
            diff, p = paired_cell(cache, per_query[queried], per_query[other])
            records.append(cell_record(diff, p, scope="own move vs other move", move=queried, query_set=split, metric="M@10",
                                   subject=f"tuned on {queried}", reference=f"tuned on {other}"))
    for move, why in retrievers.missing.items():
        notes.append(f"{move}: {why}; no retriever tuned on {move} is compared.")
    matrix = transfer_matrix(scores, untuned)
    table, figure = pd.DataFrame(rows), None
    shown = stats.with_p_text(table, params.n_resamples)
    if write and not table.empty:
        write_table(table, "analysis_cross_move_transfer", cfg, inputs=[cfg.paths.benchmark], shown=shown,
                    labels=silver_sources(bench), records=records_frame(records),
                    caption=f"Cross-move transfer (Appendix F.3): MRR@10 (%) of {retrievers.label} tuned on one move, on the "
                            "queries of each move, against the untuned model on the same queries (full test pool).",
                    notes=["Relative change = (tuned - untuned) / untuned. Difference: tuned - untuned in points.",
                           _interval_note(), *_reduced_note(params), *notes])
        queried_sets = {q: (query_set_name(query_split(bench, q)), counts[q]) for q in counts}
        figure = _transfer_figure(cfg, matrix, queried_sets, retrievers.label, notes, silver_sources(bench))
    cache.save()
    return TransferResult(shown, matrix, notes, figure)


def _transfer_figure(cfg: Config, matrix: pd.DataFrame, queried_sets: dict[str, tuple[str, int]], label: str,
                     notes: list[str], labels=()):
    """The relative-change heatmap; each cell names its N (queries of the column's move), † below 30."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from ..publish.published import save_figure, set_figure_style

    set_figure_style()
    annotations = matrix.copy().astype(object)
    for queried in matrix.columns:
        n = queried_sets[queried][1]
        mark = stats.dagger(n)
        annotations[queried] = ["" if pd.isna(v) else f"{100 * v:+.0f}%{mark}\nN={n}" for v in matrix[queried]]
    fig, ax = plt.subplots(figsize=(1.6 + 1.6 * matrix.shape[1], 1.4 + 0.9 * matrix.shape[0]))
    sns.heatmap(100 * matrix, annot=annotations.to_numpy(), fmt="", cmap="RdBu", center=0,
                cbar_kws={"label": "MRR@10 change vs untuned (%)"}, ax=ax)
    ax.set_title(f"Cross-move transfer, {label}\n{transfer_caption(queried_sets)}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, "figure_cross_move_transfer", cfg, inputs=[cfg.paths.benchmark], labels=labels,
                notes=[f"Cell: relative change of MRR@10, tuned (row) vs untuned, on the column's {transfer_caption(queried_sets)}.", *notes])
    plt.close(fig)
    return fig


def transfer_caption(queried_sets: dict[str, tuple[str, int]]) -> str:
    """'queries: Address silver N=41, Broaden silver N=6†, ...; † fewer than 30 queries (indicative)'."""
    parts = [f"{move.capitalize()} {name} N={n}{DAGGER if stats.is_indicative(n) else ''}"
             for move, (name, n) in queried_sets.items()]
    small = any(stats.is_indicative(n) for _, n in queried_sets.values())
    return "queries: " + ", ".join(parts) + (f"; {DAGGER} fewer than {stats.INDICATIVE_BELOW} queries (indicative)" if small else "")


def retrievers_frame(retrievers: Retrievers) -> pd.DataFrame:
    """Which retrievers the analyses compare (and which tuned ones are missing)."""
    rows = [{"role": "untuned", "move": "all", "retriever": retrievers.base}]
    rows += [{"role": "tuned", "move": m, "retriever": f"models/{Path(p).name}"} for m, p in sorted(retrievers.tuned.items())]
    rows += [{"role": "tuned", "move": m, "retriever": f"missing: {why}"} for m, why in sorted(retrievers.missing.items())]
    return pd.DataFrame(rows)
