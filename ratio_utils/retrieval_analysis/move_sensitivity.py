"""Move sensitivity of the unified retriever (notebook 13): every query issued under every move's instruction,
the gold's rank under each and the overlap of the top 10 with the own move's, and their summaries, tables and figure.

`sensitivity_ranks` is called when the unified model is published (`train/unified`), while its cached test-pool
vectors are still keyed by the staged folder; the summaries, tables and figure serve stage 13
(ratio_utils.stages.unified_retriever).

Reads:  nothing (the ranks are handed in; `sensitivity_ranks` reads the benchmark and the encoder's cache).
Writes: tables/unified_move_sensitivity, tables/unified_own_vs_other, figures/unified_move_sensitivity (each with
        provenance).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.stats import DAGGER, INDICATIVE_BELOW, format_p
from ..param_sections import UnifiedParams
from ..publish.display import show_figure
from ..publish.published import set_figure_style, write_table
from ..schema import Move, Split, instructed_query_prefix

TOP = 10


def sensitivity_ranks(encoder, bench: Benchmark, split: Split | str, moves: Sequence[Move], template: str,
                      doc_prefix: str, chunk: int = 512) -> pd.DataFrame:
    """One row per (query, gold) pair of `split` for every move: the gold's rank in the whole pool
    when the query is issued under each move's instruction, and the top-10 overlap with the own move's.

    `encoder` is a DenseRetriever of the model (with a cache, the pool vectors of the test evaluation
    are reused). Ranks are exact over the pool (the query's
    own sentence excluded; a candidate scoring equal to the gold counts as ahead of it only when its id
    sorts first, the benchmark's tie order). Columns: qid, move, gold_id, rank_<m>, overlap_<m>, changed.
    """
    split = Split.parse(split)
    pool = bench.pool(split)[["docid", "text"]].drop_duplicates("docid").reset_index(drop=True)
    position = {d: i for i, d in enumerate(pool["docid"])}
    pairs = pd.concat([_move_pairs(bench.eval_set(m, split), m) for m in moves if bench.has(m, split)],
                      ignore_index=True)
    pairs = pairs.drop_duplicates(["qid", "gold_id", "move"])
    queries = pairs.drop_duplicates("qid")[["qid", "text"]].reset_index(drop=True)
    query_row = {q: i for i, q in enumerate(queries["qid"])}
    docids = pool["docid"].to_numpy()
    id_order = np.argsort(np.argsort(docids))  # rank of each docid in ascending order (tie-break)
    pool_vectors = np.asarray(encoder.embeddings(list(pool["docid"]), list(pool["text"]), doc_prefix, "pool")[0],
                              dtype=np.float32)
    self_col = np.array([position.get(q, -1) for q in queries["qid"]])
    gold_col = np.array([position.get(g, -1) for g in pairs["gold_id"]])
    pair_query = pairs["qid"].map(query_row).to_numpy()
    ranks: dict[str, np.ndarray] = {}
    tops: dict[str, np.ndarray] = {}
    for move in moves:
        prefix = instructed_query_prefix(move, template)
        qvec = np.asarray(encoder.embeddings(list(queries["qid"]), list(queries["text"]), prefix, "queries")[0],
                          dtype=np.float32)
        rank = np.full(len(pairs), np.nan)
        top = np.zeros((len(queries), min(TOP, len(pool))), dtype=np.int64)
        for start in range(0, len(queries), chunk):
            scores = qvec[start:start + chunk] @ pool_vectors.T
            rows = np.arange(scores.shape[0])
            own = self_col[start:start + chunk]
            scores[rows[own >= 0], own[own >= 0]] = -np.inf
            part = np.argpartition(-scores, top.shape[1] - 1, axis=1)[:, :top.shape[1]]
            top[start:start + chunk] = part
            in_chunk = np.flatnonzero((pair_query >= start) & (pair_query < start + chunk) & (gold_col >= 0))
            local = pair_query[in_chunk] - start
            gold_scores = scores[local, gold_col[in_chunk]][:, None]
            ahead = (scores[local] > gold_scores) | ((scores[local] == gold_scores)
                                                     & (id_order[None, :] < id_order[gold_col[in_chunk]][:, None]))
            rank[in_chunk] = 1 + ahead.sum(axis=1)
        ranks[move.value] = rank
        tops[move.value] = top
    out = pairs[["qid", "move", "gold_id"]].reset_index(drop=True)
    for move in moves:
        out[f"rank_{move.value}"] = ranks[move.value]
    top_sets = {m: [frozenset(row) for row in t] for m, t in tops.items()}
    for move in moves:
        out[f"overlap_{move.value}"] = [len(top_sets[own][q] & top_sets[move.value][q])
                                        for own, q in zip(out["move"], pair_query)]
    changed = [len({top_sets[m.value][q] for m in moves}) > 1 for q in range(len(queries))]
    out["changed"] = [changed[q] for q in pair_query]
    return out


def _move_pairs(evalset, move: Move) -> pd.DataFrame:
    """One row per (query, gold) of a move's eval set, in the pair file's order: qid, text, gold_id, move."""
    text = dict(zip(evalset.queries["qid"], evalset.queries["text"]))
    pairs = evalset.qrels.rename(columns={"docid": "gold_id"})
    return pd.DataFrame({"qid": pairs["qid"], "text": pairs["qid"].map(text), "gold_id": pairs["gold_id"],
                         "move": move.value})


def sensitivity_summary(ranks: pd.DataFrame, moves: Sequence[Move]) -> pd.DataFrame:
    """Per own move: how often the top 10 changes with the move, and where the gold ranks under its own move."""
    names = [m.value for m in moves]
    rows = []
    groups = [(m, ranks[ranks["move"] == m]) for m in names] + [("all", ranks)]
    for own, frame in groups:
        frame = frame.dropna(subset=[f"rank_{m}" for m in names])
        if frame.empty:
            continue
        own_rank = np.array([row[f"rank_{row['move']}"] for _, row in frame.iterrows()])
        best_other = np.array([min(row[f"rank_{m}"] for m in names if m != row["move"])
                               for _, row in frame.iterrows()])
        overlap = np.array([np.mean([row[f"overlap_{m}"] for m in names if m != row["move"]])
                            for _, row in frame.iterrows()])
        rows.append({
            "Move": own.capitalize() if own != "all" else "All",
            "Pairs": len(frame),
            "Top 10 changes with the move (%)": 100 * frame.drop_duplicates("qid")["changed"].mean(),
            "Mean top-10 overlap with other moves (of 10)": float(overlap.mean()),
            "Gold higher under own move than under both others (%)": 100 * float((own_rank < best_other).mean()),
            "Tied with the best other (%)": 100 * float((own_rank == best_other).mean()),
            "Lower under own move than under another (%)": 100 * float((own_rank > best_other).mean()),
            "Median gold rank, own move": float(np.median(own_rank)),
            "Median gold rank, best other move": float(np.median(best_other)),
        })
    return pd.DataFrame(rows)


def pairwise_own_vs_other(ranks: pd.DataFrame, moves: Sequence[Move], *, paired_test: bool = True, seed: int = 13,
                          n_resamples: int = stats.N_RESAMPLES) -> pd.DataFrame:
    """For each own move and each other move: % of pairs whose gold ranks higher / equal / lower under the own move,
    and the difference higher - lower (points) with its paired bootstrap interval and sign-flip permutation p.

    Per pair, 'higher' is 1 when the gold ranks higher under the own move and 'lower' 1 when it ranks lower; a
    retriever that ignored the instruction would have higher - lower = 0 in expectation. `paired_test`
    False: the shares only (a figure's bars).
    """
    rows = []
    for own in moves:
        frame = ranks[ranks["move"] == own.value]
        for other in moves:
            if other is own or frame.empty:
                continue
            a, b = frame[f"rank_{own.value}"], frame[f"rank_{other.value}"]
            valid = a.notna() & b.notna()
            a, b = a[valid], b[valid]
            higher, lower = (a < b).to_numpy(float), (a > b).to_numpy(float)
            row = {"own move": own.value, "other move": other.value, "pairs": int(valid.sum()),
                   "higher under own": 100 * float(higher.mean()) if len(a) else float("nan"),
                   "equal": 100 * float((a == b).mean()) if len(a) else float("nan"),
                   "lower under own": 100 * float(lower.mean()) if len(a) else float("nan")}
            if paired_test and len(a):
                low, high = stats.paired_bootstrap_ci(higher, lower, n_resamples=n_resamples, seed=seed)
                p = stats.paired_permutation_test(higher, lower, n_permutations=n_resamples, seed=seed)
                row.update({"higher - lower": 100 * float((higher - lower).mean()), "higher - lower low": 100 * low,
                            "higher - lower high": 100 * high, "p": p})
            rows.append(row)
    return pd.DataFrame(rows)


# -- the tables and the figure of notebook 13 ------------------------------------------------------------------------


def sensitivity_table(cfg: Config, params: UnifiedParams, ranks: pd.DataFrame) -> pd.DataFrame:
    """The move-sensitivity summary, written with the pairwise own-vs-other table (tests, reading in the notes)."""
    moves = params.selected_moves()
    table = sensitivity_summary(ranks, moves)
    notes = [
        f"Each {params.sensitivity_split} query is issued three times to the unified retriever, once with each move's "
        "instruction. 'Top 10 changes': the set of the 10 best candidates is not the same under all three "
        "instructions (per query). Overlap: candidates shared by the own move's top 10 and another move's, averaged "
        "over the other moves. Gold ranks are exact ranks in the whole pool (the query's own sentence excluded).",
        "The paper's concern (§5.1): a retriever that ignores the move would return the same list for every move; "
        "a gold ranked higher under its own move than under the others shows the instruction steering the ranking.",
    ]
    pairwise = pairwise_own_vs_other(ranks, moves, seed=cfg.seed)
    reading = sensitivity_reading(table, pairwise)
    write_table(table, "unified_move_sensitivity", cfg, notes=[*notes, *reading], inputs=[cfg.paths.benchmark],
                caption="Move sensitivity of the unified retriever", float_format="{:.1f}")
    pairwise_notes = [notes[0], "higher - lower: share of pairs whose gold ranks higher under the own move minus the "
                      "share ranked lower (points), with its paired bootstrap interval over pairs; p: two-sided "
                      f"sign-flip permutation test of higher - lower = 0 ({stats.N_RESAMPLES:,} permutations). "
                      f"{DAGGER}: fewer than {INDICATIVE_BELOW} pairs, indicative only.", *reading]
    write_table(pairwise, "unified_own_vs_other", cfg, notes=pairwise_notes, inputs=[cfg.paths.benchmark],
                shown=own_vs_other_shown(pairwise),
                caption="Gold rank under its own move vs under each other move (% of pairs)")
    return table


def own_vs_other_shown(pairwise: pd.DataFrame) -> pd.DataFrame:
    """The pairwise table as shown: the difference as a cell with its interval, p through stats.format_p."""
    if pairwise.empty or "higher - lower" not in pairwise:
        return pairwise
    shown = pairwise.drop(columns=["higher - lower low", "higher - lower high"])
    shown["higher - lower"] = [stats.format_ci(v, lo, hi, scale=1) + stats.dagger(n)
                               for v, lo, hi, n in zip(pairwise["higher - lower"], pairwise["higher - lower low"],
                                                       pairwise["higher - lower high"], pairwise["pairs"])]
    shown["p"] = pairwise["p"].map(format_p)
    return shown


def sensitivity_reading(summary: pd.DataFrame, pairwise: pd.DataFrame) -> list[str]:
    """What the move-sensitivity numbers show, in sentences built from them (never typed)."""
    if summary.empty:
        return []
    overall = summary[summary["Move"] == "All"].iloc[0]
    higher, tied = (overall["Gold higher under own move than under both others (%)"],
                    overall["Tied with the best other (%)"])
    lower = overall["Lower under own move than under another (%)"]
    lines = [f"Over all {int(overall['Pairs']):,} pairs, the gold ranks lower under its own move than under another "
             f"move for {lower:.1f}% of the pairs, higher than under both others for {higher:.1f}% and ties the best "
             f"other for {tied:.1f}%. This compares the own move with the better of two others, so it is not "
             "symmetric: a retriever that ignored the instruction would rank the gold strictly higher under its own "
             "move for about a third of the "
             "untied pairs; the pairwise comparisons (tables/unified_own_vs_other) are the symmetric test."]
    if "higher - lower" in pairwise:
        groups: dict[str, list[str]] = {"up": [], "down": [], "unclear": []}
        for row in pairwise.to_dict(orient="records"):
            text = (f"{row['own move']} vs {row['other move']} ({row['higher - lower']:+.1f} points "
                    f"[{row['higher - lower low']:.1f}, {row['higher - lower high']:.1f}], p {format_p(row['p'])}"
                    f"{', ' + DAGGER if stats.is_indicative(row['pairs']) else ''})")
            side = "up" if row["higher - lower low"] > 0 else "down" if row["higher - lower high"] < 0 else "unclear"
            groups[side].append(text)
        parts = [f"{label}: {'; '.join(items)}" for label, items in (
            ("own move ranks the gold higher (interval above 0)", groups["up"]),
            ("own move ranks the gold lower (interval below 0)", groups["down"]),
            ("no clear difference (interval includes 0)", groups["unclear"])) if items]
        lines.append("Pairwise, higher - lower under the own move: " + ". ".join(parts) + ".")
    return lines


def sensitivity_figure(cfg: Config, params: UnifiedParams, ranks: pd.DataFrame, model: str):
    """The move-sensitivity figure (`draw_sensitivity_figure`), saved under figures/ and shown once, from its file
    (display.show_figure closes the live figure); `model` names the unified retriever in its provenance."""
    fig, title = draw_sensitivity_figure(params, ranks)
    return show_figure(fig, "unified_move_sensitivity", cfg, inputs=[cfg.paths.benchmark],
                       notes=[f"{title}; unified retriever {model}"])


def draw_sensitivity_figure(params: UnifiedParams, ranks: pd.DataFrame):
    """(a) own vs each other move: % of golds ranked higher / equal / lower; (b) top-10 overlap with other moves.
    Each bar and box names its N (pairs), † below 30; the title names the query set. Returns the figure and its
    title."""
    import matplotlib.pyplot as plt
    import numpy as np

    set_figure_style()
    moves = params.selected_moves()
    pairwise = pairwise_own_vs_other(ranks, moves, paired_test=False)  # shares; the test is in the table
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [f"{r['own move']}\nvs {r['other move']}\nN={r['pairs']}{stats.dagger(r['pairs'])}"
              for r in pairwise.to_dict(orient="records")]
    bottom = np.zeros(len(pairwise))
    for column, color in (("higher under own", "#2a9d8f"), ("equal", "#bbbbbb"), ("lower under own", "#e76f51")):
        left.bar(labels, pairwise[column], bottom=bottom, label=column, color=color)
        bottom += pairwise[column].to_numpy()
    left.set_ylabel("% of query–gold pairs")
    left.set_title("(a) gold rank under its own move")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)
    left.tick_params(axis="x", labelsize=7)
    names = [m.value for m in moves]
    data = [ranks.loc[ranks["move"] == m, [f"overlap_{o}" for o in names if o != m]].to_numpy().ravel() for m in names]
    counts = [int((ranks["move"] == m).sum()) for m in names]
    right.boxplot(data, tick_labels=[f"{m}\nN={n}{stats.dagger(n)}" for m, n in zip(names, counts)], showmeans=True)
    right.set_ylim(-0.5, 10.5)
    right.set_ylabel(f"shared candidates in the top {TOP}")
    right.set_title("(b) top-10 overlap, own move vs other moves")
    title = sensitivity_figure_title(params, counts)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig, title


def sensitivity_figure_title(params: UnifiedParams, counts: list[int]) -> str:
    small = any(stats.is_indicative(n) for n in counts)
    return (f"Move sensitivity of the unified retriever on the unfiltered {params.sensitivity_split} queries, "
            f"N = {sum(counts):,} query–gold pairs (per move below)"
            + (f"; {DAGGER} fewer than {INDICATIVE_BELOW} pairs, indicative" if small else ""))
