"""Statistics of the inspiration study (paper §5.3, Appendix G): Tables 2, 11 and 12, gold marked useful and
agreement, from `StudyLabels` (ratio_utils.human_eval.labels); p-values from ratio_utils.evaluation.stats.
Serves notebook 12 (ratio_utils.stages.human_eval_stats, through ratio_utils.human_eval.study); reads and writes
no file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..evaluation.stats import paired_permutation_test
from .labels import StudyLabels
from .packets import STUDY_SETUPS


def annotation_scores(labels: StudyLabels) -> pd.DataFrame:
    """Per (annotator, item, setup): HR, P, MRR at k with useful as relevant; gold and beyond-gold measures."""
    k = labels.k
    rows = []
    for (annotator, item, move, setup), group in labels.candidates.groupby(["annotator", "item", "move", "setup"]):
        group = group.sort_values("rank")
        useful_ranks = group.loc[group["useful"], "rank"]
        gold_ranks = group.loc[group["is_gold"], "rank"]
        beyond = group["useful"] & ~group["is_gold"]
        rows.append({
            "annotator": annotator, "item": item, "move": move, "setup": setup,
            "HR": float(len(useful_ranks) > 0), "P": float(len(useful_ranks)) / k,
            "MRR": 1.0 / useful_ranks.min() if len(useful_ranks) else 0.0,
            "gold": float(len(gold_ranks) > 0), "gold_useful": float((group["is_gold"] & group["useful"]).any()),
            "beyond": float(beyond.any()), "MRR_gold": 1.0 / gold_ranks.min() if len(gold_ranks) else 0.0,
        })
    return pd.DataFrame(rows)


def query_scores(labels: StudyLabels) -> pd.DataFrame:
    """Per (item, setup): the annotators' scores averaged (a query labelled twice counts once)."""
    scores = annotation_scores(labels)
    return scores.drop(columns="annotator").groupby(["item", "move", "setup"], as_index=False).mean()


def _groups(frame: pd.DataFrame, moves: list[str]) -> list[tuple[str, pd.DataFrame]]:
    present = [m for m in moves if (frame["move"] == m).any()]
    return [(m, frame[frame["move"] == m]) for m in present] + [("all", frame)]


def _paired(per_query: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    wide = per_query.pivot(index="item", columns="setup", values=metric)
    return wide["tuned"].to_numpy(), wide["baseline"].to_numpy()


def table2(labels: StudyLabels, moves: list[str], n_permutations: int = 10_000, seed: int = 13) -> pd.DataFrame:
    """Table 2: HR@k, P@k, MRR@k (%) per move and setup, the permutation p-values, preferences and ties."""
    per_query = query_scores(labels)
    k = labels.k
    rows = []
    for move, group in _groups(per_query, moves):
        prefs = labels.preferences if move == "all" else labels.preferences[labels.preferences["move"] == move]
        n = group["item"].nunique()
        p_values = {m: paired_permutation_test(*_paired(group, m), n_permutations=n_permutations, seed=seed)
                    for m in ("HR", "P", "MRR")}
        for setup in STUDY_SETUPS:
            scores = group[group["setup"] == setup]
            rows.append({
                "move": move, "queries": n, "setup": setup.capitalize(),
                f"HR@{k}": 100 * scores["HR"].mean(), f"P@{k}": 100 * scores["P"].mean(),
                f"MRR@{k}": 100 * scores["MRR"].mean(), "Pref.": int((prefs["preference"] == setup).sum()),
                "Tie": int((prefs["preference"] == "tie").sum()) if setup == "tuned" else None,
                **{f"p {m}@{k}": (p_values[m] if setup == "tuned" else None) for m in ("HR", "P", "MRR")},
            })
    frame = pd.DataFrame(rows)
    return frame.astype({"Pref.": "Int64", "Tie": "Int64"})


def table11(labels: StudyLabels, moves: list[str]) -> pd.DataFrame:
    """Table 11: useful candidates and the gold sentence in the top k (%, mean over queries)."""
    per_query = query_scores(labels)
    rows = []
    for move, group in _groups(per_query, moves):
        for setup in STUDY_SETUPS:
            s = group[group["setup"] == setup]
            mrr, mrr_gold = s["MRR"].mean(), s["MRR_gold"].mean()
            rows.append({"move": move, "queries": s["item"].nunique(), "setup": setup.capitalize(),
                         "HR": 100 * s["HR"].mean(), "MRR": 100 * mrr, "Gold": 100 * s["gold"].mean(),
                         "Gold useful": 100 * s["gold_useful"].mean(), "Beyond": 100 * s["beyond"].mean(),
                         "MRR gold": 100 * mrr_gold, "MRR / MRR gold": mrr / mrr_gold if mrr_gold > 0 else np.nan})
    return pd.DataFrame(rows)


def table12(labels: StudyLabels, moves: list[str]) -> pd.DataFrame:
    """Table 12: where the useful non-gold candidates come from.

    Useful, Cross and Papers pool the annotations (a candidate judged useful by two annotators counts
    twice); All counts each shown non-gold candidate once per query and setup.
    """
    c = labels.candidates
    rows = []
    for move, group in _groups(c, moves):
        for setup in STUDY_SETUPS:
            s = group[group["setup"] == setup]
            beyond = s[s["useful"] & ~s["is_gold"]]
            shown = s.drop_duplicates(["item", "setup", "list", "rank"])
            non_gold = shown[~shown["is_gold"]]
            rows.append({"move": move, "setup": setup.capitalize(), "Useful": len(beyond),
                         "Cross": 100 * beyond["other_paper"].mean() if len(beyond) else np.nan,
                         "Papers": int(beyond["paper"].nunique()),
                         "All": 100 * non_gold["other_paper"].mean() if len(non_gold) else np.nan})
    return pd.DataFrame(rows)


def gold_marked_useful(labels: StudyLabels) -> pd.DataFrame:
    """How often annotators marked the gold sentence useful when it was in the top k (paper §5.3: 96.5%)."""
    gold = labels.candidates[labels.candidates["is_gold"]]
    return (gold.groupby("setup")["useful"].agg(["size", "mean"]).rename(columns={"size": "gold shown",
                                                                                  "mean": "marked useful"})
            .assign(**{"marked useful": lambda f: 100 * f["marked useful"]}).reset_index())


def annotator_agreement(labels: StudyLabels, moves: list[str]) -> pd.DataFrame:
    """Inter-annotator agreement on queries labelled twice: observed agreement and Cohen's kappa.

    Candidates: the two useful/not-useful labels of each shown candidate; preferences: the two list
    choices (in setup terms). The first rater of a pair is the alphabetically first annotator.
    """
    from sklearn.metrics import cohen_kappa_score

    c = labels.candidates
    raters = c.groupby("item")["annotator"].unique()
    doubled = raters[raters.map(len) >= 2]
    preference = labels.preferences.set_index(["item", "annotator"])["preference"]
    rows = []
    for move in [*moves, "all"]:
        items = [i for i in doubled.index if move == "all" or i.startswith(f"{move}/")]
        if not items:
            continue
        first, second, pref1, pref2 = [], [], [], []
        for item in items:
            a, b = sorted(doubled[item])[:2]
            one = c[(c["item"] == item) & (c["annotator"] == a)].sort_values(["list", "rank"])["useful"].to_numpy()
            two = c[(c["item"] == item) & (c["annotator"] == b)].sort_values(["list", "rank"])["useful"].to_numpy()
            first += one.tolist()
            second += two.tolist()
            pref1.append(str(preference[(item, a)]))
            pref2.append(str(preference[(item, b)]))
        for what, x, y in (("candidate useful", first, second), ("list preference", pref1, pref2)):
            agree = float(np.mean(np.asarray(x) == np.asarray(y)))
            kappa = cohen_kappa_score(x, y) if len(set(x) | set(y)) > 1 else np.nan
            rows.append({"move": move, "judgement": what, "queries": len(items), "pairs": len(x),
                         "agreement": 100 * agree, "Cohen's kappa": kappa})
    return pd.DataFrame(rows)
