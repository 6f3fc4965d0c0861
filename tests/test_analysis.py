"""Appendix F analyses: Jaccard on hand-computed cases, the oracle pools, transfer bookkeeping, and the
stage on the tiny benchmark (tuned models stand-ins: copies of the base model)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from ratio_utils import analysis, stats
from ratio_utils.paper_tables import DAGGER
from ratio_utils.benchmark import load_benchmark, write_pairs


def test_word_sets_are_the_bm25_preprocessing():
    words = analysis.WordSets()
    # lower case, stopwords ('the', 'are', 'on') removed, Snowball stems
    assert words("The parsers are overfitting on the small treebanks") == {"parser", "overfit", "small", "treebank"}


def test_jaccard_hand_computed():
    words = analysis.WordSets()
    query = words("Parsers overfit small treebanks")  # {parser, overfit, small, treebank}
    assert analysis.jaccard(query, words("the parser overfits")) == pytest.approx(2 / 4)
    assert analysis.jaccard(query, words("small parsers and large treebanks")) == pytest.approx(3 / 5)
    assert analysis.jaccard(query, words("nothing shared here")) == 0.0
    assert analysis.jaccard(query, query) == 1.0
    assert analysis.jaccard(frozenset(), frozenset()) == 0.0  # two stopword-only texts share nothing


def test_overlap_at_k_averages_the_top_k_in_metric_order():
    queries = {"q": "parsers overfit small treebanks"}
    docs = {"a": "the parser overfits", "b": "small parsers and large treebanks", "c": "nothing shared here", "q": "x"}
    # ranks in the file are ignored: order by score desc (b, a, c); tie-free
    run = pd.DataFrame({"qid": ["q"] * 3, "docid": ["a", "b", "c"], "rank": [1, 2, 3], "score": [0.5, 0.9, 0.1]})
    frame = analysis.overlap_at_k(run, queries, docs, ks=(1, 2, 3, 10))
    assert frame.loc["q", 1] == pytest.approx(3 / 5)
    assert frame.loc["q", 2] == pytest.approx((3 / 5 + 2 / 4) / 2)
    assert frame.loc["q", 3] == pytest.approx((3 / 5 + 2 / 4 + 0) / 3)
    assert frame.loc["q", 10] == pytest.approx(frame.loc["q", 3])  # fewer than k candidates: the mean of those there
    qrels = pd.DataFrame({"qid": ["q", "q"], "docid": ["a", "c"]})
    assert analysis.gold_overlap(qrels, queries, docs)["q"] == pytest.approx((2 / 4 + 0) / 2)


@pytest.fixture
def bench(cfg, tiny_benchmark):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    return load_benchmark(cfg.paths.benchmark)


def test_oracle_pool_holds_only_the_golds_of_the_move(bench):
    pool = analysis.oracle_pool(bench, "specify", "test")
    pairs = bench.queries("specify", "test")
    assert set(pool["docid"]) == set(pairs["gold_id"]) and len(pool) == pairs["gold_id"].nunique()
    assert set(pool["docid"]).isdisjoint(set(bench.queries("address", "test")["gold_id"]))
    # pool (b): the golds of the silver pairs only
    write_pairs(pairs.head(1), bench.root, "specify", "silver")
    silver_pool = analysis.oracle_pool(bench, "specify", "silver")
    assert list(silver_pool["docid"]) == [pairs["gold_id"].iloc[0]]


def test_transfer_matrix_bookkeeping():
    scores = {("address", "address"): 0.30, ("address", "specify"): 0.22, ("specify", "specify"): 0.40, ("specify", "address"): 0.10}
    untuned = {"address": 0.20, "specify": 0.20, "broaden": 0.0}
    matrix = analysis.transfer_matrix(scores, untuned)
    assert list(matrix.index) == ["address", "specify"] and list(matrix.columns) == ["address", "broaden", "specify"]
    assert matrix.loc["address", "address"] == pytest.approx(0.5)
    assert matrix.loc["address", "specify"] == pytest.approx(0.1)
    assert matrix.loc["specify", "address"] == pytest.approx(-0.5)
    assert np.isnan(matrix.loc["specify", "broaden"])  # no score (and untuned 0: no relative change)
    assert np.isnan(analysis.relative_change(0.3, 0.0))


@pytest.mark.models
def test_stage_runs_every_analysis_on_any_named_retriever(cfg, bench):
    from ratio_utils.models import resolve_model_path
    from ratio_utils.stages import analyses

    # notebook 09's address model, and a user's specify model named in the params (both the base weights here)
    for folder in (cfg.paths.models / "all-MiniLM-L6-v2__address", cfg.paths.root / "mine"):
        shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), folder)
    (cfg.paths.models / "all-MiniLM-L6-v2__address" / "results.json").write_text(json.dumps({}))
    params = analyses.AnalysisParams(tuned_models={"specify": str(cfg.paths.root / "mine")}, k=10, n_resamples=200)
    retrievers = analyses.find_retrievers(cfg, params)
    assert set(retrievers.tuned) == {"address", "specify"} and set(retrievers.missing) == {"broaden"}

    overlap = analyses.lexical_overlap(cfg, bench, params, retrievers)
    # same weights: tuned and untuned overlap equally, so 'tuned overlaps less' is never counted
    assert set(overlap.comparisons["Tuned overlaps less"]) == {"no"}
    assert overlap.count.iloc[-1]["Comparisons made"] == 2 * len(params.comparison_ks)  # address + specify, test only
    assert "no silver split" in " ".join(overlap.notes)
    assert (cfg.paths.figures / "figure4_lexical_overlap.png").exists()

    table10 = analyses.oracle_filtering(cfg, bench, params, retrievers)
    specify = table10[table10["Move"] == "Specify"]
    assert set(specify["Pool size"]) == {3} and set(specify["Setup"]) == {"Baseline", "Tuned"}
    assert specify.iloc[0]["M@10"] == specify.iloc[1]["M@10"]  # same weights, same pool
    assert (table10[table10["Move"] == "Broaden"].query("Setup == 'Tuned'")["M@10"] == "").all()
    # a pool of 3 golds: R@3 and above are 100 by construction and say so; R@1 is a result
    assert set(specify["R@3"]) == {"100 (pool ≤ 3)" + DAGGER} and set(specify["R@100"]) == {"100 (pool ≤ 100)" + DAGGER}
    assert "pool ≤" not in " ".join(specify["R@1"])
    md = (cfg.paths.tables / "table10_oracle_filtering.md").read_text(encoding="utf-8")
    assert "'100 (pool ≤ k)': the pool holds no more than k candidates" in md
    csv = pd.read_csv(cfg.paths.tables / "table10_oracle_filtering.csv")
    tuned_p = csv.loc[(csv["Move"] == "Specify") & (csv["Setup"] == "Tuned"), "p"]
    assert tuned_p.dtype.kind == "f" and tuned_p.between(0, 1).all()  # numbers in the CSV, text in the shown table
    assert list(specify.query("Setup == 'Tuned'")["p"]) == [stats.format_p(v, 200) for v in tuned_p]

    transfer = analyses.cross_move_transfer(cfg, bench, params, retrievers)
    assert len(transfer.table) == 2 * 3  # two tuned retrievers x three queried moves
    assert (transfer.matrix.fillna(0).abs() < 1e-9).all().all()  # same weights: no change anywhere
    assert (cfg.paths.tables / "analysis_cross_move_transfer.md").exists()
    title = transfer.figure.axes[0].get_title()
    n_address = len(bench.queries("address", "test"))
    assert f"Address unfiltered test N={n_address}{DAGGER}" in title and f"{DAGGER} fewer than 30 queries" in title
    annotations = [t.get_text() for t in transfer.figure.axes[0].texts]
    assert annotations and all("N=" in t for t in annotations)


def test_oracle_cell_marks_recall_trivial_only_when_the_pool_fits_in_k():
    from ratio_utils.paper_tables import Cell
    from ratio_utils.stages.analyses import oracle_cell_text

    c = Cell(1.0, 1.0, 1.0, 41)
    assert oracle_cell_text("R@100", c, 41) == "100 (pool ≤ 100)"
    assert oracle_cell_text("R@10", c, 10) == "100 (pool ≤ 10)"
    assert oracle_cell_text("R@10", c, 11) == c.text() == "100.0 [100.0, 100.0]"  # 11 candidates: a real result
    assert oracle_cell_text("M@100", c, 41) == c.text()  # MRR depends on the rank even in a small pool
    assert oracle_cell_text("R@100", Cell(1.0, 1.0, 1.0, 6), 13).endswith(DAGGER)
