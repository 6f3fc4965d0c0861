"""Output of every table and figure: CSV + Markdown (+ LaTeX) tables, PNG + PDF figures.

Each output gets a provenance record beside it (`<name>.provenance.json`): the params, the
checksums of the inputs it was computed from, the git commit, and the notes that say which
cells could not be computed here and why. Notes also appear under the Markdown table, so a
reader of the table sees them without opening the JSON.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Config, find_checkout
from ..io import atomic_path, sha256_tree, write_json_atomic, write_text_atomic
from .label_sources import LabelSource
from .label_sources import notes as label_notes

# Committed outputs: a change there is a run's result, not a change of the code that produced it.
OUTPUT_PATHSPECS = (":!tables", ":!figures", ":!notebooks/executed", ":!reports", ":!results")


def git_commit(repo: Path | None = None) -> str | None:
    """HEAD of `repo` (default: the checkout, if any), with `-dirty` when tracked code (not the committed outputs)
    differs from it; None outside a git checkout (an installed package)."""
    repo = repo or find_checkout(required=False)
    if repo is None:
        return None
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


# The packages whose versions can change a number the compendium reports (encoders, search, metrics, tables).
NUMBER_CHANGING_PACKAGES = ("torch", "sentence-transformers", "transformers", "faiss-cpu", "faiss-gpu", "bm25s",
                            "PyStemmer", "numpy", "scipy", "pandas", "polars", "mteb", "pylate")


def software_versions() -> dict[str, str]:
    """Python's version and those of the installed NUMBER_CHANGING_PACKAGES (read from their metadata, so nothing is
    imported); a package that is not installed is left out."""
    versions = {"python": platform.python_version()}
    for name in NUMBER_CHANGING_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def provenance(cfg: Config, inputs: Iterable[str | Path] = (), notes: Iterable[str] = (), **extra: Any) -> dict:
    """Params, input checksums, commit, software versions and notes; every path relative (`Paths.relative`), so a
    committed record carries no path of the machine that wrote it."""
    checksums = {}
    for path in inputs:
        path = Path(path)
        checksums[cfg.paths.relative(path)] = sha256_tree(path) if path.exists() else None
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "software": software_versions(),
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
        f"{cfg.paths.params_base}/": "",
        f"{cfg.paths.shared.resolve()}/": "shared:",
        f"{cfg.paths.shared}/": "shared:",
        f"{venv}/": "<venv>/",
        f"{venv.resolve()}/": "<venv>/",
        f"{Path(tempfile.gettempdir()).resolve()}/": "<tmp>/",
        f"{Path.home()}/": "~/",
        str(cfg.paths.root.resolve()): ".",
        str(cfg.paths.params_base): ".",
    }
    return sorted(pairs.items(), key=lambda item: -len(item[0]))


def relative_text(text: str, cfg: Config) -> str:
    """`text` (a table note, a provenance record) with every machine path written relative."""
    for prefix, replacement in machine_path_replacements(cfg):
        text = text.replace(prefix, replacement)
    return text


# The long numeric form every result table can write beside itself (tables/<name>.records.csv), read by the
# summary and its claims table instead of parsing display cells. One row per number: a mean over queries
# (reference empty) or a paired difference subject - reference over the same queries; values in % points
# where the metric is a percentage, intervals 95%, p two-sided. `model`, `prefix`, `setup`: the row of a retrieval
# table (Tables 1, 7, 8) the number sits in, empty elsewhere (`subject` names the same system in one string).
# `n_effective`: of a paired difference, the queries that can differ (evaluation.intervals.paired_cell); empty: all n.
RECORD_COLUMNS = ("table", "scope", "move", "query_set", "metric", "subject", "reference", "model", "prefix", "setup",
                  "value", "low", "high", "n", "p", "n_effective")
_RECORD_TEXT_COLUMNS = ("scope", "subject", "reference", "model", "prefix", "setup")


def records_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """Rows with RECORD_COLUMNS (missing ones empty); an unknown column is an error, not a silent drop."""
    frame = pd.DataFrame(list(rows))
    unknown = sorted(set(frame.columns) - set(RECORD_COLUMNS))
    if unknown:
        raise ValueError(f"record columns {unknown} are not among {RECORD_COLUMNS}")
    return frame.reindex(columns=list(RECORD_COLUMNS))


def read_records(cfg: Config) -> pd.DataFrame:
    """Every tables/*.records.csv of the run, in one frame (empty when none was written)."""
    frames = [pd.read_csv(path, dtype=dict.fromkeys(_RECORD_TEXT_COLUMNS, str), keep_default_na=False, na_values=[""])
              for path in sorted(Path(cfg.paths.tables).glob("*.records.csv"))]
    # reindexed: a records file written before a column was added reads with that column empty
    return pd.concat(frames, ignore_index=True).reindex(columns=list(RECORD_COLUMNS)) if frames else records_frame([])


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
    labels: Iterable[LabelSource] = (),
    records: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """Write tables/<name>.csv, .md (caption, table, notes), optionally .tex, and the provenance.

    `shown` is the Markdown/LaTeX form when it differs from the CSV (e.g. cells "23.3 [21.4, 25.2]"
    whose value and interval bounds are separate CSV columns). `labels`: who produced the labels the
    table rests on (the silver judge, rerankers): named first in the notes and kept in the provenance.
    `records`: the table's numbers in long form (`records_frame`), written to tables/<name>.records.csv."""
    labels = [source for source in labels if source is not None]
    notes = list(dict.fromkeys(relative_text(note, cfg) for note in [*label_notes(labels), *notes]))
    out_dir = cfg.paths.tables
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    with atomic_path(out_dir / f"{name}.csv") as tmp:
        frame.to_csv(tmp, index=False)
    written["csv"] = out_dir / f"{name}.csv"
    if records is not None:
        with atomic_path(out_dir / f"{name}.records.csv") as tmp:
            records_frame(records.assign(table=name).to_dict("records")).to_csv(tmp, index=False)
        written["records"] = out_dir / f"{name}.records.csv"

    shown = format_floats(frame if shown is None else shown, float_format)
    md = []
    if caption:
        md += [f"**{caption}**", ""]
    md.append(shown.to_markdown(index=False))
    if notes:
        md += ["", "Notes:"] + [f"- {note}" for note in notes]
    written["md"] = write_text_atomic(out_dir / f"{name}.md", "\n".join(md) + "\n")
    if latex:
        # escape=True escapes the cells only: the caption ("results (%)") and the notes are escaped here
        tex = shown.to_latex(index=False, caption=latex_escape(caption) or None, label=f"tab:{name}", escape=True)
        written["tex"] = write_text_atomic(out_dir / f"{name}.tex", latex_with_notes(tex, notes))
    written["provenance"] = write_json_atomic(
        out_dir / f"{name}.provenance.json",
        provenance(cfg, inputs, notes, caption=caption, files=[cfg.paths.relative(p) for p in written.values()],
                   label_sources=[source.to_json() for source in labels]),
    )
    return written


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_SPECIAL_RE = re.compile("|".join(re.escape(char) for char in _LATEX_SPECIAL))


def _escape_special(text: str) -> str:
    return _LATEX_SPECIAL_RE.sub(lambda match: _LATEX_SPECIAL[match.group()], text)


def latex_escape(text: str) -> str:
    """`text` as LaTeX source: the ten special characters escaped (as pandas escapes cells), `code` as \\texttt."""
    pieces = re.split(r"`([^`]+)`", str(text))  # the odd pieces stood between backticks
    return "".join(rf"\texttt{{{_escape_special(piece)}}}" if i % 2 else _escape_special(piece)
                   for i, piece in enumerate(pieces))


def latex_with_notes(tex: str, notes: Iterable[str]) -> str:
    """A `to_latex` table with its notes as footnote lines under the tabular, inside the table float: in LaTeX as in
    Markdown, a reader sees who produced the labels, which rows are empty and why, and what a sample covers."""
    notes = [note for note in notes if note]
    if not notes:
        return tex
    block = "\n".join([r"\par\smallskip", r"{\footnotesize\raggedright", r"\textit{Notes:}\par",
                        *(rf"\textbullet\ {latex_escape(note)}\par" for note in notes), "}"])
    end = tex.rfind(r"\end{table}")
    if end < 0:  # no float around the tabular: the notes follow it
        return tex.rstrip("\n") + "\n" + block + "\n"
    return tex[:end] + block + "\n" + tex[end:]


def format_floats(frame: pd.DataFrame, float_format: str = "{:.1f}") -> pd.DataFrame:
    """A table as it is shown (Markdown, LaTeX, a notebook): float columns as text in `float_format`,
    missing cells blank, not "<NA>"/"nan" (the notes say why they are missing)."""
    shown = frame.copy()
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else float_format.format(v))
    return shown.astype(object).where(shown.notna(), "")


# A rerun that changes nothing leaves every committed figure byte-identical: no creation date in the PDF (matplotlib
# writes the time of saving unless told not to; PNGs carry none), and TrueType (Type 42) fonts embedded as they are,
# not Type 3 outlines that journals reject and that make text unselectable.
REPRODUCIBLE_RC = {"pdf.fonttype": 42, "ps.fonttype": 42}
FIXED_METADATA = {"pdf": {"CreationDate": None}, "png": {}}


def save_figure(fig, name: str, cfg: Config, *, inputs: Iterable[str | Path] = (), notes: Iterable[str] = (),
                labels: Iterable[LabelSource] = ()) -> dict[str, Path]:
    """Save a matplotlib figure as figures/<name>.png and .pdf, with its provenance.

    `labels`: who produced the labels it is drawn on, written under the figure itself (a PNG travels
    without its provenance record) and into the record."""
    import matplotlib

    labels = [source for source in labels if source is not None]
    footer = label_notes(labels)
    if footer:
        fig.text(0.0, -0.02, "\n".join(footer), fontsize=6, ha="left", va="top", wrap=True)
    notes = [*footer, *notes]
    out_dir = cfg.paths.figures
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    with matplotlib.rc_context(REPRODUCIBLE_RC):
        for ext in ("png", "pdf"):
            target = out_dir / f"{name}.{ext}"
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight", metadata=FIXED_METADATA[ext])
            written[ext] = target
    written["provenance"] = write_json_atomic(
        out_dir / f"{name}.provenance.json",
        provenance(cfg, inputs, notes, files=[cfg.paths.relative(p) for p in written.values()],
                   label_sources=[source.to_json() for source in labels])
    )
    return written


def set_figure_style() -> None:
    """One look for every figure of the compendium."""
    import matplotlib
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", palette="colorblind")
    matplotlib.rcParams.update(REPRODUCIBLE_RC)
