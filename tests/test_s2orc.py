"""S2ORC (ratio_utils.corpora.s2_api, ratio_utils.corpora.s2orc, ratio_utils.corpora.download): the Datasets API
client and the shard downloader against an HTTP server on 127.0.0.1 started in the test (Range requests, MD5 ETags,
pre-signed-style query strings), and the shard parser on fixture shards written in the S2ORC schema."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from s2_stub import API_KEY, SIGNATURE, FakeS3AndApi

from ratio_utils.corpora import IngestLog, read_papers, s2_api
from ratio_utils.corpora.download import ChecksumError, Checksums, DownloadError, download_file, redact_url
from ratio_utils.corpora.s2_api import S2DatasetsClient, download_release, shard_name
from ratio_utils.corpora.s2orc import S2orcReader, annotation_spans, s2orc_paragraphs
from ratio_utils.io import InputError
from ratio_utils.param_sections import S2orcParams

FIXTURES = Path(__file__).parent / "fixtures" / "corpus" / "s2orc"


def _gz(path: Path) -> bytes:
    return gzip.compress(path.read_bytes(), mtime=0)


@pytest.fixture
def server():
    with FakeS3AndApi() as fake:
        fake.files["/bucket/s2orc/shard-000.gz"] = _gz(FIXTURES / "s2orc" / "shard-000.jsonl")
        fake.files["/bucket/papers/shard-000.gz"] = _gz(FIXTURES / "papers" / "shard-000.jsonl")
        fake.files["/bucket/papers/shard-001.gz"] = gzip.compress(b"", mtime=0)
        yield fake


# --- the Datasets API client -----------------------------------------------------------------------------------


def test_client_lists_shards_with_the_api_key(server):
    client = S2DatasetsClient(f"{server.base}/datasets/v1", API_KEY, min_interval=0.0)
    urls = client.dataset_files("2026-05-05", "papers")
    assert [shard_name(u) for u in urls] == ["shard-000.gz", "shard-001.gz"]
    path, headers = server.requests[-1]
    assert path == "/datasets/v1/release/2026-05-05/dataset/papers" and headers["x-api-key"] == API_KEY
    with pytest.raises(ValueError, match="pin a release"):
        client.dataset_files("latest", "papers")


def test_client_errors_never_show_key_or_signature(server, monkeypatch):
    bad = S2DatasetsClient(f"{server.base}/datasets/v1", "wrong-key", min_interval=0.0)
    with pytest.raises(DownloadError, match="HTTP 403") as info:
        bad.dataset_files("2026-05-05", "s2orc")
    assert "wrong-key" not in str(info.value)
    monkeypatch.delenv("S2_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="S2_API_KEY"):
        S2DatasetsClient.from_env(server.base)
    assert redact_url(f"{server.base}/bucket/x.gz?{SIGNATURE}") == f"{server.base}/bucket/x.gz"


def test_client_waits_between_requests(server):
    import time

    client = S2DatasetsClient(f"{server.base}/datasets/v1", API_KEY, min_interval=0.3)
    started = time.monotonic()
    client.dataset_files("2026-05-05", "papers")
    client.dataset_files("2026-05-05", "s2orc")
    assert time.monotonic() - started >= 0.3


def test_download_release_and_rerun(server, tmp_path):
    client = S2DatasetsClient(f"{server.base}/datasets/v1", API_KEY, min_interval=0.0)
    params = S2orcParams(release="2026-05-05")
    manifest = download_release(client, params, tmp_path, progress=False)
    assert (sorted(manifest["papers"]) == ["shard-000.gz", "shard-001.gz"]
            and list(manifest["s2orc"]) == ["shard-000.gz"])
    body = server.files["/bucket/s2orc/shard-000.gz"]
    assert (tmp_path / "s2orc" / "shard-000.gz").read_bytes() == body
    assert manifest["s2orc"]["shard-000.gz"] == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                                                 "mtime_ns": (tmp_path / "s2orc" / "shard-000.gz").stat().st_mtime_ns}
    assert json.loads((tmp_path / "manifest.json").read_text())["release"] == "2026-05-05"
    assert (SIGNATURE not in (tmp_path / "manifest.json").read_text()
            and API_KEY not in (tmp_path / "manifest.json").read_text())
    # A second run checks the files against the manifest and downloads no shard again.
    before = len([r for r in server.requests if r[0].startswith("/bucket/")])
    download_release(client, params, tmp_path, progress=False)
    assert len([r for r in server.requests if r[0].startswith("/bucket/")]) == before
    limited = download_release(client, S2orcParams(release="2026-05-05", shard_limit=1), tmp_path / "one",
                               progress=False)
    assert len(limited["papers"]) == 1


# --- resumable, checksummed downloads --------------------------------------------------------------------------------


def test_download_resumes_a_partial_file(server, tmp_path):
    body = server.files["/bucket/s2orc/shard-000.gz"]
    target = tmp_path / "shard.gz"
    (tmp_path / "shard.gz.part").write_bytes(body[:100])
    result = download_file(f"{server.base}/bucket/s2orc/shard-000.gz?{SIGNATURE}", target)
    assert result.resumed_from == 100 and target.read_bytes() == body
    assert server.requests[-1][1]["Range"] == "bytes=100-"
    assert not (tmp_path / "shard.gz.part").exists()


def test_download_restarts_when_the_server_ignores_range(server, tmp_path):
    server.ignore_range = True
    body = server.files["/bucket/s2orc/shard-000.gz"]
    (tmp_path / "shard.gz.part").write_bytes(b"garbage that must not stay in front")
    result = download_file(f"{server.base}/bucket/s2orc/shard-000.gz", tmp_path / "shard.gz")
    assert result.resumed_from == 0 and (tmp_path / "shard.gz").read_bytes() == body


def test_download_of_a_complete_partial_file(server, tmp_path):
    body = server.files["/bucket/s2orc/shard-000.gz"]
    (tmp_path / "shard.gz.part").write_bytes(body)
    result = download_file(f"{server.base}/bucket/s2orc/shard-000.gz", tmp_path / "shard.gz")  # server answers 416
    assert result.resumed_from == len(body) and (tmp_path / "shard.gz").read_bytes() == body


def test_checksum_mismatch_deletes_the_download(server, tmp_path):
    server.etags["/bucket/s2orc/shard-000.gz"] = "0" * 32  # the bytes do not match the server's MD5
    with pytest.raises(ChecksumError, match="md5") as info:
        download_file(f"{server.base}/bucket/s2orc/shard-000.gz?{SIGNATURE}", tmp_path / "shard.gz")
    assert SIGNATURE not in str(info.value)
    assert not (tmp_path / "shard.gz").exists() and not (tmp_path / "shard.gz.part").exists()
    server.etags.clear()
    with pytest.raises(ChecksumError, match="sha256"):
        download_file(f"{server.base}/bucket/s2orc/shard-000.gz", tmp_path / "shard.gz",
                      expected=Checksums(sha256="ab" * 32))
    assert not (tmp_path / "shard.gz").exists()


def test_existing_verified_file_is_not_downloaded_again(server, tmp_path):
    body = server.files["/bucket/papers/shard-000.gz"]
    target = tmp_path / "p.gz"
    target.write_bytes(body)
    result = download_file(f"{server.base}/bucket/missing.gz", target,
                           expected=Checksums(sha256=hashlib.sha256(body).hexdigest()))
    assert result.skipped
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_file(f"{server.base}/bucket/missing.gz", tmp_path / "other.gz")


# --- the shard parser ------------------------------------------------------------------------------------------------


def test_annotation_spans_are_json_encoded_lists():
    assert annotation_spans({"paragraph": '[{"start": 0, "end": 5}]'}, "paragraph") == [{"start": 0, "end": 5}]
    assert annotation_spans({"figure": None}, "figure") == [] and annotation_spans(None, "paragraph") == []
    with pytest.raises(TypeError):
        annotation_spans({"paragraph": '{"start": 0}'}, "paragraph")


def test_s2orc_paragraphs_in_reading_order_without_back_matter():
    record = json.loads((FIXTURES / "s2orc" / "shard-000.jsonl").read_text().splitlines()[0])
    paragraphs, sections, counts = s2orc_paragraphs(record)
    assert paragraphs == [
        "Mixture-of-experts models route each token to a few experts. "
        "We study how routing decisions transfer across tasks.",
        "Sparse models scale parameters without scaling compute. "
        "However, their routers collapse onto a few experts during fine-tuning [3].",
        "To address this issue, we add a load-balancing penalty that is annealed over training.",
    ]
    assert sections == ["Abstract", "1 Introduction", "1 Introduction"]
    assert counts["paragraphs_dropped_acknowledgements"] == 1 and counts["paragraphs_dropped_references"] == 1
    assert counts["bibref_spans"] == 1


def test_s2orc_reader_joins_metadata_filters_and_quarantines(tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(FIXTURES, shards)
    (shards / "s2orc" / "shard-000.jsonl.part").write_text("an unfinished download is not read\n")
    log = IngestLog()
    by_year = {"selection": "year", "abstract_spans": True}  # the rule before the paper's (a documented option)
    papers = list(S2orcReader(shards, release="2026-05-05", **by_year).papers(log))
    assert [p.paper_id for p in papers] == ["1001"]
    paper = papers[0]
    assert (paper.year, paper.date, paper.venue, paper.corpus) == (2024, "2024-02-29", "Fixture Conference", "s2orc")
    assert not paper.sentences_split and len(paper.paragraphs) == 3
    counts = log.counts["s2orc"]
    assert counts["papers_records"] == 5 and counts["papers_other_field"] == 1
    assert counts["papers_before_min_year"] == 1 and counts["papers_without_year"] == 1
    assert counts["s2orc_records"] == 3 and counts["s2orc_records_not_selected"] == 1
    assert [(q["reason"], q["line"], q["paper_id"]) for q in log.quarantined["s2orc"]] == [
        ("wrong_type", 3, "1004"), ("malformed_json", 4, None)]
    # With a lower year bound the 2012 paper passes the filter (it has no full text, so still no paper).
    assert "1003" in S2orcReader(shards, min_year=2010, **by_year).metadata(IngestLog())
    with pytest.raises(InputError, match=r"shard-000.jsonl:3: wrong_type"):
        list(S2orcReader(shards, **by_year).papers(IngestLog(strict=True)))


def test_s2orc_reader_output_goes_through_the_builder(tmp_path):
    papers, _ = read_papers([S2orcReader(FIXTURES, metadata_path=tmp_path / "meta.parquet")], IngestLog(),
                            progress=False)
    assert [p.paper_id for p in papers] == ["1001"]


def test_missing_shards_give_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m ratio_utils.corpora.s2_api"):
        S2orcReader(tmp_path)


def test_notebook_00_under_the_paper_params_names_the_download_command(tmp_path, monkeypatch):
    from ratio_utils.stages.corpus import CorpusStage

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        CorpusStage.from_params("params/paper.yaml").build()
    message = str(info.value)
    assert "\n" not in message and message.endswith("S2_API_KEY=... python -m ratio_utils.corpora.s2_api "
                                                   "--params params/paper.yaml")


# --- the real service: rate limits, expiring URLs, multipart ETags ---------------------------------------------------


def _fast_client(server) -> S2DatasetsClient:
    return S2DatasetsClient(f"{server.base}/datasets/v1", API_KEY, min_interval=0.0, max_retries=5,
                            backoff_seconds=0.01)


def test_429_and_5xx_are_retried_with_backoff(server, tmp_path):
    server.fail["/datasets/v1/release/2026-05-05/dataset/papers"] = [429, 503]
    server.fail["/bucket/papers/shard-000.gz"] = [429, 502, 503]
    manifest = download_release(_fast_client(server), S2orcParams(release="2026-05-05", datasets=["papers", "s2orc"]),
                                tmp_path, progress=False)
    assert (tmp_path / "papers" / "shard-000.gz").read_bytes() == server.files["/bucket/papers/shard-000.gz"]
    assert len([r for r in server.requests if r[0].startswith("/bucket/papers/shard-000.gz")]) == 4
    assert len(manifest["papers"]) == 2
    server.fail["/datasets/v1/release/2026-05-05/dataset/s2orc"] = [503] * 6  # more than max_retries: a clear error
    with pytest.raises(DownloadError, match="HTTP 503") as info:
        _fast_client(server).dataset_files("2026-05-05", "s2orc")
    assert info.value.status == 503


def test_expired_url_is_listed_again_and_the_shard_resumes_from_its_part(server, tmp_path, monkeypatch):
    body = server.files["/bucket/s2orc/shard-000.gz"]
    server.break_after["/bucket/s2orc/shard-000.gz"] = 200  # the transfer breaks off ...
    client = _fast_client(server)
    params = S2orcParams(release="2026-05-05", datasets=["s2orc", "papers"])
    original_download = s2_api.download_file

    def expire_after_the_break(url, target, **kwargs):
        try:
            return original_download(url, target, **kwargs, chunk_size=64)  # small chunks: what arrived is kept
        except DownloadError:
            server.expire()  # ... and meanwhile the signature expires: the retry gets a 403
            raise

    monkeypatch.setattr(s2_api, "download_file", expire_after_the_break)
    download_release(client, params, tmp_path, progress=False)
    assert (tmp_path / "s2orc" / "shard-000.gz").read_bytes() == body
    shard_requests = [(path, headers) for path, headers in server.requests if path.startswith("/bucket/s2orc/")]
    # first try (broken at 200 bytes), the resume with the expired URL (403), the resume with a fresh URL
    assert [h.get("Range") for _, h in shard_requests] == [None, "bytes=192-", "bytes=192-"]  # 3 whole chunks kept
    assert "gen=1&" in shard_requests[1][0] and "gen=2&" in shard_requests[2][0]
    assert len([p for p, _ in server.requests if p.endswith("/dataset/s2orc")]) == 2


def _s3_error(code: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f'<Message>The provided token has expired.'
            f'</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>').encode()


def test_url_answering_400_expired_token_is_listed_again(server, tmp_path):
    """S3 answers 400 ExpiredToken (not 403) when the credentials that signed the URL expired first."""
    server.expired_answer = (400, _s3_error("ExpiredToken"))
    urls = s2_api.ShardUrls(_fast_client(server), "2026-05-05", "s2orc", max_age_seconds=3000.0)
    server.expire()
    result = s2_api.download_shard(urls, "shard-000.gz", tmp_path / "shard-000.gz", Checksums(), urls.client.session)
    assert result.path.read_bytes() == server.files["/bucket/s2orc/shard-000.gz"] and urls.relisted == 1
    # Any other 400 is an error of the request, raised with its code instead of listing again.
    server.expired_answer = (400, _s3_error("InvalidArgument"))
    server.expire()
    with pytest.raises(DownloadError, match="HTTP 400 InvalidArgument") as info:
        s2_api.download_shard(urls, "shard-000.gz", tmp_path / "other.gz", Checksums(), urls.client.session)
    assert info.value.code == "InvalidArgument" and urls.relisted == 1 and SIGNATURE not in str(info.value)


def test_rerun_trusts_recorded_shards_without_hashing_them_again(server, tmp_path, monkeypatch):
    from ratio_utils.corpora import download

    client = _fast_client(server)
    params = S2orcParams(release="2026-05-05")
    manifest = download_release(client, params, tmp_path, progress=False)
    shard = tmp_path / "s2orc" / "shard-000.gz"
    assert manifest["s2orc"]["shard-000.gz"]["mtime_ns"] == shard.stat().st_mtime_ns
    hashed = []
    original = download._file_digests
    monkeypatch.setattr(download, "_file_digests", lambda path: hashed.append(Path(path).name) or original(path))
    download_release(client, params, tmp_path, progress=False)
    assert hashed == []  # three verified shards, none read again
    # A file changed after it was recorded is verified again (and fetched again when it no longer matches).
    shard.write_bytes(b"x" * shard.stat().st_size)
    again = download_release(client, params, tmp_path, progress=False)
    assert hashed.count("shard-000.gz") >= 1 and shard.read_bytes() == server.files["/bucket/s2orc/shard-000.gz"]
    assert again["s2orc"]["shard-000.gz"]["mtime_ns"] == shard.stat().st_mtime_ns


def test_urls_older_than_the_limit_are_listed_again_before_use(server, tmp_path):
    params = S2orcParams(release="2026-05-05", datasets=["papers", "s2orc"], url_max_age_seconds=0.0)
    download_release(_fast_client(server), params, tmp_path, progress=False)
    # papers: one listing, then a fresh one before each of its two shards; no URL was used after its age limit
    assert len([p for p, _ in server.requests if p.endswith("/dataset/papers")]) == 3
    assert not [r for r in server.requests if r[0].startswith("/bucket/") and "gen=1&" in r[0]]


def test_multipart_etag_is_not_mistaken_for_an_md5(server, tmp_path):
    body = server.files["/bucket/s2orc/shard-000.gz"]
    server.etags["/bucket/s2orc/shard-000.gz"] = hashlib.md5(b"part md5s").hexdigest() + "-3"
    result = download_file(f"{server.base}/bucket/s2orc/shard-000.gz?{SIGNATURE}", tmp_path / "shard.gz")
    assert result.sha256 == hashlib.sha256(body).hexdigest() and (tmp_path / "shard.gz").read_bytes() == body


# --- the paper's selection rule, the s2orc_v2 layout, duplicated spans, streamed metadata ----------------------------


def test_paper_rule_keeps_papers_dated_from_2015_and_paragraph_spans_only(tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(FIXTURES, shards)
    with open(shards / "papers" / "shard-000.jsonl", "a") as handle:  # one day before the window
        handle.write(json.dumps({"corpusid": 1010, "title": "Eve", "year": 2015, "publicationdate": "2014-12-31",
                                 "s2fieldsofstudy": [{"category": "Computer Science"}]}) + "\n")
    log = IngestLog()
    papers = list(S2orcReader(shards).papers(log))  # the defaults are the paper's rule
    assert [p.paper_id for p in papers] == ["1001"]
    assert papers[0].paragraphs == [[p] for p in s2orc_paragraphs(
        json.loads((FIXTURES / "s2orc" / "shard-000.jsonl").read_text().splitlines()[0]), abstract_spans=False)[0]]
    assert len(papers[0].paragraphs) == 2  # no abstract span
    counts = log.counts["s2orc"]
    assert counts["papers_without_publication_date"] == 3 and counts["papers_before_min_date"] == 1
    assert counts["papers_before_min_year"] == 0


def test_s2orc_v2_layout_and_duplicated_spans():
    log = IngestLog()
    reader = S2orcReader(FIXTURES.parent / "s2orc_v2", text_dataset="s2orc_v2", metadata_path=None)
    try:
        papers = list(reader.papers(log))
    finally:
        for made in (reader.metadata_path, reader.metadata_path.with_suffix(".json")):
            made.unlink(missing_ok=True)
    assert [p.paper_id for p in papers] == ["2001"]
    assert papers[0].paragraphs == [["We retrieve sentences that answer a statement."],
                                    ["Dense retrievers miss rhetorical relations between sentences. "
                                     "To address this issue, we condition the query on a move."]]
    assert papers[0].paragraph_sections == ["Abstract", "1 Method"]
    counts = log.counts["s2orc"]
    assert counts["records_s2orc_v2"] == 1 and counts["duplicate_paragraph_spans_removed"] == 1
    assert counts["paragraphs_dropped_references"] == 1 and counts["bibref_spans"] == 1
    # the s2orc layout with the same doubled span
    record = json.loads((FIXTURES / "s2orc" / "shard-000.jsonl").read_text().splitlines()[0])
    spans = json.loads(record["content"]["annotations"]["paragraph"])
    record["content"]["annotations"]["paragraph"] = json.dumps(spans + spans[:2])
    paragraphs, _, doubled = s2orc_paragraphs(record)
    assert paragraphs == s2orc_paragraphs(json.loads((FIXTURES / "s2orc" / "shard-000.jsonl").read_text()
                                                     .splitlines()[0]))[0]
    assert doubled["duplicate_paragraph_spans_removed"] == 2 and doubled["records_s2orc"] == 1


def test_papers_metadata_is_streamed_to_parquet_and_joined_per_shard(tmp_path):
    import pandas as pd

    meta = tmp_path / "meta.parquet"
    shards = tmp_path / "shards"  # the reader keeps each shard's line index beside it
    shutil.copytree(FIXTURES, shards)
    reader = S2orcReader(shards, metadata_path=meta, selection="year")
    record = reader.build_metadata(batch_rows=1)  # one row per batch: the writer never holds more
    assert sorted(pd.read_parquet(meta)["corpusid"]) == ["1001", "1004"] and record["counts"]["papers_records"] == 5
    assert set(reader._shard_metadata(shards / "s2orc" / "shard-000.jsonl")) == {"1001", "1004"}
    written = meta.stat().st_mtime_ns
    reader.build_metadata()
    assert meta.stat().st_mtime_ns == written  # unchanged shards and selection: reused
    parts = reader.parts(papers_per_part=1000)
    assert [Path(p.files[0]).name for p in parts] == ["shard-000.jsonl"]  # one part per full-text shard
    log = IngestLog()
    assert [p.paper_id for p in reader.read_part(parts[0], log)] == ["1001"]
    assert log.counts["s2orc"]["papers_records"] == 5  # the metadata counts come with the first part


def _many_papers_shards(root: Path, n: int = 7) -> Path:
    """The fixture's shards plus n selected papers (ids 3001...) in a gzipped full-text shard of their own."""
    shutil.copytree(FIXTURES, root)
    record = json.loads((FIXTURES / "s2orc" / "shard-000.jsonl").read_text().splitlines()[0])
    with open(root / "papers" / "shard-000.jsonl", "a") as papers:
        for i in range(n):
            papers.write(json.dumps({"corpusid": 3001 + i, "title": f"Paper {i}", "year": 2020,
                                     "publicationdate": "2020-03-01",
                                     "s2fieldsofstudy": [{"category": "Computer Science"}]}) + "\n")
    lines = [json.dumps(record | {"corpusid": 3001 + i}) for i in range(n)]
    (root / "s2orc" / "shard-001.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return root


def test_parts_are_record_ranges_of_a_shard_read_from_its_line_index(tmp_path, monkeypatch):
    from ratio_utils import io as ratio_io

    shards = _many_papers_shards(tmp_path / "shards")
    reader = S2orcReader(shards, metadata_path=tmp_path / "meta.parquet")
    reader.prepare()
    parts = reader.parts(papers_per_part=3)
    gz = shards / "s2orc" / "shard-001.jsonl.gz"
    assert [(Path(p.files[0]).name, p.lines) for p in parts] == [
        ("shard-000.jsonl", (1, 3)), ("shard-000.jsonl", (4, 4)),
        ("shard-001.jsonl.gz", (1, 3)), ("shard-001.jsonl.gz", (4, 6)), ("shard-001.jsonl.gz", (7, 7))]
    assert parts[3].offset == len(b"".join(gzip.decompress(gz.read_bytes()).splitlines(keepends=True)[:3]))
    assert parts[3].digests == (hashlib.sha256(gz.read_bytes()).hexdigest(),)
    assert (gz.parent / "shard-001.jsonl.gz.lines.npz").exists()

    # the parts together read what the whole shards read; the papers-metadata counts come once
    whole_log = IngestLog()
    whole = [(p.paper_id, p.origin_line, p.paragraphs) for p in reader.papers(whole_log)]
    logs = [IngestLog() for _ in parts]
    in_parts = [(p.paper_id, p.origin_line, p.paragraphs)
                for part, log in zip(parts, logs) for p in reader.read_part(part, log)]
    assert in_parts == whole and [pid for pid, _, _ in whole] == ["1001"] + [str(3001 + i) for i in range(7)]
    assert (sum(log.counts["s2orc"]["papers_records"] for log in logs)
            == whole_log.counts["s2orc"]["papers_records"] == 12)
    assert sum(log.counts["s2orc"]["s2orc_records"] for log in logs) == whole_log.counts["s2orc"]["s2orc_records"]
    assert [q for log in logs for q in log.quarantined["s2orc"]] == whole_log.quarantined["s2orc"] != []

    # the index is built once: a second listing neither hashes nor splits a shard again
    monkeypatch.setattr(ratio_io, "_HashingReader", None)
    assert reader.parts(papers_per_part=3) == parts


def test_a_downloaded_shard_is_indexed_with_the_sha256_its_manifest_recorded(tmp_path, monkeypatch):
    """A shard the downloader verified (manifest entry with its size and mtime) is split into parts without being
    hashed again: the parts carry the recorded digest. A shard changed since is hashed."""
    from ratio_utils import io as ratio_io

    hashed = _many_papers_shards(tmp_path / "hashed")
    expected = S2orcReader(hashed, metadata_path=tmp_path / "hashed.parquet").parts(papers_per_part=3)
    shards = _many_papers_shards(tmp_path / "shards")
    gz = shards / "s2orc" / "shard-001.jsonl.gz"
    entry = {"size": gz.stat().st_size, "sha256": hashlib.sha256(gz.read_bytes()).hexdigest(),
             "mtime_ns": gz.stat().st_mtime_ns}
    (shards / s2_api.MANIFEST_NAME).write_text(json.dumps({"release": "r", "s2orc": {gz.name: entry}}))
    (shards / "s2orc" / "shard-000.jsonl").unlink()  # a shard without a manifest entry would be hashed: left out here
    def no_hashing(*args):
        raise RuntimeError("a shard was hashed")

    monkeypatch.setattr(ratio_io, "_HashingReader", no_hashing)
    reader = S2orcReader(shards, metadata_path=tmp_path / "meta.parquet")
    parts = reader.parts(papers_per_part=3)
    assert [(p.lines, p.offset, p.digests) for p in parts] == [(p.lines, p.offset, p.digests) for p in expected[2:]]
    # the shard rewritten after the download (same bytes, new mtime): its recorded digest is not trusted
    (gz.parent / f"{gz.name}{ratio_io.LINE_INDEX_SUFFIX}").unlink()
    gz.write_bytes(gz.read_bytes())
    with pytest.raises(RuntimeError, match="hashed"):
        reader.parts(papers_per_part=3)


def test_a_part_never_builds_the_papers_metadata(tmp_path):
    shards = _many_papers_shards(tmp_path / "shards")
    reader = S2orcReader(shards, metadata_path=tmp_path / "meta.parquet")
    part = reader.parts(papers_per_part=3)[0]
    with pytest.raises(RuntimeError, match="prepare"):
        list(reader.read_part(part, IngestLog()))
    assert not (tmp_path / "meta.parquet").exists()  # on Dask, every task would have streamed all `papers` shards
    reader.prepare()
    assert [p.paper_id for p in reader.read_part(part, IngestLog())] == ["1001"]


def test_a_file_in_a_read_only_folder_is_indexed_without_keeping_the_index(tmp_path, monkeypatch):
    from ratio_utils import io as ratio_io

    path = tmp_path / "papers.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 22}\n')

    def read_only(target):
        raise PermissionError(f"read-only: {target}")

    monkeypatch.setattr(ratio_io, "atomic_path", read_only)
    index = ratio_io.line_index(path)
    assert index.offsets.tolist() == [0, 9, 10] and index.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert list(tmp_path.iterdir()) == [path]
