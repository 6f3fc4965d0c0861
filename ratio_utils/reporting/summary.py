"""The summary page (notebook 14, `ratio_utils.stages.summary`): every part collected into one `Summary`, and
reports/summary.md rendered from it. Computes nothing new about retrieval and says where each number comes from:

- the headline Tables 1 and 7 of this run beside the paper's numbers (`reporting/summary_headline`);
- the paper's claims, each decided by one stated rule (`reporting/claims`);
- queries (and pairs) per move and split, who produced the labels, what differs from the paper
  (`reporting/summary_setting`);
- a figure of MRR@10 per move and system, each bar with its own n (`reporting/summary_figure`);
- the reranker's own statistic, gold promotion beside the paper's rate and the first stage's recall@100
  (`reporting/summary_headline.rerank_promotion`, notebook 10);
- how scores move with pool size, its key rows, reading and figures (`reporting/summary_figure`, notebook 11);
- everything reduced, replaced by a stand-in or not run (the tables' own notes), the run's provenance and wall
  times (`reporting/summary_provenance`).

Reads:  cfg.paths.tables (*.records.csv, *.provenance.json, rerank_summary.csv, analysis_pool_size.csv), the
        benchmark, cfg.paths.papers, cfg.paths.mining_report,
        a pipeline run's timings.csv (its path given by the stage).
Writes: nothing (the stage writes reports/summary.md and the figures).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Config
from ..evaluation import stats
from ..param_sections import SummaryParams
from ..publish.label_sources import notes as label_notes
from ..publish.published import read_records
from ..schema import MOVES
from . import claims
from .summary_figure import mrr_figure, paired_gains, pool_size_rows
from .summary_headline import (
    PAPER_GIVES,
    PAPER_SYSTEM,
    TEST_TABLE,
    headline_table,
    rerank_promotion,
    reranked_rows,
    results_long,
    silver_gains,
    tuned_vs_baseline,
)
from .summary_provenance import input_checksums, notebook_times, reductions, run_provenance, shorten_paths, wall_times
from .summary_setting import (
    benchmark_of,
    contamination_caveat,
    differences,
    queries_per_split,
    run_label_sources,
    silver_waves,
)


@dataclass
class Summary:
    headline: pd.DataFrame  # silver beside the paper's silver numbers
    headline_test: pd.DataFrame  # unfiltered test beside the paper's unfiltered test numbers
    claims: pd.DataFrame
    claim_counts: pd.DataFrame
    gains: pd.DataFrame
    differences: pd.DataFrame
    label_sources: list  # the judge and rerankers behind the labels (`ratio_utils.publish.label_sources`)
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
    promotion: pd.DataFrame = field(default_factory=pd.DataFrame)  # notebook 10's gold promotion beside the paper's
    promotion_reading: str = ""  # what it means, or why it is not shown
    pool_size: pd.DataFrame = field(default_factory=pd.DataFrame)  # notebook 11's pool-size key rows
    pool_size_reading: str = ""  # the module's reading sentence, or why it is not shown
    claims_family: str = ""  # the families Holm's adjustment runs over and their sizes (`claims.family_statement`)
    reranked: list[str] = field(default_factory=list)  # each reranked row's paired gain on its sample, its note
    wave_acceptance: pd.DataFrame = field(default_factory=pd.DataFrame)  # the judge's acceptance per silver wave
    wave_scores: pd.DataFrame = field(default_factory=pd.DataFrame)  # silver MRR@10 per wave beside the pooled one
    wave_reading: str = ""  # how to read them ('' where no silver set pools waves)


def collect(cfg: Config, params: SummaryParams, timings: Path | None = None) -> Summary:
    """Every part of the summary from what the run wrote; `timings`: the pipeline run's timings.csv, if any."""
    records = read_records(cfg)
    long = results_long(records, params.table1)
    record_path = Path(cfg.paths.tables) / f"{params.table1}.provenance.json"
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    bench = benchmark_of(cfg)
    queries = queries_per_split(bench)
    sources = run_label_sources(cfg, bench)
    claim_rows = claims.claims_table(records)
    executed = notebook_times(cfg.paths.executed_notebooks, timings)
    wave_acceptance, wave_scores, wave_reading = silver_waves(cfg, bench)
    promotion, promotion_reading = rerank_promotion(cfg.paths.tables)
    pool, pool_reading = pool_size_rows(cfg.paths.tables)
    return Summary(
        headline=headline_table(long, params.metrics, queries, "silver"),
        headline_test=headline_table(results_long(records, TEST_TABLE), params.metrics, queries, "test"),
        claims=claim_rows,
        claim_counts=claims.verdict_counts(claim_rows),
        gains=silver_gains(records),
        differences=differences(cfg, bench, sources, queries),
        label_sources=sources,
        label_notes=label_notes(sources),
        contamination=contamination_caveat(cfg, bench),
        tuned_vs_baseline=tuned_vs_baseline(cfg.paths.tables),
        queries=queries,
        reductions=reductions(cfg),
        provenance=run_provenance(cfg),
        inputs=input_checksums(cfg),
        timings=executed if not executed.empty else wall_times(timings),
        figure=(mrr_figure(long, queries_label=record.get("caption", ""), gains=paired_gains(records))
                if not long.empty else None),
        table1_caption=record.get("caption", f"{params.table1} (not written yet: run notebooks 08-09)"),
        table1_notes=[shorten_paths(cfg, n) for n in record.get("notes", [])],
        promotion=promotion,
        promotion_reading=promotion_reading,
        pool_size=pool,
        pool_size_reading=pool_reading,
        claims_family=claims.family_statement(claims.comparison_family(records)),
        reranked=reranked_rows(records),
        wave_acceptance=wave_acceptance,
        wave_scores=wave_scores,
        wave_reading=wave_reading,
    )


def _markdown(frame: pd.DataFrame, **tabulate) -> str:
    if frame.empty:
        return "_(nothing recorded)_"
    return frame.astype(object).where(frame.notna(), "").to_markdown(index=False, **tabulate)


def label_lines(summary: Summary) -> list[str]:
    """Who produced the labels, and the contamination caveat, as Markdown lines."""
    lines = ([f"- {note}" for note in summary.label_notes]
             or ["- No LLM labels: the silver set and reranked runs are absent."])
    return lines + (["", f"**{summary.contamination}**"] if summary.contamination else [])


def claims_reading(summary: Summary) -> str:
    """The claims table in one line: claim rows per verdict and query set."""
    counts = summary.claim_counts
    return "; ".join(f"{query_set}: " + ", ".join(f"{int(n)} {verdict}" for verdict, n in counts[query_set].items()
                                                  if n)
                     for query_set in counts.columns)


def shared_answerer(sources: list) -> str:
    """A sentence when the silver judge and a reranker were answered by the same model (the `model` field of their
    responses): promotion on silver queries is then the reranker finding what its own family accepted. '' if not."""
    judges = {model for source in sources if source.role == "judge" for model in source.answered_by}
    shared = sorted({model for source in sources if source.role != "judge" for model in source.answered_by} & judges)
    if not shared:
        return ""
    return (f"In this run the silver judge and the reranker were answered by the same model ({', '.join(shared)}"
            f"{', a stand-in' if any(s.stand_in for s in sources) else ''}): their agreement on silver queries can "
            "inflate the promotion rate beside the paper's, where a different model (GPT-5.4) judged and GPT-5-mini "
            "reranked.")


def rerank_lines(summary: Summary) -> list[str]:
    """The reranking section: the reranker's own statistic per system and move beside the paper's, and what it
    means (or that notebook 10's table is absent), and whether the judge and the reranker shared a model."""
    lines = ["## LLM reranking: the reranker's own statistic (gold promotion)", "", summary.promotion_reading, ""]
    shared = shared_answerer(summary.label_sources)
    if shared and not summary.promotion.empty:
        lines += [f"**{shared}**", ""]
    return lines + ([_markdown(summary.promotion, disable_numparse=True), ""] if not summary.promotion.empty else [])


def pool_size_lines(summary: Summary, figure_files: dict[str, str]) -> list[str]:
    """How scores move with pool size (beyond the paper): the key rows of notebook 11's table, its reading sentence
    and its figures (or that they are absent)."""
    lines = ["## How scores move with pool size (beyond the paper)", ""]
    if summary.pool_size.empty:
        return lines + [summary.pool_size_reading, ""]
    lines += ["MRR@10 and R@10 (%) as the test pool's distractors are subsampled, every gold kept, so a smaller pool "
              "is gold-heavier (tables/analysis_pool_size, notebook 11: silver queries where they exist, else the "
              "unfiltered test set; cells the mean over the pool draws with its 95% bootstrap interval over queries, "
              "or bounds where the stored top-k cannot decide; the draws' range is in that table).", "",
              _markdown(summary.pool_size, disable_numparse=True), "", summary.pool_size_reading, ""]
    for move in (m.value for m in MOVES):
        key = f"pool_size_{move}"
        lines += ([f"![{move.capitalize()}: scores against pool size]({figure_files[key]})", ""] if key in figure_files
                  else [f"_{move.capitalize()}: figures/figure_pool_size_{move} absent "
                        "(no point for this move)._", ""])
    return lines


def wall_time_lines(summary: Summary) -> list[str]:
    """The wall time of the notebooks behind this page: each notebook's latest execution with its own time and when
    it finished (a notebook rerun alone keeps the others' times), what it reused, and their total."""
    times = summary.timings
    if "finished" in times:
        lead = ("Wall time per notebook, the latest execution of each (papermill's record in the executed notebook; "
                "notebooks rerun at different times show their own; models, embeddings and intervals already computed "
                "from the same inputs are reused, so a rerun takes far less than a first run; the summary notebook "
                "itself is not yet timed):")
    else:
        lead = ("Wall time per notebook of this pipeline run (its timings; no executed notebook was found; the "
                "summary notebook itself is not yet timed):")
    lines = [lead, "", _markdown(times), ""]
    if times.empty:
        return lines
    seconds = times["seconds"].dropna()
    untimed = len(times) - len(seconds)
    return lines + [f"Total: {seconds.sum():,.0f} s ({seconds.sum() / 3600:.1f} h) over the latest executions of "
                    f"{len(seconds)} notebooks" + (f"; {untimed} without a recorded time" if untimed else "")
                    + ".", ""]


def render_markdown(summary: Summary, figure_files: dict[str, str]) -> str:
    """reports/summary.md: every section of the notebook as Markdown (figures linked, relative paths)."""
    lines = ["# Ratio rebuild: summary of this run", "",
             "Written by notebook 14 (`ratio_utils.stages.summary`) from the tables, benchmark and timings of the "
             "run; numbers are not typed in by hand. Cells: value [95% bootstrap interval over queries] where the "
             f"table carries one; † marks cells on fewer than {stats.INDICATIVE_BELOW} queries (indicative only).", ""]
    lines += ["## Who produced the labels", "", *label_lines(summary), ""]
    lines += ["## The paper's claims tested by this run", "", claims.RULE, "", summary.claims_family, "",
              f"Claim rows per verdict — {claims_reading(summary)}.", "", _markdown(summary.claims), ""]
    lines += ["## Silver test set: this run beside the paper", "",
              f"Source table: {summary.table1_caption}", "", _markdown(summary.headline), "",
              f"Paper rows: {PAPER_SYSTEM}; {PAPER_GIVES['silver']}.", ""]
    if summary.reranked:
        lines += ["A reranked row covers its seeded sample of queries, its first stage's row all of them: read the "
                  "gain from the paired difference on the sample, never across the rows:", "",
                  *(f"- {line}" for line in summary.reranked), ""]
    if not summary.gains.empty:
        lines += ["Gains the paper states on the silver set beside this run's paired differences (points, 95% paired "
                  "bootstrap interval; each over the queries both systems scored, a reranked run's on its sample; "
                  "† on the effective n, the queries that can differ):", "", _markdown(summary.gains), ""]
    if summary.wave_reading:
        lines += ["### The silver set's judge waves", "", summary.wave_reading, "",
                  _markdown(summary.wave_acceptance, disable_numparse=True), "",
                  _markdown(summary.wave_scores, disable_numparse=True), ""]
    if "mrr" in figure_files:
        lines += [f"![MRR@10 per move and system]({figure_files['mrr']})", ""]
        if summary.reranked:
            lines += ["A reranked bar is scored on its sample, its first stage's bar on every query: the paired "
                      "gains are listed above.", ""]
    lines += ["## Unfiltered test set: this run beside the paper", "", _markdown(summary.headline_test), "",
              f"Paper rows: {PAPER_SYSTEM}; {PAPER_GIVES['test']}.", ""]
    lines += ["## Fine-tuned vs baseline: paired differences over the same queries", "",
              "MRR@10 (%); Δ with its paired bootstrap interval, p from a paired sign-flip permutation test "
              "(tables/finetune_tuned_vs_baseline).", "", _markdown(summary.tuned_vs_baseline), ""]
    lines += rerank_lines(summary) + pool_size_lines(summary, figure_files)
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
              *wall_time_lines(summary)]
    return "\n".join(lines)
