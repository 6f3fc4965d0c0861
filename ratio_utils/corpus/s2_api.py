"""The Semantic Scholar Datasets API client (stage 00, the paper's S2ORC source).

`S2DatasetsClient` lists the shards of a dataset in a pinned release
(`GET {api_base_url}/release/{release}/dataset/{name}` -> `{"files": [pre-signed URL, ...]}`),
sending the API key from `S2_API_KEY` in the `x-api-key` header (never logged, never written),
at most about one API request per second; `download_release` fetches the shards of `s2orc` and
`papers` with resume and checksum (ratio_utils.download) and records them in a manifest.

Run: `S2_API_KEY=... python -m ratio_utils.s2orc --params params/paper.yaml` (docs/corpus_formats.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from pathlib import Path

import requests
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..config import load_config
from ..download import Checksums, DownloadError, RateLimiter, download_file, redact_url
from ..io import write_json_atomic
from .base import CorpusParams, S2orcParams
from .s2orc import default_download_dir

API_KEY_ENV = "S2_API_KEY"


class S2DatasetsClient:
    """Minimal client of the Datasets API: release metadata and shard URLs."""

    def __init__(self, base_url: str, api_key: str | None = None, min_interval: float = 1.0,
                 session: requests.Session | None = None, timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.session = session or requests.Session()
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
            raise DownloadError(f"HTTP {response.status_code} from {redact_url(url)}")
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


def download_release(client: S2DatasetsClient, params: S2orcParams, dest: "str | Path", progress: bool = True) -> dict:
    """Download the shards of every dataset in `params.datasets` into `dest/<dataset>/`.

    Already complete shards are skipped (their SHA-256 is in `dest/manifest.json`); interrupted
    ones resume. Returns the manifest: dataset -> shard name -> {size, sha256}.
    """
    dest = Path(dest)
    manifest_path = dest / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["release"] = params.release
    for dataset in params.datasets:
        urls = client.dataset_files(params.release, dataset)
        if params.shard_limit is not None:
            urls = urls[: params.shard_limit]
        entries = manifest.setdefault(dataset, {})
        for url in tqdm(urls, desc=f"downloading {dataset}", unit="shard", disable=not progress):
            name = shard_name(url)
            known = entries.get(name, {})
            result = download_file(url, dest / dataset / name, session=client.session,
                                   expected=Checksums(sha256=known.get("sha256"), size=known.get("size")), label=f"{dataset}/{name}")
            entries[name] = {"size": result.size, "sha256": result.sha256}
            write_json_atomic(manifest_path, manifest)  # after every shard: a crash loses at most one
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Download S2ORC and papers shards of the pinned release.")
    parser.add_argument("--params", default=None, help="params file with a corpus.s2orc section")
    args = parser.parse_args(argv)
    cfg = load_config(args.params)
    params = cfg.section("corpus", CorpusParams).s2orc_params()
    client = S2DatasetsClient.from_env(params.api_base_url)
    dest = default_download_dir(params, cfg)
    manifest = download_release(client, params, dest)
    shards = {k: len(v) for k, v in manifest.items() if isinstance(v, dict)}
    print(f"release {params.release}: {shards} shards in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
