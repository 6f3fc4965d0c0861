"""Prompt files of the LLM steps: the judge's (paper Appendix E) and the reranker's.

Reads `prompts/<step>/<move>/<variant>.md` (a YAML front-matter header: name, version, move, summary; then the
system message), checks each against its folder and hashes it; writes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from ..config import find_checkout, packaged
from ..io import InputError, sha256_file
from ..schema import MOVES, Move


@dataclass(frozen=True)
class PromptFile:
    move: Move
    name: str
    version: int
    summary: str
    text: str  # the system message
    path: Path
    sha256: str  # of the whole file, header included

    @property
    def label(self) -> str:
        return f"{self.name}-v{self.version}"


def read_prompt(path: Path) -> PromptFile:
    """One prompt file: a YAML header between `---` lines (name, version, move, summary), then the text."""
    raw = Path(path).read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", raw, re.DOTALL)
    if not match:
        raise InputError(path, "a prompt file starts with a '---' header block (name, version, move)", line=1)
    header = yaml.safe_load(match.group(1)) or {}
    missing = [k for k in ("name", "version", "move") if k not in header]
    if missing:
        raise InputError(path, f"prompt header lacks {missing}", line=1)
    move = Move.parse(header["move"])
    if Path(path).parent.name != move.value:
        raise InputError(path, f"prompt declares move {move.value!r} but lives in folder {Path(path).parent.name!r}")
    text = match.group(2).strip()
    if not text:
        raise InputError(path, "prompt text is empty")
    return PromptFile(move, str(header["name"]), int(header["version"]), str(header.get("summary", "")),
                       text, Path(path), sha256_file(path))


def load_prompts(prompts_dir: Path) -> dict[Move, list[PromptFile]]:
    prompts: dict[Move, list[PromptFile]] = {}
    for move in MOVES:
        files = sorted((Path(prompts_dir) / move.value).glob("*.md"))
        loaded = [read_prompt(p) for p in files]
        names = [p.name for p in loaded]
        if len(set(names)) != len(names):
            raise InputError(prompts_dir / move.value, f"duplicate prompt names {names}")
        prompts[move] = loaded
    return prompts


def prompt_table(prompts: dict[Move, list[PromptFile]]) -> pd.DataFrame:
    rows = [
        {"move": p.move.value, "prompt": p.label, "summary": p.summary, "file": _relative(p.path),
         "sha256": p.sha256[:12]}
        for move_prompts in prompts.values() for p in move_prompts
    ]
    return pd.DataFrame(rows)


def _relative(path: Path) -> str:
    """A prompt file as tables show it: relative to the checkout, else to the package's files (`prompts/...`)."""
    for base in (find_checkout(required=False), packaged(".")):
        if base is None:
            continue
        # resolved first: in a checkout the package's prompts are links to the checkout's prompts/
        for candidate, root in ((Path(path).resolve(), base.resolve()), (Path(path), base)):
            if candidate.is_relative_to(root):
                return candidate.relative_to(root).as_posix()
    return str(path)
