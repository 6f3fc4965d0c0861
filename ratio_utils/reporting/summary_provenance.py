"""Where the summary's numbers come from and what was left out (notebook 14, `ratio_utils.stages.summary`): every
table note that says something was reduced, replaced by a stand-in or not run; the run's git commit and params hash;
checksums of the inputs; the wall time per notebook (the latest execution of each) with what each reused.

Reads:  cfg.paths.tables (*.provenance.json: the tables' notes), the inputs of stages 00-06 (checksums),
        the executed notebooks (papermill's duration and end time), a pipeline run's timings.csv and its reuse
        records (`ratio_utils.publish.run_records`).
Writes: nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Config
from ..io import sha256_tree
from ..publish.published import git_commit
from ..publish.run_records import reused_by_notebook

# A table note that says a part of the paper was reduced, replaced or not run contains one of these.
REDUCTION_MARKERS = re.compile(
    r"not run|not available|reduced|stand-in|instead|absent|needs an llm|no endpoint|cannot|not produced|"
    r"at most|seeded sample|not reachable|left empty|stay empty|smoke run|indicative|"
    r"(?:trained|scored|run)\b[^.;]*\bonly\b",
    re.IGNORECASE,
)
_ROW_NOTE = re.compile(r"^([^:()]+ \([^()]*, [^()]*\)): (.+)$")
_ABSOLUTE_OUTPUT_PATH = re.compile(r"(?<![\w.])/(?:[^\s/]+/)*?(?=(?:data|models|tables|figures|cache|runs|reports)/)")


def shorten_paths(cfg: Config, text: str) -> str:
    """No absolute path of any machine in the report: output folders relative, the shared folder a name."""
    text = text.replace(str(cfg.paths.shared), "<shared>").replace(str(cfg.paths.root) + os.sep, "")
    return _ABSOLUTE_OUTPUT_PATH.sub("", text)


def reductions(cfg: Config) -> pd.DataFrame:
    """Every table note that says something was reduced, replaced by a stand-in, or not run (one row per note).

    Collected from the provenance records the tables were written with, so the list is the tables'
    own words; a note repeated by several tables appears once, with the tables that carry it.
    """
    found: dict[str, dict[str, list[str]]] = {}  # reason -> {"rows": [...], "tables": [...]}
    for path in sorted(Path(cfg.paths.tables).glob("*.provenance.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for note in record.get("notes", []):
            if not REDUCTION_MARKERS.search(note):
                continue
            note = shorten_paths(cfg, note)
            # "<system> (<prefix>, <setup>): <reason>" notes of Tables 1/7/8: one line per reason, its rows listed
            row_note = _ROW_NOTE.match(note)
            reason, row = (row_note.group(2), row_note.group(1)) if row_note else (note, None)
            entry = found.setdefault(reason, {"rows": [], "tables": []})
            if row and row not in entry["rows"]:
                entry["rows"].append(row)
            entry["tables"].append(path.name.removesuffix(".provenance.json"))
    rows = [{"what": "; ".join(entry["rows"]) or "-", "why / how": reason,
             "tables": ", ".join(dict.fromkeys(entry["tables"]))} for reason, entry in found.items()]
    return pd.DataFrame(rows, columns=["what", "why / how", "tables"])


def params_hash(cfg: Config) -> str:
    """sha256 of the params that change results (name, seed, every section), independent of where the repo lives."""
    payload = {"name": cfg.name, "seed": cfg.seed, "sections": cfg.sections}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def input_checksums(cfg: Config) -> pd.DataFrame:
    """sha256 of the files and folders the results rest on (absent ones are listed as absent)."""
    inputs = {
        "papers (stage 00)": cfg.paths.papers,
        "lexicon (stages 01-04)": cfg.paths.final_lexicon,
        "pairs (stage 05)": cfg.paths.pairs,
        "distractors (stage 05)": cfg.paths.distractors,
        "benchmark (stage 06)": cfg.paths.benchmark,
    }
    rows = []
    for what, path in inputs.items():
        path = Path(path)
        rows.append({"input": what, "path": shorten_paths(cfg, str(path)),
                     "sha256": sha256_tree(path)[:16] if path.exists() else "absent"})
    return pd.DataFrame(rows)


NOTEBOOK_TIME_COLUMNS = ["notebook", "finished", "seconds", "reused"]


def notebook_times(executed: Path, timings: Path | None = None) -> pd.DataFrame:
    """Seconds per notebook of the run's outputs, the latest execution of each: papermill's own record (`duration`,
    `end_time`) in every executed notebook of `executed` (cfg.paths.executed_notebooks; the summary notebook itself
    is still running: not listed), so a notebook rerun alone shows its rerun and the others keep their first run's
    times; `reused`: what it reused, from the pipeline run of `timings` where that run executed it. A notebook
    without papermill's record is listed with no seconds, not dropped."""
    reused = reused_by_notebook(timings.parent) if timings is not None else {}
    rows = []
    for path in sorted(Path(executed).glob("*.ipynb")):
        if path.stem.startswith("14_"):
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("papermill", {})
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: not a readable notebook ({error})") from error
        seconds = record.get("duration")
        rows.append({"notebook": path.stem, "finished": str(record.get("end_time") or "")[:19].replace("T", " "),
                     "seconds": round(float(seconds), 1) if seconds is not None else float("nan"),
                     "reused": reused.get(path.stem, reused.get(path.name, ""))})
    return pd.DataFrame(rows, columns=NOTEBOOK_TIME_COLUMNS)


def wall_times(timings: Path | None) -> pd.DataFrame:
    """Seconds per executed notebook of a pipeline run (its runs/<run-id>/timings.csv; the summary notebook itself is
    still running: not listed), with what each reused from earlier runs instead of computing it."""
    if timings is None:
        return pd.DataFrame(columns=["run", "notebook", "seconds", "reused"])
    frame = pd.read_csv(timings)
    reused = reused_by_notebook(timings.parent)
    frame = frame.assign(run=timings.parent.name, reused=[reused.get(name, "") for name in frame["notebook"]])
    return frame[["run", "notebook", "seconds", "reused"]]


def run_provenance(cfg: Config) -> dict[str, Any]:
    """The git commit, the params file and name, a hash of the params and the seed of this run."""
    return {"git commit": git_commit() or "unknown", "params file": Path(cfg.source).name if cfg.source else None,
            "params name": cfg.name, "params sha256": params_hash(cfg)[:16], "seed": cfg.seed}
