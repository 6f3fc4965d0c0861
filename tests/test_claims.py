"""Conclusions a reader can draw: who produced the labels is carried into every table built on them,
and the claims table decides each claim of the paper by its stated rule on crafted records."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from ratio_utils.dataset.benchmark import load_benchmark, write_pairs
from ratio_utils.param_sections import RetrievalParams
from ratio_utils.publish import label_sources
from ratio_utils.publish.published import read_records, records_frame, write_table
from ratio_utils.reporting import claims
from ratio_utils.reporting.paper_tables import BASELINE_TABLE, Expected, assemble_tables
from ratio_utils.stages.retrieval_baselines import run_baselines
from ratio_utils.systems.spec import SystemSpec

STAND_IN = label_sources.LabelSource(role="judge", configured="gpt-5.4", answered_by=("anthropic-claude-standin",),
                                     replayed_from=label_sources.REPLAYED_FROM,
                                     detail={"pairs without a verdict": {"address": 0}})

# notebook 08's rows with bm25_ngrams [1, 2]
BM25_ROWS = (SystemSpec("BM25-unigram", "-", "bm25", "1"), SystemSpec("BM25-bigram", "-", "bm25", "2"))


@pytest.fixture
def bench(cfg, tiny_benchmark):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    return load_benchmark(cfg.paths.benchmark)


# -- who produced the labels --------------------------------------------------------------------------------


def test_a_stand_in_is_named_beside_the_configured_model():
    note = STAND_IN.note()
    assert STAND_IN.stand_in
    assert "gpt-5.4 configured" in note and "produced by anthropic-claude-standin" in note and "a stand-in" in note
    own = label_sources.LabelSource(role="reranker", configured="gpt-5-mini", answered_by=("gpt-5-mini",))
    assert not own.stand_in and "stand-in" not in own.note() and "from the endpoint" in own.note()


def test_the_silver_record_is_outside_the_benchmark_checksum(bench):
    before = bench.checksum()
    label_sources.write_silver_source(bench.root, STAND_IN)
    assert bench.checksum() == before  # recording who judged retrains nothing
    assert label_sources.read_silver_source(bench.root) == STAND_IN
    label_sources.remove_silver_source(bench.root)
    assert label_sources.read_silver_source(bench.root) is None


def test_silver_sources_only_when_a_move_queries_silver(bench):
    assert label_sources.silver_sources(bench) == []
    write_pairs(bench.queries("specify", "test").head(2), bench.root, "specify", "silver")
    unrecorded = label_sources.silver_sources(bench)
    assert len(unrecorded) == 1 and "not recorded" in unrecorded[0].note()
    label_sources.write_silver_source(bench.root, STAND_IN)
    assert label_sources.silver_sources(bench) == [STAND_IN]


def test_a_table_built_on_silver_carries_the_silver_provenance(cfg, bench):
    write_pairs(bench.queries("specify", "test").head(2), bench.root, "specify", "silver")
    label_sources.write_silver_source(bench.root, STAND_IN)
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test", "silver"]))
    result = assemble_tables(cfg, bench, expected=Expected(rows=BM25_ROWS), n_resamples=200)
    for name in ("table1_silver_main", "table8_silver_full", BASELINE_TABLE):
        record = json.loads((cfg.paths.tables / f"{name}.provenance.json").read_text())
        assert record["label_sources"] == [STAND_IN.to_json()], name
        assert STAND_IN.note() in (cfg.paths.tables / f"{name}.md").read_text(), name
        assert result.notes[name][0] == STAND_IN.note(), name  # first, in the notebook's display as well
    # the unfiltered test set rests on no LLM label
    assert json.loads((cfg.paths.tables / "table7_test_full.provenance.json").read_text())["label_sources"] == []


def test_a_figure_names_who_labelled_its_queries(cfg):
    import matplotlib.pyplot as plt

    from ratio_utils.publish.published import save_figure

    fig, ax = plt.subplots()
    ax.bar([0], [1])
    save_figure(fig, "labelled", cfg, labels=[STAND_IN])
    assert any(STAND_IN.note() in text.get_text() for text in fig.texts)
    record = json.loads((cfg.paths.figures / "labelled.provenance.json").read_text())
    assert record["label_sources"] == [STAND_IN.to_json()] and STAND_IN.note() in record["notes"]
    plt.close(fig)


# -- records ------------------------------------------------------------------------------------------------


def test_records_round_trip_and_refuse_unknown_columns(cfg):
    rows = records_frame([{"move": "address", "query_set": "silver", "metric": "M@10", "subject": "a",
                           "reference": "b",
                           "value": 1.5, "low": 0.5, "high": 2.5, "n": 40, "p": 0.01}])
    write_table(pd.DataFrame({"x": [1]}), "some_table", cfg, records=rows, latex=False)
    back = read_records(cfg)
    assert back.loc[0, "table"] == "some_table" and back.loc[0, "value"] == 1.5 and back.loc[0, "reference"] == "b"
    with pytest.raises(ValueError, match="not among"):
        records_frame([{"moves": "address"}])


def test_baseline_comparisons_are_paired_differences_of_the_tables_cells(cfg, bench):
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test"]))
    result = assemble_tables(cfg, bench, expected=Expected(rows=BM25_ROWS), n_resamples=200)
    records = read_records(cfg)
    diff = records[(records["table"] == BASELINE_TABLE) & (records["move"] == "specify")].iloc[0]
    cells = result.numeric["table7_test_full"].set_index("System")
    assert diff["subject"] == "BM25-bigram" and diff["reference"] == "BM25-unigram" and diff["scope"] == "bm25 n-gram"
    assert diff["value"] == pytest.approx(cells.loc["BM25-bigram", "Specify M@10"]
                                          - cells.loc["BM25-unigram", "Specify M@10"])
    assert diff["low"] <= diff["value"] <= diff["high"]


def _reversed(ranking: pd.DataFrame) -> pd.DataFrame:
    """A run file's ranking turned upside down: a run that really differs from it."""
    ranking = ranking.sort_values(["qid", "rank"], ascending=[True, False])
    ranking["rank"] = ranking.groupby("qid").cumcount() + 1
    ranking["score"] = -ranking["rank"].astype(float)
    return ranking


def _write_tuned(cfg, model, split, ranking_of):
    """A "tuned" run file of `model` on Specify `split` (as notebook 09 writes it) from BM25-unigram's run."""
    from dataclasses import replace

    from ratio_utils.retrieval.runs import read_run, read_run_info, run_path, write_system_run

    source = run_path(cfg.paths.retrieval_runs, "BM25-unigram", "specify", split)
    tuned = replace(read_run_info(source), model=model, prefix="generic", setup="Tuned", family="dense",
                    stage="09_finetune")
    write_system_run(ranking_of(read_run(source)), cfg.paths.retrieval_runs, tuned)
    return tuned


def test_best_tuned_is_compared_with_the_best_bm25_fixed_in_params_on_the_same_queries(cfg, bench):
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test"]))
    tuned = _write_tuned(cfg, "mini", "test", _reversed)
    rows = (*BM25_ROWS, SystemSpec("mini", "generic", "dense", "mini", "Tuned"))
    # nothing fixed and no validation run: no "best" system can be chosen without the test queries, so no comparison
    result = assemble_tables(cfg, bench, n_resamples=200, expected=Expected(rows=rows, tuned_moves=("specify",)))
    records = read_records(cfg)
    assert not (records["scope"] == "best tuned vs best BM25").any()
    assert any("Specify, test: best BM25: no validation run of the candidates" in n
               for n in result.notes[BASELINE_TABLE])

    fixed = (("bm25", "BM25-bigram"), ("tuned", "mini (tuned)"))
    result = assemble_tables(cfg, bench, n_resamples=200,
                             expected=Expected(rows=rows, tuned_moves=("specify",), best_systems=fixed))
    records = read_records(cfg)
    row = records[(records["table"] == BASELINE_TABLE) & (records["scope"] == "best tuned vs best BM25")]
    assert list(row["move"]) == ["specify"]  # only the move with a tuned run
    row = row.iloc[0]
    cells = result.numeric["table7_test_full"].set_index(["System", "Setup"])["Specify M@10"]
    assert row["subject"] == tuned.system and row["reference"] == "BM25-bigram"
    assert row["value"] == pytest.approx(cells["mini", "Tuned"] - cells["BM25-bigram", "Baseline"])
    assert row["value"] != 0 and row["low"] <= row["value"] <= row["high"]
    assert ("Specify, test: best BM25: fixed a priori in params; best tuned: fixed a priori in params."
            in result.notes[BASELINE_TABLE])


def test_a_best_system_is_chosen_on_validation_although_another_wins_on_the_tested_queries(cfg, bench):
    """Issue 45, 5: "best tuned" is the tuned run that leads on the validation split (a), although b leads on test."""
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1], k=10, splits=["validation", "test"]))
    for split, good in (("validation", "a"), ("test", "b")):
        for model in ("a", "b"):
            _write_tuned(cfg, model, split, (lambda ranking: ranking) if model == good else _reversed)
    rows = (BM25_ROWS[0], *(SystemSpec(m, "generic", "dense", m, "Tuned") for m in ("a", "b")))
    result = assemble_tables(cfg, bench, n_resamples=200, expected=Expected(
        rows=rows, tuned_moves=("specify",), best_systems=(("bm25", "BM25-unigram"),)))
    cells = result.numeric["table7_test_full"].set_index(["System", "Setup"])["Specify M@10"]
    assert cells["b", "Tuned"] > cells["a", "Tuned"]  # chosen on the tested queries, b would be "best"
    records = read_records(cfg)
    row = records[(records["scope"] == "best tuned vs best BM25") & (records["query_set"] == "test")]
    assert list(row["subject"]) == ["a (tuned)"] and list(row["reference"]) == ["BM25-unigram"]
    assert not (records["query_set"] == "validation").any()  # validation chooses; it is never tested on
    rule = next(n for n in result.notes[BASELINE_TABLE] if n.startswith("Specify, test:"))
    assert "best tuned: chosen on the validation split (MRR@10" in rule


# -- the claims table's rule ----------------------------------------------------------------------------------


def _record(table, move, query_set, value, low, high, p, n, **extra):
    return {"table": table, "move": move, "query_set": query_set, "metric": "M@10", "subject": "tuned",
            "reference": "baseline", "value": value, "low": low, "high": high, "p": p, "n": n, **extra}


CLAIM = claims.Claim("Fine-tuning helps", "§5.2", "finetune_tuned_vs_baseline", +1,
                     moves=("address", "broaden", "specify"))


@pytest.mark.parametrize(("value", "low", "high", "p", "n", "expected"), [
    (5.0, 1.0, 9.0, 0.001, 100, claims.SUPPORTED),       # interval above 0, paper's direction
    (-5.0, -9.0, -1.0, 0.001, 100, claims.CONTRADICTED),  # interval below 0: the opposite
    (2.0, -1.0, 5.0, 0.2, 100, claims.NOT_SHOWN),        # interval covers 0
    (5.0, 1.0, 9.0, 0.001, 29, claims.NOT_SHOWN),        # too few queries to decide
    (5.0, 1.0, 9.0, 0.06, 100, claims.NOT_SHOWN),        # interval and test disagree: undecided
])
def test_one_comparison_is_decided_by_the_stated_rule(value, low, high, p, n, expected):
    assert claims.decide(value, low, high, p, n, +1) == expected
    mirrored = {claims.SUPPORTED: claims.CONTRADICTED, claims.CONTRADICTED: claims.SUPPORTED}.get(expected, expected)
    assert claims.decide(value, low, high, p, n, -1) == mirrored


def test_claims_table_on_crafted_records():
    records = records_frame([
        _record("finetune_tuned_vs_baseline", "specify", "silver", 7.6, 3.6, 11.7, 1e-4, 185),
        _record("finetune_tuned_vs_baseline", "address", "silver", -4.0, -7.0, -1.0, 0.01, 61),
        _record("finetune_tuned_vs_baseline", "broaden", "silver", 6.9, -4.2, 25.0, 1.0, 6),
        _record("finetune_tuned_vs_baseline", "specify", "test", 7.5, 6.3, 8.7, 1e-4, 1861),
        _record("other_table", "address", "test", 9.0, 8.0, 10.0, 1e-4, 100),  # another claim's: not read
    ])
    table = claims.claims_table(records, (CLAIM,)).set_index("move")
    assert table.loc["Specify", "silver: verdict"] == claims.SUPPORTED
    assert ("+7.6 [3.6, 11.7]" in table.loc["Specify", "silver: evidence"]
            and "n 185" in table.loc["Specify", "silver: evidence"])
    assert table.loc["Address", "silver: verdict"] == claims.CONTRADICTED
    assert (table.loc["Broaden", "silver: verdict"] == claims.NOT_SHOWN
            and "†" in table.loc["Broaden", "silver: evidence"])
    assert table.loc["Address", "unfiltered test: verdict"] == claims.CANNOT_TEST
    # the table measured other moves on the unfiltered test set: this move's comparison is missing, the reason generic
    assert table.loc["Address", "unfiltered test: evidence"] == CLAIM.cannot_test
    silver_only = claims.claims_table(records[records["query_set"] == "silver"], (CLAIM,)).set_index("move")
    assert silver_only.loc["Specify", "unfiltered test: evidence"] == \
        "not measured on this query set (finetune_tuned_vs_baseline: silver only)"
    counts = claims.verdict_counts(table.reset_index())
    assert counts.loc[claims.SUPPORTED, "silver"] == 1 and counts.loc[claims.CANNOT_TEST, "unfiltered test"] == 2


def test_one_comparison_against_the_paper_contradicts_a_claim_of_every_comparison():
    overlap = claims.Claim("less overlap", "F.1", "analysis_overlap_comparisons", -1, moves=("specify",))
    rows = [_record("analysis_overlap_comparisons", "specify", "test", -0.01, -0.02, -0.005, 1e-3, 500)
            for _ in range(3)]
    assert claims.claims_table(records_frame(rows), (overlap,)).loc[0, "unfiltered test: verdict"] == claims.SUPPORTED
    rows.append(_record("analysis_overlap_comparisons", "specify", "test", 0.02, 0.01, 0.03, 1e-3, 500))
    assert claims.claims_table(records_frame(rows), (overlap,)).loc[0,
                                                                    "unfiltered test: verdict"] == claims.CONTRADICTED
    rows[-1] = _record("analysis_overlap_comparisons", "specify", "test", 0.0, -0.01, 0.01, 0.9, 500)
    assert claims.claims_table(records_frame(rows), (overlap,)).loc[0, "unfiltered test: verdict"] == claims.NOT_SHOWN


# -- multiplicity and effective n ----------------------------------------------------------------------------------


def test_verdicts_are_decided_on_holm_adjusted_p_over_the_query_sets_family():
    from statsmodels.stats.multitest import multipletests

    # the review's case: p 0.0072 alone supports the claim; beside 39 other comparisons of the silver set it does not
    decisive = _record("finetune_tuned_vs_baseline", "specify", "silver", 7.6, 3.6, 11.7, 0.0072, 185)
    others = [_record("finetune_tuned_vs_baseline", "address", "silver", 0.5, -1.0, 2.0, 0.5, 100 + i)
              for i in range(39)]
    alone = claims.claims_table(records_frame([decisive]), (CLAIM,)).set_index("move")
    assert alone.loc["Specify", "silver: verdict"] == claims.SUPPORTED
    records = records_frame([decisive, *others,
                             _record("finetune_tuned_vs_baseline", "specify", "test", 7.5, 6.3, 8.7, 0.0072, 1861)])
    family = claims.comparison_family(records, (CLAIM,))
    silver = family[family["query_set"] == "silver"]
    np.testing.assert_allclose(silver["p_holm"], multipletests(silver["p"], method="holm")[1])
    assert claims.family_sizes(family) == {"silver": 40, "test": 1}  # one family per query set
    table = claims.claims_table(records, (CLAIM,)).set_index("move")
    assert table.loc["Specify", "silver: verdict"] == claims.NOT_SHOWN
    assert "p 0.0072, Holm p 0.2880" in table.loc["Specify", "silver: evidence"]
    assert table.loc["Specify", "unfiltered test: verdict"] == claims.SUPPORTED  # the test set's family is 1
    statement = claims.family_statement(family)
    assert "silver: 40 comparisons" in statement and "unfiltered test: 1 comparisons" in statement


def test_a_comparison_with_three_differences_that_can_differ_has_effective_n_3_and_is_not_shown():
    from ratio_utils.evaluation.intervals import IntervalCache, cell_record, paired_cell
    from ratio_utils.evaluation.rerank_promotion import kept_first_stage_order

    qids = [f"q{i:02d}" for i in range(50)]
    first = pd.DataFrame([(q, f"d{q}{r}", r) for q in qids for r in range(1, 11)], columns=["qid", "docid", "rank"])
    reranked = first.copy()
    changed = qids[:3]  # three answered requests moved their gold to the top; 47 kept the first-stage order
    for q in changed:
        mask = reranked["qid"] == q
        reranked.loc[mask, "rank"] = 11 - reranked.loc[mask, "rank"]
    fixed = kept_first_stage_order(reranked, first)
    assert fixed == set(qids[3:])
    base = pd.Series(0.1, index=qids)
    after = base.copy()
    after[changed] = 1.0
    diff, p = paired_cell(IntervalCache(None, seed=13, n_resamples=500), after, base, fixed=fixed)
    assert (diff.n, diff.n_effective) == (50, 3)
    record = cell_record(diff, p, table="rerank_vs_first_stage", move="specify", query_set="silver", metric="M@10",
                         subject="x + rerank", reference="x")
    rerank = next(c for c in claims.CLAIMS if c.table == "rerank_vs_first_stage")
    row = claims.claims_table(records_frame([record]), (rerank,)).set_index("move").loc["Specify"]
    # every difference is >= 0 and p is as small as 3 sign flips allow, yet 3 queries cannot decide it
    assert diff.low >= 0 and row["silver: verdict"] == claims.NOT_SHOWN
    assert "n 50, effective n 3" in row["silver: evidence"] and "†" in row["silver: evidence"]
    # a sign-flip test on 3 non-zero differences cannot go below 2/8; and even at a small p, 3 queries decide nothing
    assert p >= 0.2
    assert claims.decide(100 * diff.value, 100 * diff.low, 100 * diff.high, 0.001,
                         diff.effective_n, +1) == claims.NOT_SHOWN


def test_the_paper_values_have_one_home_and_the_broaden_rerank_cell_is_filled():
    from ratio_utils import paper_values
    from ratio_utils.evaluation import rerank_promotion
    from ratio_utils.reporting import summary_headline

    rerank = next(c for c in claims.CLAIMS if c.table == "rerank_vs_first_stage")
    assert "+6.0 (all-mpnet-base-v2)" in rerank.paper["broaden"] and "+8.6" in rerank.paper["broaden"]
    assert "Appendix D" in rerank.where
    assert rerank_promotion.PAPER_PROMOTION == paper_values.paper_section("rerank_promotion")["rates"]
    gains = {quantity: paper for quantity, _, _, paper in summary_headline.PAPER_SILVER_GAINS}
    assert gains["Tuned - Baseline"] == paper_values.paper_section("claims.finetune")["gain"]
    with pytest.raises(KeyError, match="paper_values.toml: no section"):
        paper_values.paper_section("claims.nowhere")


# -- which system is "best" -------------------------------------------------------------------------------------------


def _scores(rows):
    return pd.DataFrame(rows, columns=["system", "move", "split", "value"])


SCORES = _scores([("BM25-unigram", "specify", "validation", 20.0), ("BM25-trigram", "specify", "validation", 18.0),
                  ("BM25-unigram", "specify", "test", 19.0), ("BM25-trigram", "specify", "test", 23.0),
                  ("BM25-trigram", "specify", "silver", 30.0), ("BM25-unigram", "specify", "silver", 25.0)])


@pytest.mark.parametrize("tested", ["test", "silver"])
def test_a_best_system_is_chosen_on_validation_never_on_the_tested_queries(tested):
    choice = claims.choose_best(SCORES, "specify", tested)
    # the test and the silver split would pick the trigram; validation picks the unigram
    assert choice.system == "BM25-unigram" and "validation" in choice.rule
    for on in ("test", "silver"):
        with pytest.raises(ValueError, match="selects on the test data"):
            claims.choose_best(SCORES, "specify", tested, selection_split=on)


def test_a_best_system_fixed_in_params_is_taken_as_it_is_and_must_exist():
    assert claims.choose_best(SCORES, "specify", "test", fixed="BM25-trigram") == \
        claims.BestChoice("BM25-trigram", "fixed a priori in params")
    with pytest.raises(ValueError, match="BM25-bigram.*specify"):
        claims.choose_best(SCORES, "specify", "test", fixed="BM25-bigram")
    none = claims.choose_best(SCORES[SCORES["split"] != "validation"], "specify", "test")
    assert none.system is None and "cannot be chosen without the test queries" in none.rule
