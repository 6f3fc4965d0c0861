"""Stage 06's displays: Table 5 (ours beside the paper's figures), its notes, the marker-frequency and
papers-per-year figures. Read from a `BuiltBenchmark` (and, for corpus paper counts, `cfg.paths.papers`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..paper_values import paper_section
from ..param_sections import SPLITS, DatasetParams, SplitWindow
from ..parts import read_table
from ..schema import DISTRACTOR_CATEGORIES, MOVES
from .in_memory import BuiltBenchmark
from .splits import paper_splits

# The paper's Table 5 figures that its text states (§4.2, §5, App. F): pairs per move (all splits),
# pool sizes, and the test golds per move (the oracle pools of §5 are "the gold sentences of all test
# pairs of the move"). Other cells of the paper's Table 5 are not in the text we have. From their one home,
# ratio_utils/paper_values.toml.
PAPER_FIGURES = {(f["section"], f["item"], f["split"]): f["value"] for f in paper_section("table5")["figures"]}

# The figures the paper's text rounds ("13.8M, 361K, and 404K sentences"; the test pool's 404,371 is exact
# elsewhere): shown as the paper writes them, kept as numbers in the CSV.
PAPER_FIGURES_AS_WRITTEN = {(f["section"], f["item"], f["split"]): f["as_written"]
                            for f in paper_section("table5")["figures"] if "as_written" in f}


def corpus_papers_per_split(cfg, params: DatasetParams) -> dict[str, int] | None:
    """Papers of the whole corpus per split (papers.parquet), or None when that table is absent."""
    if not Path(cfg.paths.papers).exists():
        return None
    papers = read_table(cfg.paths.papers, columns=["corpus", "paper_id", "year", "date"])
    decided = paper_splits([papers.assign(para=0, sent=0)], params)
    counts = decided["split"].fillna("excluded").value_counts().to_dict()
    return {k: int(v) for k, v in counts.items()}


def table5(built: BuiltBenchmark, corpus_papers: dict[str, int] | None = None) -> pd.DataFrame:
    """Table 5: pairs per move and split, pool sentences by source, papers per split; paper's figures beside."""
    rows = []

    def row(section: str, item: str, values: dict[str, int]) -> None:
        total = sum(values.values())
        record = {"section": section, "item": item, **values, "total": total}
        for split in (*SPLITS, "total"):
            record[f"paper_{split}"] = PAPER_FIGURES.get((section, item, split))
        rows.append(record)

    pairs = built.pairs
    for move in MOVES:
        row("pairs", move.value,
            {s: int(((pairs["split"] == s) & (pairs["move"] == move.value)).sum()) for s in SPLITS})
    row("pairs", "all moves", {s: int((pairs["split"] == s).sum()) for s in SPLITS})
    for source in [m.value for m in MOVES] + list(DISTRACTOR_CATEGORIES):
        row("pool", source, {s: int((built.pools[s]["source"] == source).sum()) for s in SPLITS})
    row("pool", "all sources", {s: len(built.pools[s]) for s in SPLITS})
    row("papers", "with a pair", {s: int(pairs.loc[pairs["split"] == s, "paper_id"].nunique()) for s in SPLITS})
    # notebook 06's report counts these as papers.assigned.<split>: every paper that mined a pair or a distractor
    row("papers", "with a mined pair or distractor", {s: int((built.papers["split"] == s).sum()) for s in SPLITS})
    if corpus_papers is not None:
        row("papers", "in the corpus", {s: int(corpus_papers.get(s, 0)) for s in SPLITS})
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if column.startswith("paper_"):  # a cell the paper does not state stays empty, not 0 or NA
            frame[column] = [("" if v is None or pd.isna(v) else int(v)) for v in frame[column]]
    return frame


def table5_shown(table: pd.DataFrame) -> pd.DataFrame:
    """Table 5 as the Markdown shows it: the paper's figures as its text writes them ('13.8M', '404,371')."""
    shown = table.copy().astype(object)
    for index, record in table.iterrows():
        for split in (*SPLITS, "total"):
            column, value = f"paper_{split}", record[f"paper_{split}"]
            if value == "" or value is None or pd.isna(value):
                continue
            shown.at[index, column] = PAPER_FIGURES_AS_WRITTEN.get((record["section"], record["item"], split),
                                                                   f"{int(value):,}")
    return shown


TABLE5_NOTES = [
    "Paper columns (paper_*) hold the figures the paper's text states (§4.2, §5 oracle pools = test golds per move); "
    "its other Table 5 cells are not in the text available here and are left empty. They are shown as the text writes "
    "them: the train and validation pools as the rounded 13.8M and 361K (the CSV holds 13800000 and 361000).",
    "Ours: the corpus of this run; the paper mined S2ORC computer-science papers (366.6M consecutive pairs).",
]


def table5_notes(built: BuiltBenchmark, corpus_papers: dict[str, int] | None = None) -> list[str]:
    """TABLE5_NOTES plus the notes computed from this build: the three paper counts, pairs vs queries."""
    notes = list(TABLE5_NOTES)
    papers = "papers: 'in the corpus' counts every paper of the corpus with a usable date; 'with a mined pair or " \
             "distractor' (notebook 06's papers.assigned.<split>) only those that mined at least one pair or " \
             "distractor before de-duplication; 'with a pair' those with a kept pair after it."
    if corpus_papers is not None:
        assigned = built.papers["split"].value_counts()
        gaps = {s: int(corpus_papers.get(s, 0)) - int(assigned.get(s, 0)) for s in SPLITS}
        papers += " Corpus papers that mined nothing: " + ", ".join(f"{s} {n}" for s, n in gaps.items()) + "."
    notes.append(papers)
    if built.counts.get("distractors.dropped.not_drawn"):
        notes.append("pools: a seeded draw of the distractors (dataset.distractor_fraction < 1), not every "
                     "distractor as in the "
                     f"paper; {built.counts['distractors.dropped.not_drawn']:,} distractor rows were not drawn.")
    pairs = built.pairs
    for split in SPLITS:
        for move in MOVES:
            part = pairs[(pairs["split"] == split) & (pairs["move"] == move.value)]
            queries = part["query_id"].nunique()
            if len(part) != queries:
                golds = part.groupby("query_id").size()
                notes.append(f"{move.value.capitalize()} {split}: {len(part):,} pairs but {queries:,} queries: "
                             f"{int((golds > 1).sum())} quer{'y has' if (golds > 1).sum() == 1 else 'ies have'} "
                             "more than one gold sentence (each gold is a qrel; metrics count each query once, "
                             "Recall@k over its golds).")
    return notes


def marker_frequency_figure(pairs: pd.DataFrame, top: int = 15):
    """Pairs per marker for each move (top markers), log-scaled bars."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MOVES), figsize=(4.2 * len(MOVES), 0.32 * top + 1.2))
    for ax, move in zip(axes, MOVES):
        counts = pairs.loc[pairs["move"] == move.value, "marker"].value_counts().head(top)
        if counts.empty:
            ax.text(0.5, 0.5, "no pairs", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.barh(counts.index[::-1], counts.to_numpy()[::-1])
            ax.set_xscale("log")
            ax.set_xlim(left=0.7, right=counts.max() * 1.5)  # bars start below 1, so a count of 1 shows
        ax.set_title(f"{move.value} ({int((pairs['move'] == move.value).sum())} pairs)")
        ax.set_xlabel("pairs (log scale)")
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    # Closed here, returned for display: a figure left open is shown a second time by the notebook's
    # inline backend at the end of the cell (notebook 06 showed it twice).
    plt.close(fig)
    return fig


def split_boundaries(params: DatasetParams) -> list[float]:
    """Where one split window ends and the next begins, as a fractional year (2006 | 2007 -> 2006.5 + 0.5 = 2007.0).

    Year windows end after their last year; date windows at their end day. Used to draw the windows on
    a per-year axis whose bar for year Y spans [Y - 0.5, Y + 0.5]."""
    edges = []
    for group in params.window_groups()[:-1]:  # splits that share a window by fraction: one span, no line between
        end = group[0].end
        if isinstance(end, int):
            edges.append(end + 0.5)
        else:
            edges.append(end.year - 0.5 + end.timetuple().tm_yday / (366 if end.year % 4 == 0 else 365))
    return edges


def window_label(group: tuple[SplitWindow, ...]) -> str:
    """A span's name on the figure: the split, or the splits dividing it with their fractions
    ("validation 1/3 + test 2/3")."""
    return " + ".join(w.name if w.fraction is None else f"{w.name} {w.fraction}" for w in group)


def papers_per_year_figure(papers: pd.DataFrame, params: DatasetParams):
    """Stacked bars of papers per publication year and corpus, with the split windows drawn and named."""
    import matplotlib.pyplot as plt

    counts = (papers.dropna(subset=["year"]).astype({"year": int}).groupby(["year", "corpus"]).size()
              .unstack(fill_value=0))
    years = range(int(counts.index.min()), int(counts.index.max()) + 1)
    counts = counts.reindex(years, fill_value=0)
    fig, ax = plt.subplots(figsize=(8, 3))
    bottom = pd.Series(0, index=counts.index)
    for corpus in counts.columns:
        ax.bar(counts.index, counts[corpus], bottom=bottom, width=0.85, label=corpus)
        bottom += counts[corpus]
    edges = [min(years) - 0.5, *split_boundaries(params), max(years) + 0.5]
    top = float(bottom.max()) * 1.12 or 1.0
    for edge in edges[1:-1]:
        ax.axvline(edge, color="black", linestyle="--", linewidth=0.9)
    for group, left, right in zip(params.window_groups(), edges, edges[1:]):
        left, right = max(left, edges[0]), min(right, edges[-1])
        if right > left:
            ax.text((left + right) / 2, top, window_label(group), ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.1)
    ax.set_xlabel("publication year")
    ax.set_ylabel("papers")
    ax.legend(title="corpus", fontsize=7, loc="upper left")
    ax.set_title("Papers per year; dashed lines: split windows (dataset.splits)", fontsize=9)
    fig.tight_layout()
    plt.close(fig)  # returned for display once
    return fig
