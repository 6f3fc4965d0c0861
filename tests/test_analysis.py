"""Appendix F analyses: Jaccard on hand-computed cases, the oracle pools, transfer bookkeeping, and the
stage on the tiny benchmark (retrievers that rank each gold where the test says, so the stage's numbers are known)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from ratio_utils.dataset.benchmark import load_benchmark, write_pairs
from ratio_utils.evaluation import stats
from ratio_utils.evaluation.stats import DAGGER
from ratio_utils.retrieval.base import Retriever
from ratio_utils.retrieval_analysis import lexical_overlap, oracle_pools, transfer
from ratio_utils.schema import NOTEBOOKS


def test_word_sets_are_the_bm25_preprocessing():
    words = lexical_overlap.WordSets()
    # lower case, stopwords ('the', 'are', 'on') removed, Snowball stems
    assert words("The parsers are overfitting on the small treebanks") == {"parser", "overfit", "small", "treebank"}


def test_jaccard_hand_computed():
    words = lexical_overlap.WordSets()
    query = words("Parsers overfit small treebanks")  # {parser, overfit, small, treebank}
    assert lexical_overlap.jaccard(query, words("the parser overfits")) == pytest.approx(2 / 4)
    assert lexical_overlap.jaccard(query, words("small parsers and large treebanks")) == pytest.approx(3 / 5)
    assert lexical_overlap.jaccard(query, words("nothing shared here")) == 0.0
    assert lexical_overlap.jaccard(query, query) == 1.0
    assert lexical_overlap.jaccard(frozenset(), frozenset()) == 0.0  # two stopword-only texts share nothing


def test_overlap_at_k_averages_the_top_k_in_metric_order():
    queries = {"q": "parsers overfit small treebanks"}
    docs = {"a": "the parser overfits", "b": "small parsers and large treebanks", "c": "nothing shared here", "q": "x"}
    # ranks in the file are ignored: order by score desc (b, a, c); tie-free
    run = pd.DataFrame({"qid": ["q"] * 3, "docid": ["a", "b", "c"], "rank": [1, 2, 3], "score": [0.5, 0.9, 0.1]})
    frame = lexical_overlap.overlap_at_k(run, queries, docs, ks=(1, 2, 3, 10))
    assert frame.loc["q", 1] == pytest.approx(3 / 5)
    assert frame.loc["q", 2] == pytest.approx((3 / 5 + 2 / 4) / 2)
    assert frame.loc["q", 3] == pytest.approx((3 / 5 + 2 / 4 + 0) / 3)
    assert frame.loc["q", 10] == pytest.approx(frame.loc["q", 3])  # fewer than k candidates: the mean of those there
    qrels = pd.DataFrame({"qid": ["q", "q"], "docid": ["a", "c"]})
    assert lexical_overlap.gold_overlap(qrels, queries, docs)["q"] == pytest.approx((2 / 4 + 0) / 2)


def _move_overlap():
    """Three queries: the tuned retriever's top candidates share fewer words with the query than the untuned one's
    (one query has no third candidate under the untuned retriever)."""
    qids = pd.Index(["q1", "q2", "q3"], name="qid")
    baseline = pd.DataFrame({1: [0.5, 0.4, 0.3], 3: [0.4, 0.2, np.nan]}, index=qids)
    tuned = pd.DataFrame({1: [0.2, 0.1, 0.3], 3: [0.1, 0.1, 0.2]}, index=qids)
    return lexical_overlap.MoveOverlap({"baseline": baseline, "tuned": tuned}, pd.Series([0.25, 0.5, 0.0], index=qids))


def test_move_overlap_cells_are_means_over_the_queries_with_a_candidate():
    from ratio_utils.evaluation.intervals import IntervalCache

    rows = pd.DataFrame(_move_overlap().cells((1, 3), IntervalCache(None, seed=0, n_resamples=200)))
    rows = rows.set_index(["system", "k"])
    assert len(rows) == 6  # baseline and tuned at k = 1, 3; the query-gold reference beside every k
    assert rows.loc[("baseline", 1), "value"] == pytest.approx(0.4) and rows.loc[("baseline", 1), "n"] == 3
    assert rows.loc[("baseline", 3), "value"] == pytest.approx(0.3) and rows.loc[("baseline", 3), "n"] == 2
    assert rows.loc[("tuned", 3), "value"] == pytest.approx(0.4 / 3)
    assert rows.loc[("gold", 1), "value"] == rows.loc[("gold", 3), "value"] == pytest.approx(0.25)
    assert (rows["low"] <= rows["value"]).all() and (rows["value"] <= rows["high"]).all()


def test_move_overlap_comparison_is_tuned_minus_baseline_over_the_same_queries():
    from ratio_utils.evaluation.intervals import IntervalCache

    cache = IntervalCache(None, seed=0, n_resamples=200)
    at3 = _move_overlap().comparison(3, cache)
    # q3 has no baseline candidate at k=3: the difference is over q1 and q2 only, the means over what each has
    assert at3.difference.value == pytest.approx(((0.1 - 0.4) + (0.1 - 0.2)) / 2) and at3.difference.n == 2
    assert at3.baseline.value == pytest.approx(0.3) and at3.tuned.value == pytest.approx(0.4 / 3)
    assert at3.tuned_overlaps_less
    low, high = stats.paired_bootstrap_ci(np.array([0.1, 0.1]), np.array([0.4, 0.2]), n_resamples=200, seed=0)
    assert (at3.difference.low, at3.difference.high) == pytest.approx((low, high))
    assert at3.p == pytest.approx(stats.paired_permutation_test(np.array([0.1, 0.1]), np.array([0.4, 0.2]),
                                                                n_permutations=200, seed=0))
    at1 = _move_overlap().comparison(1, cache)
    assert at1.difference.value == pytest.approx(-0.2) and at1.gold.value == pytest.approx(0.25)


def test_overlap_count_counts_the_comparisons_where_the_tuned_retriever_overlaps_less():
    comparisons = pd.DataFrame({"Query set": ["silver", "silver", "unfiltered test", "unfiltered test",
                                              "unfiltered test"],
                                "Move": ["Address", "Address", "Address", "Specify", "Specify"],
                                "Tuned overlaps less": ["yes", "no", "yes", "yes", "yes"]})
    count = lexical_overlap.overlap_count(comparisons, comparison_ks=(1, 10)).set_index(["Query set", "Move"])
    assert count.loc[("silver", "Address"), ["Tuned overlaps less", "Comparisons made"]].tolist() == [1, 2]
    assert count.loc[("unfiltered test", "Specify"), ["Tuned overlaps less", "Comparisons made"]].tolist() == [2, 2]
    assert count.loc[("all", "all"), ["Tuned overlaps less", "Comparisons made",
                                      "Comparisons in the paper's design"]].tolist() == [4, 5, 12]
    empty = lexical_overlap.overlap_count(pd.DataFrame(), comparison_ks=(1, 10, 100, 1000))
    assert empty.iloc[0].to_dict() == {"Query set": "all", "Move": "all", "Tuned overlaps less": 0,
                                       "Comparisons made": 0,
                                       "Comparisons in the paper's design": 24}  # the paper's 24 of 24


def test_overlap_table_has_one_row_per_query_set_move_and_retriever():
    per_k = pd.DataFrame([
        {"query_set": "test", "move": "address", "system": "tuned", "k": 10, "value": 0.05, "low": 0.04, "high": 0.06,
         "n": 41},
        {"query_set": "test", "move": "address", "system": "tuned", "k": 1, "value": 0.1, "low": 0.08, "high": 0.12,
         "n": 41},
        {"query_set": "silver", "move": "broaden", "system": "gold", "k": 1, "value": 0.2, "low": 0.1, "high": 0.3,
         "n": 6},
    ])
    table = lexical_overlap.overlap_table(per_k)
    assert table.drop(columns="J@10").to_dict("records") == [
        {"Query set": "silver", "Move": "Broaden", "Retriever": "gold", "Queries": 6,
         "J@1": "0.200 [0.100, 0.300]" + DAGGER},
        {"Query set": "unfiltered test", "Move": "Address", "Retriever": "tuned", "Queries": 41,
         "J@1": "0.100 [0.080, 0.120]"},
    ]
    assert table["J@10"].isna().tolist() == [True, False] and table.loc[1, "J@10"] == "0.050 [0.040, 0.060]"


@pytest.fixture
def bench(cfg, tiny_benchmark):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    return load_benchmark(cfg.paths.benchmark)


def test_oracle_pool_holds_only_the_golds_of_the_move(bench):
    pool = oracle_pools.oracle_pool(bench, "specify", "test")
    pairs = bench.queries("specify", "test")
    assert set(pool["docid"]) == set(pairs["gold_id"]) and len(pool) == pairs["gold_id"].nunique()
    assert set(pool["docid"]).isdisjoint(set(bench.queries("address", "test")["gold_id"]))
    # pool (b): the golds of the silver pairs only
    write_pairs(pairs.head(1), bench.root, "specify", "silver")
    silver_pool = oracle_pools.oracle_pool(bench, "specify", "silver")
    assert list(silver_pool["docid"]) == [pairs["gold_id"].iloc[0]]


def test_transfer_matrix_bookkeeping():
    scores = {("address", "address"): 0.30, ("address", "specify"): 0.22, ("specify", "specify"): 0.40,
              ("specify", "address"): 0.10}
    untuned = {"address": 0.20, "specify": 0.20, "broaden": 0.0}
    matrix = transfer.transfer_matrix(scores, untuned)
    assert list(matrix.index) == ["address", "specify"] and list(matrix.columns) == ["address", "broaden", "specify"]
    assert matrix.loc["address", "address"] == pytest.approx(0.5)
    assert matrix.loc["address", "specify"] == pytest.approx(0.1)
    assert matrix.loc["specify", "address"] == pytest.approx(-0.5)
    assert np.isnan(matrix.loc["specify", "broaden"])  # no score (and untuned 0: no relative change)
    assert np.isnan(transfer.relative_change(0.3, 0.0))


# Two sentences that share no word with any tiny query (checked in the test): fillers ranked above the gold.
_NO_OVERLAP = ["we report results averaged over five random seeds.", "numbers in the appendix are rounded."]


class _GoldAtRank(Retriever):
    """A retriever whose rank of each query's gold is set by hand: the untuned one puts two fillers above it; one
    tuned on move M returns only the gold for M's queries, and for other moves' queries puts one filler above it
    (tuned on Address) or two (tuned on Specify: no better than untuned there). Fillers are the no-overlap
    sentences where the pool has them, else the pool's other sentences by docid."""

    def __init__(self, tuned_on: str | None, gold_of: dict[str, str], move_of: dict[str, str]):
        self.tuned_on, self.gold_of, self.move_of = tuned_on, gold_of, move_of
        self.name = f"gold-at-rank:{tuned_on or 'untuned'}"

    def _search(self, queries, pool, k):
        no_overlap = set(pool.loc[pool["text"].isin(_NO_OVERLAP), "docid"])
        rows = []
        for qid in queries["qid"]:
            gold = self.gold_of[qid]
            others = sorted(set(pool["docid"]) - {gold}, key=lambda d: (d not in no_overlap, d))
            if self.tuned_on is None:
                fillers = 2
            else:
                fillers = 0 if self.move_of[qid] == self.tuned_on else 1 if self.tuned_on == "address" else 2
            ranked = [*others[:fillers], gold]
            rows += [{"qid": qid, "docid": d, "rank": r, "score": 1.0 / r} for r, d in enumerate(ranked, 1)]
        return pd.DataFrame(rows)


def test_stage_runs_every_analysis_on_any_named_retriever(cfg, bench, monkeypatch):
    """The three analyses on an untuned and two tuned retrievers whose ranks are set by hand, so every number
    below is known: a swapped baseline/tuned label, a reversed difference or a mixed-up 'tuned on' fails."""
    from ratio_utils.dataset.benchmark import write_pool
    from ratio_utils.reporting.paper_tables import FULL_COLUMNS, metric_key
    from ratio_utils.retrieval_analysis import analysed_runs
    from ratio_utils.schema import sentence_id
    from ratio_utils.stages import analyses

    pool = bench.pool("test")
    pool = pd.concat([pool, pd.DataFrame([{"docid": sentence_id(_NO_OVERLAP[1]), "text": _NO_OVERLAP[1],
                                           "source": "common_irrelevant", "corpusid": "D00-0000"}])],
                     ignore_index=True)
    write_pool(pool, bench.root, "test")
    bench = load_benchmark(bench.root)
    words = lexical_overlap.WordSets()
    pairs = {m: bench.queries(m, "test") for m in ("address", "broaden", "specify")}
    assert all(lexical_overlap.jaccard(words(q), words(t)) == 0 for t in _NO_OVERLAP for p in pairs.values()
               for q in p["querySentence"])
    gold_of = {q: g for p in pairs.values() for q, g in zip(p["query_id"], p["gold_id"])}
    move_of = {q: m for m, p in pairs.items() for q in p["query_id"]}

    # the untuned retriever and notebook 09's address model by folder, a user's specify model named in the params;
    # each folder's contents (and so its fingerprint) differ
    untuned, mine = cfg.paths.root / "untuned", cfg.paths.root / "mine"
    address = cfg.paths.models / "untuned__address"
    for folder in (untuned, address, mine):
        folder.mkdir(parents=True)
        (folder / "weights.txt").write_text(folder.name, encoding="utf-8")
    (address / "results.json").write_text(json.dumps({}))
    tuned_on = {str(untuned): None, str(address): "address", str(mine): "specify"}
    monkeypatch.setattr(analysed_runs, "dense_retriever",
                        lambda source, *a, **kw: _GoldAtRank(tuned_on[str(source)], gold_of, move_of))
    params = analyses.AnalysisParams(base_model=str(untuned), tuned_models={"specify": str(mine)}, k=10,
                                     n_resamples=200)
    retrievers = analyses.find_retrievers(cfg, params)
    assert retrievers.tuned == {"address": address, "specify": mine} and set(retrievers.missing) == {"broaden"}

    # F.1: on its own move's queries a tuned retriever returns only the gold (overlap g, the query-gold overlap at
    # every k); the untuned one two no-overlap fillers, then the gold (0 at k=1, g/3 from k=3 on).
    overlap = lexical_overlap.overlap_analysis(cfg, bench, params, retrievers, NOTEBOOKS["11"])
    values = overlap.per_k.set_index(["move", "system", "k"])["value"]
    # by hand (BM25 word sets, shared / union): address 1/10 (parser), 0, 1/10 (beam); specify 0, 2/9 (featur, word), 0
    gold = {"address": (1 / 10 + 0 + 1 / 10) / 3, "specify": (0 + 2 / 9 + 0) / 3}
    for move, g in gold.items():
        assert values[move, "gold", 1] == pytest.approx(g)
        assert values[move, "tuned", 1] == values[move, "tuned", 10] == pytest.approx(g)
        assert values[move, "baseline", 1] == 0 and values[move, "baseline", 3] == pytest.approx(g / 3)
    comparisons = overlap.comparisons.set_index(["Move", "k"])
    assert set(comparisons["Tuned overlaps less"]) == {"no"}  # the tuned retriever overlaps more here
    records = pd.read_csv(cfg.paths.tables / "analysis_overlap_comparisons.records.csv").set_index(["move", "metric"])
    assert set(records["subject"]) == {"tuned"} and set(records["reference"]) == {"baseline"}
    for move, g in gold.items():
        assert records.loc[(move, "Jaccard@1"), "value"] == pytest.approx(g)  # tuned - baseline, positive
        assert records.loc[(move, "Jaccard@3"), "value"] == pytest.approx(2 * g / 3)
    assert overlap.count.iloc[-1]["Comparisons made"] == 2 * len(params.comparison_ks)  # address + specify, test only
    assert overlap.count.iloc[-1]["Tuned overlaps less"] == 0
    assert "no silver split" in " ".join(overlap.notes)
    assert (cfg.paths.figures / "figure4_lexical_overlap.png").exists()

    # F.2: in a pool of the move's golds the untuned retriever ranks the gold last (3rd of 3, 2nd of Broaden's 2)
    table10 = oracle_pools.oracle_filtering(cfg, bench, params, retrievers, NOTEBOOKS["11"],
                                           {c: metric_key(c) for c in FULL_COLUMNS})
    specify = table10[table10["Move"] == "Specify"].set_index("Setup")
    assert set(specify["Pool size"]) == {3} and list(specify.index) == ["Baseline", "Tuned"]
    assert specify.loc["Baseline", "M@10"] == "33.3 [33.3, 33.3]" + DAGGER
    assert specify.loc["Tuned", "M@10"] == "100.0 [100.0, 100.0]" + DAGGER
    assert specify.loc["Baseline", "R@1"].startswith("0.0") and specify.loc["Tuned", "R@1"].startswith("100.0")
    broaden = table10[table10["Move"] == "Broaden"].set_index("Setup")
    assert broaden.loc["Baseline", "M@10"].startswith("50.0") and broaden.loc["Tuned", "M@10"] == ""
    # a pool of 3 golds: R@3 and above are 100 by construction and say so; R@1 is a result
    assert (set(specify["R@3"]) == {"100 (pool ≤ 3)" + DAGGER}
            and set(specify["R@100"]) == {"100 (pool ≤ 100)" + DAGGER})
    assert "pool ≤" not in " ".join(specify["R@1"])
    md = (cfg.paths.tables / "table10_oracle_filtering.md").read_text(encoding="utf-8")
    assert "'100 (pool ≤ k)': the pool holds no more than k candidates" in md
    csv = pd.read_csv(cfg.paths.tables / "table10_oracle_filtering.csv")
    tuned_p = csv.loc[(csv["Move"] == "Specify") & (csv["Setup"] == "Tuned"), "p"]
    assert tuned_p.dtype.kind == "f" and tuned_p.between(0, 1).all()  # numbers in the CSV, text in the shown table
    assert list(specify.loc[["Tuned"], "p"]) == [stats.format_p(v, 200) for v in tuned_p]
    oracle_records = pd.read_csv(cfg.paths.tables / "table10_oracle_filtering.records.csv").set_index("move")
    assert oracle_records.loc[["address", "specify"], "value"].tolist() == pytest.approx([100 * 2 / 3] * 2)

    # F.3 (MRR@10): untuned 1/3 everywhere; tuned on M: 1 on M's queries; on the others 1/2 (Address) or 1/3 (Specify)
    transfer_result = transfer.cross_move_transfer(cfg, bench, params, retrievers, NOTEBOOKS["11"])
    assert len(transfer_result.table) == 2 * 3  # two tuned retrievers x three queried moves
    expected = pd.DataFrame({"address": [2.0, 0.0], "broaden": [0.5, 0.0], "specify": [0.5, 2.0]},
                            index=["address", "specify"])
    pd.testing.assert_frame_equal(transfer_result.matrix, expected,
                                  check_names=False)  # rows: tuned on; columns: queried
    rows = transfer_result.table.set_index(["Tuned on", "Queries of"])
    assert rows.loc[("Specify", "Specify"), "Own move"] == "yes" and rows.loc[("Specify", "Address"), "Own move"] == ""
    assert rows.loc[("Specify", "Specify"), "Difference"].startswith("66.7")
    assert rows.loc[("Address", "Specify"), "Difference"].startswith("16.7")
    assert (rows.loc[("Address", "Specify"), "Relative change"] == "+50%"
            and rows.loc[("Specify", "Address"), "Relative change"] == "+0%")
    transfer_records = pd.read_csv(cfg.paths.tables / "analysis_cross_move_transfer.records.csv")
    own = transfer_records[transfer_records["scope"] == "own move vs other move"].set_index("move")
    assert (own.loc["specify", "subject"] == "tuned on specify"
            and own.loc["specify", "reference"] == "tuned on address")
    # on Address's queries 1 vs 1/3 (the Specify model), on Specify's 1 vs 1/2 (the Address model), in points
    assert own.loc[["address", "specify"], "value"].tolist() == pytest.approx([100 * 2 / 3, 50.0])
    assert (cfg.paths.tables / "analysis_cross_move_transfer.md").exists()
    title = transfer_result.figure.axes[0].get_title()
    n_address = len(bench.queries("address", "test"))
    assert f"Address unfiltered test N={n_address}{DAGGER}" in title and f"{DAGGER} fewer than 30 queries" in title
    annotations = [t.get_text() for t in transfer_result.figure.axes[0].texts]
    assert annotations and all("N=" in t for t in annotations)


def test_oracle_cell_marks_recall_trivial_only_when_the_pool_fits_in_k():
    from ratio_utils.evaluation.intervals import Cell
    from ratio_utils.retrieval_analysis.oracle_pools import oracle_cell_text

    c = Cell(1.0, 1.0, 1.0, 41)
    assert oracle_cell_text("R@100", c, 41) == "100 (pool ≤ 100)"
    assert oracle_cell_text("R@10", c, 10) == "100 (pool ≤ 10)"
    assert oracle_cell_text("R@10", c, 11) == c.text() == "100.0 [100.0, 100.0]"  # 11 candidates: a real result
    assert oracle_cell_text("M@100", c, 41) == c.text()  # MRR depends on the rank even in a small pool
    assert oracle_cell_text("R@100", Cell(1.0, 1.0, 1.0, 6), 13).endswith(DAGGER)


# -- how scores move with pool size -----------------------------------------------------------------------------------


def test_subsamples_keep_every_gold_and_nest():
    from ratio_utils.retrieval_analysis import pool_size

    pool_ids = [f"d{i:03d}" for i in range(200)]
    golds = {"d000", "d050", "d199", "not-in-pool"}
    subsamples = pool_size.subsample_pools(pool_ids, golds, seed=13)
    assert [s.fraction for s in subsamples] == list(pool_size.FRACTIONS)
    for sub in subsamples:
        assert {"d000", "d050", "d199"} <= sub.kept and "not-in-pool" not in sub.kept
        assert sub.size == 3 + round(sub.fraction * 197)
    assert all(a.kept < b.kept for a, b in zip(subsamples, subsamples[1:]))  # nested: one permutation, cut
    assert subsamples[-1].kept == frozenset(pool_ids)
    again = pool_size.subsample_pools(reversed(pool_ids), golds, seed=13)
    assert [s.kept for s in again] == [s.kept for s in subsamples]  # seeded, whatever the pool's order
    assert pool_size.subsample_pools(pool_ids, golds, seed=14)[0].kept != subsamples[0].kept


def _stored_run(lists: dict[str, list[str]]) -> pd.DataFrame:
    return pd.DataFrame([{"qid": q, "docid": d, "rank": r, "score": 1.0 / r}
                         for q, docs in lists.items() for r, d in enumerate(docs, 1)])


def test_subsample_scores_filter_the_stored_ranking_and_count_what_the_depth_cannot_decide():
    from ratio_utils.evaluation.metrics import per_query_metrics
    from ratio_utils.retrieval_analysis import pool_size

    distractors = [f"d{i:02d}" for i in range(40)]
    # depth 20: q1's gold at rank 15; q2's gold not in its stored top 20; q3's gold at rank 2
    run = _stored_run({"q1": distractors[:14] + ["g1"] + distractors[14:19], "q2": distractors[:20],
                       "q3": ["d00", "g3"] + distractors[1:19]})
    qrels = pd.DataFrame({"qid": ["q1", "q2", "q3"], "docid": ["g1", "g2", "g3"]})
    whole = frozenset(distractors) | {"g1", "g2", "g3"}
    scores = pool_size.subsample_scores(run, qrels, whole, depth=20)
    expected = per_query_metrics(run, qrels, ["MRR@10", "R@10"])
    pd.testing.assert_frame_equal(scores[["MRR@10", "R@10"]], expected)  # the whole pool: the run's own scores
    assert scores["determined"].all()  # q2: 20 candidates listed, so its gold is beyond 10
    # keep two distractors of the top 14: q1's gold moves to rank 3; q2 lists 2 candidates and no gold: undetermined
    kept = frozenset({"d03", "d07", "g1", "g2", "g3"})
    scores = pool_size.subsample_scores(run, qrels, kept, depth=20)
    assert scores.loc["q1", "MRR@10"] == pytest.approx(1 / 3) and scores.loc["q1", "determined"]
    assert scores.loc["q3", "MRR@10"] == 1.0 and scores.loc["q3", "determined"]
    assert not scores.loc["q2", "determined"] and scores.loc["q2", "MRR@10"] == 0
    assert scores.loc["q2", "MRR@10 upper"] == pytest.approx(1 / 3) and scores.loc["q2", "R@10 upper"] == 1.0
    assert scores.loc["q1", "MRR@10 upper"] == scores.loc["q1", "MRR@10"]
    # a run that lists fewer than its depth lists the whole pool: a gold missing from it is nowhere, 0 exactly
    short = pool_size.subsample_scores(run[run["rank"] <= 5], qrels, kept, depth=20)
    assert short["determined"].all()


def test_point_cells_are_evaluation_stats_intervals_and_bounds_where_undetermined():
    from ratio_utils.evaluation.intervals import IntervalCache
    from ratio_utils.retrieval_analysis import pool_size

    per_query = pd.DataFrame({"MRR@10": [1.0, 0.5, 0.0, 0.25], "R@10": [1.0, 1.0, 0.0, 1.0], "determined": True},
                             index=pd.Index(["a", "b", "c", "d"], name="qid"))
    per_query = per_query.assign(**{"MRR@10 upper": per_query["MRR@10"], "R@10 upper": per_query["R@10"]})
    row = pool_size.point_row(per_query, IntervalCache(None, seed=7, n_resamples=300))
    low, high = stats.bootstrap_ci(per_query["MRR@10"].to_numpy(), n_resamples=300, seed=7)
    assert (row["MRR@10"], row["MRR@10 low"], row["MRR@10 high"]) == pytest.approx((43.75, 100 * low, 100 * high))
    assert row["Undetermined"] == 0 and row["MRR@10 lower bound"] == row["MRR@10 upper bound"] == pytest.approx(43.75)
    open_ = per_query.assign(determined=[True, True, False, True], **{"MRR@10 upper": [1.0, 0.5, 0.5, 0.25]})
    row = pool_size.point_row(open_, IntervalCache(None, seed=7, n_resamples=300))
    assert row["MRR@10"] is None and row["Undetermined"] == 1  # no value is guessed
    assert (row["MRR@10 lower bound"], row["MRR@10 upper bound"]) == pytest.approx((43.75, 56.25))


def test_pool_size_stage_on_the_tiny_benchmark(cfg, bench):
    """BM25 runs of notebook 08 on the tiny benchmark: the whole-pool point is the run's own MRR@10, the others are
    scored on subsamples, one figure per move with a log x axis and the paper's pool size marked."""
    import matplotlib.pyplot as plt

    from ratio_utils.evaluation.metrics import evaluate_run, per_query_metrics
    from ratio_utils.retrieval.bm25 import BM25Retriever
    from ratio_utils.retrieval.runs import RunInfo, write_system_run
    from ratio_utils.retrieval_analysis import pool_size
    from ratio_utils.stages.analyses import AnalysesStage

    for move in ("address", "broaden", "specify"):
        evalset = bench.eval_set(move, "test")
        run = BM25Retriever(1, name="BM25-unigram").search(evalset.queries, evalset.pool, k=100)
        write_system_run(run, cfg.paths.retrieval_runs, RunInfo("BM25-unigram", "-", "Baseline", "bm25", move, "test",
                                                                bench.checksum(), "08_retrieval_baselines"))
    stage = AnalysesStage.from_config(cfg)
    result = stage.pool_size()
    assert result is stage.pool_size()  # computed and written once
    rows = result.numeric[result.numeric["System"] == "BM25-unigram"]
    assert set(rows["Move"]) == {"address", "broaden", "specify"} and set(rows["Fraction"]) == {
        "1/16", "1/8", "1/4", "1/2", "whole pool"}
    pool = bench.pool("test")
    assert rows.loc[rows["Fraction"] == "whole pool", "Pool size"].eq(len(pool)).all()
    for move, group in rows.groupby("Move"):  # every gold of the move's queries kept; 1/16 of the rest rounds to none
        golds = set(bench.eval_set(move, "test").qrels["docid"])
        smallest = round(len(set(pool["docid"]) - golds) / 16)
        assert group.loc[group["Fraction"] == "1/16", "Pool size"].item() == len(golds & set(pool["docid"])) + smallest
    for move in ("address", "specify"):
        evalset = bench.eval_set(move, "test")
        run = BM25Retriever(1).search(evalset.queries, evalset.pool, k=100)
        whole = rows[(rows["Move"] == move) & (rows["Fraction"] == "whole pool")].iloc[0]
        assert whole["MRR@10"] == pytest.approx(100 * evaluate_run(run, evalset.qrels, [10])["MRR@10"])
        values = per_query_metrics(run, evalset.qrels, ["MRR@10"])["MRR@10"].to_numpy()
        low, high = stats.bootstrap_ci(values, n_resamples=stage.params.n_resamples, seed=cfg.seed)
        assert (whole["MRR@10 low"], whole["MRR@10 high"]) == pytest.approx((100 * low, 100 * high))
    assert rows["Undetermined"].eq(0).all()  # k = 100 lists the whole tiny pool
    notes = " ".join(result.notes)
    assert "all-MiniLM-L6-v2 (tuned), address: no test run file" in notes and "404,371" in notes
    assert ("not comparable with ours" in result.reading
            and "no value at the paper's pool size is estimated" in result.reading)
    md = (cfg.paths.tables / "analysis_pool_size.md").read_text(encoding="utf-8")
    assert "whole pool" in md and result.reading in md
    assert (set(result.figures) == {"address", "broaden", "specify"}
            and all(p.exists() for p in result.figures.values()))
    figure = pool_size.draw_pool_size_figure(rows[rows["Move"] == "address"], "address", "unfiltered test")
    for ax in figure.axes:
        assert ax.get_xscale() == "log"
        assert any(list(line.get_xdata()) == [pool_size.PAPER_TEST_POOL] * 2 for line in ax.get_lines())
    figure.canvas.draw()
    (legend,) = figure.legends  # one legend for both panels, beside them: it covers no line and no footer
    assert not any(legend.get_window_extent().overlaps(ax.get_window_extent()) for ax in figure.axes)
    assert len(legend.get_texts()) == rows.loc[rows["Move"] == "address", "System"].nunique()
    plt.close(figure)


def test_vector_ranks_are_the_ranks_of_the_full_ranking_filtered_to_each_subsample():
    from ratio_utils.evaluation.metrics import relevant_ranks
    from ratio_utils.retrieval_analysis import pool_size

    rng = np.random.default_rng(3)
    pool_ids = [f"d{i:03d}" for i in range(120)]
    pool_vectors = rng.normal(size=(120, 8)).astype(np.float32)
    query_ids = ["q0", "d005", "q2"]  # the second query's own sentence is in the pool: never ranked
    query_vectors = rng.normal(size=(3, 8)).astype(np.float32)
    qrels = pd.DataFrame({"qid": ["q0", "q0", "d005", "q2"], "docid": ["d010", "d020", "d030", "d040"]})
    subsamples = pool_size.subsample_pools(pool_ids, set(qrels["docid"]), seed=5)
    ranks = pool_size.vector_ranks(query_ids, query_vectors, pool_ids, pool_vectors, qrels, subsamples, chunk=2)
    scores = query_vectors @ pool_vectors.T
    full = pd.DataFrame([{"qid": q, "docid": d, "rank": 0, "score": float(scores[i, j])}
                         for i, q in enumerate(query_ids) for j, d in enumerate(pool_ids) if d != q])
    for j, sub in enumerate(subsamples):
        expected = relevant_ranks(full[full["docid"].isin(sub.kept)], qrels).set_index(["qid", "docid"])["rank"]
        assert ranks[j].tolist() == expected.loc[ranks.index].astype(float).tolist()


def test_cached_embeddings_decide_what_a_shallow_dense_run_cannot(cfg, bench, monkeypatch):
    """A dense run of depth 2 on the tiny pool: on every subsample the stored list is too short, so the golds outside
    it are ranked from the run's cached embeddings, and each point equals the full ranking's scores on the
    subsample."""
    from fake_encoder import FakeEncoder

    from ratio_utils.evaluation.intervals import IntervalCache
    from ratio_utils.evaluation.metrics import per_query_metrics
    from ratio_utils.retrieval.runs import RunInfo, write_system_run
    from ratio_utils.retrieval_analysis import pool_size

    prefixes = ("query: ", "document: ")
    encoder = FakeEncoder(query_prefix=prefixes[0], doc_prefix=prefixes[1], cache_dir=cfg.paths.embedding_cache)
    pool = bench.pool("test")
    for move in ("address", "broaden", "specify"):
        evalset = bench.eval_set(move, "test")
        info = RunInfo("fake", "generic", "Baseline", "dense", move, "test", bench.checksum(),
                       "08_retrieval_baselines",
                       k=2, source="fake", retriever=encoder.describe())
        write_system_run(encoder.search(evalset.queries, pool, k=2), cfg.paths.retrieval_runs, info)
    monkeypatch.setattr(pool_size, "dense_retriever", lambda model, qp, dp, settings: FakeEncoder(
        query_prefix=qp, doc_prefix=dp, cache_dir=settings.cache_dir, fp16_storage=settings.fp16_storage))
    runs, _, notes = pool_size.load_runs(cfg, bench, ["fake", "BM25-unigram"])
    assert set(runs) == {("fake", m) for m in ("address", "broaden", "specify")} and len(notes) == 3
    assert all(runs[key].exact is not None for key in runs)  # read from the cache the search wrote
    points = pool_size.pool_size_points(runs, IntervalCache(None, cfg.seed, 200))
    assert points["Undetermined"].eq(0).all() and points["Ranked from embeddings"].gt(0).any()
    for move in ("address", "specify"):
        evalset = bench.eval_set(move, "test")
        full = encoder.search(evalset.queries, pool, k=len(pool))
        draws = runs[("fake", move)].draws
        assert len(draws) == pool_size.POOL_SEEDS
        for j, sub in enumerate(draws[0]):
            # each point is the mean over the draws of the full ranking's scores on that draw's subsample
            per_draw = [per_query_metrics(full[full["docid"].isin(draw[j].kept)], evalset.qrels,
                                          ["MRR@10", "R@10"]).mean()
                        for draw in draws]
            expected = pd.concat(per_draw, axis=1).mean(axis=1)
            row = points[(points["Move"] == move)
                         & (points["Fraction"] == pool_size.fraction_label(sub.fraction))].iloc[0]
            assert (row["MRR@10"], row["R@10"]) == pytest.approx((100 * expected["MRR@10"], 100 * expected["R@10"]))
            mrr = [100 * d["MRR@10"] for d in per_draw]
            assert (row["MRR@10 seed min"], row["MRR@10 seed max"]) == pytest.approx((min(mrr), max(mrr)))
    # without the cache the same queries are undetermined and shown as bounds
    monkeypatch.setattr(pool_size, "cached_vectors", lambda *a, **kw: None)
    runs, _, _ = pool_size.load_runs(cfg, bench, ["fake"])
    bounded = pool_size.pool_size_points(runs, IntervalCache(None, cfg.seed, 200))
    assert bounded["Undetermined"].gt(0).any() and bounded.loc[bounded["Undetermined"] > 0, "MRR@10"].isna().all()
    assert (bounded["MRR@10 lower bound"] <= points["MRR@10"] + 1e-9).all()
    assert (points["MRR@10"] <= bounded["MRR@10 upper bound"] + 1e-9).all()


def test_pool_draws_are_seeded_nested_and_keep_every_gold():
    from ratio_utils.retrieval_analysis import pool_size

    pool_ids = [f"d{i:03d}" for i in range(400)]
    golds = {f"d{i:03d}" for i in range(0, 400, 40)}
    draws = pool_size.subsample_draws(pool_ids, golds, seed=13, n_seeds=5)
    assert len(draws) == 5 and draws[0] == pool_size.subsample_pools(pool_ids, golds, seed=13)
    assert draws[1] == pool_size.subsample_pools(pool_ids, golds, seed=14)
    assert len({draw[0].kept for draw in draws}) == 5  # five different 1/16 pools, one size, every gold in each
    assert ({draw[0].size for draw in draws} == {len(golds) + round(390 / 16)}
            and all(golds <= d[0].kept for d in draws))
    assert {draw[-1].kept for draw in draws} == {frozenset(pool_ids)}
    with pytest.raises(ValueError, match="n_seeds=0"):
        pool_size.subsample_draws(pool_ids, golds, seed=13, n_seeds=0)


def _points(rows):
    from ratio_utils.retrieval_analysis import pool_size

    columns = ["System", "Move", "fraction", "MRR@10", "Undetermined", "Gold share %", "MRR@10 seed min",
               "MRR@10 seed max", "Seeds"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["Fraction"] = frame["fraction"].map(pool_size.fraction_label)
    return frame


def test_the_pool_size_reading_says_what_each_move_shows():
    """The review's case: the order flips with pool size in one move and the tuned - baseline difference shrinks;
    the reading says so move by move, with the gold share, and gives no generic advice."""
    from ratio_utils.retrieval_analysis import pool_size

    points = _points([
        ("tuned", "specify", 1 / 16, 40.0, 0, 38.0, 39.0, 41.0, 5),
        ("base", "specify", 1 / 16, 26.1, 0, 38.0, 25.5, 26.5, 5),
        ("tuned", "specify", 1.0, 20.0, 0, 3.7, 20.0, 20.0, 5), ("base", "specify", 1.0, 12.4, 0, 3.7, 12.4, 12.4, 5),
        ("bm25", "address", 1 / 16, 30.0, 0, 20.0, 28.0, 31.0, 5),
        ("dense", "address", 1 / 16, 25.0, 0, 20.0, 24.0, 26.0, 5),
        ("bm25", "address", 1.0, 10.0, 0, 2.0, 10.0, 10.0, 5), ("dense", "address", 1.0, 11.0, 0, 2.0, 11.0, 11.0, 5),
    ])
    text = pool_size.reading(points, whole_pool=20_000)
    specify = pool_size.move_reading(points[points["Move"] == "specify"], "specify")
    assert specify == ("Specify: gold share 38.0 % at 1/16 against 3.7 % at whole pool; MRR@10 tuned 40.0 → 20.0, "
                       "base 26.1 → 12.4; the order tuned > base holds at every exact pool size; tuned − base +13.9 "
                       "at 1/16 → +7.6 at whole pool.")
    address = pool_size.move_reading(points[points["Move"] == "address"], "address")
    assert "the order changes with pool size: bm25 > dense at 1/16; dense > bm25 at whole pool" in address
    assert address in text and specify in text and text.index("Address") < text.index("Specify")
    assert "varies by at most 3.0 points" in text and "gold-heavier" in text
    assert "compare the orderings" not in text and "no value at the paper's pool size is estimated" in text
    undecided = points[points["Move"] == "address"].assign(Undetermined=[0, 0, 1, 0])
    assert pool_size.move_reading(undecided, "address") == ("Address: fewer than two pool sizes with exact points, "
                                                            "nothing to read.")
