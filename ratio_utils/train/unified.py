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

Reads:  the benchmark (cfg.paths.benchmark), the base model (`ratio_utils.models`), a configs file.
Writes: models/unified/_runs/<base>/<config>-<key>/result.json   one per configuration tried (resume marker), in
        notebook 13's own folder
        models/<base>__unified/  the selected model, unified.json (its query format), results.json, README.md
        the move-sensitivity ranks of the published model (ratio_utils.retrieval_analysis.move_sensitivity), beside its runs
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

from ..retrieval_analysis.move_sensitivity import sensitivity_ranks
from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..io import read_json_if_exists, replace_folder, write_json_atomic, write_parquet_atomic, write_text_atomic
from ..param_sections import TrainParams, UnifiedParams
from ..schema import instructed_query_prefix
from ..schema import DEFAULT_INSTRUCTION_TEMPLATE, MOVES, Move, Split
from . import (
    EVAL_KS,
    PRIMARY,
    RESULT_FILE,
    EvalSet,
    HyperParams,
    PoolRetrievalEvaluator,
    RunResult,
    base_name,
    benchmark_fingerprints,
    load_hyperparams,
    train_configuration,
    training_data_fingerprint,
    usage_lines,
)

logger = logging.getLogger(__name__)

UNIFIED_SUFFIX = "unified"

FORMAT_FILE = "unified.json"  # in the model folder: how to phrase a query for it (read by ratio_utils.apps.search)

RESULTS_FILE = "results.json"


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

    The pool is embedded once per call when `cache_dir` is given (the moves share it)."""
    from ..evaluation.metrics import evaluate_run

    scores: dict[str, float] = {}
    for move, evalset in evalsets.items():
        run = move_run(model, move, evalset, template, doc_prefix, batch_size=batch_size, cache_dir=cache_dir)
        for key, value in evaluate_run(run, evalset.qrels, EVAL_KS).items():
            scores[f"{move.value}/{key}"] = value
    for key in {k.split("/", 1)[1] for k in scores}:
        scores[key] = float(np.mean([scores[f"{m.value}/{key}"] for m in evalsets]))
    return scores


def move_run(model: Any, move: Move, evalset: EvalSet, template: str, doc_prefix: str, *, batch_size: int = 64,
             cache_dir: Path | None = None) -> pd.DataFrame:
    """The top-k run of one move's queries, each with the move's instruction, against the split's pool."""
    from ..retrieval import DenseRetriever

    retriever = DenseRetriever(model, query_prefix=query_prefix(move, template), doc_prefix=doc_prefix,
                               batch_size=batch_size, cache_dir=cache_dir)
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
                       eval_batch_size=params.eval_batch_size, logging_steps=params.logging_steps, device=params.device)


def unified_run_key(fingerprints: dict[str, str], params: UnifiedParams, hp: HyperParams, seed: int) -> str:
    """A checksum of every input that changes a run's outcome (a changed input means a new run)."""
    payload = {**fingerprints, "moves": params.moves, "hp": hp.training_values(), "pairs_per_move": params.pairs_per_move,
               "max_repeats": params.max_repeats, "template": params.instruction_template, "doc_prefix": params.doc_prefix,
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
            lines.append(f"unified: the selected model, its test scores and move-sensitivity ranks ({Path(self.model_dir).name})")
        return lines


def plan(cfg: Config, params: UnifiedParams | None = None) -> pd.DataFrame:
    """The training pairs each move contributes (the balance) under these params."""
    params = params or load_unified_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    _, balance = balanced_pairs(_pairs_by_move(bench, params), params.pairs_per_move, params.max_repeats, cfg.seed)
    return balance


def _pairs_by_move(bench: Benchmark, params: UnifiedParams) -> dict[Move, pd.DataFrame]:
    from . import training_pairs

    return {m: training_pairs(bench, m, None, 0) if bench.has(m, Split.TRAIN) else pd.DataFrame(columns=["anchor", "positive"])
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
    fingerprints = {"base_model": base_fingerprint, "training_data": training_data_fingerprint(bench, params.selected_moves())}
    scored_on = benchmark_fingerprints(base_fingerprint, bench)
    pairs, balance = balanced_pairs(_pairs_by_move(bench, params), params.pairs_per_move, params.max_repeats, cfg.seed)
    if pairs.empty:
        raise ValueError(f"no training pairs for the moves {params.moves} in {cfg.paths.benchmark}")
    moves = [m for m in params.selected_moves() if bench.has(m, Split.VALIDATION) and len(bench.queries(m, Split.VALIDATION))]
    train_params = _train_params(params)
    runs_dir = unified_runs_dir(cfg, params)
    validation = {m: EvalSet.load(bench, m, Split.VALIDATION) for m in moves}

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
            runs.append(dataclasses.replace(RunResult.from_json(done), model_dir=str(runs_dir / f"{hp.name}-{key}" / "model")))
        else:
            runs.append(train_one(hp, key))
            trained_now.append(hp.id)
    selected = max(runs, key=lambda r: (r.score, -r.config["id"]))  # ties: the lower configuration id
    existing = read_json_if_exists(final_dir / RESULTS_FILE) or {}
    # the run key leaves test and silver out: a model scored on another benchmark is scored again, not retrained
    published = existing.get("selected_run_key") == selected.run_key and existing.get("benchmark_checksum") == scored_on["benchmark"]
    if not published and not Path(selected.model_dir).exists():
        # Its weights were removed when it lost an earlier selection over other configurations: retrain it.
        fresh = train_one(HyperParams(**selected.config), selected.run_key)
        runs = [fresh if r.run_key == fresh.run_key else r for r in runs]
        selected = fresh
        trained_now.append(fresh.config["id"])
    published_before = published and sensitivity_path(cfg, params, selected.run_key).exists()
    final = _publish(cfg, params, bench, selected, runs, balance, {**fingerprints, "benchmark": scored_on["benchmark"]}, final_dir)
    for run in runs:
        if run.run_key != selected.run_key:
            shutil.rmtree(run.model_dir, ignore_errors=True)
    sensitivity = pd.read_parquet(sensitivity_path(cfg, params, selected.run_key))
    return UnifiedResult(runs, selected, balance, final, final_dir, trained_now, sensitivity, not published_before)


def sensitivity_path(cfg: Config, params: UnifiedParams, run_key: str) -> Path:
    """Per-pair ranks of the published model's move-sensitivity analysis (written with its test scores)."""
    return unified_runs_dir(cfg, params) / f"sensitivity_{Split.parse(params.sensitivity_split).value}-{run_key}.parquet"


def query_format(params: UnifiedParams) -> dict[str, Any]:
    """unified.json: how a caller phrases queries and candidates for the model (ratio_utils.apps.search reads it)."""
    return {"kind": "unified", "instruction_template": params.instruction_template, "doc_prefix": params.doc_prefix,
            "query_prefixes": {m.value: query_prefix(m, params.instruction_template) for m in MOVES}}


def _publish(cfg, params: UnifiedParams, bench: Benchmark, selected: RunResult, runs, balance, fingerprints,
             final_dir: Path) -> dict[str, Any]:
    existing = read_json_if_exists(final_dir / RESULTS_FILE)
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
        evalsets = {m: EvalSet.load(bench, m, split) for m in params.selected_moves()
                    if bench.has(m, split) and len(bench.queries(m, split))}
        if evalsets:
            scores = score_moves(str(staging), evalsets, params.instruction_template, params.doc_prefix,
                                 batch_size=params.eval_batch_size, cache_dir=cache)
            final_scores[split.value] = {m.value: {k.split("/", 1)[1]: v for k, v in scores.items() if k.startswith(m.value + "/")}
                                         for m in evalsets}
    # Every test query under every move, while the staged folder's fingerprint still keys the cached
    # test-pool vectors (files written below change it).
    from ..retrieval import DenseRetriever

    sens_moves = [m for m in params.selected_moves() if bench.has(m, params.sensitivity_split)]
    ranks = sensitivity_ranks(DenseRetriever(str(staging), batch_size=params.eval_batch_size, cache_dir=cache), bench,
                              params.sensitivity_split, sens_moves, params.instruction_template, params.doc_prefix)
    write_parquet_atomic(ranks, sensitivity_path(cfg, params, selected.run_key))
    results = {
        "base_model": params.base_model, "moves": params.moves, "benchmark_checksum": fingerprints["benchmark"],
        "base_model_fingerprint": fingerprints["base_model"], "training_data_fingerprint": fingerprints["training_data"],
        "query_format": query_format(params),
        "balance": balance.to_dict(orient="records"), "pairs_per_move": params.pairs_per_move,
        "max_repeats": params.max_repeats, "seed": cfg.seed, "selected_config": selected.config,
        "selected_run_key": selected.run_key, "best_epoch": selected.best_epoch, "validation": selected.validation,
        "test": final_scores.get("test", {}), "silver": final_scores.get("silver"),
        "configs_tried": [{"config": r.config, "validation": r.validation, "run_key": r.run_key} for r in runs],
    }
    write_text_atomic(staging / "README.md", model_card(results))
    write_json_atomic(staging / RESULTS_FILE, results)
    replace_folder(staging, final_dir)
    return results


def model_card(results: dict[str, Any]) -> str:
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


def summary(result: UnifiedResult) -> pd.DataFrame:
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
