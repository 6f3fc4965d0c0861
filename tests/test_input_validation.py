"""Bad inputs of issue 43 (items 7, 8 and "fails, but badly"): a benchmark is checked once, on load
(ratio_utils.dataset.benchmark), by every command that reads one; params values are typed (ratio_utils.param_sections);
`ratio-evaluate`, `ratio-export` and `ratio-mteb` answer bad input with one line naming the file and exit status 2
(ratio_utils.apps.cli); `ratio-export` swaps its folder in whole. Each case is built from the tiny benchmark in
tmp_path; scores are BM25's (no model), so a case runs in seconds."""

from __future__ import annotations

import argparse
import json
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ratio_utils.apps import evaluate as evaluate_command
from ratio_utils.apps import export as export_command
from ratio_utils.apps import mteb as mteb_command
from ratio_utils.config import load_config
from ratio_utils.dataset import export
from ratio_utils.dataset.benchmark import InvalidBenchmarkError, load_benchmark
from ratio_utils.evaluation.scoring import evaluate
from ratio_utils.schema import Move, Split, sentence_id

pytestmark = pytest.mark.usefixtures("embedding_cache_in_tmp")

PAIRS = "data/address/test.parquet"
POOL = "candidates/test.parquet"
FAST = ["--model", "bm25-unigram", "--split", "test", "--k", "10", "--no-intervals"]


def _edit(root, relative, change):
    """Rewrite one parquet file of the benchmark with `change(frame) -> frame` (pandas, as a user's script would)."""
    path = root / relative
    change(pd.read_parquet(path)).to_parquet(path, index=False)
    return path


def _drop_gold_from_pool(root) -> str:
    gold = pd.read_parquet(root / PAIRS)["gold_id"].iloc[0]
    _edit(root, POOL, lambda f: f[f["docid"] != gold])
    return gold


def _one_line_error(capsys, *names) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, (name, err)
    return err


def _strict_json_lines(path):
    """JSON lines as a strict reader takes them: NaN or Infinity is an error (Python's json accepts them)."""
    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not JSON")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text(encoding="utf-8").splitlines()]


# -- item 7: a gold missing from its pool ----------------------------------------------------------------------------

def test_a_gold_missing_from_the_pool_is_refused_by_the_library(tiny_benchmark):
    gold = _drop_gold_from_pool(tiny_benchmark)
    bench = load_benchmark(tiny_benchmark)
    with pytest.raises(InvalidBenchmarkError) as caught:
        bench.eval_set(Move.ADDRESS, Split.TEST)
    message = str(caught.value)
    assert PAIRS in message and POOL in message and gold in message and "--allow-invalid" in message
    bench.eval_set(Move.SPECIFY, Split.TEST)  # the other moves' golds are all there


def test_a_gold_missing_from_the_pool_fails_evaluate_export_and_mteb(tiny_benchmark, tmp_path, capsys):
    gold = _drop_gold_from_pool(tiny_benchmark)
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address"]) == 2
    _one_line_error(capsys, "ratio-evaluate: error:", PAIRS, gold)
    out = tmp_path / "beir"
    assert export_command.main(["--format", "beir", "--move", "address", "--benchmark", str(tiny_benchmark),
                                str(out)]) == 2
    _one_line_error(capsys, "ratio-export: error:", PAIRS, gold)
    assert not out.exists()
    assert mteb_command.main(["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--output",
                              str(tmp_path / "mteb")]) == 2
    _one_line_error(capsys, "ratio-mteb: error:", PAIRS, gold)


def test_allow_invalid_scores_without_the_pair_and_records_it(tiny_benchmark, tmp_path, capsys):
    """--allow-invalid scores what a hand-cleaned copy scores (n one less) and says what it left out, on stderr and in
    the result file; without the flag the same file is refused (above)."""
    cleaned = tmp_path / "cleaned"
    shutil.copytree(tiny_benchmark, cleaned)
    gold = _drop_gold_from_pool(tiny_benchmark)
    _drop_gold_from_pool(cleaned)
    _edit(cleaned, PAIRS, lambda f: f[f["gold_id"] != gold])
    out = tmp_path / "result.json"
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address", "--allow-invalid",
                                         "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and PAIRS in err and "1 row(s) left out" in err and str(out) in err
    result = json.loads(out.read_text())
    [problem] = result["benchmark_problems"]
    assert problem | {"examples": None} == {
        "file": PAIRS, "kind": "gold_not_in_pool", "count": 1, "dropped_rows": 1, "examples": None,
        "what": "pair(s) whose gold id is not in the split's candidate pool", "context": POOL}
    assert problem["examples"] == [gold]
    reference = evaluate("bm25-unigram", cleaned, "test", "address", k=10, intervals=False)
    assert result["queries"]["address"] == reference["queries"]["address"] == 2  # 3 pairs, one left out
    assert result["scores"] == reference["scores"]
    assert reference["benchmark_problems"] == []


def test_export_with_allow_invalid_writes_no_qrels_to_absent_documents(tiny_benchmark, tmp_path, capsys):
    gold = _drop_gold_from_pool(tiny_benchmark)
    out = tmp_path / "beir"
    assert export_command.main(["--format", "beir", "--move", "address", "--benchmark", str(tiny_benchmark),
                                "--allow-invalid", str(out)]) == 0
    assert "left out" in capsys.readouterr().err
    corpus = {r["_id"] for r in _strict_json_lines(out / "corpus.jsonl")}
    qrels = pd.read_csv(out / "qrels" / "test.tsv", sep="\t")
    assert gold not in corpus and len(qrels) == 2 and set(qrels["corpus-id"]) <= corpus
    record = json.loads((out / "export.json").read_text())
    assert [(p["file"], p["kind"], p["examples"]) for p in record["benchmark_problems"]] == [
        (PAIRS, "gold_not_in_pool", [gold])]


# -- item 8: null and shared query ids, repeated docids ---------------------------------------------------------------

def test_a_null_query_id_is_refused_and_never_exported_as_nan(tiny_benchmark, tmp_path, capsys):
    def null_first(frame):
        frame["query_id"] = frame["query_id"].astype(object)
        frame.loc[0, "query_id"] = None
        return frame
    _edit(tiny_benchmark, PAIRS, null_first)
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address"]) == 2
    _one_line_error(capsys, PAIRS, "null", "row 0")
    out = tmp_path / "beir"
    assert export_command.main(["--format", "beir", "--move", "address", "--benchmark", str(tiny_benchmark),
                                str(out)]) == 2
    _one_line_error(capsys, PAIRS, "row 0")
    assert export_command.main(["--format", "beir", "--move", "address", "--benchmark", str(tiny_benchmark),
                                "--allow-invalid", str(out)]) == 0
    queries = _strict_json_lines(out / "queries.jsonl")  # raises on NaN
    assert len(queries) == 2 and all(isinstance(q["_id"], str) for q in queries)
    assert json.loads((out / "export.json").read_text())["benchmark_problems"][0]["kind"] == "null_value"


def test_one_query_id_with_two_texts_is_refused(tiny_benchmark, capsys):
    frame = pd.read_parquet(tiny_benchmark / PAIRS)
    shared = frame["query_id"].iloc[0]
    _edit(tiny_benchmark, PAIRS, lambda f: f.assign(query_id=[shared, shared, f["query_id"].iloc[2]]))
    with pytest.raises(InvalidBenchmarkError, match=shared):
        load_benchmark(tiny_benchmark).queries(Move.ADDRESS, Split.TEST)
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address"]) == 2
    _one_line_error(capsys, PAIRS, "query id(s) shared by different query texts", shared)
    bench = load_benchmark(tiny_benchmark, allow_invalid=True)
    assert len(bench.queries(Move.ADDRESS, Split.TEST)) == 2  # the second text of the id left out, and recorded
    assert [(p.kind, p.dropped_rows) for p in bench.problems] == [("query_id_conflict", 1)]


def test_one_query_with_two_golds_is_one_query_with_two_qrels(tiny_benchmark):
    """Same id, same text twice is not a conflict: one query sentence whose two pairs give it two relevant
    candidates; it is ranked once (n counts it once) and both golds are relevant."""
    frame = pd.read_parquet(tiny_benchmark / PAIRS)
    second = frame.iloc[[0]].assign(goldSentence=frame["goldSentence"].iloc[1], gold_id=frame["gold_id"].iloc[1])
    _edit(tiny_benchmark, PAIRS, lambda f: pd.concat([f, second], ignore_index=True))
    evalset = load_benchmark(tiny_benchmark).eval_set(Move.ADDRESS, Split.TEST)
    assert len(evalset.queries) == 3 and len(evalset.qrels) == 4
    assert (set(evalset.qrels.loc[evalset.qrels["qid"] == frame["query_id"].iloc[0], "docid"])
            == set(frame["gold_id"].iloc[:2]))
    result = evaluate("bm25-unigram", tiny_benchmark, "test", "address", k=10, intervals=False)
    assert result["queries"]["address"] == 3


def test_a_repeated_docid_is_refused_by_evaluate_and_export_alike(tiny_benchmark, tmp_path, capsys):
    repeated = pd.read_parquet(tiny_benchmark / POOL)["docid"].iloc[-1]
    _edit(tiny_benchmark, POOL, lambda f: pd.concat([f, f.iloc[[-1]].assign(text="another text")], ignore_index=True))
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address"]) == 2
    _one_line_error(capsys, POOL, "docid(s) listed more than once", repeated)
    assert export_command.main(["--format", "trec", "--move", "address", "--benchmark", str(tiny_benchmark),
                                str(tmp_path / "trec")]) == 2
    _one_line_error(capsys, POOL, repeated)
    # with the flag both keep the first row of the docid and say so
    out = tmp_path / "result.json"
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address", "--allow-invalid",
                                         "--out", str(out)]) == 0
    assert export_command.main(["--format", "trec", "--move", "address", "--benchmark", str(tiny_benchmark),
                                "--allow-invalid", str(tmp_path / "trec")]) == 0
    collection = _strict_json_lines(tmp_path / "trec" / "collection.jsonl")
    pool_rows = len(pd.read_parquet(tiny_benchmark / POOL))
    assert len(collection) == pool_rows - 1 and len({c["id"] for c in collection}) == pool_rows - 1
    assert "another text" not in {c["contents"] for c in collection}
    for problems in (json.loads(out.read_text())["benchmark_problems"],
                     json.loads((tmp_path / "trec" / "export.json").read_text())["benchmark_problems"]):
        assert [(p["file"], p["kind"], p["examples"]) for p in problems] == [(POOL, "duplicate_docid", [repeated])]


def test_a_text_column_that_is_not_utf8_names_the_file_column_and_row(tiny_benchmark, tmp_path, capsys):
    table = pq.read_table(tiny_benchmark / PAIRS)
    texts = [t.encode() for t in table["querySentence"].to_pylist()]
    texts[1] = b"caf\xe9 au lait"  # Latin-1, not UTF-8
    table = table.set_column(table.column_names.index("querySentence"), "querySentence", pa.array(texts, pa.binary()))
    pq.write_table(table, tiny_benchmark / PAIRS)
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--move", "address"]) == 2
    _one_line_error(capsys, PAIRS, "'querySentence'", "row 1", "not UTF-8")
    assert export_command.main(["--format", "beir", "--move", "address", "--benchmark", str(tiny_benchmark),
                                str(tmp_path / "beir")]) == 2
    _one_line_error(capsys, PAIRS, "row 1", "not UTF-8")


def test_a_binary_text_column_that_is_utf8_is_read_as_text(tiny_benchmark):
    table = pq.read_table(tiny_benchmark / PAIRS)
    texts = table["querySentence"].to_pylist()
    binary = pa.array([t.encode() for t in texts], pa.binary())
    pq.write_table(table.set_column(table.column_names.index("querySentence"), "querySentence", binary),
                   tiny_benchmark / PAIRS)
    assert load_benchmark(tiny_benchmark).queries(Move.ADDRESS, Split.TEST)["querySentence"].tolist() == texts


# -- typed params -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "names"), [
    ("retrieval: {k: ten}\n", ["'retrieval'", "'k'", "whole number", "'ten'"]),
    ("retrieval: {bm25_ngrams: 3}\n", ["'retrieval'", "'bm25_ngrams'", "a list of"]),
    ("retrieval: {generic_prefix: 1}\n", ["'generic_prefix'", "true or false"]),
    ("seed: abc\n", ["seed", "'abc'"]),
    ("seed: true\n", ["seed"]),
])
def test_a_value_of_the_wrong_type_names_the_file_and_key(tmp_path, text, names):
    params = tmp_path / "bad.yaml"
    params.write_text(text)
    with pytest.raises(ValueError) as caught:
        load_config(params)
    for name in [str(params), *names]:
        assert name in str(caught.value)


def test_yaml_numbers_fit_their_fields(tmp_path):
    """What YAML writes for a value of the right type loads: an int in a float field, a list in a tuple field."""
    from ratio_utils.param_sections import RetrievalParams, check_value_types

    check_value_types({"k": 100, "bm25_ngrams": [1, 2], "dense_models": ["a", {"model": "b", "prefixes": "generic"}]},
                      RetrievalParams, "here")
    with pytest.raises(ValueError, match="'k'"):
        check_value_types({"k": 10.5}, RetrievalParams, "here")
    with pytest.raises(ValueError, match="'bm25_ngrams'"):
        check_value_types({"bm25_ngrams": [1, "two"]}, RetrievalParams, "here")


# -- one-line errors, exit status 2 -----------------------------------------------------------------------------------

def test_bad_params_are_one_line_in_every_command(tiny_benchmark, tmp_path, capsys):
    syntax = tmp_path / "syntax.yaml"
    syntax.write_text("retrieval:\n  k: [10\n")
    typed = tmp_path / "typed.yaml"
    typed.write_text("retrieval: {k: ten}\n")
    commands = {
        "ratio-evaluate": lambda p: evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--params", p]),
        "ratio-export": lambda p: export_command.main(["--format", "beir", "--benchmark", str(tiny_benchmark),
                                                        "--params", p, str(tmp_path / "out")]),
        "ratio-mteb": lambda p: mteb_command.main(["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark),
                                                   "--params", p, "--output", str(tmp_path / "mteb")]),
    }
    for prog, run in commands.items():
        assert run(str(syntax)) == 2
        _one_line_error(capsys, f"{prog}: error:", str(syntax), "line 3", "YAML syntax error")
        assert run(str(typed)) == 2
        _one_line_error(capsys, f"{prog}: error:", str(typed), "'k'")
        assert run(str(tmp_path / "missing.yaml")) == 2  # --params beside --benchmark is read, not ignored
        _one_line_error(capsys, f"{prog}: error:", "missing.yaml")
    assert not (tmp_path / "out").exists() and not (tmp_path / "mteb").exists()


def test_debug_shows_the_traceback(tiny_benchmark, tmp_path):
    typed = tmp_path / "typed.yaml"
    typed.write_text("retrieval: {k: ten}\n")
    with pytest.raises(ValueError, match="'k'"):
        evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--params", str(typed), "--debug"])


def test_out_that_is_a_folder_is_refused_before_evaluating(tiny_benchmark, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluate_command, "evaluate", lambda *a, **k: pytest.fail("evaluated before checking --out"))
    assert evaluate_command.main(FAST + ["--benchmark", str(tiny_benchmark), "--out", str(tmp_path)]) == 2
    _one_line_error(capsys, "--out", str(tmp_path), "is a folder")


def test_without_a_benchmark_each_command_says_pass_benchmark(tmp_path, monkeypatch, capsys):
    params = tmp_path / "elsewhere.yaml"
    params.write_text(f"output_root: {tmp_path / 'nothing-here'}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RATIO_OUTPUT_ROOT", raising=False)
    assert evaluate_command.main(FAST + ["--params", str(params)]) == 2
    _one_line_error(capsys, "pass --benchmark DIR", str(tmp_path / "nothing-here"))
    assert export_command.main(["--format", "beir", "--params", str(params)]) == 2
    _one_line_error(capsys, "pass --benchmark DIR")
    assert mteb_command.main(["--model", "bm25-unigram", "--params", str(params)]) == 2
    _one_line_error(capsys, "pass --benchmark DIR")


# -- atomic export ----------------------------------------------------------------------------------------------------

def test_a_failed_export_leaves_the_old_one_whole(tiny_benchmark, tmp_path, monkeypatch):
    bench = load_benchmark(tiny_benchmark)
    out = tmp_path / "beir"
    export.export(bench, "address", "test", out, "beir")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # a new text in the pool, then a failure after corpus.jsonl is written (the qrels are written next)
    _edit(tiny_benchmark, POOL, lambda f: pd.concat(
        [f, pd.DataFrame([{"docid": sentence_id("a new candidate."), "text": "a new candidate.", "source": "x",
                           "corpusid": "X"}])], ignore_index=True))

    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(export, "_write_lines", fail)
    with pytest.raises(OSError, match="disk full"):
        export.export(load_benchmark(tiny_benchmark), "address", "test", out, "beir")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beir", "tiny_benchmark"]  # no temporary folder left
    monkeypatch.undo()
    export.export(load_benchmark(tiny_benchmark), "address", "test", out, "beir")  # replaces the old export
    assert "a new candidate." in (out / "corpus.jsonl").read_text()


def test_export_never_replaces_a_folder_that_is_not_an_export(tiny_benchmark, tmp_path, capsys):
    mine = tmp_path / "my-notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert export_command.main(["--format", "beir", "--move", "address", "--benchmark", str(tiny_benchmark),
                                str(mine)]) == 2
    _one_line_error(capsys, str(mine), "not an export")
    assert (mine / "notes.txt").read_text() == "keep me"


# -- what the commands print ------------------------------------------------------------------------------------------

def test_the_evaluate_table_is_headed_by_model_benchmark_and_split(tiny_benchmark, capsys):
    shutil.copy(tiny_benchmark / "data" / "broaden" / "test.parquet",
                tiny_benchmark / "data" / "broaden" / "silver.parquet")
    argv = ["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--fallback-to-test", "--k", "10",
            "--no-intervals"]
    assert evaluate_command.main(argv) == 0
    heading = capsys.readouterr().out.splitlines()[0]
    assert heading.startswith(f"bm25-unigram on {tiny_benchmark.resolve()}, split silver, test")
    assert "address, specify: no silver split, fell back to test" in heading


def test_a_model_heading_names_its_short_fingerprint():
    result = {"model": "m", "model_fingerprint": "0123456789abcdef" * 4, "benchmark": {"path": "/b"},
              "params": {"split_requested": "test"}, "splits": {"address": "test"}}
    assert evaluate_command.format_heading(result) == "m (fingerprint 0123456789ab) on /b, split test"


@pytest.mark.parametrize("command", [evaluate_command, export_command, mteb_command], ids=lambda c: c.PROG)
def test_help_is_full_sentences(command, capsys):
    parser = command.build_parser()
    assert parser.description.endswith(".")
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):  # argparse's own "-h" line
            continue
        assert action.help and action.help.rstrip().endswith("."), (action.dest, action.help)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    assert "%%" not in capsys.readouterr().out


def test_mteb_results_go_under_the_working_directory(tmp_path, monkeypatch):
    from ratio_utils.evaluation.mteb_tasks import default_output

    monkeypatch.chdir(tmp_path)
    assert default_output() == tmp_path / "mteb_results"
