"""The benchmark in the formats other tools read (docs/search.md, "Exports"); its command is `ratio-export`:

    ratio-export --format beir|trec --move specify --split test OUT/

* **BEIR** (BEIR's `GenericDataLoader`, MTEB-style harnesses): `corpus.jsonl` ({"_id", "title", "text"}),
  `queries.jsonl` ({"_id", "text", "metadata"}), `qrels/<split>.tsv` (header `query-id corpus-id score`).
* **TREC** (trec_eval, ir_measures, Pyserini/Anserini): `topics.tsv` (Anserini's TSV topics: qid TAB text),
  `qrels.txt` (`qid 0 docid 1`), `collection.jsonl` (Pyserini's JsonCollection: {"id", "contents"}).

Both hold one move and split (`--move all` writes one folder per move): the queries of that move, and as
corpus the split's candidate pool, the pool shared by the three moves (silver queries use the test
pool), so a system scores every move against the same candidates, as in the paper.

**A query's own sentence** may be in the pool (it is another query's candidate). Ids are text hashes
(`schema.sentence_id`), so that candidate has exactly the query's id. Convention (the compendium's,
architecture.md): it is never a candidate for its own query. The corpus keeps it and the qrels never
list it; a run must not rank it for that query. BEIR's `EvaluateRetrieval.evaluate` drops it by
default (`ignore_identical_ids=True`); for trec_eval / ir_measures, drop run lines whose docid equals
the qid (run files of `ratio_utils.retrieval` never contain them). `export.json` counts such queries.

**Checked input, atomic output.** The benchmark is read through `Benchmark`'s checks (every gold in the pool, no
null or shared query id, no repeated docid: ratio_utils.dataset.benchmark), so an export never holds `"_id": NaN`
or qrels pointing at absent documents; a `Benchmark` opened with `allow_invalid=True` leaves the offending rows out
and `export.json` lists them (`benchmark_problems`). The files are written into a temporary folder beside OUT and
swapped in (`io.replace_folder`), so a failure leaves the old export whole, never a new corpus beside old qrels;
an existing OUT is replaced only when it is empty or an export itself (it holds export.json).

Reads: the benchmark (ratio_utils.dataset.benchmark). Writes: OUT/ (default data/processed/exports/<format>/<move>/).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pandas as pd

from ..io import atomic_path, replace_folder, write_json_atomic
from ..schema import Move, Split
from .benchmark import Benchmark, candidates_path, pairs_path

RECORD_FILE = "export.json"  # what marks a folder as an export (and so as safe to replace)

FORMATS = ("beir", "trec")
CONVENTION = ("a query's own sentence (candidate id == query id) is never relevant and must be removed from its "
              "ranking; BEIR's EvaluateRetrieval(ignore_identical_ids=True) does this")


def _write_jsonl(path: Path, records) -> int:
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    return count


def _write_lines(path: Path, lines) -> int:
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
                count += 1
    return count


def _clean(text: str) -> str:
    # TSV and one-line formats: a tab or newline inside a sentence would split the record.
    return " ".join(str(text).split())


def export_data(bench: Benchmark, move: Move | str,
                split: Split | str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(queries: qid, text; qrels: qid, docid; pool: docid, text) of one move and split."""
    move, split = Move.parse(move), Split.parse(split)
    evalset = bench.eval_set(move, split)
    queries, qrels = evalset.queries, evalset.qrels
    pool = evalset.pool[["docid", "text"]]  # one row per docid: Benchmark.pool refuses (or reports) a repeated one
    own = qrels["qid"] == qrels["docid"]
    if own.any():  # cannot happen for mined pairs (query and gold are consecutive, different sentences)
        raise ValueError(f"{pairs_path(bench.root, move, split)}: {int(own.sum())} pair(s) have the query as their "
                         f"own gold, e.g. {qrels.loc[own, 'qid'].iloc[0]}")
    return queries, qrels.drop_duplicates(), pool  # a pair listed twice is one relevance judgement


def _check_target(out_dir: Path) -> None:
    """Refuse a target the swap would destroy: a file, or a folder with content that is not an export."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir}: the export target is a file; name a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / RECORD_FILE).is_file():
        raise FileExistsError(f"{out_dir}: not empty and not an export (no {RECORD_FILE}); name a new or empty folder "
                              "(an export replaces its whole folder)")


def _problems_of(bench: Benchmark, move: Move, split: Split) -> list[dict]:
    """The problems `allow_invalid` left out of the two files one export reads."""
    files = {str(pairs_path(bench.root, move, split).relative_to(bench.root)),
             str(candidates_path(bench.root, split).relative_to(bench.root))}
    return [record for record in bench.problem_records() if record["file"] in files]


def export(bench: Benchmark, move: Move | str, split: Split | str, out_dir: Path, fmt: str) -> dict:
    """Write one move and split in `fmt` (beir|trec) to out_dir; return the export.json record."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    move, split = Move.parse(move), Split.parse(split)
    queries, qrels, pool = export_data(bench, move, split)
    target = Path(out_dir)
    _check_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # written here, then swapped in whole: a failure midway leaves the old export as it was
    out_dir = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    out_dir.mkdir()
    try:
        record = _write_export(queries, qrels, pool, move, split, out_dir, fmt)
        record["benchmark_problems"] = _problems_of(bench, move, split)
        write_json_atomic(out_dir / RECORD_FILE, record)
        replace_folder(out_dir, target)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return record


def _write_export(queries: pd.DataFrame, qrels: pd.DataFrame, pool: pd.DataFrame, move: Move, split: Split,
                  out_dir: Path, fmt: str) -> dict:
    """The format's files in out_dir; the export.json record (without the benchmark's problems)."""
    if fmt == "beir":
        files = {
            "corpus.jsonl": _write_jsonl(out_dir / "corpus.jsonl", ({"_id": d, "title": "", "text": t}
                                                                    for d, t in pool.itertuples(index=False))),
            "queries.jsonl": _write_jsonl(out_dir / "queries.jsonl",
                                          ({"_id": q, "text": t, "metadata": {"move": move.value}}
                                           for q, t in queries.itertuples(index=False))),
            f"qrels/{split.value}.tsv": _write_lines(out_dir / "qrels" / f"{split.value}.tsv",
                                                     ["query-id\tcorpus-id\tscore",
                                                      *(f"{q}\t{d}\t1"
                                                        for q, d in qrels.itertuples(index=False))]) - 1,
        }
    else:
        files = {
            "topics.tsv": _write_lines(out_dir / "topics.tsv",
                                       (f"{q}\t{_clean(t)}" for q, t in queries.itertuples(index=False))),
            "qrels.txt": _write_lines(out_dir / "qrels.txt",
                                      (f"{q} 0 {d} 1" for q, d in qrels.itertuples(index=False))),
            "collection.jsonl": _write_jsonl(out_dir / "collection.jsonl", ({"id": d, "contents": t}
                                                                            for d, t in pool.itertuples(index=False))),
        }
    record = {
        "format": fmt,
        "move": move.value,
        "split": split.value,
        "pool_split": split.pool_split.value,
        "queries": int(len(queries)),
        "qrels": int(len(qrels)),
        "pool": int(len(pool)),
        "queries_whose_own_sentence_is_in_the_pool": int(queries["qid"].isin(set(pool["docid"])).sum()),
        "convention": CONVENTION,
        "files": files,
    }
    return record
