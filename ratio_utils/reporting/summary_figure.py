"""The summary's figures (notebook 14, `ratio_utils.stages.summary`): MRR@10 per move and system with 95% interval
bars, each bar labelled with the queries it is scored on (a reranked bar covers its seeded sample, not the whole
query set); and how scores move with pool size (notebook 11, `ratio_utils.retrieval_analysis.pool_size`): the key
rows of its table, its reading sentence and its figures, one per move.

Reads:  the long cells of `ratio_utils.reporting.summary_headline.results_long`; tables/analysis_pool_size.csv (the
        table's numbers) and figures/figure_pool_size_<move>.png.
Writes: nothing (the stage saves the MRR figure as figures/summary_mrr10.*).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..evaluation import stats
from ..retrieval.runs import system_name
from ..retrieval_analysis import pool_size
from ..schema import MOVES

BAR_COLUMNS = ["label", "move", "value", "low", "high", "queries", "text"]


def paired_gains(records: pd.DataFrame, metric: str = "M@10") -> dict[tuple[str, str, str], float]:
    """(reranked system, move, query set) -> its paired gain over its first stage on the same sampled queries, in
    points (the rerank_vs_first_stage records)."""
    found = records[(records["table"] == "rerank_vs_first_stage") & (records["metric"] == metric)
                    & records["reference"].notna()]
    return {(r.subject, r.move, r.query_set): float(r.value) for r in found.itertuples()}


def bar_labels(long: pd.DataFrame, metric: str = "M@10", gains: dict | None = None) -> pd.DataFrame:
    """One row per bar of the figure (legend label `system · setup`, move), in drawing order: its value and
    interval, the queries its cell is scored on (the table's own n: a reranked cell's seeded sample) and the text
    drawn above it, `n = <queries>` with † where the cell is indicative only; a reranked bar also reads its paired
    gain over its first stage on the same sample (`gains`, `paired_gains`, on the cell's query set), since its first
    stage's bar covers every query."""
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
            text = "" if n is None else f"n = {n} {stats.dagger(n)}".rstrip()
            if cell is not None and str(cell["setup"]).endswith("rerank") and gains:
                name = system_name(str(cell["system"]), str(cell["prefix"]), str(cell["setup"]))
                gain = gains.get((name, move, cell.get("query_set")))
                text += "" if gain is None else f", paired {gain:+.1f}"
            rows.append({"label": label, "move": move,
                         **{key: np.nan if cell is None else float(cell[key]) for key in ("value", "low", "high")},
                         "queries": n, "text": text})
    return pd.DataFrame(rows, columns=BAR_COLUMNS)


def mrr_figure(long: pd.DataFrame, metric: str = "M@10", queries_label: str = "", gains: dict | None = None):
    """Grouped bars: MRR@10 (%) per move (groups) and system (bars), with the 95% interval as error bars; above
    each bar the queries it is scored on and, for a reranked bar, its paired gain on its sample (`bar_labels`),
    hatched bars and † where fewer than stats.INDICATIVE_BELOW."""
    import matplotlib.pyplot as plt

    bars = bar_labels(long, metric, gains)
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
                 "interval over queries; n: the queries a bar is scored on, a reranked bar's seeded sample, with its "
                 "paired gain over its first stage on that sample; hatched, "
                 f"†: fewer than {stats.INDICATIVE_BELOW} queries, indicative only)", fontsize=8, wrap=True)
    ax.legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))  # below the tick labels
    fig.tight_layout()
    plt.close(fig)  # returned for display once (an open figure would be shown twice by the notebook)
    return fig


POOL_TABLE = "analysis_pool_size"  # notebook 11's table (ratio_utils.retrieval_analysis.pool_size)
POOL_CANDIDATES = "(candidates in the pool)"
POOL_GOLD_SHARE = "(golds in the pool, %)"


def _fraction(label: str) -> float:
    """The fraction of a `pool_size.fraction_label` ('1/16', 'whole pool')."""
    return 1.0 if label == "whole pool" else 1 / float(label.split("/", 1)[1])


def pool_size_rows(tables: Path) -> tuple[pd.DataFrame, str]:
    """Notebook 11's pool-size table read from its numbers (tables/analysis_pool_size.csv) as key rows: per move the
    candidates of each subsample, then per system its MRR@10 and R@10 at each pool fraction (cells as the table's:
    `value [low, high]`, or bounds where the stored top-k cannot decide); with the module's reading sentence
    (`pool_size.reading`, nothing extrapolated), or why nothing is shown."""
    path = Path(tables) / f"{POOL_TABLE}.csv"
    if not path.exists():
        return pd.DataFrame(), (f"tables/{POOL_TABLE} is absent: notebook 11's pool-size analysis has not run, so how "
                                "scores move with pool size is not shown.")
    numeric = pd.read_csv(path)
    if numeric.empty:
        return pd.DataFrame(), f"tables/{POOL_TABLE} holds no point (no run file of the systems asked for)."
    numeric["fraction"] = numeric["Fraction"].map(_fraction)
    numeric["Move"] = numeric["Move"].str.lower()
    shown = pool_size.shown_table(numeric, dict.fromkeys(numeric["Move"], ""))
    shown["fraction"] = numeric["fraction"].to_numpy()
    labels = [pool_size.fraction_label(f) for f in sorted(set(numeric["fraction"]))]
    rows = []
    for move in [m.value.capitalize() for m in MOVES if m.value.capitalize() in set(shown["Move"])]:
        part = shown[shown["Move"] == move]
        sizes = part.drop_duplicates("Fraction").set_index("Fraction")["Pool size"]
        rows.append({"move": move, "system": POOL_CANDIDATES, "metric": "", "queries": "",
                     **{label: f"{int(sizes[label]):,}" if label in sizes else "" for label in labels}})
        if "Gold share %" in part:  # every gold is kept: a smaller pool is gold-heavier
            shares = part.drop_duplicates("Fraction").set_index("Fraction")["Gold share %"]
            rows.append({"move": move, "system": POOL_GOLD_SHARE, "metric": "", "queries": "",
                         **{label: shares[label] if label in shares else "" for label in labels}})
        for system, points in part.groupby("System", sort=False):
            cells = points.set_index("Fraction")
            for metric in pool_size.METRICS:
                column = metric.replace("MRR", "M")
                rows.append({"move": move, "system": system, "metric": column, "queries": int(cells["Queries"].max()),
                             **{label: cells.loc[label, column] if label in cells.index else "" for label in labels}})
    whole = int(numeric["Pool size"].max())  # nested subsamples: the whole pool is the largest
    return pd.DataFrame(rows), pool_size.reading(numeric, whole)


def pool_size_figures(figures: Path) -> dict[str, Path]:
    """Notebook 11's pool-size figures that exist (move -> figures/figure_pool_size_<move>.png), in move order."""
    found = {m.value: Path(figures) / f"figure_pool_size_{m.value}.png" for m in MOVES}
    return {move: path for move, path in found.items() if path.exists()}
