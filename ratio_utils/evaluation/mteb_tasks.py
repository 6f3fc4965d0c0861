"""Ratio as MTEB retrieval tasks: `mteb.evaluate(model, ratio_tasks(<benchmark dir>))`, one task per move.

    ratio-mteb all-MiniLM-L6-v2 --compare    # MTEB beside ratio_utils.evaluate

Each task (`RatioAddress`, `RatioBroaden`, `RatioSpecify`) is built from a directory in the release layout
(ours or the authors'): the split's shared candidate pool is the corpus, the move's queries are the queries, each
query's gold candidates are its qrels, and `test` and, where it holds pairs, `silver` are the evaluation splits
(silver queries search the test pool). Main score MRR@10, the paper's primary metric.

A query's own sentence may be in the pool (ids are text hashes, so it has the query's id): as in the BEIR export
(docs/search.md), it is never a candidate for its own query, which MTEB's `ignore_identical_ids=True` applies.
The tasks read the directory through `ratio_utils.dataset.benchmark` rather than MTEB's Hub loader, so a
directory without a dataset card (the official release) works too. Prefixes travel as the model's prompts:
`generic_prompts()` gives the compendium's `query: ` / `document: ` (schema.GENERIC_PREFIXES), and a model folder's
stored prompts (`config_sentence_transformers.json`) are used when none are passed.

Reads: the benchmark directory (pairs, pools, `provenance/silver.json`, corpora named in the pairs). Writes: nothing
(MTEB's result cache only where the caller passes one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ..dataset.benchmark import Benchmark, load_benchmark
from ..schema import GENERIC_PREFIXES, MOVES, Move, Split
from .metrics import PRIMARY_METRIC

K_VALUES = (1, 3, 5, 10, 20, 100)
MAIN_SCORE = "mrr_at_10"
# MTEB's score names beside this project's metric names (ratio_utils.evaluation.metrics)
SCORE_NAMES = {"MRR@10": "mrr_at_10", "R@10": "recall_at_10", "R@100": "recall_at_100"}


def task_name(move: Move) -> str:
    return f"Ratio{move.value.capitalize()}"


def eval_splits(bench: Benchmark, move: Move) -> list[str]:
    """test, and silver where the directory holds silver pairs for the move."""
    return [Split.TEST.value] + ([Split.SILVER.value] if bench.query_split(move) is Split.SILVER else [])


def _test_dates(bench: Benchmark) -> tuple[str, str] | None:
    """MTEB's date field: the test pairs' publication dates, or whole years where only years are known."""
    from ..dataset.card import date_span

    frames = [bench.queries(m, Split.TEST) for m in MOVES if bench.has(m, Split.TEST)]
    span = date_span(pd.concat(frames)) if frames else None
    if span is None or len(span[0]) > 4:
        return span
    return f"{span[0]}-01-01", f"{span[1]}-12-31"


def _licence(bench: Benchmark, licences: dict[str, str]) -> str:
    """MTEB's licence field: one known id where every pair comes from corpora of that licence, else 'multiple'."""
    corpora = set()
    for move in MOVES:
        for split in (Split.TEST, Split.SILVER):
            if bench.has(move, split):
                frame = bench.queries(move, split)
                corpora |= set(frame["corpus"].astype(str)) if "corpus" in frame else set()
    ids = {_licence_id(licences.get(c, "")) for c in corpora}
    if not ids or ids == {"not specified"}:
        return "not specified"
    return ids.pop() if len(ids) == 1 else "multiple"


def _licence_id(text: str) -> str:
    lowered = text.lower()
    for marker, licence in (("cc by 4.0", "cc-by-4.0"), ("mit", "mit"), ("odc-by", "odc-by")):
        if lowered.startswith(marker):
            return licence
    return "not specified"


def task_metadata(bench: Benchmark, move: Move, licences: dict[str, str] | None = None) -> Any:
    """MTEB TaskMetadata of one move's task on this directory: what the benchmark is, never the official release."""
    from mteb.abstasks.task_metadata import TaskMetadata

    from ..dataset.card import PAPER
    from ..schema import MOVE_INSTRUCTIONS

    splits = eval_splits(bench, move)
    return TaskMetadata(
        name=task_name(move),
        description=(f"{PAPER}. This task: {move.value.capitalize()}. {MOVE_INSTRUCTIONS[move]} Built by the ratio "
                     f"compendium from {Path(bench.root).name}/ (not the authors' official release); splits: "
                     f"{', '.join(splits)} (silver: the LLM-judge-filtered subset of test, against the test pool)."),
        reference=None,  # the paper names no public address for its release
        dataset={"path": str(Path(bench.root).name), "revision": bench.checksum()[:12]},
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=splits,
        eval_langs=["eng-Latn"],
        main_score=MAIN_SCORE,
        date=_test_dates(bench),
        domains=["Academic", "Written"],
        task_subtypes=[],
        license=_licence(bench, licences or {}),
        annotations_creators="derived",
        dialect=[],
        sample_creation="found",
        bibtex_citation="",
    )


def _split_data(bench: Benchmark, move: Move, split: str) -> dict:
    from datasets import Dataset

    pairs = bench.queries(move, split)
    queries = pairs.drop_duplicates("query_id")
    pool = bench.pool(split)
    relevant: dict[str, dict[str, int]] = {}
    for qid, gold in zip(pairs["query_id"], pairs["gold_id"]):
        relevant.setdefault(str(qid), {})[str(gold)] = 1
    return {
        "corpus": Dataset.from_dict({"id": pool["docid"].astype(str).tolist(), "text": pool["text"].tolist()}),
        "queries": Dataset.from_dict({"id": queries["query_id"].astype(str).tolist(), "text": queries["querySentence"].tolist()}),
        "relevant_docs": relevant,
        "top_ranked": None,
    }


def ratio_tasks(benchmark: str | Path, moves: list[Move] | None = None, licences: dict[str, str] | None = None) -> list:
    """One MTEB retrieval task per move, on the benchmark directory `benchmark` (release layout)."""
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    bench = load_benchmark(benchmark)

    class RatioRetrievalTask(AbsTaskRetrieval):
        """Ratio on one directory; one subclass per move, since MTEB reads a task's metadata from its class
        (here it describes the directory, so the classes are made per directory)."""

        ignore_identical_ids = True
        k_values = K_VALUES
        move: Move

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            if self.data_loaded:
                return
            self.dataset = {"default": {split: _split_data(bench, self.move, split) for split in self.metadata.eval_splits}}
            self.data_loaded = True

    tasks = []
    for move in (Move.parse(m) for m in (moves or MOVES)):
        cls = type(task_name(move), (RatioRetrievalTask,), {"move": move, "metadata": task_metadata(bench, move, licences)})
        tasks.append(cls())
    return tasks


def generic_prompts() -> dict[str, str]:
    """The compendium's generic prefixes as sentence-transformers prompts for MTEB's wrapper."""
    query, document = GENERIC_PREFIXES
    return {"query": query, "document": document}


def mteb_model(model: str, prompts: dict[str, str] | None = None):
    """MTEB's sentence-transformers wrapper around a packaged name or model folder, with `prompts` (default:
    the folder's stored prompts, else none)."""
    from mteb.models import SentenceTransformerEncoderWrapper

    from ..models import load_sentence_transformer

    return SentenceTransformerEncoderWrapper(load_sentence_transformer(model), model_prompts=prompts or None)


def mteb_scores(model: Any, tasks: list, *, batch_size: int = 64) -> pd.DataFrame:
    """Run MTEB (no result cache) and return one row per (move, split): MRR@10, R@10, R@100 in %, queries."""
    import mteb

    result = mteb.evaluate(model, tasks, cache=None, encode_kwargs={"batch_size": batch_size}, show_progress_bar=False)
    rows = []
    for task_result in result.task_results:
        move = task_result.task_name.removeprefix("Ratio").lower()
        for split, entries in task_result.scores.items():
            scores = entries[0]
            rows.append({"move": move, "split": split,
                         **{ours: 100 * scores[theirs] for ours, theirs in SCORE_NAMES.items()}})
    return pd.DataFrame(rows).sort_values(["move", "split"]).reset_index(drop=True)


def project_scores(model: str, benchmark: str | Path, prefixes: dict[str, str] | None, *, batch_size: int = 64) -> pd.DataFrame:
    """The same rows from `ratio_utils.evaluate`, for the side-by-side check."""
    from .scoring import evaluate

    bench = load_benchmark(benchmark)
    rows = []
    for split in (Split.TEST, Split.SILVER):
        moves = [m for m in MOVES if split in [Split.parse(s) for s in eval_splits(bench, m)]]
        if not moves:
            continue
        prefix = prefixes or {}
        result = evaluate(model, benchmark, split=split.value, move=",".join(m.value for m in moves),
                          query_prefix=prefix.get("query"), doc_prefix=prefix.get("document"), batch_size=batch_size)
        for move, scores in result["scores"].items():
            rows.append({"move": move, "split": result["splits"][move],
                         **{name: 100 * scores[name] for name in SCORE_NAMES}})
    return pd.DataFrame(rows).sort_values(["move", "split"]).reset_index(drop=True)


def side_by_side(mteb_frame: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    merged = mteb_frame.merge(ours, on=["move", "split"], suffixes=(" (MTEB)", " (ratio_utils)"), how="outer")
    for name in SCORE_NAMES:
        merged[f"{name} difference"] = merged[f"{name} (MTEB)"] - merged[f"{name} (ratio_utils)"]
    return merged
