"""The marker lexicon (ratio_utils.lexicon.markers), curation statistics (ratio_utils.lexicon.curation) and the LLM
marker loop's pure parts (ratio_utils.lexicon.marker_llm), on the released lexicon and on small fixtures."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from ratio_utils.io import InputError, sha256_file
from ratio_utils.lexicon import curation, marker_llm
from ratio_utils.lexicon import markers as lx
from ratio_utils.llm import ChatResult
from ratio_utils.param_sections import LexiconParams
from ratio_utils.parts import part_path
from ratio_utils.schema import GROUP_TO_MOVE, LEXICON_COLUMNS, SENTENCE_COLUMNS, Move, normalize_marker

FIXTURES = Path(__file__).parent / "fixtures" / "lexicon"


@pytest.fixture(scope="module")
def released_csv(shared_dir) -> Path:
    return shared_dir / "lexicon" / lx.RELEASED_LEXICON_NAME


@pytest.fixture(scope="module")
def released(released_csv) -> lx.Lexicon:
    return lx.load_released_csv(released_csv)


@pytest.fixture(scope="module")
def released_raw(released_csv) -> pd.DataFrame:
    """The file as the csv module reads it, with line numbers: the independent reference."""
    with open(released_csv, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = [dict(row, line=reader.line_num) for row in reader]
    frame = pd.DataFrame(rows)
    frame["norm"] = frame["word"].map(normalize_marker)
    return frame


# --- the released file ---------------------------------------------------------------------------


def test_pinned_checksum_matches_the_shared_file(released_csv):
    assert lx.PinnedFile.load().sha256 == sha256_file(released_csv)


def test_released_lexicon_validates_and_keeps_every_phrase(released, released_raw):
    frame = released.frame
    assert list(frame.columns) == list(LEXICON_COLUMNS)
    assert frame["marker"].is_unique
    assert released.report["rows_in_file"] == len(released_raw)
    # Every phrase of the file is a marker of the artefact, and every move row keeps its move.
    assert set(frame["marker"]) == set(released_raw["norm"])
    by_marker = frame.set_index("marker")
    move_rows = released_raw[released_raw["group"].isin(GROUP_TO_MOVE)]
    for norm, group in zip(move_rows["norm"], move_rows["group"]):
        assert by_marker.loc[norm, "move"] == GROUP_TO_MOVE[group].value
    # A phrase only in BLACKLIST is rejected; extendable connectives are the special_word rows.
    only_blacklist = released_raw.groupby("norm")["group"].agg(set).map(lambda g: g == {"BLACKLIST"})
    assert set(frame.loc[frame["kind"] == "rejected", "marker"]) == set(only_blacklist[only_blacklist].index)
    special = set(released_raw.loc[released_raw["special_word"] == "True", "norm"])
    assert set(frame.loc[frame["extendable"], "marker"]) == special
    assert (frame.loc[frame["source"] == "extendable", "marker"].isin(special)).all()


def test_released_lexicon_reports_typo_clauses_and_conflicts(released, released_raw):
    report = released.report
    typo_lines = released_raw.loc[released_raw["query_type"] == "manual`", "line"].tolist()
    assert [t["line"] for t in report["query_type_typos"]] == typo_lines and typo_lines
    # Conflicts: exactly the normalised phrases whose rows span more than one group.
    groups = released_raw.groupby("norm")["group"].nunique()
    assert {c["marker"] for c in report["conflicts"]} == set(groups[groups > 1].index)
    # The move lexicons are disjoint after normalisation (else loading would have failed).
    moves = released_raw[released_raw["group"].isin(GROUP_TO_MOVE)].groupby("norm")["group"].nunique()
    assert moves.max() == 1
    # Phrases with a clause after an inner comma keep the whole phrase as their marker.
    clause_rows = released_raw[released_raw["norm"].map(lambda m: lx.split_trailing_clause(m)[1] is not None)]
    assert report["trailing_clause_rows"] == len(clause_rows) > 0
    assert clause_rows["norm"].isin(released.frame["marker"]).all()
    assert sum(report["trailing_clause_openers"].values()) == len(clause_rows)


def test_split_trailing_clause():
    assert lx.split_trailing_clause("to address these limitations, we propose") == ("to address these limitations",
                                                                                     "we propose")
    assert lx.split_trailing_clause("more generally, the same result holds for") == ("more generally",
                                                                                     "the same result holds for")
    assert lx.split_trailing_clause("accordingly, to address this") == ("accordingly, to address this", None)
    assert lx.split_trailing_clause("at a macro scale, this") == ("at a macro scale, this", None)
    assert lx.split_trailing_clause("for example") == ("for example", None)


# --- fixtures: a good file and each kind of bad file ---------------------------------------------


def test_good_fixture_merges_and_resolves_as_documented():
    lexicon = lx.load_released_csv(FIXTURES / "good.csv")
    frame = lexicon.frame.set_index("marker")
    assert frame.loc["for example", ["kind", "move", "source"]].tolist() == ["move", "specify", "manual"]
    assert frame.loc["in particular", "source"] == "manual"  # the manual` typo, read as manual
    assert lexicon.report["query_type_typos"] == [{"line": 4, "value": "manual`", "read_as": "manual"}]
    assert frame.loc["to address this problem", "source"] == "manual"  # the manual row outranks the LLM row
    assert frame.loc["to this end, we propose", "move"] == "address"
    assert frame.loc["to this end", "kind"] == "rejected"
    assert lexicon.report["trailing_clause_openers"] == {"rejected": 1}
    assert "accordingly, to tackle this" in frame.index
    assert frame.loc["in contrast", ["kind", "category"]].tolist() == ["distractor", "explicit_contrast"]
    assert frame.loc["to generalize these results", "source"] == "pattern"
    assert bool(frame.loc["to address", "extendable"]) and frame.loc["to address", "source"] == "extendable"
    assert lexicon.report["conflicts_by_type"] == {"move_vs_rejected": 1, "distractor_vs_rejected": 1}
    assert len(frame) == 11


@pytest.mark.parametrize(
    "name, line, message",
    [
        ("bad_missing_column.csv", 1, "missing required column"),
        ("bad_unknown_group.csv", 3, "unknown group 'more_vague'"),
        ("bad_move_conflict.csv", 5, "must be disjoint"),
        ("bad_distractor_conflict.csv", 3, "must be disjoint"),
        ("bad_duplicate_conflict.csv", 4, "repeats line 2"),
        ("bad_query_type.csv", 2, "unknown query_type 'handmade'"),
        ("bad_strength.csv", 3, "unknown strength label 'MAYBE'"),
        ("bad_special_word.csv", 2, "special_word must be True or False"),
        ("bad_special_word_mismatch.csv", 3, "contradicts query_type"),
        ("bad_empty_word.csv", 3, "empty marker"),
    ],
)
def test_bad_files_fail_naming_file_and_line(name, line, message):
    path = FIXTURES / name
    with pytest.raises(InputError, match=message) as info:
        lx.load_released_csv(path)
    assert info.value.line == line
    assert f"{path}:{line}" in str(info.value)


def test_artefact_round_trip(tmp_path):
    lexicon = lx.load_released_csv(FIXTURES / "good.csv")
    written = lx.write_lexicon(lexicon, tmp_path / "lexicon.parquet")
    back = lx.read_artefact(tmp_path / "lexicon.parquet")
    pd.testing.assert_frame_equal(back.frame, lexicon.frame)
    assert list(pd.read_csv(written["csv"]).columns) == list(LEXICON_COLUMNS)
    assert back.report["sha256"] == sha256_file(FIXTURES / "good.csv")
    with pytest.raises(FileNotFoundError, match=r"lexicon_curated\.parquet: no lexicon artefact; notebook 01 writes"):
        lx.read_artefact(tmp_path / "lexicon_curated.parquet")


def test_notebook_04_writes_the_final_lexicon_and_02_03_read_the_curated_one_after_it(tmp_path, monkeypatch):
    """01 writes the curated lexicon and 04 the final one (curated + pattern markers), each its own file: 04 leaves
    the curated file byte for byte as 01 wrote it, so 02 and 03 rerun after 04 read 01's lexicon, and 04 rerun
    builds on the curated lexicon again, not on its own output."""
    from ratio_utils.stages.llm_marker_generation import LLMMarkerGenerationStage
    from ratio_utils.stages.marker_curation import MarkerCurationStage
    from ratio_utils.stages.marker_extensions import MarkerExtensionsStage
    from ratio_utils.stages.pattern_expansion import PatternExpansionStage

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    overrides = {"lexicon": {"released_csv": str(FIXTURES / "good.csv")}}
    curation_stage = MarkerCurationStage.from_params("params/default.yaml", overrides)
    curation_stage.write_artefact()
    paths = curation_stage.cfg.paths
    curated = set(curation_stage.lexicon.frame["marker"])
    curated_bytes = paths.curated_lexicon.read_bytes()
    pattern_marker = "to remedy this shortcoming"  # not in good.csv
    grammatical = pd.DataFrame({"marker": [pattern_marker], "move": ["address"], "template": ["remedy-test"]})

    for _ in range(2):  # 04 run twice: the second run must build on the curated lexicon again
        expansion = PatternExpansionStage.from_params("params/default.yaml", overrides)
        expansion.filtered = grammatical  # as if the grammaticality filter had kept this expansion
        expansion.table4_lexicon()
        final = lx.read_artefact(paths.final_lexicon)
        assert set(final.frame["marker"]) == curated | {pattern_marker}
        assert final.report["added"] == {"pattern": 1}
        assert paths.curated_lexicon.read_bytes() == curated_bytes

    # 02 and 03 rerun after 04: the curated lexicon, without 04's pattern marker
    extensions = MarkerExtensionsStage.from_params("params/default.yaml", overrides)
    assert set(extensions.connectives["marker"]) == set(curation_stage.lexicon.extendable_connectives()["marker"])
    generation = LLMMarkerGenerationStage.from_params("params/default.yaml", overrides)
    assert set(generation.lexicon.frame["marker"]) == curated
    assert "added" not in generation.lexicon.report


# --- download fallback (loopback server, no network) ------------------------------------------------


def test_download_refuses_a_file_that_differs_from_the_pin(loopback, cfg, tmp_path):
    from ratio_utils.corpora.download import ChecksumError

    served, base = loopback
    (served / "lexicon.csv").write_bytes((FIXTURES / "good.csv").read_bytes())
    pinned = lx.PinnedFile(url=f"{base}/lexicon.csv", sha256="0" * 64)
    params = LexiconParams(released_csv="no/such/file.csv")
    with pytest.raises(ChecksumError, match="sha256"):
        lx.released_lexicon_path(cfg, params, pinned)
    assert not list((cfg.paths.downloads / "lexicon").glob("*"))


def test_released_path_falls_back_to_download_without_shared(loopback, cfg, tmp_path, monkeypatch):
    served, base = loopback
    (served / "lexicon.csv").write_bytes((FIXTURES / "good.csv").read_bytes())
    pinned = lx.PinnedFile(url=f"{base}/lexicon.csv", sha256=sha256_file(FIXTURES / "good.csv"))
    params = LexiconParams(released_csv="no/such/file.csv")
    path = lx.released_lexicon_path(cfg, params, pinned)
    assert path.is_file() and path.parent == cfg.paths.downloads / "lexicon"
    assert lx.released_lexicon_path(cfg, params, pinned) == path  # a checked local copy is reused


# --- the reviewers' rule ------------------------------------------------------------------------


def test_review_rule_needs_every_reviewer_and_every_pair():
    sheet = pd.read_csv(FIXTURES / "decisions_two_reviewers.csv", dtype=str, keep_default_na=False)
    result = lx.apply_review_rule(sheet, ("reviewer_1", "reviewer_2")).set_index("span")
    assert result.loc["for example", "accepted_move"] == "specify"  # case-insensitive decisions
    assert pd.isna(result.loc["to this end", "accepted_move"])  # one reviewer rejected one pair
    assert not result.loc["in particular", "complete"] and pd.isna(result.loc["in particular", "accepted_move"])
    assert pd.isna(result.loc["more generally", "accepted_move"])  # reviewers disagree on the move
    assert result["pairs"].tolist() == [2, 2, 2, 2]


def test_review_decision_files_are_checked(tmp_path):
    (tmp_path / "a.csv").write_bytes((FIXTURES / "decisions_bad_value.csv").read_bytes())
    with pytest.raises(InputError, match="unknown move 'maybe'") as info:
        lx.read_review_decisions(tmp_path, ("reviewer_1", "reviewer_2"))
    assert info.value.line == 3
    assert lx.read_review_decisions(tmp_path / "none", ("reviewer_1",)) is None


# --- Table 4 ------------------------------------------------------------------------------------


def test_table4_counts_sources_moves_and_data():
    lexicon = lx.load_released_csv(FIXTURES / "good.csv").frame
    pairs = pd.DataFrame(
        {
            "marker": ["to address", "to address", "for example", "more generally", "to this end, we propose"],
            "move": ["address", "address", "specify", "broaden", "address"],
        }
    )
    table = lx.table4(lexicon, pairs).set_index("source")
    moves = lexicon[lexicon["kind"] == "move"]
    for label, source in [("Manual curation", "manual"), ("Extendable connective", "extendable"),
                          ("LLM generation", "llm")]:
        for move in ("address", "broaden", "specify"):
            expected = int(((moves["source"] == source) & (moves["move"] == move)).sum())
            assert table.loc[label, f"{move}_lexicon"] == expected
    assert table.loc["Extendable connective", "address_data"] == 1  # one connective, however many pairs
    assert table.loc["LLM generation", "address_data"] == 1
    assert table.loc["Total", "total_data"] == pairs["marker"].nunique()
    assert table.loc["Total", "total_lexicon"] == len(moves)
    assert table.loc["Total", "paper_lexicon"] == lx.PAPER_TOTAL_MARKERS and table.loc["Total", "paper_data"] == 809
    assert lx.table4(lexicon, None)["total_data"].isna().all()
    with pytest.raises(ValueError, match="not move markers"):
        lx.table4(lexicon, pd.DataFrame({"marker": ["in contrast"], "move": ["address"]}))
    with pytest.raises(ValueError, match="move other than"):
        lx.table4(lexicon, pd.DataFrame({"marker": ["for example"], "move": ["address"]}))


# --- spans, pairs, review sheets, extensions ----------------------------------------------------------


@pytest.fixture(scope="module")
def sentences() -> pl.DataFrame:
    """The invented fixture corpus (tests/fixtures/corpus/mini) as a sentence table (kept sentences only)."""
    rows = []
    with open(Path(__file__).parent / "fixtures" / "corpus" / "mini" / "papers.jsonl", encoding="utf-8") as handle:
        for line in handle:
            paper = json.loads(line)
            for p, para in enumerate(paper.get("paragraphs") or []):
                rows += [(paper["paper_id"], p, s, text) for s, text in enumerate(para)]
    return pl.DataFrame(rows, schema=["paper_id", "para", "sent", "text_clean"], orient="row")


def test_count_spans_matches_a_plain_python_count(sentences):
    counts = curation.count_spans(sentences, 7)
    reference = Counter(s for s in map(curation.span_of, sentences["text_clean"].to_list()) if s is not None)
    assert dict(zip(counts["span"].to_list(), counts["count"].to_list())) == dict(reference)
    n_papers = sentences["paper_id"].n_unique()  # each fixture paper has one "For example, ..." sentence
    assert dict(zip(counts["span"].to_list(), counts["count"].to_list()))["for example"] == n_papers > 1
    assert counts["count"].to_list() == sorted(counts["count"].to_list(), reverse=True)
    assert curation.span_of("However , the  Model works.") == "however"
    assert curation.span_of("one two three four five six seven eight, x") is None
    assert curation.span_of("No comma here.") is None


def test_count_spans_word_limit_matches_python_on_odd_whitespace():
    # count_spans drops long openers before normalising them; the word count must be the normalised one's
    texts = ["One two three four five six seven, x", "One  two three four five six seven eight, x",
             "ONE\ttwo\u00a0three four five six seven, y", " \t , blank opener", ", empty opener",
             "\u0130stanbul data\u2003, z", "a b c d e f g h,", "  Padded   opener  , w", "no comma"]
    frame = pl.DataFrame({"text_clean": texts * 3})
    counts = curation.count_spans(frame, 7)
    reference = Counter(s for s in map(curation.span_of, frame["text_clean"].to_list()) if s is not None)
    assert dict(zip(counts["span"].to_list(), counts["count"].to_list())) == dict(reference)
    assert set(reference) == {"one two three four five six seven", "\u0130stanbul data".lower(), "padded opener"}


def test_review_pairs_are_consecutive_seeded_and_open_with_the_span(sentences, tmp_path):
    top = curation.count_spans(sentences).head(10)
    spans = top["span"].to_list()
    sampled = curation.sample_review_pairs(sentences, spans, 4, seed=1)
    again = curation.sample_review_pairs(sentences.reverse(), spans, 4, seed=1)
    other = curation.sample_review_pairs(sentences, spans, 4, seed=2)
    assert sampled.sort(["span", "pair_no"]).equals(again.sort(["span", "pair_no"]))
    assert not sampled.sort(["span", "pair_no"]).equals(other.sort(["span", "pair_no"]))
    assert sampled.group_by("span").len()["len"].max() <= 4
    texts = {(r[0], r[1], r[2]): r[3] for r in sentences.iter_rows()}
    for row in sampled.iter_rows(named=True):
        assert texts[(row["paper_id"], row["para"], row["sent"])] == row["first"]
        assert texts[(row["paper_id"], row["para"], row["sent"] + 1)] == row["second"]
        assert curation.span_of(row["second"]) == row["span"]
    sheet = curation.review_sheet(top, sampled, ("ann", "bob"))
    files = curation.write_review_sheet(sheet, tmp_path, ("ann", "bob"))
    written = pd.read_csv(files["csv"], keep_default_na=False)
    assert {"decision_ann", "decision_bob"} <= set(written.columns) and len(written) == sampled.height
    assert files["html"].read_text().count("<h2") == sheet["span"].nunique()


def test_extension_matching():
    assert curation.extension_of("to address this potential bias", "to address") == "this potential bias"
    assert curation.extension_of("to address", "to address") == ""
    assert curation.extension_of("to addressing this", "to address") is None
    assert curation.extension_of("to address a b c d e f", "to address") is None  # six words
    assert curation.extension_of("to address a b c d e", "to address") == "a b c d e"
    spans = pl.DataFrame({"span": ["to address this issue", "to address", "to addressing it", "zooming in on x"],
                          "count": [5, 2, 9, 1]})
    connectives = pd.DataFrame({"marker": ["to address", "zooming in"], "kind": ["move", "move"],
                                "move": ["address", "specify"]})
    found = curation.connective_extensions(spans, connectives, 5)
    assert found[["connective", "extension", "count"]].values.tolist() == [
        ["to address", "this issue", 5], ["to address", "", 2], ["zooming in", "on x", 1]]
    summary = curation.extension_summary(found, connectives).set_index("connective")
    assert summary.loc["to address", "sentences"] == 7 and summary.loc["to address", "bare_connective"] == 2


def test_span_status_uses_hand_made_rows():
    lexicon = lx.load_released_csv(FIXTURES / "good.csv").frame
    top = pl.DataFrame({"span": ["for example", "to address this issue", "in contrast", "to this end", "we note"],
                        "count": [9, 5, 4, 3, 2]})
    status = curation.span_status(top, lexicon).set_index("span")
    assert status["status"].to_dict() == {"for example": "specify", "to address this issue": "address",
                                          "in contrast": "distractor", "to this end": "rejected",
                                          "we note": "not reviewed"}
    summary = curation.status_summary(status.reset_index())
    assert summary["spans"].sum() == 5


# --- LLM marker generation: replay and request building ------------------------------------------------


def test_replayed_label_counts_match_the_file_and_the_paper(released_csv, released_raw):
    counts = marker_llm.released_label_counts(lx.read_released_csv_rows(released_csv)).set_index("group")
    llm = released_raw[released_raw["query_type"] == "LLMgenerated"]
    reference = Counter(s or "unlabelled" for s in llm["strength"])
    for label in ("STRONG-TRUE", "WEAK-TRUE", "FALSE", "unlabelled"):
        assert counts.loc["total", label] == reference[label]
    assert counts.loc["total", "rows"] == len(llm)
    reconciled = marker_llm.reconcile_with_paper(counts.reset_index()).set_index("label")
    # The paper's kept count is reproduced: Address + Broaden LLM rows less the Address pattern markers.
    assert reconciled.loc["STRONG-TRUE (kept)", "file"] == lx.PAPER_LLM_LABELS["STRONG-TRUE"]


def test_generation_requests_are_deterministic_and_seeded():
    prompts = marker_llm.Prompts.load()
    subcategories = marker_llm.load_subcategories()
    seeds = {Move.ADDRESS: ["to address this problem", "to this end"], Move.BROADEN: ["more generally"]}
    kwargs = dict(models=("claude-opus-4-6", "gpt-5.4"), moves=(Move.ADDRESS, Move.BROADEN),
                  subcategories=subcategories, seeds=seeds, n_markers=30, n_seeds=4, seed=13, prompts=prompts)
    first = marker_llm.generation_requests(round_no=1, proposed=None, **kwargs)
    assert len(first) == 2 * (len(subcategories[Move.ADDRESS]) + len(subcategories[Move.BROADEN]))
    assert len({r.custom_id for r in first}) == len(first)
    assert [r.messages for r in first] == [
        r.messages for r in marker_llm.generation_requests(round_no=1, proposed=None, **kwargs)]
    request = next(r for r in first if r.custom_id == "lexgen-r1-gpt-5-4-address-mitigate")
    assert "to this end" in request.messages[1]["content"] and "mitigate" in request.messages[1]["content"]
    assert "Address" in request.messages[0]["content"] and request.response_format_json
    proposed = pd.DataFrame({"marker": ["to curb this risk"], "move": ["address"], "subcategory": ["mitigate"],
                             "model": ["x"], "round": [1]})
    second = marker_llm.generation_requests(round_no=2, proposed=proposed, **kwargs)
    request = next(r for r in second if r.custom_id == "lexgen-r2-gpt-5-4-address-mitigate")
    assert "to curb this risk" in request.messages[1]["content"]


def test_generated_and_label_answers_are_parsed_strictly():
    assert (marker_llm.parse_generated({"markers": ["To Curb This Risk,", 3, "to curb this risk", ""]})
            == ["to curb this risk"])
    assert marker_llm.parse_generated({"phrases": ["x"]}) == [] and marker_llm.parse_generated(None) == []
    asked = ["to curb this risk", "in general", "to this end"]
    labels, problems = marker_llm.parse_labels(
        {"labels": [{"phrase": "To curb this risk", "label": "strong-true"},
                    {"phrase": "in general", "label": "MAYBE"},
                    {"phrase": "other", "label": "FALSE"}]}, asked)
    assert labels == {"to curb this risk": "STRONG-TRUE"}
    assert (any("MAYBE" in p for p in problems) and any("not asked" in p for p in problems)
            and any("unlabelled" in p for p in problems))
    candidates = pd.DataFrame({"marker": asked, "move": ["address"] * 3})
    requests = marker_llm.label_requests(candidates, "gpt-5.4", 2, marker_llm.Prompts.load())
    assert [len(r.meta["phrases"]) for r in requests] == [2, 1]
    assert json.loads(requests[0].messages[1]["content"])["phrases"] == sorted(asked)[:2]
    results = [ChatResult(requests[0].custom_id, "",
                          {"labels": [{"phrase": p, "label": "WEAK-TRUE"} for p in requests[0].meta["phrases"]]},
                          None, {}, False),
               ChatResult(requests[1].custom_id, None, None, "HTTP 500", {}, False)]
    table, problems = marker_llm.collect_labels(requests, results)
    assert (table["strength"].tolist() == ["WEAK-TRUE", "WEAK-TRUE"]
            and problems == [f"{requests[1].custom_id}: HTTP 500"])


def test_generation_loop_against_a_loopback_endpoint(monkeypatch, tmp_path, openai_stub):
    """The whole loop (rounds x models x subcategories, then the labeller) over real HTTP to a local stub."""
    from ratio_utils.config import load_config

    def responder(body: dict) -> str:
        user = body["messages"][-1]["content"]
        if user.startswith("{"):  # a labelling batch: the phrases as JSON
            phrases = json.loads(user)["phrases"]
            return json.dumps({"labels": [{"phrase": p, "label": "STRONG-TRUE" if "curb" in p else "FALSE"}
                                          for p in phrases]})
        move = "address" if "Address" in body["messages"][0]["content"] else "broaden"
        return json.dumps({"markers": [f"to curb this {move} issue", "more generally",
                                       f"{body['model']} says {move}"]})

    key = "sk-lexicon-test"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    monkeypatch.setenv("RATIO_SHARED", str(tmp_path / "shared"))  # no recorded answers: every one comes from the stub
    stub = openai_stub(key, responder=responder)
    cfg = load_config(overrides={"llm": {"base_url": stub.base_url, "mode": "sync", "concurrency": 2},
                                 "lexicon": {"generation_models": ["m-one", "m-two"], "generation_rounds": 2}})
    client, why = marker_llm.llm_client(cfg)
    assert client is not None, why
    params = lx.lexicon_params(cfg)
    run = marker_llm.run_generation(client, lx.load_released_csv(FIXTURES / "good.csv").frame, params, cfg.seed)
    n_sub = sum(len(v) for k, v in marker_llm.load_subcategories().items() if k.value in params.generation_moves)
    assert len(run["proposed"]) == 2 * 2 * n_sub * 3  # rounds x models x subcategories x phrases
    assert "more generally" not in set(run["candidates"]["marker"])  # curated seeds are not candidates
    assert set(run["kept"]["marker"]) == {"to curb this address issue", "to curb this broaden issue"}
    assert run["label_problems"] == [] and run["failed_generation_answers"] == 0
    counts = marker_llm.label_counts(run["labels"]).set_index("move")
    assert counts.loc["total", "STRONG-TRUE"] == 2 and counts.loc["total", "FALSE"] == len(run["labels"]) - 2


def _sentence_parts(sentences: pl.DataFrame, root: Path, n_parts: int) -> tuple[Path, Path]:
    """The fixture as a full sentence table (every third sentence dropped by a rule) in one file and in
    `n_parts` parts that never cut a paper; returns (file, folder of parts)."""
    table = sentences.with_columns(
        pl.lit("acl").alias("corpus"), pl.lit(2000).alias("year"), pl.lit(None, pl.Date).alias("date"),
        pl.col("text_clean").alias("text"),
        pl.when(pl.int_range(pl.len()) % 3 == 2).then(pl.lit("too_short")).otherwise(None).alias("drop_reason"),
    ).select(SENTENCE_COLUMNS)
    single = root / "sentences.parquet"
    table.write_parquet(single)
    papers = table["paper_id"].unique(maintain_order=True).to_list()
    folder = root / "parts.parquet"
    folder.mkdir()
    for i in range(n_parts):
        table.filter(pl.col("paper_id").is_in(papers[i::n_parts])).write_parquet(part_path(folder, i))
    return single, folder


def _pairs_in_memory(kept: pl.DataFrame, spans: list[str], k: int, seed: int) -> pl.DataFrame:
    """The reference: every consecutive pair of the whole table joined in memory, then the same seeded draw."""
    text = {(r[0], r[1], r[2]): r[3] for r in kept.iter_rows()}
    rows = [(pid, para, sent, first, text[(pid, para, sent + 1)], curation.span_of(text[(pid, para, sent + 1)]))
            for (pid, para, sent), first in text.items() if (pid, para, sent + 1) in text]
    pairs = pl.DataFrame(rows, schema=kept.select("paper_id", "para", "sent").schema
                         | {"first": pl.Utf8, "second": pl.Utf8, "span": pl.Utf8},
                         orient="row").filter(pl.col("span").is_in(spans))
    key = pl.concat_str([pl.col("paper_id"), pl.col("para").cast(pl.Utf8), pl.col("sent").cast(pl.Utf8)],
                        separator="|")
    return (pairs.with_columns(key.hash(seed=seed).alias("_draw")).sort(["_draw", "paper_id", "para", "sent"])
            .group_by("span", maintain_order=True).head(k)
            .with_columns(pl.col("_draw").rank("ordinal").over("span").alias("pair_no")).drop("_draw"))


def test_streamed_spans_and_review_pairs_over_parts_equal_the_in_memory_join(sentences, tmp_path):
    single, folder = _sentence_parts(sentences, tmp_path, n_parts=3)
    kept = curation.read_sentences(single)
    assert kept.height == sentences.height - sentences.height // 3
    for source in (single, folder):
        scan = curation.scan_sentences(source)
        assert isinstance(scan, pl.LazyFrame) and curation.count_kept(scan) == kept.height
        counts = curation.count_spans(scan, 7)
        assert dict(counts.iter_rows()) == dict(Counter(s for s in map(curation.span_of, kept["text_clean"])
                                                        if s is not None))
        assert counts.equals(curation.count_spans(kept, 7))
        spans = counts.head(12)["span"].to_list()
        streamed = curation.sample_review_pairs(scan, spans, 4, seed=3)
        reference = _pairs_in_memory(kept, spans, 4, seed=3)
        assert streamed.height > 0 and streamed.columns == reference.columns
        assert streamed.sort(["span", "pair_no"]).equals(reference.sort(["span", "pair_no"]))


def test_read_sentences_keeps_undropped_rows_and_checks_columns(tmp_path):
    frame = pl.DataFrame({
        "corpus": ["c"] * 3, "paper_id": ["p"] * 3, "year": [2000] * 3, "date": [None] * 3, "para": [0, 0, 0],
        "sent": [0, 1, 2],
        "text": ["Raw one, x.", "Raw two, y.", "Raw three, z."],
        "text_clean": ["Clean one, x.", None, "Clean three, z."],
        "drop_reason": [None, None, "noise"],
    })
    frame.write_parquet(tmp_path / "s.parquet")
    kept = curation.read_sentences(tmp_path / "s.parquet")
    assert kept["text_clean"].to_list() == ["Clean one, x.", "Raw two, y."]
    frame.drop("drop_reason").write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(InputError, match="drop_reason"):
        curation.read_sentences(tmp_path / "bad.parquet")


def test_review_pairs_drawn_part_by_part_equal_the_in_memory_join_and_hold_one_part_at_a_time(sentences, tmp_path,
                                                                                               monkeypatch):
    """Per part the k lowest draws, carried on: the same sheet as joining all pairs at once, for any cut into parts,
    while no joined frame holds more than one part's pairs."""
    single, folder = _sentence_parts(sentences, tmp_path, n_parts=3)
    kept = curation.read_sentences(single)
    spans = curation.count_spans(kept, 7).head(12)["span"].to_list()
    reference = _pairs_in_memory(kept, spans, 2, seed=5)
    assert reference.height > 0
    joined = []
    opening_pairs = curation._opening_pairs
    monkeypatch.setattr(curation, "_opening_pairs", lambda *args: joined.append(opening_pairs(*args)) or joined[-1])
    parts = curation.scan_sentence_parts(folder)
    assert len(parts) == 3
    by_parts = curation.sample_review_pairs(parts, spans, 2, seed=5)
    assert by_parts.columns == reference.columns and by_parts.equals(reference)  # row for row, spans in the same order
    all_pairs = _pairs_in_memory(kept, spans, 10**6, seed=5).height
    assert (len(joined) == 3 and sum(f.height for f in joined) == all_pairs
            and max(f.height for f in joined) < all_pairs)
    # a single-file table is its own one part: the draw is the one over the whole scan, row for row
    whole = curation.scan_sentence_parts(single)
    assert len(whole) == 1
    assert curation.sample_review_pairs(whole, spans, 2, seed=5).equals(
        curation.sample_review_pairs(curation.scan_sentences(single), spans, 2, seed=5))


def test_the_review_draw_keeps_no_part_text_beyond_its_own_rows():
    # Polars' strings are views into the buffers they were taken from: pairs kept from a part used to keep that
    # part's whole text alive, so notebook 01's memory grew with the number of parts (docs/scale.md, rehearsal).
    def part(i: int, n: int = 2000) -> pl.LazyFrame:
        texts = [f"Background {i} {j} {'x' * 300}" if s == 0 else f"For example, case {i} {j} {'y' * 300}"
                 for j in range(n) for s in (0, 1)]
        return pl.DataFrame({"paper_id": [f"p{i}-{j}" for j in range(n) for _ in (0, 1)], "para": [0] * (2 * n),
                             "sent": [0, 1] * n, "text_clean": texts}).lazy()

    kept = curation.sample_review_pairs([part(i) for i in range(3)], ["for example"], 2, seed=13)
    assert kept.height == 2
    # the newest Arrow export keeps string views with every buffer they point into
    held = kept.to_arrow(compat_level=pl.CompatLevel.newest()).get_total_buffer_size()
    assert held < 10_000  # the two pairs' own text (~1.3 KB), not the parts' (~2.5 MB)
