"""Notebook 13_unified_retriever: one retriever for every move vs the per-move retrievers (beyond §5.1).

Orchestration, tables and figures; the library is `ratio_utils.train.unified`.

Reads:  the benchmark, models/<base>__<move>/results.json (notebook 09, when present), the base model.
Writes: models/<base>__unified/ (ratio_utils.train.unified), tables/unified_vs_per_move.*,
        tables/unified_move_sensitivity.*, tables/unified_own_vs_other.*, figures/unified_move_sensitivity.*
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd
from IPython.display import Markdown

from ..retrieval_analysis import move_sensitivity
from ..config import Config
from ..dataset.benchmark import load_benchmark
from ..evaluation import stats
from ..evaluation.intervals import IntervalCache, cell, paired_cell
from ..evaluation.metrics import per_query_metrics
from ..evaluation.stats import DAGGER, INDICATIVE_BELOW, format_p
from ..io import read_json_if_exists
from ..param_sections import TrainParams, UnifiedParams
from ..publish.display import Stage, show_figure
from ..publish.label_sources import silver_sources
from ..publish.published import format_floats, set_figure_style, write_table
from ..publish.run_records import record_reused
from ..retrieval import DenseRetriever
from ..schema import GENERIC_DOC_PREFIX, GENERIC_QUERY_PREFIX, Move, Split
from ..train import EVAL_KS, FINAL_RESULTS_FILE, FINAL_SPLITS, PRIMARY, EvalSet, base_name, move_model_dir, unified


class UnifiedRetrieverStage(Stage):
    """What notebook 13 shows: the balance, the training, the comparison with the per-move models, move sensitivity."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = unified.load_unified_params(cfg)
        self._result: unified.UnifiedResult | None = None
        self._comparison: Comparison | None = None
        self._sensitivity: pd.DataFrame | None = None

    def balance(self) -> pd.DataFrame:
        return balance(self.cfg, self.params)

    @property
    def result(self) -> unified.UnifiedResult:
        """The unified model, trained (or reused) on first use."""
        if self._result is None:
            self._result = train(self.cfg, self.params)
        return self._result

    def train(self) -> pd.DataFrame:
        return unified.summary(self.result)

    @property
    def comparison_table(self) -> Comparison:
        """The unified-vs-per-move comparison, computed and written on first use."""
        if self._comparison is None:
            self._comparison = comparison(self.cfg, self.params, self.result)
        return self._comparison

    @property
    def sensitivity_summary(self) -> pd.DataFrame:
        """The move-sensitivity table (written on first use), from the per-pair ranks under each move computed when
        the model was published."""
        if self._sensitivity is None:
            self._sensitivity = sensitivity_table(self.cfg, self.params, self.result.sensitivity)
        return self._sensitivity

    def comparison(self) -> Comparison:
        return formatted(self.comparison_table)

    def sensitivity(self) -> pd.DataFrame:
        return formatted(self.sensitivity_summary)

    def sensitivity_figure(self):
        return sensitivity_figure(self.cfg, self.params, self.result.sensitivity)

    def narrative(self) -> Markdown:
        return Markdown(narrative(self.comparison_table, self.sensitivity_summary))


def balance(cfg: Config, params: UnifiedParams) -> pd.DataFrame:
    """Training pairs per move before and after balancing."""
    return unified.plan(cfg, params)


def train(cfg: Config, params: UnifiedParams) -> unified.UnifiedResult:
    """Train (or reuse) the unified model; what was reused is recorded for the summary's time table."""
    result = unified.train_unified(cfg, params)
    for line in result.reused():
        record_reused(line)
    return result


def formatted(table: "pd.DataFrame | Comparison"):
    """A table of this notebook as it is shown: percentages with one decimal, missing cells blank (the comparison
    keeps its notes below it)."""
    if isinstance(table, Comparison):
        return dataclasses.replace(table, shown=format_floats(table.shown, "{:.1f}"))
    return format_floats(table, "{:.1f}")


def _per_move_results(cfg: Config, params: UnifiedParams, move: Move) -> tuple[dict | None, str]:
    """The per-move model's results.json for the same base model and benchmark, or why there is none."""
    folder = move_model_dir(cfg, TrainParams(base_model=params.base_model), move)
    results = read_json_if_exists(folder / FINAL_RESULTS_FILE)
    return (results, "") if results is not None else (None, f"{folder.name} missing")


def _baseline(cfg: Config, params: UnifiedParams, evalset: EvalSet) -> pd.DataFrame:
    # The base model as notebooks 08/09 score it (generic prefixes, shared embedding cache), per query.
    retriever = DenseRetriever(params.base_model, GENERIC_QUERY_PREFIX, GENERIC_DOC_PREFIX,
                               batch_size=params.eval_batch_size, cache_dir=cfg.paths.embedding_cache)
    return per_query_metrics(retriever.search(evalset.queries, evalset.pool, max(EVAL_KS)), evalset.qrels, COMPARED)


def _unified_per_query(cfg: Config, params: UnifiedParams, result: unified.UnifiedResult, move: Move,
                       evalset: EvalSet) -> pd.DataFrame:
    run = unified.move_run(str(result.model_dir), move, evalset, params.instruction_template, params.doc_prefix,
                           batch_size=params.eval_batch_size, cache_dir=cfg.paths.embedding_cache)
    return per_query_metrics(run, evalset.qrels, COMPARED)


def _per_move_per_query(per_move: dict | None, split: Split) -> pd.DataFrame | None:
    """Notebook 09's per-query values of the tuned model on a split (results.json), or None."""
    values = (((per_move or {}).get("per_query") or {}).get("tuned") or {}).get(split.value)
    if not values or any(metric not in values for metric in COMPARED):
        return None
    return pd.DataFrame({metric: values[metric] for metric in COMPARED}, index=pd.Index(values["qid"], name="qid")).sort_index()


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
            numbers[key], numbers[f"{key} low"], numbers[f"{key} high"], numbers[f"p vs {against.lower()}"] = None, None, None, None
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
                     + "; ".join(unmatched) + "), so 'Unified − per-move' mixes the unified design with the budget; read it "
                     "as the unified model under its own budget, not as the cost of sharing one model.")
    else:
        notes.append("Pair budgets match: each move's per-move model and the unified model saw the same number of training pairs.")
    if configs and configs != [unified_config]:
        notes.append(f"Configurations also differ: per-move models selected among notebook 09's configurations "
                     f"({', '.join(f'{m} {c}' for m, c in sorted(per_move_configs.items()))}), the unified model "
                     f"configuration {unified_config}.")
    return notes


def comparison(cfg: Config, params: UnifiedParams, result: unified.UnifiedResult) -> Comparison:
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
            per_move, why = None, f"{cfg.paths.tuned_model_dir(params.base_model, move).name} was trained on another benchmark"
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
            evalset = EvalSet.load(bench, move, split)
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
        "base model before fine-tuning with the generic prefixes; Per-move: notebook 09's retriever of that move (test "
        "split scored once there; its per-query values from its results.json); Unified: one model for all moves with the "
        "move's instruction on the query (notebook 13).",
        "Differences: mean paired difference over the same queries with its paired bootstrap interval; p: two-sided "
        f"sign-flip permutation test ({stats.N_RESAMPLES:,} permutations, ratio_utils.evaluation.stats). {DAGGER}: fewer than "
        f"{INDICATIVE_BELOW} queries, indicative only.",
        f"Unified: {base_name(params.base_model)}, configuration {sel['id']} of {params.configs_file} (epochs "
        f"{sel['epochs']}, batch {sel['batch_size']}, lr {sel['learning_rate']}), selected by mean validation MRR@10 over "
        "the moves. Training pairs: what each model was trained on for the move (unified: after balancing, repeats "
        "included; unique: distinct pairs).",
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


def sensitivity_table(cfg: Config, params: UnifiedParams, ranks: pd.DataFrame) -> pd.DataFrame:
    moves = params.selected_moves()
    table = move_sensitivity.sensitivity_summary(ranks, moves)
    notes = [
        f"Each {params.sensitivity_split} query is issued three times to the unified retriever, once with each move's "
        "instruction. 'Top 10 changes': the set of the 10 best candidates is not the same under all three instructions "
        "(per query). Overlap: candidates shared by the own move's top 10 and another move's, averaged over the other moves. "
        "Gold ranks are exact ranks in the whole pool (the query's own sentence excluded).",
        "The paper's concern (§5.1): a retriever that ignores the move would return the same list for every move; "
        "a gold ranked higher under its own move than under the others shows the instruction steering the ranking.",
    ]
    pairwise = move_sensitivity.pairwise_own_vs_other(ranks, moves, seed=cfg.seed)
    reading = sensitivity_reading(table, pairwise)
    write_table(table, "unified_move_sensitivity", cfg, notes=[*notes, *reading], inputs=[cfg.paths.benchmark],
                caption="Move sensitivity of the unified retriever", float_format="{:.1f}")
    pairwise_notes = [notes[0], "higher - lower: share of pairs whose gold ranks higher under the own move minus the share "
                      "ranked lower (points), with its paired bootstrap interval over pairs; p: two-sided sign-flip "
                      f"permutation test of higher - lower = 0 ({stats.N_RESAMPLES:,} permutations). {DAGGER}: fewer than "
                      f"{INDICATIVE_BELOW} pairs, indicative only.", *reading]
    write_table(pairwise, "unified_own_vs_other", cfg, notes=pairwise_notes, inputs=[cfg.paths.benchmark],
                shown=own_vs_other_shown(pairwise), caption="Gold rank under its own move vs under each other move (% of pairs)")
    return table


def own_vs_other_shown(pairwise: pd.DataFrame) -> pd.DataFrame:
    """The pairwise table as shown: the difference as a cell with its interval, p through stats.format_p."""
    if pairwise.empty or "higher - lower" not in pairwise:
        return pairwise
    shown = pairwise.drop(columns=["higher - lower low", "higher - lower high"])
    shown["higher - lower"] = [stats.format_ci(v, lo, hi, scale=1) + stats.dagger(n)
                               for v, lo, hi, n in zip(pairwise["higher - lower"], pairwise["higher - lower low"],
                                                       pairwise["higher - lower high"], pairwise["pairs"])]
    shown["p"] = pairwise["p"].map(format_p)
    return shown


def sensitivity_reading(summary: pd.DataFrame, pairwise: pd.DataFrame) -> list[str]:
    """What the move-sensitivity numbers show, in sentences built from them (never typed)."""
    if summary.empty:
        return []
    overall = summary[summary["Move"] == "All"].iloc[0]
    higher, tied = overall["Gold higher under own move than under both others (%)"], overall["Tied with the best other (%)"]
    lower = overall["Lower under own move than under another (%)"]
    lines = [f"Over all {int(overall['Pairs']):,} pairs, the gold ranks lower under its own move than under another move "
             f"for {lower:.1f}% of the pairs, higher than under both others for {higher:.1f}% and ties the best other for "
             f"{tied:.1f}%. This compares the own move with the better of two others, so it is not symmetric: a retriever "
             "that ignored the instruction would rank the gold strictly higher under its own move for about a third of the "
             "untied pairs; the pairwise comparisons (tables/unified_own_vs_other) are the symmetric test."]
    if "higher - lower" in pairwise:
        groups: dict[str, list[str]] = {"up": [], "down": [], "unclear": []}
        for row in pairwise.to_dict(orient="records"):
            text = (f"{row['own move']} vs {row['other move']} ({row['higher - lower']:+.1f} points "
                    f"[{row['higher - lower low']:.1f}, {row['higher - lower high']:.1f}], p {format_p(row['p'])}"
                    f"{', ' + DAGGER if stats.is_indicative(row['pairs']) else ''})")
            side = "up" if row["higher - lower low"] > 0 else "down" if row["higher - lower high"] < 0 else "unclear"
            groups[side].append(text)
        parts = [f"{label}: {'; '.join(items)}" for label, items in (
            ("own move ranks the gold higher (interval above 0)", groups["up"]),
            ("own move ranks the gold lower (interval below 0)", groups["down"]),
            ("no clear difference (interval includes 0)", groups["unclear"])) if items]
        lines.append("Pairwise, higher - lower under the own move: " + ". ".join(parts) + ".")
    return lines


def sensitivity_figure(cfg: Config, params: UnifiedParams, ranks: pd.DataFrame):
    """The move-sensitivity figure (`draw_sensitivity_figure`), saved under figures/ and shown once, from its file
    (display.show_figure closes the live figure)."""
    fig, title = draw_sensitivity_figure(params, ranks)
    return show_figure(fig, "unified_move_sensitivity", cfg, inputs=[cfg.paths.benchmark],
                       notes=[f"{title}; unified retriever {result_name(params)}"])


def draw_sensitivity_figure(params: UnifiedParams, ranks: pd.DataFrame):
    """(a) own vs each other move: % of golds ranked higher / equal / lower; (b) top-10 overlap with other moves.
    Each bar and box names its N (pairs), † below 30; the title names the query set. Returns the figure and its title."""
    import matplotlib.pyplot as plt
    import numpy as np

    set_figure_style()
    moves = params.selected_moves()
    pairwise = move_sensitivity.pairwise_own_vs_other(ranks, moves, paired_test=False)  # shares; the test is in the table
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [f"{r['own move']}\nvs {r['other move']}\nN={r['pairs']}{stats.dagger(r['pairs'])}"
              for r in pairwise.to_dict(orient="records")]
    bottom = np.zeros(len(pairwise))
    for column, color in (("higher under own", "#2a9d8f"), ("equal", "#bbbbbb"), ("lower under own", "#e76f51")):
        left.bar(labels, pairwise[column], bottom=bottom, label=column, color=color)
        bottom += pairwise[column].to_numpy()
    left.set_ylabel("% of query–gold pairs")
    left.set_title("(a) gold rank under its own move")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)
    left.tick_params(axis="x", labelsize=7)
    names = [m.value for m in moves]
    data = [ranks.loc[ranks["move"] == m, [f"overlap_{o}" for o in names if o != m]].to_numpy().ravel() for m in names]
    counts = [int((ranks["move"] == m).sum()) for m in names]
    right.boxplot(data, tick_labels=[f"{m}\nN={n}{stats.dagger(n)}" for m, n in zip(names, counts)], showmeans=True)
    right.set_ylim(-0.5, 10.5)
    right.set_ylabel(f"shared candidates in the top {move_sensitivity.TOP}")
    right.set_title("(b) top-10 overlap, own move vs other moves")
    title = sensitivity_figure_title(params, counts)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig, title


def sensitivity_figure_title(params: UnifiedParams, counts: list[int]) -> str:
    small = any(stats.is_indicative(n) for n in counts)
    return (f"Move sensitivity of the unified retriever on the unfiltered {params.sensitivity_split} queries, "
            f"N = {sum(counts):,} query–gold pairs (per move below)"
            + (f"; {DAGGER} fewer than {INDICATIVE_BELOW} pairs, indicative" if small else ""))


def result_name(params: UnifiedParams) -> str:
    return f"{base_name(params.base_model)}__{unified.UNIFIED_SUFFIX}"


def narrative(table: Comparison | pd.DataFrame, sensitivity_summary: pd.DataFrame,
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
        lines.append(f"- {row['Move']} ({row['Split']}, {row['Queries']} queries{small}): unified {row['Unified M@10']:.1f}, "
                     f"baseline {row['Baseline M@10']:.1f}; {vs}.")
    if isinstance(table, Comparison):
        lines += [f"- {note}" for note in table.notes if note.startswith(("Not a matched", "Pair budgets match"))]
    if not sensitivity_summary.empty:
        overall = sensitivity_summary[sensitivity_summary["Move"] == "All"].iloc[0]
        lines.append(f"- Under the three instructions the top 10 differs for {overall['Top 10 changes with the move (%)']:.1f}% "
                     f"of the queries (mean overlap {overall['Mean top-10 overlap with other moves (of 10)']:.1f} of 10).")
        lines += [f"- {line}" for line in sensitivity_reading(sensitivity_summary, pairwise if pairwise is not None else pd.DataFrame())]
    return "\n".join(lines)
