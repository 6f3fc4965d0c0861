"""Reader of downloaded S2ORC shards (source `s2orc`; the paper's corpus).

`papers` records give year, publication date, venue, title and fields of study; `s2orc` records
give `content.text` with `content.annotations`, whose values are JSON-encoded span lists
(`paragraph`, `sectionheader`, `abstract`, `bibref`, ...). Papers of the configured fields of
study published from `min_year` on are kept (default: Computer Science, 2015).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..io import iter_jsonl
from .base import IngestLog, Paper, S2orcParams, _quarantine_error, back_matter_kind


def default_download_dir(params: S2orcParams, cfg: Config) -> Path:
    if params.download_dir:
        return Path(params.download_dir).expanduser()
    return cfg.paths.raw / "downloads" / "s2orc" / params.release


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


def s2orc_paragraphs(obj: dict) -> tuple[list[str], list[str], Counter]:
    """Paragraph texts in reading order with their section heading, from one `s2orc` record.

    Abstract spans come first, then `paragraph` spans by start offset; a paragraph takes the last
    section header that starts before it; paragraphs under back-matter headings are dropped.
    """
    content = obj.get("content") or {}
    text = content.get("text")
    if not isinstance(text, str):
        raise TypeError("content.text is not a string")
    annotations = content.get("annotations") or {}
    counts: Counter = Counter()
    headers = sorted((int(h["start"]), text[int(h["start"]):int(h["end"])].strip()) for h in annotation_spans(annotations, "sectionheader"))
    paragraphs, sections = [], []
    abstract = sorted((int(a["start"]), int(a["end"])) for a in annotation_spans(annotations, "abstract"))
    for start, end in abstract:
        chunk = text[start:end].strip()
        if chunk:
            paragraphs.append(chunk)
            sections.append("Abstract")
    header_index = 0
    current = ""
    for span in sorted(annotation_spans(annotations, "paragraph"), key=lambda s: int(s["start"])):
        start, end = int(span["start"]), int(span["end"])
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
    counts["bibref_spans"] += len(annotation_spans(annotations, "bibref"))
    return paragraphs, sections, counts


def _iter_shard(path: Path, corpus: str, log: IngestLog) -> Iterator[tuple[int, dict]]:
    return iter_jsonl(path, required=("corpusid",), on_error=lambda e: _quarantine_error(log, corpus, e))


class S2orcReader:
    """Papers from downloaded `papers` and `s2orc` shards (`<dir>/papers/*`, `<dir>/s2orc/*`)."""

    corpus = "s2orc"

    def __init__(self, shard_dir: "str | Path", fields_of_study=("Computer Science",), min_year: int = 2015,
                 shard_limit: int | None = None, release: str = ""):
        self.shard_dir = Path(shard_dir)
        self.fields_of_study = set(fields_of_study)
        self.min_year = min_year
        self.shard_limit = shard_limit
        self.release = release
        for sub in ("papers", "s2orc"):
            if not (self.shard_dir / sub).is_dir():
                raise FileNotFoundError(
                    f"S2ORC shards not found in {self.shard_dir / sub}; download them first: "
                    f"S2_API_KEY=... python -m ratio_utils.s2orc --params <params file>"
                )

    @classmethod
    def from_params(cls, params: S2orcParams, cfg: Config) -> "S2orcReader":
        return cls(default_download_dir(params, cfg), params.fields_of_study, params.min_year, params.shard_limit, params.release)

    def _shards(self, dataset: str) -> list[Path]:
        shards = sorted(p for p in (self.shard_dir / dataset).iterdir() if p.is_file() and not p.name.endswith(".part"))
        return shards[: self.shard_limit] if self.shard_limit is not None else shards

    def metadata(self, log: IngestLog) -> dict[str, PaperMeta]:
        """corpusid -> metadata of papers in the wanted fields of study and years."""
        keep: dict[str, PaperMeta] = {}
        for shard in self._shards("papers"):
            for lineno, obj in _iter_shard(shard, self.corpus, log):
                try:
                    meta = parse_papers_record(obj)
                except (TypeError, ValueError) as exc:
                    log.quarantine(self.corpus, "wrong_type", shard, lineno, detail=str(exc))
                    continue
                log.count(self.corpus, "papers_records")
                if not self.fields_of_study & set(meta.fields_of_study):
                    log.count(self.corpus, "papers_other_field")
                    continue
                if meta.year is None:
                    log.count(self.corpus, "papers_without_year")
                    continue
                if meta.year < self.min_year:
                    log.count(self.corpus, "papers_before_min_year")
                    continue
                keep[meta.corpusid] = meta
        return keep

    def papers(self, log: IngestLog) -> Iterator[Paper]:
        wanted = self.metadata(log)
        for shard in self._shards("s2orc"):
            for lineno, obj in _iter_shard(shard, self.corpus, log):
                corpusid = str(obj["corpusid"])
                log.count(self.corpus, "s2orc_records")
                meta = wanted.get(corpusid)
                if meta is None:
                    log.count(self.corpus, "s2orc_records_not_selected")
                    continue
                try:
                    paragraphs, sections, counts = s2orc_paragraphs(obj)
                except (TypeError, ValueError, KeyError, json.JSONDecodeError) as exc:
                    log.quarantine(self.corpus, "wrong_type", shard, lineno, paper_id=corpusid, detail=f"{type(exc).__name__}: {exc}")
                    continue
                for key, n in counts.items():
                    log.count(self.corpus, key, n)
                yield Paper(corpusid, self.corpus, meta.title, meta.year, meta.date, meta.venue,
                            f"S2ORC {self.release}:{shard.name}:{lineno}", [[p] for p in paragraphs],
                            sentences_split=False, paragraph_kinds=["paragraph"] * len(paragraphs), paragraph_sections=sections,
                            origin_file=str(shard), origin_line=lineno)


