"""Stage 13 (notebook 13_unified_retriever): one retriever for all three moves, s(q, c | r) (paper §5.1).

The paper trains one retriever per move and leaves "a unified model trained with r as an
instruction" to future work. Here one model is fine-tuned on the training pairs of every move,
the move given as an instruction on the query (Appendix C's move instructions, in the
`Instruct: ...\\nQuery: ` layout of `retrieval.dense`):

* **balance** — every move contributes the same number of training pairs (`pairs_per_move`, a
  seeded sample); a move with fewer pairs repeats its pairs, at most `max_repeats` times, so
  Specify (most pairs) does not drown Broaden (fewest);
* **mixing** — `MoveMixingBatchSampler` interleaves the moves so every batch holds each move in
  proportion to its share: the gold sentences of the other moves are in-batch negatives, and the
  model must tell an Address gold from a Specify gold for the same kind of query;
* **selection** — the configurations of a configs file (Table 6's format) are trained with
  `train.train_configuration`; after every epoch the validation MRR@10 of each move is measured on
  the whole validation pool and their mean (macro average: each move counts once) selects the
  epoch and the configuration, as the per-move models are selected; the test split is scored once.

Then `compare_with_per_move` scores the unified model, the base model and notebook 09's per-move models on the same
queries (paired intervals and tests, the training pairs behind each) and `comparison_narrative` says what it shows.

Reads:  the benchmark (cfg.paths.benchmark), the base model (`ratio_utils.models`), a configs file,
        models/<base>__<move>/results.json (notebook 09, for the comparison).
Writes: models/unified/_runs/<base>/<config>-<key>/result.json   one per configuration tried (resume marker), in
        notebook 13's own folder
        models/<base>__unified/  the selected model, unified.json (its query format), results.json, README.md
        the move-sensitivity ranks of the published model (ratio_utils.retrieval_analysis.move_sensitivity), beside
        its runs
        tables/unified_vs_per_move (compare_with_per_move, with provenance)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, EvalSet, load_benchmark
from ..evaluation import stats
from ..evaluation.intervals import IntervalCache, cell, paired_cell
from ..evaluation.run_scoring import score_run
from ..evaluation.stats import DAGGER, INDICATIVE_BELOW, format_p
from ..io import read_json_if_exists, replace_folder, write_json_atomic, write_parquet_atomic, write_text_atomic
from ..param_sections import TrainParams, UnifiedParams
from ..publish.label_sources import silver_sources
from ..publish.published import write_table
from ..retrieval_analysis.move_sensitivity import sensitivity_ranks, sensitivity_reading
from ..schema import DEFAULT_INSTRUCTION_TEMPLATE, MOVES, Move, Split, instructed_query_prefix
from . import (
    EVAL_KS,
    FINAL_RESULTS_FILE,
    FINAL_SPLITS,
    PRIMARY,
    RESULT_FILE,
    HyperParams,
    PoolRetrievalEvaluator,
    RunResult,
    base_name,
    benchmark_fingerprints,
    load_hyperparams,
    move_model_dir,
    train_configuration,
    training_data_fingerprint,
    usage_lines,
)

logger = logging.getLogger(__name__)

UNIFIED_SUFFIX = "unified"

FORMAT_FILE = "unified.json"  # in the model folder: how to phrase a query for it (read by ratio_utils.apps.search)


def load_unified_params(cfg: Config) -> UnifiedParams:
    return cfg.section(UNIFIED_SUFFIX, UnifiedParams)


def query_prefix(move: Move | str, template: str = DEFAULT_INSTRUCTION_TEMPLATE) -> str:
    """The text put before a query to ask for `move` (Appendix C's instruction in `template`)."""
    if "{instruction}" not in template:
        raise ValueError(f"instruction template {template!r} has no {{instruction}} slot")
    return instructed_query_prefix(move, template)


def format_query(text: str, move: Move | str, template: str = DEFAULT_INSTRUCTION_TEMPLATE) -> str:
    """A query as the unified retriever reads it: the move's instruction, then the statement."""
    return query_prefix(move, template) + text


def balanced_pairs(pairs_by_move: dict[Move, pd.DataFrame], pairs_per_move: int | None, max_repeats: int,
                   seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training pairs: move, anchor, positive; balance report: one row per move).

    Each move gets the same target share: `pairs_per_move`, or the size of the largest move when None.
    A move with more pairs is sampled down (seeded); one with fewer repeats all its pairs (whole
    passes, then a seeded sample of the last pass) up to `max_repeats` times its size. Anchors are the
    raw query sentences; the instruction is added by `instruct_anchors`.
    """
    if max_repeats < 1:
        raise ValueError(f"max_repeats must be >= 1, got {max_repeats}")
    sizes = {move: len(frame) for move, frame in pairs_by_move.items()}
    target = pairs_per_move if pairs_per_move is not None else max(sizes.values(), default=0)
    rng = np.random.default_rng(seed)
    frames, report = [], []
    for move, frame in pairs_by_move.items():
        n = len(frame)
        if n == 0:
            report.append({"move": move.value, "available": 0, "used": 0, "unique": 0, "repeats": 0.0})
            continue
        want = min(target, n * max_repeats)
        whole, rest = divmod(want, n)
        rows = [np.arange(n)] * whole + [np.sort(rng.choice(n, size=rest, replace=False))]
        picked = frame.iloc[np.concatenate(rows)].assign(move=move.value)
        frames.append(picked[["move", "anchor", "positive"]])
        report.append({"move": move.value, "available": n, "used": want, "unique": min(want, n),
                       "repeats": round(want / n, 2) if want > n else 1.0})
    pairs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["move", "anchor", "positive"])
    table = pd.DataFrame(report)
    if not table.empty:
        table["share (%)"] = (100 * table["used"] / max(int(table["used"].sum()), 1)).round(1)
    return pairs, table


def instruct_anchors(pairs: pd.DataFrame, template: str) -> pd.DataFrame:
    """The trainer's (anchor, positive) frame: each anchor carries its move's instruction."""
    anchors = [format_query(text, move, template) for text, move in zip(pairs["anchor"], pairs["move"])]
    return pd.DataFrame({"anchor": anchors, "positive": list(pairs["positive"])})


def move_mixed_batches(moves: Sequence[str], texts: Sequence[tuple[str, ...]], batch_size: int,
                       rng: np.random.Generator, drop_last: bool = False) -> list[list[int]]:
    """Batches of row indices in which every move appears in proportion to its share of the rows.

    Rows are shuffled within each move; the moves are then interleaved by always taking next from
    the move furthest behind its share (so any stretch of the sequence, and so any batch, mixes the
    moves in proportion). A row whose texts already occur in the batch (a repeated pair of an
    upsampled move) waits for the next batch: a duplicate gold would be its own query's negative.
    Hand-written because sentence-transformers' samplers group by label or shuffle freely; none
    interleaves groups in proportion.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    groups: dict[str, list[int]] = {}
    for index, move in enumerate(moves):
        groups.setdefault(str(move), []).append(index)
    queues = {move: list(rng.permutation(rows)) for move, rows in sorted(groups.items())}
    totals = {move: len(rows) for move, rows in queues.items()}
    taken = dict.fromkeys(queues, 0)
    order: list[int] = []
    for _ in range(len(moves)):
        move = min((m for m in queues if taken[m] < totals[m]), key=lambda m: ((taken[m] + 1) / totals[m], m))
        order.append(int(queues[move][taken[move]]))
        taken[move] += 1

    batches: list[list[int]] = []
    waiting: list[int] = []  # rows deferred from earlier batches go first
    position = 0
    while position < len(order) or waiting:
        batch: list[int] = []
        seen: set[str] = set()
        deferred: list[int] = []
        candidates = waiting
        while len(batch) < batch_size and (candidates or position < len(order)):
            if candidates:
                index, candidates = candidates[0], candidates[1:]
            else:
                index, position = order[position], position + 1
            if set(texts[index]) & seen:
                deferred.append(index)
            else:
                batch.append(index)
                seen.update(texts[index])
        waiting = deferred + candidates
        batches.append(batch)
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def _default_batch_sampler():
    from sentence_transformers.sampler import DefaultBatchSampler

    return DefaultBatchSampler


class MoveMixingBatchSampler(_default_batch_sampler()):
    """sentence-transformers batch sampler around `move_mixed_batches` (a new shuffle every epoch).

    The moves travel beside the dataset (the dataset must hold only the trainer's input columns):
    pass `functools.partial(MoveMixingBatchSampler, moves=...)` as the batch sampler.
    """

    def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None,
                 seed: int = 0, *, moves: Sequence[str]):
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last, valid_label_columns=valid_label_columns,
                         generator=generator, seed=seed)
        # train.train_configuration repeats a tiny training set in whole passes (train.training_schedule),
        # so the rows are the labelled pairs n times over, in the same order.
        if not moves or len(dataset) % len(moves):
            raise ValueError(f"{len(moves)} move labels for {len(dataset)} training rows")
        self.moves = list(moves) * (len(dataset) // len(moves))
        self.texts = [tuple(row.values()) for row in dataset]

    def _batches(self) -> list[list[int]]:
        rng = np.random.default_rng(self.seed + self.epoch)
        return move_mixed_batches(self.moves, self.texts, self.batch_size, rng, self.drop_last)

    def __iter__(self):
        yield from self._batches()

    def __len__(self) -> int:
        return len(self._batches())


def score_moves(model: Any, evalsets: dict[Move, EvalSet], template: str, doc_prefix: str, *,
                batch_size: int = 64, cache_dir: Path | None = None) -> dict[str, float]:
    """Per-move scores ('<move>/MRR@10' …) of one model, each move's queries with its instruction,
    and their macro averages ('MRR@10' …: each move counts once, whatever its number of queries).

    Each move is ranked and scored by evaluation.run_scoring.rank_and_score; the pool is embedded once per call
    when `cache_dir` is given (the moves share it)."""
    from ..evaluation.run_scoring import rank_and_score

    scores: dict[str, float] = {}
    for move, evalset in evalsets.items():
        retriever = move_retriever(model, move, template, doc_prefix, batch_size=batch_size, cache_dir=cache_dir)
        _, measured = rank_and_score(retriever, evalset, EVAL_KS)
        for key, value in measured.items():
            scores[f"{move.value}/{key}"] = value
    for key in {k.split("/", 1)[1] for k in scores}:
        scores[key] = float(np.mean([scores[f"{m.value}/{key}"] for m in evalsets]))
    return scores


def move_retriever(model: Any, move: Move, template: str, doc_prefix: str, *, batch_size: int = 64,
                   cache_dir: Path | None = None):
    """The model as a retriever of one move: the move's instruction on every query."""
    from ..systems.families import RetrieverSettings, dense_retriever

    return dense_retriever(model, query_prefix(move, template), doc_prefix,
                           RetrieverSettings(batch_size=batch_size, cache_dir=cache_dir))


def move_run(model: Any, move: Move, evalset: EvalSet, template: str, doc_prefix: str, *, batch_size: int = 64,
             cache_dir: Path | None = None) -> pd.DataFrame:
    """The top-k run of one move's queries, each with the move's instruction, against the split's pool."""
    retriever = move_retriever(model, move, template, doc_prefix, batch_size=batch_size, cache_dir=cache_dir)
    return retriever.search(evalset.queries, evalset.pool, max(EVAL_KS))


class MoveMixEvaluator(PoolRetrievalEvaluator):
    """The per-move models' validation evaluator, over every move at once (macro MRR@10 selects)."""

    def __init__(self, evalsets: dict[Move, EvalSet], *, template: str, doc_prefix: str, batch_size: int,
                 cache_dir: Path):
        super().__init__(next(iter(evalsets.values())), query_prefix="", doc_prefix=doc_prefix, batch_size=batch_size)
        self.evalsets = evalsets
        self.template = template
        self.cache_dir = cache_dir  # a scratch cache: the live model's pool vectors, shared by the moves

    def score(self, model) -> dict[str, float]:
        return score_moves(model, self.evalsets, self.template, self.doc_prefix, batch_size=self.batch_size,
                           cache_dir=self.cache_dir)


def unified_model_dir(cfg: Config, params: UnifiedParams) -> Path:
    return cfg.paths.tuned_model_dir(params.base_model, UNIFIED_SUFFIX)


def unified_runs_dir(cfg: Config, params: UnifiedParams) -> Path:
    return cfg.paths.unified_runs_dir(params.base_model)


def _train_params(params: UnifiedParams) -> TrainParams:
    # The instruction is inside each anchor, so the trainer's query prefix is empty.
    return TrainParams(base_model=params.base_model, configs_file=params.configs_file, max_train_pairs=None,
                       max_seq_length=params.max_seq_length, query_prefix="", doc_prefix=params.doc_prefix,
                       eval_batch_size=params.eval_batch_size, logging_steps=params.logging_steps,
                       device=params.device)


def unified_run_key(fingerprints: dict[str, str], params: UnifiedParams, hp: HyperParams, seed: int) -> str:
    """A checksum of every input that changes a run's outcome (a changed input means a new run)."""
    payload = {**fingerprints, "moves": params.moves, "hp": hp.training_values(),
               "pairs_per_move": params.pairs_per_move, "max_repeats": params.max_repeats,
               "template": params.instruction_template, "doc_prefix": params.doc_prefix,
               "max_seq_length": params.max_seq_length, "seed": seed, "sampler": "move-mixing/1"}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class UnifiedResult:
    """What notebook 13 shows about the unified model."""

    runs: list[RunResult]
    selected: RunResult
    balance: pd.DataFrame
    final: dict[str, Any]  # results.json of the published model
    model_dir: Path
    trained_now: list[int]
    sensitivity: pd.DataFrame  # sensitivity_ranks of the published model on params.sensitivity_split
    published_now: bool = True  # False: the selected model, its test scores and sensitivity ranks were on disk

    def reused(self) -> list[str]:
        """What this call took from earlier runs instead of computing it, one line per kind."""
        from . import describe_runs

        earlier = [r for r in self.runs if r.config["id"] not in self.trained_now]
        lines = [f"unified: configuration(s) {describe_runs(earlier)}"] if earlier else []
        if not self.published_now:
            lines.append(f"unified: the selected model, its test scores and move-sensitivity ranks "
                         f"({Path(self.model_dir).name})")
        return lines


def unified_plan(cfg: Config, params: UnifiedParams | None = None) -> pd.DataFrame:
    """The training pairs each move contributes (the balance) under these params."""
    params = params or load_unified_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    _, balance = balanced_pairs(_pairs_by_move(bench, params), params.pairs_per_move, params.max_repeats, cfg.seed)
    return balance


def _pairs_by_move(bench: Benchmark, params: UnifiedParams) -> dict[Move, pd.DataFrame]:
    from . import training_pairs

    return {m: training_pairs(bench, m, None, 0) if bench.has(m, Split.TRAIN)
            else pd.DataFrame(columns=["anchor", "positive"])
            for m in params.selected_moves()}


def train_unified(cfg: Config, params: UnifiedParams | None = None) -> UnifiedResult:
    """Train every configuration not yet done, select by validation macro MRR@10, publish, score test once."""
    import functools

    from ..models import model_fingerprint, resolve_model_path

    params = params or load_unified_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    base_path = resolve_model_path(params.base_model)
    base_fingerprint = model_fingerprint(base_path)
    # keyed by what it is trained and selected on (the moves' train and validation pairs, the validation pool)
    fingerprints = {"base_model": base_fingerprint,
                    "training_data": training_data_fingerprint(bench, params.selected_moves())}
    scored_on = benchmark_fingerprints(base_fingerprint, bench)
    pairs, balance = balanced_pairs(_pairs_by_move(bench, params), params.pairs_per_move, params.max_repeats, cfg.seed)
    if pairs.empty:
        raise ValueError(f"no training pairs for the moves {params.moves} in {cfg.paths.benchmark}")
    moves = [m for m in params.selected_moves()
             if bench.has(m, Split.VALIDATION) and len(bench.queries(m, Split.VALIDATION))]
    train_params = _train_params(params)
    runs_dir = unified_runs_dir(cfg, params)
    validation = {m: bench.eval_set(m, Split.VALIDATION) for m in moves}

    def train_one(hp: HyperParams, key: str) -> RunResult:
        run_dir = runs_dir / f"{hp.name}-{key}"
        evaluator = MoveMixEvaluator(validation, template=params.instruction_template, doc_prefix=params.doc_prefix,
                                     batch_size=params.eval_batch_size, cache_dir=run_dir / "scratch_embeddings")
        sampler = functools.partial(MoveMixingBatchSampler, moves=list(pairs["move"]))
        logger.info("training the unified retriever, %s, on %d pairs", hp.name, len(pairs))
        result, _ = train_configuration(base_path, instruct_anchors(pairs, params.instruction_template), evaluator, hp,
                                        run_dir, train_params, move=moves[0], run_key=key, seed=cfg.seed,
                                        batch_sampler=sampler)
        shutil.rmtree(run_dir / "scratch_embeddings", ignore_errors=True)
        result = dataclasses.replace(result, move="all")  # one model for every move
        write_json_atomic(run_dir / RESULT_FILE, result.to_json())  # last: marks the run finished
        return result

    runs: list[RunResult] = []
    trained_now: list[int] = []
    final_dir = unified_model_dir(cfg, params)
    configs = load_hyperparams(params.configs_file, None, params.configs)
    for hp in configs:
        key = unified_run_key(fingerprints, params, hp, cfg.seed)
        done = read_json_if_exists(runs_dir / f"{hp.name}-{key}" / RESULT_FILE)
        if done is not None:
            # The folder may have moved with the output root: trust the location, not the stored path.
            runs.append(dataclasses.replace(RunResult.from_json(done),
                                            model_dir=str(runs_dir / f"{hp.name}-{key}" / "model")))
        else:
            runs.append(train_one(hp, key))
            trained_now.append(hp.id)
    selected = max(runs, key=lambda r: (r.score, -r.config["id"]))  # ties: the lower configuration id
    existing = read_json_if_exists(final_dir / FINAL_RESULTS_FILE) or {}
    # the run key leaves test and silver out: a model scored on another benchmark is scored again, not retrained
    published = (existing.get("selected_run_key") == selected.run_key
                 and existing.get("benchmark_checksum") == scored_on["benchmark"])
    if not published and not Path(selected.model_dir).exists():
        # Its weights were removed when it lost an earlier selection over other configurations: retrain it.
        fresh = train_one(HyperParams(**selected.config), selected.run_key)
        runs = [fresh if r.run_key == fresh.run_key else r for r in runs]
        selected = fresh
        trained_now.append(fresh.config["id"])
    published_before = published and sensitivity_path(cfg, params, selected.run_key).exists()
    final = _publish(cfg, params, bench, selected, runs, balance,
                     {**fingerprints, "benchmark": scored_on["benchmark"]}, final_dir)
    for run in runs:
        if run.run_key != selected.run_key:
            shutil.rmtree(run.model_dir, ignore_errors=True)
    sensitivity = pd.read_parquet(sensitivity_path(cfg, params, selected.run_key))
    return UnifiedResult(runs, selected, balance, final, final_dir, trained_now, sensitivity, not published_before)


def sensitivity_path(cfg: Config, params: UnifiedParams, run_key: str) -> Path:
    """Per-pair ranks of the published model's move-sensitivity analysis (written with its test scores)."""
    return (unified_runs_dir(cfg, params)
            / f"sensitivity_{Split.parse(params.sensitivity_split).value}-{run_key}.parquet")


def query_format(params: UnifiedParams) -> dict[str, Any]:
    """unified.json: how a caller phrases queries and candidates for the model (ratio_utils.apps.search reads it)."""
    return {"kind": "unified", "instruction_template": params.instruction_template, "doc_prefix": params.doc_prefix,
            "query_prefixes": {m.value: query_prefix(m, params.instruction_template) for m in MOVES}}


def _publish(cfg, params: UnifiedParams, bench: Benchmark, selected: RunResult, runs, balance, fingerprints,
             final_dir: Path) -> dict[str, Any]:
    existing = read_json_if_exists(final_dir / FINAL_RESULTS_FILE)
    if (existing and existing.get("selected_run_key") == selected.run_key
            and existing.get("benchmark_checksum") == fingerprints["benchmark"]
            and sensitivity_path(cfg, params, selected.run_key).exists()):
        return existing  # the test split was already used for this selection
    staging = final_dir.with_name(final_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(selected.model_dir, staging)
    write_json_atomic(staging / FORMAT_FILE, query_format(params))
    cache = cfg.paths.embedding_cache
    final_scores: dict[str, Any] = {}
    for split in (Split.TEST, Split.SILVER):
        evalsets = {m: bench.eval_set(m, split) for m in params.selected_moves()
                    if bench.has(m, split) and len(bench.queries(m, split))}
        if evalsets:
            scores = score_moves(str(staging), evalsets, params.instruction_template, params.doc_prefix,
                                 batch_size=params.eval_batch_size, cache_dir=cache)
            final_scores[split.value] = {m.value: {k.split("/", 1)[1]: v for k, v in scores.items()
                                                   if k.startswith(m.value + "/")}
                                         for m in evalsets}
    # Every test query under every move, while the staged folder's fingerprint still keys the cached
    # test-pool vectors (files written below change it).
    from ..systems.families import RetrieverSettings, dense_retriever

    sens_moves = [m for m in params.selected_moves() if bench.has(m, params.sensitivity_split)]
    retriever = dense_retriever(str(staging), "", "",
                                RetrieverSettings(batch_size=params.eval_batch_size, cache_dir=cache))
    ranks = sensitivity_ranks(retriever, bench,
                              params.sensitivity_split, sens_moves, params.instruction_template, params.doc_prefix)
    write_parquet_atomic(ranks, sensitivity_path(cfg, params, selected.run_key))
    results = {
        "base_model": params.base_model, "moves": params.moves, "benchmark_checksum": fingerprints["benchmark"],
        "base_model_fingerprint": fingerprints["base_model"],
        "training_data_fingerprint": fingerprints["training_data"],
        "query_format": query_format(params),
        "balance": balance.to_dict(orient="records"), "pairs_per_move": params.pairs_per_move,
        "max_repeats": params.max_repeats, "seed": cfg.seed, "selected_config": selected.config,
        "selected_run_key": selected.run_key, "best_epoch": selected.best_epoch, "validation": selected.validation,
        "test": final_scores.get("test", {}), "silver": final_scores.get("silver"),
        "configs_tried": [{"config": r.config, "validation": r.validation, "run_key": r.run_key} for r in runs],
    }
    write_text_atomic(staging / "README.md", unified_model_card(results))
    write_json_atomic(staging / FINAL_RESULTS_FILE, results)
    replace_folder(staging, final_dir)
    return results


def unified_model_card(results: dict[str, Any]) -> str:
    fmt = results["query_format"]
    test = results.get("test") or {}
    rows = [f"| {move} | {100 * scores[PRIMARY]:.1f} |" for move, scores in test.items()]
    return "\n".join([
        f"# {base_name(results['base_model'])} fine-tuned as one retriever for every Ratio move",
        "",
        "Trained by `ratio_utils.train.unified` (notebook 13) on the training pairs of the moves "
        f"{', '.join(results['moves'])} with the move's instruction on the query, balanced shares per move and "
        "batches that mix the moves (MultipleNegativesRankingLoss).",
        "",
        *usage_lines(f"q = model.encode([{fmt['query_prefixes']['specify']!r} + \"...\"], normalize_embeddings=True)",
                     f"d = model.encode([{fmt['doc_prefix']!r} + \"...\"], normalize_embeddings=True)"),
        "",
        "The query prefix of each move is in `unified.json`; `python -m ratio_utils.apps.search` reads it.",
        "",
        f"Selected configuration {results['selected_config']['id']} by mean validation MRR@10 over the moves "
        f"({100 * results['validation'][PRIMARY]:.1f}); test split scored once:",
        "",
        "| move | test MRR@10 (%) |",
        "|---|---|",
        *rows,
    ]) + "\n"


def unified_summary(result: UnifiedResult) -> pd.DataFrame:
    """One row per configuration tried: validation MRR@10 per move and their mean; selected marked."""
    rows = []
    for run in result.runs:
        row = {"config": run.config["id"], "epochs": run.config["epochs"], "batch": run.config["batch_size"],
               "lr": run.config["learning_rate"], "train pairs": run.train_pairs, "best epoch": run.best_epoch}
        for key, value in sorted(run.validation.items()):
            if key.endswith("/" + PRIMARY):
                row[f"val {key}"] = round(100 * value, 1)
        row[f"val {PRIMARY} (mean of moves)"] = round(100 * run.score, 1)
        row["selected"] = "✓" if run.run_key == result.selected.run_key else ""
        row["this run"] = "trained" if run.config["id"] in result.trained_now else f"reused (run key {run.run_key})"
        rows.append(row)
    return pd.DataFrame(rows)


# -- notebook 13's comparison with the per-move models ------------------------------------------------------------


def _per_move_results(cfg: Config, params: UnifiedParams, move: Move) -> tuple[dict | None, str]:
    """The per-move model's results.json for the same base model and benchmark, or why there is none."""
    folder = move_model_dir(cfg, TrainParams(base_model=params.base_model), move)
    results = read_json_if_exists(folder / FINAL_RESULTS_FILE)
    return (results, "") if results is not None else (None, f"{folder.name} missing")


def _baseline(cfg: Config, params: UnifiedParams, evalset: EvalSet) -> pd.DataFrame:
    # The base model as notebook 08's generic row (generic prefixes, shared embedding cache), per query; built through
    # the family registry and scored by the one scorer of a run.
    from ..models import model_name
    from ..systems.families import RetrieverSettings, build_retriever
    from ..systems.spec import SystemSpec

    spec = SystemSpec(model_name(params.base_model), "generic", "dense", params.base_model)
    retriever = build_retriever(spec, None, RetrieverSettings(batch_size=params.eval_batch_size,
                                                              cache_dir=cfg.paths.embedding_cache))
    run = retriever.search(evalset.queries, evalset.pool, max(EVAL_KS))
    return score_run(run, evalset.qrels, metrics=COMPARED, per_query=True)


def _unified_per_query(cfg: Config, params: UnifiedParams, result: UnifiedResult, move: Move,
                       evalset: EvalSet) -> pd.DataFrame:
    run = move_run(str(result.model_dir), move, evalset, params.instruction_template, params.doc_prefix,
                   batch_size=params.eval_batch_size, cache_dir=cfg.paths.embedding_cache)
    return score_run(run, evalset.qrels, metrics=COMPARED, per_query=True)


def _per_move_per_query(per_move: dict | None, split: Split) -> pd.DataFrame | None:
    """Notebook 09's per-query values of the tuned model on a split (results.json), or None."""
    values = (((per_move or {}).get("per_query") or {}).get("tuned") or {}).get(split.value)
    if not values or any(metric not in values for metric in COMPARED):
        return None
    return pd.DataFrame({metric: values[metric] for metric in COMPARED},
                        index=pd.Index(values["qid"], name="qid")).sort_index()


COMPARED = ("MRR@10", "R@10")


@dataclass
class Comparison:
    """The unified-vs-per-move table: numbers (CSV), the shown form (cells with intervals) and its notes."""

    numeric: pd.DataFrame
    shown: pd.DataFrame
    notes: list[str]

    def _repr_html_(self) -> str:
        import html

        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return self.shown.to_html(index=False) + (f"<ul style='font-size:0.8em'>{notes}</ul>" if notes else "")


def comparison_row(move: str, split: str, base: pd.DataFrame, per_move: pd.DataFrame | None, uni: pd.DataFrame,
                   pairs: dict[str, object], cache: IntervalCache) -> tuple[dict, dict]:
    """(numbers, shown cells) of one move and split: each model's M@10 with its interval over the same queries,
    the paired differences (unified - per-move, unified - baseline) with interval and permutation p, and the
    training pairs behind each model."""
    numbers: dict[str, object] = {"Move": move.capitalize(), "Split": split, "Queries": len(uni), **pairs}
    shown: dict[str, object] = dict(numbers)
    models = {"Baseline": base, "Per-move": per_move, "Unified": uni}
    for name, frame in models.items():
        for metric, column in (("MRR@10", "M@10"), ("R@10", "R@10")):
            key = f"{name} {column}"
            if frame is None:
                numbers[key], numbers[f"{key} low"], numbers[f"{key} high"], shown[key] = None, None, None, ""
                continue
            c = cell(frame[metric].to_numpy(float), cache)
            numbers[key], numbers[f"{key} low"], numbers[f"{key} high"] = 100 * c.value, 100 * c.low, 100 * c.high
            shown[key] = c.text()
    for against in ("Per-move", "Baseline"):
        key = f"Unified − {against.lower()} M@10"
        other = models[against]
        if other is None:
            (numbers[key], numbers[f"{key} low"], numbers[f"{key} high"],
             numbers[f"p vs {against.lower()}"]) = None, None, None, None
            shown[key], shown[f"p vs {against.lower()}"] = "", ""
            continue
        if set(other.index) != set(uni.index):
            raise ValueError(f"{move}/{split}: the {against.lower()} model was scored on other queries "
                             f"({len(other)} vs {len(uni)}); a paired comparison needs the same ones")
        diff, p = paired_cell(cache, uni["MRR@10"], other["MRR@10"])
        numbers[key], numbers[f"{key} low"], numbers[f"{key} high"] = 100 * diff.value, 100 * diff.low, 100 * diff.high
        numbers[f"p vs {against.lower()}"] = p
        shown[key], shown[f"p vs {against.lower()}"] = diff.text(), format_p(p, cache.n_resamples)
    return numbers, shown


def confound_notes(numeric: pd.DataFrame, per_move_configs: dict[str, str], unified_config: str) -> list[str]:
    """Whether the two designs were trained on the same budget per move, said from the pairs columns."""
    notes, unmatched = [], []
    for row in numeric.drop_duplicates("Move").to_dict(orient="records"):
        per_move, used = row.get("Per-move training pairs"), row.get("Unified training pairs")
        if per_move is None or pd.isna(per_move):
            continue
        if int(per_move) != int(used):
            unmatched.append(f"{row['Move']} {int(per_move):,} per-move vs {int(used):,} unified "
                             f"({int(row['Unified unique pairs']):,} unique)")
    configs = sorted(set(per_move_configs.values()))
    if unmatched:
        notes.append("Not a matched comparison: the two designs were trained on different pair budgets per move ("
                     + "; ".join(unmatched) + "), so 'Unified − per-move' mixes the unified design with the budget; "
                     "read it as the unified model under its own budget, not as the cost of sharing one model.")
    else:
        notes.append("Pair budgets match: each move's per-move model and the unified model saw the same number of "
                     "training pairs.")
    if configs and configs != [unified_config]:
        notes.append(f"Configurations also differ: per-move models selected among notebook 09's configurations "
                     f"({', '.join(f'{m} {c}' for m, c in sorted(per_move_configs.items()))}), the unified model "
                     f"configuration {unified_config}.")
    return notes


def compare_with_per_move(cfg: Config, params: UnifiedParams, result: UnifiedResult) -> Comparison:
    """MRR@10 per move and split: baseline, the per-move fine-tuned model, the unified model, over the same queries,
    with intervals, paired tests and each model's training pairs; written as a table."""
    bench = load_benchmark(cfg.paths.benchmark)
    checksum = bench.checksum()
    cache = IntervalCache(cfg.paths.bootstrap_cache, cfg.seed)
    balance = {r["move"]: r for r in result.balance.to_dict(orient="records")}
    numeric_rows, shown_rows, missing, configs, mismatched = [], [], [], {}, []
    for move in params.selected_moves():
        per_move, why = _per_move_results(cfg, params, move)
        if per_move is not None and per_move.get("benchmark_checksum") != checksum:
            per_move, why = None, (f"{cfg.paths.tuned_model_dir(params.base_model, move).name} was trained on "
                                   "another benchmark")
        if why:
            missing.append(why)
        else:
            configs[move.value] = str(per_move["selected_config"]["id"])
        pairs = {"Per-move training pairs": (per_move or {}).get("train_pairs"),
                 "Unified training pairs": balance.get(move.value, {}).get("used"),
                 "Unified unique pairs": balance.get(move.value, {}).get("unique")}
        for split in FINAL_SPLITS:
            scores = (result.final.get(split.value) or {}).get(move.value)
            if not scores:
                continue
            evalset = bench.eval_set(move, split)
            uni = _unified_per_query(cfg, params, result, move, evalset)
            if abs(uni["MRR@10"].mean() - scores[PRIMARY]) > 1e-9:
                mismatched.append(f"{move.value}/{split.value}")
            numbers, shown = comparison_row(move.value, split.value, _baseline(cfg, params, evalset),
                                            _per_move_per_query(per_move, split), uni, pairs, cache)
            numeric_rows.append(numbers)
            shown_rows.append(shown)
    cache.save()
    numeric, shown = pd.DataFrame(numeric_rows), pd.DataFrame(shown_rows)
    sel = result.selected.config
    notes = [
        "M@10 = MRR@10 (%), R@10 = Recall@10 (%), mean [95% percentile bootstrap interval over queries]; every query "
        "ranked against the whole pool of its split (silver: the test pool), its own sentence excluded. Baseline: the "
        "base model before fine-tuning with the generic prefixes; Per-move: notebook 09's retriever of that move "
        "(test split scored once there; its per-query values from its results.json); Unified: one model for all "
        "moves with the move's instruction on the query (notebook 13).",
        "Differences: mean paired difference over the same queries with its paired bootstrap interval; p: two-sided "
        f"sign-flip permutation test ({stats.N_RESAMPLES:,} permutations, ratio_utils.evaluation.stats). {DAGGER}: "
        f"fewer than {INDICATIVE_BELOW} queries, indicative only.",
        f"Unified: {base_name(params.base_model)}, configuration {sel['id']} of {params.configs_file} (epochs "
        f"{sel['epochs']}, batch {sel['batch_size']}, lr {sel['learning_rate']}), selected by mean validation MRR@10 "
        "over the moves. Training pairs: what each model was trained on for the move (unified: after balancing, "
        "repeats included; unique: distinct pairs).",
    ]
    if not numeric.empty:
        notes += confound_notes(numeric, configs, str(sel["id"]))
    if missing:
        notes.append("Per-move cells empty where notebook 09 has no model for this base model and benchmark: "
                     + "; ".join(missing) + ".")
    if mismatched:
        notes.append("Unified scores recomputed here differ from those stored at publication for "
                     + ", ".join(mismatched) + " (the table shows the recomputed ones).")
    if not numeric.empty:
        write_table(numeric, "unified_vs_per_move", cfg, notes=notes, inputs=[cfg.paths.benchmark], shown=shown,
                    labels=silver_sources(bench),
                    caption="One unified retriever vs one retriever per move, MRR@10 (%) on the same queries, "
                            "with the training pairs behind each model and paired tests")
    return Comparison(numeric, shown, notes)


def comparison_narrative(table: Comparison | pd.DataFrame, sensitivity_summary: pd.DataFrame,
                          pairwise: pd.DataFrame | None = None) -> str:
    """What the two tables show, in sentences built from their numbers."""
    numeric = table.numeric if isinstance(table, Comparison) else table
    if numeric.empty:
        return "No unified result to compare."
    lines = []
    for row in numeric.to_dict(orient="records"):
        per_move = row.get("Per-move M@10")
        if per_move is None or pd.isna(per_move):
            vs = "no per-move model to compare with"
        else:
            vs = (f"{row['Unified − per-move M@10']:+.1f} points [{row['Unified − per-move M@10 low']:.1f}, "
                  f"{row['Unified − per-move M@10 high']:.1f}] vs the per-move model ({per_move:.1f}; p "
                  f"{format_p(row['p vs per-move'])})")
            if row.get("Per-move training pairs") != row.get("Unified training pairs"):
                vs += (f", trained on {int(row['Per-move training pairs']):,} pairs against the unified model's "
                       f"{int(row['Unified training pairs']):,}")
        small = f" {DAGGER}" if stats.is_indicative(int(row["Queries"])) else ""
        lines.append(f"- {row['Move']} ({row['Split']}, {row['Queries']} queries{small}): "
                     f"unified {row['Unified M@10']:.1f}, baseline {row['Baseline M@10']:.1f}; {vs}.")
    if isinstance(table, Comparison):
        lines += [f"- {note}" for note in table.notes if note.startswith(("Not a matched", "Pair budgets match"))]
    if not sensitivity_summary.empty:
        overall = sensitivity_summary[sensitivity_summary["Move"] == "All"].iloc[0]
        lines.append(f"- Under the three instructions the top 10 differs for "
                     f"{overall['Top 10 changes with the move (%)']:.1f}% of the queries (mean overlap "
                     f"{overall['Mean top-10 overlap with other moves (of 10)']:.1f} of 10).")
        lines += [f"- {line}" for line in sensitivity_reading(sensitivity_summary,
                                                              pairwise if pairwise is not None else pd.DataFrame())]
    return "\n".join(lines)
