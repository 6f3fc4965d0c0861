"""Exact dense search over pools that do not fit in memory (docs/scale.md, "Dense retrieval beyond memory").

The paper's train pool has 13.8M sentences: 13.8M x 384 float32 is 21 GB (10.6 GB in float16). Instead of
one in-memory faiss index, the pool's embeddings are written once to a float16 `.npy` file
(`encode_to_memmap`, chunk by chunk, the layout of the embedding cache) and searched block by block
(`search_blocks`): each block is copied to float32, searched exhaustively for every query, and merged into
running top-k heaps (faiss's `knn_ground_truth`). The result is the exact top-k of the flat index, at the
cost of reading the file once per query batch; memory is one block plus the queries and heaps.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from .embedding_cache import data_crc32

logger = logging.getLogger(__name__)


def _npy_header(path: Path) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, data offset) of an .npy file, read from its header alone."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(handle)
        return shape, dtype, handle.tell()


def _resumable_rows(partial: Path, progress: Path, what: dict) -> int:
    """Rows of an interrupted encoding that can be kept: the partial file must have the expected header and size, and
    only the leading chunks whose CRC-32 matches its progress record count (a truncated, extended or rewritten file
    is never trusted beyond what it proves)."""
    if not (partial.exists() and progress.exists()):
        return 0
    try:
        state = json.loads(progress.read_text(encoding="utf-8"))
        shape, dtype, offset = _npy_header(partial)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        logger.warning("%s: discarded an unreadable partial encoding (%s); starting again", partial, exc)
        return 0
    if not isinstance(state, dict) or {key: state.get(key) for key in what} != what:
        return 0  # another text list, chunk or dtype: start again
    expected = offset + what["rows"] * what["dim"] * np.dtype(what["dtype"]).itemsize
    if shape != (what["rows"], what["dim"]) or dtype.name != what["dtype"] or partial.stat().st_size != expected:
        logger.warning("%s: discarded a partial encoding whose file is %d bytes with header %s %s (expected %d "
                       "bytes, %s); starting again", partial, partial.stat().st_size, shape, dtype.name, expected,
                       (what["rows"], what["dim"]))
        return 0
    rows = np.load(partial, mmap_mode="r")
    done = 0
    for crc in state.get("chunks") or []:
        if data_crc32(rows[done:done + what["chunk"]]) != crc:
            logger.warning("%s: rows from %d on do not match their progress record; encoding them again",
                           partial, done)
            break
        done = min(done + what["chunk"], what["rows"])
    return done


def encode_to_memmap(encode: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str], path: "str | Path", dim: int,
                     chunk: int = 65536, dtype: "str | np.dtype" = np.float16, desc: str = "encoding pool",
                     texts_key: str | None = None, lock: bool = True) -> np.ndarray:
    """Encode `texts` chunk by chunk into a float16 (or `dtype`) .npy file, memory-mapped: never the whole
    array in RAM.

    Resumable when `texts_key` identifies the texts (the embedding cache's `texts_checksum`): rows go into
    `<path>.partial` and, after each chunk, the CRC-32 of every chunk written into `<path>.partial.json`; a call
    interrupted (a preempted job, Ctrl-C) and made again with the same key, chunk and dtype checks the partial file's
    header, size and chunk checksums and encodes only the chunks not proven written. Chunk boundaries do not move, so
    the file is the one an uninterrupted call writes. `path` appears only once every row is written.

    `lock`: hold `<path>.lock` while encoding, so a second process waits, then takes the finished file as its result
    (False when the caller holds that lock already: the embedding cache, which verifies the file itself)."""
    from ..io import write_json_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if lock:
            stack.enter_context(FileLock(str(path) + ".lock"))
            finished = _finished(path, len(texts), dim, np.dtype(dtype))
            if finished is not None:
                return finished
        partial, progress = path.with_name(path.name + ".partial"), path.with_name(path.name + ".partial.json")
        dtype = np.dtype(dtype)
        what = {"rows": len(texts), "dim": dim, "dtype": dtype.name, "chunk": chunk, "texts": texts_key}
        done = _resumable_rows(partial, progress, what) if texts_key is not None else 0
        if done:
            out = np.lib.format.open_memmap(partial, mode="r+")
            chunks = json.loads(progress.read_text(encoding="utf-8"))["chunks"][: -(-done // chunk)]
        else:
            out = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(len(texts), dim))
            chunks = []
        starts = range(done, len(texts), chunk)
        for start in tqdm(starts, desc=f"{desc} ({len(texts):,} texts)", unit="chunk", disable=len(starts) < 2):
            out[start:start + chunk] = encode(texts[start:start + chunk])
            out.flush()
            chunks.append(data_crc32(out[start:start + chunk]))
            write_json_atomic(progress, {**what, "done": min(start + chunk, len(texts)), "chunks": chunks})
        del out
        partial.replace(path)  # a rename: `path` is whole or absent
        progress.unlink(missing_ok=True)  # absent when there was nothing to encode
    return np.load(path, mmap_mode="r")


def _finished(path: Path, rows: int, dim: int, dtype: np.dtype) -> np.ndarray | None:
    """The file another process finished while this one waited for its lock (None if absent or of another shape)."""
    if not path.exists():
        return None
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError):
        return None
    return array if array.shape == (rows, dim) and array.dtype == dtype else None


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
    return knn_ground_truth(queries, iter_blocks(pool_vectors, block_rows), k, metric_type=METRIC_INNER_PRODUCT,
                            ngpu=ngpu)
