"""Stage 09 (notebook 09_finetune): the tuned late-interaction row — a PyLate ColBERT per move.

No pretrained ColBERT checkpoint can be installed offline (shared/models.md), so the late-interaction
row of the results tables is a ColBERT built here on top of the base dense encoder (MiniLM: its
transformer plus a fresh 128-dimensional projection) and trained on the move's training pairs with
PyLate's `Contrastive` loss (in-batch negatives: the other queries' gold sentences). One small
configuration is trained (no validation-based selection), because on two CPU cores MaxSim encoding
runs at about 89 documents/s; the row's notes say so.

Reads:  the benchmark (cfg.paths.benchmark), the base model (`ratio_utils.models`).
Writes: models/<base>-colbert__<move>/  a PyLate checkpoint (loadable by
        `ratio_utils.retrieval.ColBERTRetriever(path)`), its README.md and results.json
        (results.json is written last: its presence with the same key means "done").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, EvalSet, load_benchmark
from ..distributed import barrier, is_main_process, world_size
from ..io import read_json_if_exists, replace_folder, write_json_atomic, write_text_atomic
from ..param_sections import TrainParams
from ..schema import Move, Split
from . import (
    EVAL_KS,
    FINAL_RESULTS_FILE,
    PRIMARY,
    base_name,
    benchmark_fingerprints,
    load_train_params,
    model_fingerprints,
    per_query_values,
    score_percent,
    training_pairs,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..models import ModelRef

logger = logging.getLogger(__name__)


def colbert_model_dir(cfg: Config, params: TrainParams, move: Move) -> Path:
    return cfg.paths.tuned_model_dir(params.base_model, move, "colbert")


def colbert_settings(params: TrainParams) -> dict[str, Any]:
    """The `colbert_*` params that change the trained model."""
    return {
        f.name: getattr(params, f.name)
        for f in dataclasses.fields(params)
        if f.name.startswith("colbert_") and f.name != "colbert_evaluate_test"
    }


@dataclass
class ColbertResult:
    move: str
    model_dir: str
    train_pairs: int
    loss_history: list[dict[str, float]]
    pairs_per_second: float
    test: dict[str, float]
    trained_now: bool


def train_colbert_move(cfg: Config, move: Move | str, params: TrainParams | None = None,
                       bench: Benchmark | None = None, base: "ModelRef | None" = None) -> ColbertResult:
    """Train (unless already done) and save the move's ColBERT; score it on test when asked.

    `base`: the base model resolved once by the caller (train_colbert), else resolved here."""
    from ..models import resolve_model

    move = Move.parse(move)
    params = params or load_train_params(cfg)
    bench = bench or load_benchmark(cfg.paths.benchmark)
    base_path = base if base is not None else resolve_model(params.base_model)
    base_fingerprint = base_path.fingerprint
    fingerprints = model_fingerprints(base_fingerprint, bench, move)
    scored_on = benchmark_fingerprints(base_fingerprint, bench)
    settings = colbert_settings(params)
    key = hashlib.sha256(json.dumps({**fingerprints, **settings, "move": move.value, "seed": cfg.seed},
                                    sort_keys=True).encode()).hexdigest()[:12]
    out_dir = colbert_model_dir(cfg, params, move)
    done = read_json_if_exists(out_dir / FINAL_RESULTS_FILE)
    scored_here = (done is not None and done.get("test_evaluated")
                   and done.get("benchmark_checksum") == scored_on["benchmark"])
    if done and done.get("key") == key and (scored_here or not params.colbert_evaluate_test):
        return ColbertResult(move.value, str(out_dir), done["train_pairs"], done["loss_history"],
                             done["pairs_per_second"], done.get("test") or {}, False)

    pairs = training_pairs(bench, move, params.colbert_max_train_pairs, cfg.seed)
    staging = out_dir.with_name(out_dir.name + ".partial")
    if done and done.get("key") == key:
        # Trained earlier without a test score, or scored on another test set: only the test evaluation is due.
        loss_history, pairs_per_second, staging = done["loss_history"], done["pairs_per_second"], out_dir
    else:
        loss_history, pairs_per_second = _train(base_path, pairs, params, staging, cfg.seed)
    test: dict[str, float] = {}
    per_query: dict[str, dict] = {}
    if is_main_process():
        if params.colbert_evaluate_test and bench.has(move, Split.TEST):
            test = evaluate_colbert(staging, bench.eval_set(move, Split.TEST), params, per_query)
        results = {
            "key": key,
            "base_model": params.base_model,
            "move": move.value,
            "benchmark": str(cfg.paths.benchmark),
            "benchmark_checksum": scored_on["benchmark"],
            "base_model_fingerprint": fingerprints["base_model"],
            "training_data_fingerprint": fingerprints["training_data"],
            "settings": settings,
            "seed": cfg.seed,
            "train_pairs": len(pairs),
            "loss_history": loss_history,
            "pairs_per_second": pairs_per_second,
            "test": test,
            "per_query": per_query,  # per-query test values: the table's bootstrap intervals
            "test_evaluated": bool(params.colbert_evaluate_test),
        }
        write_text_atomic(staging / "README.md", colbert_card(results))
        write_json_atomic(staging / FINAL_RESULTS_FILE, results)
        if staging != out_dir:
            replace_folder(staging, out_dir)
    barrier()
    return ColbertResult(move.value, str(out_dir), len(pairs), loss_history, pairs_per_second, test, True)


def _train(base_path: "Path | ModelRef", pairs: pd.DataFrame, params: TrainParams, out_dir: Path,
           seed: int) -> tuple[list, float]:
    from datasets import Dataset
    from pylate import losses, utils
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.training_args import BatchSamplers
    from transformers import set_seed

    set_seed(seed)  # the new projection layer is initialised at random: seed it so reruns agree
    from ..retrieval.colbert import load_colbert

    model = load_colbert(base_path, params.colbert_query_length, params.colbert_document_length, params.device,
                         embedding_size=params.colbert_embedding_size)
    # In-batch negatives; across devices only under DDP (PyLate warns when asked to gather alone).
    loss = losses.Contrastive(model=model, gather_across_devices=world_size() > 1)
    checkpoints = out_dir.parent / f".{out_dir.name}.checkpoints"
    args = SentenceTransformerTrainingArguments(
        output_dir=str(checkpoints),
        num_train_epochs=params.colbert_epochs,
        per_device_train_batch_size=params.colbert_batch_size,
        learning_rate=params.colbert_learning_rate,
        warmup_steps=0.1,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no",
        logging_steps=1,  # few steps: log each one so the loss curve is visible
        seed=seed,
        data_seed=seed,
        report_to="none",
        use_cpu=params.device == "cpu",
    )
    dataset = Dataset.from_pandas(pairs.rename(columns={"anchor": "query"}), preserve_index=False)
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=dataset, loss=loss,
        data_collator=utils.ColBERTCollator(tokenize_fn=model.tokenize),
    )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    losses_seen = [{"step": int(e["step"]), "loss": float(e["loss"])} for e in trainer.state.log_history
                   if "loss" in e]
    if trainer.is_world_process_zero():
        shutil.rmtree(out_dir, ignore_errors=True)
        model.save(str(out_dir))
        shutil.rmtree(checkpoints, ignore_errors=True)
    barrier()
    rate = len(pairs) * params.colbert_epochs * world_size() / max(seconds, 1e-9)
    return losses_seen, round(rate, 3)


def evaluate_colbert(model_dir: Path, evalset: EvalSet, params: TrainParams,
                     per_query: dict[str, dict] | None = None) -> dict[str, float]:
    """Score a ColBERT checkpoint with the benchmark's own late-interaction retriever and metrics.

    Queries are expanded to the length the model was trained with; candidates keep the paper's 300.
    `per_query`, when given, receives the per-query test values under "test".
    """
    from ..evaluation.run_scoring import rank_and_score
    from ..systems.families import RetrieverSettings, colbert_retriever

    retriever = colbert_retriever(str(model_dir), RetrieverSettings(batch_size=32, device=params.device),
                                  query_length=params.colbert_query_length, document_length=300)
    run, scores = rank_and_score(retriever, evalset, EVAL_KS)
    if per_query is not None:
        per_query[Split.TEST.value] = per_query_values(run, evalset.qrels)
    return scores


def colbert_card(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        f"# {base_name(results['base_model'])}-ColBERT for the Ratio move `{results['move']}`",
        "",
        "A late-interaction (ColBERT, MaxSim) retriever built with PyLate on top of the base encoder "
        f"(a fresh {s['colbert_embedding_size']}-dimensional projection) and trained by `ratio_utils.train.colbert` "
        "(notebook 09) with PyLate's Contrastive loss (in-batch negatives).",
        "",
        "```python",
        "from ratio_utils.retrieval import ColBERTRetriever",
        "run = ColBERTRetriever(PATH_TO_THIS_FOLDER).search(queries, pool, k=100)",
        "```",
        "",
        f"- base model: `{results['base_model']}` (fingerprint `{results['base_model_fingerprint'][:16]}`)",
        f"- benchmark: `{results['benchmark']}` (checksum `{results['benchmark_checksum'][:16]}`)",
        f"- training pairs of the move: {results['train_pairs']} (cap {s['colbert_max_train_pairs']}, seeded sample)",
        f"- epochs {s['colbert_epochs']}, batch {s['colbert_batch_size']}, "
        f"learning rate {s['colbert_learning_rate']}, training query length {s['colbert_query_length']}, "
        f"document length {s['colbert_document_length']}, seed {results['seed']}",
        f"- evaluated with `ColBERTRetriever(path, query_length={s['colbert_query_length']}, document_length=300)`",
        "- one configuration, no validation-based selection (a CPU budget)",
        f"- test MRR@10 (%): {score_percent(results['test'])}",
    ]
    return "\n".join(lines) + "\n"


def train_colbert(cfg: Config, move: str = "all", params: TrainParams | None = None) -> list[ColbertResult]:
    """Notebook 09's entry point for the tuned late-interaction row (skipped when train.colbert is false)."""
    params = params or load_train_params(cfg)
    if not params.colbert:
        return []
    from ..models import resolve_model

    moves = colbert_moves(params, move)
    if not moves:
        return []
    bench = load_benchmark(cfg.paths.benchmark)
    base = resolve_model(params.base_model)  # once for every move
    return [train_colbert_move(cfg, m, params, bench, base) for m in moves]


def skipped_reason(params: TrainParams, move: str = "all") -> str:
    """Why `train/colbert` trained nothing for this call (notebook 09 shows it instead of a table)."""
    if not params.colbert:
        return "train.colbert is false: no late-interaction row"
    if not params.selected_moves(move):
        return f"{move} is not among train.moves {params.moves}: nothing to train"
    return (f"no ColBERT for {move}: train.colbert_moves is {params.colbert_moves} (the CPU budget trains the "
            "late-interaction row for those moves only; set it to null for every move)")


def colbert_moves(params: TrainParams, move: str = "all") -> list[Move]:
    """The moves that get a ColBERT: those selected for this call, restricted to `colbert_moves`."""
    wanted = None if params.colbert_moves is None else {Move.parse(m) for m in params.colbert_moves}
    return [m for m in params.selected_moves(move) if wanted is None or m in wanted]


def colbert_summary(results: list[ColbertResult]) -> pd.DataFrame:
    return pd.DataFrame([
        {"Move": r.move.capitalize(), "Pairs": r.train_pairs, "Pairs/s": r.pairs_per_second,
         "First loss": r.loss_history[0]["loss"] if r.loss_history else None,
         "Last loss": r.loss_history[-1]["loss"] if r.loss_history else None,
         f"Test {PRIMARY} (%)": (100 * r.test[PRIMARY]) if PRIMARY in r.test else None,
         "Trained now": r.trained_now, "Checkpoint": r.model_dir}
        for r in results
    ])


def collect_colbert_rows(cfg: Config, params: TrainParams | None = None) -> pd.DataFrame:
    """The tuned late-interaction row per move, from the results on disk (all moves)."""
    params = params or load_train_params(cfg)
    rows = []
    for move in colbert_moves(params, "all"):
        done = read_json_if_exists(colbert_model_dir(cfg, params, move) / FINAL_RESULTS_FILE)
        if not done:
            continue
        test = done.get("test") or {}
        per_query = (done.get("per_query") or {}).get(Split.TEST.value) or {}
        row = {
            "Move": move.value.capitalize(),
            "System": f"{base_name(params.base_model)}-ColBERT (tuned)",
            "Pairs": done["train_pairs"],
            "Queries": len(per_query.get("qid", [])) or None,
        }
        for metric in ("R@10", "R@100", "MRR@10"):
            row[f"Test {metric.replace('MRR@', 'M@')}"] = _with_interval(test.get(metric), per_query.get(metric))
        rows.append(row)
    return pd.DataFrame(rows)


def _with_interval(mean: float | None, values: list[float] | None) -> str:
    """'27.2 [8.1, 50.0] †' (%, 95% bootstrap interval; † under 30 queries); the mean alone without per-query
    values."""
    from ..evaluation import stats

    if mean is None:
        return ""
    if not values:
        return f"{100 * mean:.1f}"
    low, high = stats.bootstrap_ci(values)
    return stats.format_ci(mean, low, high) + (" †" if stats.is_indicative(len(values)) else "")


def write_colbert_table(cfg: Config, params: TrainParams | None = None) -> pd.DataFrame:
    from ..publish.published import write_table

    params = params or load_train_params(cfg)
    table = collect_colbert_rows(cfg, params)
    if table.empty:
        logger.warning("no trained ColBERT under %s: table not written", cfg.paths.models)
        return table
    s = colbert_settings(params)
    write_table(
        table, "finetune_colbert", cfg,
        caption="Tuned late-interaction row: a PyLate ColBERT trained per move on top of the base encoder "
                "(test split)",
        notes=[
            "Kept out of Tables 1, 7 and 8: unlike the tuned dense rows, this model has no untuned baseline and no "
            "validation-based selection (one configuration, scored directly on test), so it is not comparable with "
            "them.",
            "No pretrained ColBERT checkpoint is installable offline, so there is no late-interaction baseline row; "
            "the untrained model (base encoder + random projection) is not a meaningful baseline and is not reported.",
            "Cells: MRR@10 / Recall@k (%) with a 95% percentile bootstrap interval over test queries "
            "(10,000 resamples, seed 13); † indicative only (fewer than 30 queries).",
            f"Reduced relative to the paper's ColBERT setup: at most {s['colbert_max_train_pairs']} training pairs "
            f"per move, {s['colbert_epochs']} epoch(s), batch {s['colbert_batch_size']}, "
            f"lr {s['colbert_learning_rate']}, one configuration without validation-based selection, query length "
            f"{s['colbert_query_length']} (paper: 128) and training document length {s['colbert_document_length']} "
            "(paper: 300 at scoring, kept here at scoring). Exhaustive MaxSim scoring (ColBERTRetriever).",
            "Scored on the unfiltered test split only (no silver rows).",
            *([] if params.colbert_moves is None else [
                f"Trained and scored for {', '.join(m.capitalize() for m in params.colbert_moves)} only "
                "(train.colbert_moves): MaxSim scoring encodes the whole test pool at about 89 candidates/s on two "
                "CPU cores; set train.colbert_moves: null for every move."]),
        ],
        inputs=[cfg.paths.benchmark],
    )
    return table
