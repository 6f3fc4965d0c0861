"""Stage 00, partitioned: each input part is read, split, cleaned and written on its own (`corpus.papers_per_part`).

For part i (in reader order, then the reader's own order), `cfg.paths.sentences/part-i.parquet` and
`cfg.paths.papers/part-i.parquet` hold its rows and `cfg.paths.corpus_parts/part-i.json` its report
(reader counts, cleaning counts, statistics, quarantined records, duplicates) and its key: a hash of
the part's input files (SHA-256), its line range, the corpus params and the previous part's key. The
report is written last, so it marks a finished part; a rerun skips every part whose report carries the
same key (resume after a crash) and redoes the rest. Chaining the keys keeps cross-corpus
deduplication exact: a part depends on the ids of every part before it.

Peak memory: one part's papers, plus the ids of the papers already written (for deduplication). The
run report sums the part reports; the tables equal the single-file build's, row for row
(tests/test_corpus_parts.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

import pandas as pd
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..config import Config
from ..io import InputError, sha256_file, write_json_atomic, write_parquet_atomic, write_text_atomic
from ..parts import part_path, remove_parts_from, reset_table
from ..text import CleaningCounts, SentenceCleaner, SentenceSplitter
from .base import CorpusParams, IngestLog, InputPart
from .build import CorpusBuild, _valid_paper, admit_papers, corpus_statistics, papers_frame, sentences_frame, split_unsplit
from .registry import make_readers

COUNT_COLUMNS = ("papers", "paragraphs", "sentences", "sentences_kept", "pairs", "pairs_kept")


class _FileHashes:
    """SHA-256 of each input file, computed once per run (a JSONL file serves many parts)."""

    def __init__(self):
        self._known: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        if path not in self._known:
            self._known[path] = sha256_file(path)
        return self._known[path]


def part_key(part: InputPart, params: CorpusParams, previous: str, hashes: _FileHashes) -> str:
    settings = {k: v for k, v in asdict(params).items() if k != "progress"}
    record = {
        "previous": previous, "corpus": part.corpus, "lines": part.lines, "params": settings,
        "files": [[Path(f).name, hashes(f)] for f in part.files],
    }  # fmt: skip
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def build_part(papers, params: CorpusParams, log: IngestLog, splitter: SentenceSplitter, cleaner: SentenceCleaner) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(papers table, sentence table, cleaning counts per corpus) of one part's admitted papers."""
    split_unsplit(papers, splitter, log, progress=False)
    papers = [p for p in papers if _valid_paper(p, log)]
    cleaning: dict[str, CleaningCounts] = {}
    return papers_frame(papers), sentences_frame(papers, cleaner, cleaning, progress=False), cleaning


def build_corpus_parts(cfg: Config, params: CorpusParams, write: bool = True) -> CorpusBuild:
    """The partitioned build; the run report sums the part reports (see the module docstring)."""
    if not write:
        raise ValueError("a partitioned build writes its parts (write=False is for the single-file build)")
    started = time.perf_counter()
    readers = make_readers(cfg, params)
    for table in (cfg.paths.papers, cfg.paths.sentences):
        reset_table(table, partitioned=True)
    splitter, cleaner = SentenceSplitter(), SentenceCleaner(params.cleaning_rules())
    hashes = _FileHashes()
    seen: dict[str, str] = {}
    key, index, skipped = "", 0, 0
    reports: list[dict] = []
    for reader in readers:
        parts = reader.parts(params.papers_per_part)
        for part in tqdm(parts, desc=f"parts of {reader.corpus}", unit="part", disable=not params.progress):
            key = part_key(part, params, key, hashes)
            report_path = cfg.paths.corpus_parts / f"part-{index:05d}.json"
            done = json.loads(report_path.read_text()) if report_path.exists() else None
            if done is not None and done["key"] == key and all(part_path(t, index).exists() for t in (cfg.paths.papers, cfg.paths.sentences)):
                skipped += 1
                ids = pd.read_parquet(part_path(cfg.paths.papers, index), columns=["paper_id", "corpus"])
                seen.update(zip(ids["paper_id"], ids["corpus"].astype(str)))
                reports.append(done)
                index += 1
                continue
            log = IngestLog(strict=params.strict)
            dedup: dict[str, list[str]] = defaultdict(list)
            admitted = list(admit_papers(reader.read_part(part, log), reader.corpus, seen, dedup, log))
            paper_table, sentences, cleaning = build_part(admitted, params, log, splitter, cleaner)
            write_parquet_atomic(sentences, part_path(cfg.paths.sentences, index))
            write_parquet_atomic(paper_table, part_path(cfg.paths.papers, index))
            report = {
                "key": key, "part": part.describe(), "papers_read": len(admitted), "papers_written": len(paper_table),
                "deduplicated": dict(dedup),
                "reader_counts": {corpus: dict(c) for corpus, c in log.counts.items()},
                "quarantined": [r for records in log.quarantined.values() for r in records],
                "cleaning": {corpus: counts.to_dict() for corpus, counts in cleaning.items()},
                "statistics": corpus_statistics(paper_table, sentences).to_dict(orient="records") if len(paper_table) else [],
                "papers_per_year": {c: {int(y): int(n) for y, n in g["year"].value_counts().items()} for c, g in paper_table.groupby("corpus")},
            }  # fmt: skip
            write_json_atomic(report_path, report)  # last: marks the part finished
            reports.append(report)
            index += 1
    remove_parts_from(cfg.paths.sentences, index)
    remove_parts_from(cfg.paths.papers, index)
    for stale in sorted(cfg.paths.corpus_parts.glob("part-*.json"))[index:]:
        stale.unlink()
    report = combine_part_reports(reports, params, [r.corpus for r in readers])
    if report["papers_written"] == 0:
        raise InputError(", ".join(r.corpus for r in readers), "no valid paper in any source")
    report["parts"] = {"total": index, "skipped_unchanged": skipped, "built": index - skipped}
    report["seconds"] = round(time.perf_counter() - started, 1)
    quarantine_dir = cfg.paths.interim / "quarantine"
    for reader in readers:
        records = [r for part in reports for r in part["quarantined"] if r["corpus"] == reader.corpus]
        write_text_atomic(quarantine_dir / f"{reader.corpus}.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    report["outputs"] = {"papers": str(cfg.paths.papers), "sentences": str(cfg.paths.sentences),
                         "parts": str(cfg.paths.corpus_parts), "quarantine_dir": str(quarantine_dir)}
    write_json_atomic(cfg.paths.corpus_report, report)
    return CorpusBuild(None, None, report, pd.DataFrame(report["statistics"]))


def combine_part_reports(reports: list[dict], params: CorpusParams, sources: list[str]) -> dict:
    """The run report of a partitioned build, in the single-file build's layout (sums over parts)."""
    reader_counts: dict[str, Counter] = defaultdict(Counter)
    cleaning: dict[str, CleaningCounts] = {}
    dedup: dict[str, list[str]] = defaultdict(list)
    per_year: dict[str, Counter] = defaultdict(Counter)
    quarantine: dict[str, Counter] = {source: Counter() for source in sources}
    for part in reports:
        for corpus, counts in part["reader_counts"].items():
            reader_counts[corpus].update(counts)
        for corpus, counts in part["cleaning"].items():
            cleaning.setdefault(corpus, CleaningCounts()).merge(
                CleaningCounts(counts["sentences"], Counter(counts["edits"]), Counter(counts["drops"])))
        for key, ids in part["deduplicated"].items():
            dedup[key].extend(ids)
        for corpus, years in part["papers_per_year"].items():
            per_year[corpus].update({int(y): n for y, n in years.items()})
        for record in part["quarantined"]:
            quarantine.setdefault(record["corpus"], Counter())[record["reason"]] += 1
    total = CleaningCounts()
    for counts in cleaning.values():
        total.merge(counts)
    papers_read = sum(p["papers_read"] for p in reports)
    return {
        "params": asdict(params),
        "sources": sources,
        "papers_read": papers_read,
        "papers_written": sum(p["papers_written"] for p in reports),
        "sampled": False,
        "deduplicated": {key: {"count": len(ids), "paper_ids": sorted(ids)} for key, ids in dedup.items()},
        "reader_counts": {corpus: dict(sorted(c.items())) for corpus, c in reader_counts.items()},
        "quarantine": {corpus: dict(c) for corpus, c in quarantine.items()},
        "cleaning": {corpus: cleaning[corpus].to_dict() for corpus in sorted(cleaning)} | {"all": total.to_dict()},
        "statistics": combine_statistics([p["statistics"] for p in reports]),
        "papers_per_year": {corpus: dict(sorted(years.items())) for corpus, years in sorted(per_year.items())},
    }


def combine_statistics(per_part: list[list[dict]]) -> list[dict]:
    """Corpus statistics rows summed over parts (counts added, first/last year as min/max); 'all' last."""
    rows = pd.DataFrame([row for rows in per_part for row in rows])
    if rows.empty:
        return []
    aggregations = {c: "sum" for c in COUNT_COLUMNS} | {"first_year": "min", "last_year": "max"}
    named = rows[rows["corpus"] != "all"].groupby("corpus", sort=True).agg(aggregations).reset_index()
    total = rows[rows["corpus"] == "all"].agg(aggregations).to_frame().T.assign(corpus="all")
    frame = pd.concat([named, total[named.columns]], ignore_index=True)
    return [{k: (v if k == "corpus" else int(v)) for k, v in row.items()} for row in frame.to_dict(orient="records")]
