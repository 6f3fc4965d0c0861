"""Move sensitivity of the unified retriever (notebook 13): every query issued under every move's instruction,
the gold's rank under each and the overlap of the top 10 with the own move's, and their summaries.

`sensitivity_ranks` is called when the unified model is published (`train/unified`), while its cached test-pool
vectors are still keyed by the staged folder; the summaries serve stage 13 (ratio_utils.stages.unified_retriever).
Reads and writes no file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..schema import instructed_query_prefix
from ..schema import Move, Split

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
    pairs = pd.concat([bench.queries(m, split)[["query_id", "querySentence", "gold_id"]].assign(move=m.value)
                       for m in moves if bench.has(m, split)], ignore_index=True)
    pairs = pairs.rename(columns={"query_id": "qid", "querySentence": "text"}).drop_duplicates(["qid", "gold_id", "move"])
    queries = pairs.drop_duplicates("qid")[["qid", "text"]].reset_index(drop=True)
    query_row = {q: i for i, q in enumerate(queries["qid"])}
    docids = pool["docid"].to_numpy()
    id_order = np.argsort(np.argsort(docids))  # rank of each docid in ascending order (tie-break)
    pool_vectors = np.asarray(encoder.embeddings(list(pool["docid"]), list(pool["text"]), doc_prefix, "pool")[0], dtype=np.float32)
    self_col = np.array([position.get(q, -1) for q in queries["qid"]])
    gold_col = np.array([position.get(g, -1) for g in pairs["gold_id"]])
    pair_query = pairs["qid"].map(query_row).to_numpy()
    ranks: dict[str, np.ndarray] = {}
    tops: dict[str, np.ndarray] = {}
    for move in moves:
        prefix = instructed_query_prefix(move, template)
        qvec = np.asarray(encoder.embeddings(list(queries["qid"]), list(queries["text"]), prefix, "queries")[0], dtype=np.float32)
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
            ahead = (scores[local] > gold_scores) | ((scores[local] == gold_scores) & (id_order[None, :] < id_order[gold_col[in_chunk]][:, None]))
            rank[in_chunk] = 1 + ahead.sum(axis=1)
        ranks[move.value] = rank
        tops[move.value] = top
    out = pairs[["qid", "move", "gold_id"]].reset_index(drop=True)
    for move in moves:
        out[f"rank_{move.value}"] = ranks[move.value]
    top_sets = {m: [frozenset(row) for row in t] for m, t in tops.items()}
    for move in moves:
        out[f"overlap_{move.value}"] = [len(top_sets[own][q] & top_sets[move.value][q]) for own, q in zip(out["move"], pair_query)]
    changed = [len({top_sets[m.value][q] for m in moves}) > 1 for q in range(len(queries))]
    out["changed"] = [changed[q] for q in pair_query]
    return out


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
        best_other = np.array([min(row[f"rank_{m}"] for m in names if m != row["move"]) for _, row in frame.iterrows()])
        overlap = np.array([np.mean([row[f"overlap_{m}"] for m in names if m != row["move"]]) for _, row in frame.iterrows()])
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
