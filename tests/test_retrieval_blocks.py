"""Dense search beyond memory (ratio_utils.retrieval.blocks): a float16 memory-mapped pool written chunk by
chunk and searched block by block gives the exact top-k of one flat faiss index over the whole pool."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from ratio_utils.retrieval.blocks import encode_to_memmap, search_blocks
from ratio_utils.retrieval.dense import texts_checksum


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_block_search_equals_one_flat_index(tmp_path):
    rng = np.random.default_rng(13)
    pool = _unit(rng.normal(size=(1000, 16)))
    queries = _unit(rng.normal(size=(7, 16)))
    texts = [str(i) for i in range(len(pool))]
    calls = []

    def encode(batch):  # a stand-in for the model: row i's vector for text "i"
        calls.append(len(batch))
        return pool[[int(t) for t in batch]]

    stored = encode_to_memmap(encode, texts, tmp_path / "pool.float16.npy", dim=16, chunk=300)
    assert isinstance(stored, np.memmap) and stored.dtype == np.float16 and calls == [300, 300, 300, 100]
    flat = faiss.IndexFlatIP(16)
    flat.add(np.asarray(stored, dtype=np.float32))
    expected_scores, expected_rows = flat.search(queries, 10)
    scores, rows = search_blocks(queries, stored, k=10, block_rows=97)  # blocks that do not divide the pool
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5)
    # k wider than the pool: every row once, no padding ids
    _, all_rows = search_blocks(queries, stored[:5], k=10, block_rows=2)
    assert all_rows.shape == (7, 5) and all(sorted(r) == list(range(5)) for r in all_rows)


def test_an_interrupted_pool_encoding_resumes_at_its_first_unwritten_chunk(tmp_path):
    rng = np.random.default_rng(5)
    pool = _unit(rng.normal(size=(1000, 16)))
    texts = [str(i) for i in range(len(pool))]
    key = texts_checksum(texts, texts)
    path = tmp_path / "pool.float16.npy"
    calls = []

    def encode(batch, fail_at=None):
        if len(calls) == fail_at:
            raise KeyboardInterrupt  # a preempted job
        calls.append(batch[0])
        return pool[[int(t) for t in batch]]

    with pytest.raises(KeyboardInterrupt):
        encode_to_memmap(lambda batch: encode(batch, fail_at=2), texts, path, dim=16, chunk=300, texts_key=key)
    assert calls == ["0", "300"] and not path.exists()  # never a half-written cache file
    # other texts (or another chunk size) never resume this partial file: they start over
    other = [t + " " for t in texts]
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        encode_to_memmap(lambda batch: encode([t.strip() for t in batch], fail_at=1), other, path, dim=16, chunk=300,
                         texts_key=texts_checksum(other, other))
    assert calls == ["0"]
    calls.clear()
    with pytest.raises(KeyboardInterrupt):  # the partial file now holds the other texts' first chunk: start over
        encode_to_memmap(lambda batch: encode(batch, fail_at=2), texts, path, dim=16, chunk=300, texts_key=key)
    calls.clear()
    resumed = encode_to_memmap(encode, texts, path, dim=16, chunk=300, texts_key=key)
    assert calls == ["600", "900"]  # only the chunks not yet written
    whole = encode_to_memmap(encode, texts, tmp_path / "whole.float16.npy", dim=16, chunk=300)
    np.testing.assert_array_equal(resumed, whole)
    # no partial file or progress record is left (only the writers' lock files, empty)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock") == ["pool.float16.npy",
                                                                                   "whole.float16.npy"]


def _pool_and_queries(n_docs: int = 300, n_queries: int = 25):
    """Sentences of random words; some queries are pool sentences (their own sentence must not be returned)."""
    import pandas as pd

    from ratio_utils.schema import sentence_id

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    texts = sorted({" ".join(rng.choice(words, size=8)) for _ in range(n_docs)})
    pool = pd.DataFrame({"docid": [sentence_id(t) for t in texts], "text": texts})
    query_texts = texts[:5] + [" ".join(rng.choice(words, size=6)) for _ in range(n_queries - 5)]
    queries = pd.DataFrame({"qid": [sentence_id(t) for t in query_texts], "text": query_texts}).drop_duplicates("qid")
    return pool, queries


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("cached", [False, True])
def test_dense_retriever_beyond_its_memory_budget_ranks_like_the_in_memory_index(tmp_path, monkeypatch, fp16, cached):
    from fake_encoder import DIM, FakeEncoder

    from ratio_utils.retrieval import dense

    pool, queries = _pool_and_queries()
    cache = tmp_path / "cache" if cached else None
    in_memory = FakeEncoder(fp16_storage=fp16, cache_dir=cache).search(queries, pool, k=20)
    itemsize = 2 if fp16 else 4
    assert FakeEncoder(fp16_storage=fp16).pool_bytes(len(pool)) == len(pool) * DIM * itemsize

    indexes = []
    monkeypatch.setattr(dense, "build_inner_product_index",
                        lambda *a, **k: indexes.append(a) or pytest.fail("in-memory index"))
    blocks = FakeEncoder(fp16_storage=fp16, cache_dir=cache, max_pool_bytes=len(pool) * DIM * itemsize - 1,
                         block_rows=37, encode_chunk=41)  # one byte under the pool: the block path
    run = blocks.search(queries, pool, k=20)
    assert indexes == []
    assert run[["qid", "docid", "rank"]].equals(in_memory[["qid", "docid", "rank"]])
    np.testing.assert_allclose(run["score"], in_memory["score"], rtol=1e-5, atol=1e-6)
    assert not (run["qid"] == run["docid"]).any()
    if cached:  # the in-memory search's cached vectors were reused, not encoded again
        assert blocks.encoded_texts == 0 and len(list(cache.rglob(f"*.{'float16' if fp16 else 'float32'}.npy"))) == 2
    else:
        assert blocks.encoded_texts == len(pool) + len(queries)


def test_dense_pool_file_is_written_chunk_by_chunk_into_the_cache(tmp_path):
    from fake_encoder import FakeEncoder

    pool, queries = _pool_and_queries()
    encoder = FakeEncoder(fp16_storage=True, cache_dir=tmp_path, max_pool_bytes=0, encode_chunk=100)
    calls = []
    encode = encoder.encode
    encoder.encode = lambda texts, prefix, desc="encoding": calls.append(len(texts)) or encode(texts, prefix, desc)
    encoder.search(queries, pool, k=5)
    assert calls[:3] == [100, 100, 100] and sum(calls[:-1]) == len(pool)  # the pool in chunks, then the queries
    (stored,) = [np.load(p, mmap_mode="r") for p in tmp_path.rglob("*.float16.npy")
                 if np.load(p, mmap_mode="r").shape[0] == len(pool)]
    assert stored.dtype == np.float16 and any(tmp_path.rglob("prefix.json"))


def test_bm25_over_a_pool_beyond_its_memory_budget_says_what_it_would_need():
    from ratio_utils.retrieval.bm25 import BM25_BYTES_PER_TOKEN, BM25Retriever

    pool, queries = _pool_and_queries()
    retriever = BM25Retriever(1, stopwords=[], stemmer=None)
    needed = retriever.index_bytes(pool["text"])
    assert needed == len(pool) * 8 * BM25_BYTES_PER_TOKEN  # eight distinct-or-not words a sentence, all indexed
    with pytest.raises(MemoryError, match=r"indexing 3\d\d candidates needs about .* GiB .*retrieval.max_pool_bytes"):
        BM25Retriever(1, stopwords=[], stemmer=None, max_pool_bytes=needed - 1).search(queries, pool, k=5)
    within = BM25Retriever(1, stopwords=[], stemmer=None, max_pool_bytes=needed).search(queries, pool, k=5)
    assert within.equals(retriever.search(queries, pool, k=5))
