"""Inspiration search (ratio_utils.apps.search) on a fixture index built with fake embeddings, and its errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fake_encoder import FakeEncoder

from ratio_utils.apps import search
from ratio_utils.param_sections import UnifiedParams
from ratio_utils.schema import Move

# (paper, para, sent, text, drop_reason) — invented for the test.
_SENTENCES = [
    ("P1", 0, 0, "Neural Parsers need large Treebanks.", None),
    ("P1", 0, 1, "Dropout between recurrent layers reduces Overfitting in parsers.", None),
    ("P1", 0, 2, "Table 3", "too_short"),
    ("P1", 1, 0, "We evaluate on the Penn Treebank.", None),
    ("P2", 0, 0, "Gazetteers bootstrap named entity labels cheaply.", None),
    ("P2", 0, 1, "Seed rules bootstrap named entity labels from gazetteers.", None),
    ("P2", 0, 2, "seed rules bootstrap named entity labels from gazetteers.", None),  # same text, other case
]


@pytest.fixture
def corpus_tables():
    sentences = pd.DataFrame(_SENTENCES, columns=["paper_id", "para", "sent", "text", "drop_reason"])
    sentences["text_clean"] = sentences["text"]
    sentences["year"] = sentences["paper_id"].map({"P1": 2011, "P2": 2015})
    papers = pd.DataFrame({"paper_id": ["P1", "P2"], "title": ["Regularising parsers", "Cheap NER labels"],
                           "year": [2011, 2015]})
    return sentences, papers


@pytest.fixture
def fixture_index(tmp_path, corpus_tables):
    rows, counts = search.sentence_rows(*corpus_tables)
    folder = tmp_path / "index"
    meta = search.build_index(rows, FakeEncoder(doc_prefix="document: "), folder, model=None, counts=counts)
    return folder, meta


def test_sentence_rows_keep_original_case_previous_sentence_and_count_what_is_left_out(corpus_tables):
    rows, counts = search.sentence_rows(*corpus_tables)
    assert counts == {"sentences": 7, "dropped by the corpus cleaning rules": 1, "empty after cleaning": 0,
                      "repeated text (indexed once)": 1, "indexed": 5}
    dropout = rows[rows.sentence.str.startswith("Dropout")].iloc[0]
    assert dropout["text"] == dropout["sentence"].lower()  # embedded as the benchmark's (lower-cased) sentences
    assert (dropout["previous"], dropout["title"], dropout["year"]) == ("Neural Parsers need large Treebanks.",
                                                                        "Regularising parsers", 2011)
    # reading order, dropped ones too
    assert rows[rows.sentence.str.startswith("We evaluate")]["previous"].iloc[0] == "Table 3"
    assert dropout["next"] == "Table 3" and rows[rows.sentence.str.startswith("We evaluate")]["next"].iloc[0] == ""


def test_search_returns_ranked_sentences_with_paper_context(fixture_index):
    folder, meta = fixture_index
    assert meta["size"] == 5 and meta["model_fingerprint"] == "fake-model-1"
    index = search.SearchIndex.open(folder, "fake-model-1")
    results = search.search_index("How can parsers avoid overfitting?", "address", FakeEncoder(), index, "query: ",
                                  top=3)
    assert list(results.columns) == list(search.HIT_COLUMNS)
    assert list(results["rank"]) == [1, 2, 3]
    assert results["score"].is_monotonic_decreasing
    top = results.iloc[0]
    assert top["sentence"] == "Dropout between recurrent layers reduces Overfitting in parsers."
    assert (top["paper_id"], top["title"], top["year"], top["previous"]) == ("P1", "Regularising parsers", 2011,
                                                                            "Neural Parsers need large Treebanks.")
    text = search.format_results("How can parsers avoid overfitting?", "address", results)
    assert "Dropout between recurrent layers reduces Overfitting" in text and "before: Neural Parsers" in text
    payload = json.loads(search.results_json("q", "address", results))
    assert payload["move"] == "address" and payload["results"][0]["paper_id"] == "P1"


def test_the_statement_itself_is_not_returned(fixture_index):
    folder, _ = fixture_index
    index = search.SearchIndex.open(folder, "fake-model-1")
    statement = "We evaluate on the Penn Treebank."
    results = search.search_index(statement, "specify", FakeEncoder(), index, "query: ", top=5)
    assert statement not in set(results["sentence"]) and len(results) == 4


def test_errors_unknown_move_empty_statement_missing_and_stale_index(fixture_index, tmp_path):
    folder, _ = fixture_index
    index = search.SearchIndex.open(folder, "fake-model-1")
    with pytest.raises(search.SearchError, match="unknown move"):
        search.search_index("x", "analogy", FakeEncoder(), index, "query: ")
    with pytest.raises(search.SearchError, match="empty"):
        search.search_index("   ", "broaden", FakeEncoder(), index, "query: ")
    with pytest.raises(search.SearchError, match="no search index"):
        search.SearchIndex.open(tmp_path / "nowhere", "fake-model-1")
    with pytest.raises(search.SearchError, match="stale index"):
        search.SearchIndex.open(folder, "fake-model-2")
    meta = json.loads((folder / search.META_FILE).read_text())
    (folder / search.META_FILE).write_text(json.dumps({**meta, "format": 1}))
    with pytest.raises(search.SearchError, match="has format 1.*rebuild it"):
        search.SearchIndex.open(folder, "fake-model-1")


def test_cli_errors_exit_2_with_a_message(cfg, capsys, fixture_index):
    assert search.main(["some statement", "--move", "analogy"]) == 2
    assert "unknown move" in capsys.readouterr().err
    assert search.main(["", "--move", "broaden"]) == 2
    assert "empty" in capsys.readouterr().err
    assert search.main(["a statement", "--move", "broaden"]) == 2  # no fine-tuned model in the temp root
    assert "no fine-tuned broaden retriever" in capsys.readouterr().err
    assert search.main(["index", "--model", "unified"]) == 2
    assert "no unified retriever" in capsys.readouterr().err


def test_cli_has_query_and_index_subcommands_named_after_the_script(cfg, capsys, fixture_index):
    """`ratio-search query ...` / `ratio-search index ...` are argparse subcommands; the plain statement form is
    short for `query`; errors and help name the script; --help shows an example."""
    with pytest.raises(SystemExit) as done:
        search.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ratio-search") and "{query,index}" in out and "examples:" in out
    assert 'ratio-search query "' in out
    for verb in ("query", "index"):
        with pytest.raises(SystemExit):
            search.main([verb, "--help"])
        helped = capsys.readouterr().out
        assert helped.startswith(f"usage: ratio-search {verb}") and "--model" in helped and "example" in helped
    folder, _ = fixture_index
    assert search.main(["query", "a statement", "--move", "analogy"]) == 2
    assert capsys.readouterr().err.startswith("ratio-search: error: ")
    assert search.main(["a statement", "--move", "broaden"]) == 2  # short form: the same as `query`
    assert "ratio-search: error: no fine-tuned broaden retriever" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        search.main(["query", "--no-such-flag"])
    assert "ratio-search query: error:" in capsys.readouterr().err
    assert search.main(["query", "x", "--model", "no-such-model-anywhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratio-search: error: ") and "Traceback" not in err


def test_a_statement_is_encoded_once_per_model_and_prefix(fixture_index):
    """Through the encoder's memo: the same statement asked twice with one model and prefix is one encoding."""
    from ratio_utils.retrieval.dense import EmbeddingMemo

    folder, _ = fixture_index
    encoder = FakeEncoder(doc_prefix="document: ", memo=EmbeddingMemo())
    index = search.SearchIndex.open(folder, "fake-model-1")
    first = search.search_index("Parsers overfit.", "broaden", encoder, index, "query: ", top=2)
    second = search.search_index("Parsers overfit.", "specify", encoder, index, "query: ", top=2)
    assert encoder.encoded_texts == 1 and first.equals(second)
    search.search_index("Parsers overfit.", "specify", encoder, index, "other: ", top=2)
    assert encoder.encoded_texts == 2


def test_index_reuses_the_embedding_cache(tmp_path, corpus_tables):
    rows, _ = search.sentence_rows(*corpus_tables)
    first = FakeEncoder(doc_prefix="document: ", cache_dir=tmp_path / "cache")
    search.build_index(rows, first, tmp_path / "a", model=None)
    second = FakeEncoder(doc_prefix="document: ", cache_dir=tmp_path / "cache")
    search.build_index(rows, second, tmp_path / "b", model=None)
    assert first.encoded_texts == 5 and second.encoded_texts == 0


def test_describe_model_reads_the_unified_query_format(tmp_path):
    from ratio_utils.train import unified

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / unified.FORMAT_FILE).write_text(json.dumps(unified.query_format(UnifiedParams())))
    model = search.describe_model(folder)
    assert model.kind == "unified" and model.query_prefix(Move.BROADEN) == unified.query_prefix("broaden")
    plain = search.describe_model(tmp_path)
    assert plain.query_prefix(Move.BROADEN) == "query: " and plain.doc_prefix == "document: "



def test_describe_model_reads_a_published_models_stored_prompts(tmp_path):
    """Notebook 09 saves the prefixes a model was trained with as its sentence-transformers prompts; search reads
    them there (models.stored_prompts), the same reader evaluate uses."""
    from ratio_utils.models import ST_CONFIG_FILE
    from ratio_utils.schema import MODEL_RESULTS_FILE

    folder = tmp_path / "all-MiniLM-L6-v2__broaden"
    folder.mkdir()
    (folder / ST_CONFIG_FILE).write_text(json.dumps({"prompts": {"query": "q> ", "document": "d> "}}))
    assert search.describe_model(folder).kind == "other"  # prompts alone: not a model notebook 09 published
    (folder / MODEL_RESULTS_FILE).write_text(json.dumps({"test": {}}))
    model = search.describe_model(folder)
    assert model.kind == "per-move" and model.query_prefix(Move.SPECIFY) == "q> " and model.doc_prefix == "d> "

@pytest.mark.models
def test_cli_builds_an_index_and_answers_with_a_real_model(cfg, tmp_path, corpus_tables, capsys):
    sentences, papers = corpus_tables
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sentences.to_parquet(corpus / "sentences.parquet")
    papers.to_parquet(corpus / "papers.parquet")
    index = tmp_path / "idx"
    assert search.main(["index", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus), "--out", str(index)]) == 0
    assert "indexed 5 sentences" in capsys.readouterr().out
    assert search.main(["index", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus), "--out", str(tmp_path / "p2"),
                        "--papers", "P2"]) == 0
    assert "indexed 2 sentences" in capsys.readouterr().out
    assert search.main(["index", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus), "--papers", "P9"]) == 2
    assert "not in sentences.parquet: ['P9']" in capsys.readouterr().err
    args = ["Annotating entities by hand is expensive.", "--move", "address", "--model", "all-MiniLM-L6-v2",
            "--index", str(index), "--top", "2"]
    assert search.main(args + ["--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in payload["results"]] == [1, 2]
    assert payload["results"][0]["paper_id"] == "P2"  # the two NER sentences outrank the parser ones
    meta = json.loads((index / search.META_FILE).read_text())
    (index / search.META_FILE).write_text(json.dumps({**meta, "model_fingerprint": "0" * 64}))
    assert search.main(args) == 2
    assert "stale index" in capsys.readouterr().err


# --- issue 43 item 9: an index is swapped in whole and refused when its files come from two builds ------------------


def _other_rows(corpus_tables):
    sentences, papers = corpus_tables
    other = sentences[sentences.paper_id == "P2"].copy()
    other["text"] = other["text_clean"] = ["Crowd workers label entities fast.",
                                           "Active learning picks what to label.", "Label noise hurts recall."]
    return search.sentence_rows(other, papers)[0]


def test_a_mixed_index_new_vectors_beside_old_sentences_is_refused(fixture_index, tmp_path, corpus_tables):
    """A rebuild killed between its files (issue 43, 9): plant the new faiss file beside the old sentences."""
    import shutil

    folder, meta = fixture_index
    assert set(meta["checksums"]) == {search.INDEX_FILE, search.ROWS_FILE, search.PAPERS_FILE}
    newer = tmp_path / "newer"
    search.build_index(_other_rows(corpus_tables), FakeEncoder(doc_prefix="document: "), newer, model=None)
    shutil.copyfile(newer / search.INDEX_FILE, folder / search.INDEX_FILE)
    with pytest.raises(search.SearchError, match=r"mixed or damaged index .*index: index\.faiss is not the file"):
        search.SearchIndex.open(folder, "fake-model-1")
    shutil.copyfile(newer / search.ROWS_FILE, folder / search.ROWS_FILE)  # new sentences too, but old index.json
    with pytest.raises(search.SearchError, match="mixed or damaged index"):
        search.SearchIndex.open(folder, "fake-model-1")
    shutil.copyfile(newer / search.META_FILE, folder / search.META_FILE)  # new index.json, old papers.parquet
    with pytest.raises(search.SearchError, match="papers.parquet is not the file"):
        search.SearchIndex.open(folder, "fake-model-1")
    shutil.copyfile(newer / search.PAPERS_FILE, folder / search.PAPERS_FILE)  # now every file is the newer build's
    assert len(search.SearchIndex.open(folder, "fake-model-1").rows) == 3


def test_a_rebuild_that_fails_leaves_the_old_index_whole_and_no_temporary_folder(fixture_index, corpus_tables,
                                                                                 monkeypatch):
    folder, _ = fixture_index
    before = {name: (folder / name).read_bytes() for name in (search.INDEX_FILE, search.ROWS_FILE, search.PAPERS_FILE,
                                                             search.META_FILE)}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the moment the old code would have left new vectors beside old sentences

    monkeypatch.setattr(search, "write_json_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        search.build_index(_other_rows(corpus_tables), FakeEncoder(doc_prefix="document: "), folder, model=None)
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["index"]
    assert len(search.SearchIndex.open(folder, "fake-model-1").rows) == 5


def test_index_honours_ratio_embedding_cache(cfg, tmp_path, corpus_tables, monkeypatch):
    sentences, papers = corpus_tables
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sentences.to_parquet(corpus / "sentences.parquet")
    papers.to_parquet(corpus / "papers.parquet")
    made = []

    def fake_encoder(model, batch_size=64, cache_dir=None):
        made.append(cache_dir)
        return FakeEncoder(doc_prefix="document: ", cache_dir=cache_dir or None)

    monkeypatch.setattr(search, "query_encoder", fake_encoder)
    qmodel = search.describe_model(tmp_path)
    monkeypatch.delenv("RATIO_EMBEDDING_CACHE", raising=False)
    assert search.index_embedding_cache(cfg) == cfg.paths.embedding_cache
    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", str(tmp_path / "mine"))
    search.build_index_from_corpus(cfg, corpus, qmodel, tmp_path / "idx")
    assert made[-1] == tmp_path / "mine" and any((tmp_path / "mine").rglob("*.npy"))
    assert not cfg.paths.embedding_cache.exists()
    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", "off")
    search.build_index_from_corpus(cfg, corpus, qmodel, tmp_path / "idx")
    assert made[-1] is False


def test_bad_params_a_non_utf8_table_or_statement_are_one_line_exit_2(cfg, tmp_path, corpus_tables, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("retrieval: {k: [\n")
    for params in (broken, tmp_path / "missing.yaml"):
        assert search.main(["query", "a statement", "--move", "broaden", "--params", str(params)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ratio-search: error: ") and str(params) in err and err.count("\n") == 1
    assert search.main(["query", "caf\udce9 au lait", "--move", "broaden"]) == 2  # argv of Latin-1 bytes
    err = capsys.readouterr().err
    assert "not valid UTF-8" in err and err.count("\n") == 1
    sentences, papers = corpus_tables
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    binary = sentences.assign(text=[t.encode("latin-1") for t in sentences["text"]])
    binary.loc[1, "text"] = "Dropout r\xe9duit".encode("latin-1")
    binary.to_parquet(corpus / "sentences.parquet")
    assert search.main(["index", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert f"{corpus / 'sentences.parquet'}: column 'text' holds bytes" in err and "row 0" in err
    assert err.count("\n") == 1
    (corpus / "sentences.parquet").write_bytes(b"not parquet at all")
    assert search.main(["index", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert "sentences.parquet: is not a readable parquet table" in err and err.count("\n") == 1


# --- LLM rerank where people search (issue 47, 2), against the local OpenAI-compatible stub -------------------------


STUB_KEY = "sk-search-test"


def _ranking_answer(numbers):
    return lambda body: json.dumps({"ranking": numbers})


@pytest.fixture
def llm_env(monkeypatch):
    """Point the run's LLM client at a stub (its URL set by the test) and say nothing about other keys."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return monkeypatch


def _first_stage(fixture_index, statement="How can parsers avoid overfitting?"):
    folder, _ = fixture_index
    index = search.SearchIndex.open(folder, "fake-model-1")
    return search.search_index(statement, "address", FakeEncoder(), index, "query: ", top=5), index


def test_rerank_sends_notebook_10s_request_and_applies_its_order(cfg, fixture_index, llm_env, openai_stub):
    from ratio_utils.apps.search_rerank import SearchReranker
    from ratio_utils.param_sections import RerankParams
    from ratio_utils.retrieval.rerank import load_rerank_prompt, rerank_request

    statement = "How can parsers avoid overfitting?"
    first, index = _first_stage(fixture_index, statement)
    bodies = []

    def answer(body):
        bodies.append(body)
        return json.dumps({"ranking": [3, "1", 3, 9]})  # a numeric string, a duplicate, one out of range, too few

    stub = openai_stub(STUB_KEY, responder=answer)
    llm_env.setenv("OPENAI_API_KEY", STUB_KEY)
    llm_env.setenv("OPENAI_BASE_URL", stub.base_url)
    reranker = SearchReranker(cfg, max_retries=0)
    hits, outcome = search.search_and_rerank(statement, "address", FakeEncoder(), index, "query: ", 5, reranker)
    assert stub.counts["POST /v1/chat/completions"] == 1
    again, cached = search.search_and_rerank(statement, "address", FakeEncoder(), index, "query: ", 5, reranker)
    assert stub.counts["POST /v1/chat/completions"] == 1 and cached.cached  # the on-disk answer cache
    params = cfg.section("rerank", RerankParams)
    expected = rerank_request("x", load_rerank_prompt(cfg.paths.from_params(params.prompts_dir), Move.ADDRESS,
                                                      params.prompt, params.k),
                              statement, list(first["sentence"]), params.model, params)
    assert bodies[0]["messages"] == expected.messages  # byte for byte notebook 10's request
    assert outcome.status == "reranked" and set(outcome.repairs) == {"duplicate", "out_of_range", "too_few"}
    order = list(first["docid"])
    assert list(hits["docid"]) == [order[2], order[0], order[1], order[3], order[4]]
    assert list(hits["rank"]) == [1, 2, 3, 4, 5] and list(hits["first_stage_rank"]) == [3, 1, 2, 4, 5]
    assert list(again["docid"]) == list(hits["docid"])


def test_rerank_says_unavailable_without_a_key_and_failed_on_a_bad_answer_or_timeout(cfg, fixture_index, llm_env,
                                                                                     openai_stub):
    import time

    from ratio_utils.apps.search_rerank import SearchReranker

    first, _ = _first_stage(fixture_index)
    outcome_hits, outcome = SearchReranker(cfg).rerank("How can parsers avoid overfitting?", "address", first)
    assert outcome.status == "unavailable" and "no API key in $OPENAI_API_KEY" in outcome.message
    assert list(outcome_hits["docid"]) == list(first["docid"])  # the first-stage order, said so
    stub = openai_stub(STUB_KEY, responder=lambda body: "this is not json")
    llm_env.setenv("OPENAI_API_KEY", STUB_KEY)
    llm_env.setenv("OPENAI_BASE_URL", stub.base_url)
    hits, outcome = SearchReranker(cfg, max_retries=0).rerank("Parsers overfit.", "address", first)
    assert outcome.status == "unusable_answer" and "not valid JSON" in outcome.message
    assert list(hits["docid"]) == list(first["docid"])
    stub = openai_stub(STUB_KEY, responder=lambda body: time.sleep(2) or json.dumps({"ranking": [2]}))
    llm_env.setenv("OPENAI_BASE_URL", stub.base_url)
    started = time.perf_counter()
    hits, outcome = SearchReranker(cfg, timeout_s=0.3, max_retries=0).rerank("Slow parsers.", "address", first)
    assert time.perf_counter() - started < 1.9
    assert outcome.status == "failed" and "Timeout" in outcome.message and "first-stage order" in outcome.message
    assert list(hits["docid"]) == list(first["docid"])


@pytest.mark.models
def test_cli_query_rerank_through_the_stub_and_unavailable_without_a_key(cfg, tmp_path, corpus_tables, capsys,
                                                                         llm_env, openai_stub):
    sentences, papers = corpus_tables
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sentences.to_parquet(corpus / "sentences.parquet")
    papers.to_parquet(corpus / "papers.parquet")
    index = tmp_path / "idx"
    assert search.main(["index", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus), "--out", str(index)]) == 0
    capsys.readouterr()
    args = ["query", "Annotating entities by hand is expensive.", "--move", "address", "--model", "all-MiniLM-L6-v2",
            "--index", str(index), "--top", "3"]
    assert search.main(args + ["--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert "rerank" not in first
    assert search.main(args + ["--rerank"]) == 0
    out = capsys.readouterr().out
    assert "rerank: reranking is unavailable (no API key in $OPENAI_API_KEY" in out
    stub = openai_stub(STUB_KEY, responder=_ranking_answer([3, 1, 2]))
    llm_env.setenv("OPENAI_API_KEY", STUB_KEY)
    llm_env.setenv("OPENAI_BASE_URL", stub.base_url)
    assert search.main(args + ["--rerank", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["rerank"]["status"] == "reranked" and payload["rerank"]["reranker"] == "gpt-5-mini"
    order = [r["docid"] for r in first["results"]]
    assert [r["docid"] for r in payload["results"]] == [order[2], order[0], order[1]]


# --- index types (issue 47, 3) ---------------------------------------------------------------------------------------


def test_index_types_build_record_their_parameters_load_and_answer(tmp_path, corpus_tables):
    import faiss

    rows, _ = search.sentence_rows(*corpus_tables)
    with pytest.raises(search.SearchError, match="ivfpq index needs at least 10,000 sentences"):
        search.build_index(rows, FakeEncoder(doc_prefix="document: "), tmp_path / "small", model=None,
                           index_type="ivfpq")
    with pytest.raises(search.SearchError, match="unknown index type 'annoy'"):
        search.index_spec("annoy", 10, 64)
    assert search.index_spec(None, search.FLAT_MAX_VECTORS, 384).type == "flat"
    assert search.index_spec(None, search.FLAT_MAX_VECTORS + 1, 384).factory.startswith("IVF")
    words = ["parser", "treebank", "entity", "label", "gazetteer", "dropout", "noise", "domain", "metric", "summary",
             "translation", "attention", "corpus", "annotator", "lexicon", "marker", "query", "retrieval"]
    rng = np.random.default_rng(3)
    texts = sorted({" ".join(rng.choice(words, size=6)) + f" {i % 97}" for i in range(12_000)})
    many = pd.DataFrame({"paper_id": [f"P{i // 50}" for i in range(len(texts))], "para": 0,
                         "sent": [i % 50 for i in range(len(texts))], "text": texts})
    big, _ = search.sentence_rows(many, None)
    answers = {}
    for kind in ("flat", "hnsw", "ivfpq"):
        folder = tmp_path / kind
        meta = search.build_index(big, FakeEncoder(doc_prefix="document: "), folder, model=None, index_type=kind)
        recorded = json.loads((folder / search.META_FILE).read_text())["index_type"]
        assert recorded == meta["index_type"] and recorded["type"] == kind
        index = search.SearchIndex.open(folder, "fake-model-1")
        if kind == "hnsw":
            assert (isinstance(index.index, faiss.IndexHNSWSQ)
                    and index.index.hnsw.efSearch == recorded["search"]["efSearch"])
        if kind == "ivfpq":
            assert faiss.extract_index_ivf(index.index).nprobe == recorded["search"]["nprobe"] == 128
        answers[kind] = [set(search.search_index(q, "address", FakeEncoder(), index, "query: ", top=10)["docid"])
                         for q in ("entity label gazetteer", "parser dropout noise", "metric summary corpus")]
    for kind in ("hnsw", "ivfpq"):
        recall = np.mean([len(a & b) / 10 for a, b in zip(answers[kind], answers["flat"])])
        assert recall >= 0.8, (kind, recall)
