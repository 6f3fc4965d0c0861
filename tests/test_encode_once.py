"""One encoding per (model fingerprint, prefix, texts) in a process, whoever asks (issue 36): `evaluate` over three
moves, the MTEB tasks and `--compare`, the explorer's columns; the MTEB tasks carry the move and a per-directory
identity, save results where --output says; the command lines print n and intervals and fail in one line.

A counting fake model stands in for sentence-transformers: a model folder with one file (so it resolves and
fingerprints as a folder) whose loading is patched to a hashed bag of words (tests/fake_encoder.py) that counts every
sentence sent through it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_encoder import DIM, bag_of_words

from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.retrieval import dense
from ratio_utils.schema import MOVES, Move, Split, instructed_query_prefix


class CountingModel:
    """The part of a SentenceTransformer the retrievers use; remembers every text it encodes."""

    def __init__(self):
        self.texts: list[str] = []

    def encode(self, texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False,
               **kwargs):
        texts = [texts] if isinstance(texts, str) else list(texts)
        self.texts += texts
        return np.stack([bag_of_words(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)

    def get_sentence_embedding_dimension(self):
        return DIM


@pytest.fixture
def counting_model(tmp_path, monkeypatch):
    """(model folder, the model its loading returns); the process memo is empty before and after, no disk cache."""
    folder = tmp_path / "counting-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"fake": str(tmp_path)}))  # a fingerprint of its own per test
    model = CountingModel()
    monkeypatch.setattr(dense, "load_sentence_transformer", lambda ref, device=None, **kw: model)
    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", "off")
    dense.LOADED_MODELS.cache_clear()
    dense.clear_embedding_memo()
    yield folder, model
    dense.LOADED_MODELS.cache_clear()
    dense.clear_embedding_memo()


def _queries(bench, move, split) -> list[str]:
    return list(bench.eval_set(move, split).queries["text"])


def test_evaluate_encodes_the_pool_once_across_three_moves(counting_model, tiny_benchmark):
    from ratio_utils.evaluation.scoring import evaluate

    folder, model = counting_model
    bench = load_benchmark(tiny_benchmark)
    pool = list(bench.pool("test")["text"])
    result = evaluate(str(folder), tiny_benchmark, "test", "all", query_prefix="query: ", doc_prefix="document: ",
                      intervals=False)
    assert set(result["scores"]) == {m.value for m in MOVES}
    encoded_pool = [t for t in model.texts if t.startswith("document: ")]
    assert len(encoded_pool) == len(pool)  # once, not once per move
    assert len(model.texts) == len(pool) + sum(len(_queries(bench, m, "test")) for m in MOVES)
    assert result["texts_encoded"] == len(model.texts)
    # the same request again in the process: everything comes from the memo
    before = len(model.texts)
    again = evaluate(str(folder), tiny_benchmark, "test", "all", query_prefix="query: ", doc_prefix="document: ",
                     intervals=False)
    assert len(model.texts) == before and again["scores"] == result["scores"]


def test_evaluate_with_instructions_shares_the_pool_and_matches_a_retriever_per_move(counting_model, tiny_benchmark):
    """The move's instruction changes only the query prefix: the pool is still encoded once, and the scores equal the
    old path's (a new retriever per move, no memo)."""
    from ratio_utils.evaluation.run_scoring import run_and_score
    from ratio_utils.evaluation.scoring import evaluate
    from ratio_utils.retrieval import DenseRetriever

    folder, model = counting_model
    bench = load_benchmark(tiny_benchmark)
    result = evaluate(str(folder), tiny_benchmark, "test", "all", query_prefix="query: ", doc_prefix="document: ",
                      instruction=True, intervals=False)
    assert sum(t.startswith("document: ") for t in model.texts) == len(bench.pool("test"))
    for move in MOVES:
        prefix = "query: " + instructed_query_prefix(move)
        assert sum(t.startswith(prefix) for t in model.texts) == len(_queries(bench, move, "test"))
        old = run_and_score(DenseRetriever(str(folder), prefix, "document: "), bench, move, "test", k=100,
                            ndcg_ks=(10,))
        assert old == result["scores"][move.value]


def test_the_disk_cache_serves_a_later_process(counting_model, tiny_benchmark, tmp_path):
    from ratio_utils.evaluation.scoring import evaluate

    folder, model = counting_model
    cache = tmp_path / "cache"
    first = evaluate(str(folder), tiny_benchmark, "test", "address", cache_dir=cache, intervals=False)
    assert first["params"]["embedding_cache"] == str(cache) and list(cache.rglob("*.npy"))
    dense.clear_embedding_memo()  # as a new process would start
    encoded = len(model.texts)
    second = evaluate(str(folder), tiny_benchmark, "test", "address", cache_dir=cache, intervals=False)
    assert len(model.texts) == encoded and second["scores"] == first["scores"]


def test_the_default_disk_cache_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", str(tmp_path / "mine"))
    assert dense.default_embedding_cache() == tmp_path / "mine"
    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", "off")
    assert dense.default_embedding_cache() is None
    monkeypatch.delenv("RATIO_EMBEDDING_CACHE")
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "run"))
    assert dense.default_embedding_cache() == tmp_path / "run" / "cache" / "embeddings"
    monkeypatch.delenv("RATIO_OUTPUT_ROOT")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dense.default_embedding_cache() == tmp_path / "xdg" / "ratio" / "embeddings"


# -- MTEB ------------------------------------------------------------------------------------------------------


@pytest.fixture
def silver_benchmark(tiny_benchmark, tmp_path):
    """The tiny benchmark with a silver split for Address (two test pairs)."""
    from ratio_utils.dataset.benchmark import pairs_path, write_pairs

    root = tmp_path / "with-silver"
    shutil.copytree(tiny_benchmark, root)
    test = pd.read_parquet(pairs_path(root, Move.ADDRESS, Split.TEST))
    write_pairs(test.head(2), root, Move.ADDRESS, Split.SILVER)
    for move in (Move.BROADEN, Move.SPECIFY):
        write_pairs(test.head(0), root, move, Split.SILVER)
    return root


def test_mteb_and_compare_encode_the_shared_pool_once(counting_model, silver_benchmark):
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

    folder, model = counting_model
    bench = load_benchmark(silver_benchmark)
    prompts = generic_prompts()
    frame = mteb_scores(mteb_model(str(folder), prompts), ratio_tasks(silver_benchmark))
    assert set(zip(frame["move"], frame["split"])) == {("address", "test"), ("address", "silver"), ("broaden", "test"),
                                                       ("specify", "test")}
    pool = len(bench.pool("test"))
    assert sum(t.startswith("document: ") for t in model.texts) == pool  # three tasks, two splits: one encoding
    queries = sum(len(_queries(bench, m, s)) for m in MOVES for s in ("test", "silver") if bench.has(m, s)
                  and len(bench.queries(m, s)))
    assert len(model.texts) == pool + queries
    encoded = len(model.texts)
    ours = project_scores(str(folder), silver_benchmark, prompts)
    assert len(model.texts) == encoded  # --compare's own evaluation reuses every encoding
    both = side_by_side(frame, ours)
    for name in SCORE_NAMES:
        assert both[f"{name} difference"].abs().max() <= 1e-3, both  # MTEB rounds its scores to 5 decimals
    assert {"queries", "†", "MRR@10 low", "MRR@10 high", "nDCG@10 (MTEB)"} <= set(both.columns)
    assert (frame["queries"].to_numpy() == ours.set_index(["move", "split"]).loc[
        list(zip(frame["move"], frame["split"])), "queries"].to_numpy()).all()


def test_a_querys_own_sentence_leaves_100_candidates_in_mteb_as_in_the_project(tiny_benchmark):
    pytest.importorskip("mteb")
    from ratio_utils.evaluation.mteb_tasks import K_VALUES, ratio_tasks

    task = ratio_tasks(tiny_benchmark)[0]
    assert task._top_k == max(K_VALUES) + 1 and task.ignore_identical_ids


def test_the_mteb_query_prompt_is_the_moves_instruction(counting_model, tiny_benchmark):
    pytest.importorskip("mteb")
    from mteb.types import PromptType

    from ratio_utils.evaluation.mteb_tasks import generic_prompts, mteb_model, mteb_scores, ratio_tasks, task_move
    from ratio_utils.models import ModelRef, registry_entry, resolve_model
    from ratio_utils.schema import move_text

    folder, model = counting_model
    tasks = ratio_tasks(tiny_benchmark)
    # an instruction-following model by the registry (Qwen3-Embedding takes one): the default is to use it
    entry = registry_entry("Qwen3-Embedding-0.6B")
    assert entry is not None and entry.takes_move_instruction
    plain = resolve_model(folder)
    taking = ModelRef(name=plain.name, source="folder", location=plain.location, path=plain.path, entry=entry)
    encoder = mteb_model(taking, generic_prompts())
    assert encoder.instruction
    for task in tasks:
        move = Move.parse(task_move(task.metadata.name))
        assert task.metadata.prompt == {"query": move_text(move, "instruction")}
        assert encoder.prefix(task.metadata, PromptType.query) == "query: " + instructed_query_prefix(move)
        assert encoder.prefix(task.metadata, PromptType.document) == "document: "  # documents get no instruction
    mteb_scores(encoder, tasks)
    bench = load_benchmark(tiny_benchmark)
    for move in MOVES:
        wanted = {"query: " + instructed_query_prefix(move) + q for q in _queries(bench, move, "test")}
        assert wanted <= set(model.texts)
    # a model that takes none gets the plain prompt
    assert mteb_model(str(folder), generic_prompts()).prefix(tasks[0].metadata, PromptType.query) == "query: "


def test_two_directories_give_two_task_identities_and_each_file_is_hashed_once(tiny_benchmark, tmp_path, monkeypatch):
    pytest.importorskip("mteb")
    from ratio_utils.dataset.benchmark import candidates_path, write_pool
    from ratio_utils.evaluation import mteb_tasks

    other = tmp_path / "other"
    shutil.copytree(tiny_benchmark, other)
    hashed: list[Path] = []
    real = mteb_tasks.sha256_file
    monkeypatch.setattr(mteb_tasks, "sha256_file", lambda path: hashed.append(Path(path)) or real(path))
    first = mteb_tasks.ratio_tasks(tiny_benchmark)
    assert len(hashed) == len(set(hashed)) == 4  # three pairs files and the test pool shared by the three tasks
    second = mteb_tasks.ratio_tasks(other)
    names = {t.metadata.name for t in first}
    assert names.isdisjoint({t.metadata.name for t in second})
    # the same files give the same revision; a changed pool a new one
    assert [t.metadata.dataset["revision"] for t in first] == [t.metadata.dataset["revision"] for t in second]
    pool = load_benchmark(other).pool("test")
    write_pool(pool.head(len(pool) - 1), other, Split.TEST)
    assert candidates_path(other, Split.TEST).exists()
    third = mteb_tasks.ratio_tasks(other)
    assert all(a.metadata.dataset["revision"] != b.metadata.dataset["revision"] for a, b in zip(second, third))


def test_the_mteb_command_writes_results_where_output_says_and_compares_with_n_and_intervals(
        counting_model, tiny_benchmark, tmp_path, capsys):
    pytest.importorskip("mteb")
    from ratio_utils.apps.mteb import main

    folder, _ = counting_model
    out = tmp_path / "results-here"
    assert main(["--model", str(folder), "--benchmark", str(tiny_benchmark), "--output", str(out), "--compare"]) == 0
    printed = capsys.readouterr().out
    files = sorted(p.name for p in out.rglob("Ratio*.json"))
    assert len(files) == 3 and all(name.startswith(("RatioAddress_", "RatioBroaden_", "RatioSpecify_"))
                                   for name in files)
    saved = json.loads(next(out.rglob("RatioAddress_*.json")).read_text())
    assert "ndcg_at_10" in saved["scores"]["test"][0] and "mrr_at_10" in saved["scores"]["test"][0]
    assert "nDCG@10 MTEB" in printed and "[" in printed and "†" in printed and " n " in f" {printed} "
    assert f"results written under {out}" in printed


def test_the_mteb_command_fails_in_one_line(tmp_path, tiny_benchmark, capsys):
    pytest.importorskip("mteb")
    from ratio_utils.apps.mteb import build_parser, main

    assert main(["--model", "all-MiniLM-L6-v2", "--benchmark", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratio-mteb: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert main(["--model", str(tmp_path / "no-such-model"), "--benchmark", str(tiny_benchmark)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratio-mteb: error: ") and err.count("\n") == 1
    helped = build_parser().format_help()
    assert helped.startswith("usage: ratio-mteb") and "--model MODEL" in helped and "ratio-mteb --model" in helped
    with pytest.raises(SystemExit):
        main(["all-MiniLM-L6-v2"])  # the model is a flag now
    assert "ratio-mteb: error:" in capsys.readouterr().err


# -- the evaluate command --------------------------------------------------------------------------------------


def test_the_evaluate_command_prints_and_saves_n_intervals_and_ndcg(tiny_benchmark, tmp_path, capsys):
    from ratio_utils.apps.evaluate import main
    from ratio_utils.evaluation.stats import bootstrap_ci

    out = tmp_path / "r.json"
    assert main(["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--split", "test", "--out",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    bench = load_benchmark(tiny_benchmark)
    for move in MOVES:
        n = len(_queries(bench, move, "test"))
        assert result["queries"][move.value] == n and result["indicative"][move.value] == (n < 30)
        low, high = result["intervals"][move.value]["MRR@10"]
        assert low <= result["scores"][move.value]["MRR@10"] <= high
        assert "nDCG@10" in result["scores"][move.value] and "nDCG@10" in result["intervals"][move.value]
    heading, *lines = printed.splitlines()  # the heading names model, benchmark and split (issue 46)
    assert heading.startswith("bm25-unigram on ") and heading.endswith(", split test")
    assert lines[0].split() == [f"{m.value}/test†" for m in MOVES]  # every tiny move has fewer than 30 queries
    assert (lines[1].split()[0] == "n"
            and [int(x) for x in lines[1].split()[1:]] == [result["queries"][m.value] for m in MOVES])
    assert any(line.startswith("nDCG@10") for line in lines) and "95% bootstrap interval" in printed
    assert "†: fewer than 30 queries" in printed
    # the interval is the tables' method (stats.bootstrap_ci on the per-query values)
    from ratio_utils.evaluation.metrics import per_query_metrics
    from ratio_utils.retrieval import BM25Retriever

    evalset = bench.eval_set("specify", "test")
    run = BM25Retriever(1).search(evalset.queries, bench.pool("test"), k=100)
    values = per_query_metrics(run, evalset.qrels, ["MRR@10"])["MRR@10"].to_numpy()
    assert result["intervals"]["specify"]["MRR@10"] == pytest.approx(list(bootstrap_ci(values)))


def test_the_evaluate_command_names_itself_in_a_one_line_error_for_an_unknown_model(tiny_benchmark, capsys):
    from ratio_utils.apps.evaluate import main

    assert main(["--model", "no-such-model-anywhere", "--benchmark", str(tiny_benchmark), "--split", "test"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratio-evaluate: error: ") and "Traceback" not in err


# -- the explorer ------------------------------------------------------------------------------------------------


def test_the_explorer_loads_one_index_and_encodes_a_statement_once_per_model(counting_model, cfg, tmp_path):
    from ratio_utils.apps import explorer, search

    folder, model = counting_model
    sentences = pd.DataFrame({"paper_id": ["P1", "P1", "P2"], "para": 0, "sent": [0, 1, 0],
                              "text": ["Parsers overfit small treebanks.", "Dropout helps parsers.",
                                       "Gazetteers label entities cheaply."]})
    rows, counts = search.sentence_rows(sentences, None)
    qmodel = search.resolve_query_model(cfg, None, str(folder))
    indexes = tmp_path / "indexes"
    search.build_index(rows, search.query_encoder(qmodel, cache_dir=False), indexes / qmodel.name, model=qmodel,
                       counts=counts)
    assert len(model.texts) == len(rows)
    loaded = explorer.Explorer.load(cfg, model=str(folder), indexes=indexes, progress=lambda line: None)
    columns = loaded.columns[str(folder)]
    assert all(c.problem is None for c in columns.values())
    assert len({id(c.search) for c in columns.values()}) == 1 and len({id(c.encoder) for c in columns.values()}) == 1
    model.texts.clear()
    answer = loaded.ask("Treebanks are small.", str(folder))
    assert [t for t in model.texts] == ["query: treebanks are small."]  # three columns, one encoding
    hits = [c["hits"] for c in answer["columns"]]
    assert hits[0] and hits[0] == hits[1] == hits[2]
