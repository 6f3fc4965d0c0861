"""Reader of the generic JSONL corpus format (docs/corpus_formats.md): one paper per line."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..io import iter_jsonl
from .base import IngestLog, InputPart, Paper, _quarantine_error, line_parts

# --- reader 3: the generic JSONL format (docs/corpus_formats.md) --------------------------------------------------


def _parse_date(value: Any) -> _dt.date | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("date must be an ISO string (YYYY-MM-DD, YYYY-MM or YYYY) or null")
    parts = value.strip().split("-")
    try:
        numbers = [int(p) for p in parts]
        return _dt.date(numbers[0], numbers[1] if len(numbers) > 1 else 1, numbers[2] if len(numbers) > 2 else 1)
    except (ValueError, IndexError):
        raise TypeError(f"date {value!r} is not an ISO date") from None


MIN_YEAR, MAX_YEAR = 1900, 2100


class JsonlReader:
    """One paper per line: paper_id, title, year, date, venue, source, paragraphs (see docs/corpus_formats.md).

    Bad lines (non-UTF-8 bytes, malformed JSON, not an object, missing or mistyped fields, no
    sentences, no year) are quarantined with file and line, or raise InputError in strict mode.
    """

    def __init__(self, path: "str | Path", corpus: str):
        self.path = Path(path)
        self.corpus = corpus
        if not self.path.exists():
            raise FileNotFoundError(f"JSONL corpus {corpus!r} not found: {self.path}")

    def prepare(self) -> None:
        pass

    def parts(self, papers_per_part: int) -> list[InputPart]:
        """Ranges of `papers_per_part` lines (one paper a line), from the file's line index."""
        return line_parts(self.corpus, self.path, papers_per_part)

    def read_part(self, part: InputPart, log: IngestLog) -> Iterator[Paper]:
        return self.papers(log, part.lines, part.offset)

    def papers(self, log: IngestLog, lines: tuple[int, int] | None = None,
               offset: int | None = None) -> Iterator[Paper]:
        records = iter_jsonl(self.path, required=("paper_id", "paragraphs"),
                             on_error=lambda e: _quarantine_error(log, self.corpus, e), lines=lines, offset=offset)
        for lineno, obj in records:
            paper = self.parse_record(obj, lineno, log)
            if paper is not None:
                yield paper

    def parse_record(self, obj: dict, lineno: int, log: IngestLog) -> Paper | None:
        corpus, path = self.corpus, self.path
        paper_id = obj["paper_id"]
        if not isinstance(paper_id, str) or not paper_id.strip():
            log.quarantine(corpus, "wrong_type", path, lineno,
                           detail=f"paper_id must be a non-empty string, got {paper_id!r}")
            return None
        problem = _type_problem(obj)
        if problem:
            log.quarantine(corpus, "wrong_type", path, lineno, paper_id=paper_id, detail=problem)
            return None
        try:
            date = _parse_date(obj.get("date"))
        except TypeError as exc:
            log.quarantine(corpus, "wrong_type", path, lineno, paper_id=paper_id, detail=str(exc))
            return None
        year = obj.get("year")
        if year is None and date is not None:
            year = date.year
        if year is None:
            log.quarantine(corpus, "missing_year", path, lineno, paper_id=paper_id, detail="neither year nor date")
            return None
        if not MIN_YEAR <= year <= MAX_YEAR or (date is not None and date.year != year):
            log.quarantine(corpus, "bad_year", path, lineno, paper_id=paper_id,
                           detail=f"year {year}, date {obj.get('date')}")
            return None
        split = obj.get("sentences_split", True)
        paragraphs = obj["paragraphs"]
        if not split:  # one string per paragraph; a list of strings (aclsum's reference conversion) is one paragraph
            paragraphs = [[p if isinstance(p, str) else " ".join(p)] for p in paragraphs]
        return Paper(paper_id, corpus, obj.get("title"), int(year), date.isoformat() if date else None,
                     obj.get("venue"), obj.get("source") or f"{path.name}:{lineno}", paragraphs,
                     sentences_split=bool(split), origin_file=str(path), origin_line=lineno)


def _type_problem(obj: dict) -> str | None:
    """What is wrong with the field types of a generic JSONL record, or None."""
    for key in ("title", "venue", "source"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            return f"{key} must be a string or null, got {type(obj[key]).__name__}"
    year = obj.get("year")
    if year is not None and (isinstance(year, bool) or not isinstance(year, int)):
        return f"year must be an integer or null, got {type(year).__name__} {year!r}"
    split = obj.get("sentences_split", True)
    if not isinstance(split, bool):
        return "sentences_split must be true or false"
    paragraphs = obj["paragraphs"]
    if not isinstance(paragraphs, list):
        return f"paragraphs must be a list, got {type(paragraphs).__name__}"
    for i, para in enumerate(paragraphs):
        if split:
            if not isinstance(para, list) or not all(isinstance(s, str) for s in para):
                return f"paragraphs[{i}] must be a list of strings (sentences_split is true)"
        elif not isinstance(para, str) and not (isinstance(para, list) and all(isinstance(s, str) for s in para)):
            return f"paragraphs[{i}] must be a string or a list of strings (sentences_split is false)"
    return None


