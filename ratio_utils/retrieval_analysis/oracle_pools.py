"""Oracle move filtering (paper Appendix F.2, Table 10): a split's candidate pool restricted to the gold
sentences of one move, as if the retriever knew which move a candidate answers.

`oracle_pool` builds a pool; `oracle_filtering` is the whole of F.2 for stage 11 (ratio_utils.stages.analyses):
the untuned and the tuned retriever of each move against pool (a), the golds of all its test pairs, and pool (b),
the golds of its silver pairs, with intervals and paired tests.

Reads:  the benchmark, the analysed retrievers' runs (analysed_runs.RunSource), cfg.paths.bootstrap_cache.
Writes: tables/table10_oracle_filtering (with provenance and records); the runs RunSource keeps
        (data/analysis_runs/oracle-<split>-<move>/).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.intervals import Cell, IntervalCache, cell, cell_record, paired_cell
from ..evaluation.run_scoring import score_run
from ..evaluation.stats import DAGGER
from ..param_sections import AnalysisParams
from ..publish.label_sources import silver_sources
from ..publish.published import records_frame, write_table
from ..schema import MOVES, Move, Split
from .analysed_runs import Retrievers, RunSource, interval_note, reduced_note
from .lexical_overlap import query_set_name, query_split

TRIVIAL_MARK = " (pool ≤"  # R@k cells of pools with at most k candidates: '100 (pool ≤ 10)'


def oracle_pool(bench: Benchmark, move: Move | str, split: Split | str) -> pd.DataFrame:
    """The gold sentences of every pair of one move and split, once each (docid, text).

    Pool (a) of Table 10 is `oracle_pool(bench, move, "test")`; pool (b) `oracle_pool(bench, move, "silver")`.
    """
    pairs = bench.queries(move, split)
    pool = pairs[["gold_id", "goldSentence"]].rename(columns={"gold_id": "docid", "goldSentence": "text"})
    return pool.drop_duplicates("docid").sort_values("docid").reset_index(drop=True)


def oracle_cell_text(column: str, c: Cell, pool_size: int) -> str:
    """A Table 10 cell; R@k of a pool with at most k candidates is 100 by construction and says so."""
    kind, _, k = column.partition("@")
    if kind == "R" and pool_size <= int(k):
        return f"100{TRIVIAL_MARK} {k})" + (DAGGER if c.indicative else "")
    return c.text()


def oracle_filtering(cfg: Config, bench: Benchmark, params: AnalysisParams, retrievers: Retrievers, stage: str,
                     columns: Mapping[str, str], *, write: bool = True) -> pd.DataFrame:
    """Table 10: the analysis queries against (a) the golds of all test pairs of the move, (b) of its silver pairs.

    `columns`: the table's columns, each with the metric it shows ('M@10' -> 'MRR@10'), in order."""
    source = RunSource(cfg, bench, params, retrievers, stage)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, params.n_resamples)
    shown_columns, metrics = list(columns), list(columns.values())
    rows, notes, records = [], [], []
    for move in (m.value for m in MOVES):
        split = query_split(bench, move)
        qrels = source.qrels(move, split)
        panels = [("(a) golds of all test pairs", Split.TEST.value)]
        if split == Split.SILVER.value:
            panels.append(("(b) golds of silver pairs", Split.SILVER.value))
        else:
            notes.append(f"{move}: silver absent, so the queries are the unfiltered test queries and pool (b) would "
                         "equal pool (a); panel (b) is not shown.")
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
                scores = score_run(source.run(tuned_on, move, split, pool_name, pool), qrels, metrics=metrics,
                                   per_query=True)
                per_system[setup] = scores
                row = {**base_row, **{c: oracle_cell_text(c, cell(scores[columns[c]], cache), len(pool))
                                      for c in shown_columns}}
                if setup == "Tuned":
                    diff, p = paired_cell(cache, scores["MRR@10"], per_system["Baseline"]["MRR@10"])
                    row.update({"Tuned - baseline M@10": diff.text(), "p": p})
                    records.append(cell_record(diff, p, scope=f"oracle pool {panel}", move=move, query_set=split,
                                               metric="M@10", subject="tuned", reference="baseline"))
                rows.append(row)
    for move, why in retrievers.missing.items():
        notes.append(f"{move}: {why}; its Tuned rows are empty.")
    table = pd.DataFrame(rows)
    order = ["Panel", "Move", "Query set", "Pool size", "Queries", "Setup", *shown_columns, "Tuned - baseline M@10",
             "p"]
    table = table.reindex(columns=[c for c in order if c in table.columns])
    table = table.astype(object).where(table.notna(), None)
    shown = stats.with_p_text(table, params.n_resamples).fillna("")
    trivial = sorted({c for c in shown_columns
                      if c in shown and shown[c].astype(str).str.contains(TRIVIAL_MARK, regex=False).any()},
                     key=shown_columns.index)
    if trivial:
        notes.append(f"'100{TRIVIAL_MARK} k)': the pool holds no more than k candidates, so every gold is in the top "
                     f"k by construction and R@k is 100 whatever the retriever ({', '.join(trivial)} of the "
                     "panels marked); not a result.")
    if write:
        write_table(table, "table10_oracle_filtering", cfg, inputs=[cfg.paths.benchmark], shown=shown,
                    labels=silver_sources(bench), records=records_frame(records),
                    caption=f"Table 10: oracle move filtering (%), {retrievers.label} before (Baseline) and after "
                            "(Tuned) fine-tuning on the move, with candidate pools of the move's gold sentences only.",
                    notes=["Pool (a): the gold sentences of all test pairs of the move; pool (b): only those of its "
                           "silver pairs; the query's own sentence is never a candidate. Scores are not comparable "
                           "across pools of different sizes: read each panel on its own.", interval_note(),
                           *reduced_note(params), *notes])
    cache.save()
    return shown
