"""How scores move with pool size (beyond the paper): MRR@10 and R@10 of the run's systems as the distractors of
the test pool are subsampled to 1/16, 1/8, 1/4, 1/2 and the whole pool, every gold kept.

Our test pools are 15–57× smaller than the paper's (404,371 candidates), so absolute scores are not comparable
with its. Subsampling only removes candidates, so a query's ranking over a subsample is its full ranking filtered
to the kept candidates: computed here from the run files notebooks 08 and 09 wrote (no retriever runs again, no
text is encoded). A BM25 ranking is filtered as well, i.e. its term statistics stay those of the whole pool.
A stored run holds the top `k` (100) only, so a query's MRR@10 and R@10 on a subsample are exact when every gold is
in the filtered list, the filtered list still holds at least 10 candidates (then a gold missing from it is beyond
10), or the run lists fewer than `k` (all the retriever returns for the query). For the other queries of a dense run
whose query and pool vectors are in the embedding cache, the gold's rank among the kept candidates is computed from
the full scores (`vector_ranks`, read from the cache, never encoded); any query left is *undetermined*: counted, and
the point gives bounds (undetermined queries at 0, and at the best rank they could have) instead of a value. A
move's distractors are the candidates that are no gold of its query set (so other moves' golds are subsampled like
any sentence); its subsamples are nested (one seeded permutation of the distractors, cut at each fraction), drawn
`POOL_SEEDS` times (seeds seed, seed + 1, ...): a point is the mean over the draws, with the bootstrap interval over
queries of each query's mean over the draws and, beside it, the spread of the draws' means (the variation one draw
of the pool adds). Every gold is kept, so a smaller pool is also gold-heavier: the gold share of each fraction is in
the table, since size and composition move together.

Serves stage 11 (ratio_utils.stages.analyses).
Reads:  the benchmark (test pool, pairs), cfg.paths.retrieval_runs/<system>/<move>/<split>.parquet and its sidecar,
        cfg.paths.embedding_cache (dense runs' vectors, where cached), cfg.paths.bootstrap_cache.
Writes: tables/analysis_pool_size, figures/figure_pool_size_<move> (each with provenance).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.intervals import CONFIDENCE, IntervalCache, cell
from ..evaluation.metrics import relevant_ranks
from ..evaluation.run_scoring import score_run
from ..evaluation.stats import DAGGER
from ..publish.label_sources import silver_sources
from ..publish.published import save_figure, set_figure_style, write_table
from ..retrieval.runs import RunInfo, info_path, read_run, read_run_info, recorded_prefixes, run_path
from ..schema import MOVES, Split
from ..systems.families import RetrieverSettings, dense_retriever
from .lexical_overlap import query_set_name

FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
POOL_SEEDS = 5  # draws of the subsampled pools (seeds seed .. seed + 4): a point's spread over draws is shown
PAPER_TEST_POOL = 404_371  # candidates in the paper's test pool
METRICS = ("MRR@10", "R@10")
CUTOFF = 10  # the k of both metrics: a filtered list of at least this many candidates fixes the top 10


def fraction_label(fraction: float) -> str:
    return "whole pool" if fraction >= 1 else f"1/{round(1 / fraction)}"


@dataclass(frozen=True)
class Subsample:
    fraction: float
    kept: frozenset[str]  # docids: every gold and the first fraction of the permuted distractors

    @property
    def size(self) -> int:
        return len(self.kept)


def subsample_pools(pool_ids: Iterable[str], golds: set[str], seed: int,
                    fractions: Sequence[float] = FRACTIONS) -> list[Subsample]:
    """Nested subsamples of a pool: every gold in it, and round(fraction × distractors) distractors taken in the
    order of one seeded permutation (so a smaller subsample is part of every larger one)."""
    ids = sorted(set(map(str, pool_ids)))
    kept_golds = [d for d in ids if d in golds]
    distractors = [d for d in ids if d not in golds]
    order = [distractors[i] for i in np.random.default_rng(seed).permutation(len(distractors))]
    return [Subsample(f, frozenset(kept_golds + order[:round(f * len(distractors))])) for f in fractions]


def subsample_draws(pool_ids: Iterable[str], golds: set[str], seed: int, n_seeds: int = POOL_SEEDS,
                    fractions: Sequence[float] = FRACTIONS) -> list[list[Subsample]]:
    """`n_seeds` independent draws of nested subsamples (`subsample_pools` with seeds seed, seed + 1, ...)."""
    if n_seeds < 1:
        raise ValueError(f"the pool-size analysis needs at least one draw, got n_seeds={n_seeds}")
    ids = list(pool_ids)
    return [subsample_pools(ids, golds, seed + i, fractions) for i in range(n_seeds)]


def subsample_scores(run: pd.DataFrame, qrels: pd.DataFrame, kept: frozenset[str], depth: int,
                     exact_ranks: pd.Series | None = None) -> pd.DataFrame:
    """Per query of the qrels (index qid): MRR@10 and R@10 over the kept candidates (the run filtered to them, scored
    by evaluation.metrics), `determined` (exact, see the module docstring) and each metric's upper bound (equal to
    the value where determined).

    `exact_ranks` (index qid, docid of the qrels): each gold's rank among the kept candidates from the full score
    vectors (`vector_ranks`), where the embeddings are cached; it decides the queries the stored run cannot
    (`from_vectors` marks them)."""
    filtered = run[run["docid"].astype(str).isin(kept)]
    values = score_run(filtered, qrels, metrics=METRICS, per_query=True)
    stored = run.groupby(run["qid"].astype(str)).size().reindex(values.index, fill_value=0)
    listed = filtered.groupby(filtered["qid"].astype(str)).size().reindex(values.index, fill_value=0)
    ranks = relevant_ranks(filtered, qrels)
    missing = ranks["rank"].isna().groupby(ranks["qid"]).agg(["sum", "size"]).reindex(values.index)
    # fewer than `depth` listed: the run holds every candidate the retriever returns for the query (the whole pool,
    # or BM25's candidates scoring above 0), so a gold missing from it is not retrieved on any subsample either
    whole = stored < depth
    values["determined"] = (missing["sum"] == 0) | (listed >= CUTOFF) | whole
    values["from_vectors"] = False
    if exact_ranks is not None:
        open_ = ~values["determined"] & values.index.isin(exact_ranks.index.get_level_values("qid"))
        exact = _metrics_from_ranks(exact_ranks[exact_ranks.index.get_level_values("qid").isin(values.index[open_])])
        values.loc[exact.index, list(METRICS)] = exact[list(METRICS)]
        values.loc[exact.index, ["determined", "from_vectors"]] = True
    best = 1.0 / (listed + 1)  # an undetermined gold could be right below the filtered list, within the top 10
    open_ = ~values["determined"]
    values["MRR@10 upper"] = values["MRR@10"].where(~open_, np.maximum(values["MRR@10"], best))
    values["R@10 upper"] = values["R@10"].where(~open_, values["R@10"] + missing["sum"] / missing["size"])
    return values


def _metrics_from_ranks(ranks: pd.Series) -> pd.DataFrame:
    """MRR@10 and R@10 per query from its golds' ranks (index qid, docid; NaN: not in the pool)."""
    frame = pd.DataFrame({"qid": ranks.index.get_level_values("qid"), "rank": ranks.to_numpy(float)})
    within = frame["rank"].le(CUTOFF)
    frame["rr"], frame["hit"] = np.where(within, 1.0 / frame["rank"].fillna(np.inf), 0.0), within.astype(float)
    grouped = frame.groupby("qid", sort=True)
    return pd.DataFrame({"MRR@10": grouped["rr"].max(), "R@10": grouped["hit"].mean()})


def vector_ranks(query_ids: Sequence[str], query_vectors: np.ndarray, pool_ids: Sequence[str],
                 pool_vectors: np.ndarray, qrels: pd.DataFrame, subsamples: Sequence[Subsample],
                 chunk: int = 256) -> pd.DataFrame:
    """Each gold's rank among each subsample's kept candidates (index qid, docid; one column per subsample), from
    the full inner-product scores: the query's own sentence excluded, equal scores ordered by docid ascending (the
    order of evaluation.metrics); NaN for a gold not in the pool or a query without a vector."""
    pool_ids = [str(d) for d in pool_ids]
    position = {d: i for i, d in enumerate(pool_ids)}
    level = np.full(len(pool_ids), len(subsamples), dtype=np.int64)  # the first (smallest) subsample keeping it
    for j in reversed(range(len(subsamples))):
        level[[position[d] for d in subsamples[j].kept if d in position]] = j
    id_order = np.argsort(np.argsort(np.array(pool_ids, dtype=object)))
    row_of = {str(q): i for i, q in enumerate(query_ids)}
    pairs = qrels.astype(str).drop_duplicates().reset_index(drop=True)
    out = np.full((len(pairs), len(subsamples)), np.nan)
    pool_vectors = np.asarray(pool_vectors, dtype=np.float32)
    rows = np.array([row_of.get(q, -1) for q in pairs["qid"]])
    golds = np.array([position.get(d, -1) for d in pairs["docid"]])
    for start in range(0, len(pairs), chunk):
        part = np.arange(start, min(start + chunk, len(pairs)))
        part = part[(rows[part] >= 0) & (golds[part] >= 0)]
        if not len(part):
            continue
        scores = np.asarray(query_vectors[rows[part]], dtype=np.float32) @ pool_vectors.T
        gold_scores = scores[np.arange(len(part)), golds[part]][:, None]
        ahead = (scores > gold_scores) | ((scores == gold_scores)
                                          & (id_order[None, :] < id_order[golds[part]][:, None]))
        own = np.array([position.get(q, -1) for q in pairs["qid"].to_numpy()[part]])
        ahead[np.flatnonzero(own >= 0), own[own >= 0]] = False
        for i, row in enumerate(ahead):
            counts = np.bincount(level[row], minlength=len(subsamples) + 1)[: len(subsamples)]
            out[part[i]] = 1 + np.cumsum(counts)
    index = pd.MultiIndex.from_frame(pairs[["qid", "docid"]])
    return pd.DataFrame(out, index=index, columns=range(len(subsamples)))


def cached_vectors(cache_dir: Path, info: RunInfo, queries: pd.DataFrame, pool: pd.DataFrame,
                   root: Path | None = None):
    """(query vectors, pool vectors) a dense run was searched with, read from the embedding cache (never encoded
    here); None for another family, a run without its prefixes, a model not on this machine or a vector set not
    cached. The model is the run's own (its retriever record), else its source (relative: under `root`)."""
    prefixes = recorded_prefixes(info)
    if info.family != "dense" or prefixes is None:
        return None
    refs = [info.retriever.get("model"), info.source]
    if root is not None and info.source and not Path(info.source).is_absolute():
        refs.insert(1, str(Path(root) / info.source))
    for ref in dict.fromkeys(r for r in refs if r):
        try:
            retriever = dense_retriever(ref, *prefixes, RetrieverSettings(
                cache_dir=cache_dir, fp16_storage=bool(info.retriever.get("fp16_storage", False))))
            retriever.fingerprint()
        except (FileNotFoundError, ValueError, TypeError):
            continue
        arrays = []
        for frame, column, prefix in ((queries, "qid", prefixes[0]), (pool, "docid", prefixes[1])):
            ids, texts = list(frame[column].astype(str)), list(frame["text"].astype(str))
            arrays.append(retriever.cached_embeddings(ids, texts, prefix))
        if all(a is not None for a in arrays):
            return tuple(arrays)
    return None


def mean_over_draws(draws: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per query, the scores of several draws of one point combined: each metric and its upper bound the mean over
    the draws, `determined` where every draw determines it, `from_vectors` where any draw used the embeddings."""
    if len(draws) == 1:
        return draws[0]
    columns = [*METRICS, *(f"{metric} upper" for metric in METRICS)]
    combined = sum(draw[columns] for draw in draws) / len(draws)
    combined["determined"] = np.logical_and.reduce([draw["determined"].to_numpy(bool) for draw in draws])
    combined["from_vectors"] = np.logical_or.reduce([draw["from_vectors"].to_numpy(bool) for draw in draws])
    return combined


def seed_spread(draws: Sequence[pd.DataFrame]) -> dict:
    """Per metric the lowest and highest of the draws' means (%), None where a draw has an undetermined query."""
    row: dict = {"Seeds": len(draws)}
    exact = all(bool(draw["determined"].all()) for draw in draws)
    for metric in METRICS:
        means = [100 * float(draw[metric].mean()) for draw in draws]
        row[f"{metric} seed min"], row[f"{metric} seed max"] = (min(means), max(means)) if exact else (None, None)
    return row


def point_row(per_query: pd.DataFrame, cache: IntervalCache) -> dict:
    """The numbers of one point: per metric the mean with its bootstrap interval where every query is determined,
    always the bounds (lower: undetermined queries at 0; upper: at their best possible rank)."""
    undetermined = int((~per_query["determined"]).sum())
    from_vectors = int(per_query["from_vectors"].sum()) if "from_vectors" in per_query else 0
    row: dict = {"Queries": len(per_query), "Undetermined": undetermined, "Ranked from embeddings": from_vectors}
    for metric in METRICS:
        lower, upper = 100 * float(per_query[metric].mean()), 100 * float(per_query[f"{metric} upper"].mean())
        if undetermined == 0:
            c = cell(per_query[metric].to_numpy(float), cache)
            row.update({metric: 100 * c.value, f"{metric} low": 100 * c.low, f"{metric} high": 100 * c.high})
        else:
            row.update({metric: None, f"{metric} low": None, f"{metric} high": None})
        row.update({f"{metric} lower bound": lower, f"{metric} upper bound": upper})
    return row


@dataclass
class StoredRanking:
    """One system's run on one move's query set, with what scoring it on subsamples needs."""

    run: pd.DataFrame
    depth: int  # candidates per query the run was asked for (its sidecar's k)
    qrels: pd.DataFrame  # the golds of the queries it ranks
    draws: list[list[Subsample]]  # per seed, the nested subsamples of the test pool, this query set's golds kept
    exact: list[pd.DataFrame] | None = None  # per draw, vector_ranks from the cached embeddings, where they exist
    golds_in_pool: int = 0  # this query set's golds in the test pool (all kept in every subsample)


def pool_size_points(runs: dict[tuple[str, str], StoredRanking], cache: IntervalCache) -> pd.DataFrame:
    """One row per (system, move, pool fraction) of `runs[(system, move)]`: the mean over the draws with its interval
    (`point_row` of `mean_over_draws`), the draws' spread (`seed_spread`) and the gold share of the pool (%)."""
    rows = []
    for (system, move), stored in runs.items():
        for j, sub in enumerate(stored.draws[0]):
            draws = [subsample_scores(stored.run, stored.qrels, draw[j].kept, stored.depth,
                                      None if stored.exact is None else stored.exact[d][j])
                     for d, draw in enumerate(stored.draws)]
            rows.append({"System": system, "Move": move, "Fraction": fraction_label(sub.fraction),
                         "fraction": sub.fraction, "Pool size": sub.size,
                         "Gold share %": 100 * stored.golds_in_pool / sub.size if sub.size else None,
                         **point_row(mean_over_draws(draws), cache), **seed_spread(draws)})
    return pd.DataFrame(rows)


def shown_table(numeric: pd.DataFrame, query_sets: dict[str, str]) -> pd.DataFrame:
    """Cells 'value [low, high]' where exact, 'bounds [lower, upper] (u of N undetermined)' where not."""
    def text(row, metric):
        if row["Undetermined"] == 0:
            return (stats.format_ci(row[metric], row[f"{metric} low"], row[f"{metric} high"], scale=1)
                    + stats.dagger(row["Queries"]))
        return (f"bounds [{row[f'{metric} lower bound']:.1f}, {row[f'{metric} upper bound']:.1f}] "
                f"({row['Undetermined']} of {row['Queries']} undetermined)")

    def spread(row, metric):
        low, high = row.get(f"{metric} seed min"), row.get(f"{metric} seed max")
        return "" if low is None or pd.isna(low) else f"[{low:.1f}, {high:.1f}]"

    shown = numeric[["System", "Move", "Fraction", "Pool size", "Queries", "Ranked from embeddings"]].copy()
    shown.insert(2, "Query set", [query_sets[m] for m in numeric["Move"]])
    shown["Move"] = shown["Move"].str.capitalize()
    if "Gold share %" in numeric:
        shown.insert(shown.columns.get_loc("Pool size") + 1, "Gold share %",
                     [f"{v:.1f}" if v is not None and not pd.isna(v) else "" for v in numeric["Gold share %"]])
    for metric in METRICS:
        shown[metric.replace("MRR", "M")] = [text(row, metric) for row in numeric.to_dict("records")]
        if f"{metric} seed min" in numeric:
            seeds = int(numeric["Seeds"].max())
            shown[f"{metric.replace('MRR', 'M')} over {seeds} draws [min, max]"] = [
                spread(row, metric) for row in numeric.to_dict("records")]
    return shown


def _order(points: pd.DataFrame) -> tuple[str, ...]:
    return tuple(points.sort_values(["MRR@10", "System"], ascending=[False, True])["System"])


def move_reading(points: pd.DataFrame, move: str) -> str:
    """What one move's curves show, from its exact points only: the gold share from the smallest to the whole pool,
    each system's MRR@10 from the smallest to the whole pool, whether the systems keep their order (and where it
    flips), and how the difference between the whole pool's best system and each other one moves."""
    exact = points[points["Undetermined"] == 0]
    fractions = sorted(f for f, g in exact.groupby("fraction") if len(g) == points[points["fraction"] == f].shape[0])
    name = move.capitalize()
    if len(fractions) < 2:
        return f"{name}: fewer than two pool sizes with exact points, nothing to read."
    small, whole = fractions[0], fractions[-1]
    at = {f: exact[exact["fraction"] == f].set_index("System") for f in fractions}
    label = {f: fraction_label(f) for f in fractions}
    parts = []
    if "Gold share %" in exact and exact["Gold share %"].notna().all():
        parts.append(f"gold share {at[small]['Gold share %'].iloc[0]:.1f} % at {label[small]} against "
                     f"{at[whole]['Gold share %'].iloc[0]:.1f} % at {label[whole]}")
    parts.append("MRR@10 " + ", ".join(f"{system} {at[small].loc[system, 'MRR@10']:.1f} → "
                                      f"{at[whole].loc[system, 'MRR@10']:.1f}"
                                      for system in at[whole].index if system in at[small].index))
    if len(at[whole]) >= 2:
        orders = {f: _order(at[f].reset_index()) for f in fractions}
        if len(set(orders.values())) == 1:
            parts.append(f"the order {' > '.join(orders[whole])} holds at every exact pool size")
        else:
            changes = [f"{' > '.join(orders[f])} at {label[f]}" for i, f in enumerate(fractions)
                       if i == 0 or orders[f] != orders[fractions[i - 1]]]
            parts.append("the order changes with pool size: " + "; ".join(changes))
        best = orders[whole][0]
        parts.append("; ".join(
            f"{best} − {other} {at[small].loc[best, 'MRR@10'] - at[small].loc[other, 'MRR@10']:+.1f} "
            f"at {label[small]} → "
            f"{at[whole].loc[best, 'MRR@10'] - at[whole].loc[other, 'MRR@10']:+.1f} at {label[whole]}"
            for other in orders[whole][1:] if other in at[small].index))
    return f"{name}: " + "; ".join(parts) + "."


def reading(numeric: pd.DataFrame, whole_pool: int) -> str:
    """What the curves show, move by move (`move_reading`), from the exact points only; then the spread over the
    pool draws and why nothing is read at the paper's pool size. On nested subsamples a gold can only lose places as
    candidates are added, so every curve falls or stays flat; since every gold is kept, a smaller pool is also
    gold-heavier, so size and composition change together and a move's differences at a small fraction are not
    what the paper's larger pool would show."""
    moves = [m.value for m in MOVES if m.value in set(numeric["Move"])]
    lines = [move_reading(numeric[numeric["Move"] == move], move) for move in moves]
    spreads = []
    for metric in ("MRR@10",):
        if f"{metric} seed max" in numeric:
            width = (numeric[f"{metric} seed max"] - numeric[f"{metric} seed min"]).dropna()
            if len(width):
                spreads.append(f"Over the {int(numeric['Seeds'].max())} draws of each subsampled pool a point's "
                               f"{metric} varies by at most {width.max():.1f} points (the draws' range is in the "
                               "table beside each interval)")
    ratio = PAPER_TEST_POOL / whole_pool
    tail = (f"the paper's pool is {ratio:.0f}× our whole pool (about {np.log2(ratio):.0f} more doublings), so its "
            "absolute MRR@10 and R@10 are not comparable with ours, and since every gold is kept a smaller pool is "
            "also gold-heavier (size and composition move together): no value at the paper's pool size is estimated "
            "here.")
    return " ".join([*lines, ("; ".join(spreads) + "; " if spreads else "")
                     + (tail if spreads else tail[0].upper() + tail[1:])])


@dataclass
class PoolSizeResult:
    """What notebook 11 shows: the table (numbers and shown form), its notes, the reading and one figure per move."""

    numeric: pd.DataFrame
    shown: pd.DataFrame
    notes: list[str]
    reading: str
    figures: dict[str, Path] = field(default_factory=dict)  # move -> saved PNG

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        images = "".join(f"<img src='data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}'/>"
                         for p in self.figures.values() if p.exists())
        return (self.shown.to_html(index=False) + f"<p>{html.escape(self.reading)}</p>"
                + (f"<ul style='font-size:0.8em'>{notes}</ul>" if notes else "") + images)


def load_runs(cfg: Config, bench: Benchmark, systems: Sequence[str],
              n_seeds: int = POOL_SEEDS) -> tuple[dict, dict[str, str], list[str]]:
    """(runs[(system, move)] (`StoredRanking`), query set per move, notes on the runs that are missing). A move's
    subsamples (`n_seeds` draws) keep the golds of its whole query set, so every system of the move is scored on the
    same pools."""
    runs, query_sets, notes = {}, {}, []
    pool = bench.pool(Split.TEST)
    for move in (m.value for m in MOVES):
        split = bench.query_split(move)
        if not (bench.has(move, split) and len(bench.queries(move, split))):
            continue
        query_sets[move] = query_set_name(split.value)
        golds = set(bench.eval_set(move, split).qrels["docid"].astype(str))
        draws = subsample_draws(pool["docid"], golds, cfg.seed, n_seeds)
        golds_in_pool = len(golds & set(pool["docid"].astype(str)))
        for system in systems:
            path = run_path(cfg.paths.retrieval_runs, system, move, split)
            if not path.exists():
                notes.append(f"{system}, {move}: no {split.value} run file ({cfg.paths.relative(path)}), not shown.")
                continue
            run = read_run(path)
            info = read_run_info(path) if info_path(path).exists() else None
            depth = int(info.k) if info else int(run.groupby("qid").size().max()) if len(run) else 0
            evalset = bench.eval_set(move, split, max_queries=info.max_queries if info else None,
                                     qids=info.qids if info else None)
            stored = StoredRanking(run, depth, evalset.qrels, draws, golds_in_pool=golds_in_pool)
            vectors = (cached_vectors(cfg.paths.embedding_cache, info, evalset.queries, pool, cfg.paths.root)
                       if info else None)
            if vectors is not None:
                stored.exact = [vector_ranks(list(evalset.queries["qid"].astype(str)), vectors[0],
                                             list(pool["docid"].astype(str)), vectors[1], evalset.qrels, draw)
                                for draw in draws]
            runs[(system, move)] = stored
    return runs, query_sets, notes


def pool_size_analysis(cfg: Config, bench: Benchmark, systems: Sequence[str], n_resamples: int = stats.N_RESAMPLES, *,
                       write: bool = True, n_seeds: int = POOL_SEEDS) -> PoolSizeResult:
    """The pool-size table and figures for `systems` (run-folder names, retrieval.runs.system_name), each point over
    `n_seeds` draws of the subsampled pools."""
    runs, query_sets, notes = load_runs(cfg, bench, systems, n_seeds)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, n_resamples)
    numeric = pool_size_points(runs, cache)
    shown = shown_table(numeric, query_sets) if not numeric.empty else pd.DataFrame()
    whole = len(bench.pool(Split.TEST))
    notes = [
        f"Pool: the test pool ({whole:,} candidates) with the distractors of each move's query set subsampled, "
        f"{n_seeds} draws (seeds {cfg.seed} to {cfg.seed + n_seeds - 1}; each nested: one permutation cut at each "
        "fraction), the golds of the query set always kept, so a smaller pool is gold-heavier ('Gold share %'); other "
        f"moves' golds count as distractors. The paper's test pool holds {PAPER_TEST_POOL:,} candidates. Queries: "
        "silver where it exists, else the unfiltered test set.",
        "A query's ranking over a subsample is its stored ranking filtered to the kept candidates (the run files of "
        "notebooks 08 and 09, nothing searched or encoded again; BM25 keeps the whole pool's term statistics). The "
        "stored run holds each query's top k only: where a gold is not in a query's filtered list and that list holds "
        f"fewer than {CUTOFF} candidates, the gold's rank is computed from the dense run's cached query and pool "
        "embeddings ('Ranked from embeddings': queries so decided), and where no cached embeddings exist (BM25, or a "
        "cache removed) the query is undetermined. Points with undetermined queries show bounds (those queries at 0 / "
        "at the best rank they could have) and their count, never a guessed value.",
        f"Cells: mean over queries and draws (%) with a {int(CONFIDENCE * 100)}% percentile bootstrap interval over "
        "queries of each query's mean over the draws (seeded; ratio_utils.evaluation.stats), and beside it the lowest "
        f"and highest of the draws' means. {DAGGER}: fewer than {stats.INDICATIVE_BELOW} queries, indicative only.",
        *notes]
    text = reading(numeric, whole) if not numeric.empty else "No run file of the systems asked for: nothing to read."
    figures = {}
    if write and not numeric.empty:
        write_table(numeric.drop(columns="fraction"), "analysis_pool_size", cfg, inputs=[cfg.paths.benchmark],
                    shown=shown, labels=silver_sources(bench), notes=[*notes, text],
                    caption="MRR@10 and R@10 (%) against test pools whose distractors are subsampled, every gold kept "
                            "(beyond the paper).")
        for move in [m for m in query_sets if m in set(numeric["Move"])]:
            figures[move] = _save_figure(cfg, bench, numeric[numeric["Move"] == move], move, query_sets[move], notes)
    cache.save()
    return PoolSizeResult(numeric, shown, notes, text, figures)


def draw_pool_size_figure(points: pd.DataFrame, move: str, query_set: str):
    """MRR@10 and R@10 against pool size (log x), one line per system; exact points with their intervals, bounds as
    dashed ranges; the paper's pool size marked (not reached: nothing is drawn beyond our whole pool)."""
    import matplotlib.pyplot as plt

    set_figure_style()
    fig, axes = plt.subplots(1, len(METRICS), figsize=(10, 3.8))
    n = int(points["Queries"].max()) if not points.empty else 0
    for ax, metric in zip(axes, METRICS):
        for i, (system, line) in enumerate(points.groupby("System", sort=False)):
            line = line.sort_values("Pool size")
            color = f"C{i}"
            exact = line[line["Undetermined"] == 0]
            ax.errorbar(exact["Pool size"], exact[metric], yerr=[exact[metric] - exact[f"{metric} low"],
                        exact[f"{metric} high"] - exact[metric]], marker="o", markersize=4, capsize=2, color=color,
                        label=system)
            for row in line[line["Undetermined"] > 0].to_dict("records"):
                ax.vlines(row["Pool size"], row[f"{metric} lower bound"], row[f"{metric} upper bound"], colors=color,
                          linestyles="dashed", linewidth=1)
                ax.plot([row["Pool size"]], [row[f"{metric} lower bound"]], marker="v", markerfacecolor="none",
                        color=color)
        ax.axvline(PAPER_TEST_POOL, color="black", linestyle=":", linewidth=1)
        ax.annotate(f"paper's test pool\n{PAPER_TEST_POOL:,}", (PAPER_TEST_POOL, 0.98),
                    xycoords=("data", "axes fraction"), ha="right", va="top", fontsize=7)
        ax.set_xscale("log")
        ax.set_xlim(right=PAPER_TEST_POOL * 1.6)
        ax.set_xlabel("candidates in the test pool (log scale)")
        ax.set_ylabel(f"{metric} (%)")
    # right of the panels (save_figure crops to what is drawn), so it covers no line however many systems there
    # are, nor the footer save_figure adds below the panels
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
               frameon=False)
    fig.suptitle(f"{move.capitalize()}: scores as the test pool's distractors are subsampled ({query_set}, N={n}"
                 f"{DAGGER if stats.is_indicative(n) else ''}; bars: 95% bootstrap intervals; dashed: bounds where "
                 "the stored top-k cannot decide; no extrapolation)", fontsize=8)
    fig.tight_layout()
    return fig


def _save_figure(cfg: Config, bench: Benchmark, points: pd.DataFrame, move: str, query_set: str,
                 notes: list[str]) -> Path:
    import matplotlib.pyplot as plt

    fig = draw_pool_size_figure(points, move, query_set)
    written = save_figure(fig, f"figure_pool_size_{move}", cfg, inputs=[cfg.paths.benchmark], notes=notes,
                          labels=silver_sources(bench))
    plt.close(fig)
    return written["png"]
