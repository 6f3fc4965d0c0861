"""The on-disk embedding cache never serves a vector its key does not describe (issue 43, items 1-6).

Each defect of the issue is reproduced here as a user meets it: a model folder rewritten in place and evaluated again
in the same process; a setting changed on a loaded model; an entry whose bytes were flipped, whose rows were permuted,
that was truncated, emptied or replaced by random bytes; a partial pool file cut short before its encoding resumed;
two texts lists that a separator character would have merged; two processes writing one pool file with different
chunk sizes. The reference every time is the same encoding with no cache at all.

The fast tests use a hashed bag of words (tests/fake_encoder.py) as the model; the `models` tests use the packaged
all-MiniLM-L6-v2, copied into a folder of the test's own."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fake_encoder import DIM, bag_of_words

from ratio_utils.retrieval import dense
from ratio_utils.retrieval.blocks import encode_to_memmap
from ratio_utils.retrieval.embedding_cache import EmbeddingCache, texts_checksum

REPO = Path(__file__).resolve().parents[1]


class FolderModel:
    """A stand-in for a SentenceTransformer loaded from a folder: its vectors depend on the folder's `weights.json` as
    it was when loaded (as a real model's depend on its weights file), and it counts the texts it encodes."""

    def __init__(self, folder: Path):
        self.salt = json.loads((folder / "weights.json").read_text())["salt"]
        self.max_seq_length = 256
        self.encoded = 0

    def encode(self, texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False,
               **kwargs):
        self.encoded += len(texts)
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)

    def vector(self, text: str) -> np.ndarray:
        words = re.findall(r"[a-z]+", text.lower())[: self.max_seq_length]
        vector = np.zeros(DIM, dtype=np.float32)
        for word in words:
            digest = hashlib.sha1((self.salt + word).encode()).digest()
            vector[digest[0] % DIM] += 1.0 + digest[1] / 255.0
        return vector / (np.linalg.norm(vector) or 1.0)

    def get_sentence_embedding_dimension(self):
        return DIM


def _write_weights(folder: Path, salt: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "weights.json").write_text(json.dumps({"salt": salt}))


@pytest.fixture
def folder_model(tmp_path, monkeypatch):
    """A model folder whose loading gives a FolderModel; every model loaded is kept in `loads`."""
    folder = tmp_path / "model"
    _write_weights(folder, "")
    loads: list[FolderModel] = []

    def load(ref, device=None, **kwargs):
        loads.append(FolderModel(ref.path))
        return loads[-1]

    monkeypatch.setattr(dense, "load_sentence_transformer", load)
    dense.LOADED_MODELS.cache_clear()
    dense.clear_embedding_memo()
    yield folder, loads
    dense.LOADED_MODELS.cache_clear()
    dense.clear_embedding_memo()


def _fresh_process_state() -> None:
    """What a new process starts with: no model loaded, nothing in the memo, no entry verified yet."""
    dense.LOADED_MODELS.cache_clear()
    dense.clear_embedding_memo()
    EmbeddingCache._verified.clear()
    EmbeddingCache._saved_here.clear()


def _scores(result: dict) -> dict:
    return {move: {metric: value for metric, value in row.items() if metric.startswith(("MRR", "R@"))}
            for move, row in result["scores"].items()}


def test_a_model_folder_rewritten_in_place_is_loaded_again_and_never_served_its_old_vectors(
        folder_model, tiny_benchmark, tmp_path):
    from ratio_utils import evaluate

    folder, loads = folder_model
    cache = tmp_path / "cache"
    first = evaluate(folder, tiny_benchmark, split="test", cache_dir=cache, intervals=False)
    _write_weights(folder, "retrained ")  # notebook 09 re-trains into the same folder, then evaluates it again
    second = evaluate(folder, tiny_benchmark, split="test", cache_dir=cache, intervals=False)
    assert len(loads) == 2 and loads[1].salt == "retrained "  # loaded again, not the copy loaded before
    _fresh_process_state()
    reference = evaluate(folder, tiny_benchmark, split="test", cache_dir=False, intervals=False)
    assert _scores(second) == _scores(reference) != _scores(first)
    # a later process is served the new model's vectors from the cache, without encoding
    _fresh_process_state()
    loads.clear()
    served = evaluate(folder, tiny_benchmark, split="test", cache_dir=cache, intervals=False)
    assert _scores(served) == _scores(reference) and loads == []
    assert len(list(cache.rglob("*.npy"))) == 2 * (3 + 1)  # each model: three moves' queries and the pool


def test_a_retriever_refuses_a_folder_changed_after_it_first_read_it(folder_model, tmp_path):
    folder, _ = folder_model
    retriever = dense.DenseRetriever(str(folder), cache_dir=tmp_path / "cache")
    retriever.embeddings(["a"], ["a parser"], "", "encoding")
    _write_weights(folder, "retrained ")
    dense.LOADED_MODELS.cache_clear()
    with pytest.raises(RuntimeError, match="its files changed after this retriever first read them"):
        retriever._model = None
        retriever.model  # noqa: B018 - loading is what is refused


def test_a_setting_changed_on_a_loaded_model_changes_the_key(folder_model, tmp_path):
    folder, loads = folder_model
    texts = ["the parser overfits badly when the training treebank is small"]
    retriever = dense.DenseRetriever(str(folder), cache_dir=tmp_path / "cache")
    full, _ = retriever.embeddings(["q"], texts, "", "encoding")
    before = retriever.embedding_key(["q"], texts, "")
    retriever.model.max_seq_length = 2
    assert retriever.embedding_key(["q"], texts, "") != before
    short, _ = retriever.embeddings(["q"], texts, "", "encoding")
    np.testing.assert_allclose(short[0], loads[0].vector(texts[0]), atol=1e-6)  # two words' worth, encoded anew
    assert not np.allclose(short, full)


def test_the_registry_load_options_are_part_of_the_key(tmp_path):
    import dataclasses

    from ratio_utils.models import resolve_model

    ref = resolve_model("all-MiniLM-L6-v2")
    assert ref.entry is not None
    shorter = dataclasses.replace(ref, entry=dataclasses.replace(ref.entry, max_seq_length=16))
    keys = [dense.DenseRetriever(r, cache_dir=tmp_path).embedding_key(["q"], ["text"], "") for r in (ref, shorter)]
    assert keys[0].model_fingerprint == keys[1].model_fingerprint and keys[0].encoder != keys[1].encoder
    assert EmbeddingCache(tmp_path).path(keys[0]) != EmbeddingCache(tmp_path).path(keys[1])


def _flip_bytes(data: bytes, offset: int) -> bytes:
    body = bytearray(data)
    rng = np.random.default_rng(0)
    for position in rng.choice(np.arange(offset, len(body)), size=max(1, (len(body) - offset) // 1000), replace=False):
        body[position] ^= 0xFF
    return bytes(body)


def _permute_rows(path: Path) -> None:
    array = np.load(path)
    np.save(path, array[::-1].copy())


CORRUPTIONS = {
    "0.1 % of its bytes flipped": lambda p: p.write_bytes(_flip_bytes(p.read_bytes(), 128)),
    "its rows permuted": _permute_rows,
    "random bytes": lambda p: p.write_bytes(np.random.default_rng(1).bytes(p.stat().st_size)),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "zero bytes": lambda p: p.write_bytes(b""),
    "no sidecar": lambda p: EmbeddingCache.sidecar(p).unlink(),
    "a sidecar of another entry": lambda p: EmbeddingCache.sidecar(p).write_text(
        EmbeddingCache.sidecar(p).read_text().replace('"prefix": ""', '"prefix": "query: "')),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_bad_entry_is_named_discarded_and_recomputed(corruption, folder_model, tmp_path, caplog):
    folder, loads = folder_model
    cache = tmp_path / "cache"
    texts = [f"sentence number {word} of the pool" for word in ("one", "two", "three", "four", "five", "six")]
    ids = [f"d{i}" for i in range(len(texts))]
    expected = np.stack([FolderModel(folder).vector(t) for t in texts])
    dense.DenseRetriever(str(folder), cache_dir=cache).embeddings(ids, texts, "", "encoding")
    (entry,) = cache.rglob("*.npy")
    CORRUPTIONS[corruption](entry)
    _fresh_process_state()
    with caplog.at_level(logging.WARNING, logger="ratio_utils.retrieval.embedding_cache"):
        vectors, _ = dense.DenseRetriever(str(folder), cache_dir=cache).embeddings(ids, texts, "", "encoding")
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    assert loads[-1].encoded == len(texts)  # recomputed, not served
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(entry) in warnings[0] and "discarded" in warnings[0]
    # the entry written again is served from now on, without a word
    _fresh_process_state()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again, _ = dense.DenseRetriever(str(folder), cache_dir=cache).embeddings(ids, texts, "", "encoding")
    np.testing.assert_array_equal(again, vectors)
    assert caplog.records == []


def test_texts_checksum_fields_are_length_prefixed():
    # a separator inside an id or a text could move a field boundary; lengths cannot
    assert texts_checksum(["a\x1fb"], ["c"]) != texts_checksum(["a"], ["b\x1fc"])
    assert texts_checksum(["a", "b"], ["c", "d"]) != texts_checksum(["a"], ["c\x1fb\x1fd"])
    assert texts_checksum(["ab"], ["c"]) != texts_checksum(["a"], ["bc"])
    assert texts_checksum(["a"], ["b"]) == texts_checksum(["a"], ["b"])
    with pytest.raises(ValueError, match="2 ids for 1 texts"):
        texts_checksum(["a", "b"], ["c"])


def _rows(texts) -> np.ndarray:
    return np.stack([bag_of_words(t) for t in texts]).astype(np.float16)


def test_a_truncated_partial_pool_file_is_never_resumed_into_zero_rows(tmp_path, caplog):
    texts = [f"pool sentence {i} about parsing word {i % 7}" for i in range(1000)]
    key = texts_checksum(texts, texts)
    path = tmp_path / "pool.float16.npy"

    def interrupted(batch, calls=[]):  # noqa: B006 - counts the chunks across calls
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(batch[0])
        return _rows(batch)

    with pytest.raises(KeyboardInterrupt):
        encode_to_memmap(interrupted, texts, path, dim=DIM, chunk=200, texts_key=key)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(partial.read_bytes()[: partial.stat().st_size // 3])  # a copy or a disk cut it short
    encoded = []
    with caplog.at_level(logging.WARNING, logger="ratio_utils.retrieval.blocks"):
        resumed = encode_to_memmap(lambda b: encoded.append(len(b)) or _rows(b), texts, path, dim=DIM, chunk=200,
                                   texts_key=key)
    assert sum(encoded) == len(texts)  # nothing trusted from the cut file
    assert str(partial) in caplog.text and "discarded" in caplog.text
    np.testing.assert_array_equal(resumed, _rows(texts))
    assert not (np.abs(np.asarray(resumed)).sum(axis=1) == 0).any()


def test_a_partial_pool_file_with_a_rewritten_chunk_resumes_at_that_chunk(tmp_path):
    texts = [f"pool sentence {i} about tagging word {i % 5}" for i in range(1000)]
    key = texts_checksum(texts, texts)
    path = tmp_path / "pool.float16.npy"
    calls: list[str] = []

    def interrupted(batch):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(batch[0])
        return _rows(batch)

    with pytest.raises(KeyboardInterrupt):
        encode_to_memmap(interrupted, texts, path, dim=DIM, chunk=200, texts_key=key)
    partial = np.lib.format.open_memmap(path.with_name(path.name + ".partial"), mode="r+")
    partial[450] = 0  # inside the third chunk
    partial.flush()
    del partial
    starts: list[str] = []
    resumed = encode_to_memmap(lambda b: starts.append(b[0]) or _rows(b), texts, path, dim=DIM, chunk=200,
                               texts_key=key)
    assert starts == [texts[400], texts[600], texts[800]]
    np.testing.assert_array_equal(resumed, _rows(texts))


_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from fake_encoder import DIM, bag_of_words
    from ratio_utils.retrieval.blocks import encode_to_memmap
    from ratio_utils.retrieval.embedding_cache import texts_checksum
    texts = [f"shared pool sentence {{i}} on topic {{i % 11}}" for i in range(600)]
    def encode(batch):
        time.sleep(0.05)  # slow enough that the two writers overlap
        return np.stack([bag_of_words(t) for t in batch]).astype(np.float16)
    out = encode_to_memmap(encode, texts, {path!r}, dim=DIM, chunk=int(sys.argv[1]),
                           texts_key=texts_checksum(texts, texts))
    np.save(sys.argv[2], np.asarray(out))
""")


def test_two_processes_writing_one_pool_file_with_different_chunks_both_get_the_right_rows(tmp_path):
    path = tmp_path / "pool.float16.npy"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER.format(path=str(path)))
    # A script run as a file has its own folder on sys.path, not the tests' helpers nor this checkout's package.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    writers = [subprocess.Popen([sys.executable, str(script), chunk, str(tmp_path / f"out{chunk}.npy")], cwd=REPO,
                                env=env, stderr=subprocess.PIPE, text=True) for chunk in ("50", "70")]
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    texts = [f"shared pool sentence {i} on topic {i % 11}" for i in range(600)]
    for chunk in ("50", "70"):
        np.testing.assert_array_equal(np.load(tmp_path / f"out{chunk}.npy"), _rows(texts))
    assert sorted(p.name for p in tmp_path.iterdir() if ".partial" in p.name) == []


# -- with a real model --------------------------------------------------------------------------------------------

_EVALUATE = textwrap.dedent("""
    import json, sys
    from ratio_utils import evaluate
    cache = False if sys.argv[3] == "off" else sys.argv[3]
    result = evaluate(sys.argv[1], sys.argv[2], split="test", cache_dir=cache, intervals=False)
    print(json.dumps({"scores": result["scores"]}))
""")


def _evaluate_in_a_new_process(folder: Path, benchmark: Path, cache: "Path | str") -> dict:
    done = subprocess.run([sys.executable, "-c", _EVALUATE, str(folder), str(benchmark), str(cache)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return _scores(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture
def minilm_folder(tmp_path) -> Path:
    from ratio_utils.models import resolve_model_path

    folder = tmp_path / "minilm"
    shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), folder)
    return folder


@pytest.mark.models
def test_minilm_retrained_into_its_own_folder_scores_like_an_uncached_new_process(minilm_folder, tiny_benchmark,
                                                                                  tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer

    from ratio_utils import evaluate

    _fresh_process_state()
    cache = tmp_path / "cache"
    before = _scores(evaluate(minilm_folder, tiny_benchmark, split="test", cache_dir=cache, intervals=False))
    model = SentenceTransformer(str(minilm_folder), device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a "re-training" that changes every weight
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * parameter.std().nan_to_num(0.02))
    model.save(str(minilm_folder))
    after = _scores(evaluate(minilm_folder, tiny_benchmark, split="test", cache_dir=cache, intervals=False))
    uncached = _evaluate_in_a_new_process(minilm_folder, tiny_benchmark, "off")
    assert after == uncached != before
    assert _evaluate_in_a_new_process(minilm_folder, tiny_benchmark, cache) == uncached
    _fresh_process_state()


@pytest.mark.models
def test_minilm_max_seq_length_set_after_loading_is_encoded_anew(minilm_folder, tmp_path):
    from sentence_transformers import SentenceTransformer

    _fresh_process_state()
    texts = ["annotating named entities by hand is slow and expensive, so we bootstrap labels from a gazetteer and a "
             "few seed rules, then train a tagger on the labels that agree across three independent sources"]
    retriever = dense.DenseRetriever(str(minilm_folder), cache_dir=tmp_path / "cache")
    full, _ = retriever.embeddings(["q"], texts, "", "encoding")
    retriever.model.max_seq_length = 16
    short, _ = retriever.embeddings(["q"], texts, "", "encoding")
    reference = SentenceTransformer(str(minilm_folder), device="cpu")
    reference.max_seq_length = 16
    expected = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(short, expected, atol=1e-5)
    assert float(np.abs(short - full).max()) > 0.05
    _fresh_process_state()
