"""Reader of downloaded S2ORC shards (source `s2orc`; the paper's corpus).

`papers` records give year, publication date, venue, title and fields of study. Full-text records
come in two layouts, told apart per record: `s2orc` (`content.text`, `content.annotations` with
`sectionheader`) and `s2orc_v2` (`body.text`, `body.annotations` with `section_header`); annotation
values are span lists, JSON-encoded or not (`paragraph`, `abstract`, `bibref`/`bib_ref`, ...).

Selection (S2orcParams): papers of the configured fields of study whose `publicationdate` is on or
after `min_date`, papers without one dropped (the paper's rule; `selection: year` keeps `year >=
min_year` instead), `paragraph` spans only (`abstract_spans: true` puts the abstract first).
Duplicated spans (the same start and end twice, seen in real records) are kept once and counted.

Memory: the selected `papers` metadata is written once (`prepare`, on the driver of a parallel build)
to a parquet file (`metadata_path`) in bounded batches; each part then looks up only its own corpus ids
in it, so nothing holds the metadata of every paper. In a partitioned build a part is a range of
`papers_per_part` records of one full-text shard; each shard's line index (`<shard>.lines.npz` beside
it: where each record starts, and the shard's SHA-256) is built once, so a part seeks to its first record
and a resumed run neither rereads nor rehashes a shard.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..io import LINE_INDEX_SUFFIX, ParquetStream, iter_jsonl, iter_lines, write_json_atomic
from ..param_sections import S2orcParams
from .base import IngestLog, InputPart, Paper, _quarantine_error, back_matter_kind, line_parts


def default_download_dir(params: S2orcParams, cfg: Config) -> Path:
    if params.download_dir:
        return Path(params.download_dir).expanduser()
    return cfg.paths.downloads / "s2orc" / params.release


# --- shard parsing -----------------------------------------------------------------------------------------


def annotation_spans(annotations: dict | None, name: str) -> list[dict]:
    """The span list of one annotation type; values are JSON-encoded strings (or null)."""
    value = (annotations or {}).get(name)
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list):
        raise TypeError(f"annotation {name!r} is not a list of spans")
    return value


@dataclass(frozen=True)
class PaperMeta:
    corpusid: str
    title: str | None
    year: int | None
    date: str | None
    venue: str | None
    fields_of_study: tuple[str, ...]


def parse_papers_record(obj: dict) -> PaperMeta:
    fields = obj.get("s2fieldsofstudy") or []
    categories = tuple(sorted({f.get("category") for f in fields if isinstance(f, dict) and f.get("category")}))
    year = obj.get("year")
    return PaperMeta(str(obj["corpusid"]), obj.get("title"), int(year) if isinstance(year, int) else None,
                     obj.get("publicationdate"), obj.get("venue") or None, categories)


def unique_spans(spans: list[dict], counts: Counter, name: str) -> list[tuple[int, int]]:
    """(start, end) of each span, sorted, each distinct span once; repeats are counted."""
    pairs = [(int(s["start"]), int(s["end"])) for s in spans]
    unique = sorted(set(pairs))
    if len(unique) < len(pairs):
        counts[f"duplicate_{name}_spans_removed"] += len(pairs) - len(unique)
    return unique


def record_text(obj: dict) -> tuple[str, dict, str]:
    """(text, annotations, layout) of a full-text record in the `s2orc` or the `s2orc_v2` layout."""
    if isinstance(obj.get("body"), dict):
        layout, part = "s2orc_v2", obj["body"]
    else:
        layout, part = "s2orc", obj.get("content") or {}
    text = part.get("text")
    if not isinstance(text, str):
        raise TypeError(f"{'body' if layout == 's2orc_v2' else 'content'}.text is not a string")
    return text, part.get("annotations") or {}, layout


def s2orc_paragraphs(obj: dict, abstract_spans: bool = True) -> tuple[list[str], list[str], Counter]:
    """Paragraph texts in reading order with their section heading, from one full-text record.

    With `abstract_spans`, abstract spans come first; then `paragraph` spans by start offset; a
    paragraph takes the last section header that starts before it; paragraphs under back-matter
    headings are dropped. Each annotation's duplicated spans are removed (counted).
    """
    text, annotations, layout = record_text(obj)
    counts: Counter = Counter({f"records_{layout}": 1})
    header_key = "section_header" if layout == "s2orc_v2" else "sectionheader"
    headers = [(start, text[start:end].strip())
               for start, end in unique_spans(annotation_spans(annotations, header_key), counts, "header")]
    paragraphs, sections = [], []
    abstract = unique_spans(annotation_spans(annotations, "abstract"), counts, "abstract") if abstract_spans else []
    for start, end in abstract:
        chunk = text[start:end].strip()
        if chunk:
            paragraphs.append(chunk)
            sections.append("Abstract")
    header_index = 0
    current = ""
    for start, end in unique_spans(annotation_spans(annotations, "paragraph"), counts, "paragraph"):
        if any(a <= start < b for a, b in abstract):
            counts["paragraphs_inside_abstract"] += 1
            continue
        while header_index < len(headers) and headers[header_index][0] <= start:
            current = headers[header_index][1]
            header_index += 1
        back = back_matter_kind(current)
        if back:
            counts[f"paragraphs_dropped_{back}"] += 1
            continue
        chunk = text[start:end].strip()
        if chunk:
            paragraphs.append(chunk)
            sections.append(current)
    counts["bibref_spans"] += len(annotation_spans(annotations, "bib_ref" if layout == "s2orc_v2" else "bibref"))
    return paragraphs, sections, counts


def _iter_shard(path: Path, corpus: str, log: IngestLog, lines: tuple[int, int] | None = None,
                offset: int | None = None) -> Iterator[tuple[int, dict]]:
    return iter_jsonl(path, required=("corpusid",), on_error=lambda e: _quarantine_error(log, corpus, e), lines=lines,
                      offset=offset)


_CORPUSID = re.compile(rb'"corpusid"\s*:\s*"?(\d+)')
META_COLUMNS = ("corpusid", "title", "year", "date", "venue")


def _date(value) -> _dt.date | None:
    try:
        return _dt.date.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


MANIFEST_NAME = "manifest.json"  # in the download folder: dataset -> shard name -> {size, sha256, mtime_ns}


def verified_unchanged(target: Path, entry: dict) -> bool:
    """Whether `target` is the file the manifest entry recorded after verifying it (same size and mtime):
    a finished shard is then trusted without hashing it again (hundreds of GB at the paper's size)."""
    if not (entry.get("sha256") and "mtime_ns" in entry and target.is_file()):
        return False
    stat = target.stat()
    return stat.st_size == entry.get("size") and stat.st_mtime_ns == entry["mtime_ns"]


class S2orcReader:
    """Papers from downloaded `papers` and full-text shards (`<dir>/papers/*`, `<dir>/s2orc/*` or
    `<dir>/s2orc_v2/*`)."""

    corpus = "s2orc"

    def __init__(self, shard_dir: "str | Path", fields_of_study=("Computer Science",), min_year: int = 2015,
                 shard_limit: int | None = None, release: str = "", *, selection: str = "publication_date",
                 min_date: str = "2015-01-01", abstract_spans: bool = False, text_dataset: str = "s2orc",
                 metadata_path: "str | Path | None" = None, params_file: str | None = None):
        self.shard_dir = Path(shard_dir)
        self.fields_of_study = set(fields_of_study)
        self.min_year = min_year
        self.shard_limit = shard_limit
        self.release = release
        self.selection = selection
        self.min_date = _dt.date.fromisoformat(min_date)
        self.abstract_spans = abstract_spans
        self.text_dataset = text_dataset
        self.metadata_path = Path(metadata_path) if metadata_path else self.shard_dir / "papers_selected.parquet"
        for sub in ("papers", text_dataset):
            if not (self.shard_dir / sub).is_dir():
                raise FileNotFoundError(
                    f"S2ORC shards not found in {self.shard_dir / sub}; download them first: "
                    f"S2_API_KEY=... python -m ratio_utils.corpora.s2_api --params {params_file or '<params file>'}"
                )

    @classmethod
    def from_params(cls, params: S2orcParams, cfg: Config) -> "S2orcReader":
        return cls(default_download_dir(params, cfg), params.fields_of_study, params.min_year, params.shard_limit,
                   params.release,
                   selection=params.selection, min_date=params.min_date, abstract_spans=params.abstract_spans,
                   text_dataset=params.text_dataset, metadata_path=cfg.paths.s2orc_selected_papers,
                   params_file=cfg.to_dict()["params_file"])

    def _shards(self, dataset: str) -> list[Path]:
        # not an unfinished download (.part) nor a shard's line index (.lines.npz)
        shards = sorted(p for p in (self.shard_dir / dataset).iterdir()
                        if p.is_file() and not p.name.endswith((".part", LINE_INDEX_SUFFIX)))
        return shards[: self.shard_limit] if self.shard_limit is not None else shards

    # -- the papers metadata, selected once and kept on disk --

    def _selected(self, meta: PaperMeta, log: IngestLog) -> bool:
        if not self.fields_of_study & set(meta.fields_of_study):
            log.count(self.corpus, "papers_other_field")
            return False
        if self.selection == "publication_date":
            date = _date(meta.date)
            if date is None:
                log.count(self.corpus, "papers_without_publication_date")
                return False
            if date < self.min_date:
                log.count(self.corpus, "papers_before_min_date")
                return False
            return True
        if meta.year is None:
            log.count(self.corpus, "papers_without_year")
            return False
        if meta.year < self.min_year:
            log.count(self.corpus, "papers_before_min_year")
            return False
        return True

    def _metadata_key(self) -> str:
        settings = {"fields": sorted(self.fields_of_study), "selection": self.selection,
                    "min_date": str(self.min_date),
                    "min_year": self.min_year,
                    "shards": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in self._shards("papers")]}
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

    def build_metadata(self, batch_rows: int = 200_000) -> dict:
        """Write the selected `papers` rows to `metadata_path` (streamed in batches); return its record
        (counts, quarantined lines). Reused while the papers shards and the selection are unchanged."""
        import pyarrow as pa

        record_path = self.metadata_path.with_suffix(".json")
        key = self._metadata_key()
        if self.metadata_path.exists() and record_path.exists():
            record = json.loads(record_path.read_text())
            if record["key"] == key:
                return record
        log = IngestLog()
        schema = pa.schema([(c, pa.int64() if c == "year" else pa.string()) for c in META_COLUMNS])
        rows: list[PaperMeta] = []
        with ParquetStream(self.metadata_path, schema) as writer:
            def flush():
                writer.write(pa.table({c: [getattr(m, c) for m in rows] for c in META_COLUMNS}, schema=schema))
                rows.clear()

            for shard in self._shards("papers"):
                for lineno, obj in _iter_shard(shard, self.corpus, log):
                    try:
                        meta = parse_papers_record(obj)
                    except (TypeError, ValueError) as exc:
                        log.quarantine(self.corpus, "wrong_type", shard, lineno, detail=str(exc))
                        continue
                    log.count(self.corpus, "papers_records")
                    if self._selected(meta, log):
                        rows.append(meta)
                        if len(rows) >= batch_rows:
                            flush()
            flush()
        record = {"key": key, "counts": dict(log.counts[self.corpus]),
                  "quarantined": log.quarantined.get(self.corpus, [])}
        write_json_atomic(record_path, record)
        return record

    def metadata(self, log: IngestLog) -> dict[str, PaperMeta]:
        """corpusid -> metadata of every selected paper (small corpora and tests; the reader itself looks ids up per
        shard)."""
        import pandas as pd

        self._replay(self.build_metadata(), log)
        frame = pd.read_parquet(self.metadata_path)
        return {row.corpusid: self._meta(row._asdict()) for row in frame.itertuples(index=False)}

    def _replay(self, record: dict, log: IngestLog) -> None:
        for key, n in record["counts"].items():
            log.count(self.corpus, key, n)
        for q in record["quarantined"]:
            log.quarantine(self.corpus, q["reason"], q["file"], q["line"], q["paper_id"], q["detail"])

    @staticmethod
    def _meta(row: dict) -> PaperMeta:
        year = row["year"]
        return PaperMeta(row["corpusid"], row["title"], None if year is None or year != year else int(year),
                         row["date"], row["venue"], ())

    def _shard_metadata(self, shard: Path, lines: tuple[int, int] | None = None,
                        offset: int | None = None) -> dict[str, PaperMeta]:
        """Metadata of the selected papers among the corpus ids of one full-text shard (or of its record range
        `lines`): a first, cheap pass reads only the ids; polars filters the metadata file on them."""
        import polars as pl

        ids = set()
        for _, raw in iter_lines(shard, lines, offset):
            # every "corpusid" of the line: a superset of the record's own id, whatever the key order
            ids.update(found.decode() for found in _CORPUSID.findall(raw))
        if not ids:
            return {}
        frame = pl.scan_parquet(self.metadata_path).filter(pl.col("corpusid").is_in(list(ids))).collect()
        return {row["corpusid"]: self._meta(row) for row in frame.iter_rows(named=True)}

    # -- papers --

    def prepare(self) -> None:
        """Select the `papers` metadata once (a parallel build calls this on its driver, before any task)."""
        self.build_metadata()

    def _built_metadata(self) -> dict:
        """The record of the selected metadata, which `prepare` must have written (parts never build it:
        tasks on many workers would each stream the whole `papers` dataset and race to rename one file)."""
        record_path = self.metadata_path.with_suffix(".json")
        if self.metadata_path.exists() and record_path.exists():
            record = json.loads(record_path.read_text())
            if record["key"] == self._metadata_key():
                return record
        raise RuntimeError(f"{self.metadata_path}: the selected S2ORC metadata is missing or stale; "
                           "the reader's prepare() builds it before any part is read")

    def parts(self, papers_per_part: int) -> list[InputPart]:
        """Ranges of `papers_per_part` records of each full-text shard (records, selected or not: the
        selection is known only when a part is read), from the shard's line index."""
        return [part for shard in self._shards(self.text_dataset)
                for part in line_parts(self.corpus, shard, papers_per_part, self._downloaded_sha256(shard))]

    def _downloaded_sha256(self, shard: Path) -> str | None:
        """The SHA-256 the downloader verified and recorded for this shard (`manifest.json` beside the dataset
        folders), while the file is the one it recorded (same size and mtime); else None (hash it)."""
        manifest = self.shard_dir / MANIFEST_NAME
        if not manifest.is_file():
            return None
        entry = json.loads(manifest.read_text()).get(shard.parent.name, {}).get(shard.name, {})
        return entry["sha256"] if verified_unchanged(shard, entry) else None

    def read_part(self, part: InputPart, log: IngestLog) -> Iterator[Paper]:
        record = self._built_metadata()
        shard = Path(part.files[0])
        if shard == self._shards(self.text_dataset)[0] and (part.lines is None or part.lines[0] == 1):
            self._replay(record, log)  # the papers-metadata counts, once per run: with the first part
        return self._papers_of(shard, log, part.lines, part.offset)

    def papers(self, log: IngestLog) -> Iterator[Paper]:
        self._replay(self.build_metadata(), log)
        for shard in self._shards(self.text_dataset):
            yield from self._papers_of(shard, log)

    def _papers_of(self, shard: Path, log: IngestLog, lines: tuple[int, int] | None = None,
                   offset: int | None = None) -> Iterator[Paper]:
        wanted = self._shard_metadata(shard, lines, offset)
        for lineno, obj in _iter_shard(shard, self.corpus, log, lines, offset):
            corpusid = str(obj["corpusid"])
            log.count(self.corpus, "s2orc_records")
            meta = wanted.get(corpusid)
            if meta is None:
                log.count(self.corpus, "s2orc_records_not_selected")
                continue
            try:
                paragraphs, sections, counts = s2orc_paragraphs(obj, self.abstract_spans)
            except (TypeError, ValueError, KeyError, json.JSONDecodeError) as exc:
                log.quarantine(self.corpus, "wrong_type", shard, lineno, paper_id=corpusid,
                               detail=f"{type(exc).__name__}: {exc}")
                continue
            for key, n in counts.items():
                log.count(self.corpus, key, n)
            yield Paper(corpusid, self.corpus, meta.title, meta.year, meta.date, meta.venue,
                        f"S2ORC {self.release}:{shard.name}:{lineno}", [[p] for p in paragraphs],
                        sentences_split=False, paragraph_kinds=["paragraph"] * len(paragraphs),
                        paragraph_sections=sections, origin_file=str(shard), origin_line=lineno)


