"""Config, atomic I/O, checked JSONL reading and the benchmark layout loader."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from ratio_utils.config import REPO_ROOT, load_config
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.io import (
    InputError,
    ParquetStream,
    atomic_path,
    iter_jsonl,
    replace_folder,
    write_parquet_chunks_atomic,
)
from ratio_utils.schema import MOVES, Move, Split, move_text, normalize_marker, sentence_id


def test_config_extends_and_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("RATIO_OUTPUT_ROOT", raising=False)
    base = tmp_path / "base.yaml"
    base.write_text("name: base\noutput_root: out\nmining: {extension_max_words: 5, lowercase: true}\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\nname: child\nmining: {extension_max_words: 2}\n")
    cfg = load_config(child, {"mining.lowercase": False})
    assert cfg.name == "child"
    assert cfg.section("mining") == {"extension_max_words": 2, "lowercase": False}
    # the output root is the file's own, never inherited: outputs/<name>/ without output_root
    assert cfg.paths.root == REPO_ROOT / "outputs" / "child"
    assert load_config(base).paths.root.name == "out"


def test_config_rejects_unknown_section_key_at_load(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("mining: {lowercase: true, typo: 3}\n")
    with pytest.raises(ValueError, match=r"p\.yaml.*'mining'.*\['typo'\]"):
        load_config(path)
    path.write_text("minning: {lowercase: true}\n")
    with pytest.raises(ValueError, match=r"p\.yaml.*unknown params section.*minning"):
        load_config(path)


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_parquet_stream_writes_frames_whose_types_differ_by_rows_into_one_table(tmp_path):
    # A categorical's index width follows its categories and an all-null column has no type: the
    # first frame's schema would reject the later frames without the uniform schema.
    first = pd.DataFrame({"corpus": pd.Categorical(["a"]), "date": [None], "n": [1]})
    later = pd.DataFrame({"corpus": pd.Categorical([f"c{i}" for i in range(300)]), "date": ["2020-01-01"] * 300,
                          "n": range(300)})
    target = tmp_path / "t.parquet"
    with ParquetStream(target) as out:
        out.write(first)
        assert not target.exists()  # in place only once complete
        out.write(later)
    back = pd.read_parquet(target)
    assert list(back["corpus"].astype(str)) == ["a"] + [f"c{i}" for i in range(300)]
    assert back["date"].isna().tolist() == [True] + [False] * 300 and set(back["date"][1:]) == {"2020-01-01"}
    assert back["n"].tolist() == [1, *range(300)]


def test_parquet_stream_leaves_nothing_when_the_writing_fails(tmp_path):
    target = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError):
        with ParquetStream(target) as out:
            out.write(pd.DataFrame({"x": [1]}))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="t.parquet: no chunk to write"):
        write_parquet_chunks_atomic(iter([]), target)
    assert list(tmp_path.iterdir()) == []


def _model_folder(path, weights: str):
    path.mkdir()
    (path / "weights.bin").write_text(weights)
    return path


def _weights(path) -> str | None:
    return (path / "weights.bin").read_text() if path.exists() else None


def test_replace_folder_swaps_in_the_new_model_and_deletes_the_old(tmp_path):
    final = _model_folder(tmp_path / "model", "old")
    replace_folder(_model_folder(tmp_path / "model.partial", "new"), final)
    assert _weights(final) == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # staging moved, old copy deleted
    replace_folder(_model_folder(tmp_path / "first.partial", "first"), tmp_path / "fresh")  # nothing to replace
    assert _weights(tmp_path / "fresh") == "first"


def _failing_rename(monkeypatch, call: int):
    """os.replace raising OSError on its `call`-th use (1-based), working otherwise."""
    import os

    real_replace, calls = os.replace, []

    def flaky_replace(src, dst):
        calls.append((src, dst))
        if len(calls) == call:
            raise OSError("disk gone")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)


@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_failed_swap_leaves_the_old_model_in_place(tmp_path, monkeypatch, fail_at):
    """A failing rename (the old one aside, or the new one in) leaves the old model where it was, never none."""
    final = _model_folder(tmp_path / "model", "old")
    staging = _model_folder(tmp_path / "model.partial", "new")
    _failing_rename(monkeypatch, fail_at)
    with pytest.raises(OSError, match="disk gone"):
        replace_folder(staging, final)
    assert _weights(final) == "old" and _weights(staging) == "new"  # the caller can publish again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.partial"]


def test_a_swap_killed_between_its_renames_is_undone_by_the_next(tmp_path, monkeypatch):
    """Killed after moving the old model aside (no model/ left): the next swap puts the old one back first, so
    that its own failure still leaves a model; without a failure the new one is in and the old one gone."""
    _model_folder(tmp_path / ".model.old", "old")
    staging = _model_folder(tmp_path / "model.partial", "new")
    _failing_rename(monkeypatch, 3)  # 1: the old one back, 2: aside again, 3: the new one in
    with pytest.raises(OSError):
        replace_folder(staging, tmp_path / "model")
    assert _weights(tmp_path / "model") == "old"
    monkeypatch.undo()
    (tmp_path / "model").rename(tmp_path / ".model.old")  # killed again
    replace_folder(staging, tmp_path / "model")
    assert _weights(tmp_path / "model") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


@pytest.mark.parametrize(
    "payload, message",
    [
        (b'{"a": 1}\n{"a": \n', "malformed JSON"),
        (b'{"a": 1}\n[1, 2]\n', "expected a JSON object"),
        (b'{"a": 1}\n{"b": 2}\n', "missing required field"),
        (b'{"a": 1}\n{"a": "\xff"}\n', "not valid UTF-8"),
    ],
)
def test_iter_jsonl_names_file_and_line(tmp_path, payload, message):
    path = tmp_path / "bad.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(payload)
    with pytest.raises(InputError, match=message) as info:
        list(iter_jsonl(path, required=("a",)))
    assert info.value.line == 2 and str(path) in str(info.value)


def test_ids_and_marker_normalisation():
    assert sentence_id("We  apply dropout.") == sentence_id("we apply dropout.")
    assert sentence_id("we apply dropout.") != sentence_id("we apply dropout")
    assert normalize_marker("  To Address  this issue, ") == "to address this issue"
    assert Move.parse("ADDRESS") is Move.ADDRESS and Split.SILVER.pool_split is Split.TEST
    with pytest.raises(ValueError, match="unknown move"):
        Move.parse("zoom")


def test_move_and_split_parse_by_one_rule_and_name_their_enum():
    assert Move.parse(" Broaden ") is Move.BROADEN and Split.parse("VALIDATION") is Split.VALIDATION
    assert Split.parse(Split.TEST) is Split.TEST
    with pytest.raises(ValueError) as move_error:
        Move.parse(Split.TEST)
    assert str(move_error.value) == ("unknown move <Split.TEST: 'test'>; expected one of "
                                     "['address', 'broaden', 'specify']")
    with pytest.raises(ValueError) as split_error:
        Split.parse("dev")
    assert str(split_error.value) == "unknown split 'dev'; expected one of ['train', 'validation', 'test', 'silver']"


def test_every_move_has_each_text_of_prompts_moves_toml():
    purposes = ("instruction", "definition", "annotator_definition", "annotator_question")
    assert all(move_text(move, purpose).strip() for move in MOVES for purpose in purposes)
    assert move_text("ADDRESS", "instruction").startswith("Given a scientific statement describing a research problem")
    with pytest.raises(KeyError, match=r"prompts/moves\.toml: no 'caption' text of \[specify\]"):
        move_text(Move.SPECIFY, "caption")


def test_load_benchmark_reads_official_layout_without_our_ids(tiny_benchmark):
    # Strip our columns and rename candidate columns as another export might.
    path = tiny_benchmark / "data" / "address" / "test.parquet"
    frame = pd.read_parquet(path).drop(columns=["query_id", "gold_id"])
    frame.to_parquet(path, index=False)
    pool_path = tiny_benchmark / "candidates" / "test.parquet"
    (pd.read_parquet(pool_path).drop(columns=["docid"]).rename(columns={"text": "sentence"})
     .to_parquet(pool_path, index=False))

    bench = load_benchmark(tiny_benchmark)
    qrels = bench.qrels("address", "test")
    pool = bench.pool("silver")  # silver is ranked against the test pool
    assert set(qrels.docid) <= set(pool.docid)
    assert qrels.qid.tolist() == [sentence_id(q) for q in frame.querySentence]


def test_load_benchmark_rejects_other_directories(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a Ratio benchmark"):
        load_benchmark(tmp_path)


def test_atomic_outputs_get_umask_permissions(tmp_path):
    import os
    import stat

    target = tmp_path / "out.txt"
    with atomic_path(target) as tmp:
        tmp.write_text("x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_query_split_is_silver_only_where_silver_holds_a_pair(tiny_benchmark):
    """One rule for every stage that falls back from silver: a missing or empty silver file means the test set."""
    from ratio_utils.dataset.benchmark import pairs_path

    bench = load_benchmark(tiny_benchmark)
    test_pairs = pd.read_parquet(pairs_path(tiny_benchmark, Move.ADDRESS, Split.TEST))
    test_pairs.to_parquet(pairs_path(tiny_benchmark, Move.ADDRESS, Split.SILVER))
    test_pairs.iloc[0:0].to_parquet(pairs_path(tiny_benchmark, Move.BROADEN, Split.SILVER))
    assert bench.query_split(Move.ADDRESS) is Split.SILVER
    assert bench.query_split(Move.BROADEN) is Split.TEST  # an empty silver file
    assert bench.query_split(Move.SPECIFY) is Split.TEST  # no silver file
