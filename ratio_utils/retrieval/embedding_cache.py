"""Embeddings kept between searches: the on-disk cache (verified on every load) and the process-wide memo.

An entry is keyed by everything that changes a vector (`EmbeddingKey`): the model's content fingerprint, the
encoder's settings (its load options and any setting changed since it was loaded: `max_seq_length`, dtype, pooling,
default prompt, truncation; `DenseRetriever.encoder_settings`), the prefix, the ordered (id, text) list and the
storage dtype. On disk an entry is `<root>/<model fp>/<settings+prefix hash>/<texts checksum>.<dtype>.npy` with a
sidecar `<...>.npy.json` holding the whole key, the shape and a CRC-32 of the data bytes: a load whose sidecar is
missing, names another key, or whose bytes no longer match (a flipped byte, permuted rows, a truncated or zero-byte
file) is refused with a warning naming the file, and the caller recomputes. Writers of one entry take its file lock,
so two processes encoding the same pool encode it once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

from ..io import atomic_path, write_json_atomic
from ..publish.run_records import count_reused

logger = logging.getLogger(__name__)

SIDECAR_FORMAT = 2  # entries written before the sidecar existed (format 1) are never trusted
_CRC_BLOCK = 1 << 26  # bytes checksummed at once: a memory-mapped entry is never read whole into memory


def texts_checksum(ids: list[str], texts: list[str]) -> str:
    """Checksum of an ordered list of (id, text): the embedding-cache key of a pool or query set.

    Every field is length-prefixed, so no character inside an id or a text can move a field boundary (a separator
    byte could: "a\\x1fb" + "c" and "a" + "b\\x1fc" would collide)."""
    if len(ids) != len(texts):
        raise ValueError(f"texts_checksum: {len(ids)} ids for {len(texts)} texts")
    digest = hashlib.sha256(len(ids).to_bytes(8, "little"))
    for doc_id, text in zip(ids, texts):
        for field in (doc_id, text):
            data = field.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
    return digest.hexdigest()


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def data_crc32(array: np.ndarray) -> str:
    """CRC-32 of an array's data bytes, block by block. A CRC, not a cryptographic hash: it guards against
    corruption, not tampering, and at ~3 GB/s it keeps a verified warm load within a few percent of an unverified one
    (benchmarks/embedding_cache_checks.py)."""
    flat = np.ascontiguousarray(array).reshape(-1) if not array.flags.c_contiguous else array.reshape(-1)
    step = max(1, _CRC_BLOCK // max(1, flat.itemsize))
    crc = 0
    for start in range(0, flat.shape[0], step):
        crc = zlib.crc32(flat[start:start + step].view(np.uint8), crc)
    return f"{crc:08x}"


@dataclass(frozen=True)
class EmbeddingKey:
    """What one cached array is the embeddings of.

    Args:
        model_fingerprint: the model's content fingerprint (`models.ModelRef.fingerprint`, or a live model's weights).
        encoder: canonical JSON of the encoder's settings (`DenseRetriever.encoder_settings`).
        prefix: the text put before every input.
        texts: `texts_checksum` of the ordered (id, text) list.
        rows: the number of texts.
        dtype: the storage dtype ("float32" or "float16").
    """

    model_fingerprint: str
    encoder: str
    prefix: str
    texts: str
    rows: int
    dtype: str

    @property
    def memo_key(self) -> tuple:
        return (self.model_fingerprint, self.encoder, self.prefix, self.texts, self.dtype)

    @property
    def label(self) -> str:
        """A short identity for records and in-memory index sharing (no folder in it)."""
        return (f"{self.model_fingerprint[:16]}/{_short(json.dumps([self.encoder, self.prefix]))}/"
                f"{self.texts[:24]}.{self.dtype}")


class EmbeddingCache:
    """Embeddings on disk (module docstring), loaded memory-mapped and verified.

    Each load and save is counted for the run's records (ratio_utils.publish.run_records): texts whose embeddings
    were read from an array an earlier notebook or run wrote, out of all texts embedded or read."""

    REUSE_RECORD = "texts' embeddings computed before (cache/embeddings)"
    _saved_here: set[Path] = set()  # arrays this process wrote: reading them again is not reuse of earlier work
    _verified: dict[Path, tuple] = {}  # path -> (size, mtime_ns, crc) checked in this process: not hashed again

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, key: EmbeddingKey) -> Path:
        folder = _short(json.dumps([key.encoder, key.prefix]))
        return self.root / key.model_fingerprint[:16] / folder / f"{key.texts[:24]}.{key.dtype}.npy"

    @staticmethod
    def sidecar(path: Path) -> Path:
        return path.with_name(path.name + ".json")

    def _record(self, key: EmbeddingKey, array: np.ndarray) -> dict:
        return {"format": SIDECAR_FORMAT, **asdict(key), "shape": list(array.shape), "crc32": data_crc32(array)}

    def _problem(self, path: Path, key: EmbeddingKey) -> tuple[str | None, np.ndarray | None]:
        """(why the entry at `path` cannot be served for `key`, or None; the verified array)."""
        sidecar = self.sidecar(path)
        try:
            record = json.loads(sidecar.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return "no sidecar with its key and checksum (written by an older version, or being written)", None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"unreadable sidecar {sidecar.name} ({exc})", None
        if not isinstance(record, dict) or record.get("format") != SIDECAR_FORMAT:
            return f"sidecar {sidecar.name} has another format", None
        expected = asdict(key)
        differs = [name for name, value in expected.items() if record.get(name) != value]
        if differs:
            return f"its sidecar names another {', '.join(differs)}", None
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:  # truncated, zero bytes, random bytes, not an .npy
            return f"not a readable .npy file ({type(exc).__name__}: {exc})", None
        if array.ndim != 2 or array.shape[0] != key.rows or list(array.shape) != record.get("shape"):
            return (f"shape {tuple(array.shape)} where its sidecar says {record.get('shape')} for {key.rows} texts",
                    None)
        if array.dtype.name != key.dtype:
            return f"dtype {array.dtype.name}, not {key.dtype}", None
        stat = path.stat()
        stamp = (stat.st_size, stat.st_mtime_ns, record.get("crc32"))
        if self._verified.get(path) != stamp:
            if data_crc32(array) != record.get("crc32"):
                return "its data do not match the checksum in its sidecar (corrupted or rewritten)", None
            self._verified[path] = stamp
        return None, array

    def load(self, key: EmbeddingKey, *, warn: bool = True) -> np.ndarray | None:
        """The verified array of `key`, memory-mapped, or None (absent, or refused: with `warn`, a warning names the
        file and why it was discarded)."""
        path = self.path(key)
        if not path.exists():
            return None
        problem, array = self._problem(path, key)
        if problem is not None:
            if warn:
                logger.warning("embedding cache: discarded %s: %s; recomputing it", path, problem)
            return None
        if path not in self._saved_here:
            count_reused(self.REUSE_RECORD, key.rows, key.rows)
        return array

    @contextlib.contextmanager
    def locked(self, key: EmbeddingKey) -> Iterator[np.ndarray | None]:
        """Hold the entry's lock (another process encoding it finishes first) and yield what it holds then
        (verified, else None: the caller computes it and `save`s or `seal`s it before leaving)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.warning("embedding cache: %s is being computed by another process; waiting for it", path)
            lock.acquire()
        try:
            yield self.load(key)
        finally:
            lock.release()

    def discard(self, key: EmbeddingKey) -> None:
        """Remove the entry (called under its lock, before it is computed again)."""
        path = self.path(key)
        for stale in (path, self.sidecar(path)):
            stale.unlink(missing_ok=True)
        self._verified.pop(path, None)

    def save(self, key: EmbeddingKey, array: np.ndarray, model: str) -> np.ndarray:
        """Write `array` as the entry of `key` (under its lock): the data first, then the sidecar that makes it
        servable; returns it memory-mapped."""
        path = self.path(key)
        self.sidecar(path).unlink(missing_ok=True)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, array)
        return self.seal(key, model)

    def seal(self, key: EmbeddingKey, model: str) -> np.ndarray:
        """Make servable the array written at the entry's path (by `save`, or encoded into it in place): its sidecar,
        its prefix kept readable beside it (the folder name holds only a hash), its rows counted as computed."""
        path = self.path(key)
        array = np.load(path, mmap_mode="r")
        record = self._record(key, array)
        write_json_atomic(self.sidecar(path), record)
        stat = path.stat()
        self._verified[path] = (stat.st_size, stat.st_mtime_ns, record["crc32"])
        write_json_atomic(path.parent / "prefix.json",
                          {"prefix": key.prefix, "model": model, "encoder": json.loads(key.encoder)})
        self._saved_here.add(path)
        count_reused(self.REUSE_RECORD, 0, key.rows)
        return array


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
    """Embeddings already computed (or loaded) in this process, keyed by `EmbeddingKey.memo_key`; least recently used
    entries go beyond `max_bytes` (memory-mapped arrays cost nothing and are kept).

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
