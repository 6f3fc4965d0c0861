"""Scoring a retriever on the benchmark: the Python API (its command line is `ratio_utils.apps.evaluate`).

* `evaluation/scoring` — `evaluate(model_or_retriever, benchmark, split, move)`, also `ratio_utils.evaluate`;
* `evaluation/run_scoring` — the one scorer of a run (`score_run`: in memory or from its file, aggregate or per
  query; `score_run_file`: a recorded system run on the queries its sidecar names), and rank-then-score;
* `evaluation/mteb_tasks` — one MTEB retrieval task per move on a benchmark directory;
* `evaluation/metrics` — Recall@k, MRR@k, hit rate per query, run and qrels I/O (checked against ranx);
* `evaluation/stats` — bootstrap intervals, paired bootstrap, sign-flip permutation test (checked against scipy);
* `evaluation/intervals` — the interval cells of every result table and their cache.

`evaluate` is imported on first use: `metrics` and `stats` are imported by training and the tables, which must
not pull in the scoring path.
"""

__all__ = ["evaluate"]


def __getattr__(name: str):
    if name == "evaluate":
        from .scoring import evaluate

        return evaluate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
