"""Notebook 12_human_eval_stats: the blinded inspiration study (paper §5.3, Appendix G; Tables 2, 11, 12).

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
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..evaluation import stats
from ..evaluation.stats import INDICATIVE_BELOW
from ..human_eval import labels as study_labels
from ..human_eval import packets as study_packets
from ..human_eval import statistics as study_statistics
from ..io import read_json_if_exists
from ..models import model_name
from ..param_sections import HumanEvalParams, TrainParams
from ..publish.display import Stage
from ..publish.published import write_table
from ..retrieval.ranking import get_or_record_run
from ..retrieval.runs import system_name
from ..schema import GENERIC_PREFIXES, Move

STAGE = "12_human_eval_stats"


class HumanEvalStatsStage(Stage):
    """What notebook 12 shows: the params, the packets and who labels what, then the tables once labels exist."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = load_params(cfg)
        self._results: HumanEvalResults | None = None

    def write_packets(self) -> pd.DataFrame:
        return write_packets(self.cfg)

    def packet_notes(self) -> list[str]:
        return packet_notes(self.cfg)

    def assignment_table(self) -> pd.DataFrame:
        return assignment_table(self.cfg)

    @property
    def results(self) -> HumanEvalResults:
        """The tables from the label files (written once, on first use), or only a status without labels."""
        if self._results is None:
            self._results = results(self.cfg)
        return self._results

    def status(self) -> pd.DataFrame:
        return self.results.status

    def table(self, name: str) -> pd.DataFrame | None:
        return self.results.table(name)


def load_params(cfg: Config) -> HumanEvalParams:
    params = cfg.section("human_eval", HumanEvalParams)
    params.check()
    return params


def ensure_runs(cfg: Config, params: HumanEvalParams, bench: Benchmark) -> tuple[dict[tuple[str, str], Path], list[str]]:
    """The run file of both compared systems of every move: (setup, move) -> path, and what was ranked here.

    A system named as `runs.system_name` names the untuned or tuned retriever of a dense model of the
    retrieval or train params ('all-MiniLM-L6-v2', 'all-MiniLM-L6-v2 (tuned)') is got through
    `runs.get_or_compute`, searched like notebook 08's baselines (same k and query sample): notebook 08's
    or 09's run file where it has the same key, else ranked here once into this stage's own folder
    (cfg.paths.human_eval_runs), from the embedding cache where it can. Any other system's run file is
    read from data/retrieval_runs/ as named; a missing one is an error of `build_packets`.
    """
    from ..reporting import systems  # imports no torch; a retriever loads it only when it must search

    retrieval = systems.load_retrieval_params(cfg)
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
            system = systems.System(model_name(base), "generic", "dense", base)
            info = system.info(move, split, checksum, retrieval, stage=STAGE)
            make_retriever = functools.partial(systems.make_retriever, system, move, retrieval, cfg)
            prefixes = GENERIC_PREFIXES
        else:
            tuned = systems.tuned_model(cfg, base, move)
            if tuned.results is None:
                continue  # not fine-tuned: build_packets names the missing run file
            info = tuned.info(move, split, checksum, retrieval, stage=STAGE)
            make_retriever = functools.partial(tuned.retriever, retrieval, cfg)
            prefixes = tuned.prefixes
        stored = get_or_record_run(make_retriever, bench, info, cfg.paths.human_eval_runs, prefixes=prefixes,
                                   stand_ins=[shared])
        files[(setup, move_name)] = stored.path
        if not stored.reused:
            made.append(f"{wanted} on {move.value}/{split.value}")
    return files, made


def write_packets(cfg: Config) -> pd.DataFrame:
    """Sample the queries, build the blind packets and the key; one summary row per move."""
    params = load_params(cfg)
    bench = load_benchmark(cfg.paths.benchmark)
    run_files, made = ensure_runs(cfg, params, bench)
    packets = study_packets.build_packets(
        bench, run_files, params, params.seed if params.seed is not None else cfg.seed,
        distractors_path=cfg.paths.distractors, papers_path=cfg.paths.papers,
    )
    if made:
        packets.report["notes"].append(f"run files ranked here for the packets: {', '.join(made)}")
    study_packets.write_packets(packets, cfg.paths.human_eval_packets, cfg.paths.human_eval_key, cfg.paths.human_eval_report, params.k)
    print(f"Annotators get the packets folder only ({cfg.paths.relative(cfg.paths.human_eval_packets)}/); the unblinding key "
          f"({cfg.paths.relative(cfg.paths.human_eval_key)}) and {cfg.paths.relative(cfg.paths.human_eval_report)} stay "
          "with the study team.")
    _remove_old_key(cfg)
    summary = pd.DataFrame(packets.report["per_move"])
    summary["baseline"] = [packets.report["systems"][m]["baseline"] for m in summary["move"]]
    summary["tuned"] = [packets.report["systems"][m]["tuned"] for m in summary["move"]]
    return summary


def _remove_old_key(cfg: Config) -> None:
    """Delete the key where earlier versions wrote it, beside the packets, if the new key holds the same."""
    old = cfg.paths.human_eval / study_packets.KEY_FILE
    if not old.exists():
        return
    if old.read_bytes() == cfg.paths.human_eval_key.read_bytes():
        old.unlink()
        print(f"Removed the old copy of the key beside the packets ({cfg.paths.relative(old)}).")
    else:
        print(f"An older unblinding key lies beside the packets ({cfg.paths.relative(old)}): move it where annotators "
              "cannot open it; the annotation app refuses to start while it is there.")


def packet_notes(cfg: Config) -> list[str]:
    return json.loads(cfg.paths.human_eval_report.read_text(encoding="utf-8"))["notes"]


def assignment_table(cfg: Config) -> pd.DataFrame:
    """Queries per annotator and move (a doubly labelled query counts for both annotators)."""
    packet = study_packets.load_packet(cfg.paths.human_eval_packets)
    rows = [{"annotator": name, "move": packet.items[i]["move"]} for name, items in packet.assignments.items() for i in items]
    if not rows:
        return pd.DataFrame(columns=["annotator", "total"])
    table = pd.crosstab(pd.DataFrame(rows)["annotator"], pd.DataFrame(rows)["move"])
    return table.assign(total=table.sum(axis=1)).reset_index().rename_axis(columns=None)


def labels_dir(cfg: Config, params: HumanEvalParams) -> Path | None:
    if params.labels_dir is None:
        return None
    return cfg.paths.from_params(params.labels_dir)


@dataclass
class HumanEvalResults:
    """What notebook 12 shows: a status line, and the tables once labels exist."""

    status: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame | None:
        """The table; None (a cell that shows nothing) without labels, as `status` says once why there are none."""
        if name not in TABLE_NAMES:
            raise KeyError(f"no table {name!r}; the tables are {', '.join(TABLE_NAMES)}")
        return self.tables.get(name)


TABLE_NAMES = ("table2_human_eval", "table11_beyond_gold", "table12_cross_paper", "human_eval_agreement", "human_eval_gold_useful")


def results(cfg: Config) -> HumanEvalResults:
    """Tables 2, 11, 12 and agreement from the label files; without label files, only a status."""
    params = load_params(cfg)
    folder = labels_dir(cfg, params)
    files = study_labels.label_files(folder)
    if not files:
        where = "human_eval.labels_dir is not set" if folder is None else f"{params.labels_dir} holds no <annotator>.jsonl"
        return HumanEvalResults(pd.DataFrame([{
            "status": "no labels yet",
            "detail": f"No human labels exist yet ({where}), so no numbers are reported. Annotators label the packets "
                      f"with `python -m ratio_utils.human_eval.app --packets data/human_eval/packets --annotator NAME`; then "
                      "set human_eval.labels_dir to the labels folder and rerun this notebook.",
        }]))
    key = study_packets.load_key(cfg.paths.human_eval_key)
    labels = study_labels.load_labels(folder, key, params.k)
    moves = list(params.moves)
    seed = params.seed if params.seed is not None else cfg.seed
    tables = {
        "table2_human_eval": study_statistics.table2(labels, moves, params.n_permutations, seed),
        "table11_beyond_gold": study_statistics.table11(labels, moves),
        "table12_cross_paper": study_statistics.table12(labels, moves),
        "human_eval_agreement": study_statistics.agreement(labels, moves),
        "human_eval_gold_useful": study_statistics.gold_marked_useful(labels),
    }
    notes = _notes(cfg, params, labels, files)
    captions = {
        "table2_human_eval": f"Table 2: human inspiration evaluation of the top {params.k} (%, mean over queries; a candidate "
                             "counts as relevant if the annotator marked it useful). Pref.: annotations preferring the list; "
                             "Tie: annotations preferring neither; p: paired sign-flip permutation test over queries.",
        "table11_beyond_gold": f"Table 11: useful candidates and the gold sentence in the top {params.k} (%, mean over queries).",
        "table12_cross_paper": "Table 12: origin of the useful candidates other than the gold sentence.",
        "human_eval_agreement": "Inter-annotator agreement on the queries labelled twice.",
        "human_eval_gold_useful": "How often the gold sentence was marked useful when it was in the top k.",
    }
    inputs = [cfg.paths.human_eval_key, *files]
    for name, frame in tables.items():
        shown = (stats.with_p_text(frame, params.n_permutations, [c for c in frame if c.startswith("p ")])
                 if name == "table2_human_eval" else None)
        write_table(frame, name, cfg, caption=captions[name], notes=notes, inputs=inputs, shown=shown,
                    float_format="{:.3g}" if name in ("table2_human_eval", "human_eval_agreement") else "{:.1f}")
    status = labels.candidates.groupby("annotator")["item"].nunique().rename("complete queries").reset_index()
    status = status.merge(labels.incomplete.groupby("annotator").size().rename("incomplete queries").reset_index(), how="outer")
    return HumanEvalResults(status.fillna(0).astype({"incomplete queries": int}), tables)


def _notes(cfg: Config, params: HumanEvalParams, labels: study_labels.StudyLabels, files: list[Path]) -> list[str]:
    report = read_json_if_exists(cfg.paths.human_eval_report) or {}
    notes = list(report.get("notes", []))
    systems = report.get("systems", {})
    if systems:
        notes.append("Compared: " + "; ".join(f"{m}: Baseline {s['baseline']}, Tuned {s['tuned']}" for m, s in systems.items()) + ".")
    notes.append(f"Labels from {len(files)} file(s); a query counts only when all candidates of both lists are labelled; "
                 f"{len(labels.incomplete)} incomplete annotation(s) left out. A query labelled twice counts once, its "
                 "annotators' scores averaged.")
    notes.append(f"p: two-sided paired sign-flip permutation test over queries ({params.n_permutations:,} permutations, "
                 "ratio_utils.evaluation.stats.paired_permutation_test).")
    n_queries = labels.candidates.groupby("move")["item"].nunique()
    small = [f"{m} ({n})" for m, n in n_queries.items() if n < INDICATIVE_BELOW]
    if small:
        notes.append(f"Indicative only, fewer than {INDICATIVE_BELOW} queries: {', '.join(small)}.")
    notes.append("A candidate's paper is the pool's corpusid of the candidate; 'another paper' means a corpusid other "
                 "than the query's.")
    return notes
