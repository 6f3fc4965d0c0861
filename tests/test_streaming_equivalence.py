"""Stages 01, 02, 05 and 06 on one sentence table held whole (one file, the in-memory paths) and cut into parts
(the layout of a partitioned corpus build, streamed part by part): the same review sheet, span counts and span
status (01), the same marker extensions (02), the same mined rows and counts (05), the same benchmark, built in
memory from the parts and bucket by bucket (06).

Two tables: the mining fixture (tests/fixtures/mining, written so that every mining rule fires; always run) and
the default run's sentence table with the lexicon notebook 05 read (read-only, from the default config's output
root, $RATIO_OUTPUT_ROOT or data/; skipped, with the reason, where the default run has not been built).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import stage_steps

from ratio_utils import mining
from ratio_utils.config import load_config
from ratio_utils.lexicon import curation
from ratio_utils.parts import part_path

FIXTURES = Path(__file__).parent / "fixtures" / "mining"
FIXTURE_SPLITS = {"train": {"start": None, "end": 2006}, "validation": {"start": 2007, "end": 2009},
                  "test": {"start": 2010, "end": None}}
N_PARTS = 3
REVIEW = {"top_spans": 40, "pairs_per_span": 3, "seed": 13}


def _fixture_table(root: Path) -> tuple[Path, Path, dict]:
    frame = pd.read_csv(FIXTURES / "sentences.csv", keep_default_na=False, na_values=[""])
    lexicon = pd.read_csv(FIXTURES / "lexicon.csv", keep_default_na=False, na_values=[""])
    root.mkdir(parents=True)
    frame.astype(object).where(frame.notna(), None).to_parquet(root / "sentences.parquet", index=False)
    lexicon.astype(object).where(lexicon.notna(), None).to_parquet(root / "lexicon.parquet", index=False)
    return root / "sentences.parquet", root / "lexicon.parquet", {"split_by": "year", "splits": FIXTURE_SPLITS}


def _default_run_table(root: Path) -> tuple[Path, Path, dict]:
    default = load_config()
    if not (default.paths.sentences.is_file() and default.paths.final_lexicon.is_file()):
        pytest.skip(f"the default run's {default.paths.sentences} and {default.paths.final_lexicon} are not built "
                    "(run notebooks 00-04)")
    return default.paths.sentences, default.paths.final_lexicon, {}


@pytest.fixture(params=["fixture", pytest.param("default_run", marks=pytest.mark.slow)])
def layouts(request, tmp_path, monkeypatch):
    """(config with the table in one file, config with it in N_PARTS parts that never cut a paper)."""
    sentences, lexicon, dataset_section = (_fixture_table if request.param == "fixture"
                                           else _default_run_table)(tmp_path / "source")
    configs = []
    for name in ("whole", "parts"):
        monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / name))
        cfg = load_config(overrides={"mining": {"progress": False}, "dataset": dataset_section})
        cfg.paths.interim.mkdir(parents=True, exist_ok=True)
        shutil.copy(lexicon, cfg.paths.final_lexicon)
        configs.append(cfg)
    whole, parts = configs
    shutil.copy(sentences, whole.paths.sentences)
    frame = pd.read_parquet(sentences)
    shards = mining.shard_by_paper(frame, N_PARTS)
    assert len(shards) == N_PARTS
    for index, shard in enumerate(shards):
        part_path(parts.paths.sentences, index).parent.mkdir(parents=True, exist_ok=True)
        shard.to_parquet(part_path(parts.paths.sentences, index), index=False)
    return whole, parts


def test_notebooks_01_and_02_stream_parts_to_the_in_memory_results(layouts):
    whole, parts = layouts
    lexicon = pd.read_parquet(whole.paths.final_lexicon).drop_duplicates("marker")
    in_memory = curation.read_sentences(whole.paths.sentences)  # the table held whole
    counts = curation.count_spans(in_memory, 7)
    assert counts.equals(curation.count_spans(curation.scan_sentences(parts.paths.sentences), 7))
    # 01: the review sheet (drawn part by part from the parts, from the whole frame at once) and the span status
    top = counts.head(REVIEW["top_spans"])
    spans = top["span"].to_list()
    by_parts = curation.sample_review_pairs(curation.scan_sentence_parts(parts.paths.sentences), spans,
                                            REVIEW["pairs_per_span"], REVIEW["seed"])
    at_once = curation.sample_review_pairs(in_memory, spans, REVIEW["pairs_per_span"], REVIEW["seed"])
    assert by_parts.height > 0
    sheet = curation.review_sheet(top, at_once, ("a", "b"))
    pd.testing.assert_frame_equal(curation.review_sheet(top, by_parts, ("a", "b")), sheet)
    status = curation.span_status(top, lexicon)
    pd.testing.assert_frame_equal(curation.span_status(
        curation.count_spans(curation.scan_sentences(parts.paths.sentences), 7).head(REVIEW["top_spans"]), lexicon),
        status)
    # 02: the extensions of the extendable connectives
    connectives = lexicon[lexicon["extendable"].astype(bool)][["marker", "kind", "move"]]
    assert len(connectives) > 0
    longest = int(connectives["marker"].str.split().str.len().max()) + 5
    extensions = curation.connective_extensions(curation.count_spans(in_memory, longest), connectives)
    assert len(extensions) > 0
    pd.testing.assert_frame_equal(curation.connective_extensions(
        curation.count_spans(curation.scan_sentences(parts.paths.sentences), longest), connectives), extensions)


def _release_files(root: Path) -> dict[str, pd.DataFrame]:
    return {str(p.relative_to(root)): pd.read_parquet(p) for p in sorted(root.rglob("*.parquet"))}


def test_notebooks_05_and_06_on_parts_equal_the_single_file_run(layouts):
    whole, parts = layouts
    from_file, _ = stage_steps.mine(whole)
    from_parts, _ = stage_steps.mine(parts)
    assert from_parts.counts == from_file.counts and from_file.pairs.shape[0] > 0
    for table in ("pairs", "distractors"):
        expected = pd.read_parquet(getattr(whole.paths, table))
        pd.testing.assert_frame_equal(mining.read_mined(getattr(parts.paths, table)), expected, check_dtype=False,
                                      obj=table)
    built_whole = stage_steps.build(whole)
    built_parts = stage_steps.build(parts)  # in memory, from the parts
    assert built_parts.report() == built_whole.report()
    expected = _release_files(whole.paths.benchmark)
    assert list(_release_files(parts.paths.benchmark)) == list(expected)
    for name, frame in _release_files(parts.paths.benchmark).items():
        pd.testing.assert_frame_equal(frame, expected[name], check_dtype=False, obj=name)
    # bucket by bucket (past a memory budget of one byte), from the parts
    parts.sections["dataset"] = {**parts.sections.get("dataset", {}), "max_in_memory_bytes": 1,
                                 "bucket_bytes": 1 << 20}
    bounded = stage_steps.build(parts)
    assert bounded.report() == built_whole.report()
    got = _release_files(parts.paths.benchmark)
    assert list(got) == list(expected)
    for name, frame in expected.items():
        pd.testing.assert_frame_equal(got[name], frame, check_dtype=len(frame) > 0, obj=name)
