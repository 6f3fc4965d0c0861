"""The anaphora test (paper Appendix E): silver acceptance with and without an explicit anaphor in
the marker, per move, with Fisher's exact test, beside the paper's values (`anaphora_table`, notebook 07's
judge_anaphora table). Pure functions; reads and writes nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# --------------------------------------------------------------------------------------------
# anaphora analysis
# --------------------------------------------------------------------------------------------


def anaphora_analysis(judged: pd.DataFrame) -> pd.DataFrame:
    """Acceptance with and without an explicit anaphor in the marker, per move, with Fisher's exact test.

    `judged` has columns move, marker_has_anaphor (bool) and accepted (bool; pairs without a
    usable verdict must be removed before). The odds ratio is scipy's sample odds ratio
    (accepted/rejected with anaphor over accepted/rejected without).
    """
    from scipy.stats import fisher_exact

    rows = []
    for move, part in judged.groupby("move", sort=False):
        with_a = part[part["marker_has_anaphor"].astype(bool)]
        without = part[~part["marker_has_anaphor"].astype(bool)]
        a, b = int(with_a["accepted"].sum()), int((~with_a["accepted"].astype(bool)).sum())
        c, d = int(without["accepted"].sum()), int((~without["accepted"].astype(bool)).sum())
        row = {"move": move, "n_with_anaphor": a + b, "n_without_anaphor": c + d,
               "accept_with_anaphor_%": 100 * a / (a + b) if a + b else np.nan,
               "accept_without_anaphor_%": 100 * c / (c + d) if c + d else np.nan,
               "odds_ratio": np.nan, "fisher_p": np.nan}
        if a + b and c + d:
            result = fisher_exact([[a, b], [c, d]])
            row["odds_ratio"], row["fisher_p"] = float(result.statistic), float(result.pvalue)
        rows.append(row)
    return pd.DataFrame(rows)


# Values reported in the paper (Appendix E), shown in separate "paper" columns, never as ours.
PAPER_ANAPHORA = {"address": {"paper: share with anaphor %": 93.4, "paper: accept with anaphor %": 71.9,
                              "paper: accept without anaphor %": 27.7, "paper: odds ratio": 6.7}}

# judge_anaphora as shown: each column names the pairs it counts (sampled, or judged: with a usable verdict).
ANAPHORA_SHOWN_COLUMNS = {
    "share with anaphor %": "sampled: with anaphor %",
    "judged pairs": "judged pairs",
    "n_with_anaphor": "judged: with anaphor",
    "n_without_anaphor": "judged: without anaphor",
    "accept_with_anaphor_%": "judged with anaphor: accepted %",
    "accept_without_anaphor_%": "judged without anaphor: accepted %",
}
_STAT_COLUMNS = ["n_with_anaphor", "n_without_anaphor", "accept_with_anaphor_%", "accept_without_anaphor_%",
                 "odds_ratio", "fisher_p"]


def anaphora_table(samples: dict, verdicts: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Per move: the sampled pairs and their share with an anaphor; over the judged pairs (a usable verdict from
    every retained prompt; `verdicts` None: nothing judged) `anaphora_analysis`; the paper's values. Returns the
    table, the table as shown (columns named by the pairs they count, p as text) and the judged/sampled coverage."""
    base = pd.DataFrame([
        {"move": m.value, "sampled pairs": len(s),
         "share with anaphor %": 100 * s["marker_has_anaphor"].astype(bool).mean() if len(s) else np.nan}
        for m, s in samples.items()
    ])
    if verdicts is not None:
        judged = verdicts[verdicts["accepted"].notna()].copy()
        judged["accepted"] = judged["accepted"].astype(bool)
        table = base.merge(anaphora_analysis(judged), on="move", how="left")
    else:
        table = base.reindex(columns=list(base.columns) + _STAT_COLUMNS)
    for column in ["paper: share with anaphor %", "paper: accept with anaphor %", "paper: accept without anaphor %",
                   "paper: odds ratio"]:
        table[column] = table["move"].map(lambda m: PAPER_ANAPHORA.get(m, {}).get(column, np.nan))
    judged_n = table["n_with_anaphor"].astype(float) + table["n_without_anaphor"].astype(float)
    table.insert(table.columns.get_loc("n_with_anaphor"), "judged pairs", judged_n.astype("Int64"))
    shown = table.rename(columns=ANAPHORA_SHOWN_COLUMNS)
    shown["fisher_p"] = shown["fisher_p"].map(lambda p: "" if pd.isna(p) else f"{p:.2g}")
    coverage = "; ".join(f"{r['move']} {int(r['judged pairs'])} of {int(r['sampled pairs'])}"
                         for r in table.to_dict(orient="records") if pd.notna(r["judged pairs"]))
    return table, shown, coverage


def anaphora_notes(coverage: str) -> list[str]:
    """The judge_anaphora table's notes: one denominator per column (with the judged/sampled coverage), the rule."""
    return [
        "Denominators, one per column: 'sampled' columns are over the pairs drawn for the judge; 'judged' columns "
        "over the sampled pairs with a usable verdict from both retained prompts"
        + (f" ({coverage})" if coverage else "")
        + "; 'accepted' shares over the judged pairs with (without) an anaphor.",
        "Acceptance = accepted by both retained prompts; pairs without a usable verdict are left out. "
        "Odds ratio and p from scipy.stats.fisher_exact. 'paper:' columns are the paper's values, not ours.",
    ]
