"""The retrievers the analyses of notebook 11 compare, and their runs (paper Appendix F).

`Retrievers` is the untuned retriever and the tuned one of each move (found by stage 11,
ratio_utils.stages.analyses); `RunSource` builds each of them through the family registry
(systems.families.dense_retriever), searches it once per move, split and pool and keeps the run with its sidecar,
or reads notebook 08/09's run file of the same key (systems.runs.get_or_compute). The notes
every analysis table carries (intervals, reduced runs) are spelled here once.

Serves stage 11 (ratio_utils.stages.analyses) through `lexical_overlap`, `oracle_pools` and `transfer`.
Reads:  the benchmark, cfg.paths.retrieval_runs (notebook 08/09's runs of the same key), the retrievers' models.
Writes: data/analysis_runs/<pool>/<system>/<move>/<split>.{parquet,trec,run.json}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.intervals import CONFIDENCE
from ..models import model_fingerprint, model_name
from ..param_sections import AnalysisParams
from ..retrieval import DenseRetriever
from ..retrieval.runs import RunInfo, run_path, system_name
from ..systems.families import RetrieverSettings, dense_retriever
from ..systems.runs import get_or_compute

FULL_POOL = "full"


@dataclass(frozen=True)
class Retrievers:
    """The untuned retriever and the tuned one of each move that exists."""

    base: str  # model name or path
    tuned: dict[str, Path]  # move -> model folder
    missing: dict[str, str]  # move -> why there is no tuned retriever

    @property
    def label(self) -> str:
        return model_name(self.base)


def retrievers_frame(retrievers: Retrievers) -> pd.DataFrame:
    """Which retrievers the analyses compare (and which tuned ones are missing)."""
    rows = [{"role": "untuned", "move": "all", "retriever": retrievers.base}]
    rows += [{"role": "tuned", "move": m, "retriever": f"models/{Path(p).name}"}
             for m, p in sorted(retrievers.tuned.items())]
    rows += [{"role": "tuned", "move": m, "retriever": f"missing: {why}"}
             for m, why in sorted(retrievers.missing.items())]
    return pd.DataFrame(rows)


class RunSource:
    """Runs of the analysed retrievers, searched once and kept (or read from notebook 08/09's run files with the
    same key: systems.runs.reusable). `stage` names the notebook the kept runs are recorded under."""

    def __init__(self, cfg: Config, bench: Benchmark, params: AnalysisParams, retrievers: Retrievers, stage: str):
        self.cfg, self.bench, self.params, self.retrievers, self.stage = cfg, bench, params, retrievers, stage
        self.checksum = bench.checksum()
        self._models: dict[str, DenseRetriever] = {}

    def _retriever(self, tuned_on: str | None) -> DenseRetriever:
        key = tuned_on or ""
        if key not in self._models:
            source = str(self.retrievers.tuned[tuned_on]) if tuned_on else self.retrievers.base
            settings = RetrieverSettings(batch_size=self.params.batch_size, cache_dir=self.cfg.paths.embedding_cache,
                                         name=self._model_label(tuned_on))
            self._models[key] = dense_retriever(source, self.params.query_prefix, self.params.doc_prefix, settings)
        return self._models[key]

    def _model_label(self, tuned_on: str | None) -> str:
        return self.retrievers.label if tuned_on is None else Path(self.retrievers.tuned[tuned_on]).name

    def _fingerprint(self, tuned_on: str | None) -> str:
        return model_fingerprint(self.retrievers.tuned[tuned_on] if tuned_on else self.retrievers.base)

    def run(self, tuned_on: str | None, move: str, split: str, pool_name: str = FULL_POOL,
            pool: pd.DataFrame | None = None) -> pd.DataFrame:
        """Top-k run of the untuned (tuned_on None) or a tuned retriever on one move's queries
        (runs.get_or_compute)."""
        setup = "Tuned" if tuned_on else "Baseline"
        info = RunInfo(self._model_label(tuned_on), "generic", setup, "dense", move, split,
                       self.checksum, self.stage, k=self.params.k, max_queries=self.params.max_queries,
                       source=str(self.retrievers.tuned[tuned_on]) if tuned_on else self.retrievers.base,
                       model_fingerprint=self._fingerprint(tuned_on), notes=[f"pool: {pool_name}"])
        stand_ins = []
        if pool_name == FULL_POOL and (tuned_on is None or tuned_on == move):
            # notebook 08's untuned run or notebook 09's tuned run of this move rank the same pool
            stand_ins.append(run_path(self.cfg.paths.retrieval_runs,
                                      system_name(self.retrievers.label, "generic", setup), move, split))

        def compute():
            queries = self.queries(move, split)
            searched = self.bench.pool(split) if pool is None else pool
            retriever = self._retriever(tuned_on)
            return retriever.search(queries, searched, k=min(self.params.k, len(searched))), retriever.describe()

        return get_or_compute(self.cfg.paths.analysis_runs / pool_name, info, compute,
                              prefixes=(self.params.query_prefix, self.params.doc_prefix), stand_ins=stand_ins).run

    def qrels(self, move: str, split: str) -> pd.DataFrame:
        return self.bench.eval_set(move, split, max_queries=self.params.max_queries).qrels

    def queries(self, move: str, split: str) -> pd.DataFrame:
        return self.bench.eval_set(move, split, max_queries=self.params.max_queries).queries


def interval_note(extra: str = "") -> str:
    """The note of every analysis table with intervals: what a cell and a difference are."""
    return (f"Cells: mean over queries with a {int(CONFIDENCE * 100)}% percentile bootstrap interval over queries "
            f"(seeded; ratio_utils.evaluation.stats); differences: paired bootstrap interval and two-sided sign-flip "
            f"permutation p "
            f"over the same queries. {stats.DAGGER}: fewer than {stats.INDICATIVE_BELOW} queries, indicative only."
            + extra)


def reduced_note(params: AnalysisParams) -> list[str]:
    """The note of a smoke run that caps the queries (none for a full run)."""
    return ([f"Reduced run: at most {params.max_queries} queries per move and query set (the first by id)."]
            if params.max_queries else [])
