"""Pair mining (ratio_utils.mining): each matching rule, each cleaning rule, the stage outputs, the Dask path.

Fixture frames in tests/fixtures/mining/ were written for these tests; one check runs the matcher on real
sentences of the ACL corpus with the authors' released lexicon.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
from collections import Counter
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
import stage_steps

from ratio_utils import mining
from ratio_utils.io import InputError
from ratio_utils.mining import (
    NO_COMMA,
    NO_MARKER,
    MarkerMatch,
    build_matcher,
    clean_candidate,
    clean_query,
    find_citation,
    mine_sentences,
    strip_gold_prefix,
    strip_query_prefix,
)
from ratio_utils.param_sections import MiningParams
from ratio_utils.schema import GROUP_TO_MOVE, LEXICON_COLUMNS, normalize_marker, sentence_id

HERE = Path(__file__).parent / "fixtures" / "mining"


def read_fixture(name: str) -> pd.DataFrame:
    frame = pd.read_csv(HERE / name, keep_default_na=False, na_values=[""])
    return frame.astype(object).where(frame.notna(), None)


@pytest.fixture(scope="module")
def lexicon() -> pd.DataFrame:
    return read_fixture("lexicon.csv")


@pytest.fixture(scope="module")
def sentences() -> pd.DataFrame:
    return read_fixture("sentences.csv")


@pytest.fixture(scope="module")
def matcher(lexicon):
    return build_matcher(lexicon)[0]


@pytest.fixture(scope="module")
def mined(sentences, matcher):
    return mine_sentences(sentences, matcher, MiningParams(progress=False))


def winner(matcher, text: str):
    found = matcher.match(text.lower())
    assert found == matcher.match_naive(text.lower()), "trie and naive matcher disagree"
    assert matcher.match_series(pl.Series([text.lower()], dtype=pl.String)) == [found]
    return found


# --- matching rules ------------------------------------------------------------------------------


def test_longest_prefix_wins_over_a_shorter_distractor(matcher):
    found = winner(matcher, "Specifically, the rate is tuned per layer of the network.")
    assert isinstance(found, MarkerMatch) and found.entry.label == "specify" and found.entry.key == "specifically,"
    found = winner(matcher, "To counter this problem, we add dropout to every layer.")
    assert found.entry.label == "address" and found.entry.marker == "to counter this problem"


def test_marker_must_end_at_a_comma(matcher):
    # `to counter` (distractor) is a prefix but not the whole opening phrase
    assert winner(matcher, "To counter the drift we retrain the model every week.") == NO_COMMA
    # `in order to overcome this` is a prefix; the sentence is not cut after `this`
    assert winner(matcher, "In order to overcome this problem, we reuse the gazetteer.") == NO_COMMA
    assert winner(matcher, "Specifically the rate is tuned per layer.") == NO_COMMA
    # a marker without a comma in the lexicon matches when the text puts the comma right after it
    found = winner(matcher, "To counter, we retrain the model every single week.")
    assert found.entry.label == "explicit_contrast" and found.rest_start == len("to counter,")


def test_matching_ignores_case_and_keeps_the_original_text(matcher, mined):
    assert winner(matcher, "FOR EXAMPLE, rouge counts shared n-grams of two texts.".lower()).entry.label == "specify"
    row = mined.pairs[(mined.pairs.paper_id == "P1") & (mined.pairs.sent == 0)].iloc[0]
    assert row.marker_text == "To counter this problem"
    assert row.gold_original.startswith("To counter this problem,")


def test_extendable_connective_takes_up_to_n_words_before_a_comma(lexicon):
    text = "to address this potential labelling bias, we bootstrap labels."
    five = build_matcher(lexicon, extension_max_words=5)[0]
    found = five.match(text)
    assert (found.entry.marker == "to address"
            and text[: found.phrase_end] == "to address this potential labelling bias")
    assert five.match_naive(text) == found
    too_long = "to address this one very potential labelling bias, we bootstrap labels."  # six more words
    # the extension fails, so the longest fixed prefix (`to address`, no comma after it) decides
    assert five.match(too_long) == NO_COMMA
    assert build_matcher(lexicon, extension_max_words=6)[0].match(too_long).entry.marker == "to address"
    # an extension that is longer than a fixed marker of the same family wins
    found = five.match("to address this problem of sparsity, we back off to bigrams.")
    assert found.entry.marker == "to address"
    # a fixed marker at least as long as the extension wins (`to address this problem` needs its comma)
    found = five.match("to address this problem, we back off to bigrams in the model.")
    assert found.entry.marker == "to address this problem"
    # the prefix must end at a word boundary to be extended
    assert five.match("to addressing these issues, we turn next.") == NO_COMMA


def test_rejected_markers_are_never_matched(lexicon):
    only_rejected = lexicon[lexicon.marker.isin(["for instance", "to this end"])].copy()
    only_rejected["kind"] = "rejected"
    matcher = build_matcher(pd.concat([lexicon[~lexicon.marker.isin(["for instance", "to this end"])],
                                       only_rejected]))[0]
    assert matcher.match("for instance, it labels sentences quickly.") is NO_MARKER
    assert matcher.match("to this end, the model is retrained.") is NO_MARKER


def test_distractor_marker_yields_a_distractor_with_its_category(mined):
    frame = mined.distractors.set_index("marker")
    assert frame.loc["however", "category"] == "common_irrelevant"
    assert frame.loc["however", "text"] == "the tagger is faster than every baseline we compared it against."
    assert frame.loc["however", "docid"] == sentence_id(frame.loc["however", "text"])
    assert set(mined.distractors.category) == {"common_irrelevant", "implicit_similarity", "explicit_contrast"}
    # distractors are never pairs
    assert not set(mined.pairs.marker) & set(mined.distractors.marker)


def test_clause_marker_ends_its_opening_phrase_at_its_comma(matcher):
    text = "to this end, we propose a compact model that keeps the accuracy."
    found = matcher.match(text)
    assert found.entry.marker == "to this end, we propose"
    assert text[: found.phrase_end] == "to this end" and text[found.rest_start :].strip().startswith("we propose")


def test_anaphor_flag_is_a_word_boundary_test(mined):
    flags = dict(zip(mined.pairs.marker_text, mined.pairs.marker_has_anaphor))
    assert flags["To counter this problem"] and flags["To address this potential labelling bias"]
    assert flags["In the above setting"]
    assert not flags["Specifically"] and not flags["To be more specific about the budget"]
    pattern = mining.anaphor_pattern(MiningParams().anaphors)
    assert pattern.search("in such cases") and pattern.search("to fix it")
    assert pattern.search("within this")  # "this" is a word here
    assert not pattern.search("within thesis itself abovementioned")


def test_lexicon_conflicts_are_reported(lexicon):
    _, check = build_matcher(lexicon)
    issues = {(row.marker, row.issue) for row in check.conflicts.itertuples()}
    assert ("more generally", "duplicate_rows") in issues
    assert ("for instance", "move_and_rejected") in issues
    assert ("specifically", "move_and_distractor") in issues
    assert ("to this end, we propose", "clause_marker") in issues
    clash = pd.concat([lexicon,
                       lexicon[lexicon.marker == "however"].assign(kind="move", move="broaden", category=None)])
    matcher, check = build_matcher(clash)
    assert ("however", "ambiguous_key") in {(r.marker, r.issue) for r in check.conflicts.itertuples()}
    assert matcher.match("however, the tagger is fast.") is NO_MARKER  # left out, not silently resolved


def test_bad_lexicon_is_a_clear_error(lexicon):
    with pytest.raises(InputError, match="lacks column"):
        build_matcher(lexicon.drop(columns=["kind"]))
    with pytest.raises(InputError, match="unknown marker kind"):
        build_matcher(lexicon.assign(kind="maybe"))


# --- cleaning rules (Appendix B.1) --------------------------------------------------------------


def test_query_prefix_of_at_most_four_words_is_stripped():
    assert strip_query_prefix("However, the tagger is fast.", 4) == ("However", "the tagger is fast.")
    assert strip_query_prefix("In this particular paper, we add dropout.", 4) == ("In this particular paper",
                                                                                  "we add dropout.")
    five = "In order to overcome this, we reuse the gazetteer."
    assert strip_query_prefix(five, 4) == ("", five)
    assert strip_query_prefix("1, 2 and 3 are the ranks we use.", 4)[0] == ""
    assert strip_query_prefix("The chain (i.e., a walk) converges to its stationary law.", 4)[0] == ""
    assert strip_query_prefix("Our parser overfits badly.", 4) == ("", "Our parser overfits badly.")


def test_gold_prefixes_and_stray_punctuation_are_stripped():
    assert strip_gold_prefix("firstly, the judges read every summary.") == "the judges read every summary."
    assert strip_gold_prefix("Second, we tune the rate.") == "we tune the rate."
    assert strip_gold_prefix("(ii) the rate is tuned.") == "the rate is tuned."
    assert strip_gold_prefix("iv. the rate is tuned.") == "the rate is tuned."
    assert strip_gold_prefix("2) the rate is tuned.") == "the rate is tuned."
    assert strip_gold_prefix("- : (a) firstly the rate is tuned.") == "the rate is tuned."
    assert strip_gold_prefix("i.e. the rate is tuned.") == "i.e. the rate is tuned."
    assert strip_gold_prefix("first results show a gain.") == "first results show a gain."


@pytest.mark.parametrize(
    "text, kind",
    [
        ("rouge counts n-grams shared with the references [12].", "bracketed_number"),
        ("rouge counts n-grams shared with the references [3, 7-9].", "bracketed_number"),
        ("rouge counts n-grams shared with the references [].", "empty_brackets"),
        ("rouge was proposed by lin et al. for summaries.", "et_al"),
        ("the lists help relation extraction (Smith, 2004).", "author_year"),
        ("the lists help (see Smith and Jones 2004a; Lee, 2010) a lot.", "author_year"),
        ("as Collins (2002) showed, the lists help.", "narrative_author_year"),
    ],
)
def test_citations_are_found(text, kind):
    assert find_citation(text) == kind


def test_no_citation_in_plain_text():
    assert find_citation("the rate is tuned on 2004 held-out sentences (about 5%).") is None


def test_gold_rules_drop_citations_single_words_and_short_golds():
    params = MiningParams()
    assert clean_candidate("the lists help relation extraction (Smith, 2004).", params).rule == "gold_has_citation"
    assert clean_candidate("supercalifragilisticexpialidociousnessness.", params).rule == "gold_single_word"
    assert clean_candidate("we add dropout to it.", params).rule == "gold_too_short"
    kept = clean_candidate("  We add Dropout between the recurrent layers.", params)
    assert kept.text == "we add dropout between the recurrent layers." and kept.rule is None
    assert clean_candidate("We add Dropout between the recurrent layers.",
                           MiningParams(lowercase=False)).text.startswith("We add Dropout")
    assert clean_candidate("we add dropout between layers.", MiningParams(min_chars=20)).rule is None


def test_query_rules():
    params = MiningParams()
    query, prefix = clean_query("However, the tagger is faster than every baseline.", params)
    assert query.text == "the tagger is faster than every baseline." and prefix == "however"
    assert clean_query("However, the model is small.", params)[0].rule == "query_too_short"


# --- the stage on the fixture table -----------------------------------------------------------


def test_pairs_rows_and_counts(mined, sentences):
    pairs = mined.pairs
    assert pairs.groupby("move").size().to_dict() == {"address": 2, "broaden": 2, "specify": 4}
    counts = mined.counts
    assert counts["pairs.consecutive"] == 20
    assert counts["pairs.dropped.marker_not_followed_by_comma"] == 2
    assert counts["pairs.dropped.gold_has_citation"] == 1
    assert counts["pairs.dropped.second_sentence_dropped"] == 1
    assert counts["pairs.dropped.query_sentence_dropped"] == 1
    assert counts["pairs.dropped.query_too_short"] == 1
    assert counts["distractors.dropped.gold_has_citation"] == 1
    assert counts["pairs.modified.gold_prefix_stripped"] == 1
    matched = sum(v for k, v in counts.items() if k.startswith(("pairs.matched.", "distractors.matched.")))
    assert counts["pairs.no_marker"] + counts["pairs.dropped.marker_not_followed_by_comma"] + matched == 20
    dropped = sum(v for k, v in counts.items()
                  if ".dropped." in k and k != "pairs.dropped.marker_not_followed_by_comma")
    assert matched == len(pairs) + len(mined.distractors) + dropped
    # ids are the ids of the final texts; every pair is (para, sent) -> (para, sent + 1) of one paper
    assert (pairs.query_id == pairs["query"].map(sentence_id)).all() and (pairs.gold_id
                                                                          == pairs.gold.map(sentence_id)).all()
    index = sentences.set_index(["paper_id", "para", "sent"])
    for row in pairs.itertuples():
        assert index.loc[(row.paper_id, row.para, row.sent), "text"] == row.query_original
        assert index.loc[(row.paper_id, row.para, row.sent + 1), "text"] == row.gold_original
    assert set(mining.PAIR_TABLE_COLUMNS) == set(pairs.columns)


def test_pairs_never_cross_paragraphs(sentences, matcher):
    # P1 para 0 ends with a sentence and para 1 starts with "For example, ...": no pair across
    first, second = mining.consecutive_pairs(mining.prepare_sentences(sentences, "fixture"))
    frame = mining.prepare_sentences(sentences, "fixture")
    assert (frame.para.to_numpy()[first] == frame.para.to_numpy()[second]).all()
    assert (frame.paper_id.to_numpy()[first] == frame.paper_id.to_numpy()[second]).all()
    gap = sentences[~((sentences.paper_id == "P1") & (sentences.para == 0) & (sentences.sent == 2))]
    assert mine_sentences(gap, matcher, MiningParams(progress=False)).counts["pairs.consecutive"] == 18


def test_missing_sentence_column_is_a_clear_error(sentences, matcher):
    with pytest.raises(InputError, match="drop_reason"):
        mine_sentences(sentences.drop(columns=["drop_reason"]), matcher, MiningParams(progress=False))


def test_mine_stage_writes_outputs(cfg, sentences, lexicon):
    cfg.paths.interim.mkdir(parents=True, exist_ok=True)
    sentences.to_parquet(cfg.paths.sentences, index=False)
    lexicon.to_parquet(cfg.paths.final_lexicon, index=False)
    result, check = stage_steps.mine(cfg)
    assert pd.read_parquet(cfg.paths.pairs).shape[0] == len(result.pairs) == 8
    assert pd.read_parquet(cfg.paths.distractors).shape[0] == 3
    report = json.loads(cfg.paths.mining_report.read_text())
    assert report["pairs"]["kept"] == {"address": 2, "broaden": 2, "specify": 4}
    assert report["lexicon"]["findings"]["move_and_rejected"] == 1
    assert len(pd.read_csv(cfg.paths.lexicon_conflicts)) == len(check.conflicts)


def test_dask_path_gives_the_same_rows(sentences, matcher):
    from dask.distributed import Client

    params = MiningParams(progress=False, engine="dask", shards=3)
    local = mine_sentences(sentences, matcher, params)
    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        distributed = mining.mine_with_dask(sentences, matcher, params, client=client)
    pd.testing.assert_frame_equal(local.pairs, distributed.pairs)
    pd.testing.assert_frame_equal(local.distractors, distributed.distractors)
    assert local.counts == distributed.counts
    shards = mining.shard_by_paper(sentences, 3)
    assert sum(len(s) for s in shards) == len(sentences)
    assert all(set(a.paper_id).isdisjoint(b.paper_id) for a, b in itertools.combinations(shards, 2))


# --- real data ---------------------------------------------------------------------------------


def released_lexicon(shared_dir) -> pd.DataFrame:
    """The authors' lexicon mapped to schema.LEXICON_COLUMNS (as the lexicon stage does, simplified)."""
    raw = pd.read_csv(shared_dir / "lexicon" / "all_query_terms5.csv")
    sources = {"manual": "manual", "manual`": "manual", "special_word": "extendable", "LLMgenerated": "llm",
               "combo": "pattern"}
    rows = []
    for r in raw.itertuples():
        move = GROUP_TO_MOVE.get(r.group)
        kind = "move" if move else ("rejected" if r.group == "BLACKLIST" else "distractor")
        if move and isinstance(r.strength, str) and r.strength != "STRONG-TRUE":
            kind = "rejected"
        rows.append(
            {"marker": normalize_marker(r.word), "raw": r.word, "kind": kind, "move": move.value if move else None,
             "category": r.group if kind == "distractor" else None, "group": r.group, "source": sources[r.query_type],
             "extendable": bool(r.special_word), "strength": r.strength if isinstance(r.strength, str) else None}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(LEXICON_COLUMNS))


def test_trie_matcher_equals_naive_loop_on_real_sentences(shared_dir):
    matcher, check = build_matcher(released_lexicon(shared_dir))
    assert check.n_entries > 4000
    texts = []
    with gzip.open(shared_dir / "corpora" / "acl_scisumm" / "papers.jsonl.gz", "rt") as handle:
        for line in itertools.islice(handle, 60):
            for paragraph in json.loads(line)["paragraphs"]:
                texts += [" ".join(s.split()).lower() for s in paragraph[1:]]
    rng = random.Random(13)
    sample = rng.sample(texts, min(400, len(texts)))
    # plus every sentence that starts with a move marker, so the positive cases are exercised too
    sample += [t for t in texts
               if t.startswith(("for example,", "to address", "more generally,", "specifically"))][:150]
    fast = [matcher.match(t) for t in sample]
    assert fast == [matcher.match_naive(t) for t in sample]
    assert matcher.match_series(pl.Series(sample, dtype=pl.String)) == fast  # the vectorised first test agrees
    assert sum(isinstance(m, MarkerMatch) for m in fast) > 20


def test_trie_matcher_equals_naive_loop_on_the_fixture_corpus(matcher):
    """The same check on the invented corpus (tests/fixtures/corpus/mini) with the fixture lexicon, without
    ../shared."""
    with open(Path(__file__).parent / "fixtures" / "corpus" / "mini" / "papers.jsonl", encoding="utf-8") as handle:
        texts = [" ".join(s.split()).lower() for line in handle for paragraph in json.loads(line)["paragraphs"]
                 for s in paragraph[1:]]
    fast = [matcher.match(t) for t in texts]
    assert fast == [matcher.match_naive(t) for t in texts]
    assert matcher.match_series(pl.Series(texts, dtype=pl.String)) == fast
    labels = Counter(m.entry.label for m in fast if isinstance(m, MarkerMatch))
    # every paper has one "To address this issue," / "For example," / "More generally," / "However," sentence
    n_papers = sum(1 for t in texts if t.startswith("for example,"))
    assert n_papers > 10 and labels["address"] == labels["specify"] == labels["broaden"] == n_papers


def test_params_files_parse(tmp_path, monkeypatch):
    from ratio_utils.config import load_config

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    assert load_config("params/default.yaml").section("mining", MiningParams).engine == "local"
    smoke = load_config("params/smoke.yaml").section("mining", MiningParams)
    assert smoke.engine == "dask" and not smoke.dask_processes
    paper = load_config("params/paper.yaml").section("mining", MiningParams)
    assert paper.engine == "dask" and paper.extension_max_words == 5 and paper.min_chars == 35
    with pytest.raises(ValueError, match="engine"):
        MiningParams(engine="spark")


# --- partitioned input: one task per sentence part ---------------------------------------------------------


def _mine_partitioned(root, monkeypatch, sentences, lexicon, mining_section):
    from ratio_utils.config import load_config
    from ratio_utils.parts import part_path

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(root))
    cfg = load_config(overrides={"mining": {"progress": False} | mining_section})
    for index, shard in enumerate(mining.shard_by_paper(sentences, 3)):
        part_path(cfg.paths.sentences, index).parent.mkdir(parents=True, exist_ok=True)
        shard.to_parquet(part_path(cfg.paths.sentences, index), index=False)
    lexicon.to_parquet(cfg.paths.final_lexicon, index=False)
    return cfg, stage_steps.mine(cfg)[0]


def test_sentence_parts_mine_the_same_locally_and_on_dask(tmp_path, monkeypatch, sentences, lexicon, mined):
    from ratio_utils.parts import part_files

    local_cfg, local = _mine_partitioned(tmp_path / "local", monkeypatch, sentences, lexicon, {"engine": "local"})
    dask_cfg, on_dask = _mine_partitioned(tmp_path / "dask", monkeypatch, sentences, lexicon,
                                          {"engine": "dask", "dask_processes": False, "dask_workers": 2})
    for table in ("pairs", "distractors"):
        local_parts, dask_parts = part_files(getattr(local_cfg.paths, table)), part_files(getattr(dask_cfg.paths,
                                                                                                  table))
        assert len(local_parts) == len(dask_parts) == 3
        for a, b in zip(local_parts, dask_parts):
            pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))
    # the parts, read back in order, hold the rows and counts of mining the whole table at once
    assert local.counts == on_dask.counts == mined.counts
    pd.testing.assert_frame_equal(mining.read_mined(local_cfg.paths.pairs), mined.pairs, check_dtype=False)
    pd.testing.assert_frame_equal(mining.read_mined(dask_cfg.paths.distractors), mined.distractors, check_dtype=False)
    # the result keeps, of the rows, what notebook 05 shows: moves and markers, categories, a sample of whole pairs
    assert list(local.pairs.columns) == ["move", "marker"] and list(local.distractors.columns) == ["category"]
    assert local.pairs.astype(str).value_counts().to_dict() == mined.pairs[["move", "marker"]].value_counts().to_dict()
    assert (local.distractors["category"].value_counts().to_dict()
            == mined.distractors["category"].value_counts().to_dict())
    # fewer than the sample size: every pair
    pd.testing.assert_frame_equal(local.examples, mined.pairs, check_dtype=False)
    assert json.loads(local_cfg.paths.mining_report.read_text())["pairs"]["kept"] == {"address": 2, "broaden": 2,
                                                                                      "specify": 4}


def test_dataset_stage_reads_mined_parts_like_the_single_file(tmp_path, monkeypatch, sentences, lexicon, cfg):
    parts_cfg, _ = _mine_partitioned(tmp_path / "parts", monkeypatch, sentences, lexicon, {"engine": "local"})
    from_parts = stage_steps.build(parts_cfg)
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "single"))
    cfg.paths.interim.mkdir(parents=True, exist_ok=True)
    sentences.to_parquet(cfg.paths.sentences, index=False)
    lexicon.to_parquet(cfg.paths.final_lexicon, index=False)
    stage_steps.mine(cfg)
    from_file = stage_steps.build(cfg)
    assert from_parts.counts == from_file.counts
    pd.testing.assert_frame_equal(from_parts.pairs, from_file.pairs, check_dtype=False)
    for split, pool in from_file.pools.items():
        pd.testing.assert_frame_equal(from_parts.pools[split], pool, check_dtype=False)


def test_a_partitioned_run_keeps_a_seeded_sample_of_whole_pairs_per_move(tmp_path, mined):
    """Part by part, per move the pairs whose query id hashes lowest: the same sample however the pairs are split
    into parts, another for another seed, never more than per_move a move."""
    from ratio_utils.parts import part_path

    pairs = mined.pairs
    for layout, cuts in (("two", [0, 3, len(pairs)]), ("four", [0, 1, 2, 6, len(pairs)])):
        for index, (start, stop) in enumerate(zip(cuts, cuts[1:])):
            part_path(tmp_path / layout, index).parent.mkdir(parents=True, exist_ok=True)
            pairs.iloc[start:stop].to_parquet(part_path(tmp_path / layout, index), index=False)
    two, four = (mining.sample_mined_pairs(tmp_path / layout, per_move=1, seed=13) for layout in ("two", "four"))
    pd.testing.assert_frame_equal(two, four)
    assert sorted(two["move"]) == sorted(pairs["move"].unique())
    for move, rows in two.groupby("move"):
        candidates = pairs[pairs["move"] == move]
        lowest = pd.util.hash_pandas_object(candidates["query_id"], index=False, hash_key="0000000000000013").idxmin()
        assert rows["query_id"].tolist() == [candidates.loc[lowest, "query_id"]]
    others = [mining.sample_mined_pairs(tmp_path / "two", per_move=1, seed=seed)["query_id"].tolist()
              for seed in range(1, 9)]
    assert any(ids != two["query_id"].tolist() for ids in others)


def _stamps(paths) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of each file: an atomic rewrite (temp + rename) changes both."""
    return {f"{p.parent.name}/{p.name}": (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths}


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_killed_partitioned_mining_resumes_without_redoing_finished_parts(tmp_path, monkeypatch, sentences, lexicon,
                                                                            mined, engine):
    """A run killed after part 1 (part 2's pairs written, its report not yet) redoes only part 2; a changed lexicon
    or rule param redoes every part, and the counts and rows equal mining the whole table at once every time."""
    from ratio_utils.config import load_config
    from ratio_utils.parts import part_files

    section = {"engine": engine, "dask_processes": False, "dask_workers": 2}
    cfg, _ = _mine_partitioned(tmp_path, monkeypatch, sentences, lexicon, section)
    tables = lambda: [*part_files(cfg.paths.pairs), *part_files(cfg.paths.distractors),  # noqa: E731
                      *sorted(cfg.paths.mining_parts.glob("part-*.json"))]
    assert len(tables()) == 9
    (cfg.paths.mining_parts / "part-00002.json").unlink()
    (cfg.paths.distractors / "part-00002.parquet").unlink()
    killed = _stamps(tables())
    result, _ = stage_steps.mine(cfg)
    after = _stamps(tables())
    rewritten = sorted(name for name, stamp in after.items() if killed.get(name) != stamp)
    assert rewritten == ["distractors.parquet/part-00002.parquet", "mining_parts/part-00002.json",
                         "pairs.parquet/part-00002.parquet"]
    assert result.counts == mined.counts
    assert json.loads(cfg.paths.mining_report.read_text())["parts"] == {"total": 3, "skipped_unchanged": 2, "built": 1}
    pd.testing.assert_frame_equal(mining.read_mined(cfg.paths.pairs), mined.pairs, check_dtype=False)
    pd.testing.assert_frame_equal(mining.read_mined(cfg.paths.distractors), mined.distractors, check_dtype=False)
    # the lexicon, then a rule's param, changed: every part is mined again
    lexicon.iloc[:-1].to_parquet(cfg.paths.final_lexicon, index=False)
    stage_steps.mine(cfg)
    assert json.loads(cfg.paths.mining_report.read_text())["parts"]["built"] == 3
    stricter = load_config(overrides={"mining": {"progress": False, "min_chars": 60} | section})
    stage_steps.mine(stricter)
    assert json.loads(cfg.paths.mining_report.read_text())["parts"]["built"] == 3
    # execution settings are not in the key: the same run on the other engine reuses every part
    other = load_config(overrides={"mining": {"progress": False, "min_chars": 60,
                                              "engine": "local" if engine == "dask" else "dask",
                                              "dask_processes": False, "dask_workers": 1}})
    before = _stamps(tables())
    stage_steps.mine(other)
    assert json.loads(cfg.paths.mining_report.read_text())["parts"] == {"total": 3, "skipped_unchanged": 3, "built": 0}
    assert _stamps(tables()) == before
