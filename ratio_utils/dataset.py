"""Stage 06: de-duplicate the mined pairs, split them by publication date, build the shared candidate pools.

Reads `cfg.paths.pairs` and `cfg.paths.distractors` (stage 05) and, for paper counts, `cfg.paths.papers`;
writes the benchmark in the official release layout under `cfg.paths.benchmark` (through
`ratio_utils.benchmark.write_pairs/write_pool`), `split_report.json` beside it, and Table 5.

Paper §4.2 and App. B.2: pairs are de-duplicated on (query, gold), then partitioned by the publication
date of their paper. Each split has one candidate pool shared by the three moves: the gold sentences of
all moves plus the distractors from that split's papers, de-duplicated, with no distractor equal to a
gold sentence. Leakage checks run on every build and raise `LeakageError`.

Nothing of the test split reaches training: a test-pool sentence or test query that also occurs in
the train pool is removed from it, and train pairs built on it are dropped (all counted).

Split windows are inclusive at both ends. Two kinds of window, never mixed in one config:
* `split_by: date` — windows of ISO dates (`2015-01-01` … `2025-09-30`). A paper with a year but no
  date is assigned only when its whole year lies inside one window (`year_only: whole_year`), or is
  excluded (`year_only: exclude`);
* `split_by: year` — windows of years (`end: 2006` takes every paper of 2006); a paper's year is its
  `year`, or the year of its `date` when `year` is missing.
Papers that no window takes are excluded and counted by reason (`no_date`, `year_only_ambiguous`,
`outside_windows`, `outside_fractions`).

Windows never overlap, with one exception: splits that share one window, each with a `fraction`, divide
that window's papers by a seeded hash of the paper id (`hash_seed`, `schema.seeded_hash`: SHA-1, so a paper
lands in the same split on every run and machine, whatever the order of the papers or PYTHONHASHSEED):

    validation: {start: 2025, end: 2025, fraction: 1/3}   # a number or a ratio "a/b"
    test:       {start: 2025, end: 2025, fraction: 2/3}

Every split of such a group names the same start and end; the fractions sum to at most 1, and the
papers the fractions leave over are excluded (`outside_fractions`). The window is checked first, as for
any split (a 2024 paper is `outside_windows` here), and the paper's hash position in [0, 1) then picks
the split whose share of the cumulative fractions it falls in, in the order train, validation, test.
Without a `fraction`, the paper id plays no part in the assignment.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd

from .benchmark import load_benchmark, write_pairs, write_pool  # noqa: F401  (load_benchmark re-exported)
from .io import write_json_atomic
from .mining import counts_to_report, read_mined
from .parts import read_table
from .schema import DISTRACTOR_CATEGORIES, MOVES, PAIR_COLUMNS, SEEDED_HASH_RANGE, seeded_hash
from .params import SPLITS, DatasetParams, SplitWindow  # noqa: F401  (the `dataset` section, re-exported)

# The paper's Table 5 figures that its text states (§4.2, §5, App. F): pairs per move (all splits),
# pool sizes, and the test golds per move (the oracle pools of §5 are "the gold sentences of all test
# pairs of the move"). Other cells of the paper's Table 5 are not in the text we have.
PAPER_FIGURES = {
    ("pairs", "address", "total"): 222_707,
    ("pairs", "broaden", "total"): 15_592,
    ("pairs", "specify", "total"): 2_779_177,
    ("pairs", "all moves", "total"): 3_017_476,
    ("pairs", "address", "test"): 14_020,
    ("pairs", "broaden", "test"): 1_410,
    ("pairs", "specify", "test"): 94_079,
    ("pool", "all sources", "train"): 13_800_000,
    ("pool", "all sources", "validation"): 361_000,
    ("pool", "all sources", "test"): 404_371,
}

# The figures the paper's text rounds ("13.8M, 361K, and 404K sentences"; the test pool's 404,371 is exact
# elsewhere): shown as the paper writes them, kept as numbers in the CSV.
PAPER_FIGURES_AS_WRITTEN = {
    ("pool", "all sources", "train"): "13.8M",
    ("pool", "all sources", "validation"): "361K",
}


class LeakageError(AssertionError):
    """A leakage check failed: the benchmark would let training see evaluation data."""


def hash_position(paper_id: str, seed: int) -> Fraction:
    """Where a paper falls in [0, 1) for the fraction split, exactly: schema.seeded_hash of its id."""
    return Fraction(seeded_hash(seed, paper_id), SEEDED_HASH_RANGE)


def _pick_by_fraction(group: list["SplitWindow"], paper_id, seed: int) -> tuple[str | None, str | None]:
    """The split of a paper inside a window shared by fraction, or (None, "outside_fractions")."""
    if paper_id is None:
        raise ValueError(f"splits {[w.name for w in group]} divide a window by paper id: assign_split needs the paper_id")
    position = hash_position(str(paper_id), seed)
    upper = Fraction(0)
    for window in group:
        upper += window.fraction
        if position < upper:
            return window.name, None
    return None, "outside_fractions"


def _as_date(value) -> _dt.date | None:
    if value is None:
        return None
    stamp = pd.to_datetime(value, errors="coerce")
    return None if pd.isna(stamp) else stamp.date()


def _as_year(value) -> int | None:
    if value is None or pd.isna(value):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def assign_split(year, date, params: DatasetParams, windows: list[SplitWindow] | None = None,
                 paper_id: str | None = None) -> tuple[str | None, str | None]:
    """(split, None) for a paper, or (None, reason) when no window takes it. `paper_id` is needed only
    where splits divide a window by fraction (it decides nothing otherwise)."""
    windows = windows if windows is not None else params.windows()
    day = _as_date(date)
    year = _as_year(year)
    if params.split_by == "year":
        year = year if year is not None else (day.year if day else None)
        if year is None:
            return None, "no_date"
        found = [w for w in windows if w.contains(year)]
    elif day is not None:
        found = [w for w in windows if w.contains(day)]
    elif year is None:
        return None, "no_date"
    elif params.year_only == "exclude":
        return None, "year_only_ambiguous"
    else:
        first, last = _dt.date(year, 1, 1), _dt.date(year, 12, 31)
        found = [w for w in windows if w.contains(first) and w.contains(last)]
        if not found:
            touched = any(w.contains(first) or w.contains(last) for w in windows)
            return None, ("year_only_ambiguous" if touched else "outside_windows")
    if not found:
        return None, "outside_windows"
    if found[0].fraction is None:  # windows without a fraction never overlap (DatasetParams.window_groups)
        return found[0].name, None
    return _pick_by_fraction(found, paper_id, params.hash_seed)


def paper_splits(frames: list[pd.DataFrame], params: DatasetParams) -> pd.DataFrame:
    """One row per paper (corpus, paper_id) seen in any frame: year, date, split, excluded_reason."""
    columns = ["corpus", "paper_id", "year", "date"]
    papers = pd.concat([f[columns] for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else pd.DataFrame(columns=columns)
    papers = papers.drop_duplicates(["corpus", "paper_id"]).reset_index(drop=True)
    windows = params.windows()
    decided = [assign_split(y, d, params, windows, paper_id=p) for y, d, p in zip(papers["year"], papers["date"], papers["paper_id"])]
    papers["split"] = [s for s, _ in decided]
    papers["excluded_reason"] = [r for _, r in decided]
    return papers


def _time_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Earliest paper first (date, else 1 Jan of its year), then paper and position: the copy dedupe keeps."""
    when = pd.to_datetime(frame["date"], errors="coerce")
    years = pd.to_numeric(frame["year"], errors="coerce")
    fallback = pd.to_datetime(years.dropna().astype(int).astype(str) + "-01-01", errors="coerce").reindex(frame.index)
    order = frame.assign(_when=when.fillna(fallback))
    order = order.sort_values(["_when", "corpus", "paper_id", "para", "sent"], kind="stable", na_position="last")
    return order.drop(columns="_when")


@dataclass
class BuiltBenchmark:
    pairs: pd.DataFrame  # every kept pair with its `split`
    pools: dict[str, pd.DataFrame]  # split -> docid, text, source, corpusid
    papers: pd.DataFrame  # paper_splits() of the mined papers
    counts: Counter

    def report(self) -> dict[str, Any]:
        return counts_to_report(self.counts)


def build_benchmark(pairs: pd.DataFrame, distractors: pd.DataFrame, params: DatasetParams) -> BuiltBenchmark:
    """De-duplicate, split, pool, resolve train/test overlap, and run the leakage checks."""
    counts: Counter = Counter()
    counts["pairs.mined"] = len(pairs)
    ordered = _time_order(pairs)
    deduped = ordered.drop_duplicates(["query", "gold"], keep="first")
    counts["pairs.dropped.duplicate_query_gold"] = len(ordered) - len(deduped)

    papers = paper_splits([pairs, distractors], params)
    for reason, n in papers["excluded_reason"].value_counts().items():
        counts[f"papers.excluded.{reason}"] = int(n)
    for split, n in papers["split"].value_counts().items():
        counts[f"papers.assigned.{split}"] = int(n)
    split_of = papers.set_index(["corpus", "paper_id"])["split"]

    def with_split(frame: pd.DataFrame, what: str) -> pd.DataFrame:
        keys = pd.MultiIndex.from_frame(frame[["corpus", "paper_id"]].astype(object)) if len(frame) else None
        frame = frame.assign(split=split_of.reindex(keys).to_numpy() if keys is not None else [])
        excluded = frame["split"].isna()
        counts[f"{what}.dropped.paper_without_usable_date"] = int(excluded.sum())
        return frame[~excluded].reset_index(drop=True)

    kept = with_split(deduped, "pairs")
    kept_distractors = with_split(distractors, "distractors")

    all_gold_ids = set(kept["gold_id"])
    is_gold = kept_distractors["docid"].isin(all_gold_ids)
    counts["distractors.dropped.equal_to_a_gold"] = int(is_gold.sum())
    kept_distractors = kept_distractors[~is_gold]

    pools = {split: _pool(kept[kept["split"] == split], kept_distractors[kept_distractors["split"] == split], counts, split) for split in SPLITS}
    kept, pools = _remove_test_sentences_from_train(kept, pools, counts)
    for split in SPLITS:
        counts[f"pool.size.{split}"] = len(pools[split])
        for move in MOVES:
            counts[f"pairs.kept.{split}.{move.value}"] = int(((kept["split"] == split) & (kept["move"] == move.value)).sum())
    run_leakage_checks(kept, pools)
    return BuiltBenchmark(kept, pools, papers, counts)


def _pool(pairs: pd.DataFrame, distractors: pd.DataFrame, counts: Counter, split: str) -> pd.DataFrame:
    golds = pd.DataFrame({"docid": pairs["gold_id"], "text": pairs["gold"], "source": pairs["move"], "corpusid": pairs["paper_id"]})
    others = pd.DataFrame({"docid": distractors["docid"], "text": distractors["text"], "source": distractors["category"], "corpusid": distractors["paper_id"]})
    pool = pd.concat([golds, others], ignore_index=True)
    unique = pool.drop_duplicates("docid", keep="first")  # golds come first, so a gold keeps its move as source
    counts[f"pool.dropped_duplicates.{split}"] = len(pool) - len(unique)
    return unique.reset_index(drop=True)


def _remove_test_sentences_from_train(pairs: pd.DataFrame, pools: dict[str, pd.DataFrame], counts: Counter):
    """A sentence of the test pool or a test query that also occurs in the train pool stays in test
    only; train pairs whose gold or query is such a sentence are dropped (counted), so that training
    never sees a test query or candidate (paper §4.2)."""
    test_ids = set(pools["test"]["docid"]) | set(pairs.loc[pairs["split"] == "test", "query_id"])
    train_pool = pools["train"]
    shared = train_pool["docid"].isin(test_ids)
    counts["pool.dropped_from_train_as_in_test"] = int(shared.sum())
    pools = {**pools, "train": train_pool[~shared].reset_index(drop=True)}
    in_train = pairs["split"] == "train"
    leaks = in_train & (pairs["gold_id"].isin(test_ids) | pairs["query_id"].isin(test_ids))
    counts["pairs.dropped.train_pair_touching_test"] = int(leaks.sum())
    return pairs[~leaks].reset_index(drop=True), pools


# --- leakage checks (run on every build; each raises LeakageError) ---------------------------------


def check_no_pair_in_two_splits(pairs: pd.DataFrame) -> None:
    splits_per_pair = pairs.groupby(["query", "gold"])["split"].nunique()
    leaked = splits_per_pair[splits_per_pair > 1]
    if len(leaked):
        example = leaked.index[0]
        raise LeakageError(f"{len(leaked)} (query, gold) pair(s) occur in more than one split, e.g. {example!r}")


def check_test_pool_disjoint_from_train(pools: dict[str, pd.DataFrame]) -> None:
    shared = set(pools["test"]["docid"]) & set(pools["train"]["docid"])
    if shared:
        raise LeakageError(f"{len(shared)} sentence(s) of the test pool are also in the train pool, e.g. docid {sorted(shared)[0]}")


def check_test_queries_not_in_train(pools: dict[str, pd.DataFrame], pairs: pd.DataFrame) -> None:
    test_queries = set(pairs.loc[pairs["split"] == "test", "query_id"])
    train_sentences = set(pools["train"]["docid"]) | set(pairs.loc[pairs["split"] == "train", "query_id"])
    shared = test_queries & train_sentences
    if shared:
        raise LeakageError(f"{len(shared)} test query sentence(s) also occur in the training data, e.g. id {sorted(shared)[0]}")


def check_no_distractor_equals_gold(pools: dict[str, pd.DataFrame], pairs: pd.DataFrame) -> None:
    gold_ids = set(pairs["gold_id"])
    for split, pool in pools.items():
        distractor = pool[pool["source"].isin(DISTRACTOR_CATEGORIES)]
        bad = distractor[distractor["docid"].isin(gold_ids)]
        if len(bad):
            raise LeakageError(f"{len(bad)} distractor(s) of the {split} pool equal a gold sentence, e.g. {bad['text'].iloc[0]!r}")


def check_golds_in_pool(pools: dict[str, pd.DataFrame], pairs: pd.DataFrame) -> None:
    """Not a leak but a broken benchmark: every query's gold must be in its split's pool."""
    for split, pool in pools.items():
        missing = set(pairs.loc[pairs["split"] == split, "gold_id"]) - set(pool["docid"])
        if missing:
            raise LeakageError(f"{len(missing)} gold sentence(s) of {split} pairs are missing from the {split} pool")


def run_leakage_checks(pairs: pd.DataFrame, pools: dict[str, pd.DataFrame]) -> None:
    check_no_pair_in_two_splits(pairs)
    check_test_pool_disjoint_from_train(pools)
    check_test_queries_not_in_train(pools, pairs)
    check_no_distractor_equals_gold(pools, pairs)
    check_golds_in_pool(pools, pairs)


# --- release layout, report, Table 5, figure --------------------------------------------------------


def release_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    """Our pair rows under the official release's column names (schema.PAIR_COLUMNS) plus our extras."""
    dates = pd.to_datetime(pairs["date"], errors="coerce")
    frame = pd.DataFrame(
        {
            "corpusid": pairs["paper_id"].astype(str),
            "year": pd.to_numeric(pairs["year"], errors="coerce").astype("Int64"),
            "publicationdate": dates.dt.strftime("%Y-%m-%d").where(dates.notna(), None),
            "queryTerm": pairs["marker"],
            "queryTerm_group": pairs["move"],
            "querySentence": pairs["query"],
            "goldSentence": pairs["gold"],
            "query_id": pairs["query_id"],
            "gold_id": pairs["gold_id"],
            "marker_source": pairs["marker_source"],
            "marker_has_anaphor": pairs["marker_has_anaphor"].astype(bool),
            "marker_text": pairs["marker_text"],
            "query_prefix": pairs["query_prefix"],
            "query_original": pairs["query_original"],
            "gold_original": pairs["gold_original"],
            "corpus": pairs["corpus"],
        }
    )
    return frame[list(PAIR_COLUMNS) + [c for c in frame.columns if c not in PAIR_COLUMNS]].reset_index(drop=True)


def write_release(built: BuiltBenchmark, root: Path) -> list[Path]:
    written = []
    for split in SPLITS:
        for move in MOVES:
            rows = built.pairs[(built.pairs["split"] == split) & (built.pairs["move"] == move.value)]
            written.append(write_pairs(release_pairs(rows), root, move, split))
        written.append(write_pool(built.pools[split], root, split))
    return written


def build(cfg) -> BuiltBenchmark:
    """Stage 06 end to end: read stage 05's outputs, build, check, write the release layout and report."""
    params: DatasetParams = cfg.section("dataset", DatasetParams)
    for path in (cfg.paths.pairs, cfg.paths.distractors):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run notebook 05 (pair mining) first")
    pairs = read_mined(cfg.paths.pairs)  # a single file, or the parts of a partitioned run (polars scan)
    distractors = read_mined(cfg.paths.distractors)
    built = build_benchmark(pairs, distractors, params)
    write_release(built, cfg.paths.benchmark)
    report = built.report()
    report["params"] = {"split_by": params.split_by, "splits": params.splits, "year_only": params.year_only}
    if any(w.fraction is not None for w in params.windows()):
        report["params"]["hash_seed"] = params.hash_seed
    write_json_atomic(cfg.paths.split_report, report)
    return built


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
        row("pairs", move.value, {s: int(((pairs["split"] == s) & (pairs["move"] == move.value)).sum()) for s in SPLITS})
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
            shown.at[index, column] = PAPER_FIGURES_AS_WRITTEN.get((record["section"], record["item"], split), f"{int(value):,}")
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
             "distractor' (notebook 06's papers.assigned.<split>) only those that mined at least one pair or distractor " \
             "before de-duplication; 'with a pair' those with a kept pair after it."
    if corpus_papers is not None:
        assigned = built.papers["split"].value_counts()
        gaps = {s: int(corpus_papers.get(s, 0)) - int(assigned.get(s, 0)) for s in SPLITS}
        papers += " Corpus papers that mined nothing: " + ", ".join(f"{s} {n}" for s, n in gaps.items()) + "."
    notes.append(papers)
    pairs = built.pairs
    for split in SPLITS:
        for move in MOVES:
            part = pairs[(pairs["split"] == split) & (pairs["move"] == move.value)]
            queries = part["query_id"].nunique()
            if len(part) != queries:
                golds = part.groupby("query_id").size()
                notes.append(f"{move.value.capitalize()} {split}: {len(part):,} pairs but {queries:,} queries: "
                             f"{int((golds > 1).sum())} quer{'y has' if (golds > 1).sum() == 1 else 'ies have'} more than one "
                             "gold sentence (each gold is a qrel; metrics count each query once, Recall@k over its golds).")
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
    """A span's name on the figure: the split, or the splits dividing it with their fractions ("validation 1/3 + test 2/3")."""
    return " + ".join(w.name if w.fraction is None else f"{w.name} {w.fraction}" for w in group)


def papers_per_year_figure(papers: pd.DataFrame, params: DatasetParams):
    """Stacked bars of papers per publication year and corpus, with the split windows drawn and named."""
    import matplotlib.pyplot as plt

    counts = papers.dropna(subset=["year"]).astype({"year": int}).groupby(["year", "corpus"]).size().unstack(fill_value=0)
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

