"""Template expansion with inflection (ratio_utils.lexicon.patterns): slot lemmatisation, number agreement,
optional elements and alternatives, verb agreement, and the comparison with the released pattern rows."""

from __future__ import annotations

import math

import pytest
from lemminflect import getInflection

from ratio_utils.lexicon import markers as lx
from ratio_utils.lexicon import patterns


def _write_templates(tmp_path, templates: str) -> patterns.TemplateSet:
    slots = tmp_path / "slots"
    slots.mkdir()
    (slots / "verbs.txt").write_text("# response verbs\naddressing\ncope with\nmitigates\n")
    (slots / "problems.txt").write_text("limitations\nissue\nanalysis\n")
    (slots / "mods.txt").write_text("main\npotential\n")
    (slots / "cues.txt").write_text("suggest\npoint to\n")
    (tmp_path / "t.yaml").write_text(
        "slots:\n"
        "  response: {file: slots/verbs.txt, pos: verb}\n"
        "  problem: {file: slots/problems.txt, pos: noun}\n"
        "  modifier: {file: slots/mods.txt, pos: adj}\n"
        "  cue: {file: slots/cues.txt, pos: verb}\n"
        "templates:\n" + templates
    )
    return patterns.load_templates(tmp_path / "t.yaml")


ADDRESS = '  - {id: a, move: address, pattern: "to [response] [dem] ([modifier]) [problem]"}\n'


def test_slot_terms_are_lemmatised(tmp_path):
    templates = _write_templates(tmp_path, ADDRESS)
    assert templates.slots["response"].terms == ("address", "cope with", "mitigate")
    assert templates.slots["problem"].terms == ("limitation", "issue", "analysis")


def test_demonstratives_agree_in_number_and_modifiers_are_optional(tmp_path):
    templates = _write_templates(tmp_path, ADDRESS)
    phrases = patterns.expand_template(templates.templates[0], templates.slots)
    singular = set(templates.slots["problem"].terms)
    plural = {getInflection(n, "NNS")[0] for n in singular}
    for phrase in phrases:
        words = phrase.split()
        noun = words[-1]
        dem = next(w for w in words if w in ("this", "that", "these", "those"))
        assert (noun in singular) == (dem in ("this", "that")) and (noun in plural) == (dem in ("these", "those"))
    # 3 verbs x 2 demonstratives x (1 + 2 modifiers) x 3 nouns, for each number.
    assert len(phrases) == len(set(phrases)) == 3 * 2 * 3 * 3 * 2
    assert {"to cope with these analyses", "to mitigate this main issue",
            "to address those potential limitations"} <= set(phrases)


def test_tags_agreement_and_alternatives(tmp_path):
    templates = _write_templates(
        tmp_path,
        '  - {id: g, move: address, pattern: "[response:VBG] [dem] [problem]"}\n'
        '  - {id: c, move: broaden, pattern: "[dem] [cue:AGREE] a more general"}\n'
        '  - {id: n, move: address, pattern: "as a {remedy|answer} {to|for} [dem] [problem]"}\n',
    )
    gerund, cue, noun = (patterns.expand_template(t, templates.slots) for t in templates.templates)
    assert "coping with these limitations" in gerund and "mitigating this analysis" in gerund
    assert {"this suggests a more general", "these suggest a more general", "those point to a more general",
            "that points to a more general"} <= set(cue)
    assert "these suggests a more general" not in cue
    assert "as an answer to this issue" in noun and "as a remedy for those analyses" in noun
    assert len(noun) == 2 * 2 * 2 * 3 * 2
    frame = patterns.expand_all(templates)
    assert frame["marker"].is_unique and set(frame["move"]) == {"address", "broaden"}


def test_articles_and_errors():
    assert patterns.fix_articles("as a answer to a issue") == "as an answer to an issue"
    assert patterns.fix_articles("as a useful fix") == "as a useful fix"
    with pytest.raises(ValueError, match="unknown template"):
        patterns.TemplateSet({}, ()).select(("nope",))


def test_unknown_slot_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown slot \[problm\]"):
        _write_templates(tmp_path, '  - {id: x, move: address, pattern: "to [response] [dem] [problm]"}\n')


def test_project_templates_follow_the_paper():
    templates = patterns.load_templates()
    assert set(templates.slots["gen_noun"].terms) == {
        "observation", "result", "finding", "analysis", "case", "phenomenon", "insight", "experiment", "example",
        "problem"}
    assert set(templates.slots["gen_verb"].terms) == {"generalize", "broaden"}
    small = templates.select(("broaden_to_generalize",))
    phrases = patterns.expand_template(small.templates[0], small.slots)
    assert len(phrases) == 2 * 2 * 10 * 2  # verbs x demonstratives x nouns x number
    assert "to generalize these observations" in phrases and "to broaden this phenomenon" in phrases
    assert "to generalize these phenomena" in phrases


def test_comparison_with_released_rows(shared_dir):
    released = lx.read_released_csv_rows(shared_dir / "lexicon" / lx.RELEASED_LEXICON_NAME)
    templates = patterns.load_templates().select(("broaden_to_generalize", "broaden_cue", "broaden_generalizing_from"))
    expanded = patterns.expand_all(templates)
    result = patterns.compare_with_released(expanded, released).set_index(["query_type", "group"])
    combo = released[(released["source"] == "pattern") & (released["group"] == "more_generally")]
    expected = len(set(combo["marker"]) & set(expanded["marker"]))
    assert result.loc[("combo", "more_generally"), "regenerated"] == expected
    assert math.isclose(result.loc[("combo", "more_generally"), "regenerated_%"],
                        100 * expected / combo["marker"].nunique())
    table = patterns.table3(templates, expanded, set(released["marker"]), examples=2)
    assert table["phrases"].sum() == len(expanded)
    assert all(len(e.split("; ")) == 2 for e in table["examples"])


def test_grammar_filter_requests_and_answers():
    phrases = [f"to fix this issue {i}" for i in range(5)]
    requests = patterns.grammar_requests(phrases, "gpt-5.4", 2, "check grammar")
    assert [r.custom_id for r in requests] == ["grammar-00000", "grammar-00001", "grammar-00002"]
    assert requests[0].messages[0]["content"] == "check grammar"
    asked = phrases[:2]
    answer = {"judgements": [{"phrase": asked[0], "grammatical": True}, {"phrase": asked[1], "grammatical": "yes"},
                             {"phrase": "other", "grammatical": False}]}
    assert patterns.parse_grammar_answer(answer, asked) == {asked[0]: True}
    assert patterns.parse_grammar_answer(None, asked) == {}
