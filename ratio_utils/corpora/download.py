"""Resumable, checksummed HTTP downloads for corpus ingestion (stage 00).

Used to fetch S2ORC shards (ratio_utils.corpora.s2_api) and, when ../shared is absent, the default ACL
corpus from its public GitHub snapshot (ratio_utils.corpora.acl_scisumm). A download goes to `<target>.part`;
an interrupted one resumes with an HTTP Range request; the finished file is verified (size,
SHA-256, git blob SHA-1 or an MD5 ETag, whichever is known) and only then renamed onto `target`,
so a file at `target` is always complete and verified. A checksum mismatch deletes the partial
file and raises `ChecksumError`.

URLs are never printed with their query string: pre-signed S3 URLs carry credentials there.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import requests


class DownloadError(RuntimeError):
    """A download failed (HTTP error, truncated body); `status` is the HTTP status, None for a broken transfer;
    `code` is the error code of an S3-style XML error body (e.g. `ExpiredToken`), None when there is none."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class ChecksumError(DownloadError):
    """A downloaded file does not match its pinned checksum."""


def redact_url(url: str) -> str:
    """The URL without query string or fragment (pre-signed URLs carry signatures there)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def git_blob_sha1(data_or_path: "bytes | str | Path") -> str:
    """The id git gives a file's content: SHA-1 over `blob <size>\\0<content>`."""
    data = data_or_path if isinstance(data_or_path, bytes) else Path(data_or_path).read_bytes()
    digest = hashlib.sha1(b"blob %d\x00" % len(data))
    digest.update(data)
    return digest.hexdigest()


class RateLimiter:
    """At most one call per `min_interval` seconds (the S2 API allows about one request a second)."""

    def __init__(self, min_interval: float = 1.0):
        self.min_interval = min_interval
        self._last = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            delay = self._last + self.min_interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._last = time.monotonic()


RETRY_STATUSES = (429, 500, 502, 503, 504)


def retrying_session(max_retries: int = 5, backoff_seconds: float = 2.0) -> requests.Session:
    """A requests Session that retries GETs on HTTP 429/5xx and failed connections: urllib3's Retry
    with exponential backoff (backoff_seconds x 2^n, from the second retry on), up to backoff_seconds
    of random jitter, and the server's Retry-After when it sends one."""
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(total=max_retries, connect=max_retries, read=max_retries, status=max_retries,
                  status_forcelist=RETRY_STATUSES, allowed_methods=frozenset({"GET"}), backoff_factor=backoff_seconds,
                  backoff_jitter=backoff_seconds, respect_retry_after_header=True, raise_on_status=False)
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


@dataclass(frozen=True)
class Checksums:
    """What a downloaded file must match; any field left None is not checked."""

    sha256: str | None = None
    git_blob: str | None = None
    md5: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class DownloadResult:
    path: Path
    size: int
    sha256: str
    resumed_from: int  # bytes already present from an earlier, interrupted download
    skipped: bool  # the verified file was already there


# A plain MD5 ETag (an S3 object uploaded in one part). A multipart upload's ETag is `<md5 of the parts'
# MD5s>-<parts>`, which cannot be checked without the part size the uploader chose: it does not match
# here, and the SHA-256 computed on arrival (recorded in the manifest) is what later runs verify.
_MD5_ETAG = re.compile(r'^"?([0-9a-f]{32})"?$')


def _file_digests(path: Path) -> dict[str, str]:
    sha256, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            sha256.update(chunk)
            md5.update(chunk)
    return {"sha256": sha256.hexdigest(), "md5": md5.hexdigest(),
            "git_blob": git_blob_sha1(path) if path.stat().st_size < (256 << 20) else ""}


def verify_file(path: Path, expected: Checksums, label: str) -> str:
    """Raise ChecksumError unless `path` matches every known checksum; return its SHA-256."""
    size = path.stat().st_size
    if expected.size is not None and size != expected.size:
        raise ChecksumError(f"{label}: size {size} != expected {expected.size}")
    digests = _file_digests(path)
    for name in ("sha256", "git_blob", "md5"):
        want = getattr(expected, name)
        if want and digests[name] != want.lower():
            raise ChecksumError(f"{label}: {name} {digests[name]} != pinned {want}")
    return digests["sha256"]


def download_file(
    url: str,
    target: "str | Path",
    *,
    expected: Checksums | None = None,
    trust_md5_etag: bool = True,
    session: requests.Session | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    chunk_size: int = 1 << 20,
    label: str | None = None,
) -> DownloadResult:
    """Download `url` to `target`, resuming `<target>.part` and verifying checksums.

    If `target` exists and matches `expected`, nothing is downloaded. With `trust_md5_etag`, a
    server ETag that is a plain MD5 (S3 objects uploaded in one part) is checked as well.
    """
    target = Path(target)
    label = label or target.name
    expected = expected or Checksums()
    if target.exists() and (expected.sha256 or expected.git_blob or expected.md5):
        try:
            sha = verify_file(target, expected, label)
            return DownloadResult(target, target.stat().st_size, sha, 0, True)
        except ChecksumError:
            target.unlink()  # a stale or corrupt copy: fetch it again
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    session = session or requests.Session()
    have = part.stat().st_size if part.exists() else 0
    request_headers = dict(headers or {})
    if have:
        request_headers["Range"] = f"bytes={have}-"
    try:
        response = session.get(url, headers=request_headers, stream=True, timeout=timeout)
    except requests.RequestException as exc:
        raise DownloadError(f"{label}: request to {redact_url(url)} failed: {type(exc).__name__}") from None
    with response:
        if response.status_code == 416 and have:  # the partial file already holds every byte
            resumed_from, total = have, have
        elif response.status_code == 206 and have:
            resumed_from = have
            total = _total_from_content_range(response.headers.get("Content-Range"), have, response)
        elif response.status_code == 200:
            resumed_from = 0  # the server ignored the Range header: start over
            total = int(response.headers["Content-Length"]) if "Content-Length" in response.headers else None
        else:
            code = _error_code(response)
            raise DownloadError(f"{label}: HTTP {response.status_code}{f' {code}' if code else ''} "
                                f"from {redact_url(url)}", response.status_code, code)
        etag = response.headers.get("ETag", "")
        mode = "ab" if resumed_from else "wb"
        if response.status_code != 416:
            try:
                with open(part, mode) as handle:
                    for chunk in response.iter_content(chunk_size):
                        handle.write(chunk)
            except requests.RequestException as exc:
                # Keep what arrived: the next call resumes from it with a Range request.
                raise DownloadError(f"{label}: transfer from {redact_url(url)} broke off ({type(exc).__name__}); "
                                    "rerun to resume") from None
    size = part.stat().st_size
    if total is not None and size != total:
        # Keep the partial file: the next call resumes from here.
        raise DownloadError(f"{label}: got {size} of {total} bytes from {redact_url(url)}; rerun to resume")
    match = _MD5_ETAG.match(etag.strip()) if trust_md5_etag else None
    check = (expected if not match or expected.md5
             else Checksums(expected.sha256, expected.git_blob, match.group(1), expected.size))
    try:
        sha = verify_file(part, check, label)
    except ChecksumError:
        part.unlink()
        raise
    os.replace(part, target)
    return DownloadResult(target, size, sha, resumed_from, False)


_S3_ERROR_CODE = re.compile(rb"<Code>([A-Za-z0-9.]+)</Code>")


def _error_code(response) -> str | None:
    """The `<Code>` of an S3 XML error body (its first 4 KiB; the body never holds the signature)."""
    try:
        head = next(response.iter_content(4096), b"")
    except requests.RequestException:
        return None
    match = _S3_ERROR_CODE.search(head or b"")
    return match.group(1).decode() if match else None


def _total_from_content_range(value: str | None, have: int, response) -> int | None:
    # "bytes 100-999/1000": the total after the slash ("*" when unknown).
    if value and "/" in value and not value.endswith("*"):
        return int(value.rsplit("/", 1)[1])
    if "Content-Length" in response.headers:
        return have + int(response.headers["Content-Length"])
    return None
