"""ratio_utils.retrieval.rerank and notebook 10's stage against the loopback OpenAI-compatible server
(tests/openai_stub_server.py): request formatting, every repair rule, queries not sent, partial replay,
and the dry run that writes request files and no run file."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from ratio_utils.config import REPO_ROOT
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.evaluation.rerank_promotion import promotion_cells, promotion_columns
from ratio_utils.param_sections import RerankParams
from ratio_utils.retrieval.rerank import (
    REPAIR_RULES,
    load_rerank_prompt,
    parse_ranking,
    ranked_run,
    rerank_request,
    reranked_order,
)
from ratio_utils.retrieval.runs import RunInfo, info_path, read_run, read_run_info, run_path, write_system_run
from ratio_utils.schema import MOVES, Move
from ratio_utils.stages.llm_rerank import LLMRerankStage

KEY = "fake-rerank-key-1234-SECRET"
SYSTEM = "BM25-test"
RERANKED = "BM25-test + rerank"
TOP_N, K = 5, 2


# -- the request ------------------------------------------------------------------------------------


def test_request_has_the_moves_prompt_and_numbered_candidates_in_first_stage_order():
    params = RerankParams(top_n=3, k=2)
    prompt = load_rerank_prompt(REPO_ROOT / "prompts" / "rerank", Move.BROADEN, "listwise", params.k)
    request = rerank_request("c1", prompt, "Noise helps taggers.", ["first  text", "second", "third"], "gpt-5-mini",
                             params)
    body = request.body()
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert body["model"] == "gpt-5-mini" and body["reasoning_effort"] == "medium"
    assert body["response_format"] == {"type": "json_object"}
    assert "MORE GENERAL form" in system and "{k}" not in system and "exactly 2 different" in system
    lines = user.splitlines()
    assert lines[0] == "Query: Noise helps taggers."
    assert "this order carries no information" in user
    assert lines[3:6] == ["[1] first text", "[2] second", "[3] third"]
    assert request.meta["prompt"] == "listwise-v1" and len(request.meta["prompt_sha256"]) == 64


def test_every_move_has_a_versioned_prompt_with_its_relation_line():
    relation = {"address": "solution, improvement or mitigation", "broaden": "MORE GENERAL",
                "specify": "MORE SPECIFIC"}
    for move in MOVES:
        prompt = load_rerank_prompt(REPO_ROOT / "prompts" / "rerank", move, "listwise", 10)
        assert prompt.version >= 1 and relation[move.value] in prompt.text


# -- the repair rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("parsed, positions, repairs", [
    ({"ranking": [3, 1]}, (2, 0), ()),
    ({"ranking": ["3", 1.0]}, (2, 0), ()),  # numeric strings and whole floats are read as numbers
    (None, None, ("unusable_answer",)),
    ({"top": [1, 2]}, None, ("unusable_answer",)),
    ({"ranking": "1, 2"}, None, ("unusable_answer",)),
    ({"ranking": [2, "two", True, 1]}, (1, 0), ("non_integer",)),
    ({"ranking": [0, 2, 6, 1]}, (1, 0), ("out_of_range",)),
    ({"ranking": [2, 2, 1]}, (1, 0), ("duplicate",)),
    ({"ranking": [4, 3, 2]}, (3, 2), ("too_many",)),
    ({"ranking": [4]}, (3, 0), ("too_few",)),  # filled with the best-ranked first-stage candidate not chosen
    ({"ranking": []}, (0, 1), ("too_few",)),
    ({"ranking": [5, 5, "x", 9]}, (4, 0), ("duplicate", "non_integer", "out_of_range", "too_few")),
])
def test_parse_ranking_applies_each_repair_rule(parsed, positions, repairs):
    ranking = parse_ranking(parsed, n_candidates=5, k=2)
    assert ranking.positions == positions
    assert sorted(ranking.repairs) == sorted(repairs)
    assert set(ranking.repairs) <= set(REPAIR_RULES)


def test_reranked_order_puts_the_picks_first_and_keeps_first_stage_order_below():
    first = ["a", "b", "c", "d", "e", "f", "g"]
    assert reranked_order(first, (3, 1), top_n=5) == ["d", "b", "a", "c", "e", "f", "g"]
    assert reranked_order(first, None, top_n=5) == first
    run = ranked_run({"q": ["d", "b", "a"]})
    assert run["rank"].tolist() == [1, 2, 3] and run["score"].is_monotonic_decreasing


# -- the stage end to end -------------------------------------------------------------------------------


@pytest.fixture
def setup(cfg, tiny_benchmark, tmp_path, monkeypatch):
    """A benchmark, a first-stage run per move (gold first, except one Address query whose gold is
    last, outside the top TOP_N), and rerank params for it; no shared llm_cache."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg.paths = dataclasses.replace(cfg.paths, shared=tmp_path / "shared_without_llm_cache")
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    bench = load_benchmark(cfg.paths.benchmark)
    docids = sorted(bench.pool("test")["docid"])
    outside = None
    for move in MOVES:
        pairs = bench.queries(move, "test")
        rows = []
        for n, (qid, gold) in enumerate(zip(pairs.query_id, pairs.gold_id)):
            others = [d for d in docids if d != gold]
            order = others + [gold] if (move is Move.ADDRESS and n == 0) else [gold] + others
            if move is Move.ADDRESS and n == 0:
                outside = qid
            rows += [(qid, d, r, float(100 - r)) for r, d in enumerate(order, start=1)]
        info = RunInfo(model=SYSTEM, prefix="-", setup="Baseline", family="bm25", move=move.value, split="test",
                       benchmark_checksum=bench.checksum(), stage="08_retrieval_baselines", k=len(docids))
        write_system_run(pd.DataFrame(rows, columns=["qid", "docid", "rank", "score"]), cfg.paths.retrieval_runs, info)
    cfg.sections["rerank"] = {"systems": [SYSTEM], "top_n": TOP_N, "k": K, "model": "rerank-model"}
    return cfg, bench, outside


def _query_of(body: dict) -> str:
    return body["messages"][1]["content"].splitlines()[0].removeprefix("Query: ")


ANSWERS = {  # query -> raw answer; every other query gets {"ranking": [5, 4]}
    "Annotating named entities by hand is slow and expensive.": "this is not json",
    "Adding noise to word embeddings improved tagging accuracy.": json.dumps({"ranking": [1, 2, 3]}),
    "Our tagger transfers well from news to biomedical abstracts.": json.dumps({"ranking": ["2", 2, 99, True]}),
}


def _responder(body: dict) -> str:
    return ANSWERS.get(_query_of(body), json.dumps({"ranking": [5, 4]}))


def _live(cfg, stub) -> LLMRerankStage:
    cfg.sections["llm"] = {"model": "rerank-model", "base_url": stub.base_url, "mode": "sync", "retry_initial_s": 0.01}
    return LLMRerankStage.from_config(cfg)


def test_live_run_reranks_sent_queries_counts_repairs_and_keeps_the_others(setup, monkeypatch, openai_stub):
    cfg, bench, outside = setup
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    stub = openai_stub(KEY, responder=_responder)
    stage = _live(cfg, stub)
    plan = stage.plan().set_index("move")
    assert plan.loc["address", "to_rerank"] == 2 and plan.loc["address", "not_sent_gold_outside_top_n"] == 1
    assert plan["sent"].sum() == 0  # planned, not sent yet
    assert plan["split"].eq("test").all()  # no silver split: the unfiltered test queries
    summary = stage.run().set_index("move")
    assert stub.counts["POST /v1/chat/completions"] == 7  # 2 + 2 + 3 queries sent, one request each

    assert summary["answered"].to_dict() == {"address": 2, "broaden": 2, "specify": 3}
    assert summary["sent"].sum() == 7 and summary["replayed"].sum() == 0 and summary["request_files"].sum() == 0
    assert summary.loc["address", "repair: unusable_answer"] == 1
    assert summary.loc["broaden", "repair: too_many"] == 1
    for rule in ("non_integer", "out_of_range", "duplicate", "too_few"):
        assert summary.loc["broaden", f"repair: {rule}"] == 1, rule
    assert summary[[f"repair: {r}" for r in REPAIR_RULES]].to_numpy().sum() == 6

    first = {m: read_run(run_path(cfg.paths.retrieval_runs, SYSTEM, m, "test")) for m in MOVES}
    for move in MOVES:
        path = run_path(cfg.paths.retrieval_runs, RERANKED, move, "test")
        assert path.parent.parent.name == "BM25-test_+_rerank"
        info = read_run_info(path)
        assert (info.system, info.setup, info.first_stage, info.family) == (RERANKED, "Baseline + rerank", SYSTEM,
                                                                            "llm-rerank")
        assert info.benchmark_checksum == bench.checksum() and info.stage == "10_llm_rerank"
        reranked = read_run(path)
        for qid, group in reranked.groupby("qid"):
            order = group.sort_values("rank")["docid"].tolist()
            before = first[move][first[move].qid == qid].sort_values("rank")["docid"].tolist()
            assert sorted(order) == sorted(before)  # nothing lost, nothing added
            query = bench.queries(move, "test").set_index("query_id").loc[qid, "querySentence"]
            if qid == outside or query == "Annotating named entities by hand is slow and expensive.":
                assert order == before  # not sent / unusable answer: the first-stage ranking
            elif query in ANSWERS:  # [1, 2, 3] -> 1, 2; ["2", 2, 99, True] -> 2, then 1 (fill)
                expected_top = [before[0], before[1]] if "noise" in query else [before[1], before[0]]
                assert order[:K] == expected_top and order[K:] == [d for d in before if d not in expected_top]
            else:  # [5, 4]: the 5th and 4th, then the rest in first-stage order
                assert order[:K] == [before[4], before[3]]
                assert order[K:] == [d for d in before if d not in order[:K]]

    # the reranker's own statistic: gold promotion over the answered queries with the gold in the top n, beside the
    # first stage's recall@n over the sample (Address: one gold outside the top n) and the paper's rate
    names = promotion_columns(TOP_N, K)
    assert summary[names["n_first"]].to_dict() == {"address": 3, "broaden": 2, "specify": 3}
    assert summary.loc["address", names["recall"]].startswith("66.7 [")
    low, high = proportion_confint(2, 2, alpha=0.05, method="beta")  # Clopper-Pearson: 2 of 2 in the top n
    assert summary.loc["broaden", names["recall"]] == f"100.0 [{100 * low:.1f}, {100 * high:.1f}]†"
    assert summary[names["n_promoted"]].to_dict() == summary["answered"].to_dict()
    assert summary[names["paper"]].to_dict() == {"address": "85.1", "broaden": "71.6", "specify": "86.6"}
    assert "Gold promotion" in (cfg.paths.tables / "rerank_summary.md").read_text()

    report = json.loads(cfg.paths.rerank_report.read_text())
    assert report["mode"] == "live" and report["answered_by"] == ["rerank-model"] and report["request_files"] is None
    address = next(j for j in report["jobs"] if j["move"] == "address")
    assert address["not_sent_gold_outside_top_n"] == 1 and address["run_file"].startswith("data/retrieval_runs/")
    for path in cfg.paths.root.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_offline_with_nothing_to_replay_writes_request_files_and_no_run_file(setup):
    cfg, bench, _ = setup
    stale = run_path(cfg.paths.retrieval_runs, RERANKED, Move.SPECIFY, "test")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")
    stage = LLMRerankStage.from_config(cfg)
    summary = stage.run().set_index("move")
    assert not stale.exists()
    assert not any((cfg.paths.retrieval_runs / "BM25-test_+_rerank").rglob("*.parquet"))
    assert summary["missing"].to_dict() == {"address": 2, "broaden": 2, "specify": 3}
    assert summary["answered"].sum() == 0
    # nothing was sent: every request was written as a request file
    assert summary["sent"].sum() == 0 and summary["request_files"].to_dict() == summary["to_rerank"].to_dict()
    report = json.loads(cfg.paths.rerank_report.read_text())
    assert (report["mode"] == "replay" and report["answered_by"] == []
            and report["request_files"].startswith("cache/llm/batches/"))
    files = sorted((cfg.paths.root / report["request_files"]).glob("r0_input_*.jsonl"))
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    assert (len(lines) == 7
            and all(x["url"] == "/v1/chat/completions" and x["body"]["model"] == "rerank-model" for x in lines))
    assert all(x["body"]["messages"][1]["content"].startswith("Query: ") for x in lines)
    notes = (cfg.paths.tables / "rerank_summary.md").read_text()
    assert "request files" in notes and str(cfg.paths.root) not in notes
    assert "no answer" in summary.loc["address", "run file"]


def test_partial_replay_counts_misses_and_names_the_answering_model(setup, monkeypatch, openai_stub):
    cfg, bench, _ = setup
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    stub = openai_stub(KEY, responder=_responder)
    live = _live(cfg, stub)
    live.run()
    # forget the recorded answers of every Specify request: those miss in replay
    entries = list((cfg.paths.root / "cache" / "llm" / "responses").rglob("*.json"))
    specify = [e for e in entries if json.loads(e.read_text())["meta"]["move"] == "specify"]
    assert len(specify) == 3
    for entry in specify:
        entry.unlink()
    monkeypatch.delenv("OPENAI_API_KEY")
    cfg.sections["llm"] = {"model": "configured-model", "mode": "batch"}
    cfg.sections["rerank"]["model"] = None  # llm.model, not the model whose answers were recorded
    summary = LLMRerankStage.from_config(cfg).run().set_index("move")
    # the request bodies name configured-model now: nothing recorded matches, no run file is written
    assert summary["replay_misses"].sum() == 7 and summary["answered"].sum() == 0
    assert not run_path(cfg.paths.retrieval_runs, RERANKED, Move.ADDRESS, "test").exists()

    cfg.sections["llm"] = {"model": "rerank-model", "mode": "batch"}
    stage = LLMRerankStage.from_config(cfg)
    summary = stage.run().set_index("move")
    # the invalid JSON answer of one Address query was never cached: it misses too
    assert summary["replay_misses"].to_dict() == {"address": 1, "broaden": 0, "specify": 3}
    assert summary["answered"].to_dict() == {"address": 1, "broaden": 2, "specify": 0}
    assert summary["replayed"].to_dict() == summary["answered"].to_dict() and summary["sent"].sum() == 0
    assert summary["request_files"].to_dict() == summary["replay_misses"].to_dict()
    assert run_path(cfg.paths.retrieval_runs, RERANKED, Move.ADDRESS, "test").exists()
    assert not run_path(cfg.paths.retrieval_runs, RERANKED, Move.SPECIFY, "test").exists()
    report = json.loads(cfg.paths.rerank_report.read_text())
    assert report["answered_by"] == ["rerank-model"] and report["request_files"]
    notes = (cfg.paths.tables / "rerank_summary.md").read_text()
    assert "answers replayed from ../shared/llm_cache, produced by rerank-model." in notes
    sidecar = json.loads(info_path(run_path(cfg.paths.retrieval_runs, RERANKED, Move.ADDRESS, "test")).read_text())
    assert sidecar["retriever"]["answered_by"] == ["rerank-model"] and sidecar["retriever"]["replayed_from"]
    assert re.search(r"4 reranking request\(s\) had no answer", notes)


def test_dry_run_mode_sends_nothing_even_with_a_key(setup, monkeypatch, openai_stub):
    cfg, _, _ = setup
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    stub = openai_stub(KEY, responder=_responder)
    cfg.sections["llm"] = {"model": "rerank-model", "base_url": stub.base_url, "mode": "dry_run"}
    summary = LLMRerankStage.from_config(cfg).run()
    assert stub.total_requests == 0
    assert summary["missing"].sum() == 7 and summary["replay_misses"].sum() == 0
    assert summary["sent"].sum() == 0 and summary["request_files"].sum() == 7
    report = json.loads(cfg.paths.rerank_report.read_text())
    assert (report["mode"] == "dry_run"
            and len(list((cfg.paths.root / report["request_files"]).glob("r0_input_*.jsonl"))) == 1)
    assert not (cfg.paths.retrieval_runs / "BM25-test_+_rerank").exists()


def test_max_queries_sends_a_seeded_sample_per_move_and_the_run_covers_only_it(setup, monkeypatch, openai_stub):
    cfg, bench, outside = setup
    cfg.sections["rerank"]["max_queries"] = 2  # of Address 3, Broaden 2, Specify 3 queries
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    sent: list[str] = []

    def responder(body: dict) -> str:
        sent.append(_query_of(body))
        return json.dumps({"ranking": [5, 4]})

    stub = openai_stub(KEY, responder=responder)
    summary = _live(cfg, stub).run().set_index("move")
    assert stub.counts["POST /v1/chat/completions"] == len(sent)
    assert summary["queries"].to_dict() == {"address": 2, "broaden": 2, "specify": 2}
    assert len(sent) == len(set(sent)) == summary["sent"].sum()
    samples = {}
    for move in MOVES:
        pairs = bench.queries(move, "test")
        text_of = dict(zip(pairs["query_id"], pairs["querySentence"]))
        path = run_path(cfg.paths.retrieval_runs, RERANKED, move, "test")
        sample = set(read_run(path)["qid"])
        assert len(sample) == 2 and sample <= set(text_of)  # the run file holds the sampled queries only
        assert read_run_info(path).qids == sorted(sample)
        # every sampled query whose gold is in the top n is sent, and no other query of the move
        assert {q for q, text in text_of.items() if text in sent} == sample - {outside}
        assert summary.loc[move.value, "sent"] == len(sample - {outside})
        samples[move.value] = sorted(sample)

    def planned_sample(seed: int) -> dict[str, list[str]]:
        cfg.seed = seed
        stage = LLMRerankStage.from_config(cfg)
        stage.plan()
        return {job.move.value: sorted(job.orders) for job in stage.jobs}

    seed = cfg.seed
    assert planned_sample(seed) == planned_sample(seed) == samples  # seeded: the same sample every time
    other = next((s for s in range(seed + 1, seed + 50) if planned_sample(s) != samples), None)
    assert other is not None, "another seed should draw another sample of 2 of 3 queries"
    assert planned_sample(other)["broaden"] == samples["broaden"]  # 2 of Broaden's 2: every seed takes both


def test_gold_promotion_cells_have_n_an_interval_and_the_papers_rate():
    names = promotion_columns(100, 10)
    cells = promotion_cells("specify", [1.0, 1.0, 0.0, 1.0], [True, False, True], top_n=100, k=10)
    assert cells[names["recall"]].startswith("75.0 [") and cells[names["recall"]].endswith("]†")
    assert cells[names["promoted"]].startswith("66.7 [") and cells[names["n_promoted"]] == 3
    assert cells[names["n_first"]] == 4 and cells[names["paper"]] == "86.6"
    empty = promotion_cells("broaden", [], [])  # a job that was not run: empty cells, n 0
    assert empty[names["recall"]] == "" and empty[names["promoted"]] == "" and empty[names["n_promoted"]] == 0
