"""The notebook runner behind run_all.sh: planning, fan-out, and failure reporting."""

from __future__ import annotations

import os

import nbformat
import pytest

from ratio_utils import pipeline
from ratio_utils.publish import run_records
from ratio_utils.schema import NOTEBOOKS
from ratio_utils.stages.summary import run_wall_times


def _notebook(path, *sources, tag_first=True):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    if tag_first:
        nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": pipeline.KERNEL_NAME, "display_name": "ratio", "language": "python"}
    nbformat.write(nb, path)


def test_plan_expands_fanout_and_filters(tmp_path):
    for name in ("00_a", "01_b", "02_c"):
        _notebook(tmp_path / f"{name}.ipynb", "params_file = ''")
    params = tmp_path / "p.yaml"
    jobs = pipeline.plan_jobs(params, {"01_b": {"move": ["address", "specify"], "model": "minilm"}},
                              directory=tmp_path)
    names = [job.output_name for job in jobs]
    assert names == ["00_a.ipynb", "01_b__model=minilm__move=address.ipynb", "01_b__model=minilm__move=specify.ipynb",
                     "02_c.ipynb"]
    assert jobs[1].parameters == {"params_file": str(params), "model": "minilm", "move": "address"}
    assert [j.number for j in pipeline.plan_jobs(params, {}, start="01", directory=tmp_path)] == ["01", "02"]
    assert [j.number for j in pipeline.plan_jobs(params, {}, only={"02"}, directory=tmp_path)] == ["02"]
    assert [j.number for j in pipeline.plan_jobs(params, {}, stop="01", directory=tmp_path)] == ["00", "01"]


def test_reads_table_names_every_notebook_and_only_earlier_ones():
    numbers = [nb.name[:2] for nb in pipeline.discover_notebooks()]
    assert sorted(pipeline.READS_FROM) == numbers
    assert list(NOTEBOOKS.values()) == [nb.stem for nb in pipeline.discover_notebooks()]  # the one identifier table
    for number, reads in pipeline.READS_FROM.items():
        assert all(read in numbers and read < number for read in reads), number


@pytest.mark.parametrize("ran, stale", [
    ({"04"}, [f"{n:02d}" for n in range(5, 15)]),  # the final lexicon: everything mined from it on
    ({"02"}, ["14"]),  # marker extensions reach only the summary's tables
    ({"03"}, ["14"]),
    ({"01"}, ["02", "03", "04", *[f"{n:02d}" for n in range(5, 15)]]),
    ({"09"}, ["10", "11", "12", "13", "14"]),
    ({"10"}, ["14"]),  # 11-13 read no reranked run
    ({"05", "06", "07", "08"}, ["09", "10", "11", "12", "13", "14"]),  # --from 05 --to 08
    ({f"{n:02d}" for n in range(5, 15)}, []),  # --from 05
    ({"14"}, []),
])
def test_a_partial_run_names_the_notebooks_it_leaves_stale(ran, stale):
    numbers = [nb.name[:2] for nb in pipeline.discover_notebooks()]
    assert pipeline.left_stale(ran, numbers) == stale


def test_a_notebook_outside_the_table_reads_every_earlier_one():
    assert pipeline.left_stale({"00"}, ["00", "01", "02"]) == ["01", "02"]  # READS_FROM: 01 and 02 read 00
    assert pipeline.left_stale({"01"}, ["00", "01", "15"]) == ["15"]  # 15 is in no table: it reads 00 and 01


def test_list_says_in_one_line_what_the_selection_leaves_stale(cfg, capsys):
    assert pipeline.main(["--only", "9", "--list"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("09_finetune")  # stdout stays the list of runs
    assert err.splitlines() == ["leaves stale (not run, reading what this run rewrites): 10_llm_rerank, 11_analyses, "
                                "12_human_eval_stats, 13_unified_retriever, 14_summary"]
    assert pipeline.main(["--from", "05", "--list"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "leaves nothing stale: every notebook that reads what this run rewrites runs too"]
    assert pipeline.main(["--list"]) == 0  # the whole run: nothing to say
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_partial_run_says_what_it_leaves_stale_before_running(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "out"))
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    for name in ("00_corpus", "01_lexicon", "02_tables"):
        _notebook(nbdir / f"{name}.ipynb", "params_file = ''")
    assert pipeline.main(["--notebooks", str(nbdir), "--only", "01", "--run-id", "t"]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[1] == "leaves stale (not run, reading what this run rewrites): 02_tables"
    assert stdout[2].startswith("[1/1] 01_lexicon.ipynb")


@pytest.mark.slow
def test_failing_notebook_stops_the_run_naming_notebook_and_cell(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "out"))
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    _notebook(nbdir / "00_ok.ipynb", "params_file = ''", "x = 1")
    _notebook(nbdir / "01_bad.ipynb", "params_file = ''", "y = 2", "raise RuntimeError('deliberate')")
    _notebook(nbdir / "02_never.ipynb", "params_file = ''")
    code = pipeline.main(["--notebooks", str(nbdir), "--run-id", "t"])
    err = capsys.readouterr()
    assert code == 1
    assert "FAILED: 01_bad.ipynb" in err.err and "deliberate" in err.err
    run_dir = tmp_path / "out" / "runs" / "t"
    assert (run_dir / "00_ok.ipynb").exists() and not (run_dir / "02_never.ipynb").exists()
    assert "00_ok.ipynb" in (run_dir / "timings.csv").read_text()


@pytest.mark.slow
def test_run_prints_one_line_per_notebook_and_publishes_it_without_machine_paths(tmp_path, monkeypatch, capsys):
    """A fake output root stands in for the default run: its executed notebooks land in
    <root>/notebooks/executed/ (for params/default.yaml, the repository's notebooks/executed/)."""
    out = tmp_path / "out"
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(out))
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    _notebook(
        nbdir / "00_show.ipynb",
        "params_file = ''\noverrides = {}",
        "from ratio_utils.publish.run_records import record_reused\nrecord_reused('the cached thing')",
        "from ratio_utils.config import REPO_ROOT, load_config\nprint(REPO_ROOT / 'tables', "
        "load_config(params_file).paths.root)",
        "from tqdm import tqdm\nfor _ in tqdm(range(300), mininterval=0):\n    pass",
    )
    assert pipeline.main(["--notebooks", str(nbdir), "--run-id", "t"]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("[1/1] 00_show.ipynb") and line.endswith("s") for line in stdout) == 1
    assert len(stdout) == 3  # where things go, the notebook's line, the total
    published = out / "notebooks" / "executed" / "00_show.ipynb"
    text = published.read_text()
    assert str(tmp_path) not in text and str(pipeline.REPO_ROOT) not in text
    cells = nbformat.read(published, as_version=4).cells
    printed = cells[-2].outputs[0]["text"]
    assert printed.split() == ["tables", "."]  # repo path and output root, both made relative
    bar = cells[-1].outputs
    assert len(bar) == 1 and bar[0]["text"].count("\n") == 1 and "300/300" in bar[0]["text"]
    # The kernel knew which notebook it ran: what it reused is filed under that notebook's name.
    assert run_records.reused_by_notebook(out / "runs" / "t") == {"00_show.ipynb": "the cached thing"}
    assert pipeline.RUN_DIR_ENV not in os.environ and run_records.NOTEBOOK_ENV not in os.environ


@pytest.mark.slow
def test_papermill_overrides_parameter_reaches_the_config(tmp_path):
    """`papermill -p overrides '{...}'` passes JSON text; load_config merges it over the params file."""
    import os
    import subprocess
    import sys

    notebook = tmp_path / "nb.ipynb"
    _notebook(notebook, 'params_file = "params/default.yaml"\noverrides = {}',
              "from ratio_utils.config import load_config\n"
              "print('VALUE', load_config(params_file, overrides).section('mining')['extension_max_words'])")
    executed = tmp_path / "out.ipynb"
    env = {**os.environ, "PYTHONPATH": str(pipeline.REPO_ROOT)}
    subprocess.run(
        [sys.executable, "-m", "papermill", str(notebook), str(executed), "-k", pipeline.KERNEL_NAME,
         "--cwd", str(pipeline.REPO_ROOT), "-p", "overrides", '{"mining": {"extension_max_words": 3}}'],
        check=True, capture_output=True, env=env,
    )
    assert "VALUE 3" in nbformat.read(executed, as_version=4).cells[-1].outputs[0]["text"]


def test_wall_times_say_what_each_notebook_reused(cfg, monkeypatch):
    """Stages record what they reused in the run folder; the summary's time table shows it per notebook."""
    run_dir = cfg.paths.runs / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / pipeline.TIMINGS_FILE).write_text("notebook,seconds\n08_retrieval_baselines.ipynb,19.1\n"
                                                 "09_finetune__move=address.ipynb,12.1\n10_llm_rerank.ipynb,9.3\n")
    monkeypatch.setenv(pipeline.RUN_DIR_ENV, str(run_dir))
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "08_retrieval_baselines.ipynb")
    run_records.count_reused("embeddings (cache/embeddings)", 100, 120)
    run_records.count_reused("embeddings (cache/embeddings)", 50, 50)
    run_records.count_reused("bootstrap intervals", 0, 30)  # nothing reused: not mentioned
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "09_finetune__move=address.ipynb")
    run_records.record_reused("address: configurations 1, 2 (run keys aaa, bbb)")
    run_records.record_reused("address: configurations 1, 2 (run keys aaa, bbb)")
    table = run_wall_times(cfg).set_index("notebook")
    assert table.loc["08_retrieval_baselines.ipynb", "reused"] == "150 of 170 embeddings (cache/embeddings)"
    assert table.loc["09_finetune__move=address.ipynb", "reused"] == "address: configurations 1, 2 (run keys aaa, bbb)"
    assert table.loc["10_llm_rerank.ipynb", "reused"] == "" and table["seconds"].tolist() == [19.1, 12.1, 9.3]
    run_records.clear_run_records(run_dir)
    assert run_wall_times(cfg)["reused"].tolist() == ["", "", ""]


def test_nothing_is_recorded_outside_a_pipeline_run(cfg, monkeypatch):
    monkeypatch.delenv(pipeline.RUN_DIR_ENV, raising=False)
    monkeypatch.delenv(run_records.NOTEBOOK_ENV, raising=False)
    run_records.record_reused("a model")
    assert not list(cfg.paths.root.rglob(f"{run_records.REUSED_DIR}/*.json"))


def test_notebook_09_trains_under_torchrun_first_when_the_params_ask_for_processes(tmp_path, monkeypatch, capsys):
    """train.nproc_per_node > 1: run_all.sh trains notebook 09's move with torchrun, then executes the notebook
    (which finds the runs finished); with one process (the default) nothing runs under torchrun."""
    from ratio_utils.config import load_config

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "out"))
    jobs = pipeline.plan_jobs("params/default.yaml", {"09_finetune": {"move": ["broaden"]}})
    job = next(j for j in jobs if j.number == "09")
    other = next(j for j in jobs if j.number == "08")
    assert pipeline.torchrun_pass(job, load_config()) is None
    paper_like = load_config(overrides={"train": {"nproc_per_node": 4}})
    command = pipeline.torchrun_pass(job, paper_like)
    assert command[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", "-m",
                           "ratio_utils.train", "--params", "params/default.yaml", "--move", "broaden", "--no-tables"]
    assert pipeline.torchrun_pass(other, paper_like) is None

    params = tmp_path / "four.yaml"
    params.write_text(f"extends: {pipeline.REPO_ROOT / 'params' / 'default.yaml'}\ntrain:\n  nproc_per_node: 4\n"
                      "pipeline:\n  fanout:\n    09_x: {move: [broaden]}\n")
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    for name in ("08_y", "09_x"):
        _notebook(nbdir / f"{name}.ipynb", "params_file = ''")
    order = []
    monkeypatch.setattr(pipeline, "run_torchrun_pass",
                        lambda command, log: order.append(("torchrun", command[-3:], log.name)))
    monkeypatch.setattr(pipeline, "execute", lambda job, out_dir: order.append(("notebook", job.output_name)) or 1.0)
    monkeypatch.setattr(pipeline, "publish_executed", lambda executed, cfg: executed)
    assert pipeline.main(["--params", str(params), "--notebooks", str(nbdir), "--run-id", "t"]) == 0
    assert order == [("notebook", "08_y.ipynb"),
                     ("torchrun", ["--move", "broaden", "--no-tables"], "09_x__move=broaden.torchrun.log"),
                     ("notebook", "09_x__move=broaden.ipynb")]


def _unavailable_except_minilm(monkeypatch, tmp_path):
    """Resolution as on a machine with MiniLM only and no hub: every other model raises what resolve_model raises."""
    from ratio_utils import models
    from ratio_utils.models import availability

    real = models.resolve_model

    def resolve(spec, cache_dir=None, *, download=True):
        if models.model_key(str(spec)) == "all-minilm-l6-v2":
            return real(spec)
        entry = models.registry_entry(str(spec))
        hub_id = entry.hub_id if entry else spec
        raise models.ModelNotAvailableError(
            f"model {spec!r} ({hub_id}) is not available: not in the local Hugging Face cache. Ways to get it: "
            f"(1) `hf download {hub_id}`; (2) pass a local folder holding the model", model=str(spec),
            reason="not cached")

    monkeypatch.setattr(models, "resolve_model", resolve)
    monkeypatch.setattr(availability, "resolve_model", resolve)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "out"))


def test_a_params_file_naming_models_this_machine_cannot_get_stops_before_the_first_notebook(monkeypatch, tmp_path,
                                                                                             capsys):
    _unavailable_except_minilm(monkeypatch, tmp_path)
    monkeypatch.setattr(pipeline, "install_missing_models", lambda cfg, notebooks=None: None)
    monkeypatch.setattr(pipeline, "execute", lambda job, out_dir: pytest.fail("a notebook ran"))
    assert pipeline.main(["--params", "params/paper.yaml", "--run-id", "t"]) == 2
    err = capsys.readouterr().err.splitlines()
    wanted = ["all-mpnet-base-v2", "ModernBERT-embed-large", "Stella-en-1.5B-v5", "EmbeddingGemma-300m",
              "Qwen3-Embedding-0.6B", "ReasonIR-8B", "answerai-colbert-small-v1", "GTE-ModernColBERT-v1",
              "Reason-ModernColBERT"]
    assert err[0] == f"paper.yaml names {len(wanted)} model(s) this machine cannot get; nothing was run:"
    assert [line.split(": ")[1] for line in err[1:]] == wanted  # one line per model, in the params' order
    qwen = err[1 + wanted.index("Qwen3-Embedding-0.6B")]
    assert "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set" in qwen
    assert "To get it: (1) `hf download Qwen/Qwen3-Embedding-0.6B`" in qwen
    assert "python -m ratio_utils.models install embeddinggemma-300m" in err[1 + wanted.index("EmbeddingGemma-300m")]
    assert not (tmp_path / "out" / "runs").exists()

    # the same lines without running anything: --check-models (exit 2) and --list (its note on stderr, exit 0)
    assert pipeline.main(["--params", "params/paper.yaml", "--check-models"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == len(wanted)
    assert pipeline.main(["--params", "params/paper.yaml", "--list"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("00_corpus") and len(err.splitlines()) == len(wanted)

    # only the models of the notebooks that run: 00 loads none, 09 the bases of fine-tuning
    from ratio_utils.config import load_config

    paper = load_config("params/paper.yaml")
    assert pipeline.unavailable_models(paper, ["00", "05"]) == []
    assert [line.split(":")[0] for line in pipeline.unavailable_models(paper, ["09"])] == [
        "all-mpnet-base-v2", "ModernBERT-embed-large", "Stella-en-1.5B-v5"]


def test_a_model_the_hub_can_give_passes_the_preflight(monkeypatch, tmp_path):
    from ratio_utils.config import load_config
    from ratio_utils.models import availability

    _unavailable_except_minilm(monkeypatch, tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: True)
    assert pipeline.unavailable_models(load_config("params/paper.yaml")) == []  # the run downloads them
    assert pipeline.unavailable_models(load_config()) == []  # the default run needs MiniLM only
