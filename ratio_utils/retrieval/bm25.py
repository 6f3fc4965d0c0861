"""BM25 baselines of Table 8 (Appendix C, "Baselines"): unigram, unigram+bigram, unigram+trigram.

Text processing, the same for queries and candidates:
  lower-case -> word tokens (`\\w+`) -> remove English stopwords -> Snowball (Porter2) stemming
  with PyStemmer -> for the n-gram variants, add every n-gram of the stemmed sequence as an
  extra token ("stem1_stem2"), so BM25 scores phrases and words in one index.
Stopwords: scikit-learn's ENGLISH_STOP_WORDS (318 words), because NLTK's list needs a data
download that this machine cannot do. The paper used BM25S; so do we. Candidates with a BM25
score of 0 share no token with the query and are not returned (their order would be arbitrary).

The index lives in memory (bm25s keeps every token list while it builds its sparse matrix). Its IDF is
global, so a pool cannot simply be indexed shard by shard; a pool whose index would exceed the memory
budget (retrieval.max_pool_bytes) is refused before indexing, with the memory it would need.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .base import Retriever, run_from_hits

# Peak bytes per indexed token while bm25s builds an index (tracemalloc, pools of the default run: 150 for
# unigrams, 168 with trigram tokens; the token lists dominate).
BM25_BYTES_PER_TOKEN = 160
_SAMPLE = 2000  # sentences tokenized to estimate a pool's tokens

_WORD = re.compile(r"\w+", re.UNICODE)


def english_stopwords() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


class BM25Tokenizer:
    """Stopword removal, stemming and n-gram tokens (see module docstring)."""

    def __init__(self, ngram: int = 1, stopwords: Iterable[str] | None = None, stemmer: str | None = "english"):
        if ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {ngram}")
        self.ngram = ngram
        self.stopwords = english_stopwords() if stopwords is None else frozenset(w.lower() for w in stopwords)
        self.stemmer_name = stemmer
        if stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(stemmer)
        else:
            self._stemmer = None

    def __call__(self, text: str) -> list[str]:
        words = [w for w in _WORD.findall(text.lower()) if w not in self.stopwords]
        if self._stemmer is not None:
            words = self._stemmer.stemWords(words)
        tokens = list(words)
        if self.ngram > 1:
            n = self.ngram
            tokens += ["_".join(words[i : i + n]) for i in range(len(words) - n + 1)]
        return tokens


class BM25Retriever(Retriever):
    """BM25 (bm25s, Lucene scoring, k1=1.5, b=0.75) over stemmed, stopword-free tokens."""

    _VARIANT = {1: "unigram", 2: "bigram", 3: "trigram"}

    def __init__(
        self,
        ngram: int = 1,
        stopwords: Iterable[str] | None = None,
        stemmer: str | None = "english",
        *,
        k1: float = 1.5,
        b: float = 0.75,
        name: str | None = None,
        max_pool_bytes: int | None = None,
    ):
        self.tokenizer = BM25Tokenizer(ngram, stopwords, stemmer)
        self.max_pool_bytes = max_pool_bytes  # None: no budget
        self.k1, self.b = k1, b
        self.name = name or f"bm25-{self._VARIANT.get(ngram, f'{ngram}gram')}"
        self._index_key: str | None = None
        self._index = None
        self._vocab: set[str] = set()

    # How candidates are ordered (top_by_score_then_docid). A run's sidecar records it and a run file ranked by
    # another rule is never reused (systems.runs.reusable): change it whenever the ordering changes.
    RANKING = "bm25s scores, ties at the cut-off by docid"

    def describe(self) -> dict:
        return {
            **super().describe(),
            "ngram": self.tokenizer.ngram,
            "stopwords": f"sklearn ENGLISH_STOP_WORDS ({len(self.tokenizer.stopwords)})",
            "stemmer": self.tokenizer.stemmer_name,
            "k1": self.k1,
            "b": self.b,
        }

    def _ensure_index(self, pool: pd.DataFrame):
        # The three moves share one pool: index it once per retriever.
        key = hashlib.sha256("\x1f".join(pool["docid"]).encode()).hexdigest()
        if key != self._index_key:
            import bm25s

            self._check_budget(pool["text"])
            tokens = [self.tokenizer(t) for t in pool["text"]]
            index = bm25s.BM25(k1=self.k1, b=self.b)
            index.index(tokens, show_progress=False)
            self._index, self._index_key = index, key
            self._vocab = set(index.vocab_dict) - {""}  # bm25s's placeholder token has no postings
        return self._index

    def index_bytes(self, texts: pd.Series) -> int:
        """Estimated peak memory of indexing `texts`: their tokens (from an evenly spaced sample) x
        BM25_BYTES_PER_TOKEN."""
        sample = texts.iloc[:: max(1, len(texts) // _SAMPLE)]
        tokens_per_text = sum(len(self.tokenizer(t)) for t in sample) / max(len(sample), 1)
        return int(len(texts) * tokens_per_text * BM25_BYTES_PER_TOKEN)

    def _check_budget(self, texts: pd.Series) -> None:
        if self.max_pool_bytes is None:
            return
        needed = self.index_bytes(texts)
        if needed > self.max_pool_bytes:
            raise MemoryError(
                f"{self.name}: indexing {len(texts):,} candidates needs about {needed / 2**30:.1f} GiB of memory "
                f"(~{needed // BM25_BYTES_PER_TOKEN:,} tokens x {BM25_BYTES_PER_TOKEN} bytes), more than "
                f"retrieval.max_pool_bytes ({self.max_pool_bytes / 2**30:.1f} GiB); BM25's IDF is global, so the pool "
                "is not split: raise retrieval.max_pool_bytes on a machine with that much memory, or leave BM25 out "
                "(retrieval.bm25_ngrams: [])")

    def _search(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        index = self._ensure_index(pool)
        # Unknown tokens carry no score; bm25s ignores them, removing them keeps that explicit.
        query_tokens = [[t for t in self.tokenizer(text) if t in self._vocab] for text in queries["text"]]
        width = min(k + 1, len(pool))  # one spare slot for the query's own sentence
        hits = np.full((len(queries), width), -1, dtype=np.int64)
        scores = np.zeros((len(queries), width), dtype=np.float32)
        docids = pool["docid"].to_numpy()
        docid_order = np.empty(len(docids), dtype=np.int64)
        docid_order[np.argsort(docids, kind="stable")] = np.arange(len(docids))
        # A query left with no indexed token (all stopwords or unseen words) retrieves nothing.
        answerable = [i for i, tokens in enumerate(query_tokens) if tokens]
        for i in tqdm(answerable, desc=f"{self.name} search", unit="query",
                      disable=not (self.show_progress and len(answerable) > 1000)):
            hits[i], scores[i] = top_by_score_then_docid(index.get_scores(query_tokens[i]), docid_order, width)
        hits = np.where(scores > 0, hits, -1)
        return run_from_hits(list(queries["qid"]), docids, hits, scores, k)


def top_by_score_then_docid(scores: np.ndarray, docid_order: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The `width` best candidates of one query by score, ties broken by docid (`docid_order`: each candidate's
    position among the sorted docids), and their scores.

    Written here rather than taken from `bm25s.BM25.retrieve` because its top-k picks among candidates tied at the
    cut-off by its backend: with numba installed (ranx pulls it in) 273 of the ML Address test queries got another
    top 101 than with numpy, which moved golds in and out of Recall@100. Every candidate tied with the width-th
    score is kept before the docid order decides, so the run depends only on the scores and the docids.
    """
    cut = np.partition(scores, len(scores) - width)[len(scores) - width]
    candidates = np.flatnonzero(scores >= cut)
    order = np.lexsort((docid_order[candidates], -scores[candidates]))[:width]
    return candidates[order], scores[candidates[order]]
