"""ratio_utils.judge: prompt files, sampling, label files, agreement statistics (against sklearn),
the anaphora test (against scipy), and the silver filter end to end, offline and against the
loopback OpenAI-compatible server."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import fisher_exact
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score, precision_score, recall_score

from ratio_utils.config import REPO_ROOT
from ratio_utils.dataset.benchmark import load_benchmark, pairs_path, write_pairs
from ratio_utils.io import InputError, sha256_file, sha256_tree
from ratio_utils.judge import (
    agreement,
    anaphora_analysis,
    annotation_pairs,
    both_rule,
    format_pair,
    human_panel_agreement,
    judge_requests,
    load_label_files,
    load_prompts,
    majority_label,
    nested_sample,
    parse_verdict,
    rater_panel_agreement,
    read_prompt,
    single_annotator_agreement,
    stratified_equal_allocation,
    unanimous_label,
    with_pair_columns,
)
from ratio_utils.judge.verdicts import FIXED_IN_PARAMS
from ratio_utils.llm import ChatResult
from ratio_utils.param_sections import JudgeParams
from ratio_utils.publish.label_sources import read_silver_source
from ratio_utils.schema import MOVES, Move, Split
from ratio_utils.stages.silver_filter import SilverFilterStage

FIXTURES = Path(__file__).parent / "fixtures" / "judge"
KEY = "fake-judge-key-0000-SECRET"


# -- prompts ----------------------------------------------------------------------------------


def test_prompt_files_are_versioned_and_four_to_six_per_move():
    prompts = load_prompts(REPO_ROOT / "prompts" / "judge")
    for move in MOVES:
        assert 4 <= len(prompts[move]) <= 6, move
        for prompt in prompts[move]:
            assert prompt.move is move and prompt.version >= 1
            assert prompt.sha256 == sha256_file(prompt.path)
            assert '"accept"' in prompt.text and not prompt.text.startswith("---")


def test_prompt_without_header_is_rejected_naming_the_file(tmp_path):
    bad = tmp_path / "address" / "nohead.md"
    bad.parent.mkdir()
    bad.write_text("Just a prompt.\n")
    with pytest.raises(InputError, match="nohead.md:1"):
        read_prompt(bad)


def test_format_pair_is_query_marker_gold():
    assert format_pair("Parsers overfit small treebanks.", "to address this issue,", "we add dropout.") == \
        "Parsers overfit small treebanks. To address this issue, we add dropout."
    assert format_pair("No final stop", "for example", "x") == "No final stop. For example, x"


def test_judge_text_joins_the_marker_as_it_stood_in_the_paper():
    # a clause-bearing lexicon entry: the gold sentence starts after the marker's first comma
    pairs = pd.DataFrame({
        "query_id": ["q1", "q2", "q3"], "gold_id": ["g1", "g2", "g3"],
        "querySentence": ["Rules are needed", "Parsers overfit.", "Old release row."],
        "queryTerm": ["for this purpose, we propose,", "to address this issue,", "for example,"],
        "marker_text": ["For this purpose", "To address this issue", None],
        "goldSentence": ["we propose the following post-processing rules.", "we add dropout.", "x."],
    })
    texts = with_pair_columns(pairs)["judge_text"].tolist()
    assert texts[0] == "Rules are needed. For this purpose, we propose the following post-processing rules."
    assert "we propose, we propose" not in texts[0]
    assert texts[1] == "Parsers overfit. To address this issue, we add dropout."
    assert texts[2] == "Old release row. For example, x."  # no marker_text: the lexicon entry
    # a release without the column at all
    assert with_pair_columns(pairs.drop(columns="marker_text"))["judge_text"][1] == texts[1]


def _result(content: str | None, *, error: str | None = None) -> ChatResult:
    parsed = json.loads(content) if content and error is None else None
    return ChatResult("c", content, parsed, error, {}, False, "h")


@pytest.mark.parametrize("content, accept", [
    ('{"accept": true, "reason": "fits"}', True),
    ('{"accept": false}', False),
    ('{"accept": "Yes"}', True),
    ('{"accept": " reject "}', False),
    ('{"accept": "0"}', False),
])
def test_parse_verdict_reads_booleans_and_boolean_strings(content, accept):
    value, reason, error = parse_verdict(_result(content))
    assert value is accept and error is None
    assert reason == ("fits" if "fits" in content else None)


@pytest.mark.parametrize("content", ['{"accept": "maybe"}', '{"accept": 1}', '{"accept": null}', '{"verdict": true}'])
def test_parse_verdict_rejects_non_boolean_answers(content):
    value, reason, error = parse_verdict(_result(content))
    assert value is None and reason is None and "no boolean 'accept'" in error


def test_parse_verdict_passes_on_failed_answers():
    assert parse_verdict(_result("not json", error="content is not valid JSON: x")) == (None, None,
                                                                                        "content is not valid JSON: x")
    assert parse_verdict(ChatResult("c", None, None, None, {}, False, "h")) == (None, None, "no JSON answer")


def test_small_moves_share_annotation_pairs_so_the_panel_is_not_empty():
    sample = pd.DataFrame({"pair_id": [f"p{i}" for i in range(13)]})
    subsets = annotation_pairs(sample, 100, 60, seed=13)
    assert (len(subsets["calibration"]), len(subsets["panel"])) == (8, 5)
    assert not set(subsets["calibration"].pair_id) & set(subsets["panel"].pair_id)
    big = annotation_pairs(pd.DataFrame({"pair_id": [f"p{i}" for i in range(200)]}), 100, 60, seed=13)
    assert (len(big["calibration"]), len(big["panel"])) == (100, 60)


# -- sampling ---------------------------------------------------------------------------------


def test_stratified_sampling_gives_equal_allocation_with_caps():
    sizes = {"rare": 2, "small": 5, "mid": 30, "big": 200, "huge": 900}
    frame = pd.DataFrame({"queryTerm": [m for m, n in sizes.items() for _ in range(n)]})
    frame["row"] = range(len(frame))
    sample = stratified_equal_allocation(frame, "queryTerm", 100, seed=3)
    counts = sample["queryTerm"].value_counts()
    assert len(sample) == 100 and sample["row"].is_unique
    # 100 over 5 markers: 20 each; "rare" and "small" give all they have (7), which leaves 93 for three
    # markers (31 each); "mid" has only 30, so "big" and "huge" share the last 63 (31 and 32)
    assert (counts["rare"], counts["small"], counts["mid"]) == (2, 5, 30)
    assert sorted([counts["big"], counts["huge"]]) == [31, 32]
    again = stratified_equal_allocation(frame, "queryTerm", 100, seed=3)
    assert again["row"].tolist() == sample["row"].tolist()
    assert len(stratified_equal_allocation(frame, "queryTerm", None, seed=3)) == len(frame)



def test_nested_sample_draws_each_wave_from_the_pairs_no_earlier_wave_drew():
    sizes = {"rare": 2, "small": 5, "mid": 30, "big": 200, "huge": 900}
    frame = pd.DataFrame({"queryTerm": [m for m, n in sizes.items() for _ in range(n)]})
    frame["row"] = range(len(frame))
    waves = nested_sample(frame, "queryTerm", [100, 300], seed=3)
    first, second = waves[waves["wave"] == 1], waves[waves["wave"] == 2]
    # wave 1 is exactly the one-wave sample of today; wave 2 the same rule, same seed, over the rest
    assert first["row"].tolist() == stratified_equal_allocation(frame, "queryTerm", 100, seed=3)["row"].tolist()
    rest = frame[~frame["row"].isin(first["row"])]
    assert second["row"].tolist() == stratified_equal_allocation(rest, "queryTerm", 300, seed=3)["row"].tolist()
    assert len(second) == 300 and waves["row"].is_unique
    one = nested_sample(frame, "queryTerm", [100], seed=3)  # a plain number: one wave, as today
    assert one.drop(columns="wave").equals(stratified_equal_allocation(frame, "queryTerm", 100, seed=3))
    assert len(nested_sample(frame, "queryTerm", None, seed=3)) == len(frame)
    assert len(nested_sample(frame, "queryTerm", [1000, 1000], seed=3)) == len(frame)  # a wave takes what is left


@pytest.mark.parametrize("size", [0, -5, 2.5, "400", [], [400, 0], [400, None], True])
def test_judge_sample_sizes_must_be_a_number_or_a_list_of_numbers(size):
    with pytest.raises(ValueError, match="judge.sample_sizes.specify"):
        JudgeParams(sample_sizes={"specify": size})


def test_judge_sample_sizes_read_as_waves():
    params = JudgeParams(sample_sizes={"specify": [400, 800], "address": None, "broaden": 59})
    assert (params.waves("specify") == [400, 800] and params.waves("address") is None
            and params.waves("broaden") == [59])


# -- label files and statistics ----------------------------------------------------------------


def test_label_files_load_with_blank_labels_counted():
    labels, counts = load_label_files(FIXTURES / "labels")
    assert counts["files"] == 2 and counts["blank"] == 2
    assert set(labels["label"]) == {0, 1}
    assert len(labels) == 70 - 2 + 20


def test_bad_label_names_file_and_line():
    with pytest.raises(InputError, match=r"sheet.csv:4: label 'maybe'"):
        load_label_files(FIXTURES / "bad_labels")


def _fixture_verdicts() -> pd.DataFrame:
    frame = pd.read_csv(FIXTURES / "prompt_verdicts.csv", dtype=str, keep_default_na=False)
    frame["accept"] = frame["accept"].map({"true": True, "false": False, "": None})
    return frame.pivot(index="pair_id", columns="prompt", values="accept")


def _sk(reference: pd.Series, rater: pd.Series) -> dict[str, float]:
    both = reference.notna() & rater.notna()
    y, p = reference[both].astype(int).to_numpy(), rater[both].astype(int).to_numpy()
    return {"P": precision_score(y, p, zero_division=0), "R": recall_score(y, p, zero_division=0),
            "F1": f1_score(y, p, zero_division=0), "kappa": cohen_kappa_score(y, p), "Agr": 100 * accuracy_score(y, p)}


def test_single_annotator_statistics_match_sklearn():
    labels, _ = load_label_files(FIXTURES / "labels")
    calibration = labels[labels["set"] == "calibration"].set_index("pair_id")["label"].astype("object")
    verdicts = _fixture_verdicts()
    for prompt in verdicts.columns:
        rater = verdicts[prompt].reindex(calibration.index)
        ours = single_annotator_agreement(calibration, rater)
        expected = _sk(calibration, rater)
        assert ours["single_P"] == pytest.approx(expected["P"])
        assert ours["single_R"] == pytest.approx(expected["R"])
        assert ours["single_F1"] == pytest.approx(expected["F1"])
        assert ours["single_kappa"] == pytest.approx(expected["kappa"])
        assert ours["single_Agr"] == pytest.approx(expected["Agr"])
    assert single_annotator_agreement(calibration, verdicts["ordered-v1"].reindex(calibration.index))["n_single"] == 19


def test_degenerate_cases_follow_sklearn():
    y = [1, 1, 1, 1]
    stats = agreement(y, [0, 0, 0, 0])
    assert stats.precision == precision_score(y, [0] * 4, zero_division=0) == 0.0
    assert stats.f1 == f1_score(y, [0] * 4, zero_division=0)
    assert np.isnan(agreement(y, y).kappa) and np.isnan(cohen_kappa_score(y, y))


def test_panel_statistics_match_sklearn():
    labels, _ = load_label_files(FIXTURES / "labels")
    panel = labels[labels["set"] == "panel"].pivot(index="pair_id", columns="annotator", values="label")
    rater = _fixture_verdicts()["minimal-v1"].reindex(panel.index)

    pairwise = [_sk(panel[a], panel[b]) for a, b in itertools.combinations(panel.columns, 2)]
    human = human_panel_agreement(panel)
    assert human["panel_F1"] == pytest.approx(np.mean([s["F1"] for s in pairwise]))
    assert human["panel_Agr"] == pytest.approx(np.mean([s["Agr"] for s in pairwise]))

    ours = rater_panel_agreement(panel, rater)
    assert ours["panel_F1"] == pytest.approx(np.mean([_sk(panel[a], rater)["F1"] for a in panel.columns]))
    assert ours["panel_Agr"] == pytest.approx(np.mean([_sk(panel[a], rater)["Agr"] for a in panel.columns]))

    # majority and unanimous labels computed independently, row by row
    majority, unanimous = {}, {}
    for pid, row in panel.iterrows():
        values = row.dropna().astype(int).tolist()
        if 2 * sum(values) > len(values):
            majority[pid] = 1
        elif 2 * (len(values) - sum(values)) > len(values):
            majority[pid] = 0
        if len(values) == panel.shape[1] and len(set(values)) == 1:
            unanimous[pid] = values[0]
    assert majority_label(panel).dropna().astype(int).to_dict() == majority
    assert unanimous_label(panel).dropna().astype(int).to_dict() == unanimous
    assert 0 < len(unanimous) < len(panel)
    assert ours["panel_F1_majority"] == pytest.approx(_sk(pd.Series(majority), rater.reindex(list(majority)))["F1"])
    assert ours["panel_F1_unanimous"] == pytest.approx(_sk(pd.Series(unanimous), rater.reindex(list(unanimous)))["F1"])


def test_both_rule_is_a_conjunction_where_a_rejection_decides():
    verdicts = pd.DataFrame({"a": [True, True, False, None, True], "b": [True, False, None, None, None]},
                            dtype="boolean")
    assert both_rule(verdicts, ["a", "b"]).tolist() == [True, False, False, pd.NA, pd.NA]


# -- anaphora ---------------------------------------------------------------------------------


def test_anaphora_analysis_matches_scipy_fisher():
    judged = pd.read_csv(FIXTURES / "anaphora_judged.csv")
    table = anaphora_analysis(judged).set_index("move")
    for move, part in judged.groupby("move"):
        a = int((part.marker_has_anaphor & part.accepted).sum())
        b = int((part.marker_has_anaphor & ~part.accepted).sum())
        c = int((~part.marker_has_anaphor & part.accepted).sum())
        d = int((~part.marker_has_anaphor & ~part.accepted).sum())
        expected = fisher_exact([[a, b], [c, d]])
        row = table.loc[move]
        assert row["odds_ratio"] == pytest.approx(expected.statistic)
        assert row["fisher_p"] == pytest.approx(expected.pvalue)
        assert row["accept_with_anaphor_%"] == pytest.approx(100 * a / (a + b))
        assert row["accept_without_anaphor_%"] == pytest.approx(100 * c / (c + d))
        assert (row["n_with_anaphor"], row["n_without_anaphor"]) == (a + b, c + d)


# -- the silver filter end to end ----------------------------------------------------------------


def _install_benchmark(tiny_benchmark: Path, cfg) -> None:
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)


def test_offline_run_writes_no_silver_and_says_so(cfg, tiny_benchmark, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg.paths = dataclasses.replace(cfg.paths, shared=tmp_path / "shared_without_llm_cache")  # nothing to replay
    _install_benchmark(tiny_benchmark, cfg)
    stale = pairs_path(cfg.paths.benchmark, Move.ADDRESS, Split.SILVER)
    write_pairs(load_benchmark(cfg.paths.benchmark).queries("address", "test"), cfg.paths.benchmark, "address",
                "silver")
    sf = SilverFilterStage.from_config(cfg)
    status = sf.status()
    assert not sf.online and "OPENAI_API_KEY" in sf.why
    assert "not set" in status.to_string()
    sample = sf.sample().set_index("move")
    assert sample.loc["address", "sampled"] == 3 and sample.loc["address", "with anaphor %"] == 100.0
    sheets = sf.write_annotation_sheets()
    assert all(Path(f).exists() for f in sheets["file"])
    sf.load_labels()
    selection = sf.calibrate()
    # no labels: no F1; the default params fix the retained prompts (those of the recorded answers)
    assert selection["single_F1"].isna().all()
    # fixed in params, not selected by calibration F1: the table says where the choice came from
    used = selection["used by the judge"] == FIXED_IN_PARAMS
    assert sorted(selection.loc[used, "prompt"]) == sorted(["minimal-v1", "ordered-v1"] * 3)
    assert "retained" not in selection.columns and set(selection["used by the judge"]) == {FIXED_IN_PARAMS, ""}
    summary = sf.filter()
    assert not summary["silver written"].any()
    assert not stale.exists() and not any(load_benchmark(cfg.paths.benchmark).has(m, "silver") for m in MOVES)
    table9 = sf.table9()
    assert table9.loc[table9["rater"] != "Human", ["panel_F1", "single_F1"]].isna().all().all()
    anaphora = sf.anaphora().set_index("move")
    assert anaphora["accept_with_anaphor_%"].isna().all()
    assert anaphora.loc["address", "paper: accept with anaphor %"] == 71.9
    for name in ("table9_judge_agreement", "judge_silver_summary", "judge_anaphora"):
        assert "No LLM judge here" in (cfg.paths.tables / f"{name}.md").read_text()


def _responder(body: dict) -> str:
    """A deterministic judge: accepts unless a hash of (prompt, pair) falls in one quarter."""
    system = body["messages"][0]["content"]
    user = body["messages"][1]["content"]
    return json.dumps({"accept": _stub_accepts(system, user), "reason": "stub"})


def _stub_accepts(system: str, user: str) -> bool:
    return int(hashlib.sha256(f"{system}|{user}".encode()).hexdigest(), 16) % 4 != 0


def _fill_labels(sheets: pd.DataFrame, labels_dir: Path) -> None:
    labels_dir.mkdir(parents=True)
    for path in sheets.loc[sheets["file"].str.endswith(".csv"), "file"]:
        sheet = pd.read_csv(path, dtype=str, keep_default_na=False)
        annotators = ["cal"] if "calibration" in Path(path).name else ["a1", "a2", "a3"]
        for k, annotator in enumerate(annotators):
            filled = sheet.copy()
            filled["annotator"] = annotator
            filled["label"] = [str(int((int(hashlib.md5(f"{pid}{k}".encode()).hexdigest(), 16) % 3) != 0))
                               for pid in sheet.pair_id]
            filled.to_csv(labels_dir / f"{annotator}__{Path(path).name}", index=False)


def test_online_run_against_the_loopback_server(cfg, tiny_benchmark, monkeypatch, openai_stub):
    _install_benchmark(tiny_benchmark, cfg)
    pools_before = sha256_tree(cfg.paths.benchmark / "candidates")
    stub = openai_stub(KEY, responder=_responder, batch_polls_before_done=1)
    base = cfg.sections
    base["llm"] = {"model": "judge-model", "base_url": stub.base_url, "batch_poll_interval_s": 0.01}
    base["judge"] = {"n_calibration": 2, "n_panel": 1}
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    sf = SilverFilterStage.from_config(cfg)
    assert sf.online
    sf.sample()
    sheets = sf.write_annotation_sheets()
    _fill_labels(sheets, sf.labels_dir)
    labels = sf.load_labels()
    assert set(labels["set"]) == {"calibration", "panel"}
    selection = sf.calibrate()
    summary = sf.filter().set_index("move")
    table9 = sf.table9()
    anaphora = sf.anaphora().set_index("move")
    requests_after_first_run = stub.total_requests
    # the tiny test set is entirely labelled: the calibration batch judged every pair with every
    # prompt, so the silver filter's requests are all answered from the cache
    assert stub.counts["POST /v1/batches"] == 1
    assert sf.client.last_report.desc == "judge silver" and sf.client.last_report.n_to_send == 0

    # a rerun is answered from the cache: zero HTTP requests
    again = SilverFilterStage.from_config(cfg)
    again.sample()
    again.load_labels()
    again.calibrate()
    again.filter()
    assert stub.total_requests == requests_after_first_run

    prompts = load_prompts(REPO_ROOT / "prompts" / "judge")
    judgements = sf.calibration_judgements
    labels_long, _ = load_label_files(sf.labels_dir)
    for move in MOVES:
        # the retained prompts have the highest F1 against the calibration annotator (sklearn)
        cal = labels_long[(labels_long.move == move.value)
                          & (labels_long.set == "calibration")].set_index("pair_id")["label"]
        part = judgements[judgements.move == move.value].pivot(index="pair_id", columns="prompt", values="accept")
        f1 = {p: f1_score(cal.to_numpy(), part[p].reindex(cal.index).astype(int).to_numpy(), zero_division=0)
              for p in part.columns}
        retained = sf.retained[move]
        assert len(retained) == 2
        assert min(f1[p] for p in retained) >= max(f1[p] for p in f1 if p not in retained)
        assert selection[(selection.move == move.value) & selection.retained].prompt.tolist() == retained

        # the silver set is exactly the test pairs both retained prompts accept (recomputed from the stub's rule)
        texts = {p.label: p.text for p in prompts[move]}
        test = load_benchmark(cfg.paths.benchmark).queries(move, "test")
        expected = {
            (q, g) for q, m, g in zip(test.querySentence, test.queryTerm, test.goldSentence)
            if all(_stub_accepts(texts[p], format_pair(q, m, g)) for p in retained)
        }
        silver = load_benchmark(cfg.paths.benchmark).queries(move, "silver")
        assert set(zip(silver.querySentence, silver.goldSentence)) == expected
        assert summary.loc[move.value, "silver"] == len(expected)
        assert set(silver.columns) >= set(test.columns) - {"pair_id"}

        # Table 9 prompt rows against the calibration annotator, recomputed with sklearn
        rows = table9[(table9.move == move.value)].set_index("rater")
        for p in retained:
            assert rows.loc[p, "single_F1"] == pytest.approx(f1[p])
        both = part[retained[0]].astype(bool) & part[retained[1]].astype(bool)
        assert rows.loc["Both (AND)", "single_F1"] == pytest.approx(
            f1_score(cal.to_numpy(), both.reindex(cal.index).astype(int).to_numpy(), zero_division=0))
    assert anaphora.loc["address", "n_with_anaphor"] == 3
    # one denominator per column, named: sampled pairs vs judged pairs (with a usable verdict)
    address = anaphora.loc["address"]
    assert address["judged pairs"] == address["n_with_anaphor"] + address["n_without_anaphor"]
    md = (cfg.paths.tables / "judge_anaphora.md").read_text(encoding="utf-8")
    assert "sampled: with anaphor %" in md and "judged with anaphor: accepted %" in md and "n_with_anaphor" not in md
    assert f"address {int(address['judged pairs'])} of {int(address['sampled pairs'])}" in md
    assert sha256_tree(cfg.paths.benchmark / "candidates") == pools_before  # rejected golds stay in the pool
    # the silver set's record says who judged it, with which prompts, and how many pairs got no verdict
    judge = read_silver_source(cfg.paths.benchmark)
    assert (judge.role, judge.configured, judge.answered_by, judge.replayed_from) == ("judge", "judge-model",
                                                                                      ("judge-model",), None)
    assert not judge.stand_in
    assert judge.detail["prompts"] == {m.value: sf.retained[m] for m in MOVES}
    assert judge.detail["prompts chosen by"] == "calibration F1"
    assert judge.detail["silver pairs"] == {m.value: int(summary.loc[m.value, "silver"]) for m in MOVES}
    assert judge.detail["pairs without a verdict"] == {m.value: 0 for m in MOVES}

    # every verdict records the prompt file's hash; the cache holds readable requests and responses, never the key
    verdicts = pd.read_parquet(sf.out_dir / "judgements.parquet")
    sha = {(m.value, p.label): p.sha256 for m in MOVES for p in prompts[m]}
    assert [sha[(m, p)] for m, p in zip(verdicts["move"], verdicts["prompt"])] == verdicts["prompt_sha256"].tolist()
    entries = list((cfg.paths.root / "cache" / "llm" / "responses").rglob("*.json"))
    entry = json.loads(entries[0].read_text())
    assert (entry["meta"]["prompt_sha256"] == sha[(entry["meta"]["move"], entry["meta"]["prompt"])]
            and entry["request"]["reasoning_effort"] == "medium")
    for path in cfg.paths.root.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def _record_batch_files(folder: Path, sf: SilverFilterStage, model: str, *, skip_pairs: set[str]) -> int:
    """Recorded responses in the Batch API format of ../shared/llm_cache (input + output JSONL),
    answered by `model`, for every retained-prompt request except those of `skip_pairs`."""
    folder.mkdir(parents=True)
    inputs, outputs = [], []
    for move in MOVES:
        for prompt in [p for p in sf.prompts[move] if p.label in sf.retained[move]]:
            for request in judge_requests(sf.samples[move], prompt, "gpt-5.4", sf.params):
                inputs.append({"custom_id": request.custom_id, "method": "POST", "url": "/v1/chat/completions",
                               "body": request.body()})
                if request.meta["pair_id"] in skip_pairs:
                    continue
                accept = _stub_accepts(prompt.text, request.messages[1]["content"])
                body = {"model": model, "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": json.dumps({"accept": accept, "reason": "recorded"})}}]}
                outputs.append({"custom_id": request.custom_id, "response": {"status_code": 200, "body": body},
                                "error": None})
    (folder / "run-input.jsonl").write_text("".join(json.dumps(x) + "\n" for x in inputs))
    (folder / "run-output.jsonl").write_text("".join(json.dumps(x) + "\n" for x in outputs))
    return len(inputs) - len(outputs)


def test_partial_replay_counts_misses_per_move_and_names_the_answering_model(cfg, tiny_benchmark, monkeypatch,
                                                                             tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg.paths = dataclasses.replace(cfg.paths, shared=tmp_path / "shared_without_llm_cache")
    _install_benchmark(tiny_benchmark, cfg)
    cfg.sections["judge"] = {"retained": {m.value: ["minimal", "ordered"] for m in MOVES}}
    recorded = tmp_path / "recorded"
    cfg.sections["llm"] = {"model": "gpt-5.4", "replay_dirs": [str(recorded)]}
    sf = SilverFilterStage.from_config(cfg)
    sf.sample()
    sf.calibrate()
    missing_pair = sf.samples[Move.SPECIFY]["pair_id"].iloc[0]
    assert _record_batch_files(recorded, sf, "standin-model", skip_pairs={missing_pair}) == 2
    sf = SilverFilterStage.from_config(cfg)  # a fresh client sees the recorded files
    assert sf.online
    sf.sample()
    sf.load_labels()
    sf.calibrate()
    summary = sf.filter().set_index("move")
    assert summary["replay misses"].to_dict() == {"address": 0, "broaden": 0, "specify": 2}
    assert summary.loc["specify", "judged"] == 2 and summary.loc["specify", "sampled"] == 3
    assert summary.loc["address", "judged"] == 3
    verdicts = sf.silver_verdicts.set_index("pair_id")
    assert pd.isna(verdicts.loc[missing_pair, "accepted"])  # a pair with a missing verdict is not silver
    silver = load_benchmark(cfg.paths.benchmark).queries(Move.SPECIFY, "silver")
    assert missing_pair not in set(silver["query_id"] + "-" + silver["gold_id"])
    notes = (cfg.paths.tables / "judge_silver_summary.md").read_text()
    assert "gpt-5.4 configured; answers replayed from ../shared/llm_cache, produced by standin-model" in notes
    assert "specify: 2 request(s), 1 pair(s)" in notes
    # the unanswered pair: written as a request file, named in Table 9's notes, never counted as rejected
    assert sf.request_files and len(list(Path(sf.request_files).rglob("*.jsonl"))) >= 1
    assert (verdicts.loc[missing_pair, "unanswered"]
            and not verdicts.drop(index=missing_pair)["unanswered"].fillna(False).any())
    sf.table9()
    table9_notes = (cfg.paths.tables / "table9_judge_agreement.md").read_text()
    assert "1 judged pair(s) are unanswered" in table9_notes and "specify: 1 of 3" in table9_notes
    assert "never counted as rejected" in table9_notes
    assert str(tmp_path) not in notes
    sf.anaphora()
    assert "produced by standin-model" in (cfg.paths.tables / "judge_anaphora.md").read_text()
    # the stand-in is named before it answers (the status step) and in the silver set's record
    assert "standin-model" in sf.status().set_index("setting").loc["recorded answers by", "value"]
    judge = read_silver_source(cfg.paths.benchmark)
    assert judge.stand_in and judge.answered_by == ("standin-model",) and judge.configured == "gpt-5.4"
    assert judge.detail["pairs without a verdict"] == {"address": 0, "broaden": 0, "specify": 1}
    assert judge.detail["prompts chosen by"] == FIXED_IN_PARAMS


def test_replay_with_no_recorded_answer_for_these_requests_keeps_the_offline_branch(cfg, tiny_benchmark, monkeypatch,
                                                                                    tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _install_benchmark(tiny_benchmark, cfg)
    cfg.sections["judge"] = {"retained": {m.value: ["minimal", "ordered"] for m in MOVES}}
    recorded = tmp_path / "recorded"
    cfg.sections["llm"] = {"replay_dirs": [str(recorded)]}
    sf = SilverFilterStage.from_config(cfg)
    sf.sample()
    sf.calibrate()
    _record_batch_files(recorded, sf, "standin-model",
                        skip_pairs=set().union(*(set(s["pair_id"]) for s in sf.samples.values())))
    sf = SilverFilterStage.from_config(cfg)
    sf.sample()
    sf.load_labels()
    sf.calibrate()
    summary = sf.filter()
    assert not summary["silver written"].any() and (summary["judged"] == 0).all()
    assert not any(load_benchmark(cfg.paths.benchmark).has(m, "silver") for m in MOVES)
    assert "replay found no recorded response" in (cfg.paths.tables / "judge_silver_summary.md").read_text()
