"""Reader of the aclsum corpus (S2ORC/doc2json JSON shipped in the `aclsum` wheel; source `aclsum`) and
its download from PyPI, verified against the pinned wheel checksum, when ../shared is absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from ..io import InputError
from .base import IngestLog, OnePaperPerFileReader, Paper, acl_year_venue, back_matter_kind

ACLSUM_WHEEL = "aclsum-0.1.2-py3-none-any.whl"
ACLSUM_WHEEL_SHA256 = "c75ffc48d3eabc5f37c68ea087943780a85950087957759e89746f21111f2213"

# --- reader 2: aclsum (S2ORC/doc2json JSON) ------------------------------------------------------------------


class AclsumReader(OnePaperPerFileReader):
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

    def files(self) -> list[Path]:
        return sorted(self.json_dir.glob("*.json"))

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
    from ..io import atomic_path, sha256_file
    from .download import ChecksumError

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
