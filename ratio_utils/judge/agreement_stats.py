"""Agreement statistics for Table 9: precision, recall, F1, Cohen's κ and % agreement of a rater
against a reference, the panel's majority and unanimous labels, and human–human agreement.
Pure functions; reads and writes nothing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# --------------------------------------------------------------------------------------------
# agreement statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """Binary agreement of a rater with a reference (positive = accept), from one 2x2 count.

    Hand-written so that all five statistics come from the same counts and the empty-class cases
    are explicit (P, R, F1 = 0 when undefined, κ = NaN when chance agreement is 1, as sklearn does
    with zero_division=0; every statistic is NaN over zero items, e.g. a panel with no unanimous
    pair); the tests check every statistic against sklearn.
    """

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float:
        if not self.n:
            return float("nan")
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        if not self.n:
            return float("nan")
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        if not self.n:
            return float("nan")
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else 0.0

    @property
    def kappa(self) -> float:
        n = self.n
        if n == 0:
            return float("nan")
        observed = (self.tp + self.tn) / n
        expected = ((self.tp + self.fp) * (self.tp + self.fn) + (self.fn + self.tn) * (self.fp + self.tn)) / n**2
        return (observed - expected) / (1 - expected) if expected != 1 else float("nan")

    @property
    def percent_agreement(self) -> float:
        return 100.0 * (self.tp + self.tn) / self.n if self.n else float("nan")


def agreement(reference: Any, rater: Any) -> Agreement:
    """Agreement over the items both label (missing values, None/NaN/pd.NA, are left out)."""
    ref = pd.Series(reference, dtype="object").reset_index(drop=True)
    pred = pd.Series(rater, dtype="object").reset_index(drop=True)
    if len(ref) != len(pred):
        raise ValueError(f"reference has {len(ref)} labels, rater {len(pred)}")
    both = ref.notna() & pred.notna()
    r = ref[both].astype(bool).to_numpy()
    p = pred[both].astype(bool).to_numpy()
    return Agreement(tp=int((r & p).sum()), fp=int((~r & p).sum()), fn=int((r & ~p).sum()), tn=int((~r & ~p).sum()))


def majority_label(panel: pd.DataFrame) -> pd.Series:
    """Strict majority of the labels each pair got (rows: pairs, columns: annotators); NA on ties."""
    positive = panel.sum(axis=1, min_count=1)
    count = panel.notna().sum(axis=1)
    out = pd.Series(pd.NA, index=panel.index, dtype="object")
    out[positive * 2 > count] = True
    out[(count - positive) * 2 > count] = False
    return out


def unanimous_label(panel: pd.DataFrame) -> pd.Series:
    """The label of pairs on which every annotator of the panel agrees; NA elsewhere."""
    complete = panel.notna().all(axis=1)
    out = pd.Series(pd.NA, index=panel.index, dtype="object")
    out[complete & (panel == 1).all(axis=1)] = True
    out[complete & (panel == 0).all(axis=1)] = False
    return out


def human_panel_agreement(panel: pd.DataFrame) -> dict[str, float]:
    """Mean pairwise F1 and % agreement between annotators (rows: pairs, columns: annotators)."""
    pairs = list(itertools.combinations(panel.columns, 2))
    if not pairs:
        return {"panel_F1": float("nan"), "panel_Agr": float("nan")}
    scores = [agreement(panel[a], panel[b]) for a, b in pairs]
    return {"panel_F1": float(np.mean([s.f1 for s in scores])),
            "panel_Agr": float(np.mean([s.percent_agreement for s in scores]))}


def rater_panel_agreement(panel: pd.DataFrame, rater: pd.Series) -> dict[str, float]:
    """A prompt (or rule) against the panel: mean F1 and % agreement over annotators, F1 against
    the majority label and on the unanimous pairs. `rater` is indexed like `panel`."""
    rater = rater.reindex(panel.index)
    per_annotator = [agreement(panel[a], rater) for a in panel.columns]
    return {
        "panel_F1": float(np.mean([s.f1 for s in per_annotator])) if per_annotator else float("nan"),
        "panel_Agr": float(np.mean([s.percent_agreement for s in per_annotator])) if per_annotator else float("nan"),
        "panel_F1_majority": agreement(majority_label(panel), rater).f1,
        "panel_F1_unanimous": agreement(unanimous_label(panel), rater).f1,
    }


def single_annotator_agreement(reference: pd.Series, rater: pd.Series) -> dict[str, float]:
    s = agreement(reference, rater.reindex(reference.index))
    return {"single_P": s.precision, "single_R": s.recall, "single_F1": s.f1, "single_kappa": s.kappa,
            "single_Agr": s.percent_agreement, "n_single": s.n}
