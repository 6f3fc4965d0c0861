"""Stage 00, corpus ingestion: corpora -> papers table + sentence table + corpus report.

Reads one or more corpora into one representation, `Paper` (id, title, year, publication date,
venue, source, corpus) with paragraphs of sentences in reading order, and writes

- `cfg.paths.papers` (schema.PAPER_COLUMNS), one row per paper;
- `cfg.paths.sentences` (schema.SENTENCE_COLUMNS), one row per sentence: `para` is the paragraph
  index in the paper, `sent` the sentence index in the paragraph, so consecutive sentences of a
  paragraph have the same (paper_id, para) and sent, sent + 1: pairs never cross a paragraph.
  Sentences removed by a cleaning rule stay with the rule's name in `drop_reason`;
- `cfg.paths.corpus_report` (JSON): per-corpus reader counts, every cleaning-rule count,
  quarantine counts, deduplication, sampling, statistics;
- `data/interim/quarantine/<corpus>.jsonl`: every record set aside, with file, line and reason.

Readers: `AclScisummReader` (CL-SciSumm/ScisummNet XML), `AclsumReader` (S2ORC/doc2json JSON
shipped in the `aclsum` wheel), `JsonlReader` (the generic format of docs/corpus_formats.md) and
`ratio_utils.s2orc.S2orcReader` (Semantic Scholar Datasets API shards). When ../shared is absent,
`fetch_acl_scisumm` and `fetch_aclsum` download the default corpus from its public source and
verify every file against pinned checksums.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import hashlib
import html
import json
import re
import subprocess
import sys
import time
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from .config import REPO_ROOT, Config
from .io import InputError, iter_jsonl, write_json_atomic, write_parquet_atomic, write_text_atomic, require_columns
from .schema import PAPER_COLUMNS, SENTENCE_COLUMNS
from .text import CleaningCounts, CleaningRules, SentenceCleaner, SentenceSplitter

# --- parameters -------------------------------------------------------------------------------------


@dataclass
class S2orcParams:
    """Semantic Scholar Datasets API settings (ratio_utils.s2orc)."""

    release: str = "2026-05-05"  # pinned release id; "latest" is refused (not reproducible)
    datasets: list[str] = field(default_factory=lambda: ["s2orc", "papers"])
    fields_of_study: list[str] = field(default_factory=lambda: ["Computer Science"])
    min_year: int = 2015
    shard_limit: int | None = None  # download/read at most this many shards per dataset (None = all)
    api_base_url: str = "https://api.semanticscholar.org/datasets/v1"
    download_dir: str | None = None  # default: <output root>/data/raw/downloads/s2orc/<release>


@dataclass
class CorpusParams:
    """Stage 00 parameters (params section `corpus`)."""

    sources: list[str] = field(default_factory=lambda: ["acl_scisumm", "aclsum"])
    max_papers: int | None = None  # None = all; else a deterministic sample spread over year bins
    sample_year_bins: list[int] = field(default_factory=lambda: [2006, 2009])  # upper bounds: train / validation / test
    min_sentence_chars: int = 35  # paper Appendix B.1
    min_alpha_ratio: float = 0.6
    min_words: int = 3
    strict: bool = False  # raise InputError on the first bad record instead of quarantining it
    jsonl: dict[str, str] = field(default_factory=dict)  # corpus name -> generic JSONL(.gz) path
    acl_scisumm_dir: str | None = None  # default: <shared>/corpora/acl_scisumm/raw, else downloaded
    aclsum_dir: str | None = None  # default: <shared>/corpora/aclsum/raw, else downloaded
    download_base_url: str = "https://raw.githubusercontent.com/WING-NUS/scisumm-corpus"
    s2orc: dict[str, Any] = field(default_factory=dict)  # S2orcParams fields
    progress: bool = True

    def s2orc_params(self) -> S2orcParams:
        known = set(S2orcParams.__dataclass_fields__)
        unknown = sorted(set(self.s2orc) - known)
        if unknown:
            raise ValueError(f"params corpus.s2orc has unknown key(s) {unknown}; S2orcParams accepts {sorted(known)}")
        return S2orcParams(**self.s2orc)

    def cleaning_rules(self) -> CleaningRules:
        return CleaningRules(min_chars=self.min_sentence_chars, min_alpha_ratio=self.min_alpha_ratio, min_words=self.min_words)


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


class CorpusReader(Protocol):
    corpus: str

    def papers(self, log: IngestLog) -> Iterator[Paper]: ...


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


# --- reader 1: CL-SciSumm / ScisummNet XML ----------------------------------------------------------------


class AclScisummReader:
    """ACL papers in the CL-SciSumm XML format: `<PAPER>`, `<ABSTRACT>`, `<SECTION title=..>`, `<S>`.

    The corpus's own `<S>` split is kept. Each ABSTRACT and SECTION is a paragraph; a SUBSECTION
    heading (an element holding only the heading text) starts a new paragraph, and so do sentences
    that follow a SECTION nested inside a block. Back-matter sections are dropped, files without
    any SECTION ("flat" OCR files) are skipped, both counted. Titles: the `<S sid="0">` child of
    PAPER, else the first line of `title_txt/<id>.txt`.
    """

    corpus = "acl_scisumm"

    def __init__(self, root: "str | Path", source_prefix: str = "", manifest: "str | Path | None" = None):
        self.root = Path(root)
        self.xml_dir = self.root / "xml"
        self.title_dir = self.root / "title_txt"
        if not self.xml_dir.is_dir():
            raise FileNotFoundError(f"ACL XML folder not found: {self.xml_dir}")
        self.repo_paths = _manifest_repo_paths(manifest or self.root / "MANIFEST.tsv")
        self.source_prefix = source_prefix or "WING-NUS/scisumm-corpus"

    def files(self) -> list[Path]:
        return sorted(self.xml_dir.glob("*.xml"))

    def papers(self, log: IngestLog, files: Sequence[Path] | None = None) -> Iterator[Paper]:
        for path in files if files is not None else self.files():
            paper = self.read_file(path, log)
            if paper is not None:
                yield paper

    def read_file(self, path: Path, log: IngestLog) -> Paper | None:
        from lxml import etree

        corpus = self.corpus
        log.count(corpus, "files")
        text, encoding = decode_bytes(path.read_bytes())
        if encoding != "utf-8":
            log.count(corpus, "files_decoded_cp1252")
        # recover=True: five files close a SECTION/ABSTRACT only implicitly at </PAPER>.
        parser = etree.XMLParser(recover=True)
        try:
            root = etree.fromstring(text.encode("utf-8"), parser)
        except etree.XMLSyntaxError as exc:
            log.quarantine(corpus, "malformed_xml", path, detail=str(exc))
            return None
        if root is None or root.tag != "PAPER":
            log.quarantine(corpus, "malformed_xml", path, detail="no <PAPER> root element")
            return None
        if len(parser.error_log):
            log.count(corpus, "files_xml_recovered")
        paper_id = path.stem
        if not any(el.tag == "SECTION" for el in root.iter()):
            log.count(corpus, "files_skipped_no_sections")
            return None
        year, venue = acl_year_venue(paper_id)
        if year is None:
            log.quarantine(corpus, "missing_year", path, paper_id=paper_id, detail="file name is not an ACL id")
            return None
        title = next((_element_text(el) for el in root if el.tag == "S" and el.get("sid") == "0"), None)
        if not title:
            title = self._title_from_txt(paper_id)
            if title:
                log.count(corpus, "titles_from_txt")
        paragraphs: list[list[str]] = []
        kinds: list[str] = []
        sections: list[str] = []
        for block in root:
            if block.tag in ("ABSTRACT", "SECTION"):
                self._collect(block, paragraphs, kinds, sections, log)
        repo_path = self.repo_paths.get(f"xml/{path.name}")
        source = f"{self.source_prefix}:{repo_path}" if repo_path else f"{self.source_prefix}:{path.name}"
        return Paper(paper_id, corpus, title or None, year, None, venue, source, paragraphs,
                     paragraph_kinds=kinds, paragraph_sections=sections, origin_file=str(path))

    def _collect(self, block, paragraphs, kinds, sections, log) -> None:
        heading = "Abstract" if block.tag == "ABSTRACT" else (block.get("title") or "")
        back = back_matter_kind(heading) if block.tag == "SECTION" else None
        if back:
            log.count(self.corpus, f"sections_dropped_{back}")
            log.count(self.corpus, "sentences_in_dropped_sections", sum(1 for el in block.iter("S")))
            return
        kind = "abstract" if block.tag == "ABSTRACT" else "section"
        current: list[str] = []

        def flush():
            nonlocal current
            if current:
                paragraphs.append(current)
                kinds.append(kind)
                sections.append(heading)
            current = []

        for child in block:
            if child.tag == "S":
                sentence = _element_text(child, collapse=False)
                if sentence:
                    current.append(sentence)
                else:
                    log.count(self.corpus, "empty_sentence_elements")
            elif child.tag == "SUBSECTION":
                flush()
                log.count(self.corpus, "subsection_headings")
                kind = "subsection"
            elif child.tag in ("SECTION", "ABSTRACT"):
                flush()
                self._collect(child, paragraphs, kinds, sections, log)
                kind = "tail"  # sentences after a nested block: a new paragraph
        flush()

    def _title_from_txt(self, paper_id: str) -> str | None:
        path = self.title_dir / f"{paper_id}.txt"
        if not path.exists():
            return None
        text, _ = decode_bytes(path.read_bytes())
        for line in text.lstrip("\ufeff").splitlines():
            if line.strip():
                return " ".join(line.split())
        return None


def _element_text(element, collapse: bool = True) -> str:
    # The XML escapes entities twice (`&amp;quot;`), some files three times (`&amp;amp;quot;`): the
    # parser undoes one level, html.unescape the rest (a few rounds at most).
    text = "".join(element.itertext())
    for _ in range(3):
        if "&" not in text:
            break
        unescaped = html.unescape(text)
        if unescaped == text:
            break
        text = unescaped
    # `&#136;`-style references to C1 controls mean Windows-1252 characters (HTML5 reads them so).
    if _C1_CHARS.search(text):  # rare; str.translate with a dict is slow on every sentence
        text = text.translate(C1_AS_CP1252)
    text = text.strip()
    return " ".join(text.split()) if collapse else text


def _c1_to_cp1252() -> dict[int, str]:
    table = {}
    for code in range(0x80, 0xA0):
        try:
            table[code] = bytes([code]).decode("cp1252")
        except UnicodeDecodeError:
            pass  # undefined in cp1252: left for the `invalid_characters` rule
    return table


C1_AS_CP1252 = _c1_to_cp1252()
_C1_CHARS = re.compile("[\x80-\x9f]")


def _manifest_repo_paths(path: "str | Path") -> dict[str, str]:
    path = Path(path)
    if not path.exists():
        return {}
    return {row.local_file: row.repo_path for row in read_manifest(path).itertuples()}


def read_manifest(path: "str | Path") -> pd.DataFrame:
    """The pinned file list of the ACL corpus: local_file, repo_path, git_blob (MANIFEST.tsv)."""
    frame = pd.read_csv(path, sep="\t", dtype=str)
    require_columns(frame, ("local_file", "repo_path", "git_blob"), path)
    return frame


# --- reader 2: aclsum (S2ORC/doc2json JSON) ------------------------------------------------------------------


class AclsumReader:
    """ACL papers as doc2json JSON (`pdf_parse.abstract` + `pdf_parse.body_text` paragraphs).

    The id is the file name (the JSON's own `paper_id` is only the year for new-style ids); year
    and venue come from the id (the JSON's fields are empty). Paragraphs are not sentence-split.
    Figures, tables, bibliography and `back_matter` are separate fields and are not read; body
    paragraphs under a back-matter heading are dropped; a body paragraph that repeats an abstract
    paragraph verbatim is dropped (counted).
    """

    corpus = "aclsum"

    def __init__(self, root: "str | Path"):
        self.root = Path(root)
        self.json_dir = self.root / "paper_jsons"
        if not self.json_dir.is_dir():
            raise FileNotFoundError(f"aclsum paper_jsons folder not found: {self.json_dir}")

    def papers(self, log: IngestLog) -> Iterator[Paper]:
        for path in sorted(self.json_dir.glob("*.json")):
            paper = self.read_file(path, log)
            if paper is not None:
                yield paper

    def read_file(self, path: Path, log: IngestLog) -> Paper | None:
        corpus = self.corpus
        log.count(corpus, "files")
        try:
            obj = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            log.quarantine(corpus, "non_utf8", path, detail=f"{exc.reason} at byte {exc.start}")
            return None
        except json.JSONDecodeError as exc:
            log.quarantine(corpus, "malformed_json", path, line=exc.lineno, detail=exc.msg)
            return None
        parse = obj.get("pdf_parse") if isinstance(obj, dict) else None
        if not isinstance(parse, dict) or not isinstance(parse.get("body_text"), list):
            log.quarantine(corpus, "missing_field", path, detail="pdf_parse.body_text")
            return None
        paper_id = path.stem
        if obj.get("paper_id") != paper_id:
            log.count(corpus, "paper_id_from_file_name")
        year, venue = acl_year_venue(paper_id)
        if year is None:
            log.quarantine(corpus, "missing_year", path, paper_id=paper_id, detail="file name is not an ACL id")
            return None
        paragraphs, kinds, sections = [], [], []
        abstract_texts = set()
        for entry in parse.get("abstract") or []:
            text = (entry or {}).get("text") or ""
            if text.strip():
                paragraphs.append([text.strip()])
                kinds.append("abstract")
                sections.append("Abstract")
                abstract_texts.add(text.strip())
        for entry in parse["body_text"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
                log.quarantine(corpus, "wrong_type", path, paper_id=paper_id, detail="body_text entry without text")
                return None
            text, heading = entry["text"].strip(), entry.get("section") or ""
            back = back_matter_kind(heading)
            if back:
                log.count(corpus, f"paragraphs_dropped_{back}")
                continue
            if not text:
                log.count(corpus, "empty_paragraphs")
                continue
            if text in abstract_texts:
                log.count(corpus, "paragraphs_repeating_abstract")
                continue
            paragraphs.append([text])
            kinds.append("body")
            sections.append(heading)
        title = " ".join((obj.get("title") or "").split()) or None
        source = f"aclsum==0.1.2 (PyPI wheel):aclsum/dataset/paper_jsons/{path.name}"
        return Paper(paper_id, corpus, title, year, None, venue, source, paragraphs, sentences_split=False,
                     paragraph_kinds=kinds, paragraph_sections=sections, origin_file=str(path))


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

    def papers(self, log: IngestLog) -> Iterator[Paper]:
        lines = iter_jsonl(self.path, required=("paper_id", "paragraphs"), on_error=lambda e: _quarantine_error(log, self.corpus, e))
        for lineno, obj in lines:
            paper = self.parse_record(obj, lineno, log)
            if paper is not None:
                yield paper

    def parse_record(self, obj: dict, lineno: int, log: IngestLog) -> Paper | None:
        corpus, path = self.corpus, self.path
        paper_id = obj["paper_id"]
        if not isinstance(paper_id, str) or not paper_id.strip():
            log.quarantine(corpus, "wrong_type", path, lineno, detail=f"paper_id must be a non-empty string, got {paper_id!r}")
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
            log.quarantine(corpus, "bad_year", path, lineno, paper_id=paper_id, detail=f"year {year}, date {obj.get('date')}")
            return None
        split = obj.get("sentences_split", True)
        paragraphs = obj["paragraphs"]
        if not split:
            paragraphs = [[p] for p in paragraphs]
        return Paper(paper_id, corpus, obj.get("title"), int(year), date.isoformat() if date else None,
                     obj.get("venue"), obj.get("source") or f"{path.name}:{lineno}", paragraphs,
                     sentences_split=bool(split), origin_file=str(path), origin_line=lineno)


def _id_or_none(obj: dict) -> str | None:
    value = obj.get("paper_id")
    return value if isinstance(value, str) else None


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
        elif not isinstance(para, str):
            return f"paragraphs[{i}] must be a string (sentences_split is false)"
    return None


# --- building the tables ------------------------------------------------------------------------------------------------


@dataclass
class CorpusBuild:
    papers: pd.DataFrame
    sentences: pd.DataFrame
    report: dict
    statistics: pd.DataFrame


def resolve_path(value: str, cfg: Config) -> Path:
    """A params path: `shared:<rel>` under the shared folder, else absolute or relative to the repo root."""
    if value.startswith("shared:"):
        return cfg.paths.shared / value[len("shared:"):]
    path = Path(value).expanduser()
    return path if path.is_absolute() else (REPO_ROOT / path).resolve()


def make_readers(cfg: Config, params: CorpusParams) -> list[CorpusReader]:
    readers: list[CorpusReader] = []
    for source in params.sources:
        if source == "acl_scisumm":
            root = resolve_path(params.acl_scisumm_dir, cfg) if params.acl_scisumm_dir else cfg.paths.shared / "corpora" / "acl_scisumm" / "raw"
            if not (root / "xml").is_dir():
                root = fetch_acl_scisumm(cfg.paths.downloads / "acl_scisumm", base_url=params.download_base_url)
            readers.append(AclScisummReader(root, manifest=root / "MANIFEST.tsv" if (root / "MANIFEST.tsv").exists() else PINNED_MANIFEST))
        elif source == "aclsum":
            root = resolve_path(params.aclsum_dir, cfg) if params.aclsum_dir else cfg.paths.shared / "corpora" / "aclsum" / "raw"
            if not (root / "paper_jsons").is_dir():
                root = fetch_aclsum(cfg.paths.downloads / "aclsum")
            readers.append(AclsumReader(root))
        elif source == "s2orc":
            from .s2orc import S2orcReader

            readers.append(S2orcReader.from_params(params.s2orc_params(), cfg))
        elif source in params.jsonl:
            readers.append(JsonlReader(resolve_path(params.jsonl[source], cfg), source))
        else:
            raise ValueError(f"unknown corpus source {source!r}: use acl_scisumm, aclsum, s2orc or a name listed under corpus.jsonl")
    return readers


def read_papers(readers: Sequence[CorpusReader], log: IngestLog, progress: bool = True) -> tuple[list[Paper], dict]:
    """Every valid paper of every reader, in reader order; duplicates of an earlier id are counted and left out."""
    papers: list[Paper] = []
    seen: dict[str, str] = {}
    dedup: dict[str, list[str]] = defaultdict(list)
    for reader in readers:
        corpus = reader.corpus
        for paper in tqdm(reader.papers(log), desc=f"reading {corpus}", unit="paper", disable=not progress, mininterval=1.0):
            if not _valid_paper(paper, log):
                continue
            if paper.paper_id in seen:
                if seen[paper.paper_id] == corpus:
                    log.quarantine(corpus, "duplicate_id", paper.origin_file or paper.source, paper.origin_line,
                                   paper_id=paper.paper_id, detail="id seen earlier in the same corpus")
                else:
                    dedup[f"{corpus} in {seen[paper.paper_id]}"].append(paper.paper_id)
                    log.count(corpus, f"duplicates_of_{seen[paper.paper_id]}")
                continue
            seen[paper.paper_id] = corpus
            papers.append(paper)
    return papers, {key: sorted(ids) for key, ids in dedup.items()}


def _valid_paper(paper: Paper, log: IngestLog) -> bool:
    """Drop empty sentences (counted); quarantine a paper without any sentence."""
    empty = 0
    cleaned = []
    for para in paper.paragraphs:
        kept = [s for s in para if s.strip()]
        empty += len(para) - len(kept)
        cleaned.append(kept)
    if empty:
        log.count(paper.corpus, "empty_sentences_removed", empty)
    keep = [i for i, para in enumerate(cleaned) if para]
    paper.paragraphs = [cleaned[i] for i in keep]
    if paper.paragraph_kinds is not None:
        paper.paragraph_kinds = [paper.paragraph_kinds[i] for i in keep]
    if paper.paragraph_sections is not None:
        paper.paragraph_sections = [paper.paragraph_sections[i] for i in keep]
    if not paper.paragraphs:
        log.quarantine(paper.corpus, "empty_paper", paper.origin_file or paper.source, paper.origin_line,
                       paper_id=paper.paper_id, detail="no sentences")
        return False
    return True


def _stable_hash(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha1(f"{seed}:{text}".encode()).digest()[:8], "big")


def sample_papers(papers: Sequence[Paper], n: int, year_bins: Sequence[int], seed: int) -> list[Paper]:
    """A deterministic sample of `n` papers spread over year bins and, within a bin, over years.

    The bins are `<= year_bins[0]`, `(year_bins[0], year_bins[1]]`, ..., `> year_bins[-1]` (the
    default corpus's train / validation / test years), each given an equal share; inside a bin,
    years take turns, each giving its paper with the smallest seeded hash, so every year that has
    papers is represented before any year gets a second one. Returns papers in input order.
    """
    if n >= len(papers):
        return list(papers)
    bounds = sorted(year_bins)

    def bin_of(year: int) -> int:
        return next((i for i, bound in enumerate(bounds) if year <= bound), len(bounds))

    by_bin: dict[int, dict[int, list[Paper]]] = defaultdict(lambda: defaultdict(list))
    for paper in papers:
        by_bin[bin_of(paper.year)][paper.year].append(paper)
    queues = {
        b: [sorted(ps, key=lambda p: _stable_hash(seed, p.paper_id)) for _, ps in sorted(years.items())]
        for b, years in by_bin.items()
    }
    chosen: set[int] = set()
    bins = sorted(queues)
    share = {b: n // len(bins) + (1 if i < n % len(bins) else 0) for i, b in enumerate(bins)}
    leftover = 0
    for b in bins:
        leftover += share[b] - _take_round_robin(queues[b], share[b], chosen)
    for b in bins:  # a bin with too few papers passes its share on
        if leftover <= 0:
            break
        leftover -= _take_round_robin(queues[b], leftover, chosen)
    return [p for p in papers if id(p) in chosen]


def _take_round_robin(year_queues: list[list[Paper]], k: int, chosen: set[int]) -> int:
    taken = 0
    while taken < k and any(year_queues):
        for queue in year_queues:
            while queue and id(queue[0]) in chosen:
                queue.pop(0)
            if queue and taken < k:
                chosen.add(id(queue.pop(0)))
                taken += 1
    return taken


def split_unsplit(papers: Sequence[Paper], splitter: SentenceSplitter, log: IngestLog, progress: bool = True) -> None:
    """Sentence-split (in place) every paper whose paragraphs are not split yet, in one spaCy batch."""
    todo = [p for p in papers if not p.sentences_split]
    if not todo:
        return
    texts = [para[0] if len(para) == 1 else " ".join(para) for p in todo for para in p.paragraphs]
    started = time.perf_counter()
    split = []
    with tqdm(total=len(texts), desc="splitting sentences (spaCy senter)", unit="para", disable=not progress, mininterval=1.0) as bar:
        for start in range(0, len(texts), 2048):
            split.extend(splitter.split_many(texts[start:start + 2048]))
            bar.update(min(2048, len(texts) - start))
    i = 0
    for paper in todo:
        paragraphs = []
        for _ in paper.paragraphs:
            paragraphs.append(split[i])
            i += 1
        paper.paragraphs = paragraphs
        paper.sentences_split = True
        log.count(paper.corpus, "paragraphs_sentence_split", len(paragraphs))
    log.count("_all", "sentence_split_seconds", round(time.perf_counter() - started))


SENTENCE_DTYPES = {"para": "int32", "sent": "int32", "year": "int32"}


def papers_frame(papers: Sequence[Paper]) -> pd.DataFrame:
    frame = pd.DataFrame([{col: getattr(p, col) for col in PAPER_COLUMNS} for p in papers], columns=list(PAPER_COLUMNS))
    frame["year"] = frame["year"].astype("int32")
    frame["date"] = pd.to_datetime(frame["date"], errors="raise")
    return frame


def sentences_frame(papers: Sequence[Paper], cleaner: SentenceCleaner, counts: dict[str, CleaningCounts], progress: bool = True) -> pd.DataFrame:
    columns: dict[str, list] = {col: [] for col in SENTENCE_COLUMNS}
    for paper in tqdm(papers, desc="cleaning sentences", unit="paper", disable=not progress, mininterval=1.0):
        tally = counts.setdefault(paper.corpus, CleaningCounts())
        for p, para in enumerate(paper.paragraphs):
            for s, text in enumerate(para):
                result = cleaner.clean(text)
                tally.add(result)
                columns["corpus"].append(paper.corpus)
                columns["paper_id"].append(paper.paper_id)
                columns["year"].append(paper.year)
                columns["date"].append(paper.date)
                columns["para"].append(p)
                columns["sent"].append(s)
                columns["text"].append(text)
                columns["text_clean"].append(result.text_clean)
                columns["drop_reason"].append(result.drop_reason)
    frame = pd.DataFrame(columns, columns=list(SENTENCE_COLUMNS))
    frame = frame.astype(SENTENCE_DTYPES)
    frame["date"] = pd.to_datetime(frame["date"], errors="raise")
    for col in ("corpus", "drop_reason"):
        frame[col] = frame[col].astype("category")
    return frame


def corpus_statistics(papers: pd.DataFrame, sentences: pd.DataFrame) -> pd.DataFrame:
    """Per corpus (and in total): papers, paragraphs, sentences, pairs, kept sentences/pairs, years."""
    s = sentences.assign(kept=sentences["drop_reason"].isna())
    s = s.sort_values(["corpus", "paper_id", "para", "sent"], kind="stable")
    same_para = (s["paper_id"].eq(s["paper_id"].shift(-1)) & s["para"].eq(s["para"].shift(-1)))
    s = s.assign(pair=same_para, pair_kept=same_para & s["kept"] & s["kept"].shift(-1, fill_value=False))
    rows = []
    for corpus, group in list(s.groupby("corpus", observed=True, sort=False)) + [("all", s)]:
        paper_rows = papers if corpus == "all" else papers[papers["corpus"] == corpus]
        rows.append({
            "corpus": corpus,
            "papers": len(paper_rows),
            "paragraphs": int(group.groupby(["paper_id", "para"]).ngroups),
            "sentences": len(group),
            "sentences_kept": int(group["kept"].sum()),
            "pairs": int(group["pair"].sum()),
            "pairs_kept": int(group["pair_kept"].sum()),
            "first_year": int(paper_rows["year"].min()),
            "last_year": int(paper_rows["year"].max()),
        })
    return pd.DataFrame(rows)


def build_corpus(cfg: Config, params: CorpusParams | None = None, write: bool = True) -> CorpusBuild:
    """Read every source, dedupe, sample, split, clean; write papers, sentences, report, quarantine."""
    params = params or cfg.section("corpus", CorpusParams)
    started = time.perf_counter()
    log = IngestLog(strict=params.strict)
    readers = make_readers(cfg, params)
    papers, dedup = read_papers(readers, log, params.progress)
    if not papers:
        raise InputError(", ".join(r.corpus for r in readers), "no valid paper in any source")
    read_total = len(papers)
    if params.max_papers is not None:
        papers = sample_papers(papers, params.max_papers, params.sample_year_bins, cfg.seed)
    split_unsplit(papers, SentenceSplitter(), log, params.progress)
    # A split paragraph can come out empty (whitespace only): drop it the same counted way.
    papers = [p for p in papers if _valid_paper(p, log)]
    cleaner = SentenceCleaner(params.cleaning_rules())
    cleaning: dict[str, CleaningCounts] = {}
    sentences = sentences_frame(papers, cleaner, cleaning, params.progress)
    paper_table = papers_frame(papers)
    statistics = corpus_statistics(paper_table, sentences)
    total_cleaning = CleaningCounts()
    for counts in cleaning.values():
        total_cleaning.merge(counts)
    report = {
        "params": asdict(params),
        "sources": [r.corpus for r in readers],
        "papers_read": read_total,
        "papers_written": len(papers),
        "sampled": params.max_papers is not None and len(papers) < read_total,
        "deduplicated": {key: {"count": len(ids), "paper_ids": ids} for key, ids in dedup.items()},
        "reader_counts": {corpus: dict(sorted(c.items())) for corpus, c in log.counts.items()},
        "quarantine": {r.corpus: log.quarantine_counts(r.corpus) for r in readers},
        "cleaning": {corpus: counts.to_dict() for corpus, counts in cleaning.items()} | {"all": total_cleaning.to_dict()},
        "statistics": statistics.to_dict(orient="records"),
        "papers_per_year": {corpus: {int(y): int(n) for y, n in g["year"].value_counts().sort_index().items()}
                            for corpus, g in paper_table.groupby("corpus")},
        "seconds": round(time.perf_counter() - started, 1),
    }
    if write:
        write_parquet_atomic(paper_table, cfg.paths.papers)
        write_parquet_atomic(sentences, cfg.paths.sentences)
        quarantine_dir = cfg.paths.quarantine
        for reader in readers:
            records = log.quarantined.get(reader.corpus, [])
            write_text_atomic(quarantine_dir / f"{reader.corpus}.jsonl", "".join(json.dumps(r) + "\n" for r in records))
        report["outputs"] = {"papers": str(cfg.paths.papers), "sentences": str(cfg.paths.sentences),
                             "quarantine_dir": str(quarantine_dir)}
        write_json_atomic(cfg.paths.corpus_report, report)
    return CorpusBuild(paper_table, sentences, report, statistics)


# --- report outputs (tables and figures) ---------------------------------------------------------------------------------


def cleaning_table(report: dict) -> pd.DataFrame:
    """One row per cleaning rule: kind (edit/drop) and the count per corpus."""
    corpora = [c for c in report["cleaning"] if c != "all"] + ["all"]
    rows = []
    for kind in ("edits", "drops"):
        for rule in report["cleaning"]["all"][kind]:
            rows.append({"rule": rule, "kind": kind[:-1]} | {c: report["cleaning"][c][kind][rule] for c in corpora})
    return pd.DataFrame(rows)


def write_corpus_outputs(build: CorpusBuild, cfg: Config) -> dict[str, dict]:
    """tables/corpus_statistics, tables/corpus_cleaning, figures/corpus_papers_per_year."""
    from .report import save_figure, set_figure_style, write_table

    inputs = [cfg.paths.papers, cfg.paths.sentences]
    notes = []
    if build.report["sampled"]:
        notes.append(f"Sample of {build.report['papers_written']} of {build.report['papers_read']} papers (corpus.max_papers).")
    for key, info in build.report["deduplicated"].items():
        notes.append(f"{info['count']} papers of {key.replace(' in ', ' already in ')} left out (same ACL id).")
    quarantined = {c: q for c, q in build.report["quarantine"].items() if q}
    if quarantined:
        notes.append(f"Quarantined records: {quarantined} (data/interim/quarantine/).")
    notes.append("pairs = consecutive sentences within one paragraph; *_kept: after the Appendix B.1 drop rules.")
    written = {
        "statistics": write_table(build.statistics, "corpus_statistics", cfg, caption="Corpus statistics per source",
                                  notes=notes, inputs=inputs, latex=True),
        "cleaning": write_table(cleaning_table(build.report), "corpus_cleaning", cfg,
                                caption="Sentences changed (edit) or removed (drop) by each cleaning rule (Appendix B.1)",
                                inputs=inputs, latex=False),
    }
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    set_figure_style()
    fig = year_histogram(build.papers, plt)
    written["figure"] = save_figure(fig, "corpus_papers_per_year", cfg, inputs=[cfg.paths.papers], notes=notes[:1])
    plt.close(fig)
    return written


def year_histogram(papers: pd.DataFrame, plt=None):
    """Stacked bar chart of papers per publication year and corpus."""
    if plt is None:
        import matplotlib.pyplot as plt
    counts = papers.groupby(["year", "corpus"]).size().unstack(fill_value=0).sort_index()
    counts = counts.reindex(range(int(counts.index.min()), int(counts.index.max()) + 1), fill_value=0)
    fig, ax = plt.subplots(figsize=(8, 3))
    counts.plot.bar(stacked=True, ax=ax, width=0.85)
    ax.set_xlabel("publication year")
    ax.set_ylabel("papers")
    labels = [str(y) if y % 5 == 0 else "" for y in counts.index]
    ax.set_xticklabels(labels, rotation=0)
    ax.legend(title="corpus")
    fig.tight_layout()
    return fig


# --- the default corpus without ../shared -----------------------------------------------------------------------------------

SCISUMM_COMMIT = "1dd68e44df5c94cc767cc301cd04e61c52e4bf68"
PINNED_MANIFEST = REPO_ROOT / "data" / "raw" / "acl_scisumm_manifest.tsv"
ACLSUM_WHEEL = "aclsum-0.1.2-py3-none-any.whl"
ACLSUM_WHEEL_SHA256 = "c75ffc48d3eabc5f37c68ea087943780a85950087957759e89746f21111f2213"


def verify_against_manifest(root: "str | Path", manifest: "str | Path" = PINNED_MANIFEST) -> dict[str, str]:
    """Git blob id of every manifest file under `root` that does not match (empty dict: all match)."""
    from .download import git_blob_sha1

    root = Path(root)
    bad = {}
    for row in read_manifest(manifest).itertuples():
        path = root / row.local_file
        actual = git_blob_sha1(path) if path.exists() else "missing"
        if actual != row.git_blob:
            bad[row.local_file] = actual
    return bad


def fetch_acl_scisumm(dest: "str | Path", base_url: str = "https://raw.githubusercontent.com/WING-NUS/scisumm-corpus",
                      commit: str = SCISUMM_COMMIT, manifest: "str | Path" = PINNED_MANIFEST, progress: bool = True) -> Path:
    """Download every file of the pinned manifest from the public repository snapshot into `dest`.

    Each file is verified against its git blob id; files already present and valid are skipped,
    so an interrupted fetch resumes. Returns `dest` (laid out like shared/corpora/acl_scisumm/raw).
    """
    import requests

    from .download import Checksums, download_file

    dest = Path(dest)
    rows = list(read_manifest(manifest).itertuples())
    session = requests.Session()
    for row in tqdm(rows, desc="fetching WING-NUS/scisumm-corpus", unit="file", disable=not progress):
        url = f"{base_url.rstrip('/')}/{commit}/{row.repo_path}"
        download_file(url, dest / row.local_file, expected=Checksums(git_blob=row.git_blob), session=session,
                      trust_md5_etag=False, label=row.local_file)
    frame = read_manifest(manifest)
    write_text_atomic(dest / "MANIFEST.tsv", frame.to_csv(sep="\t", index=False))
    return dest


def fetch_aclsum(dest: "str | Path", wheel_dir: "str | Path | None" = None) -> Path:
    """Get `aclsum==0.1.2` from PyPI (pip download), check the wheel's SHA-256, unpack its paper JSONs."""
    dest = Path(dest)
    wheel_dir = Path(wheel_dir) if wheel_dir else dest / "wheel"
    wheel = wheel_dir / ACLSUM_WHEEL
    if not wheel.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "aclsum==0.1.2", "--no-deps", "--only-binary=:all:",
                        "-d", str(wheel_dir)], check=True)
    return extract_aclsum_wheel(wheel, dest)


def extract_aclsum_wheel(wheel: "str | Path", dest: "str | Path", sha256: str = ACLSUM_WHEEL_SHA256) -> Path:
    """Unpack `aclsum/dataset/paper_jsons/*.json` of a verified wheel into `dest/paper_jsons/`."""
    from .download import ChecksumError
    from .io import atomic_path, sha256_file

    wheel, dest = Path(wheel), Path(dest)
    actual = sha256_file(wheel)
    if actual != sha256:
        raise ChecksumError(f"{wheel}: sha256 {actual} != pinned {sha256}")
    prefix = "aclsum/dataset/paper_jsons/"
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith(prefix) and n.endswith(".json")]
        if not names:
            raise InputError(wheel, f"no {prefix}*.json in the wheel")
        for name in names:
            target = dest / "paper_jsons" / Path(name).name
            with atomic_path(target) as tmp:
                tmp.write_bytes(archive.read(name))
    return dest
