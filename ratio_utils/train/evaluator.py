"""Validation during training (stage 09): MRR@10 and recall on the validation pool after each epoch.

`PoolRetrievalEvaluator` is the sentence-transformers evaluator the trainer calls every epoch (and
that scores a saved model on test/silver); `per_query_values` keeps per-query values for intervals
and paired tests.

Reads:  an `EvalSet` (queries, qrels, pool: `Benchmark.eval_set`) and the model being trained.
Writes: nothing (scores are returned to the trainer / caller).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..dataset.benchmark import EvalSet
from .configurations import EVAL_KS, EVALUATOR_NAME, PRIMARY

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer


# ---------------------------------------------------------------------------------------------
# Validation during training
# ---------------------------------------------------------------------------------------------


PER_QUERY_METRICS = ("MRR@10", "R@10", "R@100")  # kept per query: intervals and paired tests need them


def per_query_values(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, list]:
    """{"qid": [...], "MRR@10": [...], ...}: the per-query values behind the reported means (JSON-ready)."""
    from ..evaluation.run_scoring import score_run

    frame = score_run(run, qrels, metrics=PER_QUERY_METRICS, per_query=True)
    return {"qid": [str(q) for q in frame.index],
            **{name: [float(v) for v in frame[name]] for name in PER_QUERY_METRICS}}


def _sentence_evaluator_base():
    from sentence_transformers.evaluation import SentenceEvaluator

    return SentenceEvaluator


class PoolRetrievalEvaluator(_sentence_evaluator_base()):
    """MRR@10 (and Recall@k) of the live model ranking the whole pool, as the benchmark scores it.

    Uses the project's retriever and metrics (ratio_utils.retrieval / ratio_utils.evaluation.metrics) instead of
    sentence-transformers' InformationRetrievalEvaluator so that a validation score during training
    is the same number the benchmark reports for the saved model (same prefixes, self-exclusion, tie
    order). Every call is recorded in `history`.
    """

    def __init__(self, evalset: EvalSet, *, query_prefix: str, doc_prefix: str, batch_size: int = 64,
                 ks: tuple[int, ...] = EVAL_KS, name: str = EVALUATOR_NAME):
        super().__init__()
        self.evalset = evalset
        self.query_prefix = query_prefix
        self.doc_prefix = doc_prefix
        self.batch_size = batch_size
        self.ks = ks
        self.name = name
        self.primary_metric = PRIMARY
        self.history: list[dict[str, Any]] = []
        self.per_query: dict[int, dict[str, list]] = {}  # step -> per-query values of that evaluation
        self.seconds = 0.0
        self._last_run: pd.DataFrame | None = None

    def score(self, model: "SentenceTransformer") -> dict[str, float]:
        from ..evaluation.run_scoring import rank_and_score
        from ..systems.families import RetrieverSettings, dense_retriever

        retriever = dense_retriever(model, self.query_prefix, self.doc_prefix,
                                    RetrieverSettings(batch_size=self.batch_size))
        self._last_run, scores = rank_and_score(retriever, self.evalset, self.ks)
        return scores

    def __call__(self, model, output_path: str | None = None, epoch: float = -1, steps: int = -1) -> dict[str, float]:
        from ..models import model_fingerprint

        started = time.perf_counter()
        scores = self.score(model)
        self.seconds += time.perf_counter() - started
        # The weights' checksum ties each score to the weights scored: the restored model must match
        # the best epoch's checksum (tests/test_train.py checks it).
        self.history.append({"epoch": float(epoch), "step": int(steps), "weights": model_fingerprint(model)[:16],
                             **scores})
        if self._last_run is not None:  # a subclass scoring several query sets (ratio_utils.train.unified) keeps none
            self.per_query[int(steps)] = per_query_values(self._last_run, self.evalset.qrels)
        metrics = self.prefix_name_to_metrics(scores, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    @property
    def metric_for_best_model(self) -> str:
        return f"eval_{self.name}_{PRIMARY}"
