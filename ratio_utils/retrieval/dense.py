"""Dense retrieval of stage 08/09 and the evaluate command (paper §5.1, Appendix C).

A sentence-transformers model (loaded from a local folder, see ratio_utils.models) embeds
queries and candidates; candidates are ranked by exact inner product of L2-normalised vectors
(cosine) with a faiss flat index (`IndexFlatIP`; on a GPU when faiss-gpu sees one).

Inputs are prefixed before encoding:
* the generic prefixes `query: ` / `document: ` (GENERIC_PREFIXES), used for every model;
* a model's recommended prefixes where its developers give them (the model registry, ratio_utils.models);
* for instruction-following models, a per-move instruction (Appendix C; prompts/moves.toml, `schema.move_text`)
  put in front of the query by `schema.instructed_query_prefix`.

Embeddings are cached on disk (retrieval.embedding_cache: keyed by the model's content fingerprint, the encoder's
settings, the prefix, the texts and the dtype; verified on every load; `cfg.paths.embedding_cache` in a stage,
`default_embedding_cache()` for the commands: $RATIO_EMBEDDING_CACHE, else <output root>/cache/embeddings when
$RATIO_OUTPUT_ROOT is set, else ~/.cache/ratio/embeddings): a second search over the same pool with the same model and
prefix loads the memory-mapped array instead of encoding again. Within a process, the retrievers built with
`memo=True` (evaluate, the MTEB tasks, search, the explorer) also share one in-memory memo (`EMBEDDING_MEMO`) with the
same key: one encoding per key, whoever asks. Loaded models are shared through `LOADED_MODELS`, keyed by the model's
fingerprint, so a folder rewritten in place is loaded again, never served from the copy loaded before. `fp16_storage`
halves the disk and index memory (the index then holds float16 codes, IndexScalarQuantizer QT_fp16, still an
exhaustive search).

A pool whose vectors would take more than `max_pool_bytes` (retrieval.max_pool_bytes; the paper's
13.8M-sentence train pool is 21 GB in float16 at 768 dimensions) is not held in memory: it is encoded
chunk by chunk into a memory-mapped .npy file (the embedding cache's file when a cache is set) and
searched block by block (ratio_utils.retrieval.blocks), with the same ranking as the in-memory index.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..models import ModelRef, load_sentence_transformer, model_fingerprint, model_name, resolve_model
from ..param_sections import DEFAULT_MAX_POOL_BYTES
from .base import Retriever, run_from_hits
from .blocks import encode_to_memmap, search_blocks
from .embedding_cache import (  # noqa: F401 - default_embedding_cache and texts_checksum: imported from here too
    EMBEDDING_MEMO,
    EmbeddingCache,
    EmbeddingKey,
    EmbeddingMemo,
    default_embedding_cache,
    texts_checksum,
)

logger = logging.getLogger(__name__)

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


class LoadedModels:
    """Models loaded in this process, one copy per (folder or hub id, content fingerprint, device): the retrievers of
    a notebook (one per move and prefix) share it, and a folder rewritten in place (notebook 09 re-trains into the
    same folder) gets a new fingerprint, so it is loaded again instead of being served from the copy loaded before.
    The `size` most recently used are kept. Each entry remembers the model's encoder settings as loaded, so a setting
    changed on it afterwards (`max_seq_length = 16`) changes the embedding-cache key (`encoder_settings`)."""

    def __init__(self, size: int = 2):
        self.size = size
        self._entries: OrderedDict[tuple, tuple[Any, str, dict]] = OrderedDict()

    def get(self, ref: ModelRef, device: str | None) -> tuple[Any, str, dict]:
        """(the loaded model, the fingerprint its files had when loaded, its encoder settings then)."""
        fingerprint = ref.fingerprint
        key = (ref.source, str(ref.path or ref.location), fingerprint, device)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        model = load_sentence_transformer(ref, device=device)
        if ref.fingerprint != fingerprint:
            raise RuntimeError(f"model {ref}: its files changed while it was being loaded; load it again when "
                               "whatever writes them has finished")
        self._entries[key] = (model, fingerprint, _settings_of(model))
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return self._entries[key]

    def cache_clear(self) -> None:
        self._entries.clear()


LOADED_MODELS = LoadedModels()


def _settings_of(model: Any) -> dict:
    """What of a loaded sentence-transformers model changes its embeddings besides its weights: its token limit, dtype,
    output truncation, default prompt and each module's configuration (pooling mode, normalisation, lower-casing)."""
    settings: dict[str, Any] = {}
    for name in ("max_seq_length", "truncate_dim", "default_prompt_name", "prompts"):
        if hasattr(model, name):
            settings[name] = getattr(model, name)
    if hasattr(model, "parameters"):
        first = next(iter(model.parameters()), None)
        settings["dtype"] = str(first.dtype) if first is not None else None
    if hasattr(model, "__iter__") and hasattr(model, "_modules"):
        settings["modules"] = [[type(module).__name__, module.get_config_dict() if hasattr(module, "get_config_dict")
                                else None] for module in model]
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def _library_versions() -> dict[str, str]:
    """The encoding libraries' versions: an upgrade may change vectors, so it is part of the cache key."""
    import importlib.metadata

    versions = {}
    for package in ("sentence-transformers", "transformers"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "absent"
    return versions


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
        self.memo: EmbeddingMemo | None = (EMBEDDING_MEMO if memo is True
                                           else (memo if isinstance(memo, EmbeddingMemo) else None))
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
        self._fingerprint: str | None = None  # a named model's, fixed when first read (the model loaded must match it)
        self._loaded_settings: dict | None = None  # its encoder settings as loaded (LOADED_MODELS)
        self._index_memo: tuple[str, Any] | None = None

    # -- model -------------------------------------------------------------------------------
    @property
    def model(self):
        if self._model is None:
            if self.ref is None:
                self.ref = resolve_model(self._model_ref)
            model, fingerprint, settings = LOADED_MODELS.get(self.ref, self.device)
            if self._fingerprint is not None and fingerprint != self._fingerprint:
                # Embeddings already served under the earlier fingerprint must not be mixed with this model's.
                raise RuntimeError(f"model {self.ref}: its files changed after this retriever first read them; "
                                   "build a new retriever (or call evaluate again) to use the new model")
            self._model, self._fingerprint, self._loaded_settings = model, fingerprint, settings
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

    def encoder_settings(self) -> dict:
        """Everything besides the weights and the prefix that changes this retriever's vectors (part of the cache
        key): the registry's load options, the encoding libraries' versions, normalisation, and the model's settings:
        all of them for a live model; for a named one those changed since it was loaded (none while it is not
        loaded, so a search served from the cache never loads it)."""
        settings: dict[str, Any] = {"normalize": True, "libraries": _library_versions()}
        if self._model_ref is None:
            settings["model"] = _settings_of(self._model)
            return settings
        if self.ref is None:
            self.ref = resolve_model(self._model_ref)
        entry = self.ref.entry
        settings["load"] = {**entry.model_kwargs(), "max_seq_length": entry.max_seq_length} if entry else {}
        if self._model is not None and self._loaded_settings is not None:
            now = _settings_of(self._model)
            settings["changed"] = {name: value for name, value in now.items()
                                   if self._loaded_settings.get(name) != value}
        else:
            settings["changed"] = {}
        return settings

    def embedding_key(self, ids: list[str], texts: list[str], prefix: str) -> EmbeddingKey:
        """The cache key of the embeddings of (ids, texts) with `prefix` by this retriever's model as it is now."""
        return EmbeddingKey(model_fingerprint=self.fingerprint(),
                            encoder=json.dumps(self.encoder_settings(), sort_keys=True, default=str),
                            prefix=prefix, texts=texts_checksum(ids, texts), rows=len(texts), dtype=self.storage_dtype)

    def cached_embeddings(self, ids: list[str], texts: list[str], prefix: str) -> np.ndarray | None:
        """The embeddings the on-disk cache holds for (ids, texts) with `prefix` (verified), never encoding; None when
        it holds none or the retriever has no cache."""
        return self.cache.load(self.embedding_key(ids, texts, prefix)) if self.cache is not None else None

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
        show = self.show_progress and len(texts) > 5 * self.batch_size
        if show:  # sentence-transformers' own bar says only "Batches": say first what is encoded, by which model
            tqdm.write(f"{self.model_label}: {desc}, {len(texts):,} texts in batches of {self.batch_size}")
        vectors = self.model.encode(
            [prefix + t for t in texts],
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=show,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embeddings(self, ids: list[str], texts: list[str], prefix: str, desc: str) -> tuple[np.ndarray, str | None]:
        """Embeddings of texts and their cache key's label (None without a memo or a cache folder).

        Looked up in order: the in-memory memo (when the retriever has one), the on-disk cache (when a cache
        folder is set; verified, and encoded under its lock so that two processes encode it once), else encoded once
        and kept in both."""
        dtype = self.storage_dtype
        if self.cache is None and self.memo is None:
            vectors = self.encode(texts, prefix, desc)
            return (vectors.astype(np.float16) if self.fp16_storage else vectors), None
        key = self.embedding_key(ids, texts, prefix)
        if self.memo is not None:
            found = self.memo.get(key.memo_key)
            if found is not None and found.shape[0] == len(texts):
                return found, key.label
        vectors = self.cache.load(key, warn=False) if self.cache is not None else None
        if vectors is None:
            with self.cache.locked(key) if self.cache is not None else contextlib.nullcontext() as found:
                vectors = found
                if vectors is None:
                    vectors = self.encode(texts, prefix, desc).astype(dtype)
                    if self.memo is not None:
                        self.memo.encoded += len(texts)
                    if self.cache is not None:
                        vectors = self.cache.save(key, vectors, self._model_ref or self.model_label)
        if self.memo is not None:
            self.memo.put(key.memo_key, vectors)
        return vectors, key.label

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
        query_vectors, _ = self.embeddings(list(queries["qid"]), list(queries["text"]), self.query_prefix,
                                           "encoding queries")
        width = min(k + 1, len(pool))  # one spare slot for the query's own sentence
        qids = list(queries["qid"])
        runs = []
        starts = range(0, len(qids), self.query_chunk)
        for start in tqdm(starts, desc=f"{self.name}: search", disable=not self.show_progress or len(starts) < 2):
            block = np.ascontiguousarray(query_vectors[start : start + self.query_chunk], dtype=np.float32)
            scores, hits = index.search(block, width)
            runs.append(run_from_hits(qids[start : start + self.query_chunk], pool["docid"].to_numpy(),
                                      hits, scores, k))
        return pd.concat(runs, ignore_index=True)

    def _search_pool_file(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        """The pool beyond the memory budget: encoded into a memory-mapped file, searched block by block."""
        ids, texts = list(pool["docid"]), list(pool["text"])
        # (a pool beyond the memory budget is never kept in the in-memory memo: it stays a file)
        with contextlib.ExitStack() as stack:
            encode = lambda batch: self.encode(list(batch), self.doc_prefix, "encoding pool")  # noqa: E731
            desc = f"{self.model_label}: encoding pool"
            if self.cache is not None:
                key = self.embedding_key(ids, texts, self.doc_prefix)
                vectors = self.cache.load(key, warn=False)
                if vectors is None:
                    vectors = stack.enter_context(self.cache.locked(key))
                if vectors is None:
                    self.cache.discard(key)  # a refused entry (already reported) is encoded again from nothing
                    encode_to_memmap(encode, texts, self.cache.path(key), self.embedding_dimension(),
                                     self.encode_chunk, self.storage_dtype, desc=desc, texts_key=key.texts, lock=False)
                    vectors = self.cache.seal(key, self._model_ref or self.model_label)
            else:  # no cache to keep it in: a temporary file, removed after the search
                path = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ratio-pool-"))) / "pool.npy"
                vectors = encode_to_memmap(encode, texts, path, self.embedding_dimension(), self.encode_chunk,
                                           self.storage_dtype, desc=desc)
            query_vectors, _ = self.embeddings(list(queries["qid"]), list(queries["text"]), self.query_prefix,
                                               "encoding queries")
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
