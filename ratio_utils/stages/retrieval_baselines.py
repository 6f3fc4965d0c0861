"""Stage 08 (notebook 08_retrieval_baselines): every offline system on every move and split, as run files.

The rows and their retrievers come from the family registry (`ratio_utils.systems.families`: each family plans its
rows and builds its retriever) and the runs are recorded by `ratio_utils.systems.runs` (as notebook 09's tuned runs
are, `ratio_utils.train.tuned_runs`), so that every system reaches Tables 1, 7 and 8 the same way: through a run
file with its sidecar, assembled by `ratio_utils.reporting.paper_tables.assemble_tables`.

Reads:  the benchmark (cfg.paths.benchmark).
Writes: data/retrieval_runs/<system>/<move>/<split>.{parquet,trec,run.json}   (run files + sidecars)
        cache/embeddings/...                      pool and query embeddings (a rerun encodes nothing)
"""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..param_sections import RetrievalParams
from ..publish.display import Stage
from ..reporting import paper_tables
from ..retrieval.runs import retire_foreign_runs
from ..schema import Split
from ..systems.families import (
    RetrieverSettings,
    build_retriever,
    get_family,
    load_retrieval_params,
    plan_systems,
    resolve_systems,
)
from ..systems.runs import record_run, runnable
from ..systems.spec import BASELINE_STAGE


class RetrievalBaselinesStage(Stage):
    """What notebook 08 shows: the systems, their runs, and Tables 1, 7, 8 with the rows up to this notebook."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = load_retrieval_params(cfg)
        self.bench = load_benchmark(cfg.paths.benchmark)
        self._tables: paper_tables.PaperTables | None = None

    def systems(self) -> pd.DataFrame:
        return systems_frame(self.params)

    def run(self) -> pd.DataFrame:
        return run_baselines(self.cfg, self.bench, self.params)

    @property
    def tables(self) -> paper_tables.PaperTables:
        """Tables 1, 7, 8 assembled (and written) from the run files of this notebook's systems."""
        if self._tables is None:
            self._tables = paper_tables.assemble_tables(self.cfg, self.bench, through=BASELINE_STAGE)
        return self._tables

    def primary_metric_summary(self) -> pd.DataFrame:
        return paper_tables.primary_metric_summary(self.tables)

    def tables_pointer(self):
        return self.tables.pointer(self.cfg, "with the baseline rows of this notebook")


def run_baselines(cfg: Config, bench: Benchmark, params: RetrievalParams | None = None) -> pd.DataFrame:
    """Run every available system on every move and split; write run files. Returns what was written.

    Run files of another benchmark (any stage's) are set aside first (retrieval.runs.retire_foreign_runs):
    this notebook starts the retrieval stages, so a new benchmark makes them stale.

    Each model is resolved once (systems.families.resolve_systems) and its reference handed to the retrievers of
    all its rows; a model that cannot be had here leaves its rows out, with one line saying why."""
    params = params or load_retrieval_params(cfg)
    splits = [Split.parse(s) for s in params.splits]
    systems, refs, skipped = resolve_systems(plan_systems(params, cfg))
    checksum = bench.checksum()
    retired = [{"system": path, "status": "set aside under _stale/: computed on another benchmark"}
               for path in retire_foreign_runs(cfg.paths.retrieval_runs, checksum)]
    jobs = [(system, move, split) for system in systems for move, split in runnable(bench, splits)]
    done = []
    key = retriever = None
    bar = tqdm(jobs, desc="retrieval baselines", unit="run")
    for system, move, split in bar:
        info = system.info(move, split, checksum, params)
        bar.set_postfix_str(info.system, refresh=False)
        # One retriever per system (per move only when the query prefix depends on it), so that BM25 indexes
        # and dense pool indexes are built once for the three moves that share a pool. A key's jobs are
        # consecutive, so only the current retriever is kept: memory is one pool index, not one per system.
        wanted = (system, move if get_family(system.family).per_move(system) else None)
        if wanted != key:
            retriever = None  # the previous index is freed before the next is built
            settings = RetrieverSettings.from_params(params, cfg, name=system.model)
            key, retriever = wanted, build_retriever(system, move, settings, ref=refs.get(system.source))
            retriever.show_progress = False  # this loop's bar is the only one (no nested bars)
        run = record_run(retriever, bench, info, cfg.paths.retrieval_runs)
        done.append({"system": info.system, "move": move.value, "split": split.value, "status": "written",
                     "queries": int(run["qid"].nunique())})
    return pd.DataFrame(done + skipped + retired)


def systems_frame(params: RetrievalParams) -> pd.DataFrame:
    """The systems notebook 08 will run, as a table."""
    return pd.DataFrame([{"system": s.name, "family": s.family, "prefix": s.prefix, "source": s.source}
                         for s in plan_systems(params)])
