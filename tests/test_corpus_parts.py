"""Partitioned corpus build (ratio_utils.corpora.partitioned, corpus.papers_per_part): on the invented fixture
corpus in the default corpus's layouts (ACL XML + aclsum, with papers in both, so cross-corpus deduplication
crosses parts) plus a generic JSONL file with bad lines, the parts, built one after another or by Dask workers,
equal the single-file build row for row and the reports agree; a run killed halfway resumes without rebuilding its
finished parts; a changed input rebuilds its part and every later one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ratio_utils.config import load_config
from ratio_utils.corpora import build_corpus, partitioned, write_corpus_outputs
from ratio_utils.param_sections import CorpusParams
from ratio_utils.parts import part_files, read_table

FIXTURES = Path(__file__).parent / "fixtures" / "corpus"
IN_BOTH = ["D07-9106", "D10-9109", "P08-9107"]  # fixture ids present in the ACL XML and in the aclsum layout


@pytest.fixture(scope="module")
def corpus_slice(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slice")
    shutil.copytree(FIXTURES / "mini" / "acl_scisumm", root / "acl")
    shutil.copytree(FIXTURES / "mini" / "aclsum", root / "aclsum")
    shutil.copy(FIXTURES / "generic_bad.jsonl", root / "bad.jsonl")
    return root


def _config(tmp_path, monkeypatch, corpus_slice, name: str, **corpus):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / name))
    monkeypatch.setenv("RATIO_SHARED", str(tmp_path / "no_shared"))  # every input comes from the slice
    section = {"sources": ["acl_scisumm", "aclsum", "bad"], "acl_scisumm_dir": str(corpus_slice / "acl"),
               "aclsum_dir": str(corpus_slice / "aclsum"), "jsonl": {"bad": str(corpus_slice / "bad.jsonl")},
               "progress": False} | corpus  # fmt: skip
    cfg = load_config(overrides={"corpus": section})
    return cfg, cfg.section("corpus", CorpusParams)


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Categoricals as strings (each part has its own categories; a part where a column is all null reads
    its nulls back as NaN, a file with values as None: both are missing), a fresh index."""
    text = [c for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)]
    plain = frame.astype({c: "object" for c in text})
    for c in text:
        plain[c] = plain[c].where(plain[c].notna(), None)
    return plain.reset_index(drop=True)


def _comparable(report: dict) -> dict:
    drop = {"params", "seconds", "outputs", "parts"}
    out = {k: v for k, v in report.items() if k not in drop}
    out["reader_counts"] = {c: {k: v for k, v in counts.items() if k != "sentence_split_seconds"}
                            for c, counts in report["reader_counts"].items()}
    return json.loads(json.dumps(out, sort_keys=True))  # int year keys -> strings, as in the written report


@pytest.mark.models  # spaCy splits the aclsum paragraphs
def test_parts_equal_the_single_file_build(tmp_path, monkeypatch, corpus_slice):
    cfg1, params1 = _config(tmp_path, monkeypatch, corpus_slice, "single")
    single = build_corpus(cfg1, params1)
    cfg2, params2 = _config(tmp_path, monkeypatch, corpus_slice, "parts", papers_per_part=2)
    parts = build_corpus(cfg2, params2)

    assert (cfg2.paths.sentences.is_dir()
            and len(part_files(cfg2.paths.sentences)) == parts.report["parts"]["total"] > 5)
    assert parts.sentences is None and parts.n_sentences == len(single.sentences)
    for table in ("papers", "sentences"):
        expected = _plain(pd.read_parquet(getattr(cfg1.paths, table)))
        pd.testing.assert_frame_equal(_plain(pd.read_parquet(getattr(cfg2.paths, table))), expected)  # pyarrow dataset
        # polars scan
        pd.testing.assert_frame_equal(_plain(read_table(getattr(cfg2.paths, table))), expected, check_dtype=False)
    assert single.report["deduplicated"]["aclsum in acl_scisumm"]["paper_ids"] == IN_BOTH
    assert _comparable(parts.report) == _comparable(single.report)
    pd.testing.assert_frame_equal(parts.statistics, single.statistics, check_dtype=False)
    for corpus in ("acl_scisumm", "aclsum", "bad"):
        quarantine = cfg1.paths.interim / "quarantine" / f"{corpus}.jsonl"
        assert (cfg2.paths.interim / "quarantine" / f"{corpus}.jsonl").read_text() == quarantine.read_text()
    # the same parts built by Dask workers (threads here; a first pass finds the ids each part must leave out)
    cfg3, params3 = _config(tmp_path, monkeypatch, corpus_slice, "dask", papers_per_part=2, engine="dask",
                            dask_processes=False, dask_workers=2)
    on_dask = build_corpus(cfg3, params3)
    for table in ("papers", "sentences"):
        for mine, theirs in zip(part_files(getattr(cfg3.paths, table)), part_files(getattr(cfg2.paths, table)),
                                strict=True):
            pd.testing.assert_frame_equal(pd.read_parquet(mine), pd.read_parquet(theirs))
    assert _comparable(on_dask.report) == _comparable(single.report)
    assert build_corpus(cfg3, params3).report["parts"]["skipped_unchanged"] == on_dask.report["parts"]["total"]
    written = write_corpus_outputs(parts, cfg2)
    assert written["figure"]["png"].exists()
    # switching back to the single-file layout replaces the folders of parts
    build_corpus(cfg2, params1)
    assert cfg2.paths.sentences.is_file()


def test_a_killed_run_resumes_without_redoing_finished_parts(tmp_path, monkeypatch, corpus_slice):
    # acl_scisumm and the generic JSONL only: their sentences come split, no spaCy model needed
    own_copy = tmp_path / "bad.jsonl"  # changed in place below
    shutil.copy(corpus_slice / "bad.jsonl", own_copy)
    corpus = {"sources": ["acl_scisumm", "bad"], "papers_per_part": 3, "jsonl": {"bad": str(own_copy)}}
    cfg, params = _config(tmp_path, monkeypatch, corpus_slice, "resume", **corpus)
    built = []
    real_build_part = partitioned.build_part

    def dies_at_the_fourth_part(papers, *args):
        if len(built) == 3:
            raise KeyboardInterrupt("killed")
        built.append([p.paper_id for p in papers])
        return real_build_part(papers, *args)

    monkeypatch.setattr(partitioned, "build_part", dies_at_the_fourth_part)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(cfg, params)
    assert len(part_files(cfg.paths.sentences)) == 3 and not cfg.paths.corpus_report.exists()
    finished = {p: p.stat().st_mtime_ns for p in part_files(cfg.paths.sentences)}

    built.clear()
    monkeypatch.setattr(partitioned, "build_part",
                        lambda papers, *args: (built.append(1), real_build_part(papers, *args))[1])
    resumed = build_corpus(cfg, params)
    total = resumed.report["parts"]["total"]
    assert (resumed.report["parts"] == {"total": total, "skipped_unchanged": 3, "built": total - 3}
            and len(built) == total - 3)
    assert all(p.stat().st_mtime_ns == mtime for p, mtime in finished.items())

    # the same result as one uninterrupted run
    cfg_once, _ = _config(tmp_path, monkeypatch, corpus_slice, "once", **corpus)
    monkeypatch.setattr(partitioned, "build_part", real_build_part)
    once = build_corpus(cfg_once, params)
    pd.testing.assert_frame_equal(_plain(pd.read_parquet(cfg.paths.sentences)),
                                  _plain(pd.read_parquet(cfg_once.paths.sentences)))
    assert _comparable(resumed.report) == _comparable(once.report)

    # a rerun with nothing changed builds nothing; a changed input file rebuilds its part and the later ones
    assert build_corpus(cfg, params).report["parts"]["skipped_unchanged"] == total
    own_copy.write_bytes(own_copy.read_bytes() + b"\n")
    changed = build_corpus(cfg, params)
    assert 0 < changed.report["parts"]["built"] < total


def test_a_cleaning_switch_left_off_keeps_the_keys_of_parts_built_before_it():
    import hashlib
    import json
    from dataclasses import asdict

    from ratio_utils.corpora.base import InputPart
    from ratio_utils.corpora.partitioned import EXECUTION_SETTINGS, part_key
    from ratio_utils.param_sections import CorpusParams

    part = InputPart("jsonl", ("a.jsonl",), (1, 10))
    hashes = lambda path: "h"  # noqa: E731
    off, on = CorpusParams(), CorpusParams(min_word_token_ratio=0.35)
    # the key a build made before the switch existed: every setting but it
    before = {k: v for k, v in asdict(off).items() if k not in EXECUTION_SETTINGS and k != "min_word_token_ratio"}
    record = {"previous": "", "corpus": "jsonl", "lines": (1, 10), "params": before, "files": [["a.jsonl", "h"]]}
    assert part_key(part, off, "", hashes) == hashlib.sha256(json.dumps(record, sort_keys=True,
                                                                        default=str).encode()).hexdigest()
    assert part_key(part, on, "", hashes) != part_key(part, off, "", hashes)  # switched on: the parts are rebuilt


def _counting_reads(monkeypatch) -> list[str]:
    """Record the description of every part read (one entry per call of admit_papers, which reads it)."""
    reads: list[str] = []
    real_admit = partitioned.admit_papers

    def admit(papers, corpus, *args, **kwargs):
        reads.append(corpus)
        return real_admit(papers, corpus, *args, **kwargs)

    monkeypatch.setattr(partitioned, "admit_papers", admit)
    return reads


def test_dask_reads_each_part_once_and_again_only_where_an_earlier_part_had_its_paper(tmp_path, monkeypatch,
                                                                                      corpus_slice):
    # the JSONL file holds B-ok on lines 1 and 10: in parts of 3 lines, the later part must leave it out
    corpus = {"sources": ["acl_scisumm", "bad"], "papers_per_part": 3}
    cfg_local, params_local = _config(tmp_path, monkeypatch, corpus_slice, "local", **corpus)
    local = build_corpus(cfg_local, params_local)
    cfg, params = _config(tmp_path, monkeypatch, corpus_slice, "dask", **corpus, engine="dask",
                          dask_processes=False, dask_workers=2)
    reads = _counting_reads(monkeypatch)
    on_dask = build_corpus(cfg, params)
    total = on_dask.report["parts"]["total"]
    reports = [json.loads(p.read_text()) for p in sorted(cfg.paths.corpus_parts.glob("part-*.json"))]
    left_out = [i for i, r in enumerate(reports) if r["key"] != partitioned.exclusion_key(r["input_key"], {})]
    assert len(left_out) == 1 and any(q["reason"] == "duplicate_id" and q["paper_id"] == "B-ok"
                                      for q in reports[left_out[0]]["quarantined"])
    assert len(reads) == total + 1  # no first pass: every part read once, the one with B-ok twice
    pd.testing.assert_frame_equal(_plain(read_table(cfg.paths.sentences)),
                                  _plain(read_table(cfg_local.paths.sentences)))
    assert _comparable(on_dask.report) == _comparable(local.report)

    reads.clear()  # a rerun with nothing changed reads nothing (and hashes no JSONL file: its line index has the hash)
    assert build_corpus(cfg, params).report["parts"]["skipped_unchanged"] == total and reads == []


def test_a_killed_dask_run_resumes_reading_only_the_unfinished_parts(tmp_path, monkeypatch, corpus_slice):
    corpus = {"sources": ["acl_scisumm", "bad"], "papers_per_part": 3, "engine": "dask", "dask_processes": False,
              "dask_workers": 1}
    cfg, params = _config(tmp_path, monkeypatch, corpus_slice, "killed", **corpus)
    real_build_part = partitioned.build_part
    built = []

    def dies_at_the_fourth_part(papers, *args):
        if len(built) == 3:
            raise RuntimeError("killed")
        built.append(1)
        return real_build_part(papers, *args)

    monkeypatch.setattr(partitioned, "build_part", dies_at_the_fourth_part)
    with pytest.raises(RuntimeError, match="killed"):
        build_corpus(cfg, params)
    finished = {p: p.stat().st_mtime_ns for p in cfg.paths.corpus_parts.glob("part-*.json")}
    assert len(finished) == 3

    monkeypatch.setattr(partitioned, "build_part", real_build_part)
    reads = _counting_reads(monkeypatch)
    resumed = build_corpus(cfg, params)
    total = resumed.report["parts"]["total"]
    # + the part that leaves B-ok out
    assert resumed.report["parts"]["skipped_unchanged"] == 3 and len(reads) == total - 3 + 1
    assert all(p.stat().st_mtime_ns == mtime for p, mtime in finished.items())
    cfg_once, _ = _config(tmp_path, monkeypatch, corpus_slice, "once", **corpus)
    once = build_corpus(cfg_once, params)
    pd.testing.assert_frame_equal(_plain(read_table(cfg.paths.sentences)),
                                  _plain(read_table(cfg_once.paths.sentences)))
    assert _comparable(resumed.report) == _comparable(once.report)


def test_a_record_that_would_break_the_tables_is_quarantined_not_fatal(tmp_path, monkeypatch, corpus_slice):
    records = [
        '{"paper_id": "fine", "year": 2020, '
        '"paragraphs": [["A perfectly fine sentence that is long enough to keep."]]}',
        # an escaped lone surrogate: json.loads accepts it, no UTF-8 (parquet) writer does
        '{"paper_id": "surrogate", "year": 2020, '
        '"paragraphs": [["A sentence with a broken character \\ud83d in it, long enough."]]}',
        '{"paper_id": "also-fine", "year": 2021, '
        '"paragraphs": [["Another perfectly fine sentence that is long enough."]]}',
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(records) + "\n")
    cfg, params = _config(tmp_path, monkeypatch, corpus_slice, "odd", sources=["odd"], jsonl={"odd": str(path)},
                          papers_per_part=2)
    build = build_corpus(cfg, params)
    assert sorted(read_table(cfg.paths.papers)["paper_id"]) == ["also-fine", "fine"]
    quarantined = [json.loads(line) for line in (cfg.paths.quarantine / "odd.jsonl").read_text().splitlines()]
    assert [(q["reason"], Path(q["file"]).name, q["line"], q["paper_id"]) for q in quarantined] == [
        ("invalid_text", "odd.jsonl", 2, "surrogate")]
    assert build.report["quarantine"]["odd"] == {"invalid_text": 1}


def test_a_selected_s2orc_paper_without_a_year_is_quarantined_with_its_shard_line(tmp_path):
    from ratio_utils.corpora import IngestLog
    from ratio_utils.corpora.s2orc import S2orcReader
    from ratio_utils.corpora.steps import admit_papers, papers_frame

    shards = tmp_path / "shards"
    shutil.copytree(FIXTURES / "s2orc", shards)
    papers_shard = shards / "papers" / "shard-000.jsonl"
    lines = [json.loads(line) for line in papers_shard.read_text().splitlines()]
    for record in lines:
        if record["corpusid"] == 1001:
            record["year"] = None  # dated, so the paper's rule selects it
    papers_shard.write_text("".join(json.dumps(r) + "\n" for r in lines))
    reader = S2orcReader(shards, metadata_path=tmp_path / "meta.parquet")
    reader.prepare()
    log = IngestLog()
    part = reader.parts(papers_per_part=10)[0]
    admitted = list(admit_papers(reader.read_part(part, log), "s2orc", {}, {}, log))
    assert admitted == [] and len(papers_frame(admitted)) == 0
    assert ("missing_year", "shard-000.jsonl", 1, "1001") in [
        (q["reason"], Path(q["file"]).name, q["line"], q["paper_id"]) for q in log.quarantined["s2orc"]]


def test_a_part_is_streamed_to_its_tables_in_batches(tmp_path, monkeypatch, corpus_slice):
    import pyarrow.parquet as pq

    corpus = {"sources": ["acl_scisumm", "bad"]}
    cfg_one, params_one = _config(tmp_path, monkeypatch, corpus_slice, "one", **corpus)
    one = build_corpus(cfg_one, params_one)
    monkeypatch.setattr(partitioned, "WRITE_BATCH_PAPERS", 2)
    cfg, params = _config(tmp_path, monkeypatch, corpus_slice, "batched", **corpus, papers_per_part=7)
    batched = build_corpus(cfg, params)
    first = part_files(cfg.paths.sentences)[0]
    assert pq.ParquetFile(first).metadata.num_row_groups == 4  # 7 papers, 2 at a time
    assert pq.ParquetFile(part_files(cfg.paths.papers)[0]).metadata.num_row_groups == 4
    pd.testing.assert_frame_equal(_plain(pd.read_parquet(cfg.paths.sentences)),
                                  _plain(pd.read_parquet(cfg_one.paths.sentences)))
    pd.testing.assert_frame_equal(_plain(pd.read_parquet(cfg.paths.papers)),
                                  _plain(pd.read_parquet(cfg_one.paths.papers)))
    assert _comparable(batched.report) == _comparable(one.report)
