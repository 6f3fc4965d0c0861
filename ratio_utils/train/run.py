"""One training run (stage 09): one hyperparameter configuration trained on one move.

`train_configuration` trains the base model with MultipleNegativesRankingLoss (one CPU, one GPU or
DDP under torchrun), evaluates after every epoch, restores the best epoch and records a `RunResult`.

Reads:  the base model folder, the training pairs, the validation evaluator.
Writes: models/_runs/<base>__<move>/<config>-<key>/   the checkpoint and result.json (written last:
                                                     the "finished" marker)
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..distributed import barrier, world_size
from ..param_sections import TrainParams
from ..schema import Move
from .configurations import PRIMARY, HyperParams, training_schedule
from .evaluator import PoolRetrievalEvaluator

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer

    from ..models import ModelRef

logger = logging.getLogger(__name__)


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
    base_model_path: "Path | ModelRef",
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

    `base_model_path`: the base model's folder, or its reference resolved once by the caller (its registry settings,
    dtype or remote code, apply when it is loaded). `batch_sampler` replaces the no-duplicates sampler (a
    sentence-transformers batch sampler class; the unified retriever's move-mixing sampler, ratio_utils.train.unified).
    """
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    from ..models import load_sentence_transformer

    model = load_sentence_transformer(base_model_path, device=params.device)
    model.max_seq_length = params.max_seq_length
    # In-batch negatives; under DDP the candidates of every device join each query's negatives
    # (the paper's four-GPU runs). Outside DDP gathering is a no-op.
    loss = MultipleNegativesRankingLoss(model, gather_across_devices=True)
    checkpoints = run_dir / "checkpoints"
    # With one epoch the last weights are the best ones: no checkpoint to write and restore.
    restore_best = hp.epochs > 1
    schedule = training_schedule(len(pairs), hp, world_size=world_size(),
                                 min_steps_per_epoch=params.min_steps_per_epoch)
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
        ddp_timeout=params.ddp_timeout,  # used when the trainer starts the process group itself
        bf16=params.bf16,
        gradient_checkpointing=params.gradient_checkpointing,
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
    losses = [{"step": int(e["step"]), "epoch": float(e["epoch"]), "loss": float(e["loss"])}
              for e in state.log_history if "loss" in e]
    train_seconds = max(total - evaluator.seconds, 1e-9)
    model_dir = run_dir / "model"
    # Every rank has restored the best checkpoint (each reads it from disk) before rank 0 deletes it.
    barrier()
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
