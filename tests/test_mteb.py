"""The benchmark where retrieval researchers already work: its dataset card loads every config with Hugging Face
`datasets` offline, row for row, and MTEB's scores of a real model equal `ratio_utils.evaluate`'s (0.1 point)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest
from card_checks import assert_every_config_loads_offline

from ratio_utils.dataset.benchmark import (
    CARD_FILE,
    PROVENANCE_DIR,
    candidates_path,
    load_benchmark,
    pairs_path,
    write_pairs,
    write_pool,
)
from ratio_utils.dataset.card import CardSources, card_configs, split_summary, write_dataset_card
from ratio_utils.schema import MOVES, Move, Split

LICENCES = {"fixture": "CC BY 4.0 (invented for the tests)"}


pytestmark = pytest.mark.usefixtures("embedding_cache_in_tmp")


@pytest.fixture
def bench(tmp_path, tiny_benchmark):
    """The tiny benchmark with a silver split for Address and Specify (two of their test pairs each), a corpus
    column, dates, and who judged it; Broaden has no silver pairs (an empty file). The test pool also holds the
    Address query sentences, as a real pool can: each must never be retrieved for its own query."""
    root = tmp_path / "release"
    shutil.copytree(tiny_benchmark, root)
    for move in MOVES:
        for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
            frame = pd.read_parquet(pairs_path(root, move, split)).assign(corpus="fixture")
            frame["publicationdate"] = {"train": "2010-03-01", "validation": "2011-05-02",
                                        "test": "2012-07-03"}[split.value]
            write_pairs(frame, root, move, split)
        test = pd.read_parquet(pairs_path(root, move, Split.TEST))
        write_pairs(test.head(0 if move is Move.BROADEN else 2), root, move, Split.SILVER)
    pool = pd.read_parquet(candidates_path(root, Split.TEST))
    queries = pd.read_parquet(pairs_path(root, Move.ADDRESS, Split.TEST))
    own = pd.DataFrame({"docid": queries["query_id"], "text": queries["querySentence"], "source": "distractor",
                        "corpusid": queries["corpusid"]})
    write_pool(pd.concat([pool, own], ignore_index=True), root, Split.TEST)
    (root / PROVENANCE_DIR).mkdir(exist_ok=True)
    (root / PROVENANCE_DIR / "silver.json").write_text(json.dumps(
        {"answered_by": ["judge-x"], "configured": "judge-y",
         "detail": {"rule": "both prompts accept", "silver pairs": {"address": 2, "specify": 2},
                    "sampled pairs": {"address": 3, "specify": 3}}}))
    return load_benchmark(root)


def test_the_card_lists_every_table_and_changes_no_run_key(bench):
    before = bench.checksum()
    text = write_dataset_card(bench, CardSources("fixture-run", LICENCES)).read_text(encoding="utf-8")
    assert bench.checksum() == before  # the card is described data, not data: run keys stay valid
    configs, left_out = card_configs(bench)
    names = [c["config_name"] for c in configs]
    assert names == ["corpus", "address", "broaden", "specify"]
    splits = {c["config_name"]: [f["split"] for f in c["data_files"]] for c in configs}
    assert splits["address"] == ["train", "validation", "test", "silver"] and "silver" not in splits["broaden"]
    assert left_out == ["broaden/silver"] and "Left out (no pairs): broaden/silver." in text
    # prose from the directory: dates, counts, who judged, licences
    assert "| test | 2012-07-03 to 2012-07-03 |" in text
    assert "answered by judge-x, standing in for the configured judge judge-y" in text
    assert "`fixture` (" in text and "CC BY 4.0 (invented for the tests)" in text
    assert "not** the authors' official release" in text
    summary = split_summary(bench).set_index("split")
    assert summary.loc["silver", "Address"] == "2 (2)"


def test_every_config_loads_offline_with_datasets_and_counts_equal_the_parquet_files(bench, monkeypatch, tmp_path):

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    write_dataset_card(bench, CardSources("fixture-run", LICENCES))
    assert_every_config_loads_offline(bench, tmp_path / "hf")


def test_a_directory_without_silver_says_so_and_has_no_silver_split(tiny_benchmark, tmp_path):
    root = tmp_path / "plain"
    shutil.copytree(tiny_benchmark, root)
    bench = load_benchmark(root)
    text = write_dataset_card(bench, CardSources("plain", {})).read_text(encoding="utf-8")
    assert "no silver set" in text and "split: silver" not in text
    assert (root / CARD_FILE).exists()
    assert "do not name the corpus" in text  # the fixture's pairs carry no corpus column


# -- MTEB ------------------------------------------------------------------------------------------------------


def test_tasks_describe_the_directory(bench):
    pytest.importorskip("mteb")
    from ratio_utils.evaluation.mteb_tasks import directory_id, ratio_tasks, task_move
    from ratio_utils.schema import move_text

    tasks = {t.metadata.name.split("_")[0]: t for t in ratio_tasks(bench.root, licences=LICENCES)}
    assert sorted(tasks) == ["RatioAddress", "RatioBroaden", "RatioSpecify"]
    assert all(t.metadata.name == f"{name}_{directory_id(bench.root)}" for name, t in tasks.items())
    assert {task_move(t.metadata.name) for t in tasks.values()} == {"address", "broaden", "specify"}
    # each task carries its move: the query prompt is the move's instruction, documents get none
    for name, task in tasks.items():
        assert task.metadata.prompt == {"query": move_text(task_move(name), "instruction")}
    assert tasks["RatioAddress"].metadata.eval_splits == ["test", "silver"]
    assert tasks["RatioBroaden"].metadata.eval_splits == ["test"]  # its silver file holds no pair
    meta = tasks["RatioSpecify"].metadata
    assert meta.main_score == "mrr_at_10" and meta.license == "cc-by-4.0"
    assert meta.date == ("2012-07-03", "2012-07-03")
    assert "not the authors' official release" in meta.description
    task = tasks["RatioSpecify"]
    task.load_data()
    split = task.dataset["default"]["silver"]
    assert len(split["corpus"]) == len(bench.pool("test")) and len(split["queries"]) == 2
    assert all(len(golds) == 1 for golds in split["relevant_docs"].values())


@pytest.mark.models
def test_mteb_scores_equal_the_projects_evaluation(bench):
    """MiniLM with the generic prefixes: MTEB's MRR@10, R@10 and R@100 equal ratio_utils.evaluate's on every
    move and split (test and silver). Independent paths: MTEB encodes and ranks itself, then drops a query's own
    sentence (ignore_identical_ids); the project excludes it before ranking."""
    pytest.importorskip("mteb")
    from ratio_utils.evaluation.mteb_tasks import (
        SCORE_NAMES,
        generic_prompts,
        mteb_model,
        mteb_scores,
        project_scores,
        ratio_tasks,
        side_by_side,
    )

    prompts = generic_prompts()
    frame = side_by_side(mteb_scores(mteb_model("all-MiniLM-L6-v2", prompts), ratio_tasks(bench.root)),
                         project_scores("all-MiniLM-L6-v2", bench.root, prompts))
    assert set(zip(frame["move"], frame["split"])) == {("address", "test"), ("address", "silver"), ("broaden", "test"),
                                                       ("specify", "test"), ("specify", "silver")}
    for name in SCORE_NAMES:
        assert frame[f"{name} difference"].abs().max() <= 0.1, frame
    assert frame["MRR@10 (MTEB)"].between(0, 100).all() and frame["MRR@10 (MTEB)"].nunique() > 1


@pytest.mark.models
def test_the_datasets_example_prints_the_projects_scores(bench):
    """docs/examples/datasets_evaluation.py (datasets + sentence-transformers + ranx, nothing of the benchmark's
    own code) prints the MRR@10 and R@10 that ratio_utils.evaluate gives, on every move and split with pairs."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from ratio_utils.evaluation.mteb_tasks import generic_prompts, project_scores

    write_dataset_card(bench, CardSources("fixture-run", LICENCES))
    script = Path(__file__).resolve().parents[1] / "docs" / "examples" / "datasets_evaluation.py"
    out = subprocess.run([sys.executable, str(script), str(bench.root)], capture_output=True, text=True, check=True,
                         env={**os.environ, "HF_DATASETS_OFFLINE": "1"}).stdout
    printed = {(m, s): (float(mrr), float(r10)) for m, s, mrr, r10 in
               re.findall(r"^(\w+)\s+(\w+)\s+queries\s+[\d,]+\s+MRR@10\s+([\d.]+)\s+R@10\s+([\d.]+)$", out, re.M)}
    ours = project_scores("all-MiniLM-L6-v2", bench.root, generic_prompts())
    assert set(printed) == set(zip(ours["move"], ours["split"])), out
    for row in ours.to_dict("records"):
        mrr, r10 = printed[(row["move"], row["split"])]
        assert abs(mrr - row["MRR@10"]) <= 0.1 and abs(r10 - row["R@10"]) <= 0.1, (out, ours)


def test_a_release_without_ids_or_card_gets_one_from_the_command_line(tiny_benchmark, tmp_path, monkeypatch, capsys):
    """The official release's layout: pairs without query_id / gold_id, a candidate file with other column names,
    no card. `ratio-card` writes one that names the files' own columns, and every config loads."""
    import datasets

    from ratio_utils.apps.card import main

    root = tmp_path / "official"
    shutil.copytree(tiny_benchmark, root)
    for move in MOVES:
        for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
            path = pairs_path(root, move, split)
            pd.read_parquet(path).drop(columns=["query_id", "gold_id"]).to_parquet(path)
    for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
        path = candidates_path(root, split)
        pd.read_parquet(path).rename(columns={"docid": "candidate_id", "text": "sentence"}).to_parquet(path)
    assert main([str(root), "--licence", "fixture=CC BY 4.0 (invented)"]) == 0
    assert "configs corpus, address, broaden, specify" in capsys.readouterr().out
    text = (root / CARD_FILE).read_text(encoding="utf-8")
    assert "(`candidate_id`, `sentence`," in text and "`query_id`" not in text
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    loaded = datasets.load_dataset(str(root), "corpus", split="test", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == pq.read_metadata(candidates_path(root, Split.TEST)).num_rows
    assert main([str(tmp_path / "missing")]) == 2 and "ratio-card: error" in capsys.readouterr().err
