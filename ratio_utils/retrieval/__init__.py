"""Retrievers of the benchmark (paper §5.1, Appendix C): one `search(queries, pool, k) -> run` interface.

* `BM25Retriever`   — bm25s with stopwords, Snowball stemming and n-gram tokens (bm25.py);
* `DenseRetriever`  — sentence-transformers + exact faiss inner-product search, embedding cache (dense.py);
* `ColBERTRetriever`— PyLate late interaction scored by MaxSim (colbert.py);
* `run_and_score`   — search one (move, split), write the run files, return the metrics (ranking.py);
* run file I/O (runs.py);
* run files carry a sidecar (runs.RunInfo); Tables 1, 7, 8 are assembled by ratio_utils.reporting.paper_tables.
"""

from .base import Retriever
from .bm25 import BM25Retriever
from .dense import (
    MOVE_INSTRUCTIONS,
    RECOMMENDED_PREFIXES,
    DenseRetriever,
    instructed_query_prefix,
    recommended_prefixes,
)
from .ranking import benchmark_queries, run_and_score
from .runs import read_run, run_path, system_slug, write_run


def __getattr__(name):
    # PyLate imports slowly; load it only when a ColBERT retriever is asked for.
    if name == "ColBERTRetriever":
        from .colbert import ColBERTRetriever

        return ColBERTRetriever
    raise AttributeError(name)


__all__ = [
    "Retriever",
    "BM25Retriever",
    "DenseRetriever",
    "ColBERTRetriever",
    "MOVE_INSTRUCTIONS",
    "RECOMMENDED_PREFIXES",
    "instructed_query_prefix",
    "recommended_prefixes",
    "benchmark_queries",
    "run_and_score",
    "read_run",
    "write_run",
    "run_path",
    "system_slug",
]
