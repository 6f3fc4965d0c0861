"""Stage 09 (notebook 09_finetune): one dense retriever fine-tuned per move (paper §5.1, Appendix C).

For each move, the base model is trained on the move's training pairs (query → gold sentence) with
sentence-transformers' `MultipleNegativesRankingLoss`: the negatives of a query are the gold
sentences of the other queries in the batch (gathered from every device under DDP). Each of three to
five hyperparameter configurations (a configs file, Table 6) is evaluated after every epoch by
MRR@10 on the validation pool, and its best checkpoint is restored; the configuration with the best
validation MRR@10 is selected and only it is scored on the test split, once.

One module per layer; this package re-exports the names other modules and tests use:

    configurations.py  HyperParams, load_hyperparams, load_train_params, training_schedule, file names
    data.py       training_pairs, training_data_fingerprint (what a model is keyed by)
    evaluator.py  PoolRetrievalEvaluator (validation during training), per_query_values
    run.py        train_configuration: one configuration trained on one move, its RunResult
    selection.py  per-move orchestration: configurations, selection, baseline, publishing, model card,
                  finetune_plan / finetune_summary / finetune
    tables.py     Table 6 and the tuned-vs-baseline table (paired intervals, p-values), from what selection wrote
    cli.py        the command line; __main__.py makes `python -m ratio_utils.train` run it

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

from .cli import main
from .configurations import (
    EVAL_KS,
    EVALUATOR_NAME,
    FINAL_RESULTS_FILE,
    PRIMARY,
    RESULT_FILE,
    RUNS_DIRNAME,
    HyperParams,
    Schedule,
    load_hyperparams,
    load_train_params,
    training_schedule,
)
from .data import training_data_fingerprint, training_pairs
from .evaluator import PER_QUERY_METRICS, PoolRetrievalEvaluator, per_query_values
from .run import RunResult, train_configuration
from .selection import (
    FINAL_SPLITS,
    NOT_BEATEN,
    MoveResult,
    base_name,
    baseline_scores,
    beats_baseline,
    benchmark_fingerprints,
    describe_runs,
    finetune,
    finetune_move,
    finetune_plan,
    finetune_summary,
    model_fingerprints,
    move_model_card,
    move_model_dir,
    move_runs_dir,
    not_beaten_note,
    run_key,
    score_percent,
    usage_lines,
)

__all__ = [
    "EVAL_KS", "EVALUATOR_NAME", "FINAL_RESULTS_FILE", "PRIMARY", "RESULT_FILE", "RUNS_DIRNAME", "HyperParams",
    "Schedule", "load_hyperparams", "load_train_params", "training_schedule",
    "training_data_fingerprint", "training_pairs",
    "PER_QUERY_METRICS", "PoolRetrievalEvaluator", "per_query_values",
    "RunResult", "train_configuration",
    "FINAL_SPLITS", "NOT_BEATEN", "MoveResult", "base_name", "baseline_scores", "beats_baseline", "describe_runs",
    "finetune", "finetune_move", "benchmark_fingerprints", "move_model_card", "model_fingerprints", "move_model_dir",
    "move_runs_dir", "not_beaten_note", "run_key",
    "score_percent", "finetune_summary", "finetune_plan",
    "usage_lines",
    "main",
]
