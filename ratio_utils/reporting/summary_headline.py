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
from ..paper_values import paper_section
from ..schema import MOVES, Split
from .claims import effective_n

# The paper's numbers for its strongest retriever, ModernBERT-embed-large with its recommended prefix, as its
# text states them (its Table 1 body is not in the text available here), from their one home,
# ratio_utils/paper_values.toml ([headline]). Values in %.
PAPER_REFERENCE = [
    {"query set": entry["query_set"], "setup": entry["setup"], "move": move, "metric": entry["metric"],
     "value": entry[move], "where": entry["where"]}
    for entry in paper_section("headline")["values"] for move in (m.value for m in MOVES) if move in entry]
PAPER_SYSTEM = paper_section("headline")["system"]
# What the paper's text gives of each query set, and what it does not (its Table 1/7 bodies are not in the text here).
PAPER_GIVES = {
    "silver": "the paper's text gives, on the silver set, only Tuned + rerank M@10 and Tuned R@10 for Address and "
              "Broaden; its silver Baseline and Tuned M@10 are not stated (only the gains below)",
    "test": "the paper's text gives, on the unfiltered test set, Baseline and Tuned M@10 and Tuned R@10; no reranked "
            "numbers",
}
# Gains the paper states on the silver set (§5.2), in MRR@10 points (a number) or as it phrases them (a text), with
# the records of this run that measure the same; from paper_values.toml ([claims.*]).
PAPER_SILVER_GAINS = [
    (quantity, table, scope, paper_section(f"claims.{name}").get("gain") or paper_section(f"claims.{name}")["says"])
    for quantity, table, scope, name in (
        ("Tuned - Baseline", "finetune_tuned_vs_baseline", "", "finetune"),
        ("best untuned dense - BM25", "baseline_comparisons", "best untuned dense", "best_dense_vs_bm25"),
        ("reranked - its first stage", "rerank_vs_first_stage", "", "rerank"))]

TEST_TABLE = "table7_test_full"  # the unfiltered test set's table (paper_tables.TABLE_SPECS)
RESULT_COLUMNS = ["system", "prefix", "setup", "move", "metric", "value", "low", "high", "queries", "query_set"]


def results_long(records: pd.DataFrame, table: str) -> pd.DataFrame:
    """The cells of one of Tables 1/7/8, read from its numeric records, as long rows: system (the row's model),
    prefix, setup, move, metric, value, low, high (%), queries (the cell's own count: a reranked cell's seeded
    sample), query_set; in the table's row order."""
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
            ours = "; ".join(_gain_text(r) for r in found.itertuples()) or "not computed in this run"
            value = paper[move]
            rows.append({"gain (M@10 points, silver)": quantity, "move": move,
                         "paper (ModernBERT-embed-large)": f"{value:.1f}" if isinstance(value, float) else value,
                         "this run": ours})
    return pd.DataFrame(rows)


def _gain_text(record) -> str:
    """One paired difference of this run: value [interval], † on its effective n, the subject, n and effective n,
    and the reranked run's own note (its unanswered requests) where it has one."""
    effective = effective_n(record)
    queries = f"n {int(record.n)}" + ("" if effective == int(record.n) else f", effective n {effective}")
    scope = getattr(record, "scope", None)
    note = f"; {scope}" if record.table == "rerank_vs_first_stage" and isinstance(scope, str) and scope else ""
    sign = "+" if record.value >= 0 else ""  # a difference reads with its sign
    return (f"{sign}{stats.format_ci(record.value, record.low, record.high, scale=1)}{stats.dagger(effective)} "
            f"({record.subject}, {queries}{note})")


def reranked_rows(records: pd.DataFrame) -> list[str]:
    """One line per reranked row of this run (rerank_vs_first_stage, M@10): the paired gain over its first stage on
    the same sampled queries (a reranked cell covers its sample, the first stage's cell all queries, so the two rows
    read across give no gain), with n, effective n and the run's own note (its requests without an answer)."""
    found = records[(records["table"] == "rerank_vs_first_stage") & (records["metric"] == "M@10")
                    & records["reference"].notna()]
    return [f"{r.subject}, {str(r.move).capitalize()} ({r.query_set}): paired gain over {r.reference} on the same "
            f"queries {_gain_text(r)}" for r in found.itertuples()]


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
            f"recall@{top_n} (a gold outside the top {top_n} is never shown to it); the promotion rate is the share "
            f"of the answered queries with the gold in that top {top_n} whose gold it puts in its top {k}, beside the "
            f"paper's ({rates}: GPT-5-mini over the {PAPER_FIRST_STAGE}), and a rate far above the paper's says more "
            "about the model that answered than about the retriever. Where the silver judge and the reranker were "
            "answered by the same stand-in family (the label-source notes below name who answered each), promotion "
            "on silver queries can be inflated: the reranker is asked to find the sentence its own family accepted. "
            "Cells: % [exact Clopper–Pearson 95% interval for the promotion rate; the first stage's recall exact "
            "where each query's recall is 0 or 1, else a 95% bootstrap interval over queries], n the queries each is "
            f"computed on (from tables/{RERANK_SUMMARY}, notebook 10); rates are not pooled over first stages (they "
            f"rerank the same sampled queries); † fewer than {stats.INDICATIVE_BELOW} queries.")


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
