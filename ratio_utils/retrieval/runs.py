"""Run files of stage 08/09: data/retrieval_runs/<system>/<move>/<split>.parquet and .trec.

The parquet file is what the compendium reads back; the TREC file ("qid Q0 docid rank score
system", space separated) lets trec_eval, ranx or ir_measures score the same run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..io import InputError, atomic_path, write_parquet_atomic, require_columns
from ..schema import RUN_COLUMNS, Move, Split

_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def system_slug(name: str) -> str:
    """A folder-safe form of a system name ('all-MiniLM-L6-v2 (query: )' -> 'all-MiniLM-L6-v2_query_')."""
    slug = _SAFE.sub("_", name.strip()).strip("_")
    if not slug:
        raise ValueError(f"system name {name!r} has no usable characters")
    return slug


def run_path(runs_dir: Path, system: str, move: Move | str, split: Split | str) -> Path:
    return Path(runs_dir) / system_slug(system) / Move.parse(move).value / f"{Split.parse(split).value}.parquet"


def write_run(run: pd.DataFrame, path: Path, system: str) -> dict[str, Path]:
    """Write <path>.parquet and <path>.trec atomically."""
    path = Path(path).with_suffix(".parquet")
    require_columns(run, RUN_COLUMNS, "run")
    frame = run.loc[:, list(RUN_COLUMNS)]
    write_parquet_atomic(frame, path)
    trec = path.with_suffix(".trec")
    tag = system_slug(system)
    with atomic_path(trec) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for qid, docid, rank, score in frame.itertuples(index=False):
                out.write(f"{qid} Q0 {docid} {int(rank)} {float(score):.6f} {tag}\n")
    return {"parquet": path, "trec": trec}


def read_run(path: Path) -> pd.DataFrame:
    """Read a run from .parquet or .trec (errors name the file and line)."""
    path = Path(path)
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        require_columns(frame, RUN_COLUMNS, path)
        return frame[list(RUN_COLUMNS)]
    rows = []
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 6:
                raise InputError(path, f"expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}", lineno)
            try:
                rows.append((fields[0], fields[2], int(fields[3]), float(fields[4])))
            except ValueError as exc:
                raise InputError(path, f"bad rank or score: {exc}", lineno) from None
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))
