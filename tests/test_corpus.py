"""Corpus ingestion (ratio_utils.corpora): readers on the real shared corpora and on fixtures, agreement
with the independent reference conversions, bad input, sampling, the built tables, and the download
path of the default corpus (pinned git blob ids, verified against a loopback HTTP server)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from ratio_utils.corpora import (
    C1_AS_CP1252,
    PINNED_MANIFEST,
    AclScisummReader,
    AclsumReader,
    IngestLog,
    JsonlReader,
    Paper,
    acl_year_venue,
    back_matter_kind,
    build_corpus,
    extract_aclsum_wheel,
    fetch_acl_scisumm,
    read_manifest,
    sample_papers,
    write_corpus_outputs,
)
from ratio_utils.corpora.download import ChecksumError, git_blob_sha1
from ratio_utils.io import InputError
from ratio_utils.param_sections import CorpusParams
from ratio_utils.schema import PAPER_COLUMNS, SENTENCE_COLUMNS

FIXTURES = Path(__file__).parent / "fixtures" / "corpus"

# The reference converters (shared/corpora/*/PROVENANCE.md) drop every section whose heading merely
# *starts* with References/Bibliography/Acknowledg(e)ments; ours drops "References" only as the
# whole heading (so "Reference Resolution in Dialogue" stays). This is the reference's rule.
_REFERENCE_BACK_MATTER = re.compile(r"^\W*(\d+(\.\d+)*\.?\s*)?(references?|bibliography|acknowledge?ments?)\b", re.I)


def _letters_and_digits(text: str) -> str:
    # C1 controls are read as their Windows-1252 characters on both sides (ours does so on input).
    return re.sub(r"[\W_]+", "", text.translate(C1_AS_CP1252))


def _read_reference(path: Path) -> dict[str, dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return {rec["paper_id"]: rec for rec in map(json.loads, handle)}


@pytest.fixture(scope="module")
def acl_papers(shared_dir) -> tuple[dict[str, Paper], IngestLog]:
    log = IngestLog()
    reader = AclScisummReader(shared_dir / "corpora" / "acl_scisumm" / "raw")
    return {p.paper_id: p for p in reader.papers(log)}, log


@pytest.fixture(scope="module")
def acl_reference(shared_dir) -> dict[str, dict]:
    return _read_reference(shared_dir / "corpora" / "acl_scisumm" / "papers.jsonl.gz")


# --- ACL ScisummNet / CL-SciSumm XML on the real files ---------------------------------------------------------


def test_acl_reader_reads_the_same_papers_as_the_reference(acl_papers, acl_reference):
    papers, log = acl_papers
    assert set(papers) == set(acl_reference)
    assert len(papers) == 1606
    counts = log.counts["acl_scisumm"]
    # Every XML file is either a paper or a counted flat file without section structure.
    assert counts["files"] == 1672 and counts["files_skipped_no_sections"] == 1672 - 1606
    for pid, paper in papers.items():
        assert (paper.year, paper.venue) == (acl_reference[pid]["year"], acl_reference[pid]["venue"])


def test_acl_reader_differs_from_the_reference_only_where_explained(acl_papers, acl_reference):
    """Every sentence/pair difference against the reference conversion has one of two causes:

    1. The reference keeps a block's sentences only up to its first non-<S> child: it loses every
       sentence after a SUBSECTION heading (kind "subsection") and after a SECTION nested in an
       ABSTRACT (kind "tail"). We keep them, each such run as its own paragraph.
    2. Sections whose heading starts with "Reference" without being "References" (W05-0904:
       "Reference: I had a dog.") are content for us, back matter for the reference.
    Once both are removed from our output, every paper has exactly the reference's paragraphs,
    sentence for sentence (compared on letters and digits: the reference turns a soft hyphen into a
    space, "multi lingual", where our cleaning joins the word, "multilingual").
    """
    papers, _ = acl_papers
    extra_sentences = extra_pairs = 0
    for pid, paper in papers.items():
        kept = []
        for para, kind, heading in zip(paper.paragraphs, paper.paragraph_kinds, paper.paragraph_sections):
            explained = kind in ("subsection", "tail") or (kind == "section" and _REFERENCE_BACK_MATTER.match(heading))
            if explained:
                extra_sentences += len(para)
                extra_pairs += len(para) - 1
            else:
                kept.append(para)
        reference = acl_reference[pid]["paragraphs"]
        assert [len(p) for p in kept] == [len(p) for p in reference], pid
        ours = [_letters_and_digits(s) for p in kept for s in p]
        theirs = [_letters_and_digits(s) for p in reference for s in p]
        assert ours == theirs, pid
    ref_sentences = sum(len(p) for rec in acl_reference.values() for p in rec["paragraphs"])
    ref_pairs = sum(len(p) - 1 for rec in acl_reference.values() for p in rec["paragraphs"])
    assert (ref_sentences, ref_pairs) == (314_487, 303_000)
    ours_sentences = sum(p.n_sentences for p in papers.values())
    ours_pairs = sum(p.n_pairs for p in papers.values())
    assert ours_sentences == ref_sentences + extra_sentences
    assert ours_pairs == ref_pairs + extra_pairs
    assert 0 < extra_sentences < 0.01 * ref_sentences  # the differences are a fraction of a percent


def test_acl_reader_titles_and_sources(acl_papers, acl_reference):
    papers, log = acl_papers
    paper = papers["P05-1053"]
    assert paper.title == "Exploring Various Knowledge in Relation Extraction"
    assert (paper.paragraph_kinds[0] == "abstract"
            and paper.paragraphs[0][0].startswith("Extracting semantic relationships"))
    assert paper.source.startswith("WING-NUS/scisumm-corpus:data/")
    same_title = sum(bool(p.title) and p.title == acl_reference[pid]["title"] for pid, p in papers.items())
    # Titles taken from a text rendering are its first line; the reference sometimes joins two lines
    # or leaves the title empty (174 papers), so only most titles are identical.
    assert same_title > 0.8 * len(papers)
    assert log.counts["acl_scisumm"]["files_decoded_cp1252"] > 0


def test_acl_reader_reads_the_fixture_corpus_as_its_jsonl_conversion():
    """The invented corpus in both layouts (tests/fixtures/corpus/mini): the XML reader gives each paper the
    paragraphs, title and year of its JSONL record; the References section and the flat file are counted."""
    mini = FIXTURES / "mini"
    log = IngestLog()
    from_xml = {p.paper_id: p for p in AclScisummReader(mini / "acl_scisumm").papers(log)}
    from_jsonl = {p.paper_id: p for p in JsonlReader(mini / "papers.jsonl", "mini").papers(log)}
    assert sorted(from_xml) == sorted(from_jsonl) and len(from_xml) > 10
    for paper_id, paper in from_xml.items():
        record = from_jsonl[paper_id]
        assert (paper.paragraphs, paper.title, paper.year) == (record.paragraphs, record.title, record.year), paper_id
        assert paper.paragraph_kinds == ["abstract"] + ["section"] * (len(paper.paragraphs) - 1)
    counts = log.counts["acl_scisumm"]
    assert counts["files"] == len(from_xml) + 1 and counts["files_skipped_no_sections"] == 1
    assert counts["sections_dropped_references"] == len(from_xml)


def test_acl_reader_fixture_structure_and_counts():
    log = IngestLog()
    papers = {p.paper_id: p for p in AclScisummReader(FIXTURES / "acl_xml").papers(log)}
    assert set(papers) == {"P99-9001", "C08-9003"}  # W98-9002 is flat
    p = papers["P99-9001"]
    assert p.title == "A Tiny Fixture Paper About Parsing" and p.year == 1999 and p.venue == "ACL"
    assert p.paragraph_kinds == ["abstract", "section", "subsection"]
    assert p.paragraphs[0][1] == 'The parser handles "quoted" phrases and nested brackets without trouble.'
    assert p.paragraphs[2] == ["The remainder of this fixture describes the pruning model in some detail.", "Table 2."]
    assert all("reviewers" not in s and "Doe, J." not in s for para in p.paragraphs for s in para)
    c = papers["C08-9003"]
    assert "\u201ccurly quotes\u201d" in c.paragraphs[0][0]  # Windows-1252 0x93/0x94
    assert c.paragraphs[1] == ["The method section is never closed, so the parser must recover from it."]
    assert c.title == "Recovering Titles From Plain Text Renderings" and c.year == 2008 and c.venue == "COLING"
    counts = log.counts["acl_scisumm"]
    assert counts["files_skipped_no_sections"] == 1 and counts["files_decoded_cp1252"] == 1
    assert counts["files_xml_recovered"] == 1 and counts["titles_from_txt"] == 1
    assert counts["sections_dropped_acknowledgements"] == 1 and counts["sections_dropped_references"] == 1
    assert counts["sentences_in_dropped_sections"] == 2 and counts["subsection_headings"] == 1


@pytest.mark.parametrize(
    "paper_id, year, venue",
    [("P05-1053", 2005, "ACL"), ("J80-3003", 1980, "Computational Linguistics"), ("W10-1730", 2010, "ACL workshop"),
     ("2021.naacl-main.72", 2021, "NAACL"), ("2020.findings-emnlp.12", 2020, "Findings of EMNLP"),
     ("2022.acl-long.1", 2022, "ACL"), ("ICDAR99", None, None)],
)
def test_acl_year_venue(paper_id, year, venue):
    assert acl_year_venue(paper_id) == (year, venue)


@pytest.mark.parametrize(
    "heading, kind",
    [("References", "references"), ("7 REFERENCES.", "references"), ("Bibliography", "references"),
     ("Acknowledgments", "acknowledgements"), ("Acknowledgement", "acknowledgements"),
     ("Acknowledgments Initiative in Cognitive Science and", "acknowledgements"),
     ("Reference Resolution in Dialogue", None), ("Reference: I had a dog.", None), ("1 Introduction", None),
     ("", None)],
)
def test_back_matter_headings(heading, kind):
    assert back_matter_kind(heading) == kind


# --- aclsum JSON on the real files -------------------------------------------------------------------------------


def test_aclsum_reader_agrees_with_reference(shared_dir):
    """Paragraph texts equal the reference conversion's, except (a) paragraphs under headings that only
    start with "Reference" (kept by us), (b) one body paragraph that repeats the abstract verbatim
    (the reference keeps the repeat; we drop it, counted)."""
    log = IngestLog()
    papers = {p.paper_id: p for p in AclsumReader(shared_dir / "corpora" / "aclsum" / "raw").papers(log)}
    reference = _read_reference(shared_dir / "corpora" / "aclsum" / "papers.jsonl.gz")
    assert set(papers) == set(reference) and len(papers) == 250
    repeats = 0
    for pid, paper in papers.items():
        assert paper.year == reference[pid]["year"] and paper.venue == reference[pid]["venue"]
        ours = [para[0] for para, heading in zip(paper.paragraphs, paper.paragraph_sections)
                if not _REFERENCE_BACK_MATTER.match(heading)]
        theirs = [" ".join(p[0].split()) for p in reference[pid]["paragraphs"]]
        abstract = set(ours[: paper.paragraph_kinds.count("abstract")])
        theirs_without_repeats = theirs[: len(abstract)] + [t for t in theirs[len(abstract):] if t not in abstract]
        repeats += len(theirs) - len(theirs_without_repeats)
        assert [" ".join(t.split()) for t in ours] == theirs_without_repeats, pid
    counts = log.counts["aclsum"]
    assert repeats == counts["paragraphs_repeating_abstract"] == 1
    assert counts["paper_id_from_file_name"] > 0  # new-style ids: the JSON's own paper_id is only the year


# --- generic JSONL and bad input --------------------------------------------------------------------------------


def test_generic_jsonl_reader():
    log = IngestLog()
    papers = {p.paper_id: p for p in JsonlReader(FIXTURES / "generic_good.jsonl", "fixture").papers(log)}
    assert list(papers) == ["G-1", "G-2", "G-3"]
    assert papers["G-1"].paragraphs[0][1].startswith("More generally")
    assert papers["G-2"].year == 2021 and papers["G-2"].date == "2021-03-15" and not papers["G-2"].sentences_split
    assert papers["G-2"].paragraphs[1] == ["Our filter uses minhash signatures over word five-grams."]
    assert papers["G-3"].title is None and papers["G-3"].year == 2005
    assert not log.quarantined


def test_unsplit_paragraphs_given_as_lists_of_strings_are_joined():
    log = IngestLog()
    papers = list(JsonlReader(FIXTURES / "generic_unsplit_lists.jsonl", "lists").papers(log))
    assert [p.paper_id for p in papers] == ["U-1"] and not papers[0].sentences_split
    assert papers[0].paragraphs == [
        ["Annotated corpora are scarce for most languages. "
         "To address this, we project labels across aligned sentences."],
        ["Projection noise grows with the distance between the two languages."],
        ["A paragraph given in two pieces, which the reader joins with a space."],
    ]
    (bad,) = log.quarantined["lists"]
    assert ((bad["line"], bad["reason"]) == (2, "wrong_type")
            and "paragraphs[0] must be a string or a list of strings" in bad["detail"])


def test_jsonl_reader_reads_the_aclsum_reference_conversion(shared_dir):
    """aclsum's reference conversion gives each unsplit paragraph as a one-string list; none is quarantined."""
    path = shared_dir / "corpora" / "aclsum" / "papers.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = [json.loads(next(handle)) for _ in range(20)]
    assert all(not r["sentences_split"] and isinstance(r["paragraphs"][0], list) for r in raw)  # the layout under test
    log = IngestLog()
    papers = list(JsonlReader(path, "aclsum_ref").papers(log, lines=(1, 20)))
    assert not log.quarantined
    assert [p.paper_id for p in papers] == [r["paper_id"] for r in raw]
    for paper, record in zip(papers, raw):
        assert paper.year == record["year"] and paper.title == record["title"]
        assert paper.paragraphs == [[" ".join(p)] for p in record["paragraphs"]]


# (line in generic_bad.jsonl, quarantine reason)
BAD_LINES = [
    (2, "malformed_json"),
    (3, "not_an_object"),
    (4, "missing_field"),
    (5, "wrong_type"),
    (6, "wrong_type"),
    (7, "non_utf8"),
    (8, "empty_paper"),
    (9, "missing_year"),
    (11, "duplicate_id"),
    (12, "wrong_type"),
]


def test_bad_input_is_quarantined_with_file_and_line(cfg):
    from ratio_utils.corpora import read_papers

    log = IngestLog()
    papers, _ = read_papers([JsonlReader(FIXTURES / "generic_bad.jsonl", "bad")], log, progress=False)
    assert [p.paper_id for p in papers] == ["B-ok"]
    got = [(rec["line"], rec["reason"]) for rec in log.quarantined["bad"]]
    assert got == BAD_LINES
    assert all(rec["file"].endswith("generic_bad.jsonl") for rec in log.quarantined["bad"])
    assert log.quarantine_counts("bad") == {"malformed_json": 1, "not_an_object": 1, "missing_field": 1,
                                            "wrong_type": 3, "non_utf8": 1, "empty_paper": 1, "missing_year": 1,
                                            "duplicate_id": 1}


@pytest.mark.parametrize("lineno, reason", BAD_LINES)
def test_strict_mode_raises_naming_file_and_line(tmp_path, lineno, reason):
    from ratio_utils.corpora import read_papers

    lines = (FIXTURES / "generic_bad.jsonl").read_bytes().split(b"\n")
    body = lines[lineno - 1]
    if reason == "duplicate_id":  # needs the first occurrence before it
        body = lines[0] + b"\n" + body
    path = tmp_path / "one.jsonl"
    path.write_bytes(body + b"\n")
    with pytest.raises(InputError) as info:
        read_papers([JsonlReader(path, "bad")], IngestLog(strict=True), progress=False)
    expected_line = 2 if reason == "duplicate_id" else 1
    assert f"one.jsonl:{expected_line}: {reason}" in str(info.value)


def test_acl_file_without_acl_id_is_quarantined(tmp_path):
    (tmp_path / "xml").mkdir()
    shutil.copy(FIXTURES / "acl_xml" / "xml" / "P99-9001.xml", tmp_path / "xml" / "ICDAR99.xml")
    log = IngestLog()
    assert list(AclScisummReader(tmp_path).papers(log)) == []
    assert log.quarantined["acl_scisumm"][0]["reason"] == "missing_year"
    with pytest.raises(InputError, match="ICDAR99.xml: missing_year"):
        list(AclScisummReader(tmp_path).papers(IngestLog(strict=True)))


# --- sampling ------------------------------------------------------------------------------------------------------


def _fake_papers(years: dict[int, int]) -> list[Paper]:
    return [Paper(f"X{y}-{i}", "fake", None, y, None, None, "test", [["s"]])
            for y, n in years.items() for i in range(n)]


def test_sample_is_deterministic_and_spread_over_bins_and_years():
    papers = _fake_papers({1990: 50, 2000: 50, 2005: 50, 2007: 10, 2008: 10, 2009: 10, 2012: 40, 2020: 40})
    sample = sample_papers(papers, 30, [2006, 2009], seed=13)
    assert len(sample) == 30 and sample == sample_papers(papers, 30, [2006, 2009], seed=13)
    bins = pd.cut(pd.Series([p.year for p in sample]), [0, 2006, 2009, 3000]).value_counts()
    assert set(bins) == {10}
    assert {p.year for p in sample} == {1990, 2000, 2005, 2007, 2008, 2009, 2012, 2020}
    assert sample_papers(papers, 30, [2006, 2009], seed=14) != sample


def test_sample_passes_on_the_share_of_a_small_bin():
    papers = _fake_papers({2000: 50, 2008: 2, 2015: 50})
    sample = sample_papers(papers, 30, [2006, 2009], seed=1)
    assert len(sample) == 30 and sum(p.year == 2008 for p in sample) == 2


# --- building the tables ---------------------------------------------------------------------------------------------


@pytest.mark.models  # spaCy splits the unsplit fixture paper
def test_build_corpus_on_fixtures(cfg, tmp_path):
    shutil.copy(FIXTURES / "generic_bad.jsonl", tmp_path / "bad.jsonl")
    params = CorpusParams(sources=["acl_scisumm", "fixture", "bad"], acl_scisumm_dir=str(FIXTURES / "acl_xml"),
                          jsonl={"fixture": str(FIXTURES / "generic_good.jsonl"), "bad": str(tmp_path / "bad.jsonl")},
                          progress=False)
    build = build_corpus(cfg, params)
    papers = pd.read_parquet(cfg.paths.papers)
    sentences = pd.read_parquet(cfg.paths.sentences)
    assert tuple(papers.columns) == PAPER_COLUMNS and tuple(sentences.columns) == SENTENCE_COLUMNS
    assert list(papers.paper_id) == ["C08-9003", "P99-9001", "G-1", "G-2", "G-3", "B-ok"]
    # Dropped sentences stay, with the rule's name; indices are contiguous within a paragraph.
    p99 = sentences[sentences.paper_id == "P99-9001"]
    assert list(zip(p99.para, p99.sent)) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert p99.drop_reason.tolist()[-1] == "short" and p99.drop_reason.isna().sum() == 5
    g2 = sentences[sentences.paper_id == "G-2"]  # split by spaCy
    assert g2.text.tolist()[:2] == ["Large models memorise parts of their training data.",
                                    "To mitigate this risk, we filter near-duplicates before training."]
    assert g2.date.dt.year.unique().tolist() == [2021]
    report = json.loads(cfg.paths.corpus_report.read_text())
    assert (report["quarantine"]["bad"]["wrong_type"] == 3
            and sum(report["quarantine"]["bad"].values()) == len(BAD_LINES))
    quarantine = [json.loads(line)
                  for line in (cfg.paths.interim / "quarantine" / "bad.jsonl").read_text().splitlines()]
    assert [(q["line"], q["reason"]) for q in quarantine] == BAD_LINES
    assert (cfg.paths.interim / "quarantine" / "fixture.jsonl").read_text() == ""
    assert report["cleaning"]["all"]["drops"]["short"] == int((sentences.drop_reason == "short").sum())
    stats = build.statistics.set_index("corpus")
    assert stats.loc["all", "papers"] == 6 and stats.loc["all", "sentences"] == len(sentences)
    # pairs: consecutive sentences within a paragraph, computed independently here.
    expected_pairs = sum(len(g) - 1 for _, g in sentences.groupby(["paper_id", "para"]))
    assert stats.loc["all", "pairs"] == expected_pairs
    written = write_corpus_outputs(build, cfg)
    assert written["statistics"]["csv"].exists() and written["figure"]["png"].exists()
    assert not list(cfg.paths.root.rglob("*.tmp"))


def test_build_corpus_strict_stops_on_bad_input(cfg):
    params = CorpusParams(sources=["bad"], jsonl={"bad": str(FIXTURES / "generic_bad.jsonl")}, strict=True,
                          progress=False)
    with pytest.raises(InputError, match=r"generic_bad.jsonl:2: malformed_json"):
        build_corpus(cfg, params)
    assert not cfg.paths.sentences.exists() and not cfg.paths.corpus_report.exists()


def test_params_from_yaml(cfg):
    params = cfg.section("corpus", CorpusParams)
    assert (params.sources == ["acl_scisumm", "aclsum"] and params.min_sentence_chars == 35
            and params.max_papers is None)
    assert params.s2orc_params().min_year == 2015 and params.s2orc_params().release == "2026-05-05"
    with pytest.raises(ValueError, match="unknown key"):
        CorpusParams(s2orc={"relase": "x"}).s2orc_params()


# --- default corpus without ../shared: pinned checksums --------------------------------------------------------------


def _not_matching_manifest(root, manifest) -> list[str]:
    """The manifest's files under root whose git blob id differs from the pinned one (or that are missing)."""
    return [row.local_file for row in read_manifest(manifest).itertuples()
            if not (root / row.local_file).exists() or git_blob_sha1(root / row.local_file) != row.git_blob]


def test_shared_files_match_the_pinned_manifest(shared_dir):
    manifest = read_manifest(PINNED_MANIFEST)
    assert len(manifest) == 1946 and manifest.git_blob.str.fullmatch(r"[0-9a-f]{40}").all()
    assert _not_matching_manifest(shared_dir / "corpora" / "acl_scisumm" / "raw", PINNED_MANIFEST) == []


def _git_blob_ids(paths: list[Path]) -> list[str]:
    """The ids git itself gives these files (`git hash-object`), independent of download.git_blob_sha1."""
    out = subprocess.run(["git", "hash-object", "--no-filters", *map(str, paths)], capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def test_fetch_acl_scisumm_from_loopback_mirror(tmp_path, loopback):
    www, base_url = loopback
    mini = FIXTURES / "mini" / "acl_scisumm"
    local = ["xml/D07-9106.xml", "xml/P08-9107.xml", "title_txt/P08-9107.txt"]
    rows = pd.DataFrame({"local_file": local, "repo_path": [f"data/Set/{Path(f).stem}/{f}" for f in local],
                         "git_blob": _git_blob_ids([mini / f for f in local])})
    rows.to_csv(tmp_path / "m.tsv", sep="\t", index=False)
    commit = "1dd68e44df5c94cc767cc301cd04e61c52e4bf68"
    for row in rows.itertuples():  # lay the fixture files out like the GitHub raw URLs
        target = www / commit / row.repo_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(mini / row.local_file, target)
    dest = fetch_acl_scisumm(tmp_path / "dl", base_url=base_url, manifest=tmp_path / "m.tsv", progress=False)
    assert _not_matching_manifest(dest, tmp_path / "m.tsv") == []
    papers = list(AclScisummReader(dest).papers(IngestLog()))
    assert sorted(p.paper_id for p in papers) == ["D07-9106", "P08-9107"]
    # A mirror serving other bytes is refused and leaves no file behind.
    served = www / commit / rows.repo_path.iloc[0]
    served.write_bytes(served.read_bytes().replace(b"<S", b"<s", 1))
    with pytest.raises(ChecksumError, match="git_blob"):
        fetch_acl_scisumm(tmp_path / "dl2", base_url=base_url, manifest=tmp_path / "m.tsv", progress=False)
    assert not (tmp_path / "dl2" / rows.local_file.iloc[0]).exists()


def test_extract_aclsum_wheel_checks_sha256(tmp_path):
    wheel = tmp_path / "aclsum-0.1.2-py3-none-any.whl"
    paper = {"paper_id": "P93-1015",
             "pdf_parse": {"abstract": [], "body_text": [{"text": "A sentence.", "section": "Intro"}]}}
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("aclsum/dataset/paper_jsons/P93-1015.json", json.dumps(paper))
        archive.writestr("aclsum/__init__.py", "")
    with pytest.raises(ChecksumError):
        extract_aclsum_wheel(wheel, tmp_path / "out")  # the pinned sha256 is the real wheel's
    from ratio_utils.io import sha256_file

    root = extract_aclsum_wheel(wheel, tmp_path / "out", sha256=sha256_file(wheel))
    assert [p.name for p in (root / "paper_jsons").iterdir()] == ["P93-1015.json"]
    assert git_blob_sha1(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's id of the empty blob
