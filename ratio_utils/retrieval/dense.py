"""Dense retrieval of stage 08/09 and the evaluate command (paper §5.1, Appendix C).

A sentence-transformers model (loaded from a local folder, see ratio_utils.models) embeds
queries and candidates; candidates are ranked by exact inner product of L2-normalised vectors
(cosine) with a faiss flat index (`IndexFlatIP`; on a GPU when faiss-gpu sees one).

Inputs are prefixed before encoding:
* the generic prefixes `query: ` / `document: ` (GENERIC_PREFIXES), used for every model;
* a model's recommended prefixes where its developers give them (the model registry, ratio_utils.models);
* for instruction-following models, a per-move instruction (schema.MOVE_INSTRUCTIONS, Appendix C) put
  in front of the query by `schema.instructed_query_prefix`.

Embeddings are cached on disk under `<cache_dir>/<model fingerprint>/<prefix hash>/<texts checksum>.npy`
(`cfg.paths.embedding_cache` in a stage; `default_embedding_cache()` for the commands: $RATIO_EMBEDDING_CACHE, else
<output root>/cache/embeddings when $RATIO_OUTPUT_ROOT is set, else ~/.cache/ratio/embeddings): a second search over
the same pool with the same model and prefix loads the memory-mapped array instead of encoding again. Within a process,
the retrievers built with `memo=True` (evaluate, the MTEB tasks, search, the explorer) also share one in-memory memo
(`EMBEDDING_MEMO`) keyed by (model fingerprint, prefix, texts checksum, dtype): one encoding per key, whoever asks. `fp16_storage` halves the disk and index memory
(the index then holds float16 codes, IndexScalarQuantizer QT_fp16, still an exhaustive search).

A pool whose vectors would take more than `max_pool_bytes` (retrieval.max_pool_bytes; the paper's
13.8M-sentence train pool is 21 GB in float16 at 768 dimensions) is not held in memory: it is encoded
chunk by chunk into a memory-mapped .npy file (the embedding cache's file when a cache is set) and
searched block by block (ratio_utils.retrieval.blocks), with the same ranking as the in-memory index.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..io import atomic_path, write_json_atomic
from ..models import ModelRef, load_sentence_transformer, model_fingerprint, model_name, resolve_model
from ..param_sections import DEFAULT_MAX_POOL_BYTES
from ..publish.run_records import count_reused
from .base import Retriever, run_from_hits
from .blocks import encode_to_memmap, search_blocks

def texts_checksum(ids: list[str], texts: list[str]) -> str:
    """Checksum of an ordered list of (id, text): the embedding-cache key of a pool or query set."""
    digest = hashlib.sha256()
    for doc_id, text in zip(ids, texts):
        digest.update(doc_id.encode())
        digest.update(b"\x1f")
        digest.update(text.encode())
        digest.update(b"\x1e")
    return digest.hexdigest()


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class EmbeddingCache:
    """Embeddings on disk: <root>/<model fp>/<prefix hash>/<checksum>.<dtype>.npy, loaded memory-mapped.

    Each load and save is counted for the run's records (ratio_utils.publish.run_records): texts whose embeddings
    were read from an array an earlier notebook or run wrote, out of all texts embedded or read."""

    REUSE_RECORD = "texts' embeddings computed before (cache/embeddings)"
    _saved_here: set[Path] = set()  # arrays this process wrote: reading them again is not reuse of earlier work

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, model_fp: str, prefix: str, checksum: str, dtype: str) -> Path:
        return self.root / model_fp[:16] / _short(prefix) / f"{checksum[:24]}.{dtype}.npy"

    def load(self, path: Path, n_rows: int) -> np.ndarray | None:
        if not path.exists():
            return None
        array = np.load(path, mmap_mode="r")
        if array.shape[0] != n_rows:  # a different text set hashed alike: never trust it
            return None
        if path not in self._saved_here:
            count_reused(self.REUSE_RECORD, n_rows, n_rows)
        return array

    def save(self, path: Path, array: np.ndarray, prefix: str, model: str) -> np.ndarray:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, array)
        self.record_written(path, array.shape[0], prefix, model)
        return np.load(path, mmap_mode="r")

    def record_written(self, path: Path, n_rows: int, prefix: str, model: str) -> None:
        """An array this process wrote at `path` (by `save`, or encoded into it in place): its prefix kept
        readable beside it (the folder name holds only its hash), and its rows counted as computed, not reused."""
        write_json_atomic(path.parent / "prefix.json", {"prefix": prefix, "model": model})
        self._saved_here.add(path)
        count_reused(self.REUSE_RECORD, 0, n_rows)


EMBEDDING_CACHE_ENV = "RATIO_EMBEDDING_CACHE"
_CACHE_OFF = {"", "0", "off", "none", "false", "no"}


def default_embedding_cache() -> Path | None:
    """The on-disk embedding cache of the commands (evaluate, MTEB, search, explorer) when none is named:
    $RATIO_EMBEDDING_CACHE (`off` disables it), else <$RATIO_OUTPUT_ROOT>/cache/embeddings in a run, else
    $XDG_CACHE_HOME/ratio/embeddings (~/.cache/ratio/embeddings)."""
    named = os.environ.get(EMBEDDING_CACHE_ENV)
    if named is not None:
        return None if named.strip().lower() in _CACHE_OFF else Path(os.path.expanduser(named))
    root = os.environ.get("RATIO_OUTPUT_ROOT")
    if root:
        return Path(root) / "cache" / "embeddings"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ratio" / "embeddings"


class EmbeddingMemo:
    """Embeddings already computed (or loaded) in this process, keyed by (model fingerprint, prefix, texts checksum,
    dtype); least recently used entries go beyond `max_bytes` (memory-mapped arrays cost nothing and are kept).

    `encoded` counts the texts sent through a model by retrievers that use the memo (cache misses)."""

    def __init__(self, max_bytes: int = 2 << 30):
        self.max_bytes = max_bytes
        self._entries: dict[tuple, np.ndarray] = {}
        self.encoded = 0
        self.hits = 0

    @staticmethod
    def _bytes(array: np.ndarray) -> int:
        return 0 if isinstance(array, np.memmap) else int(array.nbytes)

    def get(self, key: tuple) -> np.ndarray | None:
        array = self._entries.pop(key, None)
        if array is not None:
            self._entries[key] = array  # most recently used last
            self.hits += 1
        return array

    def put(self, key: tuple, array: np.ndarray) -> None:
        self._entries.pop(key, None)
        self._entries[key] = array
        while sum(self._bytes(a) for a in self._entries.values()) > self.max_bytes and len(self._entries) > 1:
            self._entries.pop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self.encoded = self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)


EMBEDDING_MEMO = EmbeddingMemo()


def clear_embedding_memo() -> None:
    """Forget every embedding of the process-wide memo (tests; a notebook that wants to measure encoding)."""
    EMBEDDING_MEMO.clear()
    _SHARED_INDEXES.clear()


def _faiss():
    import faiss

    return faiss


def faiss_gpu_count() -> int:
    """GPUs faiss can use (0 with faiss-cpu)."""
    faiss = _faiss()
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def build_inner_product_index(vectors: np.ndarray, fp16: bool = False, chunk: int = 65536, use_gpu: bool = True):
    """An exhaustive inner-product index over L2-normalised vectors, filled chunk by chunk.

    Chunks keep the float32 copy of a float16 (or memory-mapped) array small while adding.
    """
    faiss = _faiss()
    dim = vectors.shape[1]
    if use_gpu and faiss_gpu_count() > 0:
        # faiss-gpu: a flat index on every visible GPU; float16 storage there is a cloner option.
        options = faiss.GpuMultipleClonerOptions()
        options.useFloat16 = fp16
        index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(dim), co=options)
    elif fp16:
        index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexFlatIP(dim)
    for start in range(0, vectors.shape[0], chunk):
        index.add(np.ascontiguousarray(vectors[start : start + chunk], dtype=np.float32))
    return index


@functools.lru_cache(maxsize=2)
def _shared_model(ref: ModelRef, device: str | None):
    """One loaded copy per resolved model: the retrievers of a notebook (one per move and prefix) share it.

    Only models given by name, folder or reference are shared; a live model passed in (e.g. by the trainer) is used
    as is.
    """
    return load_sentence_transformer(ref, device=device)


_SHARED_INDEXES: dict[str, Any] = {}  # the latest pool index of a memo-sharing retriever, by embedding key

_WIDEST_EMBEDDING = 8192  # wider than every embedding model of the paper (Stella 1.5B: 1,536; Qwen3 8B: 4,096)


class DenseRetriever(Retriever):
    """Bi-encoder retrieval with a sentence-transformers model (see module docstring)."""

    def __init__(
        self,
        model: Any,
        query_prefix: str = "",
        doc_prefix: str = "",
        *,
        batch_size: int = 64,
        cache_dir: Path | None = None,
        fp16_storage: bool = False,
        name: str | None = None,
        device: str | None = None,
        query_chunk: int = 2048,
        max_pool_bytes: int = DEFAULT_MAX_POOL_BYTES,
        block_rows: int = 1 << 18,
        encode_chunk: int = 65536,
        memo: "EmbeddingMemo | bool | None" = None,
    ):
        self.query_prefix = query_prefix
        self.doc_prefix = doc_prefix
        self.batch_size = batch_size
        self.cache = EmbeddingCache(cache_dir) if cache_dir is not None else None
        # memo=True: the process-wide EMBEDDING_MEMO; an EmbeddingMemo: that one; None/False: none (training loops)
        self.memo: EmbeddingMemo | None = EMBEDDING_MEMO if memo is True else (memo if isinstance(memo, EmbeddingMemo) else None)
        self.fp16_storage = fp16_storage
        self.device = device
        self.query_chunk = query_chunk
        self.max_pool_bytes = max_pool_bytes
        self.block_rows = block_rows  # rows of the pool file searched at once (a float32 copy of them in RAM)
        self.encode_chunk = encode_chunk  # texts encoded and written to the pool file at once
        self.ref: ModelRef | None = None
        if isinstance(model, ModelRef) and model.source == "object":
            self.ref, model = model, model.model
        if isinstance(model, ModelRef):  # resolved once by the caller: never resolved again here
            self.ref = model
            # what the run records: the name or hub id a user can pass again, the folder only for a folder
            self._model_ref: str | None = {"packaged": model.name, "hub": model.location}.get(model.source, str(model))
            self._model = None
            label = model.path.name if model.source == "folder" and model.path is not None else model.name
        elif isinstance(model, (str, os.PathLike)):
            self._model_ref = str(model)
            self._model = None
            label = Path(str(model)).resolve().name if Path(str(model)).exists() else model_name(model)
        else:
            self._model_ref = None
            self._model = model
            label = self.ref.name if self.ref is not None else type(model).__name__
        self.model_label = label
        self.name = name or label
        self.encoded_texts = 0  # texts actually sent through the model (cache misses)
        self._fingerprint: str | None = None
        self._index_memo: tuple[str, Any] | None = None

    # -- model -------------------------------------------------------------------------------
    @property
    def model(self):
        if self._model is None:
            if self.ref is None:
                self.ref = resolve_model(self._model_ref)
            self._model = _shared_model(self.ref, self.device)
        return self._model

    def fingerprint(self) -> str:
        # A live model may be trained between searches: fingerprint it every time.
        if self._model_ref is None:
            return model_fingerprint(self._model)
        if self._fingerprint is None:
            if self.ref is None:
                self.ref = resolve_model(self._model_ref)
            self._fingerprint = self.ref.fingerprint
        return self._fingerprint

    def describe(self) -> dict:
        return {
            **super().describe(),
            "model": self._model_ref or self.model_label,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "fp16_storage": self.fp16_storage,
        }

    def embedding_dimension(self) -> int:
        return int(self.model.get_sentence_embedding_dimension())

    @property
    def storage_dtype(self) -> str:
        return "float16" if self.fp16_storage else "float32"

    def pool_bytes(self, n_docs: int) -> int:
        """Bytes of a pool's vectors as stored (what the in-memory index would hold)."""
        return n_docs * self.embedding_dimension() * np.dtype(self.storage_dtype).itemsize

    def _beyond_budget(self, n_docs: int) -> bool:
        # Asking the dimension loads the model, which a search served from the embedding cache never needs:
        # a pool within budget at the widest dimension any model here has is within budget without asking.
        if n_docs * _WIDEST_EMBEDDING * np.dtype(self.storage_dtype).itemsize <= self.max_pool_bytes:
            return False
        return self.pool_bytes(n_docs) > self.max_pool_bytes

    # -- encoding ----------------------------------------------------------------------------
    def encode(self, texts: list[str], prefix: str, desc: str = "encoding") -> np.ndarray:
        """L2-normalised float32 embeddings of prefix + text (always through the model: see `embeddings`)."""
        self.encoded_texts += len(texts)
        vectors = self.model.encode(
            [prefix + t for t in texts],
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=self.show_progress and len(texts) > 5 * self.batch_size,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embeddings(self, ids: list[str], texts: list[str], prefix: str, desc: str) -> tuple[np.ndarray, str | None]:
        """Embeddings of texts and their cache key (None without a memo or a cache folder).

        Looked up in order: the in-memory memo (when the retriever has one), the on-disk cache (when a cache
        folder is set), else encoded once and kept in both."""
        dtype = self.storage_dtype
        if self.cache is None and self.memo is None:
            vectors = self.encode(texts, prefix, desc)
            return (vectors.astype(np.float16) if self.fp16_storage else vectors), None
        fp = self.fingerprint()
        checksum = texts_checksum(ids, texts)
        memo_key = (fp, prefix, checksum, dtype)
        path = self.cache.path(fp, prefix, checksum, dtype) if self.cache is not None else None
        key = str(path) if path is not None else f"memo:{fp[:16]}/{_short(prefix)}/{checksum[:24]}.{dtype}"
        if self.memo is not None:
            found = self.memo.get(memo_key)
            if found is not None and found.shape[0] == len(texts):
                return found, key
        vectors = self.cache.load(path, len(texts)) if path is not None else None
        if vectors is None:
            vectors = self.encode(texts, prefix, desc).astype(dtype)
            if self.memo is not None:
                self.memo.encoded += len(texts)
            if path is not None:
                vectors = self.cache.save(path, vectors, prefix, self._model_ref or self.model_label)
        if self.memo is not None:
            self.memo.put(memo_key, vectors)
        return vectors, key

    # -- search ------------------------------------------------------------------------------
    def _pool_index(self, pool: pd.DataFrame):
        ids, texts = list(pool["docid"]), list(pool["text"])
        vectors, key = self.embeddings(ids, texts, self.doc_prefix, "encoding pool")
        if key is not None and self._index_memo is not None and self._index_memo[0] == key:
            return self._index_memo[1]
        if key is not None and self.memo is not None:  # another retriever of the process may have built it
            shared = _SHARED_INDEXES.get(key)
            if shared is not None:
                self._index_memo = (key, shared)
                return shared
        index = build_inner_product_index(vectors, fp16=self.fp16_storage)
        if key is not None:  # reuse across moves that share the pool
            self._index_memo = (key, index)
            if self.memo is not None:
                _SHARED_INDEXES.clear()  # one pool index kept process-wide: the latest
                _SHARED_INDEXES[key] = index
        return index

    def _search(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        if self._beyond_budget(len(pool)):
            return self._search_pool_file(queries, pool, k)
        index = self._pool_index(pool)
        query_vectors, _ = self.embeddings(list(queries["qid"]), list(queries["text"]), self.query_prefix, "encoding queries")
        width = min(k + 1, len(pool))  # one spare slot for the query's own sentence
        qids = list(queries["qid"])
        runs = []
        starts = range(0, len(qids), self.query_chunk)
        for start in tqdm(starts, desc=f"{self.name}: search", disable=not self.show_progress or len(starts) < 2):
            block = np.ascontiguousarray(query_vectors[start : start + self.query_chunk], dtype=np.float32)
            scores, hits = index.search(block, width)
            runs.append(run_from_hits(qids[start : start + self.query_chunk], pool["docid"].to_numpy(), hits, scores, k))
        return pd.concat(runs, ignore_index=True)

    def _search_pool_file(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        """The pool beyond the memory budget: encoded into a memory-mapped file, searched block by block."""
        ids, texts = list(pool["docid"]), list(pool["text"])
        # (a pool beyond the memory budget is never kept in the in-memory memo: it stays a file)
        with contextlib.ExitStack() as stack:
            checksum = texts_checksum(ids, texts)
            if self.cache is not None:
                path = self.cache.path(self.fingerprint(), self.doc_prefix, checksum, self.storage_dtype)
                vectors = self.cache.load(path, len(texts))
            else:  # no cache to keep it in: a temporary file, removed after the search
                path = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ratio-pool-"))) / "pool.npy"
                vectors = None
            if vectors is None:
                vectors = encode_to_memmap(lambda batch: self.encode(list(batch), self.doc_prefix, "encoding pool"),
                                           texts, path, self.embedding_dimension(), self.encode_chunk, self.storage_dtype,
                                           texts_key=checksum)
                if self.cache is not None:
                    self.cache.record_written(path, len(texts), self.doc_prefix, self._model_ref or self.model_label)
            query_vectors, _ = self.embeddings(list(queries["qid"]), list(queries["text"]), self.query_prefix, "encoding queries")
            width = min(k + 1, len(pool))  # one spare slot for the query's own sentence
            qids = list(queries["qid"])
            docids = pool["docid"].to_numpy()
            runs = []
            # Every block of the file is read once per query chunk: a large chunk (only its heaps grow) reads it once.
            step = max(self.query_chunk, 1 << 16)
            for start in range(0, len(qids), step):
                scores, hits = search_blocks(query_vectors[start:start + step], vectors, width, self.block_rows,
                                             ngpu=faiss_gpu_count())
                runs.append(run_from_hits(qids[start:start + step], docids, hits, scores, k))
            del vectors  # the memory map, before its temporary folder goes
        return pd.concat(runs, ignore_index=True)
