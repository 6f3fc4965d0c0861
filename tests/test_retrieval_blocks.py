"""Dense search beyond memory (ratio_utils.retrieval.blocks): a float16 memory-mapped pool written chunk by
chunk and searched block by block gives the exact top-k of one flat faiss index over the whole pool."""

from __future__ import annotations

import faiss
import numpy as np

from ratio_utils.retrieval.blocks import encode_to_memmap, search_blocks


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
