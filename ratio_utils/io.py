"""File helpers shared by every stage: atomic writes, folder swaps, checked JSONL reading (and line indexes, to read a
part of a large file), checksums.

No stage writes an output file in place: each writes to a temporary file beside the target and
renames it, so an interrupted run never leaves a half-written file that a later step would trust.
A folder (a published model) is built beside its target and swapped in by `replace_folder`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class InputError(ValueError):
    """Bad input data; the message names the file and, where known, the line.

    `reason` is a short machine-readable name of the problem (e.g. "malformed_json") that
    quarantine reports count by; `detail` is the human-readable rest.
    """

    def __init__(self, path: "str | Path", message: str, line: int | None = None, reason: str = "bad_input"):
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.detail = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


@contextlib.contextmanager
def atomic_path(target: "str | Path") -> Iterator[Path]:
    """Yield a temporary path next to `target`; rename it onto `target` only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates files readable by the owner only; give outputs the usual umask permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def replace_folder(new: "str | Path", target: "str | Path") -> Path:
    """Put the folder `new` where `target` is (publishing a model), so that one of the two is always there.

    A folder cannot be renamed onto a non-empty one, and deleting `target` first would leave no model if the
    rename then failed. So: the old folder is renamed aside (`.<name>.old` beside it), `new` renamed in, and
    only then the old one deleted; if renaming `new` in fails, the old one is renamed back and `new` stays
    where it was. A process killed between the two renames leaves the old folder aside: the next call (or
    the next publish) puts it back first.
    """
    new, target = Path(new), Path(target)
    aside = target.with_name(f".{target.name}.old")
    if aside.exists():  # a swap interrupted between its two renames
        if target.exists():
            shutil.rmtree(aside)
        else:
            os.replace(aside, target)
    had_old = target.exists()
    if had_old:
        os.replace(target, aside)
    try:
        os.replace(new, target)
    except BaseException:
        if had_old:
            os.replace(aside, target)
        raise
    if had_old:
        shutil.rmtree(aside, ignore_errors=True)  # the new folder is in place; a leftover goes at the next call
    return target


def require_columns(frame: Any, columns: "Iterable[str]", source: "str | Path") -> Any:
    """`frame` (pandas or polars) unchanged if it has every column; else InputError naming `source`
    (a file, or what the frame is) with the missing and the present columns."""
    present = list(frame.columns)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(source, f"lacks column(s) {missing}; found {present}", reason="missing_column")
    return frame


def read_json_if_exists(path: "str | Path") -> Any:
    """The JSON document at `path`, or None where no file is (a step not run yet)."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def write_text_atomic(target: "str | Path", text: str) -> Path:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


def write_json_atomic(target: "str | Path", obj: Any) -> Path:
    return write_text_atomic(target, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_parquet_atomic(frame: Any, target: "str | Path") -> Path:
    """Write a polars or pandas DataFrame to parquet atomically."""
    with atomic_path(target) as tmp:
        if hasattr(frame, "write_parquet"):  # polars
            frame.write_parquet(tmp)
        else:  # pandas
            frame.to_parquet(tmp, index=False)
    return Path(target)


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: "str | Path", lines: "tuple[int, int] | None" = None,
               offset: int | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield (line number, raw bytes) of a text(.gz) file; `lines`: only lines first..last (1-based,
    inclusive). With `offset`, where line `first` starts (LineIndex.offsets[first - 1]), reading
    seeks there instead of scanning the lines before it (in a .gz file the seek still decompresses
    what comes before, but splits and parses none of it)."""
    path = Path(path)
    with _open_bytes(path) as handle:
        start = 1
        if offset is not None:
            if lines is None:
                raise ValueError("an offset says where the first line of `lines` starts: give `lines` too")
            handle.seek(offset)
            start = lines[0]
        for lineno, raw in enumerate(handle, start=start):
            if lines is not None and not lines[0] <= lineno <= lines[1]:
                if lineno > lines[1]:
                    break
                continue
            yield lineno, raw


class ParquetStream:
    """A parquet file written frame by frame into a temporary file beside it, renamed into place when the `with`
    block ends without an error (on an error nothing is left), so no process holds the whole table.

    A frame is a pandas DataFrame or a pyarrow Table. `schema` fixes the columns and types; without it the first
    frame fixes them, made uniform so that later frames fit: a column that is all null there is typed as a string
    (what a text column with values is), a categorical as dictionary<int32, string> (a frame's categories, and so
    pandas' index width, depend on its rows).
    """

    def __init__(self, target: "str | Path", schema: Any = None):
        self.target = Path(target)
        self.schema = schema
        self._stack = contextlib.ExitStack()
        self._writer: Any = None

    def __enter__(self) -> "ParquetStream":
        self._tmp = self._stack.enter_context(atomic_path(self.target))
        self._stack.callback(self._close_writer)  # closed before the rename (callbacks run last-in, first-out)
        return self

    def write(self, frame: Any) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._tmp, self.schema or _uniform_schema(table.schema))
        self._writer.write_table(table.cast(self._writer.schema))

    @property
    def started(self) -> bool:
        """Whether a frame (possibly empty) has been written, so the file will have columns."""
        return self._writer is not None

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def __exit__(self, *exc_info) -> bool | None:
        return self._stack.__exit__(*exc_info)


def _uniform_schema(schema: Any) -> Any:
    import pyarrow as pa

    def uniform(field):
        if pa.types.is_null(field.type):
            return pa.field(field.name, pa.string())
        if pa.types.is_dictionary(field.type):
            return pa.field(field.name, pa.dictionary(pa.int32(), pa.string()))
        return field

    return pa.schema([uniform(f) for f in schema], metadata=schema.metadata)


def write_parquet_chunks_atomic(chunks: Iterable[Any], target: "str | Path") -> Path:
    """Write pandas frames one after another into one parquet file, atomically (a `ParquetStream`)."""
    with ParquetStream(target) as out:
        for chunk in chunks:
            out.write(chunk)
        if not out.started:
            raise ValueError(f"{target}: no chunk to write (give at least an empty frame with the columns)")
    return Path(target)


def iter_jsonl(
    path: "str | Path",
    required: tuple[str, ...] = (),
    on_error: "Callable[[InputError], None] | None" = None,
    lines: "tuple[int, int] | None" = None,
    offset: int | None = None,
) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line of a JSONL(.gz) file.

    A bad line (non-UTF-8 bytes, malformed JSON, not an object, a missing required field) raises
    InputError naming the file and line; with `on_error`, the error is passed to it instead (to be
    quarantined and counted) and reading goes on. `lines`: only lines first..last (1-based,
    inclusive; the others are skipped unparsed), for reading a file in parts; `offset` (from a
    LineIndex) lets the reader seek to the first of them (iter_lines).
    """
    path = Path(path)
    # Read bytes so that a decoding error can be tied to its line instead of a buffer offset.
    for lineno, raw in iter_lines(path, lines, offset):
        if not raw.strip():
            continue
        try:
            yield lineno, _parse_json_line(raw, required, path, lineno)
        except InputError as error:
            if on_error is None:
                raise
            on_error(error)


class _HashingReader(io.RawIOBase):
    """A binary file whose bytes are hashed as they are read (one pass: hash and decompress together)."""

    def __init__(self, handle, digest):
        self._handle, self.digest = handle, digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._handle.readinto(buffer)
        self.digest.update(memoryview(buffer)[:n])
        return n


@dataclass(frozen=True)
class LineIndex:
    """Where every line of a text(.gz) file starts (byte offsets in the decompressed stream) and the
    file's SHA-256: what a part of a large file needs to be read and keyed without reading the file."""

    sha256: str
    offsets: "np.ndarray"  # offsets[i]: where line i + 1 starts

    @property
    def n_lines(self) -> int:
        return len(self.offsets)


LINE_INDEX_SUFFIX = ".lines.npz"


def line_index(path: "str | Path", store: "str | Path | None" = None, sha256: str | None = None) -> LineIndex:
    """The file's LineIndex, built in one pass (hashing and splitting lines together) and kept in `store`
    (default `<file>.lines.npz` beside it); reused while the file's size and modification time are unchanged.
    Where the folder is read-only the index is returned without being kept (the next run builds it again).

    `sha256`: the file's digest where one was already verified (a downloaded shard's, from the download
    manifest); the pass then splits lines without hashing the file again."""
    import numpy as np

    path = Path(path)
    store = Path(store) if store is not None else path.with_name(path.name + LINE_INDEX_SUFFIX)
    stat = path.stat()
    if store.exists():
        with np.load(store) as kept:
            if int(kept["size"]) == stat.st_size and int(kept["mtime_ns"]) == stat.st_mtime_ns:
                return LineIndex(str(kept["sha256"]), kept["offsets"])
    digest = hashlib.sha256()
    offsets, position = [], 0
    with open(path, "rb") as raw:
        source = raw if sha256 else io.BufferedReader(_HashingReader(raw, digest), 1 << 20)
        text = gzip.GzipFile(fileobj=source, mode="rb") if path.suffix == ".gz" else source
        for line in text:
            offsets.append(position)
            position += len(line)
        while not sha256 and source.read(1 << 20):  # bytes after the gzip stream still belong to the file's hash
            pass
    index = LineIndex(sha256 or digest.hexdigest(), np.asarray(offsets, dtype=np.int64))
    try:
        with atomic_path(store) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, offsets=index.offsets, sha256=np.array(index.sha256), size=stat.st_size,
                     mtime_ns=stat.st_mtime_ns)
    except PermissionError:  # an input read in place from a read-only folder: indexed again by the next run
        pass
    return index


def _parse_json_line(raw: bytes, required: tuple[str, ...], path: Path, lineno: int) -> dict:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not valid UTF-8 ({exc.reason} at byte {exc.start})", lineno, "non_utf8") from None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", lineno, "malformed_json") from None
    if not isinstance(obj, dict):
        raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", lineno, "not_an_object")
    missing = [key for key in required if key not in obj]
    if missing:
        raise InputError(path, f"missing required field(s) {missing}", lineno, "missing_field")
    return obj


def sha256_file(path: "str | Path", chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_tree(path: "str | Path", exclude: tuple[str, ...] = ()) -> str:
    """Checksum of a file, or of every file under a directory (relative names and contents).

    `exclude`: top-level entries of the directory left out (a tree without them hashes as before)."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for child in sorted(p for p in path.rglob("*") if p.is_file() and p.relative_to(path).parts[0] not in exclude):
        digest.update(str(child.relative_to(path)).encode())
        digest.update(sha256_file(child).encode())
    return digest.hexdigest()
