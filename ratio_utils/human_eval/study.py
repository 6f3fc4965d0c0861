"""The inspiration study as notebook 12 runs it (`ratio_utils.stages.human_eval_stats`; paper §5.3, Appendix G):
the packets written under the run's paths with the key kept from annotators, who labels what, and, once label files
exist, Tables 2, 11, 12, agreement and gold marked useful with their captions and notes (the stage publishes them).

Reads:  the benchmark, the two compared systems' run files (chosen by the stage), stage 05's distractors, the papers;
        data/human_eval/packets/ and data/human_eval/packets_report.json; the label files of the annotation app
        (human_eval.labels_dir) with the unblinding key.
Writes: data/human_eval/packets/, data/human_eval/packets_report.json, data/human_eval_key/unblinding_key.jsonl
        (`ratio_utils.human_eval.packets.write_packets`); removes an old copy of the key beside the packets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..evaluation import stats
from ..evaluation.stats import INDICATIVE_BELOW
from ..io import read_json_if_exists
from ..param_sections import HumanEvalParams
from . import labels as study_labels
from . import packets as study_packets
from . import statistics as study_statistics

TABLE_NAMES = ("table2_human_eval", "table11_beyond_gold", "table12_cross_paper", "human_eval_agreement",
               "human_eval_gold_useful")
FINE_FORMAT = ("table2_human_eval", "human_eval_agreement")  # shown with three significant digits, the rest {:.1f}


def study_seed(cfg: Config, params: HumanEvalParams) -> int:
    """The study's seed: human_eval.seed, else the params file's."""
    return params.seed if params.seed is not None else cfg.seed


def labels_dir(cfg: Config, params: HumanEvalParams) -> Path | None:
    """The folder of <annotator>.jsonl label files (None while human_eval.labels_dir is not set)."""
    return None if params.labels_dir is None else cfg.paths.from_params(params.labels_dir)


# -- the packets -----------------------------------------------------------------------------------------------------


def write_study_packets(cfg: Config, params: HumanEvalParams, bench: Benchmark, run_files: dict[tuple[str, str], Path],
                        made: list[str]) -> pd.DataFrame:
    """Sample the queries, build the blind packets and the key from the two systems' run files (`made`: those
    ranked for the packets, named in the notes); one summary row per move."""
    packets = study_packets.build_packets(bench, run_files, params, study_seed(cfg, params),
                                          distractors_path=cfg.paths.distractors, papers_path=cfg.paths.papers)
    if made:
        packets.report["notes"].append(f"run files ranked here for the packets: {', '.join(made)}")
    study_packets.write_packets(packets, cfg.paths.human_eval_packets, cfg.paths.human_eval_key,
                                cfg.paths.human_eval_report, params.k)
    relative = cfg.paths.relative
    print(f"Annotators get the packets folder only ({relative(cfg.paths.human_eval_packets)}/); the unblinding key "
          f"({relative(cfg.paths.human_eval_key)}) and {relative(cfg.paths.human_eval_report)} stay with the study "
          "team.")
    remove_old_key(cfg)
    summary = pd.DataFrame(packets.report["per_move"])
    summary["baseline"] = [packets.report["systems"][m]["baseline"] for m in summary["move"]]
    summary["tuned"] = [packets.report["systems"][m]["tuned"] for m in summary["move"]]
    return summary


def remove_old_key(cfg: Config) -> None:
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


def packet_notes(report_path: Path) -> list[str]:
    """The notes of the packets report (data/human_eval/packets_report.json, written with the packets)."""
    return json.loads(Path(report_path).read_text(encoding="utf-8"))["notes"]


def assignment_table(packets_dir: Path) -> pd.DataFrame:
    """Queries per annotator and move (a doubly labelled query counts for both annotators)."""
    packet = study_packets.load_packet(packets_dir)
    rows = [{"annotator": name, "move": packet.items[i]["move"]} for name, items in packet.assignments.items()
            for i in items]
    if not rows:
        return pd.DataFrame(columns=["annotator", "total"])
    table = pd.crosstab(pd.DataFrame(rows)["annotator"], pd.DataFrame(rows)["move"])
    return table.assign(total=table.sum(axis=1)).reset_index().rename_axis(columns=None)


# -- the tables from the label files ---------------------------------------------------------------------------------


@dataclass
class HumanEvalResults:
    """What notebook 12 shows: a status line, and the tables once labels exist."""

    status: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    inputs: list[Path] = field(default_factory=list)

    def table(self, name: str) -> pd.DataFrame | None:
        """The table; None (a cell that shows nothing) without labels, as `status` says once why there are none."""
        if name not in TABLE_NAMES:
            raise KeyError(f"no table {name!r}; the tables are {', '.join(TABLE_NAMES)}")
        return self.tables.get(name)


def study_results(cfg: Config, params: HumanEvalParams) -> HumanEvalResults:
    """Tables 2, 11, 12, agreement and gold marked useful from the label files, with their captions, notes and inputs;
    without label files, only a status that says why there are no numbers."""
    folder = labels_dir(cfg, params)
    files = study_labels.label_files(folder)
    if not files:
        where = ("human_eval.labels_dir is not set" if folder is None
                 else f"{params.labels_dir} holds no <annotator>.jsonl")
        return HumanEvalResults(pd.DataFrame([{
            "status": "no labels yet",
            "detail": f"No human labels exist yet ({where}), so no numbers are reported. Annotators label the packets "
                      "with `ratio-annotate --packets data/human_eval/packets --annotator "
                      "NAME`; then set human_eval.labels_dir to the labels folder and rerun this notebook.",
        }]))
    labels = study_labels.load_labels(folder, study_packets.load_key(cfg.paths.human_eval_key), params.k)
    moves = list(params.moves)
    tables = {
        "table2_human_eval": study_statistics.table2(labels, moves, params.n_permutations, study_seed(cfg, params)),
        "table11_beyond_gold": study_statistics.table11(labels, moves),
        "table12_cross_paper": study_statistics.table12(labels, moves),
        "human_eval_agreement": study_statistics.annotator_agreement(labels, moves),
        "human_eval_gold_useful": study_statistics.gold_marked_useful(labels),
    }
    status = labels.candidates.groupby("annotator")["item"].nunique().rename("complete queries").reset_index()
    status = status.merge(labels.incomplete.groupby("annotator").size().rename("incomplete queries").reset_index(),
                          how="outer")
    return HumanEvalResults(status.fillna(0).astype({"incomplete queries": int}), tables, captions(params.k),
                            table_notes(cfg, params, labels, files), [cfg.paths.human_eval_key, *files])


def captions(k: int) -> dict[str, str]:
    return {
        "table2_human_eval": f"Table 2: human inspiration evaluation of the top {k} (%, mean over queries; a "
                             "candidate counts as relevant if the annotator marked it useful). Pref.: annotations "
                             "preferring the list; Tie: annotations preferring neither; p: paired sign-flip "
                             "permutation test over queries.",
        "table11_beyond_gold": f"Table 11: useful candidates and the gold sentence in the top {k} (%, mean over "
                               "queries).",
        "table12_cross_paper": "Table 12: origin of the useful candidates other than the gold sentence.",
        "human_eval_agreement": "Inter-annotator agreement on the queries labelled twice.",
        "human_eval_gold_useful": "How often the gold sentence was marked useful when it was in the top k.",
    }


def shown_form(name: str, frame: pd.DataFrame, n_permutations: int) -> pd.DataFrame | None:
    """Table 2's p columns as text through the one formatter (`stats.with_p_text`); None: the table as it is."""
    if name != "table2_human_eval":
        return None
    return stats.with_p_text(frame, n_permutations, [c for c in frame if c.startswith("p ")])


def float_format(name: str) -> str:
    return "{:.3g}" if name in FINE_FORMAT else "{:.1f}"


def table_notes(cfg: Config, params: HumanEvalParams, labels: study_labels.StudyLabels,
                files: list[Path]) -> list[str]:
    """The notes every table of the study carries: the packets' notes, the compared systems, what counts."""
    report = read_json_if_exists(cfg.paths.human_eval_report) or {}
    notes = list(report.get("notes", []))
    systems = report.get("systems", {})
    if systems:
        notes.append("Compared: " + "; ".join(f"{m}: Baseline {s['baseline']}, Tuned {s['tuned']}"
                                              for m, s in systems.items()) + ".")
    notes.append(f"Labels from {len(files)} file(s); a query counts only when all candidates of both lists are "
                 f"labelled; {len(labels.incomplete)} incomplete annotation(s) left out. A query labelled twice "
                 "counts once, its annotators' scores averaged.")
    notes.append("p: two-sided paired sign-flip permutation test over queries "
                 f"({params.n_permutations:,} permutations, ratio_utils.evaluation.stats.paired_permutation_test).")
    n_queries = labels.candidates.groupby("move")["item"].nunique()
    small = [f"{m} ({n})" for m, n in n_queries.items() if n < INDICATIVE_BELOW]
    if small:
        notes.append(f"Indicative only, fewer than {INDICATIVE_BELOW} queries: {', '.join(small)}.")
    notes.append("A candidate's paper is the pool's corpusid of the candidate; 'another paper' means a corpusid other "
                 "than the query's.")
    return notes
