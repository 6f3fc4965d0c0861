"""The Semantic Scholar Datasets API client (stage 00, the paper's S2ORC source).

`S2DatasetsClient` lists the shards of a dataset in a pinned release
(`GET {api_base_url}/release/{release}/dataset/{name}` -> `{"files": [pre-signed URL, ...]}`),
sending the API key from `S2_API_KEY` in the `x-api-key` header (never logged, never written),
at most about one API request per second; `download_release` fetches the shards of `s2orc` and
`papers` with resume and checksum (ratio_utils.corpora.download) and records them in a manifest.

Run: `S2_API_KEY=... python -m ratio_utils.corpora.s2_api --params params/paper.yaml` (docs/corpus_formats.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path

import requests
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..config import load_config
from ..io import write_json_atomic
from ..param_sections import CorpusParams, S2orcParams
from .download import (
    ChecksumError,
    Checksums,
    DownloadError,
    RateLimiter,
    download_file,
    redact_url,
    retrying_session,
)
from .s2orc import MANIFEST_NAME, default_download_dir, verified_unchanged

API_KEY_ENV = "S2_API_KEY"


class S2DatasetsClient:
    """Minimal client of the Datasets API: release metadata and shard URLs."""

    def __init__(self, base_url: str, api_key: str | None = None, min_interval: float = 1.0,
                 session: requests.Session | None = None, timeout: float = 60.0, max_retries: int = 5,
                 backoff_seconds: float = 2.0):
        self.base_url = base_url.rstrip("/")
        # 429/5xx and failed connections are retried with backoff and jitter (the authors retry 5 times)
        self.session = session or retrying_session(max_retries, backoff_seconds)
        self._headers = {"x-api-key": api_key} if api_key else {}
        self.limiter = RateLimiter(min_interval)
        self.timeout = timeout

    @classmethod
    def from_env(cls, base_url: str, **kwargs) -> "S2DatasetsClient":
        key = os.environ.get(API_KEY_ENV)
        if not key:
            raise RuntimeError(f"set {API_KEY_ENV} to a Semantic Scholar API key to list S2ORC shards")
        return cls(base_url, key, **kwargs)

    def get_json(self, path: str) -> dict:
        self.limiter.wait()
        url = f"{self.base_url}/{path.lstrip('/')}"
        try:
            response = self.session.get(url, headers=self._headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise DownloadError(f"request to {redact_url(url)} failed: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise DownloadError(f"HTTP {response.status_code} from {redact_url(url)}", response.status_code)
        return response.json()

    def dataset_files(self, release: str, dataset: str) -> list[str]:
        """Pre-signed URLs of every shard of `dataset` in `release` (they expire: use them at once)."""
        if release == "latest":
            raise ValueError("pin a release id (e.g. 2026-05-05); 'latest' is not reproducible")
        info = self.get_json(f"release/{release}/dataset/{dataset}")
        files = info.get("files")
        if not isinstance(files, list) or not all(isinstance(u, str) for u in files):
            raise DownloadError(f"release {release} dataset {dataset}: response has no list of file URLs")
        return files


def shard_name(url: str) -> str:
    """The file name of a shard URL (its path's last part; the query holds the signature)."""
    return Path(urllib.parse.urlsplit(url).path).name


class ShardUrls:
    """The pre-signed URLs of one dataset, listed again when they are about to expire or have expired."""

    def __init__(self, client: S2DatasetsClient, release: str, dataset: str, max_age_seconds: float):
        self.client, self.release, self.dataset, self.max_age = client, release, dataset, max_age_seconds
        self.relisted = 0
        self._list()

    def _list(self) -> None:
        self.urls = self.client.dataset_files(self.release, self.dataset)
        self.listed_at = time.monotonic()

    def relist(self) -> None:
        self._list()
        self.relisted += 1

    def url_of(self, name: str) -> str:
        if time.monotonic() - self.listed_at > self.max_age:
            self.relist()
        for url in self.urls:
            if shard_name(url) == name:
                return url
        raise DownloadError(f"release {self.release} dataset {self.dataset}: shard {name} is no longer listed")


# S3's answers to a pre-signed URL past its expiry: 403 (AccessDenied, "Request has expired"), and 400 with
# ExpiredToken / TokenRefreshRequired when the temporary credentials that signed it expired first.
EXPIRED_TOKEN_CODES = ("ExpiredToken", "TokenRefreshRequired")


def url_expired(error: DownloadError) -> bool:
    """Whether an HTTP error means the pre-signed URL expired (list the dataset again and resume)."""
    return error.status == 403 or (error.status == 400 and error.code in EXPIRED_TOKEN_CODES)


def download_shard(urls: ShardUrls, name: str, target: Path, expected: Checksums, session: requests.Session,
                   max_attempts: int = 5):
    """Download one shard, resuming its `.part`: an expired pre-signed URL (`url_expired`: 403, or 400
    ExpiredToken) lists the dataset again and resumes; a broken transfer resumes; other HTTP errors are
    raised (429/5xx were already retried by the session)."""
    for attempt in range(1, max_attempts + 1):
        try:
            return download_file(urls.url_of(name), target, session=session, expected=expected,
                                 label=f"{urls.dataset}/{name}")
        except DownloadError as error:
            expired = url_expired(error)
            if attempt == max_attempts or isinstance(error, ChecksumError) or not (expired or error.status is None):
                raise
            if expired:
                urls.relist()


def download_release(client: S2DatasetsClient, params: S2orcParams, dest: "str | Path", progress: bool = True) -> dict:
    """Download the shards of every dataset in `params.datasets` into `dest/<dataset>/`.

    A shard is recorded in `dest/manifest.json` once verified, with its SHA-256, size and mtime; a rerun
    skips a recorded shard whose size and mtime are unchanged without reading it (`verified_unchanged`),
    and verifies any other file against the recorded SHA-256. Interrupted shards resume, also after
    their URL expired. Returns the manifest: dataset -> shard name -> {size, sha256, mtime_ns}.
    """
    dest = Path(dest)
    manifest_path = dest / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["release"] = params.release
    for dataset in params.datasets:
        urls = ShardUrls(client, params.release, dataset, params.url_max_age_seconds)
        names = [shard_name(u) for u in urls.urls]
        if params.shard_limit is not None:
            names = names[: params.shard_limit]
        entries = manifest.setdefault(dataset, {})
        for name in tqdm(names, desc=f"downloading {dataset}", unit="shard", disable=not progress):
            known = entries.get(name, {})
            target = dest / dataset / name
            if verified_unchanged(target, known):
                continue
            result = download_shard(urls, name, target, Checksums(sha256=known.get("sha256"), size=known.get("size")),
                                    client.session, params.max_retries)
            entries[name] = {"size": result.size, "sha256": result.sha256, "mtime_ns": target.stat().st_mtime_ns}
            write_json_atomic(manifest_path, manifest)  # after every shard: a crash loses at most one
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratio-s2orc", description="Download S2ORC and papers shards of the pinned release.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example (needs S2_API_KEY):\n  ratio-s2orc --params params/paper.yaml")
    parser.add_argument("--params", default=None, help="params file with a corpus.s2orc section")
    args = parser.parse_args(argv)
    try:  # a missing params file, a bad section, no API key, a failed request: one line, exit 2
        cfg = load_config(args.params)
        params = cfg.section("corpus", CorpusParams).s2orc_params()
        client = S2DatasetsClient.from_env(params.api_base_url, max_retries=params.max_retries,
                                           backoff_seconds=params.backoff_seconds)
        dest = default_download_dir(params, cfg)
        manifest = download_release(client, params, dest)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:  # DownloadError is a RuntimeError
        print(f"ratio-s2orc: error: {exc}", file=sys.stderr)
        return 2
    shards = {k: len(v) for k, v in manifest.items() if isinstance(v, dict)}
    print(f"release {params.release}: {shards} shards in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
