"""Reader of the CL-SciSumm/ScisummNet XML corpus (source `acl_scisumm`) and its download, verified
against the pinned manifest, when ../shared is absent.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..config import packaged
from ..io import require_columns, write_text_atomic
from .base import IngestLog, OnePaperPerFileReader, Paper, acl_year_venue, back_matter_kind, decode_bytes

SCISUMM_COMMIT = "1dd68e44df5c94cc767cc301cd04e61c52e4bf68"
PINNED_MANIFEST = packaged("data/raw/acl_scisumm_manifest.tsv")  # shipped with the package

# --- reader 1: CL-SciSumm / ScisummNet XML ----------------------------------------------------------------


class AclScisummReader(OnePaperPerFileReader):
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


def fetch_acl_scisumm(dest: "str | Path", base_url: str = "https://raw.githubusercontent.com/WING-NUS/scisumm-corpus",
                      commit: str = SCISUMM_COMMIT, manifest: "str | Path" = PINNED_MANIFEST,
                      progress: bool = True) -> Path:
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

