"""The unified retriever's pieces (ratio_utils.unified): instructions on the query, balanced shares,
move-mixing batches; one tiny training run (marked `models`)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from ratio_utils import unified
from ratio_utils.retrieval.dense import MOVE_INSTRUCTIONS
from ratio_utils.schema import Move


def test_format_query_puts_the_move_instruction_before_the_statement():
    text = "Parsers overfit small treebanks."
    formatted = unified.format_query(text, "broaden")
    assert formatted == f"Instruct: {MOVE_INSTRUCTIONS[Move.BROADEN]}\nQuery: {text}"
    assert unified.format_query(text, Move.ADDRESS, "{instruction} || ") == MOVE_INSTRUCTIONS[Move.ADDRESS] + " || " + text
    assert len({unified.query_prefix(m) for m in Move}) == 3  # each move asks differently


def test_instruction_template_without_slot_and_unknown_move_are_errors():
    with pytest.raises(ValueError, match="instruction"):
        unified.format_query("x", "specify", "Query: ")
    with pytest.raises(ValueError, match="unknown move"):
        unified.format_query("x", "analogy")


def _pairs(n: int, tag: str) -> pd.DataFrame:
    return pd.DataFrame({"anchor": [f"{tag} query {i}" for i in range(n)], "positive": [f"{tag} gold {i}" for i in range(n)]})


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
    assert report["share (%)"].sum() == pytest.approx(100, abs=0.2)
    again, _ = unified.balanced_pairs({Move.SPECIFY: _pairs(500, "s")}, 100, 3, seed=13)
    assert list(again["anchor"]) == list(pairs[pairs.move == "specify"]["anchor"])  # seeded


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
    texts = [(f"q{i}", f"g{i}") for i in range(80)] + [(f"bq{i % 10}", f"bg{i % 10}") for i in range(40)]  # broaden repeated 4x
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
    sampler = unified.MoveMixingBatchSampler(Dataset.from_pandas(frame), batch_size=3, drop_last=False, seed=5, moves=moves)
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

    from ratio_utils.benchmark import load_benchmark
    from ratio_utils.metrics import relevant_ranks
    from ratio_utils.retrieval import benchmark_queries

    bench = load_benchmark(tiny_benchmark)
    template = unified.UnifiedParams().instruction_template
    ranks = unified.sensitivity_ranks(FakeEncoder(), bench, "test", list(Move), template, "document: ")
    assert len(ranks) == 8 and set(ranks["move"]) == {"address", "broaden", "specify"}
    pool = bench.pool("test")
    for own in Move:  # independent path: DenseRetriever.search over the whole pool, metrics.relevant_ranks
        queries, qrels = benchmark_queries(bench, own, "test")
        for issued in Move:
            run = FakeEncoder(query_prefix=unified.query_prefix(issued, template), doc_prefix="document: ").search(queries, pool, k=len(pool))
            expected = relevant_ranks(run, qrels).set_index("qid")["rank"]
            got = ranks[ranks.move == own.value].set_index("qid")[f"rank_{issued.value}"]
            assert got.sort_index().tolist() == expected.sort_index().astype(float).tolist()
    assert (ranks[[f"overlap_{m.value}" for m in Move]].max(axis=None) <= unified.TOP)
    own_overlap = [row[f"overlap_{row['move']}"] for _, row in ranks.iterrows()]
    assert all(o == min(unified.TOP, len(pool) - 1) for o in own_overlap)  # a list overlaps itself fully
    summary = unified.sensitivity_summary(ranks, list(Move))
    assert list(summary["Move"]) == ["Address", "Broaden", "Specify", "All"]
    shares = summary[["Gold higher under own move than under both others (%)", "Tied with the best other (%)",
                      "Lower under own move than under another (%)"]].sum(axis=1)
    assert shares.round(6).eq(100).all()
    pairwise = unified.pairwise_own_vs_other(ranks, list(Move))
    assert len(pairwise) == 6


def test_params_section_is_validated(cfg):
    assert unified.load_unified_params(cfg).base_model == "all-MiniLM-L6-v2"
    cfg.sections["unified"] = {"pairs_per_mov": 3}
    with pytest.raises(ValueError, match="pairs_per_mov"):
        unified.load_unified_params(cfg)


@pytest.mark.models
def test_tiny_unified_training_selects_publishes_and_scores_each_move(cfg, tiny_benchmark):
    import shutil

    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    params = unified.UnifiedParams(configs_file="params/finetune/smoke.yaml", configs=None, pairs_per_move=4)
    result = unified.train_unified(cfg, params)
    assert result.selected.train_pairs == 8 + 4  # address 3 (+1 repeat), broaden 2 (+2), specify 3 (+1)
    assert set(result.final["test"]) == {"address", "broaden", "specify"}
    fmt = json.loads((result.model_dir / unified.FORMAT_FILE).read_text())
    assert fmt["query_prefixes"]["broaden"] == unified.query_prefix("broaden")
    assert "MRR@10" in result.selected.validation and "broaden/MRR@10" in result.selected.validation
    assert result.reused() == [] and unified.summary(result)["this run"].tolist() == ["trained"] * len(result.runs)
    again = unified.train_unified(cfg, params)  # resumes: nothing trained, the test score reused
    assert again.trained_now == [] and again.final["test"] == result.final["test"]
    keys = ", ".join(f"{r.config['id']} (run key {r.run_key})" for r in result.runs)
    assert again.reused() == [f"unified: configuration(s) {keys}",
                              f"unified: the selected model, its test scores and move-sensitivity ranks ({result.model_dir.name})"]
    assert unified.summary(again)["this run"].tolist() == [f"reused (run key {r.run_key})" for r in result.runs]

    # What notebook 13 shows: the figure once (from its file, no live figure left to show again), floats formatted.
    import matplotlib.pyplot as plt
    from IPython.display import Image

    from ratio_utils.stages import unified_retriever as stage

    plt.close("all")
    shown = stage.sensitivity_figure(cfg, params, again.sensitivity)
    assert isinstance(shown, Image) and plt.get_fignums() == [] and (cfg.paths.figures / "unified_move_sensitivity.png").exists()
    table = stage.sensitivity_table(cfg, params, again.sensitivity)
    cells = stage.formatted(table)["Top 10 changes with the move (%)"]
    assert cells.tolist() == [f"{v:.1f}" for v in table["Top 10 changes with the move (%)"]]
    assert len(result.sensitivity) == 8 and again.sensitivity.equals(result.sensitivity)
