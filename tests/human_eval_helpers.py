"""Builders shared by the human-study tests: run files for the tiny benchmark, a packet, label rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.human_eval.packets import LABEL_FIELDS, build_packets, run_files_in, write_packets
from ratio_utils.param_sections import HumanEvalParams
from ratio_utils.retrieval.runs import run_path, write_run
from ratio_utils.schema import MOVES, Split

BASELINE, TUNED = "toy-baseline", "toy-tuned"


def write_toy_runs(bench_root: Path, runs_dir: Path, split: Split = Split.TEST) -> None:
    """Two systems over the tiny benchmark: one ranks the pool in id order, the other in reverse."""
    bench = load_benchmark(bench_root)
    docids = sorted(bench.pool(split)["docid"])
    for move in MOVES:
        for system, order in ((BASELINE, docids), (TUNED, docids[::-1])):
            rows = [(qid, d, r, 1.0 / r) for qid in bench.queries(move, split)["query_id"].unique()
                    for r, d in enumerate(order, start=1)]
            write_run(pd.DataFrame(rows, columns=["qid", "docid", "rank", "score"]),
                      run_path(runs_dir, system, move, split), system)


def toy_params(**overrides) -> HumanEvalParams:
    values = dict(baseline_system=BASELINE, tuned_system=TUNED, pool_per_move=3, labelled_per_move=2,
                  annotators={"ann1": None, "ann2": None}, double_labelled_per_move=1)
    values.update(overrides)
    return HumanEvalParams(**values)


def make_packets(tmp_path: Path, bench_root: Path, key: Path | None = None, **overrides) -> tuple[Path, Path]:
    """Packets of the tiny benchmark under tmp_path/study, the key (default) in tmp_path/study_key: (packets dir, key
    path)."""
    runs = tmp_path / "runs"
    write_toy_runs(bench_root, runs)
    params = toy_params(**overrides)
    bench = load_benchmark(bench_root)
    packets = build_packets(bench, run_files_in(runs, params, bench), params, seed=7)
    out = tmp_path / "study"
    # outside the packets' parent, as config.Paths puts it
    key = key or tmp_path / "study_key" / "unblinding_key.jsonl"
    write_packets(packets, out / "packets", key, out / "report.json", k=10)
    return out / "packets", key


def label_row(annotator: str, item: str, list_name: str, rank: int, candidate_id: str, label: str | None,
              preference: str | None = None, comment: str | None = None) -> dict:
    row = dict.fromkeys(LABEL_FIELDS)
    row.update(annotator=annotator, item=item, move=item.split("/")[0], query_id=item.split("/")[1], list=list_name,
               rank=rank, candidate_id=candidate_id, label=label,
               labelled_at="2026-01-01T00:00:00+00:00" if label else None,
               preference=preference, preference_at="2026-01-01T00:00:00+00:00" if preference else None,
               comment=comment, comment_at="2026-01-01T00:00:00+00:00" if comment else None)
    return row
