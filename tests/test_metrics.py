"""Metrics against ranx (an independent implementation) and against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ranx import Qrels, Run, evaluate

from ratio_utils.evaluation.metrics import DEFAULT_KS, evaluate_run, order_run, per_query_scores


def _random_case(seed: int, ties: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run over 60 queries and a pool of 300 docs; some queries' gold is not retrieved at all,
    some have two gold docs, a few run queries have no qrels."""
    rng = np.random.default_rng(seed)
    docs = [f"d{i:03d}" for i in range(300)]
    run_rows, qrel_rows = [], []
    for q in range(60):
        qid = f"q{q:02d}"
        retrieved = rng.choice(docs, size=rng.integers(5, 150), replace=False)
        scores = rng.integers(0, 8, size=len(retrieved)).astype(float) if ties else rng.random(len(retrieved))
        run_rows += [(qid, d, 0, s) for d, s in zip(retrieved, scores)]
        if q % 13 == 5:
            continue  # in the run, not judged: must be ignored
        n_gold = 2 if q % 7 == 0 else 1
        if q % 5 == 0:  # gold never retrieved: counts 0
            gold = [d for d in docs if d not in set(retrieved)][:n_gold]
        else:
            gold = list(rng.choice(retrieved, size=n_gold, replace=False))
        qrel_rows += [(qid, g) for g in gold]
    run = pd.DataFrame(run_rows, columns=["qid", "docid", "rank", "score"])
    return run, pd.DataFrame(qrel_rows, columns=["qid", "docid"])


def _ranx_inputs(run: pd.DataFrame, qrels: pd.DataFrame) -> tuple[Qrels, Run]:
    # ranx orders ties its own way; give it strictly decreasing scores from our canonical order
    # so that both implementations rank the very same lists.
    ordered = order_run(run)
    run_dict: dict[str, dict[str, float]] = {}
    for qid, docid, rank in ordered[["qid", "docid", "rank"]].itertuples(index=False):
        run_dict.setdefault(qid, {})[docid] = 1.0 / rank
    qrels_dict: dict[str, dict[str, int]] = {}
    for qid, docid in qrels.itertuples(index=False):
        qrels_dict.setdefault(qid, {})[docid] = 1
    return Qrels(qrels_dict), Run(run_dict)


def _ranx_scores(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, float]:
    metrics = [f"{m}@{k}" for k in DEFAULT_KS for m in ("recall", "mrr", "hit_rate")]
    values = evaluate(*_ranx_inputs(run, qrels), metrics, make_comparable=True)
    names = {"recall": "R", "mrr": "MRR", "hit_rate": "HR"}
    return {f"{names[m.split('@')[0]]}@{m.split('@')[1]}": float(v) for m, v in values.items()}


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_metric_matches_ranx(seed, ties):
    run, qrels = _random_case(seed, ties)
    ours = evaluate_run(run, qrels)
    theirs = _ranx_scores(run, qrels)
    assert set(ours) == set(theirs)
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], abs=1e-12), key
        assert 0.0 <= ours[key] <= 1.0


def test_hand_computed_single_gold():
    # q1: gold at rank 3; q2: gold at rank 1; q3: gold not retrieved.
    run = pd.DataFrame(
        [("q1", "a", 1, 0.9), ("q1", "b", 2, 0.8), ("q1", "g1", 3, 0.7), ("q2", "g2", 1, 5.0), ("q2", "x", 2, 1.0),
         ("q3", "y", 1, 1.0)],
        columns=["qid", "docid", "rank", "score"],
    )
    qrels = pd.DataFrame([("q1", "g1"), ("q2", "g2"), ("q3", "g3")], columns=["qid", "docid"])
    scores = evaluate_run(run, qrels, ks=(1, 3, 10))
    assert scores["MRR@1"] == pytest.approx(1 / 3)
    assert scores["MRR@3"] == pytest.approx((1 / 3 + 1) / 3)
    assert scores["R@1"] == pytest.approx(1 / 3)
    assert scores["R@3"] == pytest.approx(2 / 3)
    assert scores["HR@10"] == pytest.approx(2 / 3)
    rr = per_query_scores(run, qrels, k=10)["rr"]
    assert rr.to_dict() == pytest.approx({"q1": 1 / 3, "q2": 1.0, "q3": 0.0})


def test_ties_are_broken_by_docid_and_input_rank_is_ignored():
    # All three share one score: canonical order is a, b, c whatever ranks the file claims.
    run = pd.DataFrame(
        [("q", "c", 1, 0.5), ("q", "b", 2, 0.5), ("q", "a", 3, 0.5)], columns=["qid", "docid", "rank", "score"]
    )
    assert list(order_run(run)["docid"]) == ["a", "b", "c"]
    assert evaluate_run(run, pd.DataFrame({"qid": ["q"], "docid": ["b"]}), ks=(1, 3))["MRR@3"] == pytest.approx(0.5)
    assert evaluate_run(run, pd.DataFrame({"qid": ["q"], "docid": ["c"]}), ks=(1,))["R@1"] == 0.0


def test_two_golds_recall_is_a_fraction():
    run = pd.DataFrame([("q", "g1", 1, 3.0), ("q", "x", 2, 2.0), ("q", "g2", 3, 1.0)],
                       columns=["qid", "docid", "rank", "score"])
    qrels = pd.DataFrame({"qid": ["q", "q"], "docid": ["g1", "g2"]})
    scores = evaluate_run(run, qrels, ks=(1, 3))
    assert scores["R@1"] == pytest.approx(0.5)
    assert scores["HR@1"] == 1.0
    assert scores["R@3"] == 1.0


def test_bad_runs_are_rejected():
    qrels = pd.DataFrame({"qid": ["q"], "docid": ["a"]})
    dup = pd.DataFrame([("q", "a", 1, 1.0), ("q", "a", 2, 0.5)], columns=["qid", "docid", "rank", "score"])
    with pytest.raises(ValueError, match="twice"):
        evaluate_run(dup, qrels)
    with pytest.raises(ValueError, match="lacks column"):
        evaluate_run(dup.drop(columns="score"), qrels)
    with pytest.raises(ValueError, match="empty"):
        evaluate_run(dup.iloc[:1], qrels.iloc[:0])


@pytest.mark.parametrize("ties", [False, True])
def test_per_query_metrics_match_ranx_per_query(ties):
    from ratio_utils.evaluation.metrics import per_query_metrics

    run, qrels = _random_case(3, ties)
    ours = per_query_metrics(run, qrels, ["R@10", "MRR@10", "HR@5", "MRR@100"])
    assert list(ours.index) == sorted(qrels["qid"].unique())
    ranx_qrels, ranx_run = _ranx_inputs(run, qrels)
    for ours_name, ranx_name in (("R@10", "recall@10"), ("MRR@10", "mrr@10"), ("HR@5", "hit_rate@5"),
                                 ("MRR@100", "mrr@100")):
        evaluate(ranx_qrels, ranx_run, ranx_name, make_comparable=True)
        theirs = ranx_run.scores[ranx_name]
        for qid, value in ours[ours_name].items():
            assert value == pytest.approx(theirs.get(qid, 0.0), abs=1e-12), (ours_name, qid)
    # the means are evaluate_run's scores
    assert ours["MRR@10"].mean() == pytest.approx(evaluate_run(run, qrels, ks=(10,))["MRR@10"])


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ndcg_matches_ranx_and_ir_measures(seed, ties):
    """nDCG@k (binary gains) equals ranx's and ir_measures' (pytrec_eval) on the same canonical order."""
    import ir_measures

    run, qrels = _random_case(seed, ties)
    ks = (1, 3, 10, 100)
    ours = evaluate_run(run, qrels, ks=(10,), ndcg_ks=ks)
    ranx_values = evaluate(*_ranx_inputs(run, qrels), [f"ndcg@{k}" for k in ks], make_comparable=True)
    ordered = order_run(run)
    ir_run = [ir_measures.ScoredDoc(q, d, 1.0 / r)
              for q, d, r in ordered[["qid", "docid", "rank"]].itertuples(index=False)]
    ir_qrels = [ir_measures.Qrel(q, d, 1) for q, d in qrels.itertuples(index=False)]
    judged = set(qrels["qid"])
    ir_run = [s for s in ir_run if s.query_id in judged]
    per_query = {k: {} for k in ks}
    for metric in ir_measures.iter_calc([ir_measures.nDCG @ k for k in ks], ir_qrels, ir_run):
        per_query[metric.measure.params["cutoff"]][metric.query_id] = metric.value
    for k in ks:
        assert ours[f"nDCG@{k}"] == pytest.approx(float(ranx_values[f"ndcg@{k}"]), abs=1e-9)
        # ir_measures skips judged queries absent from the run; ours counts them as 0 (the same denominator as ranx)
        values = [per_query[k].get(q, 0.0) for q in judged]
        assert ours[f"nDCG@{k}"] == pytest.approx(sum(values) / len(values), abs=1e-9)


def test_ndcg_by_hand_and_as_a_per_query_metric():
    run = pd.DataFrame({"qid": ["q"] * 4, "docid": ["a", "b", "c", "d"], "rank": 0, "score": [4.0, 3.0, 2.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["q", "q"], "docid": ["b", "d"]})
    expected = (1 / np.log2(3) + 1 / np.log2(5)) / (1 + 1 / np.log2(3))
    assert evaluate_run(run, qrels, ks=(10,), ndcg_ks=(10,))["nDCG@10"] == pytest.approx(expected)
    assert "nDCG@10" not in evaluate_run(run, qrels, ks=(10,))  # the stages' tables keep their columns
    from ratio_utils.evaluation.metrics import per_query_metrics

    assert per_query_metrics(run, qrels, ["nDCG@10"])["nDCG@10"].iloc[0] == pytest.approx(expected)
    # one gold at rank 1 scores 1; beyond the cut-off 0
    assert evaluate_run(run, qrels.iloc[:1], ks=(1,), ndcg_ks=(1,))["nDCG@1"] == 0.0
