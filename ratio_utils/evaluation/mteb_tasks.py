"""Ratio as MTEB retrieval tasks: `mteb.evaluate(model, ratio_tasks(<benchmark dir>))`, one task per move.

    ratio-mteb --model all-MiniLM-L6-v2 --compare    # MTEB beside ratio_utils.evaluate

Each task (`RatioAddress`, `RatioBroaden`, `RatioSpecify`) is built from a directory in the release layout
(ours or the authors'): the split's shared candidate pool is the corpus, the move's queries are the queries, each
query's gold candidates are its qrels, and `test` and, where it holds pairs, `silver` are the evaluation splits
(silver queries search the test pool). Main score MRR@10, the paper's primary metric; nDCG@10 is reported beside it.

Each task carries its move: the task's query prompt (`TaskMetadata.prompt`) is the move's instruction
(`schema.move_text(move, "instruction")` from prompts/moves.toml, the text `schema.instructed_query_prefix` puts before
a query; documents get none), which instruction-following models receive. Its identity is per directory: the task name
carries a hash of the directory's path (`RatioAddress_1a2b3c4d`), and the dataset revision is a hash of the files the
task reads (its move's pairs of the evaluated splits and the test pool, each file hashed once per `ratio_tasks` call),
so MTEB's result cache never hands one directory's scores to another.

A query's own sentence may be in the pool (ids are text hashes, so it has the query's id): as in the BEIR export
(docs/search.md), it is never a candidate for its own query, which MTEB's `ignore_identical_ids=True` applies; MTEB
keeps one more candidate (101) so that such a query keeps 100 candidates, as `ratio_utils.evaluate` does.

`mteb_model` wraps a model in `RatioEncoder`, MTEB's encoder protocol on top of the project's dense retriever: its
encodings go through the same process-wide memo and on-disk embedding cache as `ratio_utils.evaluate`, keyed by
(model fingerprint, prefix, texts checksum), so the test pool, shared by the three tasks and both splits, is encoded
once per (model, prefix), and `--compare`'s own evaluation reuses it.
The tasks read the directory through `ratio_utils.dataset.benchmark` rather than MTEB's Hub loader, so a
directory without a dataset card (the official release) works too. Prefixes travel as the model's prompts:
`generic_prompts()` gives the compendium's `query: ` / `document: ` (schema.GENERIC_PREFIXES), and a model folder's
stored prompts (`config_sentence_transformers.json`) are used when none are passed.

Reads: the benchmark directory (pairs, pools, `provenance/silver.json`, corpora named in the pairs). Writes: MTEB's
result files under `output` when given (`<output>/results/<model>/<revision>/<task>.json`, MTEB's layout); the
embedding cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..dataset.benchmark import Benchmark, candidates_path, load_benchmark, pairs_path
from ..io import sha256_file
from ..schema import DEFAULT_INSTRUCTION_TEMPLATE, GENERIC_PREFIXES, MOVES, Move, Split, move_text

K_VALUES = (1, 3, 5, 10, 20, 100)
MAIN_SCORE = "mrr_at_10"
# MTEB's score names beside this project's metric names (ratio_utils.evaluation.metrics)
SCORE_NAMES = {"MRR@10": "mrr_at_10", "nDCG@10": "ndcg_at_10", "R@10": "recall_at_10", "R@100": "recall_at_100"}


def directory_id(root: str | Path) -> str:
    """8 hex digits of the benchmark directory's resolved path: what tells two directories' tasks apart."""
    return hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:8]


def task_name(move: Move, root: str | Path | None = None) -> str:
    """`RatioAddress` (no directory), else `RatioAddress_<directory id>`: one task identity per directory."""
    base = f"Ratio{Move.parse(move).value.capitalize()}"
    return base if root is None else f"{base}_{directory_id(root)}"


def task_move(name: str) -> str:
    """The move of a task name (`RatioAddress_1a2b3c4d` -> `address`)."""
    return name.removeprefix("Ratio").split("_")[0].lower()


def task_files(bench: Benchmark, move: Move) -> list[Path]:
    """The files a move's task reads: its pairs of the evaluated splits and the test pool."""
    return [pairs_path(bench.root, move, Split.parse(s)) for s in eval_splits(bench, move)] + [
        candidates_path(bench.root, Split.TEST)]


def task_revision(bench: Benchmark, move: Move, hashes: dict[Path, str] | None = None) -> str:
    """MTEB's dataset revision of a move's task: 12 hex digits over the sha256 of the files it reads (`hashes`
    memoises each file's sha256, so the pool shared by the three tasks is hashed once)."""
    hashes = {} if hashes is None else hashes
    digest = hashlib.sha256()
    for path in task_files(bench, move):
        if path not in hashes:
            hashes[path] = sha256_file(path)
        digest.update(f"{path.relative_to(bench.root)}:{hashes[path]}\n".encode())
    return digest.hexdigest()[:12]


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


def task_metadata(bench: Benchmark, move: Move, licences: dict[str, str] | None = None,
                  hashes: dict[Path, str] | None = None) -> Any:
    """MTEB TaskMetadata of one move's task on this directory: what the benchmark is, never the official release.
    The query prompt is the move's instruction; the revision hashes the files the task reads."""
    from mteb.abstasks.task_metadata import TaskMetadata

    from ..dataset.card import PAPER

    splits = eval_splits(bench, move)
    instruction = move_text(move, "instruction")
    return TaskMetadata(
        name=task_name(move, bench.root),
        description=(f"{PAPER}. This task: {move.value.capitalize()}. {instruction} Built by the ratio "
                     f"compendium from {Path(bench.root).name}/ (not the authors' official release); splits: "
                     f"{', '.join(splits)} (silver: the LLM-judge-filtered subset of test, against the test pool)."),
        reference=None,  # the paper names no public address for its release
        dataset={"path": str(Path(bench.root).name), "revision": task_revision(bench, move, hashes)},
        prompt={"query": instruction},
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

    pairs = bench.scored_pairs(move, split)  # checked on load: every gold in the pool (dataset.benchmark)
    queries = pairs.drop_duplicates("query_id")
    pool = bench.pool(split)
    relevant: dict[str, dict[str, int]] = {}
    for qid, gold in zip(pairs["query_id"], pairs["gold_id"]):
        relevant.setdefault(str(qid), {})[str(gold)] = 1
    return {
        "corpus": Dataset.from_dict({"id": pool["docid"].astype(str).tolist(), "text": pool["text"].tolist()}),
        "queries": Dataset.from_dict({"id": queries["query_id"].astype(str).tolist(),
                                      "text": queries["querySentence"].tolist()}),
        "relevant_docs": relevant,
        "top_ranked": None,
    }


def ratio_tasks(benchmark: "str | Path | Benchmark", moves: list[Move] | None = None,
                licences: dict[str, str] | None = None) -> list:
    """One MTEB retrieval task per move, on the benchmark directory `benchmark` (release layout), or on a loaded
    `Benchmark` (`load_benchmark(..., allow_invalid=True)`, whose `problems` then say what the tasks leave out)."""
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    bench = benchmark if isinstance(benchmark, Benchmark) else load_benchmark(benchmark)

    class RatioRetrievalTask(AbsTaskRetrieval):
        """Ratio on one directory; one subclass per move, since MTEB reads a task's metadata from its class
        (here it describes the directory, so the classes are made per directory)."""

        ignore_identical_ids = True
        k_values = K_VALUES
        move: Move

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # MTEB keeps top_k candidates, then drops the query's own sentence: one more keeps 100 for such a query
            # (metrics at k <= 100 are unaffected for the others).
            self._top_k = max(self.k_values) + 1

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            if self.data_loaded:
                return
            self.dataset = {"default": {split: _split_data(bench, self.move, split)
                                        for split in self.metadata.eval_splits}}
            self.data_loaded = True

    tasks = []
    hashes: dict[Path, str] = {}  # each file hashed once for all the tasks
    for move in (Move.parse(m) for m in (moves or MOVES)):
        metadata = task_metadata(bench, move, licences, hashes)
        counts = {split: int(bench.scored_pairs(move, split)["query_id"].nunique()) for split in metadata.eval_splits}
        cls = type(task_name(move), (RatioRetrievalTask,),
                   {"move": move, "metadata": metadata, "query_counts": counts})
        tasks.append(cls())
    return tasks


def generic_prompts() -> dict[str, str]:
    """The compendium's generic prefixes as sentence-transformers prompts for MTEB's wrapper."""
    query, document = GENERIC_PREFIXES
    return {"query": query, "document": document}


@functools.cache
def _encoder_class():
    """RatioEncoder, made on first use: it subclasses mteb's AbsEncoder, and mteb is imported only when needed."""
    from mteb.models.abs_encoder import AbsEncoder

    class RatioEncoder(AbsEncoder):
        """MTEB's encoder protocol over the project's dense retriever (`retrieval.dense.DenseRetriever`): every
        encoding goes through its memo and embedding cache, keyed by (model fingerprint, prefix, texts checksum).

        Queries get `query_prefix`, then, for an instruction-following model (`instruction`), the task's query prompt
        (the move's instruction) in the project's instruction format; documents get `doc_prefix`."""

        def __init__(self, retriever: Any, meta: Any, query_prefix: str, doc_prefix: str, instruction: bool):
            self.retriever, self.mteb_model_meta = retriever, meta
            self.query_prefix, self.doc_prefix, self.instruction = query_prefix, doc_prefix, instruction

        def prefix(self, task_metadata: Any, prompt_type: Any) -> str:
            if prompt_type is not None and getattr(prompt_type, "value", prompt_type) == "document":
                return self.doc_prefix
            prompt = getattr(task_metadata, "prompt", None)
            instruction = prompt.get("query") if isinstance(prompt, dict) else prompt
            if self.instruction and instruction:
                return self.query_prefix + DEFAULT_INSTRUCTION_TEMPLATE.format(instruction=instruction)
            return self.query_prefix

        def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type: Any = None,
                   **kwargs: Any) -> np.ndarray:
            ids: list[str] = []
            texts: list[str] = []
            for batch in inputs:
                texts += list(batch["text"])
                ids += [str(i) for i in batch["id"]] if "id" in batch else [""] * len(batch["text"])
            vectors, _ = self.retriever.embeddings(ids, texts, self.prefix(task_metadata, prompt_type), "encoding")
            return np.asarray(vectors, dtype=np.float32)

        def similarity(self, embeddings1: Any, embeddings2: Any) -> Any:
            import torch

            # L2-normalised vectors: the inner product is the cosine, as the project's faiss index computes it
            # copies: writable
            return (torch.as_tensor(np.array(embeddings1, np.float32))
                    @ torch.as_tensor(np.array(embeddings2, np.float32)).T)

    return RatioEncoder


def mteb_model(model: Any, prompts: dict[str, str] | None = None, *, instruction: bool | None = None,
               cache_dir: "str | os.PathLike | None | bool" = None, batch_size: int = 64, device: str | None = None):
    """MTEB's encoder for `model` (a folder, packaged or registry name, hub id, `ModelRef` or live
    SentenceTransformer; resolved once here) with `prompts` {"query": ..., "document": ...} (default: the model's
    stored prompts, else none). `instruction`: put the task's move instruction after the query prompt (default: the
    registry says the model takes one). `cache_dir`: the on-disk embedding cache (None: the default one; False: none).
    Raises ModelNotAvailableError for a model that cannot be found."""
    from mteb.models.model_meta import ModelMeta, ScoringFunction

    from ..models import resolve_model
    from ..retrieval.dense import default_embedding_cache
    from ..systems.families import RetrieverSettings, dense_retriever

    ref = resolve_model(model)
    prompts = prompts if prompts is not None else ref.prompts
    if instruction is None:
        instruction = bool(ref.entry is not None and ref.entry.takes_move_instruction)
    if cache_dir is None:
        cache_dir = default_embedding_cache()
    # no prefixes of its own: MTEB passes each text with its prompt (the encoder wrapper adds it)
    retriever = dense_retriever(ref, "", "", RetrieverSettings(batch_size=batch_size, device=device, memo=True,
                                                               cache_dir=Path(cache_dir) if cache_dir else None))
    name = ref.location if ref.source == "hub" else ref.name
    meta = ModelMeta.create_empty(overwrites=dict(
        name=name if "/" in name else f"ratio-local/{name}", revision=ref.fingerprint[:12],
        similarity_fn_name=ScoringFunction.COSINE, framework=["Sentence Transformers"]))
    return _encoder_class()(retriever, meta, prompts.get("query", ""), prompts.get("document", ""), instruction)


def default_output() -> Path:
    """Where the MTEB command writes its results by default: `mteb_results/` under the working directory (never
    beside the benchmark, which may be read-only)."""
    return Path.cwd() / "mteb_results"


def mteb_scores(model: Any, tasks: list, *, batch_size: int = 64,
                output: "str | os.PathLike | None" = None) -> pd.DataFrame:
    """Run MTEB and return one row per (move, split): MRR@10, nDCG@10, R@10, R@100 in %, queries.

    `output`: MTEB's result cache folder, written in MTEB's format (`<output>/results/<model>/<revision>/<task>.json`);
    every run recomputes (the encodings come from the embedding cache) and overwrites it. None: nothing written."""
    import mteb

    cache = None
    if output is not None:
        from mteb.cache import ResultCache

        cache = ResultCache(Path(output))
    result = mteb.evaluate(model, tasks, cache=cache, overwrite_strategy="always",
                           encode_kwargs={"batch_size": batch_size}, show_progress_bar=False)
    by_name = {task.metadata.name: task for task in tasks}
    rows = []
    for task_result in result.task_results:
        task = by_name.get(task_result.task_name)
        for split, entries in task_result.scores.items():
            scores = entries[0]
            row = {"move": task_move(task_result.task_name), "split": split}
            if task is not None and split in getattr(task, "query_counts", {}):
                row["queries"] = task.query_counts[split]
            rows.append(row | {ours: 100 * scores[theirs] for ours, theirs in SCORE_NAMES.items()})
    return pd.DataFrame(rows).sort_values(["move", "split"]).reset_index(drop=True)


def project_scores(model: Any, benchmark: str | Path, prefixes: dict[str, str] | None, *, batch_size: int = 64,
                   instruction: bool = False, cache_dir: "str | os.PathLike | None | bool" = None,
                   allow_invalid: bool = False) -> pd.DataFrame:
    """The same rows from `ratio_utils.evaluate` (one call per split, one retriever for its moves), with the number
    of queries, the 95 % bootstrap interval of each score (`<metric> low` / `<metric> high`) and † under 30 queries.
    `allow_invalid`: as `evaluate`'s (the rows MTEB's tasks of the same `Benchmark` leave out)."""
    from .scoring import evaluate
    from .stats import dagger

    bench = load_benchmark(benchmark, allow_invalid=allow_invalid)
    rows = []
    for split in (Split.TEST, Split.SILVER):
        moves = [m for m in MOVES if split in [Split.parse(s) for s in eval_splits(bench, m)]]
        if not moves:
            continue
        prefix = prefixes or {}
        result = evaluate(model, benchmark, split=split.value, move=",".join(m.value for m in moves),
                          query_prefix=prefix.get("query"), doc_prefix=prefix.get("document"), batch_size=batch_size,
                          instruction=instruction, cache_dir=cache_dir, allow_invalid=allow_invalid)
        for move, scores in result["scores"].items():
            row = {"move": move, "split": result["splits"][move], "queries": result["queries"][move],
                   "†": dagger(result["queries"][move])}
            for name in SCORE_NAMES:
                low, high = result["intervals"][move][name]
                row |= {name: 100 * scores[name], f"{name} low": 100 * low, f"{name} high": 100 * high}
            rows.append(row)
    return pd.DataFrame(rows).sort_values(["move", "split"]).reset_index(drop=True)


def side_by_side(mteb_frame: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """MTEB's scores beside the project's (with its n, intervals and †) and their differences."""
    mteb_frame = mteb_frame.drop(columns=[c for c in ("queries",) if c in mteb_frame and "queries" in ours])
    merged = mteb_frame.merge(ours, on=["move", "split"], suffixes=(" (MTEB)", " (ratio_utils)"), how="outer")
    for name in SCORE_NAMES:
        merged[f"{name} difference"] = merged[f"{name} (MTEB)"] - merged[f"{name} (ratio_utils)"]
    return merged
