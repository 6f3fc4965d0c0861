"""Retrievers of the benchmark (paper §5.1, Appendix C) and their run files: one `search(queries, pool, k) -> run`
interface.

* `BM25Retriever`   — bm25s with stopwords, Snowball stemming and n-gram tokens (bm25.py);
* `DenseRetriever`  — sentence-transformers + exact faiss inner-product search, embedding cache (dense.py);
* `ColBERTRetriever`— PyLate late interaction scored by MaxSim (colbert.py);
* `rerank`          — the listwise LLM reranker of a first stage's top 100 (rerank.py);
* the run-file format with its sidecar (runs.py, `runs.RunInfo`).
A system's retriever is built through the family registry (`ratio_utils.systems.families`) and its runs recorded
by `ratio_utils.systems.runs`; scoring a run is `ratio_utils.evaluation`'s job; Tables 1, 7, 8 are
`ratio_utils.reporting`'s.
"""

from .base import Retriever
from .bm25 import BM25Retriever
from .dense import DenseRetriever
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
    "read_run",
    "write_run",
    "run_path",
    "system_slug",
]
