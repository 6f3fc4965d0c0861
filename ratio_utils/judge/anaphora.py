"""The anaphora test (paper Appendix E): silver acceptance with and without an explicit anaphor in
the marker, per move, with Fisher's exact test. Pure function; reads and writes nothing.
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
