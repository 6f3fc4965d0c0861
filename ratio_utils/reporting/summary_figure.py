"""The summary's figure (notebook 14, `ratio_utils.stages.summary`): MRR@10 per move and system with 95% interval
bars, each bar labelled with the queries it is scored on (a reranked bar covers its seeded sample, not the whole
query set). Reads the long cells of `ratio_utils.reporting.summary_headline.results_long`; writes nothing (the stage
saves the figure as figures/summary_mrr10.*).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..evaluation import stats
from ..schema import MOVES

BAR_COLUMNS = ["label", "move", "value", "low", "high", "queries", "text"]


def bar_labels(long: pd.DataFrame, metric: str = "M@10") -> pd.DataFrame:
    """One row per bar of the figure (legend label `system · setup`, move), in drawing order: its value and
    interval, the queries its cell is scored on (the table's own n: a reranked cell's seeded sample) and the text
    drawn above it, `n = <queries>` with † where the cell is indicative only."""
    part = long[long["metric"] == metric].copy()
    if part.empty:
        return pd.DataFrame(columns=BAR_COLUMNS)
    part["label"] = part["system"] + " · " + part["setup"]
    moves = [m.value for m in MOVES if m.value in set(part["move"])]
    rows = []
    for label in dict.fromkeys(part["label"]):
        cells = part[part["label"] == label].set_index("move")
        for move in moves:
            cell = cells.loc[move] if move in cells.index else None
            n = None if cell is None or "queries" not in cells or pd.isna(cell["queries"]) else int(cell["queries"])
            rows.append({"label": label, "move": move,
                         **{key: np.nan if cell is None else float(cell[key]) for key in ("value", "low", "high")},
                         "queries": n, "text": "" if n is None else f"n = {n} {stats.dagger(n)}".rstrip()})
    return pd.DataFrame(rows, columns=BAR_COLUMNS)


def mrr_figure(long: pd.DataFrame, metric: str = "M@10", queries_label: str = ""):
    """Grouped bars: MRR@10 (%) per move (groups) and system (bars), with the 95% interval as error bars; above
    each bar the queries it is scored on (`bar_labels`), hatched bars and † where fewer than
    stats.INDICATIVE_BELOW."""
    import matplotlib.pyplot as plt

    bars = bar_labels(long, metric)
    labels = list(dict.fromkeys(bars["label"]))
    moves = list(dict.fromkeys(bars["move"]))
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    width = 0.8 / max(len(labels), 1)
    tops = []
    for i, label in enumerate(labels):
        rows = bars[bars["label"] == label]
        x = np.arange(len(moves)) + (i - (len(labels) - 1) / 2) * width
        values = rows["value"].to_numpy(dtype=float)
        low, high = values - rows["low"].to_numpy(dtype=float), rows["high"].to_numpy(dtype=float) - values
        has_ci = ~(np.isnan(low) | np.isnan(high))
        drawn = ax.bar(x, values, width, label=label)
        for bar, n in zip(drawn, rows["queries"]):
            if n is not None and not pd.isna(n) and stats.is_indicative(int(n)):
                bar.set_hatch("//")
        if has_ci.any():
            ax.errorbar(x[has_ci], values[has_ci], yerr=[low[has_ci], high[has_ci]], fmt="none", ecolor="black",
                        capsize=2, linewidth=0.8)
        for xi, value, top, text in zip(x, values, rows["high"].to_numpy(dtype=float), rows["text"]):
            y = np.nanmax([value, top]) if not np.isnan(value) else np.nan
            if text and not np.isnan(y):
                ax.annotate(text, (xi, y), xytext=(0, 2), textcoords="offset points", rotation=90, ha="center",
                            va="bottom", fontsize=6)
                tops.append(y)
    if tops:
        ax.set_ylim(0, max(tops) * 1.3)  # room for the counts above the highest interval
    ax.set_xticks(range(len(moves)), [move.capitalize() for move in moves])
    ax.set_ylabel(f"{metric.replace('M@', 'MRR@')} (%)")
    query_set = queries_label.split(" on the ", 1)[-1].split(",")[0] if queries_label else "the headline query set"
    ax.set_title(f"MRR@10 per move and system on the {query_set.removeprefix('the ')} (error bars: 95% bootstrap "
                 "interval over queries; n: the queries a bar is scored on, a reranked bar's seeded sample; hatched, "
                 f"†: fewer than {stats.INDICATIVE_BELOW} queries, indicative only)", fontsize=8, wrap=True)
    ax.legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))  # below the tick labels
    fig.tight_layout()
    plt.close(fig)  # returned for display once (an open figure would be shown twice by the notebook)
    return fig
