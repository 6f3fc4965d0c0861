"""Notebook 09's fine-tuned retrievers as systems of the result tables: `tuned_model` finds a move's model
(models/<base>__<move>/, results.json) as the Tuned row, and `record_tuned_runs` writes its run files through
`systems.runs` (searched like notebook 08's baselines; kept where a run file with the same key is there).

Reads:  the benchmark; notebook 09's models/<base>__<move>/ and their results.json.
Writes: data/retrieval_runs/<system>/<move>/<split>.{parquet,trec,run.json} (systems.runs.get_or_record_run).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..io import read_json_if_exists
from ..models import ModelRef, model_name, resolve_model
from ..param_sections import RetrievalParams
from ..retrieval.runs import RunInfo
from ..schema import GENERIC_PREFIXES, Move, Split
from ..systems.families import RetrieverSettings, dense_retriever, load_retrieval_params
from ..systems.runs import get_or_record_run, runnable
from ..systems.spec import TUNED_STAGE, SystemSpec
from .configurations import FINAL_RESULTS_FILE, load_train_params
from .selection import training_setups, tuned_base


def tuned_notes(results: dict) -> list[str]:
    """What the tables must say about a tuned model beside its numbers (notebook 09's results.json)."""
    if results.get("beats_baseline_on_validation") is False:
        return ["no fine-tuning configuration beat the untuned model on validation MRR@10; the row shows the best "
                "configuration tried, not an improvement (tables/finetune_tuned_vs_baseline)"]
    return []


@dataclass(frozen=True)
class TunedModel:
    """Notebook 09's fine-tuned retriever of one move (models/<base>__<move>/) as the Tuned row of the tables."""

    folder: Path  # models/<base>__<move>/
    results: dict | None  # its results.json; None: not fine-tuned (yet)
    system: SystemSpec  # its row (setup "Tuned")

    @property
    def prefixes(self) -> tuple[str, str]:
        """The prefixes it was trained with (results.json), which its runs are searched with."""
        recorded = (self.results or {}).get("prefixes") or {}
        return recorded.get("query", GENERIC_PREFIXES[0]), recorded.get("document", GENERIC_PREFIXES[1])

    @functools.cached_property
    def ref(self) -> ModelRef:
        """The folder resolved once, for the run key's fingerprint and the retriever."""
        return resolve_model(self.folder)

    def info(self, move: Move, split: Split, checksum: str, params: RetrievalParams,
             stage: str = TUNED_STAGE) -> RunInfo:
        return dataclasses.replace(self.system.info(move, split, checksum, params, stage=stage),
                                   model_fingerprint=self.ref.fingerprint, notes=tuned_notes(self.results or {}))

    def retriever(self, params: RetrievalParams, cfg: Config):
        return dense_retriever(self.ref, *self.prefixes,
                               RetrieverSettings.from_params(params, cfg, name=self.system.name))


def tuned_model(cfg: Config, base_model: str, move: Move, prefixes: str | None = None) -> TunedModel:
    """The fine-tuned retriever of `base_model` on `move`, found through `Paths.tuned_model_dir` (as notebook 09 writes
    it); `prefixes` "recommended": the setup trained with the model's recommended prefixes (its own folder and row)."""
    folder = cfg.paths.tuned_model_dir(tuned_base(base_model, prefixes), move)
    row_prefix = "recommended" if prefixes == "recommended" else "generic"
    system = SystemSpec(model_name(base_model), row_prefix, "dense", f"models/{folder.name}", setup="Tuned")
    return TunedModel(folder, read_json_if_exists(folder / FINAL_RESULTS_FILE), system)


def record_tuned_runs(cfg: Config, move: str = "all", bench: Benchmark | None = None,
                      params: RetrievalParams | None = None) -> pd.DataFrame:
    """Run files of notebook 09's fine-tuned retrievers (models/<base>__<move>/), each on its own move.

    Searched like notebook 08's baselines (same pools, k, query sample), with the prefixes recorded in
    the model's results.json, on test and silver; a run file with the same key (same model fingerprint,
    benchmark, queries: systems.runs.reusable) is kept. Notebook 09 has just scored the same model on the same
    texts, so the embeddings come from the cache (models.model_fingerprint ignores results.json) and
    only the search runs again.
    """
    params = params or load_retrieval_params(cfg)
    train = load_train_params(cfg)
    bench = bench or load_benchmark(cfg.paths.benchmark)
    rows = []
    if not params.tuned_models:
        return pd.DataFrame([{"status": "retrieval.tuned_models is false: no tuned run files"}])
    if not train.selected_moves(move):
        return pd.DataFrame([{"move": move, "status": "not fine-tuned in this run (train.moves leaves it out)"}])
    checksum = bench.checksum()
    splits = [Split.parse(s) for s in params.splits]
    for setup, target in [(s, m) for s in training_setups(train) for m in s.selected_moves(move)]:
        tuned = tuned_model(cfg, setup.base_model, target, setup.prefixes)
        if tuned.results is None:
            rows.append({"move": target.value, "status": f"no fine-tuned model under models/{tuned.folder.name}/"})
            continue
        make_retriever = functools.cache(lambda tuned=tuned: tuned.retriever(params, cfg))  # one for the move's splits
        for split in splits:
            if (target, split) not in runnable(bench, [split]):
                continue
            info = tuned.info(target, split, checksum, params)
            stored = get_or_record_run(make_retriever, bench, info, cfg.paths.retrieval_runs, prefixes=tuned.prefixes)
            rows.append({"system": info.system, "move": target.value, "split": split.value,
                         "status": "kept: a run file with the same key" if stored.reused else "written",
                         "queries": int(stored.run["qid"].nunique())})
    return pd.DataFrame(rows)
