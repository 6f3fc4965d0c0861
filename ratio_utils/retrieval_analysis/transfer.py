"""Cross-move transfer (paper Appendix F.3): how a retriever tuned on one move scores on another move's
queries, relative to the untuned retriever.

Serves stage 11 (ratio_utils.stages.analyses); reads and writes no file.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..schema import Move


def relative_change(tuned: float, untuned: float) -> float:
    """(tuned - untuned) / untuned; NaN when the untuned score is 0."""
    return (tuned - untuned) / untuned if untuned else float("nan")


def transfer_matrix(scores: Mapping[tuple[str, str], float], untuned: Mapping[str, float]) -> pd.DataFrame:
    """Relative change of MRR@10 against the untuned model: rows = move tuned on, columns = queried move.

    `scores[(tuned_on, queried)]` is the tuned retriever's MRR@10 on the queried move's queries,
    `untuned[queried]` the untuned model's on the same queries. Pairs with no score stay NaN.
    """
    tuned_on = sorted({t for t, _ in scores}, key=lambda m: Move.parse(m).value)
    queried = sorted(untuned, key=lambda m: Move.parse(m).value)
    matrix = pd.DataFrame(np.nan, index=tuned_on, columns=queried, dtype=float)
    for (t, q), value in scores.items():
        if q in untuned:
            matrix.loc[t, q] = relative_change(value, untuned[q])
    matrix.index.name, matrix.columns.name = "tuned on", "queries of"
    return matrix
