"""The unified retriever's pieces (ratio_utils.train.unified): instructions on the query, balanced shares,
move-mixing batches; one tiny training run (marked `models`)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from ratio_utils.param_sections import UnifiedParams
from ratio_utils.retrieval_analysis import move_sensitivity
from ratio_utils.schema import Move, move_text
from ratio_utils.train import unified


def test_format_query_puts_the_move_instruction_before_the_statement():
    text = "Parsers overfit small treebanks."
    formatted = unified.format_query(text, "broaden")
    assert formatted == f"Instruct: {move_text(Move.BROADEN, 'instruction')}\nQuery: {text}"
    assert (unified.format_query(text, Move.ADDRESS, "{instruction} || ")
            == move_text(Move.ADDRESS, "instruction") + " || " + text)
    assert len({unified.query_prefix(m) for m in Move}) == 3  # each move asks differently


def test_instruction_template_without_slot_and_unknown_move_are_errors():
    with pytest.raises(ValueError, match="instruction"):
        unified.format_query("x", "specify", "Query: ")
    with pytest.raises(ValueError, match="unknown move"):
        unified.format_query("x", "analogy")


def _pairs(n: int, tag: str) -> pd.DataFrame:
    return pd.DataFrame({"anchor": [f"{tag} query {i}" for i in range(n)],
                         "positive": [f"{tag} gold {i}" for i in range(n)]})


def test_balanced_pairs_gives_each_move_the_same_share_and_caps_repeats():
    pairs, report = unified.balanced_pairs(
        {Move.SPECIFY: _pairs(500, "s"), Move.ADDRESS: _pairs(120, "a"), Move.BROADEN: _pairs(10, "b")},
        pairs_per_move=100, max_repeats=3, seed=13)
    counts = pairs["move"].value_counts().to_dict()
    assert counts == {"specify": 100, "address": 100, "broaden": 30}  # Broaden: 10 pairs, at most 3 times each
    assert pairs[pairs.move == "specify"]["anchor"].is_unique  # sampled down, no repeat
    assert pairs[pairs.move == "broaden"]["anchor"].value_counts().eq(3).all()
    row = report.set_index("move").loc["broaden"]
    assert (row["available"], row["used"], row["unique"], row["repeats"]) == (10, 30, 10, 3.0)
    # shares of the 230 pairs used, in % to one decimal: 100/230, 100/230, 30/230
    assert report.set_index("move")["share (%)"].to_dict() == {"specify": 43.5, "address": 43.5, "broaden": 13.0}
    again, _ = unified.balanced_pairs({Move.SPECIFY: _pairs(500, "s")}, 100, 3, seed=13)
    assert list(again["anchor"]) == list(pairs[pairs.move == "specify"]["anchor"])  # seeded
    # 128 per move, Address capped at 32 pairs x 3 = 96: 128/96/128 of 352
    _, report = unified.balanced_pairs(
        {Move.SPECIFY: _pairs(500, "s"), Move.ADDRESS: _pairs(32, "a"), Move.BROADEN: _pairs(200, "b")},
        pairs_per_move=128, max_repeats=3, seed=13)
    by_move = report.set_index("move")
    assert by_move["used"].to_dict() == {"specify": 128, "address": 96, "broaden": 128}
    assert by_move["share (%)"].to_dict() == {"specify": round(12800 / 352, 1), "address": round(9600 / 352, 1),
                                              "broaden": round(12800 / 352, 1)} == {"specify": 36.4, "address": 27.3,
                                                                                    "broaden": 36.4}


def test_balanced_pairs_without_cap_matches_the_largest_move():
    pairs, _ = unified.balanced_pairs({Move.SPECIFY: _pairs(40, "s"), Move.BROADEN: _pairs(25, "b")}, None, 2, 0)
    assert Counter(pairs["move"]) == {"specify": 40, "broaden": 40}


def test_move_mixed_batches_keep_proportions_mix_moves_and_cover_every_row():
    moves = ["specify"] * 60 + ["address"] * 60 + ["broaden"] * 60
    texts = [(f"q{i}", f"g{i}") for i in range(len(moves))]
    batches = unified.move_mixed_batches(moves, texts, batch_size=12, rng=np.random.default_rng(0))
    assert sorted(i for b in batches for i in b) == list(range(len(moves)))  # every row once
    for batch in batches:
        per_move = Counter(moves[i] for i in batch)
        assert set(per_move) == {"specify", "address", "broaden"}  # other moves' golds are in-batch negatives
        assert max(per_move.values()) - min(per_move.values()) <= 1
    other = unified.move_mixed_batches(moves, texts, 12, np.random.default_rng(1))
    assert other != batches  # reshuffled with another seed (a new epoch)


def test_move_mixed_batches_follow_unequal_shares_and_never_repeat_a_text_in_a_batch():
    moves = ["specify"] * 80 + ["broaden"] * 40
    # broaden repeated 4x
    texts = [(f"q{i}", f"g{i}") for i in range(80)] + [(f"bq{i % 10}", f"bg{i % 10}") for i in range(40)]
    batches = unified.move_mixed_batches(moves, texts, batch_size=12, rng=np.random.default_rng(0))
    assert sorted(i for b in batches for i in b) == list(range(120))
    for batch in batches[:-2]:
        per_move = Counter(moves[i] for i in batch)
        assert per_move["broaden"] >= 2 and per_move["specify"] >= 6  # 4 and 8 in proportion; deferrals shift a few
    for batch in batches:
        flat = [t for i in batch for t in texts[i]]
        assert len(flat) == len(set(flat)), "a repeated pair in one batch would be its own negative"
    assert len(unified.move_mixed_batches(moves, texts, 12, np.random.default_rng(0), drop_last=True)[-1]) == 12


def test_sampler_class_yields_the_library_batches(tmp_path):
    from datasets import Dataset

    frame = pd.DataFrame({"anchor": [f"q{i}" for i in range(9)], "positive": [f"g{i}" for i in range(9)]})
    moves = ["address", "broaden", "specify"] * 3
    sampler = unified.MoveMixingBatchSampler(Dataset.from_pandas(frame), batch_size=3, drop_last=False, seed=5,
                                             moves=moves)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 3
    assert all(sorted(moves[i] for i in b) == ["address", "broaden", "specify"] for b in batches)
    with pytest.raises(ValueError, match="move labels"):
        unified.MoveMixingBatchSampler(Dataset.from_pandas(frame), batch_size=3, drop_last=False, moves=moves[:4])
    # a tiny training set repeated in whole passes by train.train_configuration keeps its labels
    repeated = unified.MoveMixingBatchSampler(Dataset.from_pandas(frame), batch_size=3, drop_last=False,
                                              moves=["address", "broaden", "specify"])
    assert repeated.moves == moves


def test_sensitivity_ranks_equal_the_ranks_of_a_full_search_under_each_instruction(tiny_benchmark):
    from fake_encoder import FakeEncoder

    from ratio_utils.dataset.benchmark import load_benchmark
    from ratio_utils.evaluation.metrics import relevant_ranks

    bench = load_benchmark(tiny_benchmark)
    template = UnifiedParams().instruction_template
    ranks = move_sensitivity.sensitivity_ranks(FakeEncoder(), bench, "test", list(Move), template, "document: ")
    assert len(ranks) == 8 and set(ranks["move"]) == {"address", "broaden", "specify"}
    pool = bench.pool("test")
    for own in Move:  # independent path: DenseRetriever.search over the whole pool, metrics.relevant_ranks
        evalset = bench.eval_set(own, "test")
        queries, qrels = evalset.queries, evalset.qrels
        for issued in Move:
            run = FakeEncoder(query_prefix=unified.query_prefix(issued, template),
                              doc_prefix="document: ").search(queries, pool, k=len(pool))
            expected = relevant_ranks(run, qrels).set_index("qid")["rank"]
            got = ranks[ranks.move == own.value].set_index("qid")[f"rank_{issued.value}"]
            assert got.sort_index().tolist() == expected.sort_index().astype(float).tolist()
    assert (ranks[[f"overlap_{m.value}" for m in Move]].max(axis=None) <= move_sensitivity.TOP)
    own_overlap = [row[f"overlap_{row['move']}"] for _, row in ranks.iterrows()]
    assert all(o == min(move_sensitivity.TOP, len(pool) - 1) for o in own_overlap)  # a list overlaps itself fully
    summary = move_sensitivity.sensitivity_summary(ranks, list(Move))
    assert list(summary["Move"]) == ["Address", "Broaden", "Specify", "All"]
    shares = summary[["Gold higher under own move than under both others (%)", "Tied with the best other (%)",
                      "Lower under own move than under another (%)"]].sum(axis=1)
    assert shares.round(6).eq(100).all()
    assert summary["Pairs"].tolist() == [3, 2, 3, 8]
    pairwise = move_sensitivity.pairwise_own_vs_other(ranks, list(Move))
    assert set(zip(pairwise["own move"], pairwise["other move"])) == {(a.value, b.value) for a in Move for b in Move
                                                                      if a is not b}
    # the values of the summary and of the pairwise shares from hand-made ranks: test_sensitivity_shares_by_hand


def test_sensitivity_shares_by_hand():
    """Four pairs whose ranks under each instruction are written out, so every share is known."""
    ranks = pd.DataFrame([
        # own move, its rank; the gold's rank under the other moves' instructions
        {"qid": "q1", "move": "specify", "rank_specify": 1, "rank_address": 3, "rank_broaden": 2,
         "changed": True},  # higher
        {"qid": "q2", "move": "specify", "rank_specify": 2, "rank_address": 2, "rank_broaden": 5,
         "changed": False},  # tied
        {"qid": "q3", "move": "specify", "rank_specify": 4, "rank_address": 1, "rank_broaden": 6,
         "changed": True},  # lower
        {"qid": "q4", "move": "address", "rank_specify": 2, "rank_address": 1, "rank_broaden": 3,
         "changed": True},  # higher
    ]).assign(gold_id="g", overlap_specify=[10, 6, 2, 4], overlap_address=[4, 10, 8, 10], overlap_broaden=[6, 4, 2, 8])
    moves = [Move.ADDRESS, Move.BROADEN, Move.SPECIFY]
    summary = move_sensitivity.sensitivity_summary(ranks, moves).set_index("Move")
    assert list(summary.index) == ["Address", "Specify", "All"]  # no Broaden pair: no row
    shares = summary[["Gold higher under own move than under both others (%)", "Tied with the best other (%)",
                      "Lower under own move than under another (%)"]]
    assert shares.loc["Specify"].tolist() == pytest.approx([100 / 3] * 3)
    assert shares.loc["Address"].tolist() == [100.0, 0.0, 0.0]
    assert shares.loc["All"].tolist() == [50.0, 25.0, 25.0]
    assert summary.loc["Specify", "Top 10 changes with the move (%)"] == pytest.approx(200 / 3)
    # mean overlap with the other two moves' top 10: q1 5, q2 7, q3 5 (specify); q4 6 (address)
    assert summary.loc["Specify", "Mean top-10 overlap with other moves (of 10)"] == pytest.approx(17 / 3)
    assert summary.loc["All", "Mean top-10 overlap with other moves (of 10)"] == pytest.approx(23 / 4)
    assert (summary.loc["Specify", "Median gold rank, own move"] == 2
            and summary.loc["Specify", "Median gold rank, best other move"] == 2)
    pairwise = (move_sensitivity.pairwise_own_vs_other(ranks, moves, paired_test=False)
                .set_index(["own move", "other move"]))
    assert (pairwise.loc[("specify", "address"), ["higher under own", "equal", "lower under own"]].tolist()
            == pytest.approx([100 / 3] * 3))
    assert (pairwise.loc[("specify", "broaden"), ["higher under own", "equal", "lower under own"]].tolist()
            == [100.0, 0.0, 0.0])
    assert (pairwise.loc[("address", "specify"), "higher under own"] == 100.0
            and pairwise.loc[("address", "specify"), "pairs"] == 1)
    assert len(pairwise) == 4  # Broaden has no pair of its own


def test_params_section_is_validated(cfg):
    assert unified.load_unified_params(cfg).base_model == "all-MiniLM-L6-v2"
    cfg.sections["unified"] = {"pairs_per_mov": 3}
    with pytest.raises(ValueError, match="pairs_per_mov"):
        unified.load_unified_params(cfg)


def test_unified_runs_live_in_notebook_13s_own_folder(cfg):
    """Notebook 13 trains under models/unified/_runs/<base>/, never in the models/_runs/ that 09 reads."""
    params = UnifiedParams()
    folder = unified.unified_runs_dir(cfg, params)
    assert folder == cfg.paths.models / "unified" / "_runs" / "all-MiniLM-L6-v2"
    assert folder != cfg.paths.tuned_runs_dir(params.base_model, "unified")


def test_tiny_unified_training_selects_publishes_and_scores_each_move(cfg, tiny_benchmark):
    import shutil

    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    params = UnifiedParams(configs_file="params/finetune/smoke.yaml", configs=None, pairs_per_move=4)
    result = unified.train_unified(cfg, params)
    assert result.selected.train_pairs == 8 + 4  # address 3 (+1 repeat), broaden 2 (+2), specify 3 (+1)
    assert set(result.final["test"]) == {"address", "broaden", "specify"}
    fmt = json.loads((result.model_dir / unified.FORMAT_FILE).read_text())
    assert fmt["query_prefixes"]["broaden"] == unified.query_prefix("broaden")
    assert "MRR@10" in result.selected.validation and "broaden/MRR@10" in result.selected.validation
    assert (result.reused() == []
            and unified.unified_summary(result)["this run"].tolist() == ["trained"] * len(result.runs))
    again = unified.train_unified(cfg, params)  # resumes: nothing trained, the test score reused
    assert again.trained_now == [] and again.final["test"] == result.final["test"]
    keys = ", ".join(f"{r.config['id']} (run key {r.run_key})" for r in result.runs)
    assert again.reused() == [f"unified: configuration(s) {keys}",
                              f"unified: the selected model, its test scores and move-sensitivity ranks "
                              f"({result.model_dir.name})"]
    assert unified.unified_summary(again)["this run"].tolist() == [f"reused (run key {r.run_key})"
                                                                   for r in result.runs]
    runs_dir = unified.unified_runs_dir(cfg, params)
    assert runs_dir.is_relative_to(cfg.paths.models / "unified") and not (cfg.paths.models / "_runs").exists()

    # What notebook 13 shows: the figure once (from its file, no live figure left to show again), floats formatted.
    import matplotlib.pyplot as plt
    from IPython.display import Image

    from ratio_utils.stages import unified_retriever as stage

    plt.close("all")
    shown = move_sensitivity.sensitivity_figure(cfg, params, again.sensitivity, stage.result_name(params))
    assert (isinstance(shown, Image) and plt.get_fignums() == []
            and (cfg.paths.figures / "unified_move_sensitivity.png").exists())
    table = move_sensitivity.sensitivity_table(cfg, params, again.sensitivity)
    cells = stage.formatted(table)["Top 10 changes with the move (%)"]
    assert cells.tolist() == [f"{v:.1f}" for v in table["Top 10 changes with the move (%)"]]
    assert len(result.sensitivity) == 8 and again.sensitivity.equals(result.sensitivity)


def _per_query(values, qids):
    return pd.DataFrame({"MRR@10": values, "R@10": np.asarray(values) > 0},
                        index=pd.Index(qids, name="qid")).astype(float)


def test_comparison_row_pairs_the_same_queries_and_names_each_models_pairs():
    from ratio_utils.evaluation import stats
    from ratio_utils.evaluation.intervals import IntervalCache
    from ratio_utils.train.unified import comparison_row

    rng = np.random.default_rng(0)
    qids = [f"q{i}" for i in range(40)]
    base, per_move, uni = (np.where(rng.random(40) < share, 1 / rng.integers(1, 11, 40), 0.0)
                           for share in (0.2, 0.5, 0.3))
    pairs = {"Per-move training pairs": 1000, "Unified training pairs": 128, "Unified unique pairs": 128}
    # the per-move values come in another query order (results.json): paired by qid, not by position
    shuffled = _per_query(per_move, qids).iloc[::-1]
    numbers, shown = comparison_row("specify", "test", _per_query(base, qids), shuffled, _per_query(uni, qids), pairs,
                                    IntervalCache(None, seed=13, n_resamples=500))
    assert numbers["Unified − per-move M@10"] == pytest.approx(100 * (uni - per_move).mean())
    by_qid = np.argsort(qids)  # paired tests take the queries in qid order
    expected_p = stats.paired_permutation_test(uni[by_qid], per_move[by_qid], n_permutations=500, seed=13)
    assert numbers["p vs per-move"] == pytest.approx(expected_p)
    assert shown["p vs per-move"] == stats.format_p(expected_p, 500)
    low, high = stats.paired_bootstrap_ci(uni[by_qid], base[by_qid], n_resamples=500, seed=13)
    assert (numbers["Unified − baseline M@10 low"],
            numbers["Unified − baseline M@10 high"]) == pytest.approx((100 * low, 100 * high))
    assert numbers["Per-move training pairs"] == 1000 and shown["Unified M@10"].count("[") == 1
    with pytest.raises(ValueError, match="other queries"):
        comparison_row("specify", "test", _per_query(base, qids), _per_query(per_move[:30], qids[:30]),
                       _per_query(uni, qids), pairs, IntervalCache(None, seed=13, n_resamples=50))


def test_confound_note_says_when_the_pair_budgets_differ():
    from ratio_utils.train.unified import confound_notes

    frame = pd.DataFrame([
        {"Move": "Address", "Per-move training pairs": 108, "Unified training pairs": 108,
         "Unified unique pairs": 108},
        {"Move": "Specify", "Per-move training pairs": 1000, "Unified training pairs": 128,
         "Unified unique pairs": 128},
    ])
    notes = " ".join(confound_notes(frame, {"address": "2", "specify": "4"}, "1"))
    assert "Not a matched comparison" in notes and "Specify 1,000 per-move vs 128 unified (128 unique)" in notes
    assert "Address" not in notes.split("(", 1)[1].split(")")[0]  # a matched move is not listed as unmatched
    assert "Configurations also differ" in notes
    matched = confound_notes(frame.iloc[:1], {"address": "1"}, "1")
    assert matched == ["Pair budgets match: each move's per-move model and the unified model saw the same number of "
                       "training pairs."]


def test_pairwise_test_and_the_reading_come_from_the_ranks():
    from ratio_utils.evaluation import stats
    from ratio_utils.retrieval_analysis.move_sensitivity import own_vs_other_shown, sensitivity_reading

    rng = np.random.default_rng(1)
    n = 200
    own = rng.integers(1, 50, n).astype(float)
    ranks = pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "move": "specify", "gold_id": "g",
                          "rank_specify": own, "rank_address": own + rng.integers(-5, 20, n),  # own mostly better
                          "rank_broaden": own + rng.integers(-10, 11, n), "changed": True})
    moves = [Move.SPECIFY, Move.ADDRESS, Move.BROADEN]
    pairwise = move_sensitivity.pairwise_own_vs_other(ranks, moves, seed=13, n_resamples=2_000)
    vs_address = pairwise.set_index("other move").loc["address"]
    higher = (ranks["rank_specify"] < ranks["rank_address"]).to_numpy(float)
    lower = (ranks["rank_specify"] > ranks["rank_address"]).to_numpy(float)
    assert vs_address["higher - lower"] == pytest.approx(vs_address["higher under own"]
                                                         - vs_address["lower under own"])
    assert vs_address["p"] == stats.paired_permutation_test(higher, lower, n_permutations=2_000, seed=13)
    assert vs_address["higher - lower low"] > 0
    assert own_vs_other_shown(pairwise)["p"].iloc[0] == stats.format_p(pairwise["p"].iloc[0])
    summary = move_sensitivity.sensitivity_summary(ranks.assign(overlap_specify=10, overlap_address=5,
                                                                overlap_broaden=5), moves)
    reading = " ".join(sensitivity_reading(summary, pairwise))
    lower_share = summary.set_index("Move").loc["All", "Lower under own move than under another (%)"]
    assert f"lower under its own move than under another move for {lower_share:.1f}% of the pairs" in reading
    assert "own move ranks the gold higher (interval above 0): specify vs address" in reading
    shares_only = move_sensitivity.pairwise_own_vs_other(ranks, moves, paired_test=False)
    assert "p" not in shares_only and shares_only["higher under own"].equals(pairwise["higher under own"])


@pytest.mark.models
def test_stage_tables_pair_the_models_and_the_figure_names_its_queries(cfg, tiny_benchmark):
    import shutil

    from ratio_utils.evaluation.stats import DAGGER

    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    params = UnifiedParams(configs_file="params/finetune/smoke.yaml", configs=[1], pairs_per_move=4)
    result = unified.train_unified(cfg, params)
    table = unified.compare_with_per_move(cfg, params, result)
    row = table.numeric.set_index(["Move", "Split"]).loc[("Address", "test")]
    # the recomputed per-query unified scores are the ones published with the model
    assert row["Unified M@10"] == pytest.approx(100 * result.final["test"]["address"]["MRR@10"])
    assert row["Unified training pairs"] == 4 and pd.isna(row["Per-move training pairs"])  # no notebook 09 model here
    assert row["Unified − baseline M@10 low"] <= row["Unified − baseline M@10"] <= row["Unified − baseline M@10 high"]
    assert 0 < row["p vs baseline"] <= 1
    md = (cfg.paths.tables / "unified_vs_per_move.md").read_text(encoding="utf-8")
    assert "p vs baseline" in md and DAGGER in md  # 1-3 queries per move: every cell indicative
    summary = move_sensitivity.sensitivity_table(cfg, params, result.sensitivity)
    notes = (cfg.paths.tables / "unified_move_sensitivity.md").read_text(encoding="utf-8")
    assert "the gold ranks lower under its own move than under another move for" in notes
    figure, title = move_sensitivity.draw_sensitivity_figure(params, result.sensitivity)
    assert f"N = {len(result.sensitivity)}" in title and figure._suptitle.get_text() == title
    assert all("N=" in label.get_text() for label in figure.axes[0].get_xticklabels())
    import matplotlib.pyplot as plt

    plt.close(figure)
    text = unified.comparison_narrative(table, summary)
    assert "Address (test" in text and "lower under its own move" in text


def test_the_notebook_shows_the_comparison_with_its_notes_and_formatted_numbers():
    """Notebook 13 passes the unified-vs-per-move Comparison (not a frame) to `formatted`."""
    from ratio_utils.stages import unified_retriever as stage

    shown = pd.DataFrame({"Move": ["Address"], "Unified training pairs": [128.0],
                          "Unified M@10": ["25.4 [14.0, 37.9]"]})
    comparison = stage.Comparison(shown.assign(x=0.123456), shown, ["not matched: budgets differ"])
    out = stage.formatted(comparison)
    assert out.shown.loc[0, "Unified training pairs"] == "128.0" and out.notes == comparison.notes
    assert "not matched: budgets differ" in out._repr_html_()
