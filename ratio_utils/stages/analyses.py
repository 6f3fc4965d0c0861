"""Stage 11 (notebook 11_analyses): the analyses of Appendix F for any retriever named in the params, and how
scores move with the size of the pool.

* `lexical_overlap`   (F.1, Figure 4): query–candidate word overlap of the untuned vs the tuned retriever;
* `oracle_filtering`  (F.2, Table 10): the same queries against pools of one move's gold sentences only;
* `cross_move_transfer` (F.3): retrievers tuned on one move, on the queries of every move;
* `pool_size` (beyond the paper): MRR@10 and R@10 of the run's systems as the test pool's distractors are subsampled.

The untuned retriever is `analysis.base_model` (a model name or path) and the tuned ones are notebook 09's
models/<base>__<move>/ unless `analysis.tuned_models` names other folders, so a user's own retriever is
analysed by naming it. Queries are the silver set where it exists, else the unfiltered test set (said in
every caption). The computation is in `ratio_utils.retrieval_analysis`; this module reads the params, finds the
retrievers and calls it.

Reads:  cfg.paths.benchmark, cfg.paths.retrieval_runs, models/<base>__<move>/ (notebook 09)
Writes: data/analysis_runs/<pool>/<system>/<move>/<split>.{parquet,trec,run.json}
        tables/analysis_lexical_overlap, analysis_overlap_comparisons, analysis_overlap_count,
        table10_oracle_filtering, analysis_cross_move_transfer, analysis_pool_size; figures/figure4_lexical_overlap,
        figure_cross_move_transfer, figure_pool_size_<move> (each with provenance)
"""

from __future__ import annotations

import pandas as pd

from ..config import Config
from ..dataset.benchmark import load_benchmark
from ..param_sections import AnalysisParams, TrainParams
from ..publish.display import Stage
from ..reporting.paper_tables import FULL_COLUMNS, metric_key
from ..retrieval.runs import system_name
from ..retrieval_analysis.analysed_runs import Retrievers, retrievers_frame
from ..retrieval_analysis.lexical_overlap import OverlapResult, overlap_analysis
from ..retrieval_analysis.oracle_pools import oracle_filtering
from ..retrieval_analysis.pool_size import PoolSizeResult, pool_size_analysis
from ..retrieval_analysis.transfer import TransferResult, cross_move_transfer
from ..schema import MOVES, NOTEBOOKS
from ..systems.families import load_retrieval_params, plan_systems
from ..systems.spec import bm25_model_name
from ..train import FINAL_RESULTS_FILE, move_model_dir


def load_analysis_params(cfg: Config) -> AnalysisParams:
    return cfg.section("analysis", AnalysisParams)


class AnalysesStage(Stage):
    """What notebook 11 shows: the retrievers compared, then each analysis's tables and figures (each analysis
    computed and written once, on first use)."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = load_analysis_params(cfg)
        self.bench = load_benchmark(cfg.paths.benchmark)
        self.retrievers = find_retrievers(cfg, self.params)
        self._overlap: OverlapResult | None = None
        self._transfer: TransferResult | None = None
        self._pool_size: PoolSizeResult | None = None

    def retrievers_table(self) -> pd.DataFrame:
        return retrievers_frame(self.retrievers)

    @property
    def overlap(self) -> OverlapResult:
        if self._overlap is None:
            self._overlap = overlap_analysis(self.cfg, self.bench, self.params, self.retrievers, NOTEBOOKS["11"])
        return self._overlap

    def overlap_count(self) -> pd.DataFrame:
        return self.overlap.count

    def overlap_comparisons(self) -> pd.DataFrame:
        return self.overlap.comparisons

    def overlap_figure(self):
        return self.overlap.figure

    def oracle_filtering(self) -> pd.DataFrame:
        columns = {c: metric_key(c) for c in FULL_COLUMNS}
        return oracle_filtering(self.cfg, self.bench, self.params, self.retrievers, NOTEBOOKS["11"], columns)

    @property
    def transfer(self) -> TransferResult:
        if self._transfer is None:
            self._transfer = cross_move_transfer(self.cfg, self.bench, self.params, self.retrievers, NOTEBOOKS["11"])
        return self._transfer

    def transfer_table(self) -> pd.DataFrame:
        return self.transfer.table

    def transfer_figure(self):
        return self.transfer.figure

    def pool_size(self) -> PoolSizeResult:
        """MRR@10 and R@10 against subsampled test pools: the table with its notes and reading, one figure per move
        (computed and written on first use)."""
        if self._pool_size is None:
            systems = pool_size_systems(self.cfg)
            self._pool_size = pool_size_analysis(self.cfg, self.bench, systems, self.params.n_resamples)
        return self._pool_size


def find_retrievers(cfg: Config, params: AnalysisParams) -> Retrievers:
    """The untuned retriever and, per move, the tuned one named in the params or written by notebook 09."""
    tuned, missing = {}, {}
    for move in MOVES:
        named = params.tuned_models.get(move.value)
        if named:  # a params path, by the one rule of every path in a params file
            folder = cfg.paths.from_params(named)
            found, why = folder.is_dir(), f"analysis.tuned_models.{move.value} names {named}, which does not exist"
        else:
            folder = move_model_dir(cfg, TrainParams(base_model=params.base_model), move)
            found = (folder / FINAL_RESULTS_FILE).exists()
            why = f"no tuned retriever at models/{folder.name}/ (notebook 09 writes it)"
        if found:
            tuned[move.value] = folder
        else:
            missing[move.value] = why
    return Retrievers(params.base_model, tuned, missing)


def pool_size_systems(cfg: Config) -> list[str]:
    """BM25-unigram and every dense row of notebook 08's params, and each dense model's tuned row (notebook 09)."""
    planned = plan_systems(load_retrieval_params(cfg), cfg)
    names = [system_name(s.model, s.prefix, s.setup) for s in planned if s.model == bm25_model_name(1)]
    for s in planned:
        if s.family == "dense":
            names.append(system_name(s.model, s.prefix, s.setup))
    dense_models = dict.fromkeys(s.model for s in planned if s.family == "dense")
    names += [system_name(m, "generic", "Tuned") for m in dense_models]
    return names
