"""A system run (ratio_utils.systems): the one parser of a system, every registered family end to end on the tiny
fixture (plan -> build -> run file -> score, the score checked against MRR@10 computed here from the run and the
gold), a toy family registered by a test alone reaching Table 1 and `ratio-evaluate`, and retrievers built only
through the registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.evaluation.run_scoring import score_run, score_run_file
from ratio_utils.param_sections import RetrievalParams
from ratio_utils.retrieval.base import Retriever, run_from_hits
from ratio_utils.retrieval.runs import RunInfo, read_run, read_run_info, run_path, write_system_run
from ratio_utils.schema import NOTEBOOKS, Move, Split
from ratio_utils.systems import families
from ratio_utils.systems.families import (
    FAMILIES,
    Family,
    RetrieverSettings,
    build_retriever,
    parse_system,
    plan_systems,
    register,
    unregister,
)
from ratio_utils.systems.runs import get_or_record_run, record_run
from ratio_utils.systems.spec import SystemSpec

REPO = Path(__file__).resolve().parents[1]


def mrr_at_10(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, float]:
    """Reciprocal rank of the first gold in the top 10 per query, by hand (the independent check of the scorer)."""
    gold = qrels.groupby("qid")["docid"].apply(set).to_dict()
    values = {}
    for qid, golds in gold.items():
        ranked = run[run["qid"] == qid].sort_values("rank")["docid"].tolist()[:10]
        values[qid] = next((1.0 / (i + 1) for i, docid in enumerate(ranked) if docid in golds), 0.0)
    return values


# -- the one parser --------------------------------------------------------------------------------------------


def test_one_parser_reads_bm25_a_family_source_and_a_model_id():
    assert parse_system("BM25-Bigram") == SystemSpec("BM25-bigram", "-", "bm25", "2")
    assert parse_system("colbert:/data/ckpt") == SystemSpec("ckpt", "-", "colbert", "/data/ckpt")
    assert parse_system("sentence-transformers/all-MiniLM-L6-v2") == SystemSpec(
        "all-MiniLM-L6-v2", "generic", "dense", "sentence-transformers/all-MiniLM-L6-v2")
    # a colon that names no registered family is part of a model's spelling, not a family
    assert parse_system("nofamily:thing").family == "dense"
    assert SystemSpec("BM25-unigram", "-", "bm25", "1").name == "BM25-unigram"
    assert SystemSpec("all-MiniLM-L6-v2", "per-move", "dense", "x").name == "all-MiniLM-L6-v2 (per-move)"


def test_an_unknown_family_and_a_second_registration_are_errors():
    with pytest.raises(KeyError, match="unknown retriever family 'nope'; registered: bm25, dense"):
        build_retriever(SystemSpec("X", "-", "nope", "x"), None, RetrieverSettings())
    with pytest.raises(ValueError, match="'bm25' is registered already"):
        register(families.BM25)
    with pytest.raises(ValueError, match="builds no retriever of its own"):
        build_retriever(SystemSpec("X", "-", "llm-rerank", "x"), None, RetrieverSettings())


# -- every registered family, end to end ------------------------------------------------------------------------


def _colbert_checkpoint(tmp_path: Path) -> str:
    from transformers import set_seed

    from ratio_utils.retrieval.colbert import load_colbert

    set_seed(13)
    checkpoint = tmp_path / "colbert"
    load_colbert("all-MiniLM-L6-v2", 32, 64, "cpu", embedding_size=32).save(str(checkpoint))  # mechanics only
    return str(checkpoint)


# family -> the retrieval params that plan its rows (a function of tmp_path: a ColBERT checkpoint is made there)
CASES = {
    "bm25": lambda tmp: RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test"]),
    "dense": lambda tmp: RetrievalParams(dense_models=[{"model": "all-MiniLM-L6-v2",
                                                        "prefixes": ["generic", "per-move"]}],
                                         bm25_ngrams=[], k=10, splits=["test"]),
    "colbert": lambda tmp: RetrievalParams(dense_models=[], bm25_ngrams=[], k=10, splits=["test"],
                                           colbert_checkpoints={"Toy-ColBERT": _colbert_checkpoint(tmp)}),
    "llm-rerank": lambda tmp: RetrievalParams(dense_models=[], bm25_ngrams=[1], k=10, splits=["test"]),
}


def test_every_registered_family_has_an_end_to_end_case():
    assert set(CASES) == set(FAMILIES)


def _rerank_by_hand(first: pd.DataFrame) -> pd.DataFrame:
    """A reranked run as notebook 10 writes one (here: the first stage's top 10 reversed)."""
    run = first[first["rank"] <= 10].copy()
    run["rank"] = run.groupby("qid")["rank"].rank(ascending=False, method="first").astype(int)
    run["score"] = 1.0 / run["rank"]
    return run.sort_values(["qid", "rank"]).reset_index(drop=True)


@pytest.mark.models
@pytest.mark.parametrize("family", sorted(CASES))
def test_a_family_plans_builds_records_and_scores(family, cfg, tiny_benchmark, embedding_cache_in_tmp, tmp_path):
    bench = load_benchmark(tiny_benchmark)
    params = CASES[family](tmp_path)
    plan = [s for s in plan_systems(params, cfg) if s.family == family]
    move, split = Move.ADDRESS, Split.TEST
    _, qrels = bench.eval_set(move, split).queries, bench.eval_set(move, split).qrels
    if FAMILIES[family].build is None:  # the reranker plans no row of 08: its rows rerank a first stage's run file
        assert plan == []
        first = SystemSpec("BM25-unigram", "-", "bm25", "1")
        info = first.info(move, split, bench.checksum(), params)
        base = record_run(build_retriever(first, move, RetrieverSettings.from_params(params, cfg)), bench, info,
                          cfg.paths.retrieval_runs)
        reranked = RunInfo("BM25-unigram", "-", "Baseline + rerank", "llm-rerank", move.value, split.value,
                           bench.checksum(), NOTEBOOKS["10"], k=10, first_stage="BM25-unigram")
        paths = write_system_run(_rerank_by_hand(base), cfg.paths.retrieval_runs, reranked)
        systems = [(reranked, Path(paths["parquet"]))]
    else:
        assert plan and all(s.family == family for s in plan)
        systems = []
        for spec in plan:
            retriever = build_retriever(spec, move, RetrieverSettings.from_params(params, cfg, name=spec.model))
            info = spec.info(move, split, bench.checksum(), params)
            record_run(retriever, bench, info, cfg.paths.retrieval_runs)
            systems.append((info, run_path(cfg.paths.retrieval_runs, info.system, move, split)))
    for info, path in systems:
        assert read_run_info(path).family == family and path.with_suffix(".trec").exists()
        scored = score_run_file(bench, read_run_info(path), path, ["MRR@10"])
        by_hand = mrr_at_10(read_run(path), qrels)
        assert scored.per_query["MRR@10"].to_dict() == pytest.approx(by_hand)
        assert score_run(path, qrels)["MRR@10"] == pytest.approx(np.mean(list(by_hand.values())))
        assert len(scored.per_query) == len(qrels["qid"].unique()) == 3


def test_get_or_record_run_searches_once_and_reuses_the_file(cfg, tiny_benchmark):
    bench = load_benchmark(tiny_benchmark)
    params = RetrievalParams(dense_models=[], bm25_ngrams=[1], k=10, splits=["test"])
    spec = SystemSpec("BM25-unigram", "-", "bm25", "1")
    info = spec.info(Move.SPECIFY, Split.TEST, bench.checksum(), params)
    built = []

    def make():
        built.append(1)
        return build_retriever(spec, Move.SPECIFY, RetrieverSettings.from_params(params, cfg))

    first = get_or_record_run(make, bench, info, cfg.paths.retrieval_runs)
    again = get_or_record_run(make, bench, info, cfg.paths.retrieval_runs)
    assert (first.reused, again.reused, len(built)) == (False, True, 1)
    pd.testing.assert_frame_equal(first.run.reset_index(drop=True), again.run.reset_index(drop=True),
                                  check_dtype=False)


# -- a family added by registration alone ------------------------------------------------------------------------


class WordOverlapRetriever(Retriever):
    """The toy family's retriever: candidates ranked by the number of words they share with the query."""

    name = "word-overlap"

    def _search(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        words = [set(text.lower().split()) for text in pool["text"]]
        scores = np.array([[len(set(q.lower().split()) & w) for w in words] for q in queries["text"]], dtype=float)
        order = np.argsort(-scores, axis=1, kind="stable")
        return run_from_hits(list(queries["qid"]), pool["docid"].to_numpy(), order,
                             np.take_along_axis(scores, order, axis=1), k)


@pytest.fixture
def toy_family():
    """A family registered from here only: its rows are planned whatever the params, its retriever is a class above."""
    family = register(Family(
        "toy", lambda params, cfg: [SystemSpec("Toy-overlap", "-", "toy", "overlap")],
        lambda spec, move, settings, ref: WordOverlapRetriever()))
    yield family
    unregister("toy")


def test_a_registered_toy_family_gets_a_table1_row_and_an_evaluate_result(toy_family, cfg, tiny_benchmark, tmp_path):
    from ratio_utils.apps.evaluate import main as evaluate_main
    from ratio_utils.reporting.paper_tables import assemble_tables
    from ratio_utils.stages.retrieval_baselines import run_baselines

    bench = load_benchmark(tiny_benchmark)
    cfg.sections["retrieval"] = {"dense_models": [], "bm25_ngrams": [1], "k": 10, "splits": ["test"]}
    done = run_baselines(cfg, bench)
    assert set(done.loc[done["system"] == "Toy-overlap", "status"]) == {"written"}
    result = assemble_tables(cfg, bench, through="08_retrieval_baselines", n_resamples=200, write=False)
    table = result.tables["table1_silver_main"].set_index(["System", "Prefix", "Setup"])
    row = table.loc[("Toy-overlap", "-", "Baseline")]
    expected = {}
    for move in Move:
        evalset = bench.eval_set(move, "test")
        run = WordOverlapRetriever().search(evalset.queries, evalset.pool, k=10)
        expected[move] = float(np.mean(list(mrr_at_10(run, evalset.qrels).values())))
    assert row["Address M@10"].split()[0] == f"{100 * expected[Move.ADDRESS]:.1f}"

    out = tmp_path / "toy.json"
    assert evaluate_main(["--model", "toy:overlap", "--benchmark", str(tiny_benchmark), "--split", "test",
                          "--move", "specify", "--out", str(out)]) == 0
    scores = json.loads(out.read_text())["scores"]["specify"]
    assert scores["MRR@10"] == pytest.approx(expected[Move.SPECIFY])


# -- one scorer of a run -----------------------------------------------------------------------------------------

def test_runs_are_scored_only_through_evaluation():
    """Outside evaluation/, a run is scored by evaluation.run_scoring.score_run (the one scorer), never by the
    metric functions it wraps."""
    metric_functions = re.compile(r"\b(?:per_query_metrics|evaluate_run)\b")
    found = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "ratio_utils").rglob("*.py")
                   if not path.relative_to(REPO).as_posix().startswith("ratio_utils/evaluation/")
                   and metric_functions.search(path.read_text()))
    assert not found, f"runs scored outside evaluation.run_scoring.score_run: {found}"


# -- retrievers are built through the registry -----------------------------------------------------------------

def test_retrievers_are_constructed_only_in_systems_and_retrieval():
    construction = re.compile(r"\b(?:BM25Retriever|DenseRetriever|ColBERTRetriever)\(")
    found = set()
    for path in sorted((REPO / "ratio_utils").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("ratio_utils/systems/", "ratio_utils/retrieval/")):
            continue
        # code only: a docstring or a model card's text may name the class
        code = [line for line in path.read_text().splitlines()
                if construction.search(line) and not line.lstrip().startswith(("#", '"', "'", "f\"", "-"))
                and "`" not in line]
        if code:
            found.add(rel)
    assert not found, f"retrievers built outside the registry (use systems.families): {sorted(found)}"
