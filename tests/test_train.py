"""Fine-tuning (ratio_utils.train) end to end on the tiny benchmark with the real MiniLM model.

Every run is a few optimisation steps on a handful of pairs, so the behaviour checked is the
pipeline's (loss goes down, the best epoch is what gets saved, finished work is not redone, the
card and tables are written), not the quality of the retriever.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from ratio_utils import train
from ratio_utils.config import load_config
from ratio_utils.dataset.benchmark import load_benchmark, write_pairs
from ratio_utils.models import load_sentence_transformer, model_fingerprint, resolve_model_path
from ratio_utils.param_sections import TrainParams, UnifiedParams
from ratio_utils.schema import Move, Split, sentence_id
from ratio_utils.train.tables import collect_runs, collect_tuned_vs_baseline, write_table6, write_tuned_vs_baseline

FIXTURES = Path(__file__).parent / "fixtures" / "train"


def _cfg(tiny_benchmark: Path, tmp_path: Path, monkeypatch, configs_file: Path, **train_values):
    """The default config on the tiny benchmark, writing under tmp_path/out."""
    root = tmp_path / "out"
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(root))
    # min_steps_per_epoch 1: these tests count epochs and steps of the configured schedule (a few seconds each);
    # test_tiny_move_training_changes_the_weights sets it to exercise the repeated passes.
    train_section = {"configs_file": str(configs_file), "configs": None, "max_train_pairs": None, "logging_steps": 1,
                     "colbert": False, "device": "cpu", "min_steps_per_epoch": 1, **train_values}
    cfg = load_config(overrides={"train": train_section})
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    return cfg


def _configs_file(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "configs.yaml"
    path.write_text(yaml.safe_dump({"model": "all-MiniLM-L6-v2", "configs": rows}), encoding="utf-8")
    return path


def _row(id: int, epochs: int, lr: float, batch: int = 4) -> dict:
    return {"id": id, "epochs": epochs, "batch_size": batch, "learning_rate": lr, "weight_decay": 0.0,
            "warmup_ratio": 0.0, "max_grad_norm": 1.0, "rationale": f"test {id}"}


def test_configs_file_is_checked(tmp_path):
    good = train.load_hyperparams(FIXTURES / "configs.yaml", Move.ADDRESS)
    assert [c.id for c in good] == [1, 2]
    assert [c.id for c in train.load_hyperparams(FIXTURES / "configs.yaml", Move.BROADEN)] == [7]  # per_move replaces
    assert [c.id for c in train.load_hyperparams(FIXTURES / "configs.yaml", Move.ADDRESS, ids=[2])] == [2]
    with pytest.raises(ValueError, match=r"configuration id\(s\) \[9\]"):
        train.load_hyperparams(FIXTURES / "configs.yaml", Move.ADDRESS, ids=[9])
    bad = tmp_path / "bad.yaml"
    bad.write_text("configs:\n  - {id: 1, learning_rat: 0.1}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="learning_rat"):
        train.load_hyperparams(bad)


def test_repository_configs_cover_table6():
    """The shipped configs give 3–5 configurations per move, each with a rationale."""
    for move in Move:
        configs = train.load_hyperparams("params/finetune/all-MiniLM-L6-v2.yaml", move)
        assert 3 <= len(configs) <= 5
        assert all(c.rationale for c in configs)


def test_training_pairs_cap_is_a_seeded_sample(tiny_benchmark):
    bench = load_benchmark(tiny_benchmark)
    full = train.training_pairs(bench, Move.ADDRESS, None, seed=1)
    assert list(full.columns) == ["anchor", "positive"] and len(full) == 3
    capped = train.training_pairs(bench, Move.ADDRESS, 2, seed=1)
    assert len(capped) == 2 and set(capped.anchor) <= set(full.anchor)
    assert capped.equals(train.training_pairs(bench, Move.ADDRESS, 2, seed=1))


@pytest.mark.models
def test_finetune_decreases_loss_restores_best_epoch_and_writes_card(tiny_benchmark, tmp_path, monkeypatch):
    # A high learning rate over several epochs makes the validation score move between epochs.
    configs = _configs_file(tmp_path, [_row(1, epochs=4, lr=3e-4, batch=3)])
    cfg = _cfg(tiny_benchmark, tmp_path, monkeypatch, configs, moves=["address"])
    bench = load_benchmark(cfg.paths.benchmark)
    write_pairs(bench.queries(Move.ADDRESS, Split.TEST).iloc[:2], cfg.paths.benchmark, Move.ADDRESS, Split.SILVER)
    (result,) = train.finetune(cfg, "address")
    run = result.selected

    losses = [entry["loss"] for entry in run.loss_history]
    assert len(losses) >= 4 and losses[-1] < losses[0]

    # One validation score per epoch; the restored checkpoint is the best one.
    assert [h["epoch"] for h in run.history] == [1.0, 2.0, 3.0, 4.0]
    best = next(h for h in run.history if h["epoch"] == run.best_epoch)
    assert best["MRR@10"] == max(h["MRR@10"] for h in run.history)
    assert run.validation["MRR@10"] == best["MRR@10"]
    # The saved model holds exactly the weights scored at the best epoch, and scores the same again.
    saved = load_sentence_transformer(result.model_dir, device="cpu")
    assert model_fingerprint(saved)[:16] == best["weights"]
    evalset = load_benchmark(cfg.paths.benchmark).eval_set(Move.ADDRESS, Split.VALIDATION)
    rescored = train.PoolRetrievalEvaluator(evalset, query_prefix="query: ", doc_prefix="document: ").score(saved)
    assert rescored == pytest.approx({k: v for k, v in best.items() if k not in ("epoch", "step", "weights")})

    model_dir = Path(result.model_dir)
    card = (model_dir / "README.md").read_text(encoding="utf-8")
    results = json.loads((model_dir / "results.json").read_text(encoding="utf-8"))
    assert "all-MiniLM-L6-v2" in card and "`address`" in card
    assert results["benchmark_checksum"][:16] in card
    assert results["train_pairs"] == 3 and results["selected_config"]["id"] == 1
    assert set(results["test"]) >= {"MRR@10", "R@10"} and set(results["baseline"]) == {"validation", "test", "silver"}
    assert set(results["silver"]) == set(results["test"])  # silver: scored on the test pool, like test

    table6 = write_table6(cfg)
    assert table6[["Move", "#", "Selected"]].values.tolist() == [["Address", 1, "✓"]]
    assert (cfg.paths.tables / "table6_finetune_configs.md").exists()
    write_tuned_vs_baseline(cfg)
    tuned = collect_tuned_vs_baseline(cfg).set_index("split")
    assert tuned.loc["test", "tuned"] == pytest.approx(results["test"]["MRR@10"])
    assert tuned.loc["silver", "tuned"] == pytest.approx(results["silver"]["MRR@10"])
    assert tuned.loc["test", "queries"] == 3 and tuned.loc["test", "indicative"]


@pytest.mark.models
def test_rerun_trains_nothing_and_selection_uses_validation(tiny_benchmark, tmp_path, monkeypatch):
    configs = _configs_file(tmp_path, [_row(1, epochs=1, lr=1e-5), _row(2, epochs=1, lr=2e-4)])
    cfg = _cfg(tiny_benchmark, tmp_path, monkeypatch, configs, moves=["specify"])
    assert train.finetune_plan(cfg, "specify")["this run"].tolist() == ["train", "train"]
    (first,) = train.finetune(cfg, "specify")
    assert sorted(first.trained_now) == [1, 2]
    assert first.selected.score == max(r.score for r in first.runs)
    runs_dir = train.move_runs_dir(cfg, train.load_train_params(cfg), Move.SPECIFY)
    # The losing configuration keeps its result but not its weights.
    kept = sorted(p.parent.parent.name for p in runs_dir.glob("*/model/config.json"))
    assert kept == [Path(first.selected.model_dir).parent.name]
    watched = sorted(p for p in cfg.paths.models.rglob("*") if p.is_file())
    mtimes = {p: p.stat().st_mtime_ns for p in watched}

    calls = []
    train_configuration = train.train_configuration
    # finetune looks train_configuration up in the module that calls it (ratio_utils.train.selection)
    monkeypatch.setattr(train.selection, "train_configuration",
                        lambda *a, **k: calls.append(a) or pytest.fail("trained again"))
    plan = train.finetune_plan(cfg, "specify").set_index("config")
    assert plan["this run"].str.startswith("reuse").all()
    (second,) = train.finetune(cfg, "specify")
    assert calls == [] and second.trained_now == []
    assert second.selected.run_key == first.selected.run_key and second.test == first.test
    assert {p: p.stat().st_mtime_ns for p in watched} == mtimes
    # What notebook 09 shows: trained now vs reused, each configuration with its run key.
    keys = {r.config["id"]: r.run_key for r in first.runs}
    trained, reused = train.finetune_summary([first]).iloc[0], train.finetune_summary([second]).iloc[0]
    assert trained["trained in this run"] == f"1 (run key {keys[1]}), 2 (run key {keys[2]})"
    assert trained["reused from an earlier run"] == "nothing" and first.reused() == []
    assert reused["trained in this run"] == "nothing"
    assert reused["reused from an earlier run"] == (f"configuration(s) 1 (run key {keys[1]}), 2 (run key {keys[2]}); "
                                                    "the selected model and its test scores "
                                                    f"({Path(second.model_dir).name})")
    assert second.reused()[0] == f"specify: configuration(s) 1 (run key {keys[1]}), 2 (run key {keys[2]})"

    # New settings mean new runs; Table 6 then lists the runs of the new selection only.
    monkeypatch.setattr(train.selection, "train_configuration", train_configuration)
    cfg = load_config(overrides={"train": {**cfg.sections["train"], "max_train_pairs": 2}})
    (third,) = train.finetune(cfg, "specify")
    assert sorted(third.trained_now) == [1, 2]
    table6 = write_table6(cfg)
    assert sorted(table6["#"]) == [1, 2] and (table6["Pairs"] == 2).all()


def test_run_key_changes_with_every_training_input():
    params = TrainParams()
    hp = train.HyperParams(id=1)
    fps = {"base_model": "a", "benchmark": "b"}
    key = train.run_key(fps, params, hp, Move.ADDRESS, 13)
    assert key == train.run_key(fps, params, train.HyperParams(id=1, rationale="other words"), Move.ADDRESS, 13)
    variants = [
        train.run_key({**fps, "benchmark": "c"}, params, hp, Move.ADDRESS, 13),
        train.run_key(fps, TrainParams(max_train_pairs=10), hp, Move.ADDRESS, 13),
        train.run_key(fps, params, train.HyperParams(id=1, learning_rate=1e-4), Move.ADDRESS, 13),
        train.run_key(fps, params, hp, Move.SPECIFY, 13),
        train.run_key(fps, params, hp, Move.ADDRESS, 14),
    ]
    assert key not in variants and len(set(variants)) == len(variants)


@pytest.mark.models
def test_colbert_row_trains_saves_and_resumes(tiny_benchmark, tmp_path, monkeypatch):
    from ratio_utils.train import colbert as train_colbert

    configs = _configs_file(tmp_path, [_row(1, epochs=1, lr=1e-5)])
    cfg = _cfg(tiny_benchmark, tmp_path, monkeypatch, configs, colbert=True, colbert_moves=None,
               colbert_max_train_pairs=3,
               colbert_epochs=3, colbert_batch_size=3, colbert_learning_rate=2e-5, colbert_evaluate_test=True)
    (result,) = train_colbert.train_colbert(cfg, "address")
    losses = [entry["loss"] for entry in result.loss_history]
    assert result.trained_now and len(losses) == 3 and losses[-1] < losses[0]
    model_dir = Path(result.model_dir)
    assert ((model_dir / "README.md").exists()
            and json.loads((model_dir / "results.json").read_text())["train_pairs"] == 3)
    # Evaluable by the benchmark's late-interaction retriever, scored by the same metrics.
    assert 0.0 <= result.test["MRR@10"] <= 1.0 and set(result.test) >= {"R@10", "R@100"}
    mtime = (model_dir / "results.json").stat().st_mtime_ns
    (again,) = train_colbert.train_colbert(cfg, "address")
    assert not again.trained_now and again.test == result.test
    assert (model_dir / "results.json").stat().st_mtime_ns == mtime
    # Notebook 09's cell records the reused checkpoint for the summary's time table.
    from ratio_utils.pipeline import RUN_DIR_ENV
    from ratio_utils.publish import run_records
    from ratio_utils.stages.finetune import FinetuneStage

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "09.ipynb")
    FinetuneStage.from_params("params/default.yaml", {"train": cfg.sections["train"]}, move="address").colbert()
    recorded = run_records.reused_by_notebook(tmp_path / "run")["09.ipynb"]
    assert recorded == f"address: the tuned ColBERT and its test scores ({cfg.paths.relative(model_dir)})"


def test_training_schedule_gives_tiny_moves_real_steps():
    """Broaden's 32 pairs at batch 32/64 used to be one step at learning rate 0 (a rounded-up 10% warm-up)."""
    for batch in (32, 64):
        schedule = train.training_schedule(32, train.HyperParams(id=1, batch_size=batch, warmup_ratio=0.1))
        assert schedule.batch_size == 32  # a batch cannot hold more pairs than there are
        assert schedule.total_steps >= 10 and schedule.repeats == 10
        assert 0 <= schedule.warmup_steps < schedule.total_steps  # steps at a learning rate above zero remain
    one_step = train.training_schedule(32, train.HyperParams(id=1, batch_size=32, warmup_ratio=0.1),
                                       min_steps_per_epoch=1)
    assert (one_step.total_steps, one_step.warmup_steps) == (1, 0)  # warm-up rounds down, never takes the only step
    large = train.training_schedule(1000, train.HyperParams(id=1, batch_size=32, epochs=2, warmup_ratio=0.1))
    assert (large.repeats, large.steps_per_epoch, large.total_steps, large.warmup_steps) == (1, 32, 64, 6)
    # Under DDP the capped batch is per device.
    assert train.training_schedule(32, train.HyperParams(id=1, batch_size=64), world_size=4).batch_size == 8


@pytest.mark.models
def test_tiny_move_training_changes_the_weights(tiny_benchmark, tmp_path, monkeypatch):
    """The configuration that trained nothing on Broaden (batch 64 on a handful of pairs, 10% warm-up) now moves the
    weights."""
    configs = _configs_file(tmp_path, [{**_row(1, epochs=1, lr=2e-5, batch=64), "warmup_ratio": 0.1}])
    cfg = _cfg(tiny_benchmark, tmp_path, monkeypatch, configs, moves=["broaden"], min_steps_per_epoch=4)
    (result,) = train.finetune(cfg, "broaden")
    assert result.selected.optimizer_steps >= 4 and result.selected.schedule["repeats"] >= 2
    base = load_sentence_transformer(resolve_model_path(train.load_train_params(cfg).base_model), device="cpu")
    tuned = load_sentence_transformer(result.model_dir, device="cpu")
    assert model_fingerprint(tuned) != model_fingerprint(base)
    # The saved weights really moved, by what a few Adam steps at this learning rate can move them: more than
    # float noise, and at most about lr per step (a randomly re-initialised or wrongly loaded model moves far more).
    base_weights, tuned_weights = base.state_dict(), tuned.state_dict()
    assert base_weights.keys() == tuned_weights.keys()
    largest_change = max((tuned_weights[k].float() - base_weights[k].float()).abs().max().item() for k in base_weights)
    assert 1e-6 < largest_change <= 3 * 2e-5 * result.selected.optimizer_steps
    sentence = "Graph neural networks propagate information along edges."
    assert not torch.allclose(tuned.encode(sentence, convert_to_tensor=True),
                              base.encode(sentence, convert_to_tensor=True), atol=1e-6)
    results = json.loads((Path(result.model_dir) / "results.json").read_text(encoding="utf-8"))
    assert results["beats_baseline_on_validation"] is (
        results["validation"]["MRR@10"] > results["baseline"]["validation"]["MRR@10"])
    assert results["optimizer_steps"] == result.selected.optimizer_steps
    # Per-query values behind every mean, for the same queries before and after.
    per_query = results["per_query"]
    for split in ("validation", "test"):
        assert sorted(per_query["tuned"][split]["qid"]) == sorted(per_query["baseline"][split]["qid"])
        values = per_query["tuned"][split]["MRR@10"]
        assert sum(values) / len(values) == pytest.approx(results[split]["MRR@10"])


def _write_results(cfg, move: Move, tuned: list[float], base: list[float], beats: bool) -> None:
    params = train.load_train_params(cfg)
    folder = train.move_model_dir(cfg, params, move)
    folder.mkdir(parents=True)
    qids = [f"q{i}" for i in range(len(tuned))]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    results = {
        "selected_config": {"id": 2}, "beats_baseline_on_validation": beats,
        "validation": {"MRR@10": mean(tuned)}, "test": {"MRR@10": mean(tuned)}, "silver": None,
        "baseline": {"validation": {"MRR@10": mean(base)}, "test": {"MRR@10": mean(base)}},
        # baseline listed in another query order: the comparison must pair by qid
        "per_query": {"tuned": {s: {"qid": qids, "MRR@10": tuned} for s in ("validation", "test")},
                      "baseline": {s: {"qid": qids[::-1], "MRR@10": base[::-1]} for s in ("validation", "test")}},
    }
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")


def test_tuned_vs_baseline_table_has_intervals_paired_tests_and_says_when_nothing_won(tmp_path, monkeypatch):
    from scipy import stats as scipy_stats

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config(overrides={"train": {"moves": ["address", "broaden"]}})
    rng = __import__("numpy").random.default_rng(0)
    base = rng.uniform(0, 1, 40).round(3).tolist()
    tuned = [min(1.0, b + d) for b, d in zip(base, rng.uniform(0, 0.3, 40).round(3))]
    _write_results(cfg, Move.ADDRESS, tuned, base, beats=True)
    _write_results(cfg, Move.BROADEN, [0.5, 0.25, 0.0], [0.5, 0.25, 0.0], beats=False)
    table = collect_tuned_vs_baseline(cfg)
    address = table[(table.move == "address") & (table.split == "test")].iloc[0]
    diffs = [t - b for t, b in zip(tuned, base)]
    assert address.difference == pytest.approx(sum(diffs) / len(diffs))
    assert address.difference_low < address.difference < address.difference_high
    assert address.tuned_low < address.tuned < address.tuned_high and address.queries == 40 and not address.indicative
    # the sign-flip test agrees with scipy's paired permutation test
    expected = scipy_stats.permutation_test((tuned, base), lambda x, y: (x - y).mean(), permutation_type="samples",
                                            n_resamples=10_000, random_state=0).pvalue
    assert address.p_value == pytest.approx(expected, abs=0.02)
    broaden = table[(table.move == "broaden") & (table.split == "test")].iloc[0]
    assert broaden.indicative and broaden.difference == 0 and broaden.p_value == pytest.approx(1.0)

    shown = write_tuned_vs_baseline(cfg)
    markdown = (cfg.paths.tables / "finetune_tuned_vs_baseline.md").read_text(encoding="utf-8")
    assert "[" in shown.loc[0, "Tuned M@10"] and shown.loc[2, "Tuned M@10"].endswith("†")
    assert "Broaden: no configuration beat the untuned model on validation MRR@10 (25.0 vs 25.0)" in markdown
    assert "indicative only" in markdown and "broaden/test 3" in markdown
    numbers = pd.read_csv(cfg.paths.tables / "finetune_tuned_vs_baseline.csv")
    assert {"tuned_low", "tuned_high", "difference_low", "p_value", "indicative"} <= set(numbers.columns)


def test_table6_leaves_out_the_unified_retrievers_runs(cfg):
    """Notebook 13 trains in its own folder (models/unified/_runs/<base>/), outside the models/_runs/ that 09 reads:
    rerunning 09 after 13 must not read them as a move's runs."""
    from ratio_utils.train import unified

    params = train.load_train_params(cfg)
    unified_run = unified.unified_runs_dir(cfg, UnifiedParams()) / "config-1-abc" / train.RESULT_FILE
    assert not unified_run.is_relative_to(cfg.paths.models / train.RUNS_DIRNAME)
    unified_run.parent.mkdir(parents=True)
    unified_run.write_text('{"move": "all"}', encoding="utf-8")
    assert collect_runs(cfg, params).empty


def test_run_key_keeps_one_process_keys_and_keys_the_world_size():
    """One process keeps the key it had before the world size entered the key (the default run's trained models
    are reused); several processes, bf16 and gradient checkpointing each give a new key."""
    params = TrainParams()
    hp = train.HyperParams(id=1)
    fps = {"base_model": "a", "benchmark": "b"}
    one = train.run_key(fps, params, hp, Move.ADDRESS, 13, world_size=1)
    assert one == train.run_key(fps, params, hp, Move.ADDRESS, 13) == "f57104329115"  # the key before this change
    others = [
        train.run_key(fps, params, hp, Move.ADDRESS, 13, world_size=2),
        train.run_key(fps, params, hp, Move.ADDRESS, 13, world_size=4),
        train.run_key(fps, TrainParams(bf16=True), hp, Move.ADDRESS, 13),
        train.run_key(fps, TrainParams(gradient_checkpointing=True), hp, Move.ADDRESS, 13),
    ]
    assert one not in others and len(set(others)) == len(others)
    # The timeout changes no weights: same key.
    assert train.run_key(fps, TrainParams(ddp_timeout=60), hp, Move.ADDRESS, 13) == one


def test_run_key_world_size_follows_the_launch_else_the_params(monkeypatch):
    from ratio_utils.train.selection import key_world_size

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert key_world_size(TrainParams()) == 1 and key_world_size(TrainParams(nproc_per_node=4)) == 4
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert key_world_size(TrainParams(nproc_per_node=4)) == 2


def test_trainer_gets_timeout_precision_and_checkpointing(tmp_path, monkeypatch):
    """train.ddp_timeout / bf16 / gradient_checkpointing reach sentence-transformers' training arguments."""
    import sentence_transformers

    seen = {}

    class Stop(Exception):
        pass

    def arguments(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(sentence_transformers, "SentenceTransformerTrainingArguments", arguments)
    monkeypatch.setattr("ratio_utils.models.load_sentence_transformer", lambda *a, **k: type("M", (), {})())
    monkeypatch.setattr("sentence_transformers.losses.MultipleNegativesRankingLoss", lambda *a, **k: None)
    params = TrainParams(ddp_timeout=123, bf16=True, gradient_checkpointing=True, device="cpu")
    pairs = pd.DataFrame({"anchor": ["a", "b"], "positive": ["c", "d"]})
    with pytest.raises(Stop):
        evaluator = __import__("types").SimpleNamespace(metric_for_best_model="eval_validation_MRR@10")
        train.train_configuration(tmp_path, pairs, evaluator, train.HyperParams(id=1), tmp_path, params,
                                  move=Move.ADDRESS,
                                  run_key="k", seed=1)
    assert (seen["ddp_timeout"], seen["bf16"], seen["gradient_checkpointing"]) == (123, True, True)
    assert TrainParams().ddp_timeout == 28_800  # the authors' value, not transformers' 1800


def _tiny_sentence_transformer(folder: Path) -> Path:
    """A one-layer, 32-wide BERT with MiniLM's tokenizer and mean pooling: trains in a blink on CPU."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("all-MiniLM-L6-v2")))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    encoder = models.Transformer(str(folder / "bert"), max_seq_length=32)
    SentenceTransformer(modules=[encoder, models.Pooling(32, "mean")], device="cpu").save(str(folder / "model"))
    return folder / "model"


@pytest.mark.models
def test_torchrun_two_processes_gather_negatives_and_agree(tiny_benchmark, tmp_path, monkeypatch):
    """`torchrun --nproc_per_node 2` (gloo) on a tiny move: each rank's queries are scored against the candidates
    of both ranks, both ranks take the same steps and hold the same weights after each epoch, the other rank
    reads the baseline rank 0 wrote (a real barrier), and the run is keyed by its two processes."""
    import os
    import subprocess

    from ratio_utils.config import REPO_ROOT
    from ratio_utils.distributed import torchrun_argv

    model = _tiny_sentence_transformer(tmp_path / "tiny")
    configs = _configs_file(tmp_path, [_row(1, epochs=2, lr=1e-3, batch=2)])
    cfg = _cfg(tiny_benchmark, tmp_path, monkeypatch, configs, moves=["address"], base_model=str(model),
               min_steps_per_epoch=2, max_seq_length=32)
    out = tmp_path / "ranks"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    command = torchrun_argv(2, "placeholder")[:-2] + [str(Path(__file__).parent / "ddp_train_worker.py"), str(out),
                                                      json.dumps({"train": cfg.sections["train"]}), "address"]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rank0, rank1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))

    assert rank0["world_size"] == rank1["world_size"] == 2
    for rank in (rank0, rank1):
        assert rank["loss_calls"] and all(c["candidates"] == 2 * c["queries"] for c in rank["loss_calls"])
    assert len(rank0["loss_calls"]) == len(rank1["loss_calls"]) == rank0["optimizer_steps"] == rank1["optimizer_steps"]
    assert len(rank0["weights_per_epoch"]) == 2 and rank0["weights_per_epoch"] == rank1["weights_per_epoch"]
    assert rank0["baseline"] == rank1["baseline"] and rank1["baseline"]["validation"]
    params = train.load_train_params(cfg)
    fps = train.model_fingerprints(model_fingerprint(model), load_benchmark(cfg.paths.benchmark), Move.ADDRESS)
    hp = train.load_hyperparams(configs, Move.ADDRESS)[0]
    assert rank0["run_key"] == rank1["run_key"] == train.run_key(fps, params, hp, Move.ADDRESS, cfg.seed, world_size=2)
    # Rank 0 published the model once every rank had restored the best epoch; the checkpoints are gone.
    run_dir = train.move_runs_dir(cfg, params, Move.ADDRESS) / f"config1-{rank0['run_key']}"
    assert (run_dir / train.RESULT_FILE).exists() and not (run_dir / "checkpoints").exists()
    assert json.loads((Path(rank0["model_dir"]) / "results.json").read_text())["selected_run_key"] == rank0["run_key"]

    # One process with train.nproc_per_node: 2 reuses these runs instead of training a one-process run.
    monkeypatch.setattr(train.selection, "train_configuration", lambda *a, **k: pytest.fail("trained again"))
    cfg2 = load_config(overrides={"train": {**cfg.sections["train"], "nproc_per_node": 2}})
    (again,) = train.finetune(cfg2, "address")
    assert again.trained_now == [] and again.selected.run_key == rank0["run_key"]
    # ... and refuses to train what it would have to key as two processes.
    other = load_config(overrides={"train": {**cfg.sections["train"], "nproc_per_node": 2, "max_train_pairs": 2}})
    with pytest.raises(RuntimeError, match="torchrun --nproc_per_node 2 -m ratio_utils.train"):
        train.finetune(other, "address")


def _edit_pairs(bench, move: Move, split: Split, column: str = "goldSentence") -> None:
    """Change one pair's sentence of (move, split) in place (as a new judge or a new split would)."""
    frame = bench.queries(move, split)
    frame.loc[0, column] = frame.loc[0, column] + " (edited)"
    frame["query_id"], frame["gold_id"] = (frame["querySentence"].map(sentence_id),
                                           frame["goldSentence"].map(sentence_id))
    write_pairs(frame, bench.root, move, split)


def test_model_key_follows_training_inputs_not_test_or_silver(tiny_benchmark):
    bench = load_benchmark(tiny_benchmark)
    params, hp = TrainParams(), train.HyperParams(id=1)

    def key(move=Move.ADDRESS):
        return train.run_key(train.model_fingerprints("base", bench, move), params, hp, move, 13)

    before, checksum = key(), bench.checksum()
    silver = bench.queries(Move.ADDRESS, Split.TEST).head(2)
    write_pairs(silver, bench.root, Move.ADDRESS, Split.SILVER)  # a new silver set
    _edit_pairs(bench, Move.ADDRESS, Split.TEST)
    _edit_pairs(bench, Move.BROADEN, Split.TRAIN)  # another move's training pairs
    assert bench.checksum() != checksum  # the whole benchmark changed ...
    assert key() == before  # ... but not what the Address model is trained and selected on
    _edit_pairs(bench, Move.ADDRESS, Split.TRAIN, "querySentence")
    after_train = key()
    assert after_train != before
    _edit_pairs(bench, Move.ADDRESS, Split.VALIDATION)
    assert key() != after_train  # selection data is part of the key too


def _finished_runs(cfg, params, bench, move: Move, configs, scores: dict[int, float]) -> dict[int, str]:
    """Finished runs and a published model as notebook 09 writes them, made without training."""
    base_fp = model_fingerprint(resolve_model_path(params.base_model))
    fingerprints = train.model_fingerprints(base_fp, bench, move)
    keys = {}
    runs_dir = train.move_runs_dir(cfg, params, move)
    for hp in configs:
        keys[hp.id] = train.run_key(fingerprints, params, hp, move, cfg.seed)
        run_dir = runs_dir / f"{hp.name}-{keys[hp.id]}"
        (run_dir / "model").mkdir(parents=True)
        (run_dir / "model" / "weights.bin").write_bytes(bytes([hp.id]))
        result = train.RunResult(move.value, dataclasses.asdict(hp), keys[hp.id], 4, 1.0, {"MRR@10": scores[hp.id]},
                                 [], [],
                                 0.0, 0.0, 1.0, 1, "cpu", str(run_dir / "model"))
        (run_dir / train.RESULT_FILE).write_text(json.dumps(result.to_json()))
    best = max(scores, key=scores.get)
    final = train.move_model_dir(cfg, params, move)
    final.mkdir(parents=True)
    (final / "README.md").write_text("card")
    (final / train.FINAL_RESULTS_FILE).write_text(json.dumps({
        "selected_run_key": keys[best], "benchmark_checksum": bench.checksum(), "test": {"MRR@10": 0.5},
        "configs_tried": [{"config": {"id": i}, "run_key": k} for i, k in keys.items()]}))
    return keys


@pytest.mark.models
def test_finished_runs_are_reused_and_a_new_silver_set_rescores_without_retraining(tiny_benchmark, tmp_path,
                                                                                   monkeypatch):
    configs_file = _configs_file(tmp_path, [_row(1, epochs=1, lr=1e-5), _row(2, epochs=1, lr=2e-4)])
    cfg = _cfg(tiny_benchmark, tmp_path, monkeypatch, configs_file, moves=["specify"])
    params, bench = train.load_train_params(cfg), load_benchmark(cfg.paths.benchmark)
    configs = train.load_hyperparams(params.configs_file, Move.SPECIFY, params.configs)
    keys = _finished_runs(cfg, params, bench, Move.SPECIFY, configs, {1: 0.1, 2: 0.3})
    evaluated = []

    def fake_scores(model_path, bench, move, splits, *args, **kwargs):
        evaluated.append(Path(model_path).name)
        return {s.value: {"MRR@10": 0.2} for s in splits if bench.has(move, s)}

    monkeypatch.setattr(train.selection, "_evaluate_saved", fake_scores)
    base_path = resolve_model_path(params.base_model)
    scored_on = train.benchmark_fingerprints(model_fingerprint(base_path), bench)
    train.baseline_scores(cfg, params, bench, Move.SPECIFY, base_path,
                          scored_on)  # the baseline.json an earlier run wrote
    evaluated.clear()
    monkeypatch.setattr(train.selection, "train_configuration", lambda *a, **k: pytest.fail("trained again"))

    result = train.finetune_move(cfg, "specify", params, bench)
    assert result.trained_now == [] and not result.published_now and evaluated == []  # no training, no scoring
    assert result.test == {"MRR@10": 0.5}
    assert {r.config["id"]: r.run_key for r in result.runs} == keys
    assert result.selected.run_key == keys[2]
    assert train.finetune_plan(cfg, "specify")["this run"].str.startswith("reuse").all()

    # A new silver set (test side only): the same model, scored again on test and silver, not retrained.
    silver = bench.queries(Move.SPECIFY, Split.TEST).head(2)
    write_pairs(silver, bench.root, Move.SPECIFY, Split.SILVER)
    rescored = train.finetune_move(cfg, "specify", params, bench)
    assert rescored.trained_now == [] and rescored.published_now
    assert rescored.selected.run_key == keys[2] and rescored.test == {"MRR@10": 0.2}
    assert (json.loads((Path(rescored.model_dir) / train.FINAL_RESULTS_FILE).read_text())["benchmark_checksum"]
            == bench.checksum())


def _finished_setup(cfg, setup, move: Move, scores: list[float], tuned: list[float], base: list[float]) -> None:
    """What finetune_move leaves for one setup and move: a result.json per configuration tried (ids 1, 2, ...) and
    the selected model's results.json (the best validation score), with per-query values."""
    from ratio_utils.train.run import RunResult
    from ratio_utils.train.selection import move_model_dir, move_runs_dir

    runs = []
    for hp_id, score in enumerate(scores, start=1):
        key = f"{setup.prefixes or 'none'}{hp_id}"
        folder = move_runs_dir(cfg, setup, move) / f"config-{hp_id}-{key}"
        run = RunResult(move=move.value, config=_row(hp_id, 1, 1e-5), run_key=key, train_pairs=8, best_epoch=1.0,
                        validation={"MRR@10": score}, history=[], loss_history=[], train_seconds=1.0, eval_seconds=1.0,
                        pairs_per_second=8.0, world_size=1, device="cpu", model_dir=str(folder / "model"))
        folder.mkdir(parents=True)
        (folder / train.RESULT_FILE).write_text(json.dumps(run.to_json()), encoding="utf-8")
        runs.append(run)
    selected = max(runs, key=lambda r: r.score)
    qids = [f"q{i}" for i in range(len(tuned))]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    final = move_model_dir(cfg, setup, move)
    final.mkdir(parents=True)
    (final / train.FINAL_RESULTS_FILE).write_text(json.dumps({
        "selected_config": selected.config, "selected_run_key": selected.run_key, "beats_baseline_on_validation": True,
        "configs_tried": [{"config": r.config, "run_key": r.run_key} for r in runs],
        "validation": {"MRR@10": mean(tuned)}, "test": {"MRR@10": mean(tuned)}, "silver": None,
        "baseline": {"validation": {"MRR@10": mean(base)}, "test": {"MRR@10": mean(base)}},
        "per_query": {"tuned": {s: {"qid": qids, "MRR@10": tuned} for s in ("validation", "test")},
                      "baseline": {s: {"qid": qids, "MRR@10": base} for s in ("validation", "test")}},
    }), encoding="utf-8")


def test_table6_and_tuned_vs_baseline_cover_every_setup(tmp_path, monkeypatch):
    """Two setups (MiniLM generic, ModernBERT with its recommended prefixes, in models/<base>-recommended__<move>/):
    both tables list each setup's rows, named by setup; with the first setup alone they are what they always were."""
    from ratio_utils import models
    from ratio_utils.models import ModelNotAvailableError
    from ratio_utils.train.selection import training_setups
    from ratio_utils.train.tables import table6_notes, tuned_vs_baseline_records

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config(overrides={"train": {"moves": ["address"], "configs": None, "max_train_pairs": None,
                                           "setups": [{"base_model": "ModernBERT-embed-large",
                                                       "prefixes": "recommended"}]}})
    two = train.load_train_params(cfg)
    one = dataclasses.replace(two, setups=[])
    minilm, modernbert = training_setups(two)
    _finished_setup(cfg, minilm, Move.ADDRESS, [0.2, 0.3], [0.5, 0.4, 0.3], [0.4, 0.4, 0.2])
    _finished_setup(cfg, modernbert, Move.ADDRESS, [0.4, 0.1], [0.6, 0.5, 0.4], [0.5, 0.3, 0.3])
    assert (cfg.paths.models / "ModernBERT-embed-large-recommended__address" / train.FINAL_RESULTS_FILE).exists()

    table6 = collect_runs(cfg, two)
    assert list(zip(table6["Model"], table6["#"], table6["Selected"])) == [
        ("all-MiniLM-L6-v2", 1, ""), ("all-MiniLM-L6-v2", 2, "✓"),
        ("ModernBERT-embed-large (recommended prefixes)", 1, "✓"),
        ("ModernBERT-embed-large (recommended prefixes)", 2, "")]
    pd.testing.assert_frame_equal(collect_runs(cfg, one),
                                  table6[table6["Model"] == "all-MiniLM-L6-v2"].reset_index(drop=True))

    both = collect_tuned_vs_baseline(cfg, two)
    assert list(zip(both["model"], both["prefix"], both["split"])) == [
        ("all-MiniLM-L6-v2", "generic", "validation"), ("all-MiniLM-L6-v2", "generic", "test"),
        ("ModernBERT-embed-large", "recommended", "validation"), ("ModernBERT-embed-large", "recommended", "test")]
    alone = collect_tuned_vs_baseline(cfg, one)
    assert "model" not in alone  # one setup: the table as it always was
    pd.testing.assert_frame_equal(alone, both[both["model"] == "all-MiniLM-L6-v2"].drop(columns=["model", "prefix"]))
    assert both.loc[both["model"] == "ModernBERT-embed-large", "tuned"].iloc[0] == pytest.approx(0.5)
    records = tuned_vs_baseline_records(both, two)
    assert set(zip(records["subject"], records["reference"])) == {
        ("all-MiniLM-L6-v2 (tuned)", "all-MiniLM-L6-v2"),
        ("ModernBERT-embed-large (recommended, tuned)", "ModernBERT-embed-large (recommended)")}
    assert set(tuned_vs_baseline_records(alone, one)["subject"]) == {"all-MiniLM-L6-v2 (tuned)"}
    shown = write_tuned_vs_baseline(cfg, two)
    assert list(shown["Model"]) == ["all-MiniLM-L6-v2"] * 2 + ["ModernBERT-embed-large (recommended prefixes)"] * 2

    # the paper's base models no setup names: why each is not fine-tuned, from resolving it here (nothing downloaded)
    def resolve(spec, *args, download=True, **kwargs):
        assert download is False
        raise ModelNotAvailableError(f"{spec}", model=str(spec),
                                     reason="not in the local Hugging Face cache (/home/x/.cache/hub), "
                                            "and the hub is unreachable")

    monkeypatch.setattr(models, "resolve_model", resolve)
    note = table6_notes(two)[1]
    assert note.startswith("Reduced relative to the paper: base models all-MiniLM-L6-v2, "
                           "ModernBERT-embed-large instead of the paper's all-mpnet-base-v2 "
                           "(it does not resolve here: not in the local Hugging Face cache, "
                           "and the hub is unreachable); Stella-en-1.5B-v5 (it does not resolve here: ")
    assert "/home/x" not in note and "not available offline" not in note
    monkeypatch.setattr(models, "resolve_model", lambda spec, *a, **k: None)
    assert "all-mpnet-base-v2 (it resolves here; train.base_model or train.setups selects it" in table6_notes(one)[1]
