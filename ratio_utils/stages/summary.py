"""Stage 14 (notebook 14_summary): the page a reviewer opens first, written last.

Collects what the other stages wrote, computes nothing new about retrieval, and says where each number
comes from:

- the headline Table 1 of this run (MRR@10 and R@10 with 95% intervals where the table carries them)
  beside the numbers the paper's text states for its strongest retriever;
- queries (and pairs) per move and split, read from the benchmark on disk;
- a figure of MRR@10 per move and system with interval bars, and papers per year with the split windows;
- everything reduced, replaced by a stand-in or not run, and why: the notes of every table whose
  provenance record says so (collected, not restated);
- the run's provenance: git commit, a hash of the params, checksums of the inputs, wall time per notebook
  (runs/<run-id>/timings.csv of the pipeline).

Reads:  cfg.paths.tables (every *.records.csv: the tables' numbers, never their display cells; every
        *.provenance.json: captions and notes), cfg.paths.benchmark, cfg.paths.papers, runs/<run-id>/timings.csv.
Writes: cfg.paths.summary_report (reports/summary.md), figures/summary_mrr10.*, figures/papers_per_year_splits.*
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Config
from ..evaluation import stats
from ..io import sha256_tree, write_text_atomic
from ..param_sections import SummaryParams
from ..reporting import claims
from ..publish.display import Stage
from ..publish.label_sources import notes as label_notes
from ..publish.published import read_records
from ..schema import MOVES, Split

# The paper's numbers for its strongest retriever, ModernBERT-embed-large with its recommended prefix, as its
# text states them (its Table 1 body is not in the text available here). Values in %.
PAPER_REFERENCE = [
    # §5.2 and Appendix D "Unfiltered test set": MRR@10 before/after fine-tuning on the unfiltered test set (Table 7)
    *({"query set": "test", "setup": setup, "move": move, "metric": "M@10", "value": value,
       "where": "§5.2; Appendix D (Table 7)"}
      for setup, values in (("Baseline", (21.7, 9.7, 15.5)), ("Tuned", (39.1, 21.5, 22.2)))
      for move, value in zip(("specify", "address", "broaden"), values)),
    # Appendix D: gold in the tuned model's top 10 on the unfiltered test set
    *({"query set": "test", "setup": "Tuned", "move": move, "metric": "R@10", "value": value,
       "where": "Appendix D"} for move, value in zip(("specify", "address", "broaden"), (56.7, 35.4, 34.6))),
    # §5.2: silver set, tuned + GPT-5-mini reranking (Table 1)
    *({"query set": "silver", "setup": "Tuned + rerank", "move": move, "metric": "M@10", "value": value,
       "where": "§5.2 (Table 1)"} for move, value in zip(("specify", "address", "broaden"), (55.1, 37.7, 28.2))),
    # §5.2: silver set, gold in the tuned model's top 10
    *({"query set": "silver", "setup": "Tuned", "move": move, "metric": "R@10", "value": value, "where": "§5.2"}
      for move, value in zip(("address", "broaden"), (40.0, 41.4))),
]
PAPER_SYSTEM = "ModernBERT-embed-large (recommended prefix)"
# What the paper's text gives of each query set, and what it does not (its Table 1/7 bodies are not in the text here).
PAPER_GIVES = {
    "silver": "the paper's text gives, on the silver set, only Tuned + rerank M@10 and Tuned R@10 for Address and Broaden; "
              "its silver Baseline and Tuned M@10 are not stated (only the gains below)",
    "test": "the paper's text gives, on the unfiltered test set, Baseline and Tuned M@10 and Tuned R@10; no reranked numbers",
}
# Gains the paper states on the silver set (§5.2), in MRR@10 points, with the records of this run that measure the same.
PAPER_SILVER_GAINS = [
    ("Tuned - Baseline", "finetune_tuned_vs_baseline", "", {"specify": 20.0, "address": 14.3, "broaden": 10.0}),
    ("best untuned dense - BM25", "baseline_comparisons", "best untuned dense", {"specify": 12.0, "address": 3.8, "broaden": 7.7}),
    ("reranked - its first stage", "rerank_vs_first_stage", "", {"specify": "8.4 to 15.5 (its three tuned retrievers)",
                                                               "address": "8.4 to 15.5 (its three tuned retrievers)"}),
]

# A table note that says a part of the paper was reduced, replaced or not run contains one of these.
REDUCTION_MARKERS = re.compile(
    r"not run|not available|reduced|stand-in|instead|absent|needs an llm|no endpoint|cannot|not produced|"
    r"at most|seeded sample|not reachable|left empty|stay empty|smoke run|indicative|(?:trained|scored|run)\b[^.;]*\bonly\b",
    re.IGNORECASE,
)


def load_summary_params(cfg: Config) -> SummaryParams:
    params = cfg.section("summary", SummaryParams)
    params.metrics = tuple(params.metrics)
    return params


# --- the headline table ------------------------------------------------------------------------------------------------

TEST_TABLE = "table7_test_full"  # the unfiltered test set's table (paper_tables.TABLE_SPECS)
RESULT_COLUMNS = ["system", "prefix", "setup", "move", "metric", "value", "low", "high", "queries"]


def results_long(records: pd.DataFrame, table: str) -> pd.DataFrame:
    """The cells of one of Tables 1/7/8, read from its numeric records (`ratio_utils.publish.published.read_records`), as long rows:
    system (the row's model), prefix, setup, move, metric, value, low, high (%), queries; in the table's row order."""
    cells = records[(records["table"] == table) & records["reference"].isna() & records["model"].notna()]
    return cells.rename(columns={"model": "system", "n": "queries"})[RESULT_COLUMNS].reset_index(drop=True)


def headline_table(long: pd.DataFrame, metrics: tuple[str, ...], queries: pd.DataFrame | None = None,
                   query_set: str = "silver") -> pd.DataFrame:
    """This run's rows (one per system and move) beside the paper's numbers on the same kind of query set
    (silver beside silver, unfiltered test beside unfiltered test); cells in %, `value [low, high]`."""
    rows = []
    ours = long[long["metric"].isin(metrics)]
    for (system, prefix, setup, move), part in ours.groupby(["system", "prefix", "setup", "move"], sort=False):
        by_metric = part.set_index("metric")
        row = {"source": "this run", "system": system if prefix in ("-", None) or pd.isna(prefix) else f"{system} ({prefix})",
               "setup": setup, "move": move}
        if queries is not None:
            # the table's own count (its query set: silver where present) before the test split's
            counted = part["queries"].dropna() if "queries" in part else pd.Series(dtype=float)
            row["queries"] = int(counted.iloc[0]) if not counted.empty else _queries_for(queries, move)
        few = queries is not None and row.get("queries") is not None and stats.is_indicative(int(row["queries"]))
        for metric in metrics:
            r = by_metric.loc[metric] if metric in by_metric.index else None
            row[metric] = "" if r is None else stats.format_ci(r["value"], r["low"], r["high"], scale=1) + (stats.DAGGER if few else "")
        rows.append(row)
    paper = pd.DataFrame(PAPER_REFERENCE)
    paper = paper[paper["query set"] == query_set]
    for (_, setup, move), part in paper.groupby(["query set", "setup", "move"], sort=False):
        by_metric = part.set_index("metric")
        row = {"source": f"paper ({by_metric['where'].iloc[0]})", "system": PAPER_SYSTEM, "setup": setup, "move": move}
        if queries is not None:
            row["queries"] = None
        for metric in metrics:
            row[metric] = f"{by_metric.loc[metric, 'value']:.1f}" if metric in by_metric.index else ""
        rows.append(row)
    table = pd.DataFrame(rows, columns=["source", "system", "setup", "move", *(["queries"] if queries is not None else []),
                                        *metrics])
    order = {m.value: i for i, m in enumerate(MOVES)}
    table["_move"] = table["move"].map(order)
    table["_paper"] = table["source"].str.startswith("paper")
    return table.sort_values(["_move", "_paper"], kind="stable").drop(columns=["_move", "_paper"]).reset_index(drop=True)


def _queries_for(queries: pd.DataFrame, move: str) -> int | None:
    """Test queries of a move: the count for a table that does not carry its own."""
    part = queries[(queries["move"] == move) & (queries["split"] == Split.TEST.value)]
    return None if part.empty else int(part["queries"].iloc[0])


def tuned_vs_baseline(cfg: Config) -> pd.DataFrame:
    """Notebook 09's paired comparison (tables/finetune_tuned_vs_baseline.csv) in its display form; empty before 09."""
    from ..train.tables import tuned_vs_baseline_display

    path = Path(cfg.paths.tables) / "finetune_tuned_vs_baseline.csv"
    if not path.exists():
        return pd.DataFrame()
    frame = pd.read_csv(path)
    if "move" not in frame.columns:  # a table written before intervals were kept: show it as it is
        return frame
    return tuned_vs_baseline_display(frame.astype(object).where(frame.notna(), None))


# --- queries per move and split ----------------------------------------------------------------------------------------


def queries_per_split(cfg: Config) -> pd.DataFrame:
    """Pairs and distinct queries of every move and split on disk (a query with two golds is one query, two pairs)."""
    from ..dataset.benchmark import load_benchmark

    if not Path(cfg.paths.benchmark).exists():
        return pd.DataFrame(columns=["move", "split", "pairs", "queries"])
    bench = load_benchmark(cfg.paths.benchmark)
    rows = []
    for move in MOVES:
        for split in Split:
            if bench.has(move, split):
                frame = bench.queries(move, split)
                rows.append({"move": move.value, "split": split.value, "pairs": len(frame),
                             "queries": int(frame["query_id"].nunique())})
    return pd.DataFrame(rows)


# --- figures -----------------------------------------------------------------------------------------------------------


def mrr_figure(long: pd.DataFrame, metric: str = "M@10", queries_label: str = ""):
    """Grouped bars: MRR@10 (%) per move (groups) and system (bars), with the 95% interval as error bars;
    the move's query count under each group, hatched bars and † where it is below stats.INDICATIVE_BELOW."""
    import matplotlib.pyplot as plt
    import numpy as np

    part = long[long["metric"] == metric].copy()
    part["label"] = part["system"] + " · " + part["setup"]
    labels = list(dict.fromkeys(part["label"]))
    moves = [m.value for m in MOVES if m.value in set(part["move"])]
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        rows = part[part["label"] == label].set_index("move").reindex(moves)
        x = np.arange(len(moves)) + (i - (len(labels) - 1) / 2) * width
        values = rows["value"].to_numpy(dtype=float)
        low = (values - rows["low"].to_numpy(dtype=float))
        high = (rows["high"].to_numpy(dtype=float) - values)
        has_ci = ~(np.isnan(low) | np.isnan(high))
        counts = rows["queries"].to_numpy(dtype=float) if "queries" in rows else np.full(len(moves), np.nan)
        few = np.array([not np.isnan(n) and stats.is_indicative(int(n)) for n in counts])
        bars = ax.bar(x, values, width, label=label)
        for bar, indicative in zip(bars, few):
            if indicative:
                bar.set_hatch("//")
        if has_ci.any():
            ax.errorbar(x[has_ci], values[has_ci], yerr=[low[has_ci], high[has_ci]], fmt="none", ecolor="black",
                        capsize=2, linewidth=0.8)
    n_per_move = part.groupby("move")["queries"].max() if "queries" in part else pd.Series(dtype=float)
    ticks = []
    for move in moves:
        n = n_per_move.get(move)
        ticks.append(move.capitalize() + ("" if n is None or pd.isna(n) else
                                          f"\nN = {int(n)} {stats.dagger(int(n))}".rstrip()))
    ax.set_xticks(range(len(moves)), ticks)
    ax.set_ylabel(f"{metric.replace('M@', 'MRR@')} (%)")
    query_set = queries_label.split(" on the ", 1)[-1].split(",")[0] if queries_label else "the headline query set"
    ax.set_title(f"MRR@10 per move and system on the {query_set.removeprefix('the ')} (error bars: 95% bootstrap interval "
                 f"over queries; hatched, †: fewer than {stats.INDICATIVE_BELOW} queries, indicative only)", fontsize=8)
    ax.legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.17))  # below the two-line tick labels
    fig.tight_layout()
    plt.close(fig)  # returned for display once (an open figure would be shown twice by the notebook)
    return fig


# --- what was reduced, replaced or not run -----------------------------------------------------------------------------


def reductions(cfg: Config) -> pd.DataFrame:
    """Every table note that says something was reduced, replaced by a stand-in, or not run (one row per note).

    Collected from the provenance records the tables were written with, so the list is the tables'
    own words; a note repeated by several tables appears once, with the tables that carry it.
    """
    found: dict[str, dict[str, list[str]]] = {}  # reason -> {"rows": [...], "tables": [...]}
    for path in sorted(Path(cfg.paths.tables).glob("*.provenance.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for note in record.get("notes", []):
            if not REDUCTION_MARKERS.search(note):
                continue
            note = _shorten_paths(cfg, note)
            # "<system> (<prefix>, <setup>): <reason>" notes of Tables 1/7/8: one line per reason, its rows listed
            row_note = _ROW_NOTE.match(note)
            reason, row = (row_note.group(2), row_note.group(1)) if row_note else (note, None)
            entry = found.setdefault(reason, {"rows": [], "tables": []})
            if row and row not in entry["rows"]:
                entry["rows"].append(row)
            entry["tables"].append(path.name.removesuffix(".provenance.json"))
    rows = [{"what": "; ".join(entry["rows"]) or "-", "why / how": reason, "tables": ", ".join(dict.fromkeys(entry["tables"]))}
            for reason, entry in found.items()]
    return pd.DataFrame(rows, columns=["what", "why / how", "tables"])


_ROW_NOTE = re.compile(r"^([^:()]+ \([^()]*, [^()]*\)): (.+)$")
_ABSOLUTE_OUTPUT_PATH = re.compile(r"(?<![\w.])/(?:[^\s/]+/)*?(?=(?:data|models|tables|figures|cache|runs|reports)/)")


def _shorten_paths(cfg: Config, text: str) -> str:
    """No absolute path of any machine in the report: output folders relative, the shared folder a name."""
    text = text.replace(str(cfg.paths.shared), "<shared>").replace(str(cfg.paths.root) + os.sep, "")
    return _ABSOLUTE_OUTPUT_PATH.sub("", text)


# --- the paper's claims, its stated gains, and how this run differs -----------------------------------------------------


def silver_gains(records: pd.DataFrame) -> pd.DataFrame:
    """The gains the paper states on the silver set beside this run's paired differences of the same kind."""
    rows = []
    for quantity, table, scope, paper in PAPER_SILVER_GAINS:
        for move in (m.value for m in MOVES):
            if move not in paper:
                continue
            found = records[(records["table"] == table) & (records["move"] == move) & (records["query_set"] == "silver")
                            & (records["metric"] == "M@10") & records["reference"].notna()]
            if scope:
                found = found[found["scope"] == scope]
            ours = "; ".join(f"{stats.format_ci(r.value, r.low, r.high, scale=1)}{stats.dagger(int(r.n))} "
                             f"({r.subject}, n {int(r.n)})" for r in found.itertuples()) or "not computed in this run"
            value = paper[move]
            rows.append({"gain (M@10 points, silver)": quantity, "move": move,
                         "paper (ModernBERT-embed-large)": f"{value:.1f}" if isinstance(value, float) else value,
                         "this run": ours})
    return pd.DataFrame(rows)


def contamination_caveat(cfg: Config) -> str | None:
    """A caveat when the test papers are not newer than the pretrained encoders the run uses (None otherwise)."""
    from ..models import contamination_note, encoders_used

    years = years_of_test_pairs(cfg)
    return None if years is None else contamination_note(years, encoders_used(cfg))


def years_of_test_pairs(cfg: Config) -> tuple[int, int] | None:
    """First and last publication year of the test pairs (None without a benchmark or a test split)."""
    from ..dataset.benchmark import load_benchmark

    if not Path(cfg.paths.benchmark).exists():
        return None
    bench = load_benchmark(cfg.paths.benchmark)
    years = [bench.queries(m, Split.TEST)["year"] for m in MOVES if bench.has(m, Split.TEST)]
    years = pd.concat(years).dropna() if years else pd.Series(dtype=float)
    return None if years.empty else (int(years.min()), int(years.max()))


# The paper's setting, as its text states it (§4, §5.1, Appendix C).
PAPER_SETTING = {
    "corpus": "S2ORC computer science papers published since 2015",
    "test pool": "404,371 sentences",
    "pairs judged": "10,000 Specify (sampled by marker), all 14,020 Address and 1,410 Broaden test pairs",
    "models": "BM25 ×3, all-mpnet-base-v2, ModernBERT-embed-large, Stella-en-1.5B-v5, EmbeddingGemma, Qwen3-Embedding, "
              "ReasonIR, three ColBERTs",
    "training": "all training pairs, 3-5 configurations per model and move, four GPUs for Address and Specify",
    "judge": "GPT-5.4",
    "reranker": "GPT-5-mini",
}


def differences(cfg: Config, label_sources: list, queries: pd.DataFrame) -> pd.DataFrame:
    """What differs from the paper at a glance, from the run's own records (papers, benchmark, params, label sources);
    `queries`: `queries_per_split`, for the test pairs behind the judged sample."""
    from ..dataset.benchmark import load_benchmark

    ours: dict[str, str] = {}
    if Path(cfg.paths.papers).exists():
        papers = pd.read_parquet(cfg.paths.papers, columns=["corpus", "year"])
        ours["corpus"] = (f"{len(papers):,} papers of {', '.join(sorted(papers['corpus'].unique()))}, "
                          f"{int(papers['year'].min())}–{int(papers['year'].max())} (params corpus.sources)")
    if Path(cfg.paths.benchmark).exists():
        bench = load_benchmark(cfg.paths.benchmark)
        ours["test pool"] = f"{len(bench.pool(Split.TEST)):,} sentences"
    judge = next((source for source in label_sources if source.role == "judge"), None)
    if judge is not None and judge.detail:
        sampled, without = judge.detail.get("sampled pairs", {}), judge.detail.get("pairs without a verdict", {})
        test = queries[queries["split"] == Split.TEST.value]
        test_pairs = dict(zip(test["move"], test["pairs"]))
        ours["pairs judged"] = "; ".join(f"{m}: {sampled.get(m, 0):,} of {test_pairs.get(m, 0):,} test pairs"
                                         f"{f' ({without[m]} without a verdict)' if without.get(m) else ''}" for m in sampled)
    mining = Path(cfg.paths.mining_report)
    if mining.exists():
        report = json.loads(mining.read_text(encoding="utf-8"))
        kept = report.get("pairs", {}).get("kept", {})
        ours["markers and pairs"] = (f"lexicon of {report.get('lexicon', {}).get('entries', 0):,} entries; pairs kept: "
                                     + ", ".join(f"{m} {n:,}" for m, n in kept.items()))
    retrieval, train = cfg.sections.get("retrieval", {}), cfg.sections.get("train", {})
    ours["models"] = f"BM25 n-grams {retrieval.get('bm25_ngrams')}, dense {retrieval.get('dense_models')}"
    ours["training"] = (f"{train.get('base_model')}, at most {train.get('max_train_pairs')} pairs per move, configurations "
                        f"{train.get('configs')}, one device")
    for source in label_sources:
        key = "judge" if source.role == "judge" else "reranker"
        ours[key] = f"{source.configured} configured; answers by {source.answered}" + (" (stand-in)" if source.stand_in else "")
    ours.setdefault("judge", "none here (unfiltered test set only)")
    ours.setdefault("reranker", "none here (no reranked run)")
    keys = list(dict.fromkeys([*PAPER_SETTING, *ours]))
    return pd.DataFrame([{"what": key, "paper": PAPER_SETTING.get(key, ""), "this run": ours.get(key, "not recorded")}
                         for key in keys])


def run_label_sources(cfg: Config) -> list:
    """The silver set's judge and every reranker whose runs this run's tables use."""
    from ..dataset.benchmark import load_benchmark
    from ..publish.label_sources import rerank_source, silver_sources
    from ..reporting.paper_tables import run_files
    from ..retrieval.runs import read_run_info

    if not Path(cfg.paths.benchmark).exists():
        return []
    sources = silver_sources(load_benchmark(cfg.paths.benchmark))
    runs = Path(cfg.paths.retrieval_runs)
    rerankers = {}
    for path in run_files(runs) if runs.exists() else []:
        source = rerank_source(read_run_info(path).retriever)
        if source is not None:
            rerankers[json.dumps(source.to_json(), sort_keys=True)] = source
    return sources + list(rerankers.values())


# --- provenance --------------------------------------------------------------------------------------------------------


def params_hash(cfg: Config) -> str:
    """sha256 of the params that change results (name, seed, every section), independent of where the repo lives."""
    payload = {"name": cfg.name, "seed": cfg.seed, "sections": cfg.sections}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def input_checksums(cfg: Config) -> pd.DataFrame:
    """sha256 of the files and folders the results rest on (absent ones are listed as absent)."""
    inputs = {
        "papers (stage 00)": cfg.paths.papers,
        "lexicon (stages 01-04)": cfg.paths.final_lexicon,
        "pairs (stage 05)": cfg.paths.pairs,
        "distractors (stage 05)": cfg.paths.distractors,
        "benchmark (stage 06)": cfg.paths.benchmark,
    }
    rows = []
    for what, path in inputs.items():
        path = Path(path)
        rows.append({"input": what, "path": _shorten_paths(cfg, str(path)),
                     "sha256": sha256_tree(path)[:16] if path.exists() else "absent"})
    return pd.DataFrame(rows)


def find_timings(cfg: Config) -> Path | None:
    """This run's timings (the pipeline names its folder in RATIO_RUN_DIR), else the newest runs/*/timings.csv."""
    from ..pipeline import RUN_DIR_ENV, TIMINGS_FILE

    current = os.environ.get(RUN_DIR_ENV)
    if current and (Path(current) / TIMINGS_FILE).exists():
        return Path(current) / TIMINGS_FILE
    found = sorted(Path(cfg.paths.root, "runs").glob(f"*/{TIMINGS_FILE}"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def wall_times(cfg: Config) -> pd.DataFrame:
    """Seconds per executed notebook of the run (the summary notebook itself is still running: not listed),
    with what each reused from earlier runs instead of computing it (ratio_utils.publish.run_records)."""
    from ..publish.run_records import reused_by_notebook

    path = find_timings(cfg)
    if path is None:
        return pd.DataFrame(columns=["run", "notebook", "seconds", "reused"])
    frame = pd.read_csv(path)
    reused = reused_by_notebook(path.parent)
    frame = frame.assign(run=path.parent.name, reused=[reused.get(name, "") for name in frame["notebook"]])
    return frame[["run", "notebook", "seconds", "reused"]]


def provenance(cfg: Config) -> dict[str, Any]:
    from ..publish.published import git_commit

    return {"git commit": git_commit() or "unknown", "params file": Path(cfg.source).name if cfg.source else None,
            "params name": cfg.name, "params sha256": params_hash(cfg)[:16], "seed": cfg.seed}


# --- the report --------------------------------------------------------------------------------------------------------


@dataclass
class Summary:
    headline: pd.DataFrame  # silver beside the paper's silver numbers
    headline_test: pd.DataFrame  # unfiltered test beside the paper's unfiltered test numbers
    claims: pd.DataFrame
    claim_counts: pd.DataFrame
    gains: pd.DataFrame
    differences: pd.DataFrame
    label_notes: list[str]
    contamination: str | None
    tuned_vs_baseline: pd.DataFrame
    queries: pd.DataFrame
    reductions: pd.DataFrame
    provenance: dict[str, Any]
    inputs: pd.DataFrame
    timings: pd.DataFrame
    figure: Any  # matplotlib figure or None
    table1_caption: str
    table1_notes: list[str]


def collect(cfg: Config, params: SummaryParams | None = None) -> Summary:
    params = params or load_summary_params(cfg)
    records = read_records(cfg)
    long = results_long(records, params.table1)
    test_long = results_long(records, TEST_TABLE)
    record_path = Path(cfg.paths.tables) / f"{params.table1}.provenance.json"
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    queries = queries_per_split(cfg)
    sources = run_label_sources(cfg)
    claim_rows = claims.claims_table(records)
    figure = mrr_figure(long, queries_label=record.get("caption", "")) if not long.empty else None
    return Summary(
        headline=headline_table(long, params.metrics, queries, "silver"),
        headline_test=headline_table(test_long, params.metrics, queries, "test"),
        claims=claim_rows,
        claim_counts=claims.verdict_counts(claim_rows),
        gains=silver_gains(records),
        differences=differences(cfg, sources, queries),
        label_notes=label_notes(sources),
        contamination=contamination_caveat(cfg),
        tuned_vs_baseline=tuned_vs_baseline(cfg),
        queries=queries,
        reductions=reductions(cfg),
        provenance=provenance(cfg),
        inputs=input_checksums(cfg),
        timings=wall_times(cfg),
        figure=figure,
        table1_caption=record.get("caption", f"{params.table1} (not written yet: run notebooks 08-09)"),
        table1_notes=[_shorten_paths(cfg, n) for n in record.get("notes", [])],
    )


def _markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_(nothing recorded)_"
    return frame.astype(object).where(frame.notna(), "").to_markdown(index=False)


def _label_lines(summary: Summary) -> list[str]:
    lines = [f"- {note}" for note in summary.label_notes] or ["- No LLM labels: the silver set and reranked runs are absent."]
    return lines + ([f"", f"**{summary.contamination}**"] if summary.contamination else [])


def _claims_reading(summary: Summary) -> str:
    counts = summary.claim_counts
    return "; ".join(f"{query_set}: " + ", ".join(f"{int(n)} {verdict}" for verdict, n in counts[query_set].items() if n)
                     for query_set in counts.columns)


def labels_markdown(summary: Summary):
    """Who produced the labels, and the contamination caveat, as the notebook shows them."""
    from IPython.display import Markdown

    return Markdown("\n".join(_label_lines(summary)))


def claims_markdown(summary: Summary):
    """The claims table's rule and its one-line reading, as the notebook shows them."""
    from IPython.display import Markdown

    return Markdown(f"{claims.RULE}\n\nClaim rows per verdict — {_claims_reading(summary)}.")


def render_markdown(summary: Summary, figure_files: dict[str, str]) -> str:
    """reports/summary.md: every section of the notebook as Markdown (figures linked, relative paths)."""
    lines = ["# Ratio rebuild: summary of this run", "",
             "Written by notebook 14 (`ratio_utils.stages.summary`) from the tables, benchmark and timings of the run; "
             "numbers are not typed in by hand. Cells: value [95% bootstrap interval over queries] where the table "
             f"carries one; † marks cells on fewer than {stats.INDICATIVE_BELOW} queries (indicative only).", ""]
    lines += ["## Who produced the labels", "", *_label_lines(summary), ""]
    lines += ["## The paper's claims tested by this run", "", claims.RULE, "",
              f"Claim rows per verdict — {_claims_reading(summary)}.", "", _markdown(summary.claims), ""]
    lines += ["## Silver test set: this run beside the paper", "",
              f"Source table: {summary.table1_caption}", "", _markdown(summary.headline), "",
              f"Paper rows: {PAPER_SYSTEM}; {PAPER_GIVES['silver']}.", ""]
    if not summary.gains.empty:
        lines += ["Gains the paper states on the silver set beside this run's paired differences (points, 95% paired "
                  "bootstrap interval):", "", _markdown(summary.gains), ""]
    if "mrr" in figure_files:
        lines += [f"![MRR@10 per move and system]({figure_files['mrr']})", ""]
    lines += ["## Unfiltered test set: this run beside the paper", "", _markdown(summary.headline_test), "",
              f"Paper rows: {PAPER_SYSTEM}; {PAPER_GIVES['test']}.", ""]
    lines += ["## Fine-tuned vs baseline: paired differences over the same queries", "",
              "MRR@10 (%); Δ with its paired bootstrap interval, p from a paired sign-flip permutation test "
              "(tables/finetune_tuned_vs_baseline).", "", _markdown(summary.tuned_vs_baseline), ""]
    lines += ["## What differs from the paper", "", _markdown(summary.differences), ""]
    lines += ["## Queries per move and split", "", _markdown(summary.queries), ""]
    if "years" in figure_files:
        lines += ["## Papers per year and the split windows", "", f"![papers per year]({figure_files['years']})", ""]
    lines += ["## Reduced, replaced by a stand-in, or not run (from the tables' notes)", ""]
    lines += [f"- {'**' + r['what'] + '**: ' if r['what'] != '-' else ''}{r['why / how']} _({r['tables']})_"
              for r in summary.reductions.to_dict("records")] or ["_(nothing recorded)_"]
    lines += ["", "## Provenance", ""]
    lines += [f"- {key}: `{value}`" for key, value in summary.provenance.items()]
    lines += ["", "Inputs (sha256, first 16 hex digits):", "", _markdown(summary.inputs), "",
              ("Wall time per notebook of this run (pipeline timings; models, embeddings and intervals already computed "
               "from the same inputs are reused, so a rerun takes far less than a first run; the summary notebook "
               "itself is not yet timed):"), "",
              _markdown(summary.timings), ""]
    if not summary.timings.empty:
        lines += [f"Total: {summary.timings['seconds'].sum():.0f} s over {len(summary.timings)} notebook runs.", ""]
    return "\n".join(lines)


def write_summary(cfg: Config, params: SummaryParams | None = None) -> Summary:
    """Collect the summary, save its figures and write reports/summary.md."""
    from ..publish.published import save_figure, set_figure_style

    set_figure_style()
    summary = collect(cfg, params)
    report = Path(cfg.paths.summary_report)
    figure_files = {}
    if summary.figure is not None:
        saved = save_figure(summary.figure, "summary_mrr10", cfg, inputs=[cfg.paths.tables], labels=run_label_sources(cfg))
        figure_files["mrr"] = os.path.relpath(saved["png"], report.parent)
    years = papers_per_year(cfg)
    if years is not None:
        saved = save_figure(years, "papers_per_year_splits", cfg, inputs=[cfg.paths.papers])
        figure_files["years"] = os.path.relpath(saved["png"], report.parent)
    write_text_atomic(report, render_markdown(summary, figure_files))
    return summary


def papers_per_year(cfg: Config):
    """Papers per year and corpus with the split windows drawn (None before notebook 00 has run)."""
    from ..dataset import papers_per_year_figure
    from ..param_sections import DatasetParams

    if not Path(cfg.paths.papers).exists():
        return None
    papers = pd.read_parquet(cfg.paths.papers, columns=["corpus", "year"])
    return papers_per_year_figure(papers, cfg.section("dataset", DatasetParams))


class SummaryStage(Stage):
    """What notebook 14 shows: the summary written first (reports/summary.md), then its parts, one per cell."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = load_summary_params(cfg)
        self._summary: Summary | None = None

    @property
    def summary(self) -> Summary:
        """The collected summary; reports/summary.md and its figures are written on first use."""
        if self._summary is None:
            self._summary = write_summary(self.cfg, self.params)
        return self._summary

    def provenance(self) -> dict[str, Any]:
        return self.summary.provenance

    def labels(self):
        return labels_markdown(self.summary)

    def claims_rule(self):
        return claims_markdown(self.summary)

    def papers_per_year(self):
        return papers_per_year(self.cfg)
