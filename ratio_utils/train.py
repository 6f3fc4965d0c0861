"""Stage 09 (notebook 09_finetune): one dense retriever fine-tuned per move (paper §5.1, Appendix C).

For each move, the base model is trained on the move's training pairs (query → gold sentence) with
sentence-transformers' `MultipleNegativesRankingLoss`: the negatives of a query are the gold
sentences of the other queries in the batch (gathered from every device under DDP). Each of three to
five hyperparameter configurations (a configs file, Table 6) is evaluated after every epoch by
MRR@10 on the validation pool, and its best checkpoint is restored; the configuration with the best
validation MRR@10 is selected and only it is scored on the test split, once.

Reads:  the benchmark (cfg.paths.benchmark), the base model (`ratio_utils.models`), the configs file.
Writes: models/_runs/<base>__<move>/<config>-<key>/result.json   one per configuration tried; its
                                                                  presence means "done" (resume marker)
        models/<base>__<move>/                                    the selected retriever, its model card
                                                                  (README.md) and results.json
        tables/table6_finetune_configs.*, tables/finetune_tuned_vs_baseline.*

The same code runs on one CPU, one GPU, or several GPUs under torchrun (see docs/training.md):

    torchrun --nproc_per_node 4 -m ratio_utils.train --params params/default.yaml --move address
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from .benchmark import Benchmark, load_benchmark
from .config import REPO_ROOT, Config, load_config
from .distributed import barrier, is_main_process, world_size
from .io import read_json_if_exists, write_json_atomic, write_text_atomic
from .models import model_name
from .schema import MOVES, Move, Split

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

RUNS_DIRNAME = "_runs"
RESULT_FILE = "result.json"  # written last in a configuration's folder: the "finished" marker
FINAL_RESULTS_FILE = "results.json"
EVAL_KS = (1, 3, 5, 10, 100)
PRIMARY = "MRR@10"
EVALUATOR_NAME = "validation"


# ---------------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HyperParams:
    """One configuration of Table 6 (one training run)."""

    id: int
    epochs: int = 1
    batch_size: int = 32  # per device; in-batch candidates per query = batch_size × devices
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    rationale: str = ""

    @property
    def name(self) -> str:
        return f"config{self.id}"

    def training_values(self) -> dict[str, Any]:
        """Everything that changes the trained weights (the rationale does not)."""
        values = dataclasses.asdict(self)
        values.pop("rationale")
        return values


@dataclass(frozen=True)
class Schedule:
    """The optimizer steps one configuration takes on a given number of pairs (see training_schedule)."""

    batch_size: int  # per device, after capping at the pairs each device sees
    repeats: int  # passes over the training pairs in one (evaluated) epoch
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int


def training_schedule(n_pairs: int, hp: HyperParams, *, world_size: int = 1, min_steps_per_epoch: int = 10) -> Schedule:
    """Batch, passes per epoch and warm-up in whole steps, so that a tiny move really trains.

    Three rules, each for a failure seen on Broaden (32 pairs; batch 32 or 64 gave one step whose
    learning rate was 0 because transformers rounds a 10% warm-up of one step *up* to one step):
    - the batch is capped at the pairs a device sees (a batch of 64 on 32 pairs is a batch of 32);
    - an epoch repeats the pairs until it has at least `min_steps_per_epoch` optimizer steps, so the
      validation after every epoch still comes at the configured number of epochs (validation passes
      dominate the CPU budget; more epochs would multiply them, repeating the pairs does not);
    - warm-up = floor(warmup_ratio x total steps) whole steps, so warm-up never takes every step
      (a floor: with fewer than 1/warmup_ratio steps there is no warm-up at all).
    Moves with enough pairs (steps per pass >= min_steps_per_epoch) keep one pass per epoch.
    """
    if n_pairs < 1:
        raise ValueError("no training pairs")
    devices = max(world_size, 1)
    batch = max(1, min(hp.batch_size, n_pairs // devices or 1))
    steps_per_pass = math.ceil(n_pairs / (batch * devices))
    repeats = 1 if steps_per_pass >= min_steps_per_epoch else math.ceil(min_steps_per_epoch / steps_per_pass)
    steps_per_epoch = math.ceil(n_pairs * repeats / (batch * devices))
    total = steps_per_epoch * hp.epochs
    return Schedule(batch, repeats, steps_per_epoch, total, math.floor(hp.warmup_ratio * total))


@dataclass
class TrainParams:
    """The `train:` section of a params file. Defaults follow the paper where it states a value."""

    base_model: str = "all-MiniLM-L6-v2"  # a name resolve_model_path knows, or a local folder
    configs_file: str = "params/finetune/all-MiniLM-L6-v2.yaml"  # Table 6 configurations (repo-relative)
    configs: list[int] | None = None  # configuration ids to try; None = every one in the file
    moves: list[str] = field(default_factory=lambda: [m.value for m in MOVES])
    max_train_pairs: int | None = None  # paper: all pairs; a CPU budget caps them (seeded sample)
    max_seq_length: int = 128
    query_prefix: str = "query: "  # the paper's generic prefixes (Appendix C, Input prefixes)
    doc_prefix: str = "document: "
    eval_batch_size: int = 64
    # Tiny moves (Broaden: 32 training pairs) give one optimizer step per epoch at batch 32; a pass over
    # the pairs is then repeated until an epoch has at least this many steps (training_schedule).
    min_steps_per_epoch: int = 10
    logging_steps: int = 10
    keep_unselected_models: bool = False  # delete the weights of configurations that lost
    device: str | None = None  # None: cuda when present, else cpu (the trainer decides under torchrun)
    # Tuned late-interaction row (ratio_utils.train_colbert): PyLate ColBERT on top of base_model.
    colbert: bool = True
    colbert_moves: list[str] | None = None  # None: the same moves as the dense retrievers
    colbert_max_train_pairs: int | None = 128
    colbert_epochs: int = 1
    colbert_batch_size: int = 16
    colbert_learning_rate: float = 3e-5
    colbert_embedding_size: int = 128
    # Training pads every query to query_length ([MASK] expansion) and every candidate to
    # document_length, so on CPU both are cut well below the paper's 128/300 (sentences rarely
    # exceed 64 tokens); evaluation uses the same query length (recorded in results.json).
    colbert_query_length: int = 32
    colbert_document_length: int = 64
    colbert_evaluate_test: bool = True  # score the trained ColBERT on the test pool (MaxSim, ~89 docs/s on CPU)

    def selected_moves(self, move: str | None = None) -> list[Move]:
        """`all` -> the moves of the params; one move -> that move if the params include it, else none
        (a fanned-out notebook for a move the params leave out does nothing)."""
        moves = [Move.parse(m) for m in self.moves]
        if move is None or str(move).lower() == "all":
            return moves
        return [m for m in moves if m is Move.parse(move)]


def load_train_params(cfg: Config) -> TrainParams:
    return cfg.section("train", TrainParams)


def load_hyperparams(path: str | Path, move: Move | str | None = None, ids: list[int] | None = None) -> list[HyperParams]:
    """The configurations of a configs file for one move.

    File shape: `model:` (informative), `configs:` (a list used for every move) and optionally
    `per_move: {address: [...], ...}` (replaces the list for that move). `ids` keeps only those ids.
    """
    path = Path(path)
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.exists():
        raise FileNotFoundError(f"fine-tuning configs file not found: {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    rows = data.get("configs") or []
    if move is not None:
        rows = (data.get("per_move") or {}).get(Move.parse(move).value, rows)
    known = {f.name for f in dataclasses.fields(HyperParams)}
    configs = []
    for index, row in enumerate(rows):
        unknown = sorted(set(row) - known)
        if unknown or "id" not in row:
            raise ValueError(f"{path}: configuration #{index + 1} has unknown key(s) {unknown} or no id; allowed {sorted(known)}")
        configs.append(HyperParams(**row))
    seen = [c.id for c in configs]
    if len(seen) != len(set(seen)):
        raise ValueError(f"{path}: configuration ids repeat: {seen}")
    if ids is not None:
        missing = sorted(set(ids) - set(seen))
        if missing:
            raise ValueError(f"{path}: params ask for configuration id(s) {missing}; the file has {seen}")
        configs = [c for c in configs if c.id in set(ids)]
    if not configs:
        raise ValueError(f"{path}: no configuration to try")
    return configs


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass
class EvalSet:
    """Queries of one move and split, their qrels and the split's shared pool."""

    queries: pd.DataFrame  # qid, text
    qrels: pd.DataFrame  # qid, docid
    pool: pd.DataFrame  # docid, text

    @classmethod
    def load(cls, bench: Benchmark, move: Move, split: Split | str) -> "EvalSet":
        frame = bench.queries(move, split)
        queries = frame[["query_id", "querySentence"]].rename(columns={"query_id": "qid", "querySentence": "text"})
        return cls(queries.drop_duplicates("qid").reset_index(drop=True), bench.qrels(move, split), bench.pool(split)[["docid", "text"]])


def training_pairs(bench: Benchmark, move: Move, max_pairs: int | None, seed: int) -> pd.DataFrame:
    """The move's training pairs as (anchor, positive), a seeded sample when `max_pairs` caps them."""
    frame = bench.queries(move, Split.TRAIN)
    pairs = frame[["querySentence", "goldSentence"]].rename(columns={"querySentence": "anchor", "goldSentence": "positive"})
    empty = pairs["anchor"].isna() | pairs["positive"].isna() | (pairs["anchor"].str.strip() == "") | (pairs["positive"].str.strip() == "")
    if empty.any():
        raise ValueError(f"{int(empty.sum())} training pair(s) of {move.value} have an empty query or gold sentence")
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = pairs.sample(n=max_pairs, random_state=seed)
    return pairs.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Validation during training
# ---------------------------------------------------------------------------------------------


PER_QUERY_METRICS = ("MRR@10", "R@10", "R@100")  # kept per query: intervals and paired tests need them


def per_query_values(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, list]:
    """{"qid": [...], "MRR@10": [...], ...}: the per-query values behind the reported means (JSON-ready)."""
    from .metrics import per_query_metric

    columns = {name: per_query_metric(run, qrels, *name.split("@")[:1], int(name.split("@")[1])) for name in PER_QUERY_METRICS}
    frame = pd.DataFrame(columns)
    return {"qid": [str(q) for q in frame.index], **{name: [float(v) for v in frame[name]] for name in PER_QUERY_METRICS}}


def _sentence_evaluator_base():
    from sentence_transformers.evaluation import SentenceEvaluator

    return SentenceEvaluator


class PoolRetrievalEvaluator(_sentence_evaluator_base()):
    """MRR@10 (and Recall@k) of the live model ranking the whole pool, as the benchmark scores it.

    Uses the project's retriever and metrics (ratio_utils.retrieval / ratio_utils.metrics) instead of
    sentence-transformers' InformationRetrievalEvaluator so that a validation score during training
    is the same number the benchmark reports for the saved model (same prefixes, self-exclusion, tie
    order). Every call is recorded in `history`.
    """

    def __init__(self, evalset: EvalSet, *, query_prefix: str, doc_prefix: str, batch_size: int = 64,
                 ks: tuple[int, ...] = EVAL_KS, name: str = EVALUATOR_NAME):
        super().__init__()
        self.evalset = evalset
        self.query_prefix = query_prefix
        self.doc_prefix = doc_prefix
        self.batch_size = batch_size
        self.ks = ks
        self.name = name
        self.primary_metric = PRIMARY
        self.history: list[dict[str, Any]] = []
        self.per_query: dict[int, dict[str, list]] = {}  # step -> per-query values of that evaluation
        self.seconds = 0.0
        self._last_run: pd.DataFrame | None = None

    def score(self, model: "SentenceTransformer") -> dict[str, float]:
        from .metrics import evaluate_run
        from .retrieval import DenseRetriever

        retriever = DenseRetriever(model, query_prefix=self.query_prefix, doc_prefix=self.doc_prefix, batch_size=self.batch_size)
        run = retriever.search(self.evalset.queries, self.evalset.pool, max(self.ks))
        self._last_run = run
        return evaluate_run(run, self.evalset.qrels, self.ks)

    def __call__(self, model, output_path: str | None = None, epoch: float = -1, steps: int = -1) -> dict[str, float]:
        from .models import model_fingerprint

        started = time.perf_counter()
        scores = self.score(model)
        self.seconds += time.perf_counter() - started
        # The weights' checksum ties each score to the weights scored: the restored model must match
        # the best epoch's checksum (tests/test_train.py checks it).
        self.history.append({"epoch": float(epoch), "step": int(steps), "weights": model_fingerprint(model)[:16], **scores})
        if self._last_run is not None:  # a subclass scoring several query sets (ratio_utils.unified) keeps none
            self.per_query[int(steps)] = per_query_values(self._last_run, self.evalset.qrels)
        metrics = self.prefix_name_to_metrics(scores, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    @property
    def metric_for_best_model(self) -> str:
        return f"eval_{self.name}_{PRIMARY}"


# ---------------------------------------------------------------------------------------------
# One training run
# ---------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one configuration's training produced; serialised as its result.json."""

    move: str
    config: dict[str, Any]
    run_key: str
    train_pairs: int
    best_epoch: float | None
    validation: dict[str, float]  # scores of the restored (best) checkpoint
    history: list[dict[str, Any]]  # validation scores after every epoch
    loss_history: list[dict[str, float]]  # training loss per logging step
    train_seconds: float  # training only (evaluation time subtracted)
    eval_seconds: float
    pairs_per_second: float
    world_size: int
    device: str
    model_dir: str
    schedule: dict[str, int] = field(default_factory=dict)  # training_schedule(...) as used
    optimizer_steps: int = 0  # steps the trainer took (its global step)
    validation_per_query: dict[str, list] = field(default_factory=dict)  # of the restored checkpoint

    @property
    def score(self) -> float:
        return float(self.validation[PRIMARY])

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunResult":
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def train_configuration(
    base_model_path: Path,
    pairs: pd.DataFrame,
    evaluator: PoolRetrievalEvaluator,
    hp: HyperParams,
    run_dir: Path,
    params: TrainParams,
    *,
    move: Move,
    run_key: str,
    seed: int,
    batch_sampler: Any = None,
) -> tuple[RunResult, "SentenceTransformer"]:
    """Train one configuration, restore its best epoch, save it to run_dir/model; return the result.

    `batch_sampler` replaces the no-duplicates sampler (a sentence-transformers batch sampler class;
    the unified retriever's move-mixing sampler, ratio_utils.unified).
    """
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    from .models import load_sentence_transformer

    model = load_sentence_transformer(base_model_path, device=params.device)
    model.max_seq_length = params.max_seq_length
    # In-batch negatives; under DDP the candidates of every device join each query's negatives
    # (the paper's four-GPU runs). Outside DDP gathering is a no-op.
    loss = MultipleNegativesRankingLoss(model, gather_across_devices=True)
    checkpoints = run_dir / "checkpoints"
    # With one epoch the last weights are the best ones: no checkpoint to write and restore.
    restore_best = hp.epochs > 1
    schedule = training_schedule(len(pairs), hp, world_size=world_size(), min_steps_per_epoch=params.min_steps_per_epoch)
    # A tiny move's epoch passes over its pairs `repeats` times (training_schedule says why); the
    # no-duplicates sampler keeps each batch free of repeated texts.
    epoch_pairs = pd.concat([pairs] * schedule.repeats, ignore_index=True)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(checkpoints),
        num_train_epochs=hp.epochs,
        per_device_train_batch_size=schedule.batch_size,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        warmup_steps=schedule.warmup_steps,  # whole steps (an int), not transformers' rounded-up ratio
        max_grad_norm=hp.max_grad_norm,
        # A query whose gold sentence appears twice in a batch would be pushed away from its own gold.
        batch_sampler=batch_sampler or BatchSamplers.NO_DUPLICATES,
        prompts={"anchor": params.query_prefix, "positive": params.doc_prefix},
        eval_strategy="epoch",
        save_strategy="epoch" if restore_best else "no",
        save_only_model=True,  # no mid-run resume, so optimizer states are not worth writing
        save_total_limit=1,  # with load_best_model_at_end the best checkpoint is always kept too
        load_best_model_at_end=restore_best,
        metric_for_best_model=evaluator.metric_for_best_model,
        greater_is_better=True,
        logging_steps=params.logging_steps,
        logging_first_step=True,
        seed=seed,
        data_seed=seed,
        report_to="none",
        disable_tqdm=False,
        use_cpu=params.device == "cpu",
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_pandas(epoch_pairs, preserve_index=False),
        loss=loss,
        evaluator=evaluator,
    )
    started = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - started
    state = trainer.state
    best = None
    if state.best_model_checkpoint:  # the checkpoint the trainer restored: checkpoint-<global step>
        best_step = int(Path(state.best_model_checkpoint).name.split("-")[-1])
        best = next((h for h in evaluator.history if h["step"] == best_step), None)
    if best is None:  # one epoch (nothing to restore): its evaluation is the result
        best = evaluator.history[-1] if evaluator.history else {}
    best_epoch = best.get("epoch")
    validation = {k: v for k, v in best.items() if k not in ("epoch", "step", "weights")}
    losses = [{"step": int(e["step"]), "epoch": float(e["epoch"]), "loss": float(e["loss"])} for e in state.log_history if "loss" in e]
    train_seconds = max(total - evaluator.seconds, 1e-9)
    model_dir = run_dir / "model"
    if trainer.is_world_process_zero():
        model.prompts = {"query": params.query_prefix, "document": params.doc_prefix}
        model.save(str(model_dir))
        shutil.rmtree(checkpoints, ignore_errors=True)
    result = RunResult(
        move=move.value,
        config=dataclasses.asdict(hp),
        run_key=run_key,
        train_pairs=len(pairs),
        best_epoch=best_epoch,
        validation=validation,
        history=list(evaluator.history),
        loss_history=losses,
        train_seconds=round(train_seconds, 3),
        eval_seconds=round(evaluator.seconds, 3),
        pairs_per_second=round(len(epoch_pairs) * hp.epochs * world_size() / train_seconds, 3),
        world_size=world_size(),
        device=str(model.device),
        model_dir=str(model_dir),
        schedule=dataclasses.asdict(schedule),
        optimizer_steps=int(state.global_step),
        validation_per_query=evaluator.per_query.get(int(best.get("step", -1)), {}),
    )
    return result, model


# ---------------------------------------------------------------------------------------------
# Per-move orchestration: configurations, selection, the single test evaluation
# ---------------------------------------------------------------------------------------------


def base_name(base_model: str) -> str:
    """The folder-name form of a base model: the last path component."""
    return model_name(base_model)


def move_model_dir(cfg: Config, params: TrainParams, move: Move) -> Path:
    return cfg.paths.tuned_model_dir(params.base_model, move)


def move_runs_dir(cfg: Config, params: TrainParams, move: Move) -> Path:
    return cfg.paths.tuned_runs_dir(params.base_model, move)


def run_key(fingerprints: dict[str, str], params: TrainParams, hp: HyperParams, move: Move, seed: int) -> str:
    """A checksum of every input that changes a run's outcome; a changed input means a new run."""
    payload = {
        **fingerprints,
        "move": move.value,
        "hp": hp.training_values(),
        "max_train_pairs": params.max_train_pairs,
        "max_seq_length": params.max_seq_length,
        "prefixes": [params.query_prefix, params.doc_prefix],
        "seed": seed,
        # The step schedule (capped batch, repeated passes, whole-step warm-up) changed what a configuration
        # trains; runs made before it ("schedule" absent) are not reused.
        "schedule": {"min_steps_per_epoch": params.min_steps_per_epoch, "warmup": "floor-steps"},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class MoveResult:
    """Everything notebook 09 shows for one move."""

    move: str
    runs: list[RunResult]
    selected: RunResult
    baseline: dict[str, dict[str, float]]  # split -> scores of the base model
    test: dict[str, float]  # scores of the selected model on the test split
    model_dir: str
    trained_now: list[int]  # configuration ids trained in this call (empty on a full resume)

    @property
    def beats_baseline(self) -> bool | None:
        return beats_baseline(self.selected, self.baseline)


FINAL_SPLITS = (Split.TEST, Split.SILVER)  # silver (judge-filtered test queries) only where notebook 07 made it


def _evaluate_saved(model_path: Path, bench: Benchmark, move: Move, splits, params: TrainParams,
                    cache_dir: Path | None, per_query: dict[str, dict] | None = None) -> dict[str, dict[str, float]]:
    """Scores of a saved model on each split that exists (one retriever: silver reuses the test pool's vectors).

    `per_query`, when given, receives each split's per-query values (per_query_values)."""
    from .metrics import evaluate_run
    from .retrieval import DenseRetriever

    retriever = DenseRetriever(str(model_path), query_prefix=params.query_prefix, doc_prefix=params.doc_prefix,
                               batch_size=params.eval_batch_size, cache_dir=cache_dir)
    scores = {}
    for split in splits:
        if bench.has(move, split):
            evalset = EvalSet.load(bench, move, split)
            run = retriever.search(evalset.queries, evalset.pool, max(EVAL_KS))
            scores[split.value] = evaluate_run(run, evalset.qrels, EVAL_KS)
            if per_query is not None:
                per_query[split.value] = per_query_values(run, evalset.qrels)
    return scores


def baseline_scores(cfg: Config, params: TrainParams, bench: Benchmark, move: Move, base_path: Path,
                    fingerprints: dict[str, str]) -> dict[str, dict[str, float]]:
    """The base model before fine-tuning, scored like the tuned one (same prefixes, pools); cached."""
    path = move_runs_dir(cfg, params, move) / "baseline.json"
    # "per_query": files written before per-query values were kept are recomputed.
    key = hashlib.sha256(json.dumps({**fingerprints, "prefixes": [params.query_prefix, params.doc_prefix], "per_query": list(PER_QUERY_METRICS)},
                                    sort_keys=True).encode()).hexdigest()[:12]
    cached = read_json_if_exists(path)
    if cached and cached.get("key") == key:
        return cached["scores"]
    scores = {}
    if is_main_process():
        # The embedding cache is notebook 08's: the base model's pool vectors are usually there already.
        per_query: dict[str, dict] = {}
        scores = _evaluate_saved(base_path, bench, move, (Split.VALIDATION, *FINAL_SPLITS), params, cfg.paths.embedding_cache, per_query)
        write_json_atomic(path, {"key": key, "base_model": params.base_model, "prefixes": [params.query_prefix, params.doc_prefix],
                                 "scores": scores, "per_query": per_query})
    barrier()
    return (read_json_if_exists(path) or {}).get("scores", scores)


def finetune_move(cfg: Config, move: Move | str, params: TrainParams | None = None, bench: Benchmark | None = None) -> MoveResult:
    """Train every configuration of one move not yet done, select the best, score it on test once."""
    from .models import model_fingerprint, resolve_model_path

    move = Move.parse(move)
    params = params or load_train_params(cfg)
    bench = bench or load_benchmark(cfg.paths.benchmark)
    base_path = resolve_model_path(params.base_model)
    fingerprints = {"base_model": model_fingerprint(base_path), "benchmark": bench.checksum()}
    configs = load_hyperparams(params.configs_file, move, params.configs)
    runs_dir = move_runs_dir(cfg, params, move)
    baseline = baseline_scores(cfg, params, bench, move, base_path, fingerprints)

    pairs = None
    validation = None
    runs: list[RunResult] = []
    trained_now: list[int] = []
    for hp in configs:
        key = run_key(fingerprints, params, hp, move, cfg.seed)
        run_dir = runs_dir / f"{hp.name}-{key}"
        done = read_json_if_exists(run_dir / RESULT_FILE)
        if done is not None:
            # The folder may have moved with the output root: trust the location, not the stored path.
            runs.append(dataclasses.replace(RunResult.from_json(done), model_dir=str(run_dir / "model")))
            continue
        if pairs is None:
            pairs = training_pairs(bench, move, params.max_train_pairs, cfg.seed)
            validation = EvalSet.load(bench, move, Split.VALIDATION)
        result = _train_and_record(base_path, pairs, validation, hp, run_dir, params, move, key, cfg.seed)
        runs.append(result)
        trained_now.append(hp.id)

    selected = max(runs, key=lambda r: (r.score, -r.config["id"]))  # ties: the lower configuration id
    if not Path(selected.model_dir).exists():
        # Its weights were removed (it lost an earlier selection over other configurations): retrain it.
        hp = HyperParams(**selected.config)
        pairs = pairs if pairs is not None else training_pairs(bench, move, params.max_train_pairs, cfg.seed)
        validation = validation or EvalSet.load(bench, move, Split.VALIDATION)
        fresh = _train_and_record(base_path, pairs, validation, hp, Path(selected.model_dir).parent, params, move, selected.run_key, cfg.seed)
        runs = [fresh if r.run_key == fresh.run_key else r for r in runs]
        selected = fresh
        trained_now.append(hp.id)

    final_dir = move_model_dir(cfg, params, move)
    test = _publish_selected(cfg, params, bench, move, selected, runs, baseline, fingerprints, final_dir)
    if is_main_process() and not params.keep_unselected_models:
        for run in runs:
            if run.run_key != selected.run_key:
                shutil.rmtree(run.model_dir, ignore_errors=True)
    barrier()
    return MoveResult(move.value, runs, selected, baseline, test, str(final_dir), trained_now)


def _train_and_record(base_path, pairs, validation, hp, run_dir, params, move, key, seed) -> RunResult:
    evaluator = PoolRetrievalEvaluator(validation, query_prefix=params.query_prefix, doc_prefix=params.doc_prefix,
                                       batch_size=params.eval_batch_size)
    logger.info("training %s %s on %d pairs", move.value, hp.name, len(pairs))
    result, _ = train_configuration(base_path, pairs, evaluator, hp, run_dir, params, move=move, run_key=key, seed=seed)
    if is_main_process():
        write_json_atomic(run_dir / RESULT_FILE, result.to_json())  # last: marks the run finished
    barrier()
    return result


def _publish_selected(cfg, params, bench, move, selected: RunResult, runs, baseline, fingerprints, final_dir: Path) -> dict[str, float]:
    """Copy the selected run to models/<base>__<move>/, score it on test once, write card + results."""
    existing = read_json_if_exists(final_dir / FINAL_RESULTS_FILE)
    if existing and existing.get("selected_run_key") == selected.run_key and (final_dir / "README.md").exists():
        return existing.get("test", {})  # the test split was already used for this selection
    test: dict[str, float] = {}
    if is_main_process():
        staging = final_dir.with_name(final_dir.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(selected.model_dir, staging)
        # The only use of the test split (and of silver, its judge-filtered subset) for this selection.
        tuned_per_query: dict[str, dict] = {Split.VALIDATION.value: selected.validation_per_query}
        final = _evaluate_saved(staging, bench, move, FINAL_SPLITS, params, cfg.paths.embedding_cache, tuned_per_query)
        test = final.get(Split.TEST.value, {})
        baseline_file = read_json_if_exists(move_runs_dir(cfg, params, move) / "baseline.json") or {}
        results = {
            "base_model": params.base_model,
            "move": move.value,
            "benchmark": str(cfg.paths.benchmark),
            "benchmark_checksum": fingerprints["benchmark"],
            "base_model_fingerprint": fingerprints["base_model"],
            "train_pairs": selected.train_pairs,
            "max_train_pairs": params.max_train_pairs,
            "max_seq_length": params.max_seq_length,
            "prefixes": {"query": params.query_prefix, "document": params.doc_prefix},
            "seed": cfg.seed,
            "selected_config": selected.config,
            "selected_run_key": selected.run_key,
            # False: no configuration beat the untuned model on validation MRR@10; the tables say so
            # instead of presenting this model as an improvement.
            "beats_baseline_on_validation": beats_baseline(selected, baseline),
            "schedule": selected.schedule,
            "optimizer_steps": selected.optimizer_steps,
            "best_epoch": selected.best_epoch,
            "validation": selected.validation,
            "test": test,
            "silver": final.get(Split.SILVER.value),
            "baseline": baseline,
            "configs_tried": [{"config": r.config, "validation": r.validation, "run_key": r.run_key} for r in runs],
            # Per-query values (same queries, same order of qids per split) for intervals and paired tests.
            "per_query": {"tuned": tuned_per_query, "baseline": baseline_file.get("per_query", {})},
        }
        write_text_atomic(staging / "README.md", model_card(results))
        write_json_atomic(staging / FINAL_RESULTS_FILE, results)
        if final_dir.exists():
            shutil.rmtree(final_dir)
        os.replace(staging, final_dir)
    barrier()
    return (read_json_if_exists(final_dir / FINAL_RESULTS_FILE) or {}).get("test", test)


def beats_baseline(selected: RunResult, baseline: dict[str, dict[str, float]]) -> bool | None:
    """Whether the selected configuration's validation MRR@10 is above the untuned model's (None: no baseline)."""
    base = (baseline.get(Split.VALIDATION.value) or {}).get(PRIMARY)
    return None if base is None else bool(selected.score > base)


NOT_BEATEN = ("no configuration beat the untuned model on validation MRR@10 ({tuned} vs {base}): the tuned model "
              "is the best of the configurations tried, not an improvement")


def not_beaten_note(results: dict[str, Any]) -> str | None:
    """The sentence a table or card shows when results.json says no configuration beat the baseline."""
    if results.get("beats_baseline_on_validation") is not False:
        return None
    return NOT_BEATEN.format(tuned=score_percent(results.get("validation")), base=score_percent((results.get("baseline") or {}).get("validation")))


def score_percent(scores: dict[str, float] | None, key: str = PRIMARY) -> str:
    """A score of a results dict in percent ('23.3'), or 'n/a'."""
    return "n/a" if not scores or key not in scores else f"{100 * scores[key]:.1f}"


def model_card(results: dict[str, Any]) -> str:
    """The README.md of a fine-tuned retriever: what it is, what it saw, how it scored."""
    hp = results["selected_config"]
    q, d = results["prefixes"]["query"], results["prefixes"]["document"]
    lines = [
        f"# {base_name(results['base_model'])} fine-tuned for the Ratio move `{results['move']}`",
        "",
        f"A dense retriever for the *{results['move']}* ideation move of the Ratio benchmark: given a query sentence, "
        "it ranks the candidate pool for the sentence that realises the move. Trained by `ratio_utils.train` "
        "(notebook 09) with MultipleNegativesRankingLoss (in-batch negatives) and a no-duplicates batch sampler.",
        "",
        "## Use",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "model = SentenceTransformer(PATH_TO_THIS_FOLDER)",
        f"q = model.encode([\"...\"], prompt={q!r}, normalize_embeddings=True)",
        f"d = model.encode([\"...\"], prompt={d!r}, normalize_embeddings=True)",
        "```",
        "",
        "## Base model",
        f"- `{results['base_model']}` (fingerprint `{results['base_model_fingerprint'][:16]}`)",
        "",
        "## Data",
        f"- benchmark: `{results['benchmark']}` (checksum `{results['benchmark_checksum'][:16]}`)",
        f"- training pairs of the move: {results['train_pairs']}"
        + (f" (a seeded sample, capped at {results['max_train_pairs']})" if results.get("max_train_pairs") else ""),
        f"- max sequence length {results['max_seq_length']}; prefixes `{q}` / `{d}`; seed {results['seed']}",
        "",
        "## Selected configuration",
        f"- configuration {hp['id']}: epochs {hp['epochs']}, batch {hp['batch_size']}, learning rate {hp['learning_rate']}, "
        f"weight decay {hp['weight_decay']}, warm-up ratio {hp['warmup_ratio']}, max grad norm {hp['max_grad_norm']}",
        f"- rationale: {hp.get('rationale') or '-'}",
        f"- best epoch (restored): {results['best_epoch']}; {len(results['configs_tried'])} configuration(s) tried, "
        "selected by validation MRR@10",
        *([f"- **{not_beaten_note(results)}**"] if not_beaten_note(results) else []),
        "",
        "## Scores (MRR@10, %, the whole pool of the split)",
        "",
        "| | validation | test |",
        "|---|---|---|",
        f"| base model | {score_percent(results['baseline'].get('validation'))} | {score_percent(results['baseline'].get('test'))} |",
        f"| this model | {score_percent(results['validation'])} | {score_percent(results['test'])} |",
        "",
        "The test split was scored once, for the selected configuration only.",
    ]
    return "\n".join(lines) + "\n"


def plan(cfg: Config, move: str = "all", params: TrainParams | None = None) -> pd.DataFrame:
    """The configurations a `finetune` call would try, and which are already finished on disk."""
    from .models import model_fingerprint, resolve_model_path

    params = params or load_train_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    fingerprints = {"base_model": model_fingerprint(resolve_model_path(params.base_model)), "benchmark": bench.checksum()}
    rows = []
    for m in params.selected_moves(move):
        n_pairs = len(bench.queries(m, Split.TRAIN)) if bench.has(m, Split.TRAIN) else 0
        for hp in load_hyperparams(params.configs_file, m, params.configs):
            key = run_key(fingerprints, params, hp, m, cfg.seed)
            done = (move_runs_dir(cfg, params, m) / f"{hp.name}-{key}" / RESULT_FILE).exists()
            rows.append({"move": m.value, "config": hp.id, "epochs": hp.epochs, "batch": hp.batch_size,
                         "lr": hp.learning_rate, "train pairs": min(n_pairs, params.max_train_pairs or n_pairs),
                         "available pairs": n_pairs, "run key": key, "status": "done (skipped)" if done else "to train"})
    return pd.DataFrame(rows)


def summary(results: list[MoveResult]) -> pd.DataFrame:
    """One row per move: the selected configuration, its scores, and the training speed."""
    return pd.DataFrame([
        {"move": r.move, "selected config": r.selected.config["id"], "best epoch": r.selected.best_epoch,
         "train pairs": r.selected.train_pairs, "pairs/s": r.selected.pairs_per_second,
         "val MRR@10 baseline": score_percent(r.baseline.get("validation")), "val MRR@10 tuned": score_percent(r.selected.validation),
         "test MRR@10 baseline": score_percent(r.baseline.get("test")), "test MRR@10 tuned": score_percent(r.test),
         "beats baseline on validation": {True: "yes", False: "no", None: "n/a"}[r.beats_baseline],
         "optimizer steps": r.selected.optimizer_steps,
         "trained in this call": r.trained_now, "model": r.model_dir}
        for r in results
    ])


def finetune(cfg: Config, move: str = "all", params: TrainParams | None = None) -> list[MoveResult]:
    """Notebook 09's entry point: fine-tune the selected move(s)."""
    params = params or load_train_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    return [finetune_move(cfg, m, params, bench) for m in params.selected_moves(move)]


# ---------------------------------------------------------------------------------------------
# Command line (also the torchrun entry point)
# ---------------------------------------------------------------------------------------------


def _parse_override(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    if not key or not _:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE, got {text!r}")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fine-tune one dense retriever per move (notebook 09's stage).")
    parser.add_argument("--params", default="params/default.yaml", help="params file (default: %(default)s)")
    parser.add_argument("--move", default="all", help="address, broaden, specify or all (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", type=_parse_override, default=[],
                        metavar="KEY=VALUE", help="override a params value, e.g. train.max_train_pairs=null (repeatable)")
    parser.add_argument("--no-tables", action="store_true", help="do not write Table 6 and the tuned-vs-baseline table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_config(args.params, dict(args.overrides))
    results = finetune(cfg, args.move)
    if is_main_process():
        for result in results:
            print(f"{result.move}: selected config {result.selected.config['id']} "
                  f"validation MRR@10 {score_percent(result.selected.validation)} test MRR@10 {score_percent(result.test)} "
                  f"(baseline {score_percent(result.baseline.get('validation'))} / {score_percent(result.baseline.get('test'))}) "
                  f"-> {result.model_dir}")
        if not args.no_tables:
            from .stages.finetune import write_table6, write_tuned_vs_baseline  # the notebook's tables

            write_table6(cfg)
            write_tuned_vs_baseline(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
