"""Fine-tuning parameters (stage 09): the `train:` params section and the hyperparameter configurations.

`TrainParams` is the `train:` section of a params file (registered in `config.PARAMS_SECTIONS`);
`HyperParams` is one configuration of Table 6, `load_hyperparams` reads them from a configs file
(params/finetune/*.yaml), and `training_schedule` turns one into batch size, passes and steps.
Also the file names and metric constants the other modules share.

Reads:  the params file's `train:` section (through Config), the configs file.
Writes: nothing.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config import Config, locate
from ..param_sections import TrainParams
from ..schema import MODEL_RESULTS_FILE, Move

RUNS_DIRNAME = "_runs"
RESULT_FILE = "result.json"  # written last in a configuration's folder: the "finished" marker
FINAL_RESULTS_FILE = MODEL_RESULTS_FILE
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


def training_schedule(n_pairs: int, hp: HyperParams, *, world_size: int = 1,
                      min_steps_per_epoch: int = 10) -> Schedule:
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


def load_train_params(cfg: Config) -> TrainParams:
    return cfg.section("train", TrainParams)


def load_hyperparams(path: str | Path, move: Move | str | None = None,
                     ids: list[int] | None = None) -> list[HyperParams]:
    """The configurations of a configs file for one move.

    File shape: `model:` (informative), `configs:` (a list used for every move) and optionally
    `per_move: {address: [...], ...}` (replaces the list for that move). `ids` keeps only those ids.
    """
    path = locate(path, what="fine-tuning configs file")  # relative: the working directory, the checkout, the package
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    rows = data.get("configs") or []
    if move is not None:
        rows = (data.get("per_move") or {}).get(Move.parse(move).value, rows)
    known = {f.name for f in dataclasses.fields(HyperParams)}
    configs = []
    for index, row in enumerate(rows):
        unknown = sorted(set(row) - known)
        if unknown or "id" not in row:
            raise ValueError(f"{path}: configuration #{index + 1} has unknown key(s) {unknown} or no id; allowed "
                             f"{sorted(known)}")
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
