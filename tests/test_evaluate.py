"""`ratio_utils.evaluate` (ratio_utils.evaluation.scoring) and its command line (ratio_utils.apps.evaluate) on
the tiny benchmark, in our layout and in the official release layout."""

from __future__ import annotations

import ast
import json
import shutil

import pandas as pd
import pytest

from ratio_utils.apps.evaluate import main
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.evaluation.metrics import evaluate_run
from ratio_utils.retrieval import BM25Retriever

pytestmark = pytest.mark.usefixtures("embedding_cache_in_tmp")


def _official_layout(ours, target):
    """A copy of the tiny benchmark as the official release ships it: no id columns, other candidate names."""
    shutil.copytree(ours, target)
    for path in (target / "data").rglob("*.parquet"):
        pd.read_parquet(path).drop(columns=["query_id", "gold_id", "marker_source",
                                            "marker_has_anaphor"]).to_parquet(path)
    for path in (target / "candidates").glob("*.parquet"):
        pd.read_parquet(path).drop(columns=["docid"]).rename(
            columns={"text": "sentence", "corpusid": "corpus_id"}).to_parquet(path)
    return target


def test_missing_silver_is_a_clear_error(tiny_benchmark, capsys):
    assert main(["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--move", "address"]) == 2
    err = capsys.readouterr().err
    assert "no silver split for address" in err and "--fallback-to-test" in err and "--split test" in err


def test_fallback_and_silver_are_recorded(tiny_benchmark, tmp_path, capsys):
    # give broaden a silver split (a copy of its test pairs): silver queries rank the test pool
    shutil.copy(tiny_benchmark / "data" / "broaden" / "test.parquet",
                tiny_benchmark / "data" / "broaden" / "silver.parquet")
    out = tmp_path / "result.json"
    argv = ["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--fallback-to-test", "--k", "10",
            "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["splits"] == {"address": "test", "broaden": "silver", "specify": "test"}
    assert set(result["scores"]) == {"address", "broaden", "specify"}
    assert "data/broaden/silver.parquet" in result["benchmark"]["files_sha256"]
    assert "M@10" in capsys.readouterr().out
    # the command's numbers are the library's numbers
    bench = load_benchmark(tiny_benchmark)
    evalset = bench.eval_set("specify", "test")
    queries, qrels = evalset.queries, evalset.qrels
    expected = evaluate_run(BM25Retriever(1).search(queries, bench.pool("test"), k=10), qrels, ks=(1, 3, 5, 10),
                            ndcg_ks=(10,))
    assert result["scores"]["specify"] == pytest.approx(expected)


def test_official_layout_gives_the_same_scores(tiny_benchmark, tmp_path):
    official = _official_layout(tiny_benchmark, tmp_path / "official")
    results = []
    for root, name in ((tiny_benchmark, "ours.json"), (official, "official.json")):
        out = tmp_path / name
        assert main(["--model", "bm25-bigram", "--benchmark", str(root), "--split", "test", "--out", str(out)]) == 0
        results.append(json.loads(out.read_text())["scores"])
    assert results[0] == results[1]


@pytest.mark.models
def test_dense_model_result_and_run_files(tiny_benchmark, tmp_path):
    out = tmp_path / "minilm.json"
    argv = [
        "--model", "sentence-transformers/all-MiniLM-L6-v2", "--benchmark", str(tiny_benchmark), "--split", "test",
        "--move", "specify", "--query-prefix", "query: ", "--doc-prefix", "document: ", "--k", "5",
        "--runs-dir", str(tmp_path / "runs"), "--name", "minilm-generic", "--out", str(out),
    ]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert len(result["model_fingerprint"]) == 64
    assert result["params"]["query_prefix"] == "query: " and result["params"]["k"] == 5
    run = pd.read_parquet(tmp_path / "runs" / "minilm-generic" / "specify" / "test.parquet")
    assert run.groupby("qid").size().max() <= 5
    assert 0 <= result["scores"]["specify"]["MRR@5"] <= 1


def test_a_move_without_pairs_is_skipped_and_recorded(tiny_benchmark, tmp_path, capsys):
    path = tiny_benchmark / "data" / "broaden" / "test.parquet"
    pd.read_parquet(path).iloc[:0].to_parquet(path)
    out = tmp_path / "r.json"
    assert main(["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--split", "test",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["scores"]) == {"address", "specify"} and "broaden" in result["skipped"]
    assert "skipping broaden" in capsys.readouterr().err


def test_python_api_matches_the_cli(tiny_benchmark, tmp_path):
    """`ratio_utils.evaluate(...)` is the function behind the CLI; a Retriever object is scored as given."""
    import ratio_utils

    out = tmp_path / "cli.json"
    assert main(["--model", "bm25-bigram", "--benchmark", str(tiny_benchmark), "--split", "test", "--k", "10",
                 "--out", str(out)]) == 0
    by_name = ratio_utils.evaluate("bm25-bigram", tiny_benchmark, "test", "all", k=10)
    by_object = ratio_utils.evaluate(BM25Retriever(2, name="mine"), tiny_benchmark, "test", "specify", k=10)
    assert by_name["scores"] == json.loads(out.read_text())["scores"]
    assert by_object["scores"] == {"specify": by_name["scores"]["specify"]}
    assert by_object["system"] == "mine" and by_object["model_fingerprint"] is None


def test_evaluate_and_the_cli_give_the_same_result_on_the_same_fixture(tiny_benchmark, tmp_path, capsys):
    """The function and the command line, same inputs (fallback to test, a skipped move, a name, run files): the
    same result but for the timings, and the same run files."""
    from ratio_utils.evaluation.scoring import evaluate

    shutil.copy(tiny_benchmark / "data" / "broaden" / "test.parquet",
                tiny_benchmark / "data" / "broaden" / "silver.parquet")
    path = tiny_benchmark / "data" / "address" / "test.parquet"
    pd.read_parquet(path).iloc[:0].to_parquet(path)
    out = tmp_path / "cli.json"
    assert main(["--model", "bm25-trigram", "--benchmark", str(tiny_benchmark), "--fallback-to-test", "--k", "5",
                 "--name", "tri", "--runs-dir", str(tmp_path / "cli_runs"), "--out", str(out)]) == 0
    by_cli = json.loads(out.read_text())
    by_function = evaluate("bm25-trigram", tiny_benchmark, fallback_to_test=True, k=5, name="tri",
                           runs_dir=tmp_path / "runs")
    assert by_cli.pop("seconds").keys() == by_function.pop("seconds").keys() == {"broaden", "specify"}
    assert json.loads(json.dumps(by_function)) == by_cli
    assert by_function["splits"] == {"broaden": "silver", "specify": "test"} and "address" in by_function["skipped"]
    assert by_function["system"] == "tri" and by_function["params"]["k"] == 5
    cli_run = pd.read_parquet(tmp_path / "cli_runs" / "tri" / "specify" / "test.parquet")
    pd.testing.assert_frame_equal(cli_run, pd.read_parquet(tmp_path / "runs" / "tri" / "specify" / "test.parquet"))
    # every BM25 scores the same on this fixture, but their run scores differ: a CLI ignoring --model fails here
    evaluate("bm25-unigram", tiny_benchmark, "test", "specify", k=5, name="tri", runs_dir=tmp_path / "unigram_runs")
    unigram_run = pd.read_parquet(tmp_path / "unigram_runs" / "tri" / "specify" / "test.parquet")
    assert not unigram_run["score"].equals(cli_run["score"])


def _imported_top_level_modules(source: str) -> set[str]:
    """Every module an import statement anywhere in `source` names, by its first dotted part."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_scoring_is_plain_python_without_argparse():
    """The API module takes ordinary arguments: no argparse import anywhere in it (function-level ones too); the
    command line, which does import it, lives in apps/evaluate (the `ratio-evaluate` script)."""
    from ratio_utils.config import REPO_ROOT

    evaluation = REPO_ROOT / "ratio_utils" / "evaluation"
    assert "argparse" not in _imported_top_level_modules((evaluation / "scoring.py").read_text(encoding="utf-8"))
    apps = REPO_ROOT / "ratio_utils" / "apps"
    assert "argparse" in _imported_top_level_modules((apps / "evaluate.py").read_text(encoding="utf-8"))
    # the check sees an import inside a function and a dotted one
    assert "argparse" in _imported_top_level_modules("def f():\n    import argparse as a\n")
    assert "argparse" in _imported_top_level_modules("from argparse import Namespace\n")


def test_the_package_exports_evaluate_as_a_plain_function_that_stays_one():
    """`ratio_utils.evaluate` is the function of ratio_utils.evaluation, before and after its module is imported; the
    old shim module ratio_utils/evaluate.py is gone (`ratio-evaluate` runs the command line)."""
    import importlib.util
    import inspect

    import ratio_utils
    import ratio_utils.evaluation.scoring
    from ratio_utils import evaluate

    assert inspect.isfunction(ratio_utils.evaluate) and ratio_utils.evaluate is ratio_utils.evaluation.evaluate
    assert evaluate is ratio_utils.evaluation.evaluate is ratio_utils.evaluation.scoring.evaluate
    assert importlib.util.find_spec("ratio_utils.evaluate") is None
    with pytest.raises(ModuleNotFoundError):
        import ratio_utils.evaluate  # noqa: F401
    assert inspect.isfunction(ratio_utils.evaluate)


def test_python_dash_m_ratio_utils_apps_evaluate_runs_the_command_line(tiny_benchmark, tmp_path):
    """`python -m ratio_utils.apps.evaluate` (what `ratio-evaluate` runs) gives what `main` gives; `--help` works and
    shows an example."""
    import subprocess
    import sys

    from ratio_utils.config import REPO_ROOT

    by_module, by_main = tmp_path / "m.json", tmp_path / "main.json"
    argv = ["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--split", "test", "--k", "10"]
    done = subprocess.run([sys.executable, "-m", "ratio_utils.apps.evaluate", *argv, "--out", str(by_module)],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "MRR@10 is the primary metric" in done.stdout
    assert main([*argv, "--out", str(by_main)]) == 0
    assert json.loads(by_module.read_text())["scores"] == json.loads(by_main.read_text())["scores"]
    helped = subprocess.run([sys.executable, "-m", "ratio_utils.apps.evaluate", "--help"], cwd=REPO_ROOT,
                            capture_output=True, text=True)
    assert (helped.returncode == 0 and helped.stdout.startswith("usage: ratio-evaluate")
            and "--fallback-to-test" in helped.stdout)
    assert "example" in helped.stdout.lower() and "ratio-evaluate --model" in helped.stdout


def test_the_ratio_evaluate_script_points_at_the_command_line():
    import tomllib

    from ratio_utils.config import REPO_ROOT

    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["ratio-evaluate"].partition(":")
    assert (module, function) == ("ratio_utils.apps.evaluate", "main")
    import importlib

    assert getattr(importlib.import_module(module), function) is main


def _model_with_prompts(tmp_path, prompts):
    """A saved sentence-transformers folder (the packaged MiniLM) whose config stores `prompts`, as notebook 09
    saves."""
    from ratio_utils.models import ST_CONFIG_FILE, resolve_model_path

    folder = tmp_path / "tuned-like"
    shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), folder)
    config_path = folder / ST_CONFIG_FILE
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    config["prompts"] = prompts
    config_path.write_text(json.dumps(config))
    return folder


def test_a_models_stored_prompts_are_used_by_default_and_flags_override_them(tiny_benchmark, tmp_path, capsys):
    import ratio_utils

    folder = _model_with_prompts(tmp_path, {"query": "query: ", "document": "document: "})
    common = dict(benchmark=tiny_benchmark, split="test", move="specify", k=10)
    stored = ratio_utils.evaluate(str(folder), **common)
    assert (stored["params"]["query_prefix"], stored["params"]["doc_prefix"]) == ("query: ", "document: ")
    assert stored["params"]["prefix_source"] == {"query": "model prompts (config_sentence_transformers.json)",
                                                 "document": "model prompts (config_sentence_transformers.json)"}
    explicit = ratio_utils.evaluate(str(folder), query_prefix="query: ", doc_prefix="document: ", **common)
    assert (explicit["scores"] == stored["scores"]
            and explicit["params"]["prefix_source"] == {"query": "flag", "document": "flag"})
    # '' overrides the stored prompts
    none = ratio_utils.evaluate(str(folder), query_prefix="", doc_prefix="", **common)
    assert none["params"]["query_prefix"] == "" and none["scores"] != stored["scores"]
    # the CLI: no prefix flags, the stored prompts, printed with the scores
    out = tmp_path / "r.json"
    assert main(["--model", str(folder), "--benchmark", str(tiny_benchmark), "--split", "test", "--move", "specify",
                 "--k", "10", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["scores"] == stored["scores"]
    assert "prefixes: query 'query: ' (model prompts" in capsys.readouterr().out


def test_stored_prompts_absent_empty_or_malformed(tmp_path):
    from ratio_utils.models import ST_CONFIG_FILE, stored_prompts

    assert stored_prompts(tmp_path) == {}  # no config file: no prompts
    (tmp_path / ST_CONFIG_FILE).write_text(json.dumps({"prompts": {}, "similarity_fn_name": "cosine"}))
    assert stored_prompts(tmp_path) == {}
    (tmp_path / ST_CONFIG_FILE).write_text(json.dumps({"prompts": {"query": 3}}))
    with pytest.raises(ValueError, match="must map names to strings"):
        stored_prompts(tmp_path)
    (tmp_path / ST_CONFIG_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=f"{ST_CONFIG_FILE}: not valid JSON"):
        stored_prompts(tmp_path)


@pytest.mark.models
def test_a_live_model_a_reference_and_a_name_give_the_same_scores(tiny_benchmark, monkeypatch):
    """`evaluate` takes a packaged name, a resolved ModelRef or a live SentenceTransformer (issue 38 item 6); the model
    is resolved once and the scores do not depend on how it was given."""
    import ratio_utils
    from ratio_utils.models import load_sentence_transformer, resolve_model
    from ratio_utils.retrieval import dense

    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", "off")
    dense.clear_embedding_memo()
    common = dict(benchmark=tiny_benchmark, split="test", move="all", query_prefix="query: ", doc_prefix="document: ",
                  intervals=False)
    by_name = ratio_utils.evaluate("all-MiniLM-L6-v2", **common)
    ref = resolve_model("all-MiniLM-L6-v2")
    by_ref = ratio_utils.evaluate(ref, **common)
    assert by_ref["texts_encoded"] == 0  # the same fingerprint and prefixes: the process memo answers
    live = ratio_utils.evaluate(load_sentence_transformer(ref), **common)
    assert by_name["scores"] == by_ref["scores"] == live["scores"]
    assert live["model_source"] == "object" and by_name["model_source"] == "packaged"
    dense.clear_embedding_memo()
