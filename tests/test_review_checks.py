"""Checks a reviewer would ask for (issue 13): the build catches an injected leak, the table and figure
functions the notebooks call give the right values on fixtures, and `ratio-evaluate`
scores the dense, instruction and ColBERT branches as a direct computation does (prefixes included)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from test_dataset import YEARS, distractor, frames, pair

from ratio_utils import dataset, mining
from ratio_utils.apps.evaluate import main as evaluate_main
from ratio_utils.dataset import LeakageError, build_benchmark
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.lexicon import markers as lexicon
from ratio_utils.param_sections import DatasetParams
from ratio_utils.schema import Move

# --- the build runs its leakage checks -------------------------------------------------------------------------------


def _leaky_inputs():
    """A test query whose sentence is also a training gold: the build must not ship it in both splits."""
    shared = "a sentence that is the query of a test pair and the gold of a training pair."
    return frames(
        [
            pair("A", 2004, None, "specify", "a training query about treebanks of many languages.", shared),
            pair("C", 2012, None, "specify", shared, "a test gold about rouge counting n-grams of the references."),
            pair("B", 2008, None, "broaden", "a validation query about noise in embeddings.",
                 "a validation gold about regularisers."),
        ],
        [distractor("C", 2012, None, "common_irrelevant", "a distractor of the test papers about metrics.")],
    )


def test_build_repairs_a_train_test_overlap_and_counts_it():
    built = build_benchmark(*_leaky_inputs(), DatasetParams(split_by="year", splits=YEARS))
    assert built.counts["pairs.dropped.train_pair_touching_test"] == 1
    assert (built.pairs["split"] != "train").all()


def test_build_catches_an_injected_leak_when_its_repair_is_gone(monkeypatch):
    """With the train/test repair disabled, the leaky inputs must stop the build with a LeakageError.

    Fails if build_benchmark stops calling its leakage checks (test_dataset tests the checks alone)."""
    monkeypatch.setattr(dataset.in_memory, "_remove_test_sentences_from_train",
                        lambda pairs, pools, counts: (pairs, pools))
    with pytest.raises(LeakageError):
        build_benchmark(*_leaky_inputs(), DatasetParams(split_by="year", splits=YEARS))


# --- table and figure functions the notebooks call, on fixtures ------------------------------------------------------


def _pairs(rows: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["move", "marker"])


def test_drop_count_table_lists_every_counted_rule():
    counts = Counter({"pairs.dropped.gold_too_short": 3, "pairs.kept": 5, "distractors.dropped.duplicate": 1})
    table = mining.drop_count_table(mining.MiningResult(pd.DataFrame(), pd.DataFrame(), counts))
    assert table.values.tolist() == [["distractors.dropped", "duplicate", 1], ["pairs.dropped", "gold_too_short", 3],
                                     ["pairs", "kept", 5]]  # in the order of the counter keys


def test_marker_frequencies_count_pairs_per_move_and_marker():
    pairs = _pairs([("specify", "for example")] * 3 + [("specify", "in particular")]
                   + [("address", "to this end")] * 2)
    table = mining.marker_frequencies(pairs)
    assert table.values.tolist() == [["address", "to this end", 2], ["specify", "for example", 3],
                                     ["specify", "in particular", 1]]
    assert mining.marker_frequencies(pairs.iloc[:0]).empty


def test_cleaning_table_gives_one_row_per_rule_and_corpus():
    from ratio_utils.corpora import cleaning_table

    report = {"cleaning": {
        "acl": {"edits": {"strip_citations": 4}, "drops": {"too_short": 2}},
        "aclsum": {"edits": {"strip_citations": 1}, "drops": {"too_short": 0}},
        "all": {"edits": {"strip_citations": 5}, "drops": {"too_short": 2}},
    }}
    table = cleaning_table(report)
    assert table.to_dict("records") == [
        {"rule": "strip_citations", "kind": "edit", "acl": 4, "aclsum": 1, "all": 5},
        {"rule": "too_short", "kind": "drop", "acl": 2, "aclsum": 0, "all": 2},
    ]


def test_marker_frequency_figure_draws_the_counts_once():
    import matplotlib.pyplot as plt

    pairs = _pairs([("specify", "for example")] * 3 + [("specify", "in particular")]
                   + [("address", "to this end")] * 2)
    fig = dataset.marker_frequency_figure(pairs, top=5)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["address (2 pairs)", "broaden (0 pairs)", "specify (4 pairs)"]
    specify = fig.axes[2]
    assert sorted(bar.get_width() for bar in specify.patches) == [1, 3]
    # most frequent on top
    assert [t.get_text() for t in specify.get_yticklabels()] == ["in particular", "for example"]
    # closed before it is returned: a notebook displays the returned figure, and only that once
    assert fig.number not in plt.get_fignums()


def test_primary_metric_summary_keeps_the_mrr10_cells_of_systems_that_ran():
    from ratio_utils.reporting.paper_tables import PaperTables, primary_metric_summary

    frame = pd.DataFrame([
        {"System": "BM25-unigram", "Prefix": "-", "Setup": "Baseline", "Address M@10": "12.3 [8.0, 17.1]",
         "Address R@10": "40.0 [30.0, 50.0]", "Specify M@10": "50.0 [45.0, 55.0]"},
        {"System": "Stella", "Prefix": "generic", "Setup": "Baseline", "Address M@10": "", "Address R@10": "",
         "Specify M@10": ""},
    ])
    tables = PaperTables({"table7_test_full": frame}, {}, {}, {}, pd.DataFrame())
    summary = primary_metric_summary(tables)
    assert list(summary.columns) == ["System", "Prefix", "Setup", "Address M@10", "Specify M@10"]
    assert summary["System"].tolist() == ["BM25-unigram"]  # a row with no cell is left out
    assert summary.loc[0, "Address M@10"] == "12.3 [8.0, 17.1]"


def test_table5_notes_say_when_a_query_has_two_golds_and_why_paper_counts_differ():
    pairs, distractors = frames(
        [
            pair("C", 2012, None, "specify", "one general query with two specific follow-ups.",
                 "the first specific gold."),
            pair("D", 2013, None, "specify", "one general query with two specific follow-ups.",
                 "the second specific gold."),
            pair("A", 2004, None, "address", "a training problem statement.", "a training solution sentence."),
        ],
        [distractor("E", 2011, None, "common_irrelevant", "a distractor from a paper without any pair.")],
    )
    built = build_benchmark(pairs, distractors, DatasetParams(split_by="year", splits=YEARS))
    notes = dataset.table5_notes(built, {"train": 3, "validation": 0, "test": 5})
    assert any("Specify test: 2 pairs but 1 queries: 1 query has more than one gold" in n for n in notes)
    papers = next(n for n in notes if n.startswith("papers:"))
    assert "train 2, validation 0, test 2" in papers  # corpus papers minus papers that mined a pair or distractor
    table = dataset.table5(built, {"train": 3, "validation": 0, "test": 5}).set_index(["section", "item"])
    assert table.loc[("papers", "with a mined pair or distractor"), "test"] == 3
    assert table.loc[("papers", "with a pair"), "test"] == 2


def test_table4_notes_reconcile_llm_and_pattern_rows_with_the_paper():
    table = pd.DataFrame([
        {"source": "LLM generation", "total_lexicon": 3994, "broaden_lexicon": 263},
        {"source": "Pattern expansion", "total_lexicon": 40, "broaden_lexicon": 40},
    ])
    notes = lexicon.table4_notes(table)
    assert ("3,994 vs the paper's 3,779" in notes[0] and "3,994 - 257 = 3,737" in notes[0]
            and "Broaden's 40" in notes[0])
    assert "4,034 here vs 4,076 in the paper; the 42 missing" in notes[1]


# --- ratio-evaluate against a direct computation ----------------------------------------------------


def _direct_dense_scores(bench, move: Move, query_prefix: str, doc_prefix: str) -> dict[tuple[str, str], float]:
    """Cosine similarity of every (query, candidate) pair, computed with sentence-transformers directly."""
    from sentence_transformers import SentenceTransformer

    from ratio_utils.models import resolve_model_path

    model = SentenceTransformer(str(resolve_model_path("all-MiniLM-L6-v2")), device="cpu")
    queries = bench.queries(move, "test").drop_duplicates("query_id")
    pool = bench.pool("test")
    q = model.encode([query_prefix + t for t in queries["querySentence"]], normalize_embeddings=True)
    d = model.encode([doc_prefix + t for t in pool["text"]], normalize_embeddings=True)
    sims = q @ d.T
    return {(qid, docid): float(sims[i, j]) for i, qid in enumerate(queries["query_id"])
            for j, docid in enumerate(pool["docid"])}


def _run_scores(runs_dir, name: str, move: Move) -> dict[tuple[str, str], float]:
    run = pd.read_parquet(runs_dir / name / move.value / "test.parquet")
    return {(r.qid, r.docid): float(r.score) for r in run.itertuples()}


@pytest.mark.models
def test_evaluate_dense_and_instruction_branches_match_a_direct_computation(tiny_benchmark, tmp_path):
    from ratio_utils.schema import instructed_query_prefix

    bench = load_benchmark(tiny_benchmark)
    move = Move.SPECIFY
    runs = tmp_path / "runs"
    common = ["--model", "all-MiniLM-L6-v2", "--benchmark", str(tiny_benchmark), "--split", "test",
              "--move", move.value, "--runs-dir", str(runs), "--device", "cpu"]
    assert evaluate_main([*common, "--query-prefix", "query: ", "--doc-prefix", "document: ",
                          "--name", "generic"]) == 0
    assert evaluate_main([*common, "--instruction", "--name", "instructed"]) == 0

    generic = _run_scores(runs, "generic", move)
    expected = _direct_dense_scores(bench, move, "query: ", "document: ")
    assert generic == pytest.approx({key: expected[key] for key in generic}, abs=1e-5)
    # the same scores with the prefixes swapped differ: a swap inside the command would fail the check above
    swapped = _direct_dense_scores(bench, move, "document: ", "query: ")
    assert max(abs(generic[key] - swapped[key]) for key in generic) > 1e-3
    # each query's own sentence is never a candidate
    assert not any(qid == docid for qid, docid in generic)

    instructed = _run_scores(runs, "instructed", move)
    expected = _direct_dense_scores(bench, move, instructed_query_prefix(move), "")
    assert instructed == pytest.approx({key: expected[key] for key in instructed}, abs=1e-5)
    assert "Instruct: Given a general scientific statement" in instructed_query_prefix(move)


@pytest.mark.models
def test_evaluate_colbert_branch_matches_maxsim_computed_directly(tiny_benchmark, tmp_path):
    from transformers import set_seed

    from ratio_utils.retrieval.colbert import load_colbert

    set_seed(13)
    checkpoint = tmp_path / "colbert"
    load_colbert("all-MiniLM-L6-v2", 32, 64, "cpu", embedding_size=32).save(str(checkpoint))
    move = Move.BROADEN
    out = tmp_path / "result.json"
    assert evaluate_main(["--model", str(checkpoint), "--colbert", "--benchmark", str(tiny_benchmark),
                          "--split", "test", "--move", move.value, "--runs-dir", str(tmp_path / "runs"),
                          "--name", "colbert", "--device", "cpu", "--out", str(out)]) == 0
    run = _run_scores(tmp_path / "runs", "colbert", move)

    bench = load_benchmark(tiny_benchmark)
    model = load_colbert(str(checkpoint), 128, 300, "cpu")
    queries = bench.queries(move, "test").drop_duplicates("query_id")
    pool = bench.pool("test")
    q_tokens = model.encode(list(queries["querySentence"]), is_query=True, convert_to_numpy=True)
    d_tokens = model.encode(list(pool["text"]), is_query=False, convert_to_numpy=True)
    # MaxSim: for each query token its best candidate token, summed over the query tokens
    expected = {(qid, docid): float((np.asarray(q) @ np.asarray(d).T).max(axis=1).sum())
                for qid, q in zip(queries["query_id"], q_tokens) for docid, d in zip(pool["docid"], d_tokens)}
    assert run == pytest.approx({key: expected[key] for key in run}, rel=1e-4)
    scores = json.loads(out.read_text())["scores"][move.value]
    assert 0.0 <= scores["MRR@10"] <= 1.0


def test_span_status_figure_shows_spans_and_the_sentences_they_cover():
    from ratio_utils.lexicon import curation

    summary = pd.DataFrame({"status": ["address", "specify", "not reviewed"], "spans": [2, 1, 5],
                            "sentences": [90, 10, 5]})
    fig = curation.plot_status(summary, top_n=8)
    spans, sentences = fig.axes
    assert [bar.get_height() for bar in spans.patches] == [2, 1, 5]
    assert [bar.get_height() for bar in sentences.patches] == [90, 10, 5]
    assert "90 (86%)" in [t.get_text() for t in sentences.texts]


def test_per_query_metric_values_average_to_the_reported_mean():
    from ratio_utils.evaluation.metrics import evaluate_run, per_query_metrics

    run = pd.DataFrame({"qid": ["a", "a", "a", "b", "b", "c"], "docid": ["x", "g1", "g2", "y", "z", "w"],
                        "score": [3.0, 2.0, 1.0, 2.0, 1.0, 1.0], "rank": 0})
    qrels = pd.DataFrame({"qid": ["a", "a", "b", "c"], "docid": ["g1", "g2", "z", "missing"]})
    values = per_query_metrics(run, qrels, ["MRR@10", "R@2"])
    rr = values["MRR@10"]
    assert rr.to_dict() == {"a": 0.5, "b": 0.5, "c": 0.0}  # query a: its first gold at rank 2
    recall = values["R@2"]
    assert recall.to_dict() == {"a": 0.5, "b": 1.0, "c": 0.0}  # a: one of its two golds within the top 2
    scores = evaluate_run(run, qrels, ks=(2, 10))
    assert rr.mean() == pytest.approx(scores["MRR@10"]) and recall.mean() == pytest.approx(scores["R@2"])
    with pytest.raises(ValueError, match="unknown metric"):
        per_query_metrics(run, qrels, ["MAP@10"])


def test_table4_says_why_a_moves_manual_count_differs_from_the_paper():
    table = pd.DataFrame([
        {"source": "Manual curation", "address_lexicon": 3, "broaden_lexicon": 13, "specify_lexicon": 72},
        {"source": "Extendable connective", "address_lexicon": 1, "broaden_lexicon": 0, "specify_lexicon": 0},
    ])
    released = pd.DataFrame({"move": ["address"] * 4 + ["specify"], "source": ["manual"] * 4 + ["manual"],
                             "marker": ["to address", "to address", "to solve", "to tackle", "for example"]})
    notes = lexicon.manual_count_notes(table, released)
    assert len(notes) == 1  # Broaden and Specify match the paper's 13 and 72
    assert notes[0].startswith("Manual curation Address: 3 here vs the paper's 84: the released file has "
                               "4 Address rows")
    assert "3 distinct markers" in notes[0] and "the 81 missing are not in it" in notes[0]
    assert "with its 1 Address extendable connectives, counted in their own row, 4 is still 80 short of 84" in notes[0]
