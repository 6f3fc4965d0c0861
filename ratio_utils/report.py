"""Output of every table and figure: CSV + Markdown (+ LaTeX) tables, PNG + PDF figures.

Each output gets a provenance record beside it (`<name>.provenance.json`): the params, the
checksums of the inputs it was computed from, the git commit, and the notes that say which
cells could not be computed here and why. Notes also appear under the Markdown table, so a
reader of the table sees them without opening the JSON.
"""

from __future__ import annotations

import datetime as _dt
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from .config import REPO_ROOT, Config
from .io import atomic_path, sha256_tree, write_json_atomic, write_text_atomic


# Committed outputs: a change there is a run's result, not a change of the code that produced it.
OUTPUT_PATHSPECS = (":!tables", ":!figures", ":!notebooks/executed", ":!reports")


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """HEAD, with `-dirty` when tracked code (not the committed outputs) differs from it."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *OUTPUT_PATHSPECS],
            cwd=repo, capture_output=True, text=True, check=True,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def provenance(cfg: Config, inputs: Iterable[str | Path] = (), notes: Iterable[str] = (), **extra: Any) -> dict:
    """Params, input checksums, commit and notes; every path relative (`Paths.relative`), so a
    committed record carries no path of the machine that wrote it."""
    checksums = {}
    for path in inputs:
        path = Path(path)
        checksums[cfg.paths.relative(path)] = sha256_tree(path) if path.exists() else None
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "params": cfg.to_dict(),
        "inputs": checksums,
        "notes": [relative_text(note, cfg) for note in notes],
        **extra,
    }


def machine_path_replacements(cfg: Config) -> list[tuple[str, str]]:
    """(absolute prefix, what an executed notebook shows instead), longest prefix first."""
    venv = Path(sys.prefix)
    pairs = {
        f"{cfg.paths.root.resolve()}/": "",
        f"{REPO_ROOT}/": "",
        f"{cfg.paths.shared.resolve()}/": "shared:",
        f"{cfg.paths.shared}/": "shared:",
        f"{venv}/": "<venv>/",
        f"{venv.resolve()}/": "<venv>/",
        f"{Path(tempfile.gettempdir()).resolve()}/": "<tmp>/",
        f"{Path.home()}/": "~/",
        str(cfg.paths.root.resolve()): ".",
        str(REPO_ROOT): ".",
    }
    return sorted(pairs.items(), key=lambda item: -len(item[0]))


def relative_text(text: str, cfg: Config) -> str:
    """`text` (a table note, a provenance record) with every machine path written relative."""
    for prefix, replacement in machine_path_replacements(cfg):
        text = text.replace(prefix, replacement)
    return text


def write_table(
    frame: pd.DataFrame,
    name: str,
    cfg: Config,
    *,
    caption: str = "",
    notes: Iterable[str] = (),
    inputs: Iterable[str | Path] = (),
    latex: bool = True,
    float_format: str = "{:.1f}",
    shown: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """Write tables/<name>.csv, .md (caption, table, notes), optionally .tex, and the provenance.

    `shown` is the Markdown/LaTeX form when it differs from the CSV (e.g. cells "23.3 [21.4, 25.2]"
    whose value and interval bounds are separate CSV columns)."""
    notes = [relative_text(note, cfg) for note in notes]
    out_dir = cfg.paths.tables
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    with atomic_path(out_dir / f"{name}.csv") as tmp:
        frame.to_csv(tmp, index=False)
    written["csv"] = out_dir / f"{name}.csv"

    shown = format_floats(frame if shown is None else shown, float_format)
    md = []
    if caption:
        md += [f"**{caption}**", ""]
    md.append(shown.to_markdown(index=False))
    if notes:
        md += ["", "Notes:"] + [f"- {note}" for note in notes]
    written["md"] = write_text_atomic(out_dir / f"{name}.md", "\n".join(md) + "\n")
    if latex:
        tex = shown.to_latex(index=False, caption=caption or None, label=f"tab:{name}", escape=True)
        written["tex"] = write_text_atomic(out_dir / f"{name}.tex", tex)
    written["provenance"] = write_json_atomic(
        out_dir / f"{name}.provenance.json",
        provenance(cfg, inputs, notes, caption=caption, files=[cfg.paths.relative(p) for p in written.values()]),
    )
    return written


def format_floats(frame: pd.DataFrame, float_format: str = "{:.1f}") -> pd.DataFrame:
    """A table as it is shown (Markdown, LaTeX, a notebook): float columns as text in `float_format`,
    missing cells blank, not "<NA>"/"nan" (the notes say why they are missing)."""
    shown = frame.copy()
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else float_format.format(v))
    return shown.astype(object).where(shown.notna(), "")


def save_figure(fig, name: str, cfg: Config, *, inputs: Iterable[str | Path] = (), notes: Iterable[str] = ()) -> dict[str, Path]:
    """Save a matplotlib figure as figures/<name>.png and .pdf, with its provenance."""
    out_dir = cfg.paths.figures
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for ext in ("png", "pdf"):
        target = out_dir / f"{name}.{ext}"
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
        written[ext] = target
    written["provenance"] = write_json_atomic(
        out_dir / f"{name}.provenance.json", provenance(cfg, inputs, notes, files=[cfg.paths.relative(p) for p in written.values()])
    )
    return written


def set_figure_style() -> None:
    """One look for every figure of the compendium."""
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", palette="colorblind")
