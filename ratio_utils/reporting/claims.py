"""The paper's claims that this compendium can test, each decided by one stated rule (notebook 14's claims table).

Reads the long numeric records the result tables write beside themselves
(`ratio_utils.publish.published.read_records`: tables/*.records.csv), never their display cells. A claim is tested by paired differences (subject -
reference over the same queries) in the direction the paper states; each comparison gets a verdict by
`decide`, and a claim's verdict for one move and query set combines them by `combine_verdicts`:

- a comparison **supports** the claim when it has at least `MIN_QUERIES` queries, its paired 95% interval
  excludes 0 on the paper's side and its permutation p is below `ALPHA`; it **contradicts** it when the same
  holds on the other side; otherwise it does **not show** it;
- a claim is supported when every comparison supports it, contradicted when any comparison contradicts it,
  not shown otherwise, and *cannot test here* when this run has no comparison for it (the reason is given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..evaluation import stats
from ..schema import MOVES

MIN_QUERIES = stats.INDICATIVE_BELOW
ALPHA = 0.05
SUPPORTED, CONTRADICTED, NOT_SHOWN, CANNOT_TEST = "supported", "contradicted", "not shown", "cannot test here"
QUERY_SETS = ("silver", "test")  # the paper's primary set first
RULE = (f"Rule: a comparison supports a claim when it has ≥ {MIN_QUERIES} queries, its paired 95% interval excludes 0 "
        f"in the paper's direction and p < {ALPHA}; it contradicts the claim when the same holds in the other direction; "
        "otherwise it does not show it. A claim is supported when all its comparisons support it, contradicted when any "
        "contradicts it, otherwise not shown; 'cannot test here' when this run has no such comparison.")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and the records that test it."""

    text: str
    where: str  # where the paper states it
    table: str  # the records' table
    direction: int  # +1: the paper says subject > reference; -1: subject < reference
    select: Callable[[pd.DataFrame], pd.DataFrame] = lambda records: records  # the comparisons that test it
    paper: dict | None = None  # move -> the paper's number, as it states it
    moves: tuple[str, ...] = tuple(m.value for m in MOVES)
    cannot_test: str = "no such comparison in this run"  # why, when no record exists


def _differences(records: pd.DataFrame) -> pd.DataFrame:
    return records[records["reference"].notna() & (records["reference"] != "")]


CLAIMS = (
    Claim("Fine-tuning improves the retriever on every move", "§5.2, Appendix D", "finetune_tuned_vs_baseline", +1,
          paper={"specify": "+20.0", "address": "+14.3", "broaden": "+10.0"},
          cannot_test="notebook 09 has not run"),
    Claim("LLM reranking of the top 100 improves the first stage", "§5.2", "rerank_vs_first_stage", +1,
          select=lambda r: r[r["metric"] == "M@10"], paper={"specify": "+8.4 to +15.5", "address": "+8.4 to +15.5"},
          cannot_test="no reranked run (no LLM endpoint and no recorded answers for these requests)"),
    Claim("The tuned model's top k overlaps the query less than the untuned one's (F.1)", "§5.2, Appendix F.1",
          "analysis_overlap_comparisons", -1, paper={m.value: "24 of 24 comparisons" for m in MOVES},
          cannot_test="notebook 11 has not run"),
    Claim("Fine-tuning still helps in oracle pools of the move's golds (F.2)", "§5.2, Appendix F.2",
          "table10_oracle_filtering", +1, paper={"specify": "+22.1 / +26.6", "address": "+19.4 / +20.1",
                                                 "broaden": "+14.8 / +15.8"},
          cannot_test="notebook 11 has not run"),
    Claim("On Specify and Address queries, the retriever tuned on the queried move scores best (F.3)", "§5.2, Appendix F.3",
          "analysis_cross_move_transfer", +1, select=lambda r: r[r["scope"] == "own move vs other move"],
          paper={"specify": "best for every retriever", "address": "best for every retriever"}, moves=("specify", "address"),
          cannot_test="notebook 11 has not run, or a move has no tuned retriever"),
    Claim("The best untuned dense retriever beats BM25", "§5.2", "baseline_comparisons", +1,
          select=lambda r: r[r["scope"] == "best untuned dense"],
          paper={"specify": "+12.0", "address": "+3.8", "broaden": "+7.7"}, cannot_test="notebook 08 has not run"),
    Claim("After fine-tuning, the tuned retriever beats the best BM25", "§5.2", "baseline_comparisons", +1,
          select=lambda r: r[r["scope"] == "best tuned vs best BM25"],
          paper={m.value: "the strongest retriever" for m in MOVES}, cannot_test="notebook 09 has not run"),
    Claim("BM25 bigram and trigram do worse than unigram", "§5.2, Appendix D", "baseline_comparisons", -1,
          select=lambda r: r[r["scope"] == "bm25 n-gram"], paper={m.value: "lower" for m in MOVES},
          cannot_test="notebook 08 has not run"),
    Claim("Humans prefer the tuned lists", "§5.3, Appendix G", "table2_human_eval", +1,
          cannot_test="no human labels: notebook 12 wrote the annotation packets only"),
)


def decide(value: float, low: float, high: float, p: float, n: int, direction: int) -> str:
    """The verdict of one paired comparison (see the module docstring)."""
    if pd.isna(value) or pd.isna(low) or pd.isna(high) or pd.isna(p) or n < MIN_QUERIES or p >= ALPHA:
        return NOT_SHOWN
    if (low > 0 and direction > 0) or (high < 0 and direction < 0):
        return SUPPORTED
    if (low > 0 and direction < 0) or (high < 0 and direction > 0):
        return CONTRADICTED
    return NOT_SHOWN


def combine_verdicts(verdicts: list[str]) -> str:
    if not verdicts:
        return CANNOT_TEST
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return SUPPORTED if all(v == SUPPORTED for v in verdicts) else NOT_SHOWN


def _evidence(row: pd.Series, verdict: str) -> str:
    label = row["metric"] if pd.isna(row.get("scope")) or not row.get("scope") else f"{row['scope']}, {row['metric']}"
    digits = 3 if str(row["metric"]).startswith("Jaccard") else 1  # overlaps are fractions, the rest % points
    interval = stats.format_ci(row["value"], row["low"], row["high"], scale=1, digits=digits)
    sign = "+" if row["value"] >= 0 else ""  # a difference reads with its sign
    return (f"{label}: {row['subject']} - {row['reference']} {sign}{interval}{stats.dagger(int(row['n']))}, "
            f"p {stats.format_p(row['p'])}, "
            f"n {int(row['n'])} ({verdict})")


def _comparisons(claim: Claim, records: pd.DataFrame, move: str, query_set: str) -> pd.DataFrame:
    part = _differences(records[(records["table"] == claim.table) & (records["move"] == move)
                                & (records["query_set"] == query_set)])
    return claim.select(part) if not part.empty else part


def claims_table(records: pd.DataFrame, claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One row per claim and move: the paper's number and, per query set, the verdict and its deciding numbers."""
    rows = []
    for claim in claims:
        measured = sorted(set(records.loc[records["table"] == claim.table, "query_set"].dropna()))
        for move in claim.moves:
            row = {"claim": claim.text, "paper": claim.where, "move": move.capitalize(),
                   "paper says": (claim.paper or {}).get(move, "")}
            for query_set in QUERY_SETS:
                found = _comparisons(claim, records, move, query_set)
                verdicts = [decide(r.value, r.low, r.high, r.p, int(r.n), claim.direction) for r in found.itertuples()]
                verdict = combine_verdicts(verdicts)
                name = "silver" if query_set == "silver" else "unfiltered test"
                row[f"{name}: verdict"] = verdict
                if verdicts:
                    row[f"{name}: evidence"] = "; ".join(_evidence(r, v) for (_, r), v in zip(found.iterrows(), verdicts))
                elif measured and query_set not in measured:
                    row[f"{name}: evidence"] = f"not measured on this query set ({claim.table}: {', '.join(measured)} only)"
                else:
                    row[f"{name}: evidence"] = claim.cannot_test
            rows.append(row)
    return pd.DataFrame(rows)


def verdict_counts(table: pd.DataFrame) -> pd.DataFrame:
    """How many claim rows each verdict has, per query set (the summary's one-line reading)."""
    columns = [c for c in table.columns if c.endswith(": verdict")]
    counts = {c.removesuffix(": verdict"): table[c].value_counts() for c in columns}
    return pd.DataFrame(counts).reindex([SUPPORTED, CONTRADICTED, NOT_SHOWN, CANNOT_TEST]).fillna(0).astype(int)
