"""Shared types of stage 00 (corpus ingestion): parameters, `Paper`, `IngestLog`, the reader protocol,
and helpers every reader uses (ACL ids, back-matter headings, byte decoding). Imports no reader.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..io import InputError
from ..text import CleaningRules

# --- parameters -------------------------------------------------------------------------------------


@dataclass
class S2orcParams:
    """Semantic Scholar Datasets API settings (ratio_utils.corpus.s2_api, ratio_utils.corpus.s2orc)."""

    release: str = "2026-05-05"  # pinned release id; "latest" is refused (not reproducible)
    datasets: list[str] = field(default_factory=lambda: ["s2orc", "papers"])
    fields_of_study: list[str] = field(default_factory=lambda: ["Computer Science"])
    # Paper §4: papers whose `publicationdate` is on or after `min_date`; papers without one are dropped.
    # selection "year" keeps papers whose `year` >= min_year instead (papers without a date included).
    selection: str = "publication_date"
    min_date: str = "2015-01-01"
    min_year: int = 2015
    abstract_spans: bool = False  # paper: `paragraph` spans only; true puts the `abstract` spans first
    shard_limit: int | None = None  # download/read at most this many shards per dataset (None = all)
    api_base_url: str = "https://api.semanticscholar.org/datasets/v1"
    download_dir: str | None = None  # default: <output root>/data/raw/downloads/s2orc/<release>
    max_retries: int = 5  # on HTTP 429/5xx and broken connections, with exponential backoff and jitter
    backoff_seconds: float = 2.0  # retry n waits backoff_seconds x 2^(n-1) from the second on, plus up to backoff_seconds of jitter
    url_max_age_seconds: float = 3000.0  # list the dataset again before pre-signed URLs this old expire

    def __post_init__(self) -> None:
        if self.selection not in ("publication_date", "year"):
            raise ValueError(f"corpus.s2orc.selection must be 'publication_date' or 'year', got {self.selection!r}")
        text = [d for d in self.datasets if d != "papers"]
        if len(text) != 1 or text[0] not in ("s2orc", "s2orc_v2"):
            raise ValueError(f"corpus.s2orc.datasets must be 'papers' and one of s2orc, s2orc_v2; got {self.datasets}")

    @property
    def text_dataset(self) -> str:
        return next(d for d in self.datasets if d != "papers")


@dataclass
class CorpusParams:
    """Stage 00 parameters (params section `corpus`)."""

    sources: list[str] = field(default_factory=lambda: ["acl_scisumm", "aclsum"])
    max_papers: int | None = None  # None = all; else a deterministic sample spread over year bins
    sample_year_bins: list[int] = field(default_factory=lambda: [2006, 2009])  # upper bounds: train / validation / test
    min_sentence_chars: int = 35  # paper Appendix B.1
    min_alpha_ratio: float = 0.6
    min_words: int = 3
    # The word-share rule (text.CleaningRules.min_word_token_ratio, e.g. 0.35): drops formula / OCR residue
    # such as notebook 05's gold "for any (f, t) e t, f n fs1 -=i-..l". Off (null) by default: it changes the
    # default benchmark (at 0.35: 560 of 338,169 kept sentences, 12 of 7,021 pairs, 6 of 16,649 distractors), hence every downstream number and
    # the judge/rerank request bodies, whose recorded answers replay only on today's benchmark.
    min_word_token_ratio: float | None = None
    strict: bool = False  # raise InputError on the first bad record instead of quarantining it
    jsonl: dict[str, str] = field(default_factory=dict)  # corpus name -> generic JSONL(.gz) path
    acl_scisumm_dir: str | None = None  # default: <shared>/corpora/acl_scisumm/raw, else downloaded
    aclsum_dir: str | None = None  # default: <shared>/corpora/aclsum/raw, else downloaded
    download_base_url: str = "https://raw.githubusercontent.com/WING-NUS/scisumm-corpus"
    s2orc: dict[str, Any] = field(default_factory=dict)  # S2orcParams fields
    progress: bool = True
    # None: one papers and one sentences file (the default run). A number: a partitioned build, each input
    # part (this many files or JSONL lines; one S2ORC shard) read, split, cleaned and written as its own
    # parquet part with its own report; a rerun skips parts whose inputs and params are unchanged.
    papers_per_part: int | None = None
    # Where the parts of a partitioned build are built: "local" (one after another, in this process) or
    # "dask" (one task per part on a LocalCluster of dask_workers processes, or on dask_scheduler).
    engine: str = "local"
    dask_scheduler: str | None = None
    dask_workers: int = 2
    dask_processes: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ("local", "dask"):
            raise ValueError(f"corpus.engine must be 'local' or 'dask', got {self.engine!r}")
        if self.engine == "dask" and self.papers_per_part is None:
            raise ValueError("corpus.engine: dask builds parts: set corpus.papers_per_part")
        if self.papers_per_part is not None and self.papers_per_part < 1:
            raise ValueError("corpus.papers_per_part must be >= 1 or null")
        if self.papers_per_part is not None and self.max_papers is not None:
            raise ValueError("corpus.max_papers samples the whole corpus: it cannot be combined with papers_per_part")

    def s2orc_params(self) -> S2orcParams:
        known = set(S2orcParams.__dataclass_fields__)
        unknown = sorted(set(self.s2orc) - known)
        if unknown:
            raise ValueError(f"params corpus.s2orc has unknown key(s) {unknown}; S2orcParams accepts {sorted(known)}")
        return S2orcParams(**self.s2orc)

    def cleaning_rules(self) -> CleaningRules:
        return CleaningRules(min_chars=self.min_sentence_chars, min_alpha_ratio=self.min_alpha_ratio, min_words=self.min_words,
                             min_word_token_ratio=self.min_word_token_ratio)


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
            {"corpus": corpus, "reason": reason, "file": str(path), "line": line, "paper_id": paper_id, "detail": detail}
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

    def describe(self) -> dict:
        first, last = Path(self.files[0]).name, Path(self.files[-1]).name
        return {"corpus": self.corpus, "files": len(self.files), "first": first, "last": last, "lines": self.lines}


class CorpusReader(Protocol):
    corpus: str

    def papers(self, log: IngestLog) -> Iterator[Paper]: ...

    def parts(self, papers_per_part: int) -> list[InputPart]: ...

    def read_part(self, part: InputPart, log: IngestLog) -> Iterator[Paper]: ...


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

