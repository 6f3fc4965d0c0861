"""The paper's claims that this compendium can test, each decided by one stated rule (notebook 14's claims table).

Reads the long numeric records the result tables write beside themselves
(`ratio_utils.publish.published.read_records`: tables/*.records.csv), never their display cells. A claim is tested by
paired differences (subject - reference over the same queries) in the direction the paper states; each comparison gets
a verdict by `decide`, and a claim's verdict for one move and query set combines them by `combine_verdicts`:

- the **family** of one query set is every comparison that decides a claim of this run (every claim, every move) on
  that query set; their permutation p-values are adjusted by Holm's step-down method over the family
  (`stats.holm_adjust`), so the chance of any false verdict in the family stays below `ALPHA`;
- a comparison **supports** the claim when at least `MIN_QUERIES` of its queries can differ (its effective n: both
  systems ranked them, and neither kept a first-stage order for want of an answer), its paired 95% interval
  excludes 0 on the paper's side and its Holm-adjusted p is below `ALPHA`; it **contradicts** it when the same holds
  on the other side; otherwise it does **not show** it;
- a claim is supported when every comparison supports it, contradicted when any comparison contradicts it,
  not shown otherwise, and *cannot test here* when this run has no comparison for it (the reason is given).

The paper's numbers (the "paper says" column) come from ratio_utils/paper_values.toml.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..evaluation import stats
from ..paper_values import paper_section
from ..schema import MOVES

MIN_QUERIES = stats.INDICATIVE_BELOW
ALPHA = 0.05
SUPPORTED, CONTRADICTED, NOT_SHOWN, CANNOT_TEST = "supported", "contradicted", "not shown", "cannot test here"
QUERY_SETS = ("silver", "test")  # the paper's primary set first
RULE = (f"Rule: the p-values of all comparisons deciding a claim on one query set (the family: every claim and move "
        "of this run on that query set) are adjusted by Holm's method; a comparison supports a claim when at least "
        f"{MIN_QUERIES} of its queries can differ (effective n: both systems ranked them and neither kept a "
        "first-stage order for want of an answer), its paired 95% interval excludes 0 in the paper's direction and "
        f"its Holm-adjusted p < {ALPHA}; it contradicts the claim when the same holds in the other direction; "
        "otherwise it does not show it. A claim is supported when all its comparisons support it, "
        "contradicted when any contradicts it, otherwise not shown; 'cannot test here' when this run has no such "
        "comparison.")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and the records that test it.

    text: the claim, as the table states it.
    where: where the paper states it.
    table: the records' table that tests it.
    direction: +1: the paper says subject > reference; -1: subject < reference.
    select: the comparisons of that table that test it.
    paper: move -> the paper's number, as it states it (from paper_values.toml).
    moves: the moves the paper states it for.
    cannot_test: why, when no record exists.
    """

    text: str
    where: str
    table: str
    direction: int
    select: Callable[[pd.DataFrame], pd.DataFrame] = lambda records: records
    paper: dict | None = None
    moves: tuple[str, ...] = tuple(m.value for m in MOVES)
    cannot_test: str = "no such comparison in this run"


def _differences(records: pd.DataFrame) -> pd.DataFrame:
    return records[records["reference"].notna() & (records["reference"] != "")]


def _paper(name: str) -> tuple[str, dict]:
    """(where, move -> the paper's cell) of one claim of paper_values.toml: its `says` as written, or its `gain`
    (MRR@10 points) with a sign."""
    section = paper_section(f"claims.{name}")
    says = section.get("says") or {move: f"{gain:+.1f}" for move, gain in section.get("gain", {}).items()}
    return section["where"], says


def _claim(text: str, name: str, table: str, direction: int, **options) -> Claim:
    where, says = _paper(name)
    return Claim(text, where, table, direction, paper=says or None, **options)


CLAIMS = (
    _claim("Fine-tuning improves the retriever on every move", "finetune", "finetune_tuned_vs_baseline", +1,
           cannot_test="notebook 09 has not run"),
    _claim("LLM reranking of the top 100 improves the first stage", "rerank", "rerank_vs_first_stage", +1,
           select=lambda r: r[r["metric"] == "M@10"],
           cannot_test="no reranked run (no LLM endpoint and no recorded answers for these requests)"),
    _claim("The tuned model's top k overlaps the query less than the untuned one's (F.1)", "overlap",
           "analysis_overlap_comparisons", -1, cannot_test="notebook 11 has not run"),
    _claim("Fine-tuning still helps in oracle pools of the move's golds (F.2)", "oracle_pools",
           "table10_oracle_filtering", +1, cannot_test="notebook 11 has not run"),
    _claim("On Specify and Address queries, the retriever tuned on the queried move scores best (F.3)", "transfer",
           "analysis_cross_move_transfer", +1, select=lambda r: r[r["scope"] == "own move vs other move"],
           moves=("specify", "address"), cannot_test="notebook 11 has not run, or a move has no tuned retriever"),
    _claim("The best untuned dense retriever beats BM25", "best_dense_vs_bm25", "baseline_comparisons", +1,
           select=lambda r: r[r["scope"] == "best untuned dense"],
           cannot_test="notebook 08 has not run, or no best system was chosen (baseline_comparisons notes)"),
    _claim("After fine-tuning, the tuned retriever beats the best BM25", "tuned_vs_best_bm25", "baseline_comparisons",
           +1, select=lambda r: r[r["scope"] == "best tuned vs best BM25"],
           cannot_test="notebook 09 has not run, or no best system was chosen (baseline_comparisons notes)"),
    _claim("BM25 bigram and trigram do worse than unigram", "bm25_ngrams", "baseline_comparisons", -1,
           select=lambda r: r[r["scope"] == "bm25 n-gram"], cannot_test="notebook 08 has not run"),
    _claim("Humans prefer the tuned lists", "human_preference", "table2_human_eval", +1,
           cannot_test="no human labels: notebook 12 wrote the annotation packets only"),
)


SELECTION_SPLIT = "validation"  # the split a "best" system is chosen on where params do not fix it a priori


@dataclass(frozen=True)
class BestChoice:
    """Which system a comparison calls "best" (best untuned dense, best BM25), and by which rule.

    system: the chosen run's system name; None where no rule can choose without the tested queries.
    rule: the rule as the claims table states it ('fixed a priori in params', 'chosen on the validation split ...',
        or why nothing is chosen).
    """

    system: str | None
    rule: str


def choose_best(scores: pd.DataFrame, move: str, tested_split: str, *, fixed: str | None = None,
                selection_split: str = SELECTION_SPLIT) -> BestChoice:
    """The "best" of a move's candidate systems for a comparison tested on `tested_split`: the system `fixed` names
    a priori (params, as the paper fixes its systems), else the highest mean MRR@10 on `selection_split` (ties: the
    first name); never chosen on the queries it is then tested on (a ValueError when `selection_split` is
    `tested_split`, or is a query set drawn from it: the silver set is drawn from test).

    scores: one row per candidate system, move and split with its mean MRR@10 (columns system, move, split, value).
    """
    drawn_from = {"silver": "test"}
    if (selection_split in (tested_split, drawn_from.get(tested_split))
            or drawn_from.get(selection_split) == tested_split):
        raise ValueError(f"a best system tested on {tested_split!r} cannot be chosen on {selection_split!r}: that "
                         "selects on the test data; choose on validation or fix it in params")
    here = scores[scores["move"] == move]
    if fixed is not None:
        if fixed not in set(here["system"]):
            raise ValueError(f"the fixed best system {fixed!r} has no run for {move} (candidates: "
                             f"{sorted(set(here['system']))})")
        return BestChoice(fixed, "fixed a priori in params")
    chosen = here[here["split"] == selection_split].sort_values(["value", "system"], ascending=[False, True])
    if chosen.empty:
        return BestChoice(None, f"no {selection_split} run of the candidates: a best system cannot be chosen without "
                                "the test queries (fix it in params or rank the validation split)")
    top = chosen.iloc[0]
    return BestChoice(str(top["system"]), f"chosen on the {selection_split} split (MRR@10 {top['value']:.1f})")


def decide(value: float, low: float, high: float, p: float, n: int, direction: int) -> str:
    """The verdict of one paired comparison (see the module docstring): `p` the Holm-adjusted p of its family, `n`
    its effective n (the queries that can differ)."""
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


def effective_n(row) -> int:
    """A record's effective n: its `n_effective` where the table wrote one, else its n (every query can differ)."""
    value = getattr(row, "n_effective", None)
    return int(row.n) if value is None or pd.isna(value) else int(value)


def _evidence(row, verdict: str) -> str:
    scope = getattr(row, "scope", None)
    label = row.metric if pd.isna(scope) or not scope else f"{scope}, {row.metric}"
    digits = 3 if str(row.metric).startswith("Jaccard") else 1  # overlaps are fractions, the rest % points
    interval = stats.format_ci(row.value, row.low, row.high, scale=1, digits=digits)
    sign = "+" if row.value >= 0 else ""  # a difference reads with its sign
    n, effective = int(row.n), effective_n(row)
    queries = f"n {n}" if effective == n else f"n {n}, effective n {effective}"
    return (f"{label}: {row.subject} - {row.reference} {sign}{interval}{stats.dagger(effective)}, "
            f"p {stats.format_p(row.p)}, Holm p {_format_adjusted(row.p_holm)}, {queries} ({verdict})")


def _format_adjusted(p: float) -> str:
    """A Holm-adjusted p: never below its raw p, so printed to the raw p's resolution ('1.0000' when capped)."""
    return stats.format_p(p) if not pd.isna(p) else ""


def _comparisons(claim: Claim, records: pd.DataFrame, move: str, query_set: str) -> pd.DataFrame:
    part = _differences(records[(records["table"] == claim.table) & (records["move"] == move)
                                & (records["query_set"] == query_set)])
    return claim.select(part) if not part.empty else part


FAMILY_COLUMNS = ["claim", "move", "query_set", "family size", "p", "p_holm"]


def comparison_family(records: pd.DataFrame, claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """Every comparison that decides a claim, with its Holm-adjusted p over its family (all comparisons of the
    same query set, every claim and move): the records' own columns plus `claim`, `family size` and `p_holm`."""
    found = [_comparisons(claim, records, move, query_set).assign(claim=claim.text)
             for claim in claims for move in claim.moves for query_set in QUERY_SETS]
    found = [part for part in found if not part.empty]
    if not found:
        return pd.DataFrame(columns=[*records.columns, "claim", "family size", "p_holm"])
    family = pd.concat(found, ignore_index=True)
    family["p_holm"] = np.nan
    family["family size"] = 0
    for query_set, part in family.groupby("query_set"):
        family.loc[part.index, "p_holm"] = stats.holm_adjust(part["p"].to_numpy(dtype=float))
        family.loc[part.index, "family size"] = int(part["p"].notna().sum())
    return family


def family_sizes(family: pd.DataFrame) -> dict[str, int]:
    """Query set -> the number of comparisons whose p-values Holm's method adjusts together."""
    return {str(q): int(part["p"].notna().sum()) for q, part in family.groupby("query_set")}


def family_statement(family: pd.DataFrame) -> str:
    """One sentence naming the families and their sizes (the summary page states it beside the claims)."""
    sizes = family_sizes(family)
    if not sizes:
        return "No comparison decides a claim in this run, so no p-value is adjusted."
    named = "; ".join(f"{'silver' if q == 'silver' else 'unfiltered test'}: {n} comparisons"
                      for q, n in sorted(sizes.items(), key=lambda item: QUERY_SETS.index(item[0])
                                         if item[0] in QUERY_SETS else len(QUERY_SETS)))
    return ("Multiplicity: verdicts use Holm-adjusted p over the family of one instance and query set, every "
            f"comparison that decides a claim of this run on it ({named}); raw and adjusted p are printed side by "
            "side in the evidence.")


def claims_table(records: pd.DataFrame, claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One row per claim and move: the paper's number and, per query set, the verdict and its deciding numbers."""
    family = comparison_family(records, claims)
    rows = []
    for claim in claims:
        measured = sorted(set(records.loc[records["table"] == claim.table, "query_set"].dropna()))
        for move in claim.moves:
            row = {"claim": claim.text, "paper": claim.where, "move": move.capitalize(),
                   "paper says": (claim.paper or {}).get(move, "")}
            for query_set in QUERY_SETS:
                found = family[(family["claim"] == claim.text) & (family["move"] == move)
                               & (family["query_set"] == query_set)]
                verdicts = [decide(r.value, r.low, r.high, r.p_holm, effective_n(r), claim.direction)
                            for r in found.itertuples()]
                verdict = combine_verdicts(verdicts)
                name = "silver" if query_set == "silver" else "unfiltered test"
                row[f"{name}: verdict"] = verdict
                if verdicts:
                    row[f"{name}: evidence"] = "; ".join(_evidence(r, v) for r, v in zip(found.itertuples(), verdicts))
                elif measured and query_set not in measured:
                    row[f"{name}: evidence"] = (f"not measured on this query set ({claim.table}: "
                                                f"{', '.join(measured)} only)")
                else:
                    row[f"{name}: evidence"] = claim.cannot_test
            rows.append(row)
    return pd.DataFrame(rows)


def verdict_counts(table: pd.DataFrame) -> pd.DataFrame:
    """How many claim rows each verdict has, per query set (the summary's one-line reading)."""
    columns = [c for c in table.columns if c.endswith(": verdict")]
    counts = {c.removesuffix(": verdict"): table[c].value_counts() for c in columns}
    return pd.DataFrame(counts).reindex([SUPPORTED, CONTRADICTED, NOT_SHOWN, CANNOT_TEST]).fillna(0).astype(int)
