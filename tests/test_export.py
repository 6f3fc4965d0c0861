"""BEIR / TREC exports (ratio_utils.dataset.export): read back by BEIR's own loader and by an independent
evaluator (ir_measures over pytrec_eval), which must score our run files exactly as ratio_utils.evaluation.metrics
does."""

from __future__ import annotations

import json

import pytest
from fake_encoder import FakeEncoder

from ratio_utils.apps import export as export_command
from ratio_utils.dataset import export
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.evaluation.metrics import evaluate_run
from ratio_utils.evaluation.run_scoring import run_and_score
from ratio_utils.retrieval import read_run, run_path
from ratio_utils.schema import Move, Split, sentence_id


@pytest.fixture
def bench_with_self_candidate(tiny_benchmark):
    """The tiny benchmark whose test pool also holds one query's own sentence (as a real shared pool does)."""
    from ratio_utils.dataset.benchmark import write_pool

    bench = load_benchmark(tiny_benchmark)
    pool = bench.pool(Split.TEST)
    query = bench.queries(Move.SPECIFY, Split.TEST)["querySentence"].iloc[0]
    pool.loc[len(pool)] = [sentence_id(query), query, "specify", "P00-specify"]
    write_pool(pool, tiny_benchmark, Split.TEST)
    return bench, sentence_id(query)


def test_beir_export_loads_with_beirs_loader(bench_with_self_candidate, tmp_path):
    from beir.datasets.data_loader import GenericDataLoader

    bench, own_id = bench_with_self_candidate
    record = export.export(bench, "specify", "test", tmp_path / "beir", "beir")
    corpus, queries, qrels = GenericDataLoader(data_folder=str(tmp_path / "beir")).load(split="test")
    evalset = bench.eval_set(Move.SPECIFY, Split.TEST)
    expected_queries, expected_qrels = evalset.queries, evalset.qrels
    assert set(corpus) == set(bench.pool(Split.TEST)["docid"])  # the whole shared pool
    assert queries == dict(zip(expected_queries["qid"], expected_queries["text"]))
    assert qrels == {q: {d: 1} for q, d in expected_qrels.itertuples(index=False)}
    assert own_id in corpus and own_id in queries and own_id not in qrels[own_id]  # the convention
    assert record["queries_whose_own_sentence_is_in_the_pool"] == 1
    assert json.loads((tmp_path / "beir" / "export.json").read_text())["pool"] == len(corpus)


def test_independent_scores_of_our_run_files_equal_ours(bench_with_self_candidate, tmp_path):
    import ir_measures
    from ir_measures import RR, R

    bench, own_id = bench_with_self_candidate
    export.export(bench, "specify", "test", tmp_path / "trec", "trec")
    export.export(bench, "specify", "test", tmp_path / "beir", "beir")
    ours = run_and_score(FakeEncoder(query_prefix="query: ", doc_prefix="document: ", name="fake"), bench, "specify",
                         "test", k=10, out_dir=tmp_path / "runs", ks=(1, 3, 5, 10))
    trec_run = run_path(tmp_path / "runs", "fake", "specify", "test").with_suffix(".trec")
    assert own_id not in {d for q, d, *_ in read_run(trec_run).itertuples(index=False) if q == own_id}
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "trec" / "qrels.txt")))
    measures = [RR @ 10, R @ 1, R @ 3, R @ 5, R @ 10]
    theirs = ir_measures.calc_aggregate(measures, qrels, list(ir_measures.read_trec_run(str(trec_run))))
    assert theirs[RR @ 10] == pytest.approx(ours["MRR@10"], abs=1e-9)
    for k in (1, 3, 5, 10):
        assert theirs[R @ k] == pytest.approx(ours[f"R@{k}"], abs=1e-9)
    assert 0 < ours["MRR@10"] < 1  # not a degenerate run

    # BEIR's own evaluator, on BEIR's loaded qrels and the same run (its default drops identical ids).
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval.evaluation import EvaluateRetrieval

    _, _, beir_qrels = GenericDataLoader(data_folder=str(tmp_path / "beir")).load(split="test")
    results = {}
    for q, d, _, score in read_run(trec_run).itertuples(index=False):
        results.setdefault(q, {})[d] = score
    results[own_id][own_id] = 99.0  # a harness that forgot the convention: BEIR must drop it
    _, _, recall, _ = EvaluateRetrieval.evaluate(beir_qrels, results, [1, 3, 5, 10])
    assert recall["Recall@10"] == pytest.approx(round(ours["R@10"], 5), abs=1e-5)
    assert recall["Recall@1"] == pytest.approx(round(ours["R@1"], 5), abs=1e-5)


def test_trec_export_files_and_cli(tiny_benchmark, tmp_path, capsys):
    out = tmp_path / "out"
    assert export_command.main(["--format", "trec", "--move", "all", "--split", "test", "--benchmark",
                                str(tiny_benchmark), str(out)]) == 0
    for move in Move:
        topics = (out / move.value / "topics.tsv").read_text().splitlines()
        evalset = load_benchmark(tiny_benchmark).eval_set(move, Split.TEST)
        queries, qrels = evalset.queries, evalset.qrels
        assert [line.split("\t")[0] for line in topics] == list(queries["qid"])
        assert ((out / move.value / "qrels.txt").read_text().splitlines()
                == [f"{q} 0 {d} 1" for q, d in qrels.itertuples(index=False)])
        assert (sum(1 for _ in open(out / move.value / "collection.jsonl"))
                == len(load_benchmark(tiny_benchmark).pool("test")))
    assert export_command.main(["--format", "beir", "--move", "broaden", "--split", "silver", "--benchmark",
                                str(tiny_benchmark), str(out)]) == 2
    assert "no silver pairs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown format"):
        export.export(load_benchmark(tiny_benchmark), "address", "test", out, "csv")


def test_our_metrics_and_the_run_agree_on_what_the_export_holds(tiny_benchmark, tmp_path):
    # The qrels of the export are exactly the qrels our metrics use: the same run scores the same.
    bench = load_benchmark(tiny_benchmark)
    evalset = bench.eval_set("address", "test")
    queries, qrels = evalset.queries, evalset.qrels
    run = FakeEncoder().search(queries, bench.pool("test"), k=5)
    export.export(bench, "address", "test", tmp_path / "b", "beir")
    rows = [line.split("\t") for line in (tmp_path / "b" / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    import pandas as pd

    exported = pd.DataFrame([(q, d) for q, d, _ in rows], columns=["qid", "docid"])
    assert evaluate_run(run, exported) == evaluate_run(run, qrels)
