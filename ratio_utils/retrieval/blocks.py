"""Exact dense search over pools that do not fit in memory (docs/scale.md, "Dense retrieval beyond memory").

The paper's train pool has 13.8M sentences: 13.8M x 384 float32 is 21 GB (10.6 GB in float16). Instead of
one in-memory faiss index, the pool's embeddings are written once to a float16 `.npy` file
(`encode_to_memmap`, chunk by chunk, the layout of the embedding cache) and searched block by block
(`search_blocks`): each block is copied to float32, searched exhaustively for every query, and merged into
running top-k heaps (faiss's `knn_ground_truth`). The result is the exact top-k of the flat index, at the
cost of reading the file once per query batch; memory is one block plus the queries and heaps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm


def encode_to_memmap(encode: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str], path: "str | Path", dim: int,
                     chunk: int = 65536, dtype: "str | np.dtype" = np.float16, desc: str = "encoding pool",
                     texts_key: str | None = None) -> np.ndarray:
    """Encode `texts` chunk by chunk into a float16 (or `dtype`) .npy file, memory-mapped: never the whole
    array in RAM.

    Resumable when `texts_key` identifies the texts (the embedding cache's `dense.texts_checksum`): rows go into
    `<path>.partial` and, after each chunk, the number of rows written into `<path>.partial.json`; a call
    interrupted (a preempted job, Ctrl-C) and made again with the same key, chunk and dtype encodes only the chunks
    not yet written. Chunk boundaries do not move, so the file is the one an
    uninterrupted call writes. `path` appears only once every row is written."""
    from ..io import write_json_atomic

    path = Path(path)
    partial, progress = path.with_name(path.name + ".partial"), path.with_name(path.name + ".partial.json")
    dtype = np.dtype(dtype)
    what = {"rows": len(texts), "dim": dim, "dtype": dtype.name, "chunk": chunk, "texts": texts_key}
    done = 0
    if texts_key is not None and partial.exists() and progress.exists():
        state = json.loads(progress.read_text(encoding="utf-8"))
        if {key: state.get(key) for key in what} == what:
            done = int(state["done"])
    if done:
        out = np.lib.format.open_memmap(partial, mode="r+")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        out = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(len(texts), dim))
    starts = range(done, len(texts), chunk)
    for start in tqdm(starts, desc=desc, unit="chunk", disable=len(starts) < 2):
        out[start:start + chunk] = encode(texts[start:start + chunk])
        out.flush()
        write_json_atomic(progress, {**what, "done": min(start + chunk, len(texts))})
    del out
    partial.replace(path)  # a rename: `path` is whole or absent
    progress.unlink(missing_ok=True)  # absent when there was nothing to encode
    return np.load(path, mmap_mode="r")


def iter_blocks(vectors: np.ndarray, block_rows: int) -> Iterator[np.ndarray]:
    """Contiguous float32 copies of consecutive row blocks of a (memory-mapped) array."""
    for start in range(0, vectors.shape[0], block_rows):
        yield np.ascontiguousarray(vectors[start:start + block_rows], dtype=np.float32)


def search_blocks(query_vectors: np.ndarray, pool_vectors: np.ndarray, k: int, block_rows: int = 1 << 20,
                  ngpu: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(scores, row indices), each queries x k, of the exact inner-product top-k over `pool_vectors`
    read `block_rows` rows at a time; the same ranking as a flat index over the whole pool."""
    from faiss import METRIC_INNER_PRODUCT
    from faiss.contrib.exhaustive_search import knn_ground_truth

    k = min(k, pool_vectors.shape[0])  # a heap wider than the pool would keep padding ids
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    return knn_ground_truth(queries, iter_blocks(pool_vectors, block_rows), k, metric_type=METRIC_INNER_PRODUCT, ngpu=ngpu)
