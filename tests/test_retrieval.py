"""Retrievers on the tiny benchmark: BM25 against the Lucene formula, dense against direct cosine,
the embedding cache, the query's own sentence, ColBERT against pylate.rank.rerank, run files."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.evaluation.run_scoring import run_and_score
from ratio_utils.io import InputError
from ratio_utils.retrieval import BM25Retriever, DenseRetriever, read_run, run_path, write_run
from ratio_utils.retrieval.bm25 import BM25Tokenizer
from ratio_utils.schema import GENERIC_PREFIXES, Move, instructed_query_prefix, move_text


def _with_query_in_pool(bench, move="address"):
    """Queries of a move and the test pool plus the query sentences themselves."""
    evalset = bench.eval_set(move, "test")
    queries, qrels = evalset.queries, evalset.qrels
    pool = bench.pool("test")
    pool = pd.concat([pool[["docid", "text"]], queries.rename(columns={"qid": "docid"})], ignore_index=True)
    return queries, qrels, pool


def test_tokenizer_stopwords_stemming_and_ngrams():
    unigram = BM25Tokenizer(1)("The parsers are overfitting on the small treebanks")
    assert "the" not in unigram and "are" not in unigram
    assert unigram == ["parser", "overfit", "small", "treebank"]
    bigram = BM25Tokenizer(2)("small treebanks overfit")
    assert bigram == ["small", "treebank", "overfit", "small_treebank", "treebank_overfit"]
    trigram = BM25Tokenizer(3)("small treebanks overfit")
    assert trigram == ["small", "treebank", "overfit", "small_treebank_overfit"]


def _lucene_bm25(query: list[str], docs: list[list[str]], k1=1.5, b=0.75) -> np.ndarray:
    """BM25 as bm25s's "lucene" variant computes it: Lucene's idf, and the term-frequency part
    without the constant factor (k1 + 1), which does not change any ranking."""
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    df = Counter(t for d in docs for t in set(d))
    scores = np.zeros(n)
    for i, doc in enumerate(docs):
        tf = Counter(doc)
        for term in query:
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                scores[i] += idf * tf[term] / (tf[term] + k1 * (1 - b + b * len(doc) / avgdl))
    return scores


@pytest.mark.parametrize("ngram", [1, 2])
def test_bm25_scores_follow_the_lucene_formula_and_skip_the_query_itself(tiny_benchmark, ngram):
    bench = load_benchmark(tiny_benchmark)
    queries, _, pool = _with_query_in_pool(bench)
    retriever = BM25Retriever(ngram)
    run = retriever.search(queries, pool, k=5)
    tokenize = retriever.tokenizer
    docs = [tokenize(t) for t in pool["text"]]
    for qid, text in queries.itertuples(index=False):
        expected = _lucene_bm25(tokenize(text), docs)
        got = run[run.qid == qid]
        assert qid not in set(got.docid), "a query must not retrieve its own sentence"
        assert list(got["rank"]) == list(range(1, len(got) + 1))
        by_doc = dict(zip(pool["docid"], expected))
        for docid, score in zip(got.docid, got.score):
            assert score == pytest.approx(by_doc[docid], rel=1e-4)
        # ranked by score (ties by docid), zero scores not returned
        others = {d: round(s, 4) for d, s in by_doc.items() if d != qid and s > 0}
        assert list(got.docid) == sorted(others, key=lambda d: (-others[d], d))[:5]


def test_bm25_keeps_every_candidate_tied_at_the_cut_off_and_orders_ties_by_docid(tiny_benchmark):
    """A pool where each sentence appears under four docids: the run must not depend on the pool's order (bm25s's
    own top-k picks among ties by backend and position), and must be the reference order on full scores."""
    bench = load_benchmark(tiny_benchmark)
    queries = bench.eval_set("address", "test").queries
    texts = bench.pool("test")["text"]
    pool = pd.DataFrame({"docid": [f"{copy}-{i:04d}" for copy in "dcba" for i in range(len(texts))],
                         "text": list(texts) * 4})
    k = 6  # not a multiple of 4: every cut-off falls inside a block of ties
    runs = [BM25Retriever(1).search(queries, pool.sample(frac=1, random_state=seed), k=k) for seed in (0, 1, 2)]
    for run in runs[1:]:
        pd.testing.assert_frame_equal(run, runs[0])
    retriever = BM25Retriever(1)
    docs = [retriever.tokenizer(t) for t in pool["text"]]
    for qid, text in queries.itertuples(index=False):
        scores = dict(zip(pool["docid"], np.round(_lucene_bm25(retriever.tokenizer(text), docs), 4)))
        expected = sorted((d for d in scores if scores[d] > 0), key=lambda d: (-scores[d], d))[:k]
        assert list(runs[0].loc[runs[0].qid == qid, "docid"]) == expected


def test_instruction_prefix_carries_the_move_instruction():
    prefix = instructed_query_prefix("broaden")
    assert move_text(Move.BROADEN, "instruction") in prefix and prefix.endswith("Query: ")


def test_run_files_round_trip(tmp_path):
    run = pd.DataFrame({"qid": ["q1", "q1", "q2"], "docid": ["a", "b", "a"], "rank": [1, 2, 1],
                        "score": [0.5, 0.25, 1.0]})
    paths = write_run(run, run_path(tmp_path, "My System (v1)", "address", "test"), "My System (v1)")
    assert paths["parquet"] == tmp_path / "My_System_v1" / "address" / "test.parquet"
    pd.testing.assert_frame_equal(read_run(paths["parquet"]), run)
    pd.testing.assert_frame_equal(read_run(paths["trec"]), run)
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 a 1 0.5 sys\nq1 Q0 b two 0.2 sys\n")
    with pytest.raises(InputError, match=r"bad.trec:2"):
        read_run(bad)


def test_run_and_score_writes_run_and_metrics(tiny_benchmark, tmp_path):
    bench = load_benchmark(tiny_benchmark)
    scores = run_and_score(BM25Retriever(1), bench, "specify", "test", k=10, out_dir=tmp_path)
    path = tmp_path / "bm25-unigram" / "specify" / "test.parquet"
    assert path.exists() and path.with_suffix(".trec").exists() and path.with_suffix(".metrics.json").exists()
    run = read_run(path)
    assert set(run.qid) <= set(bench.qrels("specify", "test").qid)
    assert set(scores) == {f"{m}@{k}" for m in ("R", "MRR", "HR") for k in (1, 3, 5, 10)}
    # a smoke-sized sample: the first queries by id, scored against their own judgements only
    run_and_score(BM25Retriever(1), bench, "specify", "test", k=10, out_dir=tmp_path / "small", max_queries=2)
    small = read_run(tmp_path / "small" / "bm25-unigram" / "specify" / "test.parquet")
    first_two = sorted(bench.qrels("specify", "test").qid)[:2]
    assert set(small.qid) <= set(first_two)  # BM25 may retrieve nothing for a query (no shared token)
    info = json.loads((tmp_path / "small" / "bm25-unigram" / "specify" / "test.metrics.json").read_text())
    assert info["queries"] == 2 and info["pairs"] == 2


# -- dense ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    from ratio_utils.models import load_sentence_transformer

    return load_sentence_transformer("all-MiniLM-L6-v2", device="cpu")


class _CountingModel:
    """Wraps a model and counts the texts it is asked to encode."""

    def __init__(self, model):
        self.model, self.calls, self.texts = model, 0, 0

    def encode(self, texts, **kwargs):
        self.calls += 1
        self.texts += len(texts)
        return self.model.encode(texts, **kwargs)


@pytest.mark.models
def test_dense_scores_are_cosines_and_exclude_the_query(tiny_benchmark, minilm):
    bench = load_benchmark(tiny_benchmark)
    queries, _, pool = _with_query_in_pool(bench, "specify")
    retriever = DenseRetriever(minilm, *GENERIC_PREFIXES)
    run = retriever.search(queries, pool, k=4)
    q = minilm.encode(["query: " + t for t in queries.text], normalize_embeddings=True)
    d = minilm.encode(["document: " + t for t in pool.text], normalize_embeddings=True)
    cos = q @ d.T
    for i, qid in enumerate(queries.qid):
        got = run[run.qid == qid]
        assert qid not in set(got.docid)
        expected = [pool.docid[j] for j in np.argsort(-cos[i]) if pool.docid[j] != qid][:4]
        assert list(got.docid) == expected
        assert got.score.to_numpy() == pytest.approx(np.sort(cos[i][pool.docid.to_numpy() != qid])[::-1][:4], abs=1e-5)


@pytest.mark.models
def test_embedding_cache_second_run_encodes_nothing(tiny_benchmark, minilm, tmp_path):
    bench = load_benchmark(tiny_benchmark)
    first_model = _CountingModel(minilm)
    first = DenseRetriever("all-MiniLM-L6-v2", *GENERIC_PREFIXES, cache_dir=tmp_path / "emb")
    first._model = first_model  # the model a path would load, wrapped to count calls
    scores_first = {m: run_and_score(first, bench, m, "test", k=10) for m in ("address", "broaden")}
    assert first_model.calls == 3  # one pool (shared by the moves) + the queries of each move
    second_model = _CountingModel(minilm)
    second = DenseRetriever("all-MiniLM-L6-v2", *GENERIC_PREFIXES, cache_dir=tmp_path / "emb")
    second._model = second_model
    scores_second = {m: run_and_score(second, bench, m, "test", k=10) for m in ("address", "broaden")}
    assert second_model.calls == 0 and second.encoded_texts == 0
    assert scores_second == scores_first
    # another query prefix reuses the pool embeddings and encodes only the queries
    third_model = _CountingModel(minilm)
    third = DenseRetriever("all-MiniLM-L6-v2", instructed_query_prefix("address"), GENERIC_PREFIXES[1],
                           cache_dir=tmp_path / "emb")
    third._model = third_model
    run_and_score(third, bench, "address", "test", k=10)
    n_queries = len(bench.eval_set("address", "test").queries)
    assert third_model.texts == n_queries


def test_embeddings_read_from_an_earlier_notebooks_cache_are_recorded_as_reused(tiny_benchmark, tmp_path, monkeypatch):
    from fake_encoder import FakeEncoder

    from ratio_utils.pipeline import RUN_DIR_ENV
    from ratio_utils.publish import run_records
    from ratio_utils.retrieval.dense import EmbeddingCache

    bench = load_benchmark(tiny_benchmark)
    queries = bench.eval_set("address", "test").queries
    pool = bench.pool("test")
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    monkeypatch.setattr(EmbeddingCache, "_saved_here", set())
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "08.ipynb")
    FakeEncoder(cache_dir=tmp_path / "emb").search(queries, pool, k=3)
    FakeEncoder(cache_dir=tmp_path / "emb").search(queries, pool, k=3)  # the same notebook reads what it wrote
    monkeypatch.setattr(EmbeddingCache, "_saved_here", set())  # the next notebook runs in a new kernel
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "09.ipynb")
    later = FakeEncoder(cache_dir=tmp_path / "emb")
    later.search(queries, pool, k=3)
    assert later.encoded_texts == 0
    n = len(queries) + len(pool)
    assert run_records.reused_by_notebook(tmp_path / "run") == {
        "08.ipynb": "", "09.ipynb": f"{n} of {n} {EmbeddingCache.REUSE_RECORD}"}


@pytest.mark.models
def test_fp16_storage_halves_the_cache_and_keeps_the_ranking(tiny_benchmark, minilm, tmp_path):
    bench = load_benchmark(tiny_benchmark)
    queries = bench.eval_set("broaden", "test").queries
    pool = bench.pool("test")
    full = DenseRetriever(minilm, *GENERIC_PREFIXES, cache_dir=tmp_path / "emb").search(queries, pool, k=5)
    # a live model gets a cache key from its weights
    half = DenseRetriever(minilm, *GENERIC_PREFIXES, cache_dir=tmp_path / "emb",
                          fp16_storage=True).search(queries, pool, k=5)
    assert list(full.docid) == list(half.docid)
    assert half.score.to_numpy() == pytest.approx(full.score.to_numpy(), abs=2e-3)
    sizes = {p.name.split(".")[1]: p.stat().st_size for p in (tmp_path / "emb").rglob("*.npy")
             if len(np.load(p, mmap_mode="r")) == len(pool)}
    assert sizes["float16"] < 0.6 * sizes["float32"]


@pytest.mark.models
def test_colbert_maxsim_matches_pylate_rerank(tiny_benchmark):
    from pylate import rank

    from ratio_utils.retrieval import ColBERTRetriever
    from ratio_utils.retrieval.colbert import load_colbert

    bench = load_benchmark(tiny_benchmark)
    queries, _, pool = _with_query_in_pool(bench, "address")
    model = load_colbert("all-MiniLM-L6-v2", embedding_size=128, device="cpu")  # untrained projection: mechanics only
    run = ColBERTRetriever(model, doc_chunk=5).search(queries, pool, k=6)
    q_emb = model.encode(list(queries.text), is_query=True)
    d_emb = model.encode(list(pool.text), is_query=False)
    reference = rank.rerank([list(pool.docid)] * len(queries), q_emb, [d_emb] * len(queries))
    for i, qid in enumerate(queries.qid):
        expected = [r for r in reference[i] if r["id"] != qid][:6]
        got = run[run.qid == qid]
        assert list(got.docid) == [r["id"] for r in expected]
        assert got.score.to_numpy() == pytest.approx([r["score"] for r in expected], rel=1e-4)


def test_baselines_draw_one_progress_bar_and_no_nested_ones(cfg, tiny_benchmark, capfd):
    """Over 1,000 queries bm25s draws its own bar; under the stage's bar it would nest and leave cursor-up
    escapes (\\x1b[A) in the notebook's output. The stage's bar is the only one."""
    from ratio_utils.dataset.benchmark import pairs_path, write_pairs, write_pool
    from ratio_utils.param_sections import RetrievalParams
    from ratio_utils.schema import Split, sentence_id
    from ratio_utils.stages.retrieval_baselines import run_baselines

    pairs = pd.read_parquet(pairs_path(tiny_benchmark, Move.SPECIFY, Split.TEST))
    many = pd.concat([pairs.iloc[[0]]] * 1100, ignore_index=True)
    many["querySentence"] = [f"query {i} asks about topic {i % 37} with method {i % 11}." for i in range(len(many))]
    many["goldSentence"] = [f"topic {i % 37} is handled by method {i % 11} in gold {i}." for i in range(len(many))]
    many["query_id"] = many["querySentence"].map(sentence_id)
    many["gold_id"] = many["goldSentence"].map(sentence_id)
    write_pairs(many, tiny_benchmark, Move.SPECIFY, Split.TEST)
    pool = load_benchmark(tiny_benchmark).pool("test")
    golds = pd.DataFrame({"docid": many["gold_id"], "text": many["goldSentence"], "source": "specify",
                          "corpusid": many["corpusid"]})
    write_pool(pd.concat([pool[list(golds.columns)], golds], ignore_index=True), tiny_benchmark, Split.TEST)

    params = RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], move_instructions=False, splits=["test"],
                             tuned_models=False)
    done = run_baselines(cfg, load_benchmark(tiny_benchmark), params)
    assert done.set_index("move").loc["specify", "queries"].tolist() == [1100, 1100]
    err = capfd.readouterr().err
    assert "retrieval baselines" in err and "6/6" in err
    assert "\x1b[" not in err and "BM25S" not in err


def test_baselines_build_each_retriever_once_and_hold_one_at_a_time(cfg, tiny_benchmark, monkeypatch):
    # a pool index per system kept to the end made notebook 08's memory grow with the systems times the pool
    import gc
    import weakref

    from ratio_utils.param_sections import RetrievalParams
    from ratio_utils.stages import retrieval_baselines
    from ratio_utils.stages.retrieval_baselines import run_baselines

    made, alive_at_search = [], []
    real_make, real_record = retrieval_baselines.build_retriever, retrieval_baselines.record_run

    def make(*args, **kwargs):
        retriever = real_make(*args, **kwargs)
        made.append(weakref.ref(retriever))
        return retriever

    def record(retriever, *args, **kwargs):
        gc.collect()
        alive_at_search.append(sum(ref() is not None for ref in made))
        return real_record(retriever, *args, **kwargs)

    monkeypatch.setattr(retrieval_baselines, "build_retriever", make)
    monkeypatch.setattr(retrieval_baselines, "record_run", record)
    params = RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], move_instructions=False, splits=["test"],
                             tuned_models=False)
    done = run_baselines(cfg, load_benchmark(tiny_benchmark), params)
    assert len(done) == 6 and len(made) == 2  # two BM25 systems, each searched for the three moves
    assert alive_at_search == [1] * 6
