"""The run-file format of stages 08-12: data/retrieval_runs/<system>/<move>/<split>.parquet, .trec and .run.json.

The parquet file is what the compendium reads back; the TREC file ("qid Q0 docid rank score
system", space separated) lets trec_eval, ranx or ir_measures score the same run. The sidecar
(`RunInfo`, .run.json) names the system and the benchmark checksum the run was computed on.
The rule by which a stage reuses a run file instead of ranking again (`get_or_compute`) and recording a
system's run are `ratio_utils.systems.runs`; this module is the format both it and the reranker write.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import pandas as pd

from ..io import InputError, atomic_path, require_columns, write_json_atomic, write_parquet_atomic
from ..publish.published import software_versions
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


# -- system names and the sidecar that says what a run file is ------------------------------------

SETUPS = ("Baseline", "Tuned", "Baseline + rerank", "Tuned + rerank")
RERANK_SUFFIX = " + rerank"


def system_name(model: str, prefix: str = "generic", setup: str = "Baseline") -> str:
    """The one name of a table row's system, used for its run folder (system_slug) and sidecar.

    'all-MiniLM-L6-v2' (generic prefix, baseline), 'all-MiniLM-L6-v2 (per-move)',
    'all-MiniLM-L6-v2 (tuned)', 'all-MiniLM-L6-v2 (tuned) + rerank', 'BM25-unigram' (prefix '-').
    A reranked system is its first stage's name plus ' + rerank' (notebook 10).
    """
    if setup not in SETUPS:
        raise ValueError(f"unknown setup {setup!r}; expected one of {SETUPS}")
    qualifiers = [prefix] if prefix not in ("-", "generic") else []
    if setup.startswith("Tuned"):
        qualifiers.append("tuned")
    name = model + (f" ({', '.join(qualifiers)})" if qualifiers else "")
    return name + (RERANK_SUFFIX if setup.endswith("rerank") else "")


def reranked_system_name(first_stage: str) -> str:
    """The run-folder name of the LLM reranking of a first-stage system (notebook 10)."""
    return first_stage + RERANK_SUFFIX


@dataclass(frozen=True)
class RunInfo:
    """The sidecar of a run file (<split>.run.json): which system, on which benchmark, which queries.

    Tables 1, 7 and 8 are assembled from every run file with a sidecar (ratio_utils.reporting.paper_tables);
    `benchmark_checksum` lets the assembler refuse runs computed on another benchmark. `max_queries`
    (the first n queries by id, Benchmark.eval_set) or `qids` (an explicit list) say which queries a
    partial run covers; with neither, every query of the move and split counts.
    """

    model: str  # display name of the model, e.g. "all-MiniLM-L6-v2", "BM25-unigram"
    prefix: str  # "-", "generic", "recommended", "per-move"
    setup: str  # one of SETUPS
    family: str  # "bm25", "dense", "colbert", "llm-rerank", ...
    move: str
    split: str
    benchmark_checksum: str
    stage: str  # the notebook that wrote it, e.g. "08_retrieval_baselines"
    k: int = 100
    max_queries: int | None = None
    qids: list[str] | None = None
    first_stage: str | None = None  # reranked runs: the system whose top k was reranked
    source: str = ""  # model name/path, checkpoint, n-gram order
    model_fingerprint: str | None = None  # models.model_fingerprint of a model folder
    retriever: dict = field(default_factory=dict)  # Retriever.describe()
    ranking: str = ""  # the family's ranking rule (systems.families.Family.ranking); part of the reuse key
    notes: list[str] = field(default_factory=list)
    software: dict = field(default_factory=dict)  # Python and package versions of the writer; not in the reuse key

    @property
    def system(self) -> str:
        return system_name(self.model, self.prefix, self.setup)

    def to_json(self) -> dict:
        return {"system": self.system, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> "RunInfo":
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def info_path(run_file: Path) -> Path:
    """<split>.parquet -> <split>.run.json"""
    return Path(run_file).with_suffix("").with_suffix(".run.json")


def write_system_run(run: pd.DataFrame, runs_dir: Path, info: RunInfo) -> dict[str, Path]:
    """Write a run under runs_dir/<system>/<move>/<split> with its sidecar (written last)."""
    path = run_path(runs_dir, info.system, info.move, info.split)
    written = write_run(run, path, info.system)
    stamped = dataclasses.replace(info, software=info.software or software_versions())
    written["info"] = write_json_atomic(info_path(path), stamped.to_json())
    return written


def read_run_info(run_file: Path) -> RunInfo:
    """The sidecar of a run file; a run file without one is an error naming the file."""
    path = info_path(run_file)
    if not path.exists():
        raise InputError(
            run_file, "no sidecar (.run.json) says which system and benchmark this run belongs to; "
            "write runs with ratio_utils.retrieval.runs.write_system_run (or delete the stale file)"
        )
    try:
        return RunInfo.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as exc:
        raise InputError(path, f"not a run sidecar: {exc}") from None


def recorded_prefixes(info: RunInfo) -> tuple[str, str] | None:
    """The (query, document) prefixes a dense run was encoded with (its retriever record); None for others."""
    if "query_prefix" not in info.retriever:
        return None
    return info.retriever["query_prefix"], info.retriever.get("doc_prefix")


# -- housekeeping: run files of another benchmark are set aside, never mixed in ----------------------------

STALE_DIR = "_stale"  # runs_dir/_stale/<old checksum>/...: runs of an earlier benchmark, set aside by notebook 08


def run_files(runs_dir: Path) -> list[Path]:
    """Every run file under runs_dir/<system>/<move>/<split>.parquet, sorted (order-free)."""
    return sorted(p for p in Path(runs_dir).glob("*/*/*.parquet")
                  if not p.relative_to(runs_dir).parts[0].startswith("_"))


def retire_foreign_runs(runs_dir: Path, checksum: str) -> list[str]:
    """Move the run files not computed on this benchmark (or without a sidecar) to runs_dir/_stale/<checksum>/.

    Notebook 08 starts the retrieval stages on a benchmark: a new benchmark makes every earlier run
    stale, including those of notebooks 09 and 10, which write theirs again when they run. Returns
    what was moved, so the notebook shows it.
    """
    runs_dir = Path(runs_dir)
    moved = []
    for path in run_files(runs_dir):
        try:
            old = read_run_info(path).benchmark_checksum
        except InputError:
            old = "no-sidecar"
        if old == checksum:
            continue
        rel = path.relative_to(runs_dir)
        target = runs_dir / STALE_DIR / str(old)[:12] / rel.parent
        target.mkdir(parents=True, exist_ok=True)
        stem = path.with_suffix("").name
        for sibling in path.parent.glob(f"{stem}.*"):
            shutil.move(str(sibling), str(target / sibling.name))
        moved.append(f"{rel} (benchmark {str(old)[:12]})")
    return moved
