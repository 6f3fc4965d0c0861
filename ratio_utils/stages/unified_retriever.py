"""Notebook 13_unified_retriever: one retriever for every move vs the per-move retrievers (beyond §5.1).

Orchestration only: the training, the comparison with the per-move models and its narrative are
`ratio_utils.train.unified`; the move-sensitivity tables and figure `ratio_utils.retrieval_analysis.move_sensitivity`.

Reads:  the benchmark, models/<base>__<move>/results.json (notebook 09, when present), the base model.
Writes: models/<base>__unified/ (ratio_utils.train.unified), tables/unified_vs_per_move.*,
        tables/unified_move_sensitivity.*, tables/unified_own_vs_other.*, figures/unified_move_sensitivity.*
"""

from __future__ import annotations

import dataclasses

import pandas as pd
from IPython.display import Markdown

from ..config import Config
from ..param_sections import UnifiedParams
from ..publish.display import Stage
from ..publish.published import format_floats
from ..publish.run_records import record_reused
from ..retrieval_analysis import move_sensitivity
from ..train import base_name, unified
from ..train.unified import Comparison


class UnifiedRetrieverStage(Stage):
    """What notebook 13 shows: the balance, the training, the comparison with the per-move models, move sensitivity."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = unified.load_unified_params(cfg)
        self._result: unified.UnifiedResult | None = None
        self._comparison: Comparison | None = None
        self._sensitivity: pd.DataFrame | None = None

    def balance(self) -> pd.DataFrame:
        """Training pairs per move before and after balancing."""
        return unified.unified_plan(self.cfg, self.params)

    @property
    def result(self) -> unified.UnifiedResult:
        """The unified model, trained (or reused) on first use."""
        if self._result is None:
            self._result = train(self.cfg, self.params)
        return self._result

    def train(self) -> pd.DataFrame:
        return unified.unified_summary(self.result)

    @property
    def comparison_table(self) -> Comparison:
        """The unified-vs-per-move comparison, computed and written on first use."""
        if self._comparison is None:
            self._comparison = unified.compare_with_per_move(self.cfg, self.params, self.result)
        return self._comparison

    @property
    def sensitivity_summary(self) -> pd.DataFrame:
        """The move-sensitivity table (written on first use), from the per-pair ranks under each move computed when
        the model was published."""
        if self._sensitivity is None:
            self._sensitivity = move_sensitivity.sensitivity_table(self.cfg, self.params, self.result.sensitivity)
        return self._sensitivity

    def comparison(self) -> Comparison:
        return formatted(self.comparison_table)

    def sensitivity(self) -> pd.DataFrame:
        return formatted(self.sensitivity_summary)

    def sensitivity_figure(self):
        ranks = self.result.sensitivity
        return move_sensitivity.sensitivity_figure(self.cfg, self.params, ranks, result_name(self.params))

    def narrative(self) -> Markdown:
        return Markdown(unified.comparison_narrative(self.comparison_table, self.sensitivity_summary))


def train(cfg: Config, params: UnifiedParams) -> unified.UnifiedResult:
    """Train (or reuse) the unified model; what was reused is recorded for the summary's time table."""
    result = unified.train_unified(cfg, params)
    for line in result.reused():
        record_reused(line)
    return result


def formatted(table: pd.DataFrame | Comparison):
    """A table of this notebook as it is shown: percentages with one decimal, missing cells blank (the comparison
    keeps its notes below it)."""
    if isinstance(table, Comparison):
        return dataclasses.replace(table, shown=format_floats(table.shown, "{:.1f}"))
    return format_floats(table, "{:.1f}")


def result_name(params: UnifiedParams) -> str:
    """The unified model's folder name, as its figure's provenance names it."""
    return f"{base_name(params.base_model)}__{unified.UNIFIED_SUFFIX}"
