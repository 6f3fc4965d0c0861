"""The rehearsal harness (benchmarks/rehearsal.py, issue 17) on a tiny case, so that it cannot rot: the synthetic
release in both S2ORC layouts as the shard reader sees it, the goals' arithmetic, the rewrite detection of the
resume check, and one run of notebooks 00 and 05 through the pipeline with the resume checks (slow)."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import rehearsal
from scale import ReleaseShape, copy_of, generate, paragraph_pool

from ratio_utils.corpora import IngestLog
from ratio_utils.corpora.s2orc import S2orcReader
from ratio_utils.io import write_parquet_atomic

MINING_FIXTURES = Path(__file__).parent / "fixtures" / "mining"


@pytest.fixture
def fixture_sentences(tmp_path) -> Path:
    """The mining fixture's sentence table (written for the tests) as the parquet the generator recombines."""
    path = tmp_path / "sentences.parquet"
    pd.read_csv(MINING_FIXTURES / "sentences.csv", keep_default_na=False, na_values=[""]).to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("layout", ["s2orc", "s2orc_v2"])
def test_synthetic_release_holds_what_the_reader_must_filter_and_quarantine(tmp_path, fixture_sentences, layout):
    pool = paragraph_pool(fixture_sentences)
    shape = ReleaseShape(text_dataset=layout, last_date="2026-05-05", other_field_share=0.3, undated_share=0.3,
                         duplicated_span_share=0.5, bad_records_per_shard=2)
    # two papers (>= 150 sentences each) a shard
    made = generate(tmp_path / "release", 1500, 300, pool, seed=5, shape=shape)
    log = IngestLog()
    reader = S2orcReader(tmp_path / "release", text_dataset=layout, metadata_path=tmp_path / "meta.parquet")
    papers = list(reader.papers(log))
    counts = log.counts["s2orc"]
    assert made["shards"] >= 4 and made["other_field"] > 0 and made["undated"] > 0
    assert counts[f"records_{layout}"] == len(papers)
    assert counts["papers_other_field"] == made["other_field"]
    assert counts["papers_without_publication_date"] == made["undated"]
    assert 0 < counts["duplicate_paragraph_spans_removed"] <= made["duplicated_spans"]
    assert counts["paragraphs_dropped_references"] == len(papers)  # the references section of every paper
    reasons = [q["reason"] for q in log.quarantined["s2orc"]]
    assert sorted(reasons) == sorted(["malformed_json", "wrong_type"] * made["shards"])
    # every kept paragraph is one paragraph of the pool, and the selected papers hold the sentences asked for
    sentences_of = {" ".join(para): len(para) for para in pool}
    assert sum(sentences_of[" ".join(p)] for paper in papers for p in paper.paragraphs) == made["sentences"] >= 1500
    first, last = dt.date(2015, 1, 1), dt.date(2026, 5, 5)
    assert all(first <= dt.date.fromisoformat(paper.date) <= last for paper in papers)


def test_distinct_copies_make_every_drawn_paragraph_new_and_keep_its_openings(tmp_path, fixture_sentences):
    pool = paragraph_pool(fixture_sentences)
    generate(tmp_path / "release", 6 * sum(map(len, pool)), 300, pool, seed=5,
             shape=ReleaseShape(distinct_copies=True))
    reader = S2orcReader(tmp_path / "release", metadata_path=tmp_path / "meta.parquet")
    paragraphs = [" ".join(p) for paper in reader.papers(IngestLog()) for p in paper.paragraphs]
    assert len(paragraphs) > 2 * len(pool) and len(set(paragraphs)) == len(paragraphs)  # drawn again, never repeated
    # with its copy words taken out, each is a paragraph of the pool: only sentence ends were touched
    assert {re.sub(r" copy\d+", "", p) for p in paragraphs} <= {" ".join(para) for para in pool}
    assert copy_of("We fix it.", 3) == "We fix it copy3." and copy_of("No end", 1) == "No end copy1"


def test_issue_17_records_are_a_dated_paper_without_year_and_an_escaped_lone_surrogate(tmp_path, fixture_sentences):
    import gzip

    made = generate(tmp_path / "release", 300, 150, paragraph_pool(fixture_sentences),
                    shape=ReleaseShape(issue_17_records=True))
    assert made["year_null"] == made["lone_surrogate"] == made["shards"] == 2
    with gzip.open(tmp_path / "release" / "papers" / "shard-0000.jsonl.gz", "rt") as handle:
        meta = [json.loads(line) for line in handle]
    with gzip.open(tmp_path / "release" / "s2orc" / "shard-0000.jsonl.gz", "rt") as handle:
        text = handle.read().splitlines()
    assert (meta[0]["year"] is None and meta[0]["publicationdate"]
            and meta[0]["s2fieldsofstudy"][0]["category"] == "Computer Science")
    # escaped on disk, lone once parsed
    assert "\\ud800" in text[1] and "\ud800" in json.loads(text[1])["content"]["text"]


def _measured(notebook, peak_mb, wall_s, rows_in):
    return rehearsal.Measured(notebook, wall_s, peak_mb, 0.0, peak_mb, 0, rows_in=rows_in)


def test_goals_compare_the_two_largest_sizes():
    small = rehearsal.SizeResult(4, {}, _measured("download", 1, 1, None), sentences=1_000_000)
    large = rehearsal.SizeResult(16, {}, _measured("download", 1, 1, None), sentences=4_000_000)
    small.notebooks = [_measured("05", 1000, 100, 1_000_000), _measured("06", 1000, 10, 10_000)]
    large.notebooks = [_measured("05", 1600, 500, 4_000_000), _measured("06", 1300, 40, 40_000)]
    lines = rehearsal.goals([small, large], [])
    assert "05: peak RSS 16x / 4x = 1600 / 1000 MB = 1.60 (NOT MET" in lines[0]
    assert "05: wall time per sentence 16x / 4x = 1.25 (met" in lines[1]
    # global stage: 300 MB more for 30,000 more rows = 10,486 bytes per row; the paper's rows are
    # 40,000 x 394M / 4M = 3.94M, so 1300 MB + 10,486 B x 3.9M rows is about 42 GB
    per_row = 300 * 2**20 / 30_000
    paper_rows = 40_000 * rehearsal.PAPER_SENTENCES / 4_000_000
    expected_gb = (1300 * 2**20 + per_row * (paper_rows - 40_000)) / 1e9
    assert f"{per_row:,.0f} bytes per input row" in lines[2] and f"about {expected_gb:,.0f} GB (met" in lines[2]
    assert "all notebooks: wall time per sentence 16x / 4x = 1.23 (met" in lines[4]


def test_marginal_time_cancels_a_fixed_cost():
    # 30 s fixed + 20 us per sentence: the per-sentence ratio falls short of the band, the marginal one is 1
    sizes = [rehearsal.SizeResult(k, {}, _measured("download", 1, 1, None), sentences=250_000 * k) for k in (1, 4, 16)]
    for size in sizes:
        size.notebooks = [_measured("01", 500, 30 + 20e-6 * size.sentences, size.sentences)]
    lines = rehearsal.goals(sizes, [])
    assert "01: wall time per sentence 16x / 4x = 0.55 (NOT MET" in lines[1]
    assert lines[2] == ("01: marginal time per sentence 4x->16x / 1x->4x = 20.0 / 20.0 us = 1.00 "
                        "(fixed cost cancelled; within +-25%: yes)")
    sizes[2].notebooks = [_measured("01", 500, 50 + 40e-6 * 3_000_000, sizes[2].sentences)]  # 40 us per added sentence
    assert "= 2.00 (fixed cost cancelled; within +-25%: no)" in rehearsal.goals(sizes, [])[2]
    assert not any("marginal" in line for line in rehearsal.goals(sizes[1:], []))  # two sizes: no third to cancel with


def test_sizes_measured_earlier_are_read_back_for_the_same_corpus_only(tmp_path):
    measured = rehearsal.SizeResult(4, {"shards": 3}, _measured("download", 1, 1, None), sentences=1_000_000)
    measured.notebooks = [_measured("05", 1000, 100, 1_000_000)]
    path = tmp_path / "rehearsal.json"
    path.write_text(json.dumps({"base": 250_000, "layout": "s2orc", "resume": [], "sizes": [asdict(measured)]}))
    assert rehearsal.earlier_sizes(path, 250_000, "s2orc") == [measured]
    with pytest.raises(SystemExit, match="measured base 250000 / layout s2orc, not 366441 / s2orc"):
        rehearsal.earlier_sizes(path, 366_441, "s2orc")


def test_resume_check_sees_an_atomic_rewrite(tmp_path):
    part, other = tmp_path / "part-00000.parquet", tmp_path / "part-00001.parquet"
    frame = pd.DataFrame({"x": [1, 2]})
    write_parquet_atomic(frame, part)
    write_parquet_atomic(frame, other)
    before = rehearsal._stamps([part, other])
    write_parquet_atomic(frame, part)  # the same bytes, written again
    after = rehearsal._stamps([part, other])
    assert after[str(part)] != before[str(part)] and after[str(other)] == before[str(other)]


@pytest.mark.slow
def test_tiny_rehearsal_of_00_and_05_with_the_resume_checks(tmp_path, fixture_sentences, capsys, shared_dir):
    # shared_dir: notebook 05's Table 4 reads the authors' query-term lists from ../shared (else it would download
    # them)
    # the mining fixture's lexicon with one row per marker, as notebook 01's artefact has (its raw variants are there
    # for the matcher's tests; notebook 05's Table 4 refuses a marker listed twice)
    lexicon = pd.read_csv(MINING_FIXTURES / "lexicon.csv", keep_default_na=False,
                          na_values=[""]).drop_duplicates("marker")
    lexicon.astype(object).where(lexicon.notna(), None).to_parquet(tmp_path / "lexicon.parquet", index=False)
    workdir = tmp_path / "rehearsal"
    rehearsal.main(["--base", "600", "--sizes", "1", "--shard-sentences", "150", "--notebooks", "00", "05",
                    "--sentences", str(fixture_sentences), "--lexicon", str(tmp_path / "lexicon.parquet"),
                    "--workdir", str(workdir)])
    printed = capsys.readouterr().out
    result = json.loads((workdir / "rehearsal.json").read_text())
    size = result["sizes"][0]
    by_notebook = {m["notebook"]: m for m in size["notebooks"]}
    assert list(by_notebook) == ["00", "05"] and all(m["returncode"] == 0 for m in by_notebook.values())
    # the stub served the release and `python -m ratio_utils.corpora.s2_api` downloaded it byte for byte
    release = workdir / "1x" / "release"
    downloads = workdir / "1x" / "out" / "data" / "raw" / "downloads" / "s2orc" / rehearsal.RELEASE
    shards = sorted(p.relative_to(release) for p in release.glob("*/*.gz"))
    assert len(shards) == 2 * size["made"]["shards"]
    assert all((downloads / s).read_bytes() == (release / s).read_bytes() for s in shards)
    # rows: what 00 wrote is what 05 read; the Dask workers of both were sampled beside the kernel
    assert by_notebook["00"]["rows_out"] == by_notebook["05"]["rows_in"] == size["sentences"] >= 600
    assert by_notebook["05"]["rows_out"] > 0
    # issue 17's records (on by default): each shard's paper with year null and lone surrogate quarantined, not fatal
    quarantined = json.loads((workdir / "1x" / "out" / "data" / "interim"
                              / "corpus_report.json").read_text())["quarantine"]["s2orc"]
    assert size["made"]["year_null"] == size["made"]["lone_surrogate"] == size["made"]["shards"]
    assert quarantined["missing_year"] == quarantined["invalid_text"] == size["made"]["shards"]
    assert all(m["driver_mb"] > 100 and m["worker_mb"] > 100 for m in by_notebook.values())
    assert "| 00 |" in printed and "| 05 |" in printed
    # resume: each run was killed after its first part, and the rerun finished every part
    corpus, mining = result["resume"]
    assert corpus["notebook"] == "00" and corpus["killed"] and corpus["rerun_returncode"] == 0
    assert corpus["finished_files_at_kill"] >= 3 and corpus["verdict"] == "met" and not corpus["redone_files"]
    assert corpus["corpus_report_parts"]["skipped_unchanged"] >= corpus["finished_files_at_kill"] // 3
    assert corpus["files_after_rerun"] == 3 * size["made"]["shards"]
    assert mining["notebook"] == "05" and mining["killed"] and mining["rerun_returncode"] == 0
    assert mining["finished_files_at_kill"] >= 3 and mining["verdict"] == "met" and not mining["redone_files"]
    assert mining["files_after_rerun"] == 3 * size["made"]["shards"]
    assert "resume during 00: met" in printed and "resume during 05: met" in printed
