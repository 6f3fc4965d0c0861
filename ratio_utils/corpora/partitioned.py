"""Stage 00, partitioned: each input part is read, split, cleaned and written on its own (`corpus.papers_per_part`).

For part i (in reader order, then the reader's own order), `cfg.paths.sentences/part-i.parquet` and
`cfg.paths.papers/part-i.parquet` hold its rows and `cfg.paths.corpus_parts/part-i.json` its report
(reader counts, cleaning counts, statistics, quarantined records, duplicates, the ids it read) and its
key. A part is a run of files, or a range of lines of one JSONL file or S2ORC shard (read from the line
index kept beside the file, which also holds the file's SHA-256). Before any part, each reader's
`prepare` runs once here (S2ORC: the selected `papers` metadata). A part's tables are written batch by
batch (`WRITE_BATCH_PAPERS`) into temporary files renamed when the part is complete; its report is
written last, so it marks a finished part; a rerun skips every part whose report carries the same key
(resume after a crash) and redoes the rest.

Deduplication crosses parts (a paper whose id an earlier paper had is left out), so a part depends on
the ids of the parts before it:
- `engine: local` builds the parts one after another, carrying the ids seen so far; a part's key hashes
  its input files (SHA-256), its line range, the corpus params and the previous part's key (a chain);
- `engine: dask` builds every part in parallel leaving out nothing from other parts (one read per part;
  its report lists the ids it read), then rebuilds, leaving them out, only the parts holding a paper an
  earlier part had; a part's key hashes its inputs, the params and the ids it left out, so a resumed run
  rebuilds only the parts not finished with the ids that the finished ones name.
Both write the same parts (tests/test_corpus_parts.py).

Peak memory per process: one batch of papers and spaCy, plus (driver) the ids of the papers. The run
report sums the part reports; the tables equal the single-file build's, row for row.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..config import Config
from ..io import InputError, ParquetStream, sha256_file, write_json_atomic, write_text_atomic
from ..param_sections import EXECUTION_SETTINGS, CorpusParams
from ..parts import part_path, remove_parts_from, reset_table
from ..text import CleaningCounts, SentenceCleaner, SentenceSplitter
from .base import CorpusReader, IngestLog, InputPart
from .registry import make_readers
from .steps import (
    CorpusBuild,
    admit_papers,
    corpus_statistics,
    papers_frame,
    sentences_frame,
    split_unsplit,
    valid_paper,
)

COUNT_COLUMNS = ("papers", "paragraphs", "sentences", "sentences_kept", "pairs", "pairs_kept")


class _FileHashes:
    """SHA-256 of each input file, computed once per run (a JSONL file serves many parts)."""

    def __init__(self):
        self._known: dict[str, str] = {}

    def of(self, part: InputPart) -> "_FileHashes":
        """Itself, knowing the digests the part's reader took from its line index (no file hashed again)."""
        for path, digest in zip(part.files, part.digests or ()):
            self._known.setdefault(path, digest)
        return self

    def __call__(self, path: str) -> str:
        if path not in self._known:
            self._known[path] = sha256_file(path)
        return self._known[path]


# Rules added after parts were built: left off (None), they are not in the key, so those parts stay valid.
SWITCHES_OFF_BY_DEFAULT = {"min_word_token_ratio"}


def part_key(part: InputPart, params: CorpusParams, previous: str, hashes: Callable[[str], str]) -> str:
    settings = {k: v for k, v in asdict(params).items()
                if k not in EXECUTION_SETTINGS and not (k in SWITCHES_OFF_BY_DEFAULT and v is None)}
    record = {
        "previous": previous, "corpus": part.corpus, "lines": part.lines, "params": settings,
        "files": [[Path(f).name, hashes(f)] for f in part.files],
    }  # fmt: skip
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


_SPLITTERS = threading.local()


def _splitter() -> SentenceSplitter:
    """One spaCy pipeline per thread (and so per Dask worker), loaded once, reused by every part."""
    if getattr(_SPLITTERS, "splitter", None) is None:
        _SPLITTERS.splitter = SentenceSplitter()
    return _SPLITTERS.splitter


def build_part(papers, params: CorpusParams, log: IngestLog) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(papers table, sentence table, cleaning counts per corpus) of a batch of one part's admitted papers."""
    split_unsplit(papers, _splitter(), log, progress=False)
    papers = [p for p in papers if valid_paper(p, log)]
    cleaning: dict[str, CleaningCounts] = {}
    return papers_frame(papers), sentences_frame(papers, SentenceCleaner(params.cleaning_rules()), cleaning,
                                                 progress=False), cleaning


WRITE_BATCH_PAPERS = 500  # papers split, cleaned and written together: a part's memory is one batch, not the part


@dataclass(frozen=True)
class PartOutputs:
    """Where part `index` goes (plain paths: the task may run on a Dask worker)."""

    index: int
    papers: Path
    sentences: Path
    report: Path

    @classmethod
    def of(cls, cfg: Config, index: int) -> "PartOutputs":
        return cls(index, part_path(cfg.paths.papers, index), part_path(cfg.paths.sentences, index),
                   cfg.paths.corpus_parts / f"part-{index:05d}.json")

    def finished(self, key: str, field: str = "key") -> dict | None:
        """The part's report if it was finished with this key (or, `field="input_key"`, from these inputs
        whatever it left out), and its tables are there; else None."""
        if not (self.report.exists() and self.papers.exists() and self.sentences.exists()):
            return None
        done = json.loads(self.report.read_text())
        return done if done.get(field) == key else None


def build_and_write_part(reader: CorpusReader, part: InputPart, outputs: PartOutputs, key: str, params: CorpusParams,
                         seen: dict[str, str], input_key: str = "") -> dict:
    """Read, dedupe (against `seen`: id -> corpus of papers already admitted; updated), split, clean and
    write one part, streaming `WRITE_BATCH_PAPERS` papers at a time into its tables; its report (with the
    ids of the valid papers it read, for deduplication across parts) is written last and returned."""
    log = IngestLog(strict=params.strict)
    dedup: dict[str, list[str]] = defaultdict(list)
    ids_read: list[str] = []
    admitted = admit_papers(reader.read_part(part, log), reader.corpus, seen, dedup, log, read_ids=ids_read)
    cleaning: dict[str, CleaningCounts] = {}
    statistics: list[list[dict]] = []
    per_year: dict[str, Counter] = defaultdict(Counter)
    papers_read = papers_written = 0
    with contextlib.ExitStack() as stack:
        papers_out = stack.enter_context(ParquetStream(outputs.papers))
        sentences_out = stack.enter_context(ParquetStream(outputs.sentences))
        while True:  # at least one batch, possibly empty: its frames give an empty part its columns
            batch = list(itertools.islice(admitted, WRITE_BATCH_PAPERS))
            papers_read += len(batch)
            paper_table, sentences, batch_cleaning = build_part(batch, params, log)
            for corpus, counts in batch_cleaning.items():
                cleaning.setdefault(corpus, CleaningCounts()).merge(counts)
            if len(paper_table):
                papers_out.write(paper_table)
                sentences_out.write(sentences)
                papers_written += len(paper_table)
                statistics.append(corpus_statistics(paper_table, sentences).to_dict(orient="records"))
                for corpus, years in paper_table.groupby("corpus")["year"]:
                    per_year[corpus].update(int(y) for y in years)
            if len(batch) < WRITE_BATCH_PAPERS:
                break
        if papers_written == 0:  # an empty part still has both tables, with their columns
            papers_out.write(paper_table)
            sentences_out.write(sentences)
    report = {
        "key": key, "input_key": input_key, "part": part.describe(), "papers_read": papers_read,
        "papers_written": papers_written, "ids_read": ids_read, "deduplicated": dict(dedup),
        "reader_counts": {corpus: dict(c) for corpus, c in log.counts.items()},
        "quarantined": [r for records in log.quarantined.values() for r in records],
        "cleaning": {corpus: counts.to_dict() for corpus, counts in cleaning.items()},
        "statistics": combine_statistics(statistics),
        "papers_per_year": {c: dict(years) for c, years in per_year.items()},
    }  # fmt: skip
    write_json_atomic(outputs.report, report)  # last: marks the part finished
    return report


def _build_locally(cfg: Config, params: CorpusParams,
                   jobs: list[tuple[CorpusReader, InputPart]]) -> tuple[list[dict], int]:
    """Parts one after another; keys chained, `seen` carried from part to part."""
    hashes = _FileHashes()
    seen: dict[str, str] = {}
    key, skipped, reports = "", 0, []
    for index, (reader, part) in enumerate(tqdm(jobs, desc="corpus parts", unit="part", disable=not params.progress)):
        key = part_key(part, params, key, hashes.of(part))
        outputs = PartOutputs.of(cfg, index)
        done = outputs.finished(key)
        if done is not None:
            skipped += 1
            ids = pd.read_parquet(outputs.papers, columns=["paper_id", "corpus"])
            seen.update(zip(ids["paper_id"], ids["corpus"].astype(str)))
            reports.append(done)
            continue
        reports.append(build_and_write_part(reader, part, outputs, key, params, seen))
    return reports, skipped


def earlier_ids(ids_per_part: list[list[str]], corpora: list[str]) -> list[dict[str, str]]:
    """For each part, the ids of its valid papers that a valid paper of an earlier part already had (id ->
    that paper's corpus): exactly the `seen` entries the one-after-another build would consult for the part."""
    first: dict[str, tuple[int, str]] = {}
    per_part = []
    for index, (ids, corpus) in enumerate(zip(ids_per_part, corpora)):
        per_part.append({pid: first[pid][1] for pid in ids if pid in first and first[pid][0] < index})
        for pid in ids:
            first.setdefault(pid, (index, corpus))
    return per_part


def exclusion_key(input_key: str, excluded: dict[str, str]) -> str:
    """A Dask-built part's key: its inputs' key and the ids it left out as papers of earlier parts."""
    return hashlib.sha256(f"{input_key}|{json.dumps(sorted(excluded.items()))}".encode()).hexdigest()


def _build_on_dask(cfg: Config, params: CorpusParams, jobs: list[tuple[CorpusReader, InputPart]],
                   client=None) -> tuple[list[dict], int]:
    """One task per part, each part read once: every part is first built leaving out nothing from other parts
    (its report brings the ids it read); then the parts that hold a paper an earlier part already had (few:
    papers in two sources, a paper in two shards) are built again leaving those out. A part's key hashes its
    inputs, the params and the ids it left out, so a resumed run rebuilds exactly the parts that are not
    finished with the ids the finished ones name, and reads nothing else."""
    from dask.distributed import as_completed

    from ..cluster import dask_client

    hashes = _FileHashes()
    input_keys = [part_key(part, params, "", hashes.of(part)) for _, part in jobs]
    outputs = [PartOutputs.of(cfg, index) for index in range(len(jobs))]
    reports: list[dict | None] = [o.finished(k, field="input_key") for o, k in zip(outputs, input_keys)]
    built: set[int] = set()
    with dask_client(params.dask_scheduler, params.dask_workers, params.dask_processes, client) as client:
        def run(excluded: dict[int, dict[str, str]]) -> None:
            futures = {client.submit(build_and_write_part, jobs[i][0], jobs[i][1], outputs[i],
                                     exclusion_key(input_keys[i], seen),
                                     params, dict(seen), input_keys[i], pure=False): i
                       for i, seen in excluded.items()}
            for future in tqdm(as_completed(futures), total=len(futures), desc="corpus parts", unit="part",
                               disable=not params.progress):
                reports[futures[future]] = future.result()
                built.add(futures[future])

        run({i: {} for i, report in enumerate(reports) if report is None})
        excluded = earlier_ids([report["ids_read"] for report in reports], [reader.corpus for reader, _ in jobs])
        run({i: seen for i, seen in enumerate(excluded) if reports[i]["key"] != exclusion_key(input_keys[i], seen)})
    return reports, len(jobs) - len(built)


def build_corpus_parts(cfg: Config, params: CorpusParams, write: bool = True, client=None) -> CorpusBuild:
    """The partitioned build; the run report sums the part reports (see the module docstring)."""
    if not write:
        raise ValueError("a partitioned build writes its parts (write=False is for the single-file build)")
    started = time.perf_counter()
    readers = make_readers(cfg, params)
    for reader in readers:
        reader.prepare()  # once, here: never by tasks racing each other
    for table in (cfg.paths.papers, cfg.paths.sentences):
        reset_table(table, partitioned=True)
    jobs = [(reader, part) for reader in readers for part in reader.parts(params.papers_per_part)]
    if params.engine == "dask" or client is not None:
        reports, skipped = _build_on_dask(cfg, params, jobs, client)
    else:
        reports, skipped = _build_locally(cfg, params, jobs)
    index = len(jobs)
    remove_parts_from(cfg.paths.sentences, index)
    remove_parts_from(cfg.paths.papers, index)
    for stale in sorted(cfg.paths.corpus_parts.glob("part-*.json"))[index:]:
        stale.unlink()
    report = combine_part_reports(reports, params, [r.corpus for r in readers])
    if report["papers_written"] == 0:
        raise InputError(", ".join(r.corpus for r in readers), "no valid paper in any source")
    report["parts"] = {"total": index, "skipped_unchanged": skipped, "built": index - skipped}
    report["seconds"] = round(time.perf_counter() - started, 1)
    quarantine_dir = cfg.paths.quarantine
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
