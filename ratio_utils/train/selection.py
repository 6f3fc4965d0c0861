"""Per-move orchestration (stage 09): configurations, selection on validation, the single test evaluation.

`finetune` / `finetune_move` run every configuration of a move (resuming finished ones by run key),
score the untuned baseline, select the configuration with the best validation MRR@10, evaluate it once
on test (and silver), and publish it with its model card; `plan` and `summary` are notebook 09's tables.

Reads:  the benchmark, the base model (`ratio_utils.models`), the configs file, finished runs' result.json.
Writes: models/_runs/<base>__<move>/<config>-<key>/result.json   (through `run.train_configuration`)
        models/<base>__<move>/   the selected retriever, its model card (README.md) and results.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..distributed import barrier, init_process_group, is_main_process, world_size
from ..io import read_json_if_exists, replace_folder, write_json_atomic, write_text_atomic
from ..models import ModelRef, model_name, registry_entry, resolve_model
from ..param_sections import TrainParams
from ..schema import Move, Split
from .configurations import (
    EVAL_KS,
    FINAL_RESULTS_FILE,
    PRIMARY,
    RESULT_FILE,
    HyperParams,
    load_hyperparams,
    load_train_params,
)
from .data import training_data_fingerprint, training_pairs
from .evaluator import PER_QUERY_METRICS, PoolRetrievalEvaluator, per_query_values
from .run import RunResult, train_configuration

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Per-move orchestration: configurations, selection, the single test evaluation
# ---------------------------------------------------------------------------------------------


def base_name(base_model: str) -> str:
    """The folder-name form of a base model: the last path component."""
    return model_name(base_model)


RECOMMENDED_SUFFIX = "-recommended"  # models/<base>-recommended__<move>/: a setup trained with recommended prefixes


def tuned_base(base_model: str, prefixes: str | None = None) -> str:
    """The name a fine-tuned setup's folders carry: the base model's, with "-recommended" for a setup trained with
    its developers' prefixes (the paper trains ModernBERT and Stella both ways)."""
    return f"{model_name(base_model)}{RECOMMENDED_SUFFIX}" if prefixes == "recommended" else base_model


def move_model_dir(cfg: Config, params: TrainParams, move: Move) -> Path:
    return cfg.paths.tuned_model_dir(tuned_base(params.base_model, params.prefixes), move)


def move_runs_dir(cfg: Config, params: TrainParams, move: Move) -> Path:
    return cfg.paths.tuned_runs_dir(tuned_base(params.base_model, params.prefixes), move)


def with_prefixes(params: TrainParams) -> TrainParams:
    """`params` with query_prefix / doc_prefix set from the model registry when `prefixes` names a style
    (unchanged when it is None)."""
    if params.prefixes is None:
        return params
    entry = registry_entry(params.base_model) or registry_entry(model_name(params.base_model))
    if entry is None:
        if params.prefixes == "recommended":
            raise ValueError("train.prefixes is 'recommended' but the model registry does not list "
                             f"{params.base_model!r}")
        from ..models import GENERIC_STYLE

        prefixes = GENERIC_STYLE
    else:
        prefixes = entry.prefixes(params.prefixes)
    return dataclasses.replace(params, query_prefix=prefixes.query, doc_prefix=prefixes.document)


def training_setups(params: TrainParams) -> list[TrainParams]:
    """Every fine-tuning setup of the `train:` section: the section itself, then each of `setups` (the section's
    values with the setup's own), prefixes filled in from the registry (with_prefixes)."""
    main = dataclasses.replace(params, setups=[])
    setups = [with_prefixes(main)] + [with_prefixes(dataclasses.replace(main, **setup)) for setup in params.setups]
    folders = [model_name(tuned_base(s.base_model, s.prefixes)) for s in setups]
    twice = sorted({f for f in folders if folders.count(f) > 1})
    if twice:
        raise ValueError("train.setups: two setups would write the same models/<base>__<move>/ folders "
                         f"({', '.join(twice)}); "
                         "give each base model one generic and one recommended setup at most")
    return setups


def model_fingerprints(base_fingerprint: str, bench: Benchmark, move: Move) -> dict[str, str]:
    """What a move's model is trained and selected on, as run_key's `fingerprints`: the base model and the
    move's train and validation pairs with the validation pool (not test or silver: a new silver set must not
    retrain a model that would come out the same)."""
    return {"base_model": base_fingerprint, "training_data": training_data_fingerprint(bench, [move])}


def benchmark_fingerprints(base_fingerprint: str, bench: Benchmark) -> dict[str, str]:
    """The base model and the whole benchmark: what the baseline's scores and a published model's test and
    silver scores depend on (a new silver set scores them again, without retraining)."""
    return {"base_model": base_fingerprint, "benchmark": bench.checksum()}


def run_key(fingerprints: dict[str, str], params: TrainParams, hp: HyperParams, move: Move, seed: int,
            world_size: int = 1) -> str:
    """A checksum of every input that changes a run's outcome; a changed input means a new run.

    The world size sets the in-batch candidates per query (batch size x processes), so a run under
    torchrun is not a one-process run's. It, bf16 and gradient checkpointing enter the key only when
    they differ from one process in full precision, so the keys of runs made before they existed hold.
    """
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
    if world_size > 1:
        payload["world_size"] = world_size
    if params.bf16:
        payload["bf16"] = True
    if params.gradient_checkpointing:  # recomputation reorders floating-point work: not bit-identical
        payload["gradient_checkpointing"] = True
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def key_world_size(params: TrainParams) -> int:
    """The processes runs are keyed by: this launch's under torchrun, else `train.nproc_per_node`, so that
    one process (notebook 09 after run_all.sh's torchrun pass) finds the runs the processes trained."""
    return world_size() if world_size() > 1 else max(1, params.nproc_per_node)


def _require_launch(cfg: Config, params: TrainParams, move: Move) -> None:
    """Refuse to train in one process what `train.nproc_per_node` says takes several (its key says several)."""
    if world_size() == 1 and params.nproc_per_node > 1:
        command = (f"torchrun --nproc_per_node {params.nproc_per_node} -m ratio_utils.train "
                   f"--params {cfg.to_dict()['params_file']} --move {move.value}")
        raise RuntimeError(f"train.nproc_per_node is {params.nproc_per_node} and this is one process: "
                           f"train {move.value} "
                           f"with `{command}` first (run_all.sh does), then run notebook 09 again to reuse its runs")


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
    published_now: bool = True  # False: the selected model was already published, its test scores are reused

    @property
    def beats_baseline(self) -> bool | None:
        return beats_baseline(self.selected, self.baseline)

    @property
    def reused_runs(self) -> list[RunResult]:
        """Configurations finished by an earlier run (same run key: same inputs), read from disk."""
        return [r for r in self.runs if r.config["id"] not in self.trained_now]

    @property
    def trained_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.config["id"] in self.trained_now]

    def reused(self) -> list[str]:
        """What this call took from earlier runs instead of computing it, one line per kind."""
        lines = []
        if self.reused_runs:
            lines.append(f"{self.move}: configuration(s) {describe_runs(self.reused_runs)}")
        if not self.published_now:
            lines.append(f"{self.move}: the selected model and its test scores ({Path(self.model_dir).name})")
        return lines


def describe_runs(runs: list[RunResult]) -> str:
    """'1 (run key 0b3cfa9fb127), 2 (run key d1cd52633137)': configuration ids with their run keys."""
    return ", ".join(f"{r.config['id']} (run key {r.run_key})" for r in runs)


FINAL_SPLITS = (Split.TEST, Split.SILVER)  # silver (judge-filtered test queries) only where notebook 07 made it


def _evaluate_saved(model_path: Path, bench: Benchmark, move: Move, splits, params: TrainParams,
                    cache_dir: Path | None, per_query: dict[str, dict] | None = None, *,
                    ref: ModelRef | None = None) -> dict[str, dict[str, float]]:
    """Scores of a saved model on each split that exists (one retriever: silver reuses the test pool's vectors).

    `per_query`, when given, receives each split's per-query values (per_query_values); `ref`, the model at
    `model_path` resolved once by the caller (with its registry settings: dtype, remote code)."""
    from ..evaluation.run_scoring import rank_and_score
    from ..systems.families import RetrieverSettings, dense_retriever

    retriever = dense_retriever(ref if ref is not None else str(model_path), params.query_prefix, params.doc_prefix,
                                RetrieverSettings(batch_size=params.eval_batch_size, cache_dir=cache_dir))
    scores = {}
    for split in splits:
        if bench.has(move, split):
            evalset = bench.eval_set(move, split)
            run, scores[split.value] = rank_and_score(retriever, evalset, EVAL_KS)
            if per_query is not None:
                per_query[split.value] = per_query_values(run, evalset.qrels)
    return scores


def baseline_scores(cfg: Config, params: TrainParams, bench: Benchmark, move: Move, base: Path | ModelRef,
                    fingerprints: dict[str, str]) -> dict[str, dict[str, float]]:
    """The base model before fine-tuning, scored like the tuned one (same prefixes, pools); cached."""
    path = move_runs_dir(cfg, params, move) / "baseline.json"
    # "per_query": files written before per-query values were kept are recomputed.
    key = hashlib.sha256(json.dumps({**fingerprints, "prefixes": [params.query_prefix, params.doc_prefix],
                                     "per_query": list(PER_QUERY_METRICS)},
                                    sort_keys=True).encode()).hexdigest()[:12]
    cached = read_json_if_exists(path)
    if cached and cached.get("key") == key:
        return cached["scores"]
    scores = {}
    if is_main_process():
        # The embedding cache is notebook 08's: the base model's pool vectors are usually there already.
        per_query: dict[str, dict] = {}
        folder, ref = (base.path, base) if isinstance(base, ModelRef) else (base, None)
        scores = _evaluate_saved(folder, bench, move, (Split.VALIDATION, *FINAL_SPLITS), params,
                                 cfg.paths.embedding_cache, per_query, ref=ref)
        write_json_atomic(path, {"key": key, "base_model": params.base_model,
                                 "prefixes": [params.query_prefix, params.doc_prefix],
                                 "scores": scores, "per_query": per_query})
    barrier()
    return (read_json_if_exists(path) or {}).get("scores", scores)


def finetune_move(cfg: Config, move: Move | str, params: TrainParams | None = None, bench: Benchmark | None = None,
                  base: ModelRef | None = None) -> MoveResult:
    """Train every configuration of one move not yet done, select the best, score it on test once.

    The base model is resolved once (`base`, or here) and its reference handed to the baseline's scoring and to
    every configuration's training."""
    move = Move.parse(move)
    params = with_prefixes(params or load_train_params(cfg))
    init_process_group(params.ddp_timeout, params.device)  # before the first barrier (the baseline's)
    bench = bench or load_benchmark(cfg.paths.benchmark)
    base = base if base is not None else resolve_model(params.base_model)
    base_fingerprint = base.fingerprint
    fingerprints, scored_on = (model_fingerprints(base_fingerprint, bench, move),
                               benchmark_fingerprints(base_fingerprint, bench))
    configs = load_hyperparams(params.configs_file, move, params.configs)
    runs_dir = move_runs_dir(cfg, params, move)
    final_dir = move_model_dir(cfg, params, move)
    baseline = baseline_scores(cfg, params, bench, move, base, scored_on)

    pairs = None
    validation = None
    runs: list[RunResult] = []
    trained_now: list[int] = []
    for hp in configs:
        key = run_key(fingerprints, params, hp, move, cfg.seed, key_world_size(params))
        run_dir = runs_dir / f"{hp.name}-{key}"
        done = read_json_if_exists(run_dir / RESULT_FILE)
        if done is not None:
            # The folder may have moved with the output root: trust the location, not the stored path.
            runs.append(dataclasses.replace(RunResult.from_json(done), model_dir=str(run_dir / "model")))
            continue
        _require_launch(cfg, params, move)
        if pairs is None:
            pairs = training_pairs(bench, move, params.max_train_pairs, cfg.seed)
            validation = bench.eval_set(move, Split.VALIDATION)
        result = _train_and_record(base, pairs, validation, hp, run_dir, params, move, key, cfg.seed)
        runs.append(result)
        trained_now.append(hp.id)

    selected = max(runs, key=lambda r: (r.score, -r.config["id"]))  # ties: the lower configuration id
    if not Path(selected.model_dir).exists():
        # Its weights were removed (it lost an earlier selection over other configurations): retrain it.
        _require_launch(cfg, params, move)
        hp = HyperParams(**selected.config)
        pairs = pairs if pairs is not None else training_pairs(bench, move, params.max_train_pairs, cfg.seed)
        validation = validation or bench.eval_set(move, Split.VALIDATION)
        fresh = _train_and_record(base, pairs, validation, hp, Path(selected.model_dir).parent, params, move,
                                  selected.run_key, cfg.seed)
        runs = [fresh if r.run_key == fresh.run_key else r for r in runs]
        selected = fresh
        trained_now.append(hp.id)

    test, published_now = _publish_selected(cfg, params, bench, move, selected, runs, baseline,
                                            {**fingerprints, "benchmark": scored_on["benchmark"]}, final_dir)
    if is_main_process() and not params.keep_unselected_models:
        for run in runs:
            if run.run_key != selected.run_key:
                shutil.rmtree(run.model_dir, ignore_errors=True)
    barrier()
    return MoveResult(move.value, runs, selected, baseline, test, str(final_dir), trained_now, published_now)


def _train_and_record(base, pairs, validation, hp, run_dir, params, move, key, seed) -> RunResult:
    evaluator = PoolRetrievalEvaluator(validation, query_prefix=params.query_prefix, doc_prefix=params.doc_prefix,
                                       batch_size=params.eval_batch_size)
    logger.info("training %s %s on %d pairs", move.value, hp.name, len(pairs))
    result, _ = train_configuration(base, pairs, evaluator, hp, run_dir, params, move=move, run_key=key, seed=seed)
    if is_main_process():
        write_json_atomic(run_dir / RESULT_FILE, result.to_json())  # last: marks the run finished
    barrier()
    return result


def _publish_selected(cfg, params, bench, move, selected: RunResult, runs, baseline, fingerprints,
                      final_dir: Path) -> tuple[dict[str, float], bool]:
    """Copy the selected run to models/<base>__<move>/, score it on test once, write card + results.

    Returns the test scores and whether they were computed now (False: published by an earlier run).
    The run key leaves test and silver out, so a published model is scored again, not retrained, when
    the benchmark it was scored on differs."""
    existing = read_json_if_exists(final_dir / FINAL_RESULTS_FILE)
    if (existing and existing.get("selected_run_key") == selected.run_key and (final_dir / "README.md").exists()
            and existing.get("benchmark_checksum") == fingerprints["benchmark"]):
        return existing.get("test", {}), False  # the test split was already used for this selection
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
            "training_data_fingerprint": fingerprints["training_data"],
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
        write_text_atomic(staging / "README.md", move_model_card(results))
        write_json_atomic(staging / FINAL_RESULTS_FILE, results)
        replace_folder(staging, final_dir)
    barrier()
    return (read_json_if_exists(final_dir / FINAL_RESULTS_FILE) or {}).get("test", test), True


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
    return NOT_BEATEN.format(tuned=score_percent(results.get("validation")),
                             base=score_percent((results.get("baseline") or {}).get("validation")))


def score_percent(scores: dict[str, float] | None, key: str = PRIMARY) -> str:
    """A score of a results dict in percent ('23.3'), or 'n/a'."""
    return "n/a" if not scores or key not in scores else f"{100 * scores[key]:.1f}"


def usage_lines(query_code: str, doc_code: str) -> list[str]:
    """The "Use" section of a model card: load the folder, encode a query and a document."""
    return ["## Use", "", "```python", "from sentence_transformers import SentenceTransformer",
            "model = SentenceTransformer(PATH_TO_THIS_FOLDER)", query_code, doc_code, "```"]


def move_model_card(results: dict[str, Any]) -> str:
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
        *usage_lines(f"q = model.encode([\"...\"], prompt={q!r}, normalize_embeddings=True)",
                     f"d = model.encode([\"...\"], prompt={d!r}, normalize_embeddings=True)"),
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
        f"- configuration {hp['id']}: epochs {hp['epochs']}, batch {hp['batch_size']}, "
        f"learning rate {hp['learning_rate']}, "
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
        f"| base model | {score_percent(results['baseline'].get('validation'))} "
        f"| {score_percent(results['baseline'].get('test'))} |",
        f"| this model | {score_percent(results['validation'])} | {score_percent(results['test'])} |",
        "",
        "The test split was scored once, for the selected configuration only.",
    ]
    return "\n".join(lines) + "\n"


def finetune_plan(cfg: Config, move: str = "all", params: TrainParams | None = None) -> pd.DataFrame:
    """The configurations a `finetune` call would try: each is trained, or reused where a finished run with the
    same run key (the same inputs) is on disk."""
    params = params or load_train_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    setups = training_setups(params)
    rows = []
    for setup in setups:
        base_fingerprint = resolve_model(setup.base_model).fingerprint
        for m in setup.selected_moves(move):
            rows.extend(_plan_rows(cfg, setup, bench, m, base_fingerprint, len(setups) > 1))
    return pd.DataFrame(rows)


def _plan_rows(cfg: Config, params: TrainParams, bench: Benchmark, m: Move, base_fingerprint: str,
               name_setup: bool) -> list[dict]:
    n_pairs = len(bench.queries(m, Split.TRAIN)) if bench.has(m, Split.TRAIN) else 0
    fingerprints = model_fingerprints(base_fingerprint, bench, m)
    setup = {"setup": move_model_dir(cfg, params, m).name.rsplit("__", 1)[0]} if name_setup else {}
    rows = []
    for hp in load_hyperparams(params.configs_file, m, params.configs):
        key = run_key(fingerprints, params, hp, m, cfg.seed, key_world_size(params))
        done = (move_runs_dir(cfg, params, m) / f"{hp.name}-{key}" / RESULT_FILE).exists()
        rows.append({**setup, "move": m.value, "config": hp.id, "epochs": hp.epochs, "batch": hp.batch_size,
                     "lr": hp.learning_rate, "train pairs": min(n_pairs, params.max_train_pairs or n_pairs),
                     "available pairs": n_pairs, "run key": key,
                     "this run": "reuse: finished by an earlier run with the same run key" if done else "train"})
    return rows


def finetune_summary(results: list[MoveResult]) -> pd.DataFrame:
    """One row per move: what this call trained and what it reused (with run keys), the selected
    configuration, its scores, and the training speed."""
    return pd.DataFrame([
        {"move": r.move,
         "trained in this run": describe_runs(r.trained_runs) or "nothing",
         "reused from an earlier run": "; ".join(line.removeprefix(f"{r.move}: ") for line in r.reused()) or "nothing",
         "selected config": r.selected.config["id"], "best epoch": r.selected.best_epoch,
         "train pairs": r.selected.train_pairs, "pairs/s": r.selected.pairs_per_second,
         "val MRR@10 baseline": score_percent(r.baseline.get("validation")),
         "val MRR@10 tuned": score_percent(r.selected.validation),
         "test MRR@10 baseline": score_percent(r.baseline.get("test")), "test MRR@10 tuned": score_percent(r.test),
         "beats baseline on validation": {True: "yes", False: "no", None: "n/a"}[r.beats_baseline],
         "optimizer steps": r.selected.optimizer_steps, "model": r.model_dir}
        for r in results
    ])


def finetune(cfg: Config, move: str = "all", params: TrainParams | None = None) -> list[MoveResult]:
    """Notebook 09's entry point: fine-tune the selected move(s) in every setup of the params (training_setups: the
    `train:` section, then its `setups`), each base model resolved once for all its moves."""
    params = params or load_train_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    results = []
    for setup in training_setups(params):
        moves = setup.selected_moves(move)
        base = resolve_model(setup.base_model) if moves else None
        results += [finetune_move(cfg, m, setup, bench, base) for m in moves]
    return results
