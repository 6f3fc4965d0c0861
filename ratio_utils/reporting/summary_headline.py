"""This run beside the paper (notebook 14, `ratio_utils.stages.summary`): the headline cells of Tables 1 and 7, the
paper's numbers for its strongest retriever as its text states them, the gains it states on the silver set beside
this run's paired differences, notebook 09's paired comparison in its display form, and the reranker's own
statistic (notebook 10's gold promotion and first-stage recall, `ratio_utils.evaluation.rerank_promotion`) beside the
paper's rates.

Reads:  the long numeric records of the tables (`ratio_utils.publish.published.read_records`: tables/*.records.csv,
        never their display cells), tables/finetune_tuned_vs_baseline.csv, tables/rerank_summary.csv (it writes no
        records: its promotion cells are read as the table wrote them).
Writes: nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..evaluation import stats
from ..evaluation.rerank_promotion import PAPER_FIRST_STAGE, PAPER_PROMOTION, promotion_columns
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
    "silver": "the paper's text gives, on the silver set, only Tuned + rerank M@10 and Tuned R@10 for Address and "
              "Broaden; its silver Baseline and Tuned M@10 are not stated (only the gains below)",
    "test": "the paper's text gives, on the unfiltered test set, Baseline and Tuned M@10 and Tuned R@10; no reranked "
            "numbers",
}
# Gains the paper states on the silver set (§5.2), in MRR@10 points, with the records of this run that measure
# the same.
PAPER_SILVER_GAINS = [
    ("Tuned - Baseline", "finetune_tuned_vs_baseline", "", {"specify": 20.0, "address": 14.3, "broaden": 10.0}),
    ("best untuned dense - BM25", "baseline_comparisons", "best untuned dense",
     {"specify": 12.0, "address": 3.8, "broaden": 7.7}),
    ("reranked - its first stage", "rerank_vs_first_stage", "", {"specify": "8.4 to 15.5 (its three tuned retrievers)",
                                                               "address": "8.4 to 15.5 (its three tuned retrievers)"}),
]

TEST_TABLE = "table7_test_full"  # the unfiltered test set's table (paper_tables.TABLE_SPECS)
RESULT_COLUMNS = ["system", "prefix", "setup", "move", "metric", "value", "low", "high", "queries"]


def results_long(records: pd.DataFrame, table: str) -> pd.DataFrame:
    """The cells of one of Tables 1/7/8, read from its numeric records, as long rows: system (the row's model),
    prefix, setup, move, metric, value, low, high (%), queries (the cell's own count: a reranked cell's seeded
    sample); in the table's row order."""
    cells = records[(records["table"] == table) & records["reference"].isna() & records["model"].notna()]
    return cells.rename(columns={"model": "system", "n": "queries"})[RESULT_COLUMNS].reset_index(drop=True)


def headline_table(long: pd.DataFrame, metrics: tuple[str, ...], queries: pd.DataFrame | None = None,
                   query_set: str = "silver") -> pd.DataFrame:
    """This run's rows (one per system and move) beside the paper's numbers on the same kind of query set
    (silver beside silver, unfiltered test beside unfiltered test); cells in %, `value [low, high]`."""
    ours = long[long["metric"].isin(metrics)].groupby(["system", "prefix", "setup", "move"], sort=False)
    rows = [_our_row(keys, part, metrics, queries) for keys, part in ours]
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
    table = pd.DataFrame(rows, columns=["source", "system", "setup", "move",
                                        *(["queries"] if queries is not None else []), *metrics])
    order = {m.value: i for i, m in enumerate(MOVES)}
    table["_move"] = table["move"].map(order)
    table["_paper"] = table["source"].str.startswith("paper")
    return (table.sort_values(["_move", "_paper"], kind="stable").drop(columns=["_move", "_paper"])
            .reset_index(drop=True))


def _our_row(keys: tuple, part: pd.DataFrame, metrics: tuple[str, ...], queries: pd.DataFrame | None) -> dict:
    """One headline row of this run: a system's cells of one move."""
    system, prefix, setup, move = keys
    by_metric = part.set_index("metric")
    shown = system if prefix in ("-", None) or pd.isna(prefix) else f"{system} ({prefix})"
    row = {"source": "this run", "system": shown, "setup": setup, "move": move}
    if queries is not None:
        # the table's own count (its query set: silver where present) before the test split's
        counted = part["queries"].dropna() if "queries" in part else pd.Series(dtype=float)
        row["queries"] = int(counted.iloc[0]) if not counted.empty else _queries_for(queries, move)
    few = queries is not None and row.get("queries") is not None and stats.is_indicative(int(row["queries"]))
    for metric in metrics:
        r = by_metric.loc[metric] if metric in by_metric.index else None
        row[metric] = ("" if r is None else
                       stats.format_ci(r["value"], r["low"], r["high"], scale=1) + (stats.DAGGER if few else ""))
    return row


def _queries_for(queries: pd.DataFrame, move: str) -> int | None:
    """Test queries of a move: the count for a table that does not carry its own."""
    part = queries[(queries["move"] == move) & (queries["split"] == Split.TEST.value)]
    return None if part.empty else int(part["queries"].iloc[0])


def silver_gains(records: pd.DataFrame) -> pd.DataFrame:
    """The gains the paper states on the silver set beside this run's paired differences of the same kind."""
    rows = []
    for quantity, table, scope, paper in PAPER_SILVER_GAINS:
        for move in (m.value for m in MOVES):
            if move not in paper:
                continue
            found = records[(records["table"] == table) & (records["move"] == move)
                            & (records["query_set"] == "silver") & (records["metric"] == "M@10")
                            & records["reference"].notna()]
            if scope:
                found = found[found["scope"] == scope]
            ours = "; ".join(f"{stats.format_ci(r.value, r.low, r.high, scale=1)}{stats.dagger(int(r.n))} "
                             f"({r.subject}, n {int(r.n)})" for r in found.itertuples()) or "not computed in this run"
            value = paper[move]
            rows.append({"gain (M@10 points, silver)": quantity, "move": move,
                         "paper (ModernBERT-embed-large)": f"{value:.1f}" if isinstance(value, float) else value,
                         "this run": ours})
    return pd.DataFrame(rows)


def tuned_vs_baseline(tables: Path) -> pd.DataFrame:
    """Notebook 09's paired comparison (<tables>/finetune_tuned_vs_baseline.csv) in its display form; empty before
    notebook 09 has run."""
    from ..train.tables import tuned_vs_baseline_display  # here: train/ loads torch, needed only once 09 has run

    path = Path(tables) / "finetune_tuned_vs_baseline.csv"
    if not path.exists():
        return pd.DataFrame()
    frame = pd.read_csv(path)
    if "move" not in frame.columns:  # a table written before intervals were kept: show it as it is
        return frame
    return tuned_vs_baseline_display(frame.astype(object).where(frame.notna(), None))


RERANK_SUMMARY = "rerank_summary"  # notebook 10's table (ratio_utils.stages.llm_rerank)
_PROMOTED = re.compile(r"^gold promoted to top (\d+) % \[95% CI\]$")
_RECALL = re.compile(r"^first stage R@(\d+) % \[95% CI\]$")
_LEADING_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
PROMOTION_GAP = "this run - paper (points)"


def _promotion_meaning(top_n: int, k: int) -> str:
    rates = ", ".join(f"{move.capitalize()} {rate:.1f} %" for move, rate in PAPER_PROMOTION.items())
    return (f"The reranker is shown the first stage's top {top_n} only, so its gain is bounded by the first stage's "
            f"recall@{top_n} (a gold outside the top {top_n} is never shown to it); the promotion rate is the share of "
            f"the answered queries with the gold in that top {top_n} whose gold it puts in its top {k}, beside the "
            f"paper's ({rates}: GPT-5-mini over the {PAPER_FIRST_STAGE}), and a rate far above the paper's says more "
            "about the model that answered than about the retriever. Cells: % [95% bootstrap interval over queries], "
            f"n the queries each is computed on (from tables/{RERANK_SUMMARY}, notebook 10); † fewer than "
            f"{stats.INDICATIVE_BELOW} queries.")


def rerank_promotion(tables: Path) -> tuple[pd.DataFrame, str]:
    """The reranker's own statistic per first stage and move, as notebook 10 wrote it in tables/rerank_summary.csv
    (`evaluation.rerank_promotion.promotion_cells`): the first stage's R@top_n with its n, the share of gold promoted
    to the top k with its n beside the paper's rate, and their difference in points; with one sentence on what it
    means, or, when the table or its promotion columns are absent, why nothing is shown."""
    path = Path(tables) / f"{RERANK_SUMMARY}.csv"
    if not path.exists():
        return pd.DataFrame(), (f"tables/{RERANK_SUMMARY} is absent: notebook 10 (LLM reranking) has not run, so the "
                                "reranker's gold-promotion rate and the first stage's recall@100 are not shown.")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    promoted = [m for m in map(_PROMOTED.match, frame.columns) if m]
    recall = [m for m in map(_RECALL.match, frame.columns) if m]
    if not promoted or not recall:
        return pd.DataFrame(), (f"tables/{RERANK_SUMMARY} was written before its gold-promotion columns existed (an "
                                "older notebook 10): rerun notebook 10 to show the reranker's gold-promotion rate.")
    top_n, k = int(recall[0].group(1)), int(promoted[0].group(1))
    names = promotion_columns(top_n, k)
    shown = pd.DataFrame({
        "system": frame["first stage"] + " + rerank", "move": frame["move"],
        "query set": frame["split"] if "split" in frame else "",
        **{names[key]: frame[names[key]] if names[key] in frame else ""
           for key in ("recall", "n_first", "promoted", "n_promoted", "paper")}})
    shown[names["promoted"]] = shown[names["promoted"]].replace("", f"— (no answered query with its gold in the top "
                                                                    f"{top_n})")
    shown[PROMOTION_GAP] = [_gap(ours, paper) for ours, paper in zip(shown[names["promoted"]], shown[names["paper"]])]
    return shown, _promotion_meaning(top_n, k)


def _gap(ours: str, paper: str) -> str:
    """This run's rate minus the paper's, in points ('' where either is missing)."""
    a, b = _LEADING_NUMBER.match(str(ours)), _LEADING_NUMBER.match(str(paper))
    return f"{float(a.group(1)) - float(b.group(1)):+.1f}" if a and b else ""
