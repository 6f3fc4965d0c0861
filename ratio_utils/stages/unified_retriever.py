"""Notebook 13_unified_retriever: one retriever for every move vs the per-move retrievers (beyond §5.1).

Orchestration, tables and figures; the library is `ratio_utils.unified`.

Reads:  the benchmark, models/<base>__<move>/results.json (notebook 09, when present), the base model.
Writes: models/<base>__unified/ (ratio_utils.unified), tables/unified_vs_per_move.*,
        tables/unified_move_sensitivity.*, tables/unified_own_vs_other.*, figures/unified_move_sensitivity.*
"""

from __future__ import annotations


import pandas as pd

from .. import unified
from ..benchmark import load_benchmark
from ..config import Config, load_config
from ..io import read_json_if_exists
from ..metrics import evaluate_run
from ..report import format_floats, set_figure_style, write_table
from ..retrieval import GENERIC_DOC_PREFIX, GENERIC_QUERY_PREFIX, DenseRetriever
from ..run_records import record_reused
from ..schema import Move, Split
from ..stats import INDICATIVE_BELOW
from ..train import EVAL_KS, FINAL_RESULTS_FILE, FINAL_SPLITS, PRIMARY, EvalSet, TrainParams, base_name, move_model_dir
from .common import show_figure


def setup(params_file: str, overrides: dict | None = None) -> tuple[Config, unified.UnifiedParams]:
    cfg = load_config(params_file, overrides)
    return cfg, unified.load_unified_params(cfg)


def balance(cfg: Config, params: unified.UnifiedParams) -> pd.DataFrame:
    """Training pairs per move before and after balancing."""
    return unified.plan(cfg, params)


def train(cfg: Config, params: unified.UnifiedParams) -> unified.UnifiedResult:
    """Train (or reuse) the unified model; what was reused is recorded for the summary's time table."""
    result = unified.train_unified(cfg, params)
    for line in result.reused():
        record_reused(line)
    return result


def formatted(table: pd.DataFrame) -> pd.DataFrame:
    """A table of this notebook as it is shown: percentages with one decimal, missing cells blank."""
    return format_floats(table, "{:.1f}")


def _per_move_results(cfg: Config, params: unified.UnifiedParams, move: Move) -> tuple[dict | None, str]:
    """The per-move model's results.json for the same base model and benchmark, or why there is none."""
    folder = move_model_dir(cfg, TrainParams(base_model=params.base_model), move)
    results = read_json_if_exists(folder / FINAL_RESULTS_FILE)
    return (results, "") if results is not None else (None, f"{folder.name} missing")


def _baseline(cfg: Config, params: unified.UnifiedParams, bench, move: Move, split: Split) -> dict[str, float]:
    # The base model as notebooks 08/09 score it (generic prefixes, shared embedding cache).
    retriever = DenseRetriever(params.base_model, GENERIC_QUERY_PREFIX, GENERIC_DOC_PREFIX,
                               batch_size=params.eval_batch_size, cache_dir=cfg.paths.embedding_cache)
    evalset = EvalSet.load(bench, move, split)
    return evaluate_run(retriever.search(evalset.queries, evalset.pool, max(EVAL_KS)), evalset.qrels, EVAL_KS)


def comparison(cfg: Config, params: unified.UnifiedParams, result: unified.UnifiedResult) -> pd.DataFrame:
    """MRR@10 per move and split: baseline, the per-move fine-tuned model, the unified model; written as a table."""
    bench = load_benchmark(cfg.paths.benchmark)
    checksum = bench.checksum()
    rows, notes = [], []
    missing = []
    for move in params.selected_moves():
        per_move, why = _per_move_results(cfg, params, move)
        if per_move is not None and per_move.get("benchmark_checksum") != checksum:
            per_move, why = None, f"{cfg.paths.tuned_model_dir(params.base_model, move).name} was trained on another benchmark"
        if why:
            missing.append(why)
        for split in FINAL_SPLITS:
            scores = (result.final.get(split.value) or {}).get(move.value)
            if not scores:
                continue
            n = len(EvalSet.load(bench, move, split).queries)
            tuned = (per_move or {}).get(split.value) or {}
            base = _baseline(cfg, params, bench, move, split)
            row = {
                "Move": move.value.capitalize(), "Split": split.value, "Queries": n,
                "Baseline M@10": 100 * base[PRIMARY],
                "Per-move M@10": 100 * tuned[PRIMARY] if PRIMARY in tuned else None,
                "Unified M@10": 100 * scores[PRIMARY],
                "Unified − per-move": 100 * (scores[PRIMARY] - tuned[PRIMARY]) if PRIMARY in tuned else None,
                "Per-move R@10": 100 * tuned["R@10"] if "R@10" in tuned else None,
                "Unified R@10": 100 * scores["R@10"],
            }
            rows.append(row)
    table = pd.DataFrame(rows)
    notes.append("M@10 = MRR@10 (%), R@10 = Recall@10 (%); every query ranked against the whole pool of its split "
                 "(silver: the test pool), its own sentence excluded. Baseline: the base model before fine-tuning with the "
                 "generic prefixes; Per-move: notebook 09's retriever of that move (test split scored once there); Unified: "
                 "one model for all moves with the move's instruction on the query (notebook 13), scored once here.")
    sel = result.selected.config
    pairs = ", ".join(f"{r['move']} {r['used']} ({r['unique']} unique)" for r in result.balance.to_dict(orient="records"))
    notes.append(f"Unified: {base_name(params.base_model)}, configuration {sel['id']} of {params.configs_file} "
                 f"(epochs {sel['epochs']}, batch {sel['batch_size']}, lr {sel['learning_rate']}), selected by mean "
                 f"validation MRR@10 over the moves; training pairs per move: {pairs}.")
    if missing:
        notes.append("Per-move cells empty where notebook 09 has no model for this base model and benchmark: "
                     + "; ".join(missing) + ".")
    if not table.empty and (table["Queries"] < INDICATIVE_BELOW).any():
        notes.append(f"Rows with fewer than {INDICATIVE_BELOW} queries are indicative only.")
    if not table.empty:
        write_table(table, "unified_vs_per_move", cfg, notes=notes, inputs=[cfg.paths.benchmark],
                    caption="One unified retriever vs one retriever per move, MRR@10 (%) on the same queries")
    return table


def sensitivity_table(cfg: Config, params: unified.UnifiedParams, ranks: pd.DataFrame) -> pd.DataFrame:
    moves = params.selected_moves()
    table = unified.sensitivity_summary(ranks, moves)
    notes = [
        f"Each {params.sensitivity_split} query is issued three times to the unified retriever, once with each move's "
        "instruction. 'Top 10 changes': the set of the 10 best candidates is not the same under all three instructions "
        "(per query). Overlap: candidates shared by the own move's top 10 and another move's, averaged over the other moves. "
        "Gold ranks are exact ranks in the whole pool (the query's own sentence excluded).",
        "The paper's concern (§5.1): a retriever that ignores the move would return the same list for every move; "
        "a gold ranked higher under its own move than under the others shows the instruction steering the ranking.",
    ]
    write_table(table, "unified_move_sensitivity", cfg, notes=notes, inputs=[cfg.paths.benchmark],
                caption="Move sensitivity of the unified retriever", float_format="{:.1f}")
    pairwise = unified.pairwise_own_vs_other(ranks, moves)
    write_table(pairwise, "unified_own_vs_other", cfg, notes=notes[:1], inputs=[cfg.paths.benchmark],
                caption="Gold rank under its own move vs under each other move (% of pairs)")
    return table


def sensitivity_figure(cfg: Config, params: unified.UnifiedParams, ranks: pd.DataFrame):
    """(a) own vs each other move: % of golds ranked higher / equal / lower; (b) top-10 overlap with other moves.

    Saved under figures/ and shown once, from its file (common.show_figure closes the live figure)."""
    import matplotlib.pyplot as plt
    import numpy as np

    set_figure_style()
    moves = params.selected_moves()
    pairwise = unified.pairwise_own_vs_other(ranks, moves)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = [f"{r['own move']}\nvs {r['other move']}" for r in pairwise.to_dict(orient="records")]
    bottom = np.zeros(len(pairwise))
    for column, color in (("higher under own", "#2a9d8f"), ("equal", "#bbbbbb"), ("lower under own", "#e76f51")):
        left.bar(labels, pairwise[column], bottom=bottom, label=column, color=color)
        bottom += pairwise[column].to_numpy()
    left.set_ylabel("% of query–gold pairs")
    left.set_title("(a) gold rank under its own move")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    left.tick_params(axis="x", labelsize=7)
    names = [m.value for m in moves]
    data = [ranks.loc[ranks["move"] == m, [f"overlap_{o}" for o in names if o != m]].to_numpy().ravel() for m in names]
    right.boxplot(data, tick_labels=names, showmeans=True)
    right.set_ylim(-0.5, 10.5)
    right.set_ylabel(f"shared candidates in the top {unified.TOP}")
    right.set_title("(b) top-10 overlap, own move vs other moves")
    fig.tight_layout()
    return show_figure(fig, "unified_move_sensitivity", cfg, inputs=[cfg.paths.benchmark],
                       notes=[f"{params.sensitivity_split} queries, unified retriever {result_name(params)}"])


def result_name(params: unified.UnifiedParams) -> str:
    return f"{base_name(params.base_model)}__{unified.UNIFIED_SUFFIX}"


def narrative(table: pd.DataFrame, sensitivity_summary: pd.DataFrame) -> str:
    """A few sentences on what the two tables show (numbers taken from them)."""
    if table.empty:
        return "No unified result to compare."
    lines = []
    for row in table.to_dict(orient="records"):
        per_move = row["Per-move M@10"]
        vs = "no per-move model to compare with" if per_move is None or pd.isna(per_move) else (
            f"{row['Unified − per-move']:+.1f} points vs the per-move model ({per_move:.1f})")
        lines.append(f"- {row['Move']} ({row['Split']}, {row['Queries']} queries): unified {row['Unified M@10']:.1f}, "
                     f"baseline {row['Baseline M@10']:.1f}; {vs}.")
    if not sensitivity_summary.empty:
        overall = sensitivity_summary[sensitivity_summary["Move"] == "All"].iloc[0]
        lines.append(f"- Under the three instructions the top 10 differs for {overall['Top 10 changes with the move (%)']:.0f}% "
                     f"of the queries (mean overlap {overall['Mean top-10 overlap with other moves (of 10)']:.1f} of 10); the gold ranks "
                     f"higher under its own move than under both others for {overall['Gold higher under own move than under both others (%)']:.0f}% "
                     f"of the pairs and lower than under another for {overall['Lower under own move than under another (%)']:.0f}%.")
    return "\n".join(lines)
