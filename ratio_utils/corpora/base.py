"""Shared types of stage 00 (corpus ingestion): parameters, `Paper`, `IngestLog`, the reader protocol,
and helpers every reader uses (ACL ids, back-matter headings, byte decoding). Imports no reader.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..io import InputError, line_index

# --- parameters -------------------------------------------------------------------------------------


# --- the internal representation ---------------------------------------------------------------------


@dataclass
class Paper:
    """One paper: paragraphs of sentences in reading order.

    With `sentences_split=False`, each paragraph is a one-element list holding the paragraph text;
    the builder splits it with spaCy (after sampling, so a small run splits only what it keeps).
    `paragraph_kinds`/`paragraph_sections` say where each paragraph came from (reader-specific;
    the tests use them to explain differences against the reference conversion).
    """

    paper_id: str
    corpus: str
    title: str | None
    year: int | None
    date: str | None
    venue: str | None
    source: str
    paragraphs: list[list[str]]
    sentences_split: bool = True
    paragraph_kinds: list[str] | None = None
    paragraph_sections: list[str] | None = None
    origin_file: str | None = None  # where the record was read (quarantine entries name it)
    origin_line: int | None = None

    @property
    def n_sentences(self) -> int:
        return sum(len(p) for p in self.paragraphs)

    @property
    def n_pairs(self) -> int:
        return sum(max(0, len(p) - 1) for p in self.paragraphs)


class IngestLog:
    """Per-corpus counters and the quarantine: what was set aside, where, and why."""

    def __init__(self, strict: bool = False):
        self.strict = strict
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.quarantined: dict[str, list[dict]] = defaultdict(list)

    def count(self, corpus: str, key: str, n: int = 1) -> None:
        self.counts[corpus][key] += n

    def quarantine(self, corpus: str, reason: str, path: "str | Path", line: int | None = None,
                   paper_id: str | None = None, detail: str = "") -> None:
        if self.strict:
            raise InputError(path, f"{reason}: {detail}" if detail else reason, line)
        self.quarantined[corpus].append(
            {"corpus": corpus, "reason": reason, "file": str(path), "line": line, "paper_id": paper_id,
             "detail": detail}
        )

    def quarantine_counts(self, corpus: str) -> dict[str, int]:
        return dict(Counter(rec["reason"] for rec in self.quarantined.get(corpus, [])))


def _quarantine_error(log: IngestLog, corpus: str, error: InputError) -> None:
    """Route a bad line reported by io.iter_jsonl to the quarantine (or, in strict mode, raise)."""
    log.quarantine(corpus, error.reason, error.path, error.line, detail=error.detail)


@dataclass(frozen=True)
class InputPart:
    """One unit of a partitioned build: input files of one corpus, or a line range of one JSONL file.

    A part never cuts a paper (pairs live inside one paper), so parts can be built and mined apart.
    """

    corpus: str
    files: tuple[str, ...]
    lines: tuple[int, int] | None = None  # first and last line number (1-based, inclusive)
    offset: int | None = None  # where line `lines[0]` starts (io.LineIndex): reading seeks there
    digests: tuple[str, ...] | None = None  # SHA-256 of each file where the reader knows it (its line index)

    def describe(self) -> dict:
        first, last = Path(self.files[0]).name, Path(self.files[-1]).name
        return {"corpus": self.corpus, "files": len(self.files), "first": first, "last": last, "lines": self.lines}


class CorpusReader(Protocol):
    corpus: str

    def prepare(self) -> None:
        """What every part needs, done once before any part is read (by the driver of a parallel build)."""
        ...

    def papers(self, log: IngestLog) -> Iterator[Paper]: ...

    def parts(self, papers_per_part: int) -> list[InputPart]: ...

    def read_part(self, part: InputPart, log: IngestLog) -> Iterator[Paper]: ...


def line_parts(corpus: str, path: "str | Path", per_part: int, sha256: str | None = None) -> list[InputPart]:
    """Ranges of `per_part` lines of one JSONL(.gz) file (one record a line), each with the byte offset it
    starts at and the file's SHA-256, from the file's line index (built once, kept beside the file; `sha256`:
    the file's already verified digest, see io.line_index)."""
    index = line_index(path, sha256=sha256)
    return [InputPart(corpus, (str(path),), (first, min(first + per_part - 1, index.n_lines)),
                      int(index.offsets[first - 1]), (index.sha256,))
            for first in range(1, index.n_lines + 1, per_part)]


def file_parts(corpus: str, files: list[Path], per_part: int) -> list[InputPart]:
    """Consecutive runs of `per_part` files (readers with one paper per file)."""
    names = [str(f) for f in files]
    return [InputPart(corpus, tuple(names[i:i + per_part])) for i in range(0, len(names), per_part)]


class OnePaperPerFileReader:
    """What readers of one-paper-per-file corpora share: parts are runs of files, a part's papers are
    its files' papers. A subclass says which files (`files`) and how one file reads (`read_file`)."""

    corpus: str

    def files(self) -> list[Path]:
        raise NotImplementedError

    def read_file(self, path: Path, log: IngestLog) -> "Paper | None":
        raise NotImplementedError

    def prepare(self) -> None:
        pass

    def parts(self, papers_per_part: int) -> list[InputPart]:
        return file_parts(self.corpus, self.files(), papers_per_part)

    def read_part(self, part: InputPart, log: IngestLog) -> Iterator[Paper]:
        return self.papers(log, [Path(f) for f in part.files])

    def papers(self, log: IngestLog, files: "Sequence[Path] | None" = None) -> Iterator[Paper]:
        for path in files if files is not None else self.files():
            paper = self.read_file(path, log)
            if paper is not None:
                yield paper


# --- ACL ids, years, venues ------------------------------------------------------------------------------

_OLD_ACL_ID = re.compile(r"^([A-Z])(\d{2})-\d{4}$")
_NEW_ACL_ID = re.compile(r"^(\d{4})\.([a-z]+)(?:-([a-z]+))?\.\d+$")
# Letter of an old-style ACL Anthology id -> venue (coarse: the Anthology's own prefixes).
_ACL_LETTER_VENUE = {
    "A": "ANLP", "C": "COLING", "D": "EMNLP", "E": "EACL", "F": "Findings", "H": "HLT", "I": "IJCNLP",
    "J": "Computational Linguistics", "K": "CoNLL", "L": "LREC", "M": "MUC", "N": "NAACL", "O": "ROCLING",
    "P": "ACL", "Q": "TACL", "R": "RANLP", "S": "SemEval/*SEM", "T": "TINLAP", "U": "ALTA", "W": "ACL workshop",
    "X": "TIPSTER", "Y": "PACLIC", "Z": "TAL",
}
_ACL_NEW_VENUE = {"cl": "Computational Linguistics", "tacl": "TACL", "findings": "Findings", "ws": "ACL workshop"}


def acl_year_venue(paper_id: str) -> tuple[int | None, str | None]:
    """Publication year and coarse venue from an ACL Anthology id (`P05-1053`, `2021.naacl-main.72`)."""
    old = _OLD_ACL_ID.match(paper_id)
    if old:
        letter, yy = old.group(1), int(old.group(2))
        return (1900 + yy if yy >= 50 else 2000 + yy), _ACL_LETTER_VENUE.get(letter)
    new = _NEW_ACL_ID.match(paper_id)
    if new:
        year, venue, sub = int(new.group(1)), new.group(2), new.group(3)
        if venue == "findings" and sub:
            return year, f"Findings of {sub.upper()}"
        return year, _ACL_NEW_VENUE.get(venue, venue.upper())
    return None, None


# Back matter (paper §4 / the PROVENANCE conversions): references, bibliography, acknowledgements.
# "Acknowledg(e)ments" is matched as a prefix (garbled headings such as "Acknowledgments Initiative
# in ...") but "References"/"Bibliography" only as the whole heading, so content sections such as
# "Reference Resolution in Dialogue" are kept (the reference conversions drop them too).
_BACK_MATTER = re.compile(
    r"^[\W\d_]*(?:(?P<ack>acknowledge?ments?)\b|(?P<ref>references?|bibliography)[\W\d_]*$)", re.IGNORECASE
)


def back_matter_kind(heading: str | None) -> str | None:
    """'acknowledgements' or 'references' if a section heading names back matter, else None."""
    match = _BACK_MATTER.match(heading or "")
    if not match:
        return None
    return "acknowledgements" if match.group("ack") else "references"


def decode_bytes(data: bytes) -> tuple[str, str]:
    """Decode UTF-8, else Windows-1252 (55 ACL XML files are cp1252); undefined bytes via Latin-1."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="latin1_fallback"), "cp1252"


def _latin1_fallback(error: UnicodeDecodeError):
    # cp1252 leaves five bytes undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D); Latin-1 maps them to C1
    # controls, which the `invalid_characters` cleaning rule then removes (and counts).
    return error.object[error.start:error.end].decode("latin-1"), error.end


codecs.register_error("latin1_fallback", _latin1_fallback)

