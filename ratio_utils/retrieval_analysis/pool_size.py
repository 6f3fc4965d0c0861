"""How scores move with pool size (beyond the paper): MRR@10 and R@10 of the run's systems as the distractors of
the test pool are subsampled to 1/16, 1/8, 1/4, 1/2 and the whole pool, every gold kept.

Our test pools are 15–57× smaller than the paper's (404,371 candidates), so absolute scores are not comparable
with its. Subsampling only removes candidates, so a query's ranking over a subsample is its full ranking filtered
to the kept candidates: computed here from the run files notebooks 08 and 09 wrote (no retriever runs again, no
text is encoded). A BM25 ranking is filtered as well, i.e. its term statistics stay those of the whole pool.
A stored run holds the top `k` (100) only, so a query's MRR@10 and R@10 on a subsample are exact when every gold
is in the filtered list, the filtered list still holds at least 10 candidates (then a gold missing from it is
beyond 10), or the run lists fewer than `k` (all the retriever returns for the query). For the other queries of a dense run whose query and pool vectors are in the embedding cache, the
gold's rank among the kept candidates is computed from the full scores (`vector_ranks`, read from the cache, never
encoded); any query left is *undetermined*: counted, and the point gives bounds (undetermined queries at 0, and at
the best rank they could have) instead of a value. A move's distractors are the candidates that are no gold of
its query set (so other moves' golds are subsampled like any sentence); its subsamples are nested (one seeded
permutation of the distractors, cut at each fraction).

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
from ..evaluation.metrics import per_query_metrics, relevant_ranks
from ..evaluation.stats import DAGGER
from ..publish.label_sources import silver_sources
from ..publish.published import save_figure, set_figure_style, write_table
from ..retrieval.dense import DenseRetriever
from ..retrieval.runs import RunInfo, info_path, read_run, read_run_info, recorded_prefixes, run_path
from ..schema import MOVES, Split
from .lexical_overlap import query_set_name

FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
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


def subsample_scores(run: pd.DataFrame, qrels: pd.DataFrame, kept: frozenset[str], depth: int,
                     exact_ranks: pd.Series | None = None) -> pd.DataFrame:
    """Per query of the qrels (index qid): MRR@10 and R@10 over the kept candidates (the run filtered to them, scored
    by evaluation.metrics), `determined` (exact, see the module docstring) and each metric's upper bound (equal to
    the value where determined).

    `exact_ranks` (index qid, docid of the qrels): each gold's rank among the kept candidates from the full score
    vectors (`vector_ranks`), where the embeddings are cached; it decides the queries the stored run cannot
    (`from_vectors` marks them)."""
    filtered = run[run["docid"].astype(str).isin(kept)]
    values = per_query_metrics(filtered, qrels, METRICS)
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


def vector_ranks(query_ids: Sequence[str], query_vectors: np.ndarray, pool_ids: Sequence[str], pool_vectors: np.ndarray,
                 qrels: pd.DataFrame, subsamples: Sequence[Subsample], chunk: int = 256) -> pd.DataFrame:
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
        ahead = (scores > gold_scores) | ((scores == gold_scores) & (id_order[None, :] < id_order[golds[part]][:, None]))
        own = np.array([position.get(q, -1) for q in pairs["qid"].to_numpy()[part]])
        ahead[np.flatnonzero(own >= 0), own[own >= 0]] = False
        for i, row in enumerate(ahead):
            counts = np.bincount(level[row], minlength=len(subsamples) + 1)[: len(subsamples)]
            out[part[i]] = 1 + np.cumsum(counts)
    index = pd.MultiIndex.from_frame(pairs[["qid", "docid"]])
    return pd.DataFrame(out, index=index, columns=range(len(subsamples)))


def cached_vectors(cache_dir: Path, info: RunInfo, queries: pd.DataFrame, pool: pd.DataFrame, root: Path | None = None):
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
            retriever = DenseRetriever(ref, *prefixes, cache_dir=cache_dir,
                                       fp16_storage=bool(info.retriever.get("fp16_storage", False)))
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
    subsamples: list[Subsample]  # of the test pool, this query set's golds kept
    exact: pd.DataFrame | None = None  # vector_ranks from the cached embeddings, where they exist


def pool_size_points(runs: dict[tuple[str, str], StoredRanking], cache: IntervalCache) -> pd.DataFrame:
    """One row per (system, move, subsample) of `runs[(system, move)]`."""
    rows = []
    for (system, move), stored in runs.items():
        for j, sub in enumerate(stored.subsamples):
            exact = None if stored.exact is None else stored.exact[j]
            per_query = subsample_scores(stored.run, stored.qrels, sub.kept, stored.depth, exact)
            rows.append({"System": system, "Move": move, "Fraction": fraction_label(sub.fraction), "fraction": sub.fraction,
                         "Pool size": sub.size, **point_row(per_query, cache)})
    return pd.DataFrame(rows)


def shown_table(numeric: pd.DataFrame, query_sets: dict[str, str]) -> pd.DataFrame:
    """Cells 'value [low, high]' where exact, 'bounds [lower, upper] (u of N undetermined)' where not."""
    def text(row, metric):
        if row["Undetermined"] == 0:
            return stats.format_ci(row[metric], row[f"{metric} low"], row[f"{metric} high"], scale=1) + stats.dagger(row["Queries"])
        return (f"bounds [{row[f'{metric} lower bound']:.1f}, {row[f'{metric} upper bound']:.1f}] "
                f"({row['Undetermined']} of {row['Queries']} undetermined)")

    shown = numeric[["System", "Move", "Fraction", "Pool size", "Queries", "Ranked from embeddings"]].copy()
    shown.insert(2, "Query set", [query_sets[m] for m in numeric["Move"]])
    shown["Move"] = shown["Move"].str.capitalize()
    for metric in METRICS:
        shown[metric.replace("MRR", "M")] = [text(row, metric) for row in numeric.to_dict("records")]
    return shown


def reading(numeric: pd.DataFrame, whole_pool: int) -> str:
    """One sentence on what the curves imply for reading our numbers beside the paper's, from the exact points only
    (nothing is extrapolated to the paper's pool size). On nested subsamples a gold can only lose places as
    candidates are added, so every curve falls or stays flat: what matters is by how much, and whether the systems
    keep their order."""
    exact = numeric[numeric["Undetermined"] == 0]
    half = exact[exact["fraction"] == 0.5].set_index(["System", "Move"])["MRR@10"]
    whole = exact[exact["fraction"] >= 1].set_index(["System", "Move"])["MRR@10"]
    drops = (half - whole).dropna()
    kept_order, moves = 0, 0
    for _, group in numeric.groupby("Move", sort=False):
        points = [g for _, g in group.groupby("fraction") if (g["Undetermined"] == 0).all()]
        if len(points) >= 2 and group["System"].nunique() >= 2:
            moves += 1
            kept_order += len({tuple(g.sort_values(["MRR@10", "System"], ascending=[False, True])["System"])
                               for g in points}) == 1
    parts = []
    if len(drops):
        parts.append(f"Doubling the distractors from half the pool to the whole pool lowers MRR@10 by {drops.min():.1f} "
                     f"to {drops.max():.1f} points over the {len(drops)} system–move curves with exact points")
    if moves:
        parts.append(f"the systems keep their order by MRR@10 at every exactly measured pool size in {kept_order} of "
                     f"{moves} moves")
    ratio = PAPER_TEST_POOL / whole_pool
    head = "; ".join(parts) if parts else "No curve has exact points at half and at the whole pool"
    return (f"{head}; the paper's pool is {ratio:.0f}× our whole pool (about {np.log2(ratio):.0f} more doublings), so "
            "its absolute MRR@10 and R@10 are not comparable with ours: compare the orderings of and differences "
            "between systems with the paper's (no value at the paper's pool size is estimated here).")


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


def load_runs(cfg: Config, bench: Benchmark, systems: Sequence[str]) -> tuple[dict, dict[str, str], list[str]]:
    """(runs[(system, move)] (`StoredRanking`), query set per move, notes on the runs that are missing). A move's
    subsamples keep the golds of its whole query set, so every system of the move is scored on the same pools."""
    runs, query_sets, notes = {}, {}, []
    pool = bench.pool(Split.TEST)
    for move in (m.value for m in MOVES):
        split = bench.query_split(move)
        if not (bench.has(move, split) and len(bench.queries(move, split))):
            continue
        query_sets[move] = query_set_name(split.value)
        subsamples = subsample_pools(pool["docid"], set(bench.eval_set(move, split).qrels["docid"]), cfg.seed)
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
            stored = StoredRanking(run, depth, evalset.qrels, subsamples)
            vectors = cached_vectors(cfg.paths.embedding_cache, info, evalset.queries, pool, cfg.paths.root) if info else None
            if vectors is not None:
                stored.exact = vector_ranks(list(evalset.queries["qid"].astype(str)), vectors[0],
                                            list(pool["docid"].astype(str)), vectors[1], evalset.qrels, subsamples)
            runs[(system, move)] = stored
    return runs, query_sets, notes


def pool_size_analysis(cfg: Config, bench: Benchmark, systems: Sequence[str], n_resamples: int = stats.N_RESAMPLES, *,
                       write: bool = True) -> PoolSizeResult:
    """The pool-size table and figures for `systems` (run-folder names, retrieval.runs.system_name)."""
    runs, query_sets, notes = load_runs(cfg, bench, systems)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, n_resamples)
    numeric = pool_size_points(runs, cache)
    shown = shown_table(numeric, query_sets) if not numeric.empty else pd.DataFrame()
    whole = len(bench.pool(Split.TEST))
    notes = [
        f"Pool: the test pool ({whole:,} candidates) with the distractors of each move's query set subsampled (seed "
        f"{cfg.seed}; nested: one permutation cut at each fraction), the golds of the query set always kept; other "
        f"moves' golds count as distractors. The paper's test pool holds {PAPER_TEST_POOL:,} candidates. Queries: "
        "silver where it exists, else the unfiltered test set.",
        "A query's ranking over a subsample is its stored ranking filtered to the kept candidates (the run files of "
        "notebooks 08 and 09, nothing searched or encoded again; BM25 keeps the whole pool's term statistics). The "
        "stored run holds each query's top k only: where a gold is not in a query's filtered list and that list holds "
        f"fewer than {CUTOFF} candidates, the gold's rank is computed from the dense run's cached query and pool "
        "embeddings ('Ranked from embeddings': queries so decided), and where no cached embeddings exist (BM25, or a "
        "cache removed) the query is undetermined. Points with undetermined queries show bounds (those queries at 0 / "
        "at the best rank they could have) and their count, never a guessed value.",
        f"Cells: mean over queries (%) with a {int(CONFIDENCE * 100)}% percentile bootstrap interval over queries "
        f"(seeded; ratio_utils.evaluation.stats). {DAGGER}: fewer than {stats.INDICATIVE_BELOW} queries, indicative only.",
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
                ax.plot([row["Pool size"]], [row[f"{metric} lower bound"]], marker="v", markerfacecolor="none", color=color)
        ax.axvline(PAPER_TEST_POOL, color="black", linestyle=":", linewidth=1)
        ax.annotate(f"paper's test pool\n{PAPER_TEST_POOL:,}", (PAPER_TEST_POOL, 0.98), xycoords=("data", "axes fraction"),
                    ha="right", va="top", fontsize=7)
        ax.set_xscale("log")
        ax.set_xlim(right=PAPER_TEST_POOL * 1.6)
        ax.set_xlabel("candidates in the test pool (log scale)")
        ax.set_ylabel(f"{metric} (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4) or 1, fontsize=7, bbox_to_anchor=(0.5, -0.1))
    fig.suptitle(f"{move.capitalize()}: scores as the test pool's distractors are subsampled ({query_set}, N={n}"
                 f"{DAGGER if stats.is_indicative(n) else ''}; bars: 95% bootstrap intervals; dashed: bounds where the "
                 "stored top-k cannot decide; no extrapolation)", fontsize=8)
    fig.tight_layout()
    return fig


def _save_figure(cfg: Config, bench: Benchmark, points: pd.DataFrame, move: str, query_set: str, notes: list[str]) -> Path:
    import matplotlib.pyplot as plt

    fig = draw_pool_size_figure(points, move, query_set)
    written = save_figure(fig, f"figure_pool_size_{move}", cfg, inputs=[cfg.paths.benchmark], notes=notes,
                          labels=silver_sources(bench))
    plt.close(fig)
    return written["png"]
