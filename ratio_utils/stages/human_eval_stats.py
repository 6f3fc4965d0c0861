"""Notebook 12_human_eval_stats: the blinded inspiration study (paper §5.3, Appendix G; Tables 2, 11, 12).

Gets the run files of the two compared systems (ranking here only those no run file of notebooks 08/09 has the key
of), then calls `ratio_utils.human_eval.study` for the packets and, once people have annotated, the tables, which it
publishes.

Reads:  the benchmark, run files of the two compared systems (data/retrieval_runs/ of notebooks 08/09 where they
        have the key asked for), stage 05's distractors;
        label files of the annotation app (human_eval.labels_dir), once people have annotated.
Writes: data/human_eval_runs/<system>/<move>/<split> (runs ranked here, none where 08's/09's match),
        data/human_eval/packets/ (what annotators see), data/human_eval/packets_report.json,
        data/human_eval_key/unblinding_key.jsonl (outside the packets' parent, never for annotators);
        with labels: tables/table2_human_eval, table11_beyond_gold, table12_cross_paper,
        human_eval_agreement, human_eval_gold_useful (+ provenance).
Without label files it writes the packets only and says once that no labels exist yet: no numbers.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..human_eval import packets as study_packets
from ..human_eval import study
from ..models import model_name
from ..param_sections import HumanEvalParams, TrainParams
from ..publish.display import Stage
from ..publish.published import write_table
from ..retrieval.runs import system_name
from ..schema import GENERIC_PREFIXES, NOTEBOOKS, Move
from ..systems.families import RetrieverSettings, build_retriever, load_retrieval_params
from ..systems.runs import get_or_record_run
from ..systems.spec import SystemSpec
from ..train.tuned_runs import tuned_model


class HumanEvalStatsStage(Stage):
    """What notebook 12 shows: the params, the packets and who labels what, then the tables once labels exist."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = cfg.section("human_eval", HumanEvalParams)
        self.params.check()
        self._results: study.HumanEvalResults | None = None

    def write_packets(self) -> pd.DataFrame:
        """Sample the queries, build the blind packets and the key; one summary row per move."""
        bench = load_benchmark(self.cfg.paths.benchmark)
        run_files, made = ensure_runs(self.cfg, self.params, bench)
        return study.write_study_packets(self.cfg, self.params, bench, run_files, made)

    def packet_notes(self) -> list[str]:
        return study.packet_notes(self.cfg.paths.human_eval_report)

    def assignment_table(self) -> pd.DataFrame:
        return study.assignment_table(self.cfg.paths.human_eval_packets)

    @property
    def results(self) -> study.HumanEvalResults:
        """The tables from the label files (written once, on first use), or only a status without labels."""
        if self._results is None:
            self._results = study.study_results(self.cfg, self.params)
            done = self._results
            for name, frame in done.tables.items():
                write_table(frame, name, self.cfg, caption=done.captions[name], notes=done.notes, inputs=done.inputs,
                            shown=study.shown_form(name, frame, self.params.n_permutations),
                            float_format=study.float_format(name))
        return self._results

    def status(self) -> pd.DataFrame:
        return self.results.status

    def table(self, name: str) -> pd.DataFrame | None:
        return self.results.table(name)


def ensure_runs(cfg: Config, params: HumanEvalParams,
                bench: Benchmark) -> tuple[dict[tuple[str, str], Path], list[str]]:
    """The run file of both compared systems of every move: (setup, move) -> path, and what was ranked here.

    A system named as `runs.system_name` names the untuned or tuned retriever of a dense model of the
    retrieval or train params ('all-MiniLM-L6-v2', 'all-MiniLM-L6-v2 (tuned)') is got through
    `runs.get_or_compute`, searched like notebook 08's baselines (same k and query sample): notebook 08's
    or 09's run file where it has the same key, else ranked here once into this stage's own folder
    (cfg.paths.human_eval_runs), from the embedding cache where it can. Any other system's run file is
    read from data/retrieval_runs/ as named; a missing one is an error of `build_packets`.
    """
    retrieval = load_retrieval_params(cfg)
    bases = dict.fromkeys([*retrieval.dense_models, cfg.section("train", TrainParams).base_model])
    checksum = bench.checksum()
    files = study_packets.run_files_in(cfg.paths.retrieval_runs, params, bench)
    made = []
    for (setup, move_name), shared in files.items():
        move = Move.parse(move_name)
        split = study_packets.packet_split(bench, move)
        wanted = params.system(setup, move)
        base = next((b for b in bases if system_name(model_name(b), "generic", setup.capitalize()) == wanted), None)
        if base is None:
            continue  # another system: its run file as named
        if setup == "baseline":
            system = SystemSpec(model_name(base), "generic", "dense", base)
            info = system.info(move, split, checksum, retrieval, stage=NOTEBOOKS["12"])
            settings = RetrieverSettings.from_params(retrieval, cfg, name=system.model)
            make_retriever = functools.partial(build_retriever, system, move, settings)
            prefixes = GENERIC_PREFIXES
        else:
            tuned = tuned_model(cfg, base, move)
            if tuned.results is None:
                continue  # not fine-tuned: build_packets names the missing run file
            info = tuned.info(move, split, checksum, retrieval, stage=NOTEBOOKS["12"])
            make_retriever = functools.partial(tuned.retriever, retrieval, cfg)
            prefixes = tuned.prefixes
        stored = get_or_record_run(make_retriever, bench, info, cfg.paths.human_eval_runs, prefixes=prefixes,
                                   stand_ins=[shared])
        files[(setup, move_name)] = stored.path
        if not stored.reused:
            made.append(f"{wanted} on {move.value}/{split.value}")
    return files, made
