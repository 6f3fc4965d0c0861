"""What the notebooks of one pipeline run record about the run as a whole.

The pipeline (ratio_utils.pipeline) names this run's folder in $RATIO_RUN_DIR and the executing notebook in
$RATIO_NOTEBOOK before each notebook starts. Stages that can reuse earlier work (fine-tuned models, cached
embeddings, cached bootstrap intervals, the unified model) say what they reused here, so that the summary's
wall-time table (notebook 14, `stages.summary.wall_times`) can say why a notebook took seconds; and a notice
that nobody can act on within a notebook (e.g. "no price for this model") is printed once per run, not once
per call. Outside a pipeline run (a notebook opened by hand, a test) nothing is written: reuse is not
recorded and a notice is shown once per process.

Writes: runs/<run-id>/reused/<executed notebook>.json   {"items": [...], "counts": {what: [reused, total]}}
        runs/<run-id>/notices/<key hash>                  one file per notice already shown (its key)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..io import read_json_if_exists, write_json_atomic, write_text_atomic

RUN_DIR_ENV = "RATIO_RUN_DIR"  # set by the pipeline for the executed notebooks: this run's folder
NOTEBOOK_ENV = "RATIO_NOTEBOOK"  # the executed notebook's file name, e.g. 09_finetune__move=address.ipynb
REUSED_DIR = "reused"
NOTICES_DIR = "notices"

_shown_in_process: set[str] = set()


def clear_run_records(run_dir: Path) -> None:
    """Forget what an earlier run under the same folder recorded (the pipeline calls this at its start)."""
    for name in (REUSED_DIR, NOTICES_DIR):
        shutil.rmtree(Path(run_dir) / name, ignore_errors=True)


def _run_dir() -> Path | None:
    current = os.environ.get(RUN_DIR_ENV)
    return Path(current) if current else None


def _reuse_file() -> Path | None:
    run_dir, notebook = _run_dir(), os.environ.get(NOTEBOOK_ENV)
    return run_dir / REUSED_DIR / f"{notebook}.json" if run_dir and notebook else None


def _update(change) -> None:
    path = _reuse_file()
    if path is None:
        return
    record = read_json_if_exists(path) or {"items": [], "counts": {}}
    change(record)
    write_json_atomic(path, record)


def record_reused(what: str) -> None:
    """Record one thing this notebook reused instead of computing (e.g. a model with its run key)."""
    def add(record):
        if what not in record["items"]:
            record["items"].append(what)

    _update(add)


def count_reused(what: str, reused: int, total: int) -> None:
    """Add `reused` of `total` items (e.g. embeddings read from the cache) to this notebook's count for `what`."""
    if total <= 0:
        return

    def add(record):
        before = record["counts"].get(what, [0, 0])
        record["counts"][what] = [before[0] + reused, before[1] + total]

    _update(add)


def describe_reused(record: dict | None) -> str:
    """One line for a time table: the items, then 'N of M <what>' for each count with something reused."""
    if not record:
        return ""
    counts = [f"{reused:,} of {total:,} {what}"
              for what, (reused, total) in record.get("counts", {}).items() if reused]
    return "; ".join([*record.get("items", []), *counts])


def reused_by_notebook(run_dir: Path) -> dict[str, str]:
    """{executed notebook: what it reused} for one run folder (notebooks that recorded nothing are absent)."""
    return {path.name.removesuffix(".json"): describe_reused(read_json_if_exists(path))
            for path in sorted((Path(run_dir) / REUSED_DIR).glob("*.json"))}


def first_time_this_run(key: str) -> bool:
    """True the first time `key` is asked about in this pipeline run (in this process outside one)."""
    run_dir = _run_dir()
    if run_dir is None:
        if key in _shown_in_process:
            return False
        _shown_in_process.add(key)
        return True
    marker = run_dir / NOTICES_DIR / hashlib.sha256(key.encode()).hexdigest()[:16]
    if marker.exists():
        return False
    write_text_atomic(marker, key + "\n")
    return True
