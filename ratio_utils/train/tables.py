"""Stage 09's tables: Table 6 (every configuration tried, the selected one marked) and the tuned-vs-baseline table
with paired bootstrap intervals and permutation p-values (paper §5.1, Appendix C).

Used by notebook 09 (`ratio_utils.stages.finetune`), the command line (`python -m ratio_utils.train`) and the
summary (notebook 14 shows `tuned_vs_baseline_display`).

Both cover every fine-tuning setup of the params (`selection.training_setups`: train.base_model, then train.setups),
each in its own folders (models/<base>-recommended__<move>/ for a setup trained with its model's recommended prefixes).

Reads:  what `selection.finetune` writes: models/_runs/<base>__<move>/<config>-<key>/result.json (every configuration
        tried) and models/<base>__<move>/results.json (the selected model, its per-query scores); the benchmark.
Writes: tables/table6_finetune_configs.*, tables/finetune_tuned_vs_baseline.* (with their long-form records).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pandas as pd

from ..config import Config
from ..dataset.benchmark import load_benchmark
from ..evaluation import stats
from ..io import read_json_if_exists
from ..param_sections import TrainParams
from ..publish.label_sources import silver_sources
from ..publish.published import records_frame, write_table
from ..schema import MOVES, Move
from .configurations import (
    FINAL_RESULTS_FILE,
    PRIMARY,
    RESULT_FILE,
    RUNS_DIRNAME,
    load_hyperparams,
    load_train_params,
)
from .run import RunResult
from .selection import NOT_BEATEN, base_name, move_model_dir, move_runs_dir, training_setups

logger = logging.getLogger(__name__)


def collect_runs(cfg: Config, params: TrainParams | None = None) -> pd.DataFrame:
    """The finished configurations of each move's current selection, marked with the selected one.

    Runs left on disk by earlier settings (another pair budget, benchmark or seed) are not part of the
    selection that produced the published model, so they are left out; a move without a published
    model yet lists every finished run.
    """
    params = params or load_train_params(cfg)
    rows = []
    setups = training_setups(params)
    # Per move and setup: only notebook 09's runs (notebook 13 trains under models/unified/_runs/).
    result_paths = [(setup, path) for move in MOVES for setup in setups
                    for path in sorted(move_runs_dir(cfg, setup, move).glob(f"*/{RESULT_FILE}"))]
    for setup, result_path in result_paths:
        run = RunResult.from_json(json.loads(result_path.read_text(encoding="utf-8")))
        final = read_json_if_exists(move_model_dir(cfg, setup, Move.parse(run.move)) / FINAL_RESULTS_FILE) or {}
        considered = {tried["run_key"] for tried in final.get("configs_tried", [])}
        if considered and run.run_key not in considered:
            continue
        hp = run.config
        rows.append({
            "Move": run.move.capitalize(),
            "Model": setup_label(setup),
            "#": hp["id"],
            "Ep": hp["epochs"],
            "Batch": hp["batch_size"],
            "LR": f"{hp['learning_rate']:.0e}",
            "Other": f"wd={hp['weight_decay']}, wu={hp['warmup_ratio']}, mgn={hp['max_grad_norm']}",
            "Pairs": run.train_pairs,
            # optimizer steps actually taken, with the passes over the pairs per epoch when a tiny move repeats them
            "Steps": (f"{run.optimizer_steps} ({run.schedule.get('repeats', 1)}x/ep)"
                      if run.schedule.get("repeats", 1) > 1 else run.optimizer_steps),
            "Best ep": run.best_epoch,
            "Val M@10": 100 * run.score,
            "Selected": "✓" if final.get("selected_run_key") == run.run_key else "",
            "Pairs/s": run.pairs_per_second,
            "Rationale": hp.get("rationale", ""),
            "run_key": run.run_key,
        })
    return pd.DataFrame(rows)


def setup_label(setup: TrainParams) -> str:
    """How the tables name a fine-tuning setup: its base model, '(recommended prefixes)' for a setup trained with
    them."""
    return base_name(setup.base_model) + (" (recommended prefixes)" if setup.prefixes == "recommended" else "")


def _configs_note(params: TrainParams) -> str:
    if params.configs is None:
        return ""
    available = [c.id for c in load_hyperparams(params.configs_file)]
    return (f"configuration(s) {params.configs} tried out of the {len(available)} in {params.configs_file} "
            "(the paper tries 3-5 per model and move); ")


# Measured by benchmarks/training.py --mpnet (128 pairs, batch 16, 2 CPU cores, other work running beside it). No GPU
# was lent to measure a GPU run, so the note gives the CPU cost and the work a run does, not a GPU time.
MPNET_COST = (
    "Fine-tuning all-mpnet-base-v2 stays a GPU job: on 2 CPU cores it trains 0.7 training pairs/s (MiniLM 3.8, 5.2x "
    "slower) and encodes 10.9 sentences/s (MiniLM 78, 7.2x slower; benchmarks/training.py --mpnet). A run trains "
    "pairs x epochs per configuration, encodes the validation pool once per configuration and epoch and the test pool "
    "once per move; its time on a GPU was not measured here (no GPU was lent)."
)


# The base models the paper fine-tunes (§5.1): all-mpnet-base-v2, then ModernBERT and Stella with both prefix kinds.
PAPER_BASE_MODELS = ("all-mpnet-base-v2", "ModernBERT-embed-large", "Stella-en-1.5B-v5")


def _why_not_tuned(model: str) -> str:
    """Whether a base model of the paper that no setup names resolves on this machine
    (ratio_utils.models.resolve_model, nothing downloaded), and if not the resolver's reason, without machine paths."""
    from ..models import ModelNotAvailableError, resolve_model

    try:
        resolve_model(model, download=False)
    except ModelNotAvailableError as exc:
        return "it does not resolve here: " + re.sub(r" \([^()]*[/\\][^()]*\)", "", exc.reason)
    return ("it resolves here; train.base_model or train.setups selects it; untuned, it is a baseline of Tables 1, 7, "
            "8 where retrieval.dense_models names it")


def _base_models_note(params: TrainParams) -> str:
    """Which of the paper's base models the setups fine-tune, and why each other one is not (computed now)."""
    tuned = list(dict.fromkeys(base_name(s.base_model) for s in training_setups(params)))
    missing = [m for m in PAPER_BASE_MODELS if m not in tuned]
    if not missing:
        return f"Relative to the paper: its base models ({', '.join(tuned)}) are all fine-tuned here; "
    return (f"Reduced relative to the paper: base model{'s' if len(tuned) > 1 else ''} {', '.join(tuned)} instead of "
            "the paper's " + "; ".join(f"{m} ({_why_not_tuned(m)})" for m in missing) + "; ")


def table6_notes(params: TrainParams) -> list[str]:
    of_its = "move" if len(training_setups(params)) == 1 else "move and setup"
    return [
        "Val M@10 = MRR@10 (%) on the whole validation pool, after restoring the run's best epoch; "
        f"the selected configuration (✓) has the best Val M@10 of its {of_its} and is the only one scored on the test "
        "split.",
        _base_models_note(params)
        + (f"at most {params.max_train_pairs} training pairs per move (a seeded sample); " if params.max_train_pairs
           else "")
        + _configs_note(params)
        + f"max sequence length {params.max_seq_length}; one device (CPU unless a GPU is present), so in-batch "
        "candidates per query = Batch, where the paper used four GPUs for Address and Specify.",
        MPNET_COST,
        "Pairs/s = training pairs per second, evaluation time excluded.",
        f"Steps = optimizer steps taken. A move with fewer than {params.min_steps_per_epoch} steps per pass over its "
        "pairs repeats the pass within each epoch (Nx/ep) until an epoch has that many steps "
        "(train.min_steps_per_epoch); the batch is capped at the number of pairs and the warm-up is floor(wu x steps) "
        "whole steps (docs/training.md).",
    ]


def write_table6(cfg: Config, params: TrainParams | None = None) -> pd.DataFrame:

    params = params or load_train_params(cfg)
    table = collect_runs(cfg, params)
    if table.empty:
        logger.warning("no finished fine-tuning run under %s: Table 6 not written", cfg.paths.models / RUNS_DIRNAME)
        return table
    shown = table.drop(columns=["run_key"])
    write_table(
        shown, "table6_finetune_configs", cfg,
        caption="Table 6: Hyperparameter configurations tried for each move and model, with validation MRR@10",
        notes=table6_notes(params), inputs=[cfg.paths.benchmark, cfg.paths.from_params(params.configs_file)],
    )
    return shown


SPLIT_LABELS = {"validation": "Val", "test": "Test", "silver": "Silver"}


def paired_comparison(tuned: dict[str, list], baseline: dict[str, list], metric: str = PRIMARY, *,
                      seed: int = 13, n_resamples: int = stats.N_RESAMPLES) -> dict[str, Any]:
    """Means, 95% bootstrap intervals, the paired difference's interval and a paired permutation p-value.

    `tuned` and `baseline` are per_query_values of the same split; they are paired by qid (both score
    every query of the split's qrels, so the qids agree; a mismatch is an error, not a silent subset).
    The queries are taken in qid order, with the run's seed and resample count, as the analyses of
    notebook 11 take them (`intervals.paired_cell`): the same comparison gets the same p in both.
    """

    a = pd.Series(tuned[metric], index=tuned["qid"], dtype=float).sort_index()
    b = pd.Series(baseline[metric], index=baseline["qid"], dtype=float)
    if set(a.index) != set(b.index):
        raise ValueError(f"tuned and baseline were scored on different queries ({len(a)} vs {len(b)})")
    b = b.loc[a.index]
    draws = {"n_resamples": n_resamples, "seed": seed}
    tuned_ci, base_ci = stats.bootstrap_ci(a.to_numpy(), **draws), stats.bootstrap_ci(b.to_numpy(), **draws)
    diff_ci = stats.paired_bootstrap_ci(a.to_numpy(), b.to_numpy(), **draws)
    return {
        "queries": len(a),
        "baseline": float(b.mean()), "baseline_low": base_ci[0], "baseline_high": base_ci[1],
        "tuned": float(a.mean()), "tuned_low": tuned_ci[0], "tuned_high": tuned_ci[1],
        "difference": float((a - b).mean()), "difference_low": diff_ci[0], "difference_high": diff_ci[1],
        "p_value": float(stats.paired_permutation_test(a.to_numpy(), b.to_numpy(), n_permutations=n_resamples,
                                                       seed=seed)),
        "indicative": len(a) < stats.INDICATIVE_BELOW,
    }


def collect_tuned_vs_baseline(cfg: Config, params: TrainParams | None = None) -> pd.DataFrame:
    """One row per move and split: baseline and tuned MRR@10 with intervals, their paired difference and p-value.

    Values are fractions (0-1); `write_tuned_vs_baseline` shows them in %. Splits without per-query
    values in results.json (a model published before they were kept) get means only.
    """
    params = params or load_train_params(cfg)
    rows = []
    setups = training_setups(params)
    for setup, move in [(setup, move) for setup in setups for move in setup.selected_moves("all")]:
        final = read_json_if_exists(move_model_dir(cfg, setup, move) / FINAL_RESULTS_FILE)
        if not final:
            continue
        # one setup (the default): the table as before; several: each row names its setup
        named = {} if len(setups) == 1 else {"model": base_name(setup.base_model),
                                               "prefix": "recommended" if setup.prefixes == "recommended"
                                               else "generic"}
        per_query = final.get("per_query") or {}
        for split in SPLIT_LABELS:
            tuned_scores = final.get(split)
            base_scores = (final.get("baseline") or {}).get(split)
            if not tuned_scores or not base_scores:
                continue  # silver: none without the LLM judge (notebook 07)
            row = {**named, "move": move.value, "split": split, "config": final["selected_config"]["id"],
                   "beats_baseline_on_validation": final.get("beats_baseline_on_validation")}
            tuned_q = (per_query.get("tuned") or {}).get(split)
            base_q = (per_query.get("baseline") or {}).get(split)
            if tuned_q and base_q:
                row.update(paired_comparison(tuned_q, base_q, seed=cfg.seed))
            else:
                row.update({"baseline": base_scores.get(PRIMARY), "tuned": tuned_scores.get(PRIMARY)})
            rows.append(row)
    return pd.DataFrame(rows)


def tuned_vs_baseline_display(table: pd.DataFrame) -> pd.DataFrame:
    """The Markdown form: `23.3 [21.4, 25.2]` cells, † on cells computed on fewer than 30 queries."""
    def cell(row, name):
        text = stats.format_ci(row.get(name), row.get(f"{name}_low"), row.get(f"{name}_high"))
        return text + (" †" if text and row.get("indicative") is True else "")

    return pd.DataFrame([{
        **({"Model": _row_label(row)} if "model" in row else {}),
        "Move": row["move"].capitalize(),
        "Split": SPLIT_LABELS[row["split"]],
        "Queries": row.get("queries"),
        "Config": row["config"],
        "Baseline M@10": cell(row, "baseline"),
        "Tuned M@10": cell(row, "tuned"),
        "Δ (tuned - baseline)": cell(row, "difference"),
        "p (paired permutation)": stats.format_p(row.get("p_value")),
        "Ratio": "" if not row.get("baseline") else f"{row['tuned'] / row['baseline']:.2f}",
        "Beats baseline on val": {True: "yes", False: "no"}.get(row.get("beats_baseline_on_validation"), "n/a"),
    } for row in table.to_dict("records")])


def _row_label(row: dict) -> str:
    return row["model"] + (" (recommended prefixes)" if row.get("prefix") == "recommended" else "")


def tuned_vs_baseline_notes(table: pd.DataFrame, params: TrainParams) -> list[str]:
    recommended = "prefix" in table and (table["prefix"] == "recommended").any()
    prefixes = ("the prefixes the setup was trained with (generic, or the model's recommended ones)" if recommended
                else "the generic prefixes")
    tuned_bases = {base_name(s.base_model) for s in training_setups(params)}
    paper_claim = ("these are our measured values for a smaller model under a CPU budget, not a reproduction of that "
                   "claim."
                   if "ModernBERT-embed-large" not in tuned_bases else
                   "the ModernBERT-embed-large rows here are our measurement of that setup on this benchmark.")
    notes = [
        f"MRR@10 (%) of the same model before (Baseline) and after (Tuned) fine-tuning, both with {prefixes}, "
        "ranking the whole pool of the split. Cells: mean [95% percentile bootstrap interval over queries, 10,000 "
        "resamples, seed 13]; Δ: mean paired difference over the same queries with its paired bootstrap interval; "
        "p: two-sided paired sign-flip permutation test (10,000 permutations). Ratio = tuned / baseline.",
        "Val rows are the data the configuration was selected on (optimistic for Tuned); Test rows are the held-out "
        "estimate, computed once for the selected configuration.",
        f"The paper's tuned ModernBERT-embed-large multiplies MRR@10 by 1.6–2.4 on the silver set; {paper_claim}",
    ]
    if not table.empty and "indicative" in table and table["indicative"].fillna(False).astype(bool).any():
        small = table[table["indicative"].fillna(False).astype(bool)]
        notes.append("† indicative only: fewer than 30 queries (" + ", ".join(
            ("" if "model" not in table else f"{_row_label(r._asdict())} ") + f"{r.move}/{r.split} {int(r.queries)}"
            for r in small.itertuples()) + "); intervals on so few queries are wide and unstable.")
    if not table.empty and "p_value" not in table:
        notes.append("No per-query values in results.json (a model published before they were kept): means only; "
                     "rerun notebook 09.")
    groups = ([] if table.empty else table[[c for c in ("model", "prefix") if c in table] + ["move"]]
              .drop_duplicates().to_dict("records"))
    for group in groups:
        sentence = _not_beaten_sentence(table, group)
        if sentence is not None:
            label = f"{_row_label(group)}, " if "model" in group else ""
            notes.append(f"{label}{group['move'].capitalize()}: {sentence}.")
    notes.append(table6_notes(params)[1])
    return notes


def _not_beaten_sentence(table: pd.DataFrame, group: dict) -> str | None:
    """The not-beaten sentence of one move (and setup, where the table names setups), or None."""
    mask = table["split"] == "validation"
    for column, value in group.items():
        mask &= table[column] == value
    rows = table[mask]
    beats = None if rows.empty else rows.iloc[0].get("beats_baseline_on_validation")
    if beats is None or pd.isna(beats) or bool(beats):
        return None
    row = rows.iloc[0]
    return NOT_BEATEN.format(tuned=f"{100 * row['tuned']:.1f}", base=f"{100 * row['baseline']:.1f}")


def write_tuned_vs_baseline(cfg: Config, params: TrainParams | None = None) -> pd.DataFrame:
    """tables/finetune_tuned_vs_baseline.*: Markdown/LaTeX with intervals in the cells; the CSV keeps the numbers
    (fractions, with *_low/*_high, p_value, queries, indicative columns)."""

    params = params or load_train_params(cfg)
    table = collect_tuned_vs_baseline(cfg, params)
    if table.empty:
        logger.warning("no fine-tuned retriever under %s: tuned-vs-baseline table not written", cfg.paths.models)
        return table
    shown = tuned_vs_baseline_display(table)
    write_table(
        table, "finetune_tuned_vs_baseline", cfg, shown=shown,
        caption="Fine-tuned vs baseline (the same model before fine-tuning), MRR@10 (%) per move and split, "
                "with 95% bootstrap intervals and paired tests",
        notes=tuned_vs_baseline_notes(table, params),
        inputs=[cfg.paths.benchmark],
        labels=silver_sources(load_benchmark(cfg.paths.benchmark)) if (table["split"] == "silver").any() else [],
        records=tuned_vs_baseline_records(table, params),
    )
    return shown


def tuned_vs_baseline_records(table: pd.DataFrame, params: TrainParams) -> pd.DataFrame:
    """The paired differences of the table in long form (report.RECORD_COLUMNS), M@10 in % points."""
    from ..models import model_name
    from ..retrieval.runs import system_name

    rows = []
    for row in table.to_dict("records"):
        if pd.isna(row.get("difference")):
            continue
        model, prefix = row.get("model", model_name(params.base_model)), row.get("prefix", "generic")
        base, tuned = system_name(model, prefix), system_name(model, prefix, "Tuned")
        rows.append({"scope": f"configuration {row['config']}", "move": row["move"], "query_set": row["split"],
                     "metric": "M@10", "subject": tuned, "reference": base, "value": 100 * row["difference"],
                     "low": 100 * row["difference_low"], "high": 100 * row["difference_high"], "n": row["queries"],
                     "p": row.get("p_value")})
    return records_frame(rows)

