"""Inspiration search (ratio_utils.apps.search) on a fixture index built with fake embeddings, and its errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from fake_encoder import FakeEncoder

from ratio_utils.param_sections import UnifiedParams
from ratio_utils.apps import search
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
    papers = pd.DataFrame({"paper_id": ["P1", "P2"], "title": ["Regularising parsers", "Cheap NER labels"], "year": [2011, 2015]})
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
    assert (dropout["previous"], dropout["title"], dropout["year"]) == ("Neural Parsers need large Treebanks.", "Regularising parsers", 2011)
    assert rows[rows.sentence.str.startswith("We evaluate")]["previous"].iloc[0] == "Table 3"  # reading order, dropped ones too
    assert dropout["next"] == "Table 3" and rows[rows.sentence.str.startswith("We evaluate")]["next"].iloc[0] == ""


def test_search_returns_ranked_sentences_with_paper_context(fixture_index):
    folder, meta = fixture_index
    assert meta["size"] == 5 and meta["model_fingerprint"] == "fake-model-1"
    index = search.SearchIndex.open(folder, "fake-model-1")
    results = search.search_index("How can parsers avoid overfitting?", "address", FakeEncoder(), index, "query: ", top=3)
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
