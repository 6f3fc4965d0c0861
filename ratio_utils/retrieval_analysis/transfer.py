"""Cross-move transfer (paper Appendix F.3): how a retriever tuned on one move scores on another move's
queries, relative to the untuned retriever.

`transfer_matrix` is the bookkeeping; `cross_move_transfer` is the whole of F.3 for stage 11
(ratio_utils.stages.analyses): MRR@10 of every tuned retriever on every move's queries against the untuned one,
paired tests (tuned vs untuned; own move vs other move), the table and the heatmap.

Reads:  the benchmark, the analysed retrievers' runs (analysed_runs.RunSource), cfg.paths.bootstrap_cache.
Writes: tables/analysis_cross_move_transfer (with records), figures/figure_cross_move_transfer (each with
        provenance); the runs RunSource keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.intervals import IntervalCache, cell, cell_record, paired_cell
from ..evaluation.run_scoring import score_run
from ..evaluation.stats import DAGGER
from ..param_sections import AnalysisParams
from ..publish.label_sources import silver_sources
from ..publish.published import records_frame, save_figure, set_figure_style, write_table
from ..schema import MOVES, Move, Split
from .analysed_runs import Retrievers, RunSource, interval_note, reduced_note
from .lexical_overlap import query_set_name, query_split


def relative_change(tuned: float, untuned: float) -> float:
    """(tuned - untuned) / untuned; NaN when the untuned score is 0."""
    return (tuned - untuned) / untuned if untuned else float("nan")


def transfer_matrix(scores: Mapping[tuple[str, str], float], untuned: Mapping[str, float]) -> pd.DataFrame:
    """Relative change of MRR@10 against the untuned model: rows = move tuned on, columns = queried move.

    `scores[(tuned_on, queried)]` is the tuned retriever's MRR@10 on the queried move's queries,
    `untuned[queried]` the untuned model's on the same queries. Pairs with no score stay NaN.
    """
    tuned_on = sorted({t for t, _ in scores}, key=lambda m: Move.parse(m).value)
    queried = sorted(untuned, key=lambda m: Move.parse(m).value)
    matrix = pd.DataFrame(np.nan, index=tuned_on, columns=queried, dtype=float)
    for (t, q), value in scores.items():
        if q in untuned:
            matrix.loc[t, q] = relative_change(value, untuned[q])
    matrix.index.name, matrix.columns.name = "tuned on", "queries of"
    return matrix


@dataclass
class TransferResult:
    table: pd.DataFrame
    matrix: pd.DataFrame  # relative change, rows = tuned on, columns = queried move
    notes: list[str]
    figure: object = None  # the heatmap (closed after saving)


def cross_move_transfer(cfg: Config, bench: Benchmark, params: AnalysisParams, retrievers: Retrievers, stage: str, *,
                        write: bool = True) -> TransferResult:
    """MRR@10 of each tuned retriever on every move's queries, against the untuned model on the same queries."""
    source = RunSource(cfg, bench, params, retrievers, stage)
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, params.n_resamples)
    rows, scores, untuned, counts, notes, records = [], {}, {}, {}, [], []
    for queried in (m.value for m in MOVES):
        split = query_split(bench, queried)
        if split != Split.SILVER.value:
            notes.append(f"{queried}: silver absent, so its queries are the unfiltered test queries.")
        qrels = source.qrels(queried, split)
        base = score_run(source.run(None, queried, split), qrels, metrics=["MRR@10"], per_query=True)["MRR@10"]
        untuned[queried] = float(base.mean())
        counts[queried] = len(base)
        base_cell = cell(base, cache)
        per_query = {}
        for tuned_on in sorted(retrievers.tuned):
            tuned = score_run(source.run(tuned_on, queried, split), qrels, metrics=["MRR@10"],
                              per_query=True)["MRR@10"]
            scores[(tuned_on, queried)] = float(tuned.mean())
            diff, p = paired_cell(cache, tuned, base)
            per_query[tuned_on] = tuned
            records.append(cell_record(diff, p, scope="tuned vs untuned", move=queried, query_set=split, metric="M@10",
                                       subject=f"tuned on {tuned_on}", reference="untuned"))
            change = relative_change(float(tuned.mean()), float(base.mean()))
            rows.append({"Queries of": queried.capitalize(), "Query set": query_set_name(split),
                         "Tuned on": tuned_on.capitalize(), "Own move": "yes" if tuned_on == queried else "",
                         "Queries": len(base),
                         "Untuned M@10": base_cell.text(), "Tuned M@10": cell(tuned, cache).text(),
                         "Difference": diff.text(), "p": p,
                         "Relative change": "" if pd.isna(change) else f"{100 * change:+.0f}%"})
        # F.3's claim: on a move's queries, the retriever tuned on that move beats each one tuned on another move
        for other in sorted(set(per_query) - {queried}) if queried in per_query else []:
            diff, p = paired_cell(cache, per_query[queried], per_query[other])
            records.append(cell_record(diff, p, scope="own move vs other move", move=queried, query_set=split,
                                       metric="M@10", subject=f"tuned on {queried}", reference=f"tuned on {other}"))
    for move, why in retrievers.missing.items():
        notes.append(f"{move}: {why}; no retriever tuned on {move} is compared.")
    matrix = transfer_matrix(scores, untuned)
    table, figure = pd.DataFrame(rows), None
    shown = stats.with_p_text(table, params.n_resamples)
    if write and not table.empty:
        write_table(table, "analysis_cross_move_transfer", cfg, inputs=[cfg.paths.benchmark], shown=shown,
                    labels=silver_sources(bench), records=records_frame(records),
                    caption=f"Cross-move transfer (Appendix F.3): MRR@10 (%) of {retrievers.label} tuned on one move, "
                            "on the queries of each move, against the untuned model on the same queries "
                            "(full test pool).",
                    notes=["Relative change = (tuned - untuned) / untuned. Difference: tuned - untuned in points.",
                           interval_note(), *reduced_note(params), *notes])
        queried_sets = {q: (query_set_name(query_split(bench, q)), counts[q]) for q in counts}
        figure = _transfer_figure(cfg, matrix, queried_sets, retrievers.label, notes, silver_sources(bench))
    cache.save()
    return TransferResult(shown, matrix, notes, figure)


def _transfer_figure(cfg: Config, matrix: pd.DataFrame, queried_sets: dict[str, tuple[str, int]], label: str,
                     notes: list[str], labels=()):
    """The relative-change heatmap; each cell names its N (queries of the column's move), † below 30."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    set_figure_style()
    annotations = matrix.copy().astype(object)
    for queried in matrix.columns:
        n = queried_sets[queried][1]
        mark = stats.dagger(n)
        annotations[queried] = ["" if pd.isna(v) else f"{100 * v:+.0f}%{mark}\nN={n}" for v in matrix[queried]]
    fig, ax = plt.subplots(figsize=(1.6 + 1.6 * matrix.shape[1], 1.4 + 0.9 * matrix.shape[0]))
    sns.heatmap(100 * matrix, annot=annotations.to_numpy(), fmt="", cmap="RdBu", center=0,
                cbar_kws={"label": "MRR@10 change vs untuned (%)"}, ax=ax)
    ax.set_title(f"Cross-move transfer, {label}\n{transfer_caption(queried_sets)}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, "figure_cross_move_transfer", cfg, inputs=[cfg.paths.benchmark], labels=labels,
                notes=[f"Cell: relative change of MRR@10, tuned (row) vs untuned, on the column's "
                       f"{transfer_caption(queried_sets)}.", *notes])
    plt.close(fig)
    return fig


def transfer_caption(queried_sets: dict[str, tuple[str, int]]) -> str:
    """'queries: Address silver N=41, Broaden silver N=6†, ...; † fewer than 30 queries (indicative)'."""
    parts = [f"{move.capitalize()} {name} N={n}{DAGGER if stats.is_indicative(n) else ''}"
             for move, (name, n) in queried_sets.items()]
    small = any(stats.is_indicative(n) for _, n in queried_sets.values())
    return "queries: " + ", ".join(parts) + (f"; {DAGGER} fewer than {stats.INDICATIVE_BELOW} queries (indicative)"
                                             if small else "")
