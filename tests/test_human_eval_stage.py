"""Notebook 12's stage (ratio_utils.stages.human_eval_stats, its study in ratio_utils.human_eval.study) through
the config: packets under cfg.paths, no numbers without labels, Tables 2, 11, 12 written once label files exist."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from human_eval_helpers import BASELINE, TUNED, label_row, write_toy_runs

from ratio_utils.config import load_config
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.evaluation import stats
from ratio_utils.evaluation.stats import format_p
from ratio_utils.human_eval import annotation_app as annotate
from ratio_utils.human_eval import packets, study
from ratio_utils.retrieval.runs import read_run, read_run_info, run_path
from ratio_utils.stages import human_eval_stats
from ratio_utils.stages.human_eval_stats import HumanEvalStatsStage

SECTION = {"baseline_system": BASELINE, "tuned_system": TUNED, "pool_per_move": 3, "labelled_per_move": 2,
           "annotators": {"ann1": None, "ann2": None}, "double_labelled_per_move": 1}


def test_packets_then_no_numbers_then_tables_from_labels(cfg, tiny_benchmark, capsys):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    write_toy_runs(cfg.paths.benchmark, cfg.paths.retrieval_runs)
    config = load_config(overrides={"human_eval": SECTION})
    summary = HumanEvalStatsStage.from_config(config).write_packets()
    assert summary[["move", "split", "labelled"]].values.tolist() == [["address", "test", 2], ["broaden", "test", 2],
                                                                      ["specify", "test", 2]]
    assert (config.paths.human_eval_packets / "queries.jsonl").exists() and config.paths.human_eval_key.exists()
    # the key is neither in the packets nor beside them, and the notebook says what annotators get
    assert not config.paths.human_eval_key.is_relative_to(config.paths.human_eval_packets.parent)
    assert packets.exposed_keys(config.paths.human_eval_packets) == []
    printed = capsys.readouterr().out
    assert "Annotators get the packets folder only (data/human_eval/packets/)" in printed
    assert "data/human_eval_key/unblinding_key.jsonl" in printed and str(config.paths.root) not in printed
    assert HumanEvalStatsStage.from_config(config).assignment_table()["total"].sum() == 6 + 3

    nothing = HumanEvalStatsStage.from_config(config).results
    assert nothing.tables == {} and nothing.status["status"].tolist() == ["no labels yet"]
    # the notebook shows the status, then each table: "no labels yet" once in all
    shown = [nothing.status, *(nothing.table(name) for name in study.TABLE_NAMES)]
    assert sum("no labels yet" in frame.to_string() for frame in shown if frame is not None) == 1
    assert not (config.paths.tables / "table2_human_eval.csv").exists()

    # ann1 labels everything through the app's store: List A useful at rank 1 only, prefers A
    store = annotate.open_store(config.paths.human_eval_packets, "ann1")
    for item in store.items:
        for name in "AB":
            for candidate in item["lists"][name]:
                value = "useful" if (name, candidate["rank"]) == ("A", 1) else "not_useful"
                store.answer({"etag": store.etag, "kind": "label", "item": item["item"], "list": name,
                              "rank": candidate["rank"], "value": value})
        store.answer({"etag": store.etag, "kind": "preference", "item": item["item"], "value": "A"})
    store.close()
    # ann2 has started one query only: incomplete, left out
    first = store.items[0]
    (config.paths.human_eval_packets / "labels" / "ann2.jsonl").write_text(json.dumps(
        label_row("ann2", first["item"], "A", 1, first["lists"]["A"][0]["candidate_id"], "useful")) + "\n")

    labelled = load_config(overrides={"human_eval": {**SECTION,
                                                     "labels_dir": "output:data/human_eval/packets/labels"}})
    result = HumanEvalStatsStage.from_config(labelled).results
    table2 = result.table("table2_human_eval").set_index(["move", "setup"])
    key = [json.loads(line) for line in labelled.paths.human_eval_key.read_text().splitlines()]
    mine = {e["item"]: e for e in key if e["item"] in {i["item"] for i in store.items}}
    tuned_first = sum(e["lists"]["A"]["setup"] == "tuned" for e in mine.values())
    n = len(mine)
    assert table2.loc[("all", "Tuned"), "queries"] == n
    assert table2.loc[("all", "Tuned"), "MRR@10"] == 100 * tuned_first / n  # only List A's first candidate is useful
    assert (table2.loc[("all", "Tuned"), "Pref."] == tuned_first
            and table2.loc[("all", "Baseline"), "Pref."] == n - tuned_first)
    assert result.status.set_index("annotator").loc["ann2", "incomplete queries"] == 1
    for name in ("table2_human_eval", "table11_beyond_gold", "table12_cross_paper", "human_eval_agreement"):
        assert (labelled.paths.tables / f"{name}.md").exists()
    notes = (labelled.paths.tables / "table2_human_eval.md").read_text()
    # p: numbers in the CSV, printed through the one formatter in the shown form
    csv = pd.read_csv(labelled.paths.tables / "table2_human_eval.csv")
    p_column = next(c for c in csv.columns if c.startswith("p MRR"))
    assert csv[p_column].dropna().between(0, 1).all()
    shown = stats.with_p_text(csv, 10_000, [c for c in csv if c.startswith("p ")])
    assert list(shown[p_column]) == [format_p(p) for p in csv[p_column]] and "" in set(shown[p_column])
    assert "no silver set" in notes and "1 incomplete annotation" in notes and str(labelled.paths.root) not in notes


@pytest.mark.models
def test_a_missing_baseline_run_is_ranked_with_its_sidecar(cfg, tiny_benchmark):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    write_toy_runs(cfg.paths.benchmark, cfg.paths.retrieval_runs)
    config = load_config(overrides={"human_eval": {**SECTION, "baseline_system": "all-MiniLM-L6-v2",
                                                   "moves": ["broaden"]}})
    HumanEvalStatsStage.from_config(config).write_packets()
    run_file = run_path(config.paths.human_eval_runs, "all-MiniLM-L6-v2", "broaden", "test")  # its own folder
    assert not run_path(config.paths.retrieval_runs, "all-MiniLM-L6-v2", "broaden", "test").exists()
    assert read_run_info(run_file).system == "all-MiniLM-L6-v2" and len(read_run(run_file)) > 0
    notes = HumanEvalStatsStage.from_config(config).packet_notes()
    assert "run files ranked here for the packets: all-MiniLM-L6-v2 on broaden/test" in notes
    # notebook 08's run of the same key (here: the same file under 08's folder) is read, nothing ranked again
    shutil.move(str(run_file.parent.parent), str(config.paths.retrieval_runs / run_file.parent.parent.name))
    files, made = human_eval_stats.ensure_runs(config, HumanEvalStatsStage.from_config(config).params,
                                              load_benchmark(config.paths.benchmark))
    assert made == [] and files[("baseline", "broaden")] == run_path(config.paths.retrieval_runs, "all-MiniLM-L6-v2",
                                                                     "broaden", "test")
    assert not run_path(config.paths.human_eval_runs, "all-MiniLM-L6-v2", "broaden", "test").exists()


def test_an_old_key_beside_the_packets_is_removed_once_the_new_key_holds_the_same(cfg, tiny_benchmark, capsys):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    write_toy_runs(cfg.paths.benchmark, cfg.paths.retrieval_runs)
    config = load_config(overrides={"human_eval": SECTION})
    HumanEvalStatsStage.from_config(config).write_packets()
    old = config.paths.human_eval / "unblinding_key.jsonl"  # where earlier versions wrote it
    shutil.copy(config.paths.human_eval_key, old)
    HumanEvalStatsStage.from_config(config).write_packets()
    assert not old.exists() and "Removed the old copy" in capsys.readouterr().out
    old.write_text("{}\n")  # another key: left for the study team to move, and the app refuses meanwhile
    HumanEvalStatsStage.from_config(config).write_packets()
    assert old.exists() and "An older unblinding key lies beside the packets" in capsys.readouterr().out
    with pytest.raises(annotate.AnnotateError, match="unblinding key lies inside or beside"):
        annotate.open_store(config.paths.human_eval_packets, "ann1")
