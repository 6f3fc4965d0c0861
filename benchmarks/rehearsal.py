"""Rehearsal of the paper's setting (issue 17): notebooks 00-08 on a synthetic S2ORC release at several sizes.

    .venv/bin/python benchmarks/rehearsal.py [--base N] [--sizes 1 4 16] [--shard-sentences 50000]
        [--layout s2orc|s2orc_v2] [--notebooks 00 ... 08] [--sentences PATH] [--lexicon PATH] [--workdir DIR]
        [--reuse EARLIER/rehearsal.json] [--no-resume-check] [--no-issue-17-records]

For each size, `benchmarks/scale.py`'s generator writes a release in the real layout (`papers` + `s2orc` or
`s2orc_v2` shards, gzipped JSON records with `content.annotations` / `body.annotations` offsets) whose
paragraphs are recombined from the default run's sentence table (`--sentences`; a paragraph drawn again gets a
copy word in each sentence, so its pairs survive de-duplication), `size x --base` sentences of
selected papers (`--base` defaults to that table's row count, so 16x is about 5M sentences), plus papers of
another field, computer-science papers without a publication date, doubled paragraph spans, two bad
records per shard and (unless `--no-issue-17-records`) issue 17's two: a selected paper with `year: null`
and a paragraph with an escaped lone surrogate, which notebook 00 must quarantine, not stop on. The loopback stand-in
of the Datasets API and its bucket (tests/s2_stub.py) serves it, and `python -m ratio_utils.corpora.s2_api` downloads
it (the command notebook 00 names) with a fake `S2_API_KEY`. Each notebook then runs on its own through the pipeline
(`python -m ratio_utils.pipeline --only NN`) under a params file that extends params/rehearsal.yaml with the stub's
address and the layout, with RATIO_OUTPUT_ROOT the size's work folder and no LLM key. Per notebook: wall time, peak RSS
of the driver (the notebook's kernel) and of the largest Dask worker process (sampled every 0.2 s over the process
tree), and its rows in and out, counted in its input and output tables.

Resume check (smallest size, its own folder): notebook 00 and then notebook 05 are killed (the whole process
tree, SIGKILL) once their first part is written, and run again; a finished part whose files the rerun
rewrote was redone. Without 01-04 in `--notebooks`, notebook 05 mines with `--lexicon` (default: the default
run's lexicon).

`--reuse` adds the sizes an earlier run measured (its `rehearsal.json`, same base and layout) to the report, so
the sizes can be run one at a time (e.g. `--sizes 1 4`, then `--sizes 16 --reuse .../rehearsal.json`).

Printed: one Markdown table per size (a row per notebook), then the goals of issue 17, each marked met or
NOT MET: at the largest size every notebook's peak RSS <= 1.5x its peak at the second-largest (a stage
documented as global in docs/scale.md, `GLOBAL_STAGES`: its bytes per input row and the extrapolation to
the paper's corpus, < 350 GB); wall time per sentence within +-25% of the second-largest size's (for the
notebooks whose input grows with the corpus; with three sizes or more, also the seconds each added sentence
costs between the two largest against the two below, in which a fixed cost cancels); the resume checks. Everything
measured also goes to `<workdir>/rehearsal.json`. On a shared machine the times are noisy: say so when quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "benchmarks"), str(REPO_ROOT / "tests")]

from s2_stub import API_KEY, FakeS3AndApi  # noqa: E402  (tests/s2_stub.py)
from scale import ReleaseShape, TreeMemory, generate, paragraph_pool  # noqa: E402  (benchmarks/scale.py)

from ratio_utils.config import Config, load_config  # noqa: E402
from ratio_utils.io import write_json_atomic, write_text_atomic  # noqa: E402

NOTEBOOKS = ["00", "01", "02", "03", "04", "05", "06", "07", "08"]
PARAMS = REPO_ROOT / "params" / "rehearsal.yaml"
RELEASE = "2026-05-05"  # params/rehearsal.yaml's corpus.s2orc.release
# Stages docs/scale.md documents as holding all their rows in one process: judged by bytes per row instead.
GLOBAL_STAGES = {"06": "de-duplication, split and pools over all kept pairs and distractors (docs/scale.md, "
                       "notebook 06)"}
# The paper's corpus: 366.6M consecutive pairs at 0.93 pairs per sentence (docs/scale.md).
PAPER_SENTENCES = 394_000_000
RSS_RATIO_GOAL = 1.5
TIME_BAND_GOAL = 0.25
GLOBAL_GB_GOAL = 350
SHAPE = dict(first_date="2015-01-01", last_date=RELEASE, other_field_share=0.1, undated_share=0.05,
             duplicated_span_share=0.05, bad_records_per_shard=2, distinct_copies=True)  # fmt: skip

# The kernel papermill starts is the notebook's driver; Dask's LocalCluster starts its workers with
# multiprocessing's spawn (the resource tracker it also starts is not a worker).
ROLES = {
    "driver": lambda cmdline: any("ipykernel" in part for part in cmdline),
    "worker": lambda cmdline: any("spawn_main" in part for part in cmdline),
}


# --- rows in and out of each notebook ---------------------------------------------------------------------------


def _table_rows(path: Path) -> int | None:
    import polars as pl

    from ratio_utils.parts import scan_table

    try:
        return int(scan_table(path).select(pl.len()).collect().item())
    except FileNotFoundError:
        return None


def _csv_rows(path: Path) -> int | None:
    if not path.exists():
        return None
    import pandas as pd

    return len(pd.read_csv(path))


def _sum(*counts: int | None) -> int | None:
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _benchmark_rows(cfg: Config, splits: tuple[str, ...], pools: bool) -> int | None:
    from ratio_utils.dataset.benchmark import candidates_path, pairs_path
    from ratio_utils.schema import MOVES, POOL_SPLITS

    root = cfg.paths.benchmark
    counts = [_table_rows(pairs_path(root, move, split)) for move in MOVES for split in splits]
    if pools:
        counts += [_table_rows(candidates_path(root, split)) for split in POOL_SPLITS]
    return _sum(*counts)


def _test_pool_rows(cfg: Config) -> int | None:
    from ratio_utils.dataset.benchmark import candidates_path

    return _table_rows(candidates_path(cfg.paths.benchmark, "test"))


def _records_read(cfg: Config) -> int | None:
    if not cfg.paths.corpus_report.exists():
        return None
    counts = json.loads(cfg.paths.corpus_report.read_text()).get("reader_counts", {}).get("s2orc", {})
    return _sum(counts.get("s2orc_records"), counts.get("papers_records"))


def _run_rows(cfg: Config) -> int | None:
    import polars as pl

    files = [str(p) for p in cfg.paths.retrieval_runs.rglob("*.parquet")]
    return int(pl.scan_parquet(files).select(pl.len()).collect().item()) if files else None


COUNTERS = {
    "records (papers + full text)": _records_read,
    "sentences": lambda cfg: _table_rows(cfg.paths.sentences),
    "lexicon": lambda cfg: _table_rows(cfg.paths.final_lexicon),
    "span status": lambda cfg: _csv_rows(cfg.paths.span_status),
    "extensions": lambda cfg: _table_rows(cfg.paths.marker_extensions),
    "LLM labels": lambda cfg: _table_rows(cfg.paths.llm_markers("labels")),
    "pairs+distractors": lambda cfg: _sum(_table_rows(cfg.paths.pairs), _table_rows(cfg.paths.distractors)),
    "benchmark": lambda cfg: _benchmark_rows(cfg, ("train", "validation", "test"), pools=True),
    "test pairs": lambda cfg: _benchmark_rows(cfg, ("test",), pools=False),
    "silver pairs": lambda cfg: _benchmark_rows(cfg, ("silver",), pools=False),
    "test pool": _test_pool_rows,
    "run rows": _run_rows,
}
STAGE_ROWS = {  # notebook: (what goes in, counted before it runs; what comes out, counted after)
    "00": ("records (papers + full text)", "sentences"), "01": ("sentences", "span status"),
    "02": ("sentences", "extensions"),
    "03": ("lexicon", "LLM labels"), "04": ("lexicon", "lexicon"), "05": ("sentences", "pairs+distractors"),
    "06": ("pairs+distractors", "benchmark"), "07": ("test pairs", "silver pairs"), "08": ("test pool", "run rows"),
}  # fmt: skip


# --- one notebook, measured -------------------------------------------------------------------------------------


@dataclass
class Measured:
    notebook: str
    wall_s: float
    driver_mb: float
    worker_mb: float
    tree_mb: float
    returncode: int
    rows_in: int | None = None
    rows_out: int | None = None
    log: str = ""
    killed: bool = False


def child_env(output_root: Path, api_key: bool = False) -> dict[str, str]:
    """The environment of the pipeline and download processes: this checkout's code, the size's output root,
    no LLM key (nothing leaves the machine), the stub's key only for the download."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "S2_API_KEY")}
    env |= {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "RATIO_OUTPUT_ROOT": str(output_root), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    if api_key:
        env["S2_API_KEY"] = API_KEY
    return env


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (the kernel, the Dask nannies' workers), as a crash would."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [root, *root.children(recursive=True)]
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def run_measured(command: list[str], env: dict, log: Path, label: str, kill_when=None,
                 roles: dict = ROLES) -> Measured:
    """Run `command`, sampling its process tree (`roles`: which processes are the driver and the workers);
    with `kill_when` (a no-argument predicate, polled every 0.05 s) kill the tree as soon as it holds."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        killed = False
        with TreeMemory(interval=0.2, pid=proc.pid, roles=roles) as memory:
            while proc.poll() is None:
                if kill_when is not None and kill_when():
                    kill_tree(proc.pid)
                    killed = True
                    break
                time.sleep(0.05)
            code = proc.wait()
        wall = time.perf_counter() - started
    mb = 2**20
    return Measured(label, wall, memory.peak_role["driver"] / mb, memory.peak_role["worker"] / mb,
                    memory.peak_tree / mb, code, log=str(log), killed=killed)


def pipeline_command(params_file: Path, notebook: str, run_id: str) -> list[str]:
    return [sys.executable, "-m", "ratio_utils.pipeline", "--params", str(params_file), "--only", notebook, "--run-id",
            run_id]


def run_notebook(params_file: Path, notebook: str, kill_when=None, run_id: str | None = None) -> Measured:
    cfg = load_config(params_file)
    output_root = cfg.paths.root
    rows_in_name, rows_out_name = STAGE_ROWS[notebook]
    rows_in = COUNTERS[rows_in_name](cfg) if notebook != "00" else None
    run_id = run_id or f"rehearsal-{notebook}"
    measured = run_measured(pipeline_command(params_file, notebook, run_id), child_env(output_root),
                            output_root / "logs" / f"{run_id}.log", notebook, kill_when)
    if notebook == "00":
        rows_in = COUNTERS[rows_in_name](cfg)  # the records 00 read, from its report
    measured.rows_in, measured.rows_out = rows_in, COUNTERS[rows_out_name](cfg)
    return measured


# --- one size: release, download, notebooks --------------------------------------------------------------------


def write_params(folder: Path, api_base_url: str, layout: str) -> Path:
    """The run's params file: params/rehearsal.yaml with the stub's address, the release layout and the
    run's output root (`folder/out`, also RATIO_OUTPUT_ROOT of its processes)."""
    params = {"extends": str(PARAMS), "name": "rehearsal", "output_root": str(folder / "out"),
              "corpus": {"s2orc": {"api_base_url": api_base_url, "datasets": [layout, "papers"]}}}
    return write_text_atomic(folder / "rehearsal.yaml", yaml.safe_dump(params, sort_keys=False))


def serve_release(release: Path, stub: FakeS3AndApi) -> None:
    """Put every shard of `release/<dataset>/` in the stub's bucket (`/bucket/<dataset>/<name>`)."""
    for shard in sorted(release.glob("*/*.gz")):
        stub.files[f"/bucket/{shard.parent.name}/{shard.name}"] = shard.read_bytes()


def download(params_file: Path) -> Measured:
    """Notebook 00's download path: `python -m ratio_utils.corpora.s2_api` against the stub."""
    output_root = load_config(params_file).paths.root
    command = [sys.executable, "-m", "ratio_utils.corpora.s2_api", "--params", str(params_file)]
    measured = run_measured(command, child_env(output_root, api_key=True), output_root / "logs" / "download.log",
                            "download", roles={"driver": lambda cmdline: True, "worker": lambda cmdline: False})
    if measured.returncode != 0:
        raise RuntimeError(f"the download failed ({measured.returncode}); see {measured.log}")
    return measured


def seed_lexicon(cfg: Config, lexicon: Path) -> None:
    """Notebooks 01-04 not run: notebook 05 mines with this lexicon (and its report, when it has one)."""
    cfg.paths.final_lexicon.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(lexicon, cfg.paths.final_lexicon)
    report = lexicon.with_name(f"{lexicon.stem}.report.json")
    if report.exists():
        shutil.copy(report, cfg.paths.final_lexicon.with_name(report.name))


@dataclass
class SizeResult:
    size: int
    made: dict
    download: Measured
    notebooks: list[Measured] = field(default_factory=list)
    sentences: int | None = None


def earlier_sizes(path: Path, base: int, layout: str) -> list[SizeResult]:
    """The sizes an earlier run measured (its rehearsal.json), so that one size can be run at a time; an earlier
    run on another base or layout measured another corpus and is refused."""
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if (earlier["base"], earlier["layout"]) != (base, layout):
        raise SystemExit(f"{path}: measured base {earlier['base']} / layout {earlier['layout']}, "
                         f"not {base} / {layout}")
    return [SizeResult(**{**r, "download": Measured(**r["download"]),
                          "notebooks": [Measured(**m) for m in r["notebooks"]]})
            for r in earlier["sizes"]]


def run_size(size: int, base: int, args, pool) -> SizeResult:
    folder = (args.workdir / f"{size}x").resolve()
    if folder.exists():
        shutil.rmtree(folder)
    shape = ReleaseShape(text_dataset=args.layout, issue_17_records=args.issue_17_records, **SHAPE)
    made = generate(folder / "release", size * base, args.shard_sentences, pool, shape=shape)
    print(f"{size}x: generated {made}", file=sys.stderr)
    with FakeS3AndApi() as stub:
        serve_release(folder / "release", stub)
        params_file = write_params(folder, f"{stub.base}/datasets/v1", args.layout)
        result = SizeResult(size, made, download(params_file))
    if not {"01", "02", "03", "04"} & set(args.notebooks):
        seed_lexicon(load_config(params_file), args.lexicon)
    for notebook in args.notebooks:
        measured = run_notebook(params_file, notebook)
        result.notebooks.append(measured)
        print(f"{size}x {notebook}: {measured.wall_s:.1f} s, rc {measured.returncode}", file=sys.stderr)
        if measured.returncode != 0:
            print(f"{size}x {notebook} FAILED: {measured.log}", file=sys.stderr)
            break  # the later notebooks read its outputs
    result.sentences = _table_rows(load_config(params_file).paths.sentences)
    return result


# --- resume: killed during 00 and during 05 --------------------------------------------------------------------------


def _stamps(paths) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of each file: an atomic rewrite (temp + rename) changes both."""
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths if p.exists()}


def _corpus_finished(cfg: Config) -> list[Path]:
    """Report, sentences and papers files of the parts whose report (written last) exists."""
    from ratio_utils.parts import part_path

    files = []
    for report in sorted(cfg.paths.corpus_parts.glob("part-*.json")):
        index = int(report.stem.split("-")[1])
        files += [report, part_path(cfg.paths.sentences, index), part_path(cfg.paths.papers, index)]
    return files


def _mining_finished(cfg: Config) -> list[Path]:
    """Report, pairs and distractors files of the sentence parts whose report (written last) exists."""
    from ratio_utils.parts import part_path

    files = []
    for report in sorted(cfg.paths.mining_parts.glob("part-*.json")):
        index = int(report.stem.split("-")[1])
        files += [report, part_path(cfg.paths.pairs, index), part_path(cfg.paths.distractors, index)]
    return files


def resume_check(notebook: str, params_file: Path, finished) -> dict:
    """Kill `notebook` once its first part is finished, rerun it, and compare the finished parts' files."""
    cfg = load_config(params_file)
    before = _stamps(finished(cfg))  # parts left by an earlier run (none on a fresh folder)
    killed = run_notebook(params_file, notebook, run_id=f"resume-{notebook}-killed",
                          kill_when=lambda: len(_stamps(finished(cfg))) > len(before))
    done = _stamps(finished(cfg))
    rerun = run_notebook(params_file, notebook, run_id=f"resume-{notebook}-rerun")
    after = _stamps(finished(cfg))
    redone = sorted(f"{Path(p).parent.name}/{Path(p).name}" for p, stamp in done.items() if after.get(p) != stamp)
    check = {"notebook": notebook, "killed": killed.killed, "killed_after_s": round(killed.wall_s, 1),
             "finished_files_at_kill": len(done), "redone_files": redone, "rerun_returncode": rerun.returncode,
             "rerun_s": round(rerun.wall_s, 1), "files_after_rerun": len(after)}  # fmt: skip
    if notebook == "00" and cfg.paths.corpus_report.exists():
        check["corpus_report_parts"] = json.loads(cfg.paths.corpus_report.read_text()).get("parts")
    if not killed.killed:
        check["verdict"] = "inconclusive: the run ended before its first part was written"
    elif rerun.returncode != 0:
        check["verdict"] = f"NOT MET: the rerun failed ({rerun.log})"
    else:
        check["verdict"] = "met" if not redone else f"NOT MET: {len(redone)} of {len(done)} finished files rewritten"
    return check


def run_resume_checks(smallest: SizeResult, args) -> list[dict]:
    source = (args.workdir / f"{smallest.size}x").resolve()
    folder = (args.workdir / "resume").resolve()
    if folder.exists():
        shutil.rmtree(folder)
    # the shards are copied, not downloaded
    params_file = write_params(folder, "http://127.0.0.1:9/unused", args.layout)
    cfg, measured_cfg = load_config(params_file), load_config(source / "rehearsal.yaml")
    shutil.copytree(measured_cfg.paths.downloads, cfg.paths.downloads)
    checks = [resume_check("00", params_file, _corpus_finished)]
    lexicon = measured_cfg.paths.final_lexicon if measured_cfg.paths.final_lexicon.exists() else args.lexicon
    seed_lexicon(cfg, Path(lexicon))
    checks.append(resume_check("05", params_file, _mining_finished))
    return checks


# --- the tables and the goals ---------------------------------------------------------------------------------------


def _n(value) -> str:
    return "-" if value is None else f"{value:,}"


def size_table(result: SizeResult) -> str:
    sentences = result.sentences or 0
    lines = [f"**{result.size}x**: {_n(result.sentences)} sentences, {result.made['shards']} shards, "
             f"{result.made['papers']:,} papers",
             "", "| notebook | wall s | s per 100K sentences | driver peak MB | largest worker MB | tree peak MB | "
                 "rows in | rows out | status |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in [result.download, *result.notebooks]:
        rows_in, rows_out = STAGE_ROWS.get(m.notebook, ("", ""))
        per = f"{100_000 * m.wall_s / sentences:.1f}" if sentences else "-"
        worker = f"{m.worker_mb:.0f}" if m.worker_mb else "-"
        status = "ok" if m.returncode == 0 else f"FAILED ({m.returncode})"
        lines.append(f"| {m.notebook} | {m.wall_s:.1f} | {per} | {m.driver_mb:.0f} | {worker} | {m.tree_mb:.0f} "
                     f"| {_n(m.rows_in)} {rows_in} | {_n(m.rows_out)} {rows_out} | {status} |")
    return "\n".join(lines)


def _peak(m: Measured) -> float:
    return max(m.driver_mb, m.worker_mb)


def goals(results: list[SizeResult], resume: list[dict]) -> list[str]:
    lines = []
    if len(results) < 2:
        lines.append("memory and time goals: need two sizes (the largest is compared with the second-largest)")
    else:
        small, large = results[-2], results[-1]
        by_small = {m.notebook: m for m in small.notebooks if m.returncode == 0}
        for m in large.notebooks:
            s = by_small.get(m.notebook)
            if m.returncode != 0 or s is None:
                lines.append(f"{m.notebook}: NOT MET: failed at {large.size if m.returncode else small.size}x")
                continue
            lines.append(memory_goal(m, s, large, small))
            lines.append(time_goal(m, s, large, small))
            if len(results) >= 3:
                smallest = {n.notebook: n for n in results[-3].notebooks if n.returncode == 0}.get(m.notebook)
                if smallest is not None:
                    lines.append(marginal_time(m, s, smallest, large, small, results[-3]))
        total = lambda r: sum(m.wall_s for m in r.notebooks)  # noqa: E731
        if small.sentences and large.sentences and len(small.notebooks) == len(large.notebooks):
            ratio = (total(large) / large.sentences) / (total(small) / small.sentences)
            lines.append(f"all notebooks: wall time per sentence {large.size}x / {small.size}x = {ratio:.2f} "
                         f"({_verdict(abs(ratio - 1) <= TIME_BAND_GOAL)}, goal within +-{TIME_BAND_GOAL:.0%})")
    for check in resume:
        lines.append(f"resume during {check['notebook']}: {check['verdict']} (killed after {check['killed_after_s']} "
                     f"s with {check['finished_files_at_kill']} finished part files; rerun {check['rerun_s']} s)")
    return lines


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def memory_goal(m: Measured, s: Measured, large: SizeResult, small: SizeResult) -> str:
    ratio = _peak(m) / _peak(s)
    if m.notebook not in GLOBAL_STAGES:
        return (f"{m.notebook}: peak RSS {large.size}x / {small.size}x = {_peak(m):.0f} / {_peak(s):.0f} MB = "
                f"{ratio:.2f} ({_verdict(ratio <= RSS_RATIO_GOAL)}, goal <= {RSS_RATIO_GOAL})")
    # A global stage: what each more row of input costs (growth between the two sizes), carried to the paper's rows.
    grown = (m.rows_in or 0) - (s.rows_in or 0)
    per_row = max(_peak(m) - _peak(s), 0.0) * 2**20 / grown if grown > 0 else float("nan")
    paper_rows = (m.rows_in or 0) * PAPER_SENTENCES / large.sentences if large.sentences else float("nan")
    paper_gb = (_peak(m) * 2**20 + per_row * (paper_rows - (m.rows_in or 0))) / 1e9
    return (f"{m.notebook} (global: {GLOBAL_STAGES[m.notebook]}): {per_row:,.0f} bytes per input row "
            f"({_peak(s):.0f} -> {_peak(m):.0f} MB for {_n(s.rows_in)} -> {_n(m.rows_in)} rows); at the paper's "
            f"{paper_rows / 1e6:,.1f}M rows about {paper_gb:,.0f} GB ({_verdict(paper_gb < GLOBAL_GB_GOAL)}, "
            f"goal < {GLOBAL_GB_GOAL} GB)")


def time_goal(m: Measured, s: Measured, large: SizeResult, small: SizeResult) -> str:
    if not (m.rows_in and s.rows_in and m.rows_in > s.rows_in):
        return f"{m.notebook}: time per sentence: n/a (its input, {_n(m.rows_in)} rows, does not grow with the corpus)"
    ratio = (m.wall_s / large.sentences) / (s.wall_s / small.sentences)
    return (f"{m.notebook}: wall time per sentence {large.size}x / {small.size}x = {ratio:.2f} "
            f"({_verdict(abs(ratio - 1) <= TIME_BAND_GOAL)}, goal within +-{TIME_BAND_GOAL:.0%})")


def marginal_time(m: Measured, s: Measured, t: Measured, large: SizeResult, small: SizeResult,
                  tiny: SizeResult) -> str:
    """Seconds each added sentence costs from the second-largest size to the largest, against the same from the
    third-largest to the second: a fixed cost (kernel start, imports, model load) cancels in both, so this tells a
    stage whose time grows faster than its input from one whose time per sentence only falls as its fixed cost
    is spread thinner (which the per-sentence ratio reads as NOT MET)."""
    if not (large.sentences and small.sentences and tiny.sentences and m.rows_in and s.rows_in and t.rows_in
            and m.rows_in > s.rows_in > t.rows_in):
        return f"{m.notebook}: marginal time per sentence: n/a"
    upper = (m.wall_s - s.wall_s) / (large.sentences - small.sentences)
    lower = (s.wall_s - t.wall_s) / (small.sentences - tiny.sentences)
    ratio = upper / lower if lower > 0 else float("nan")
    return (f"{m.notebook}: marginal time per sentence {small.size}x->{large.size}x / {tiny.size}x->{small.size}x = "
            f"{1e6 * upper:.1f} / {1e6 * lower:.1f} us = {ratio:.2f} (fixed cost cancelled; "
            f"within +-{TIME_BAND_GOAL:.0%}: {'yes' if abs(ratio - 1) <= TIME_BAND_GOAL else 'no'})")


def report(results: list[SizeResult], resume: list[dict]) -> str:
    parts = [size_table(r) for r in results]
    parts.append("\n".join(["Goals (issue 17):", *[f"- {line}" for line in goals(results, resume)]]))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=None, help="sentences at 1x (default: the rows of --sentences)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--shard-sentences", type=int, default=50_000)
    parser.add_argument("--layout", choices=["s2orc", "s2orc_v2"], default="s2orc")
    parser.add_argument("--notebooks", nargs="+", default=NOTEBOOKS, choices=NOTEBOOKS)
    parser.add_argument("--sentences", type=Path, default=None,
                        help="sentence table to recombine (default: the default run's)")
    parser.add_argument("--lexicon", type=Path, default=None,
                        help="lexicon when 01-04 are not run (default: the default run's)")
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "build" / "rehearsal")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="rehearsal.json of an earlier run (same base and layout): its sizes not in --sizes join "
                             "the report")
    parser.add_argument("--no-resume-check", dest="resume", action="store_false")
    parser.add_argument("--issue-17-records", action=argparse.BooleanOptionalAction, default=True,
                        help="add, per shard, a selected paper with year null and a paragraph with a lone surrogate "
                             "(notebook 00 quarantines both; default on)")
    args = parser.parse_args(argv)
    os.environ.pop("RATIO_OUTPUT_ROOT", None)  # each run's params file names its own output root
    default = load_config()
    args.sentences = args.sentences or default.paths.sentences
    args.lexicon = Path(args.lexicon or default.paths.final_lexicon).resolve()
    if not Path(args.sentences).exists():
        raise SystemExit(f"{args.sentences} not found: run the default notebooks 00-04 first, or pass --sentences")
    args.sizes = sorted(set(args.sizes))
    args.notebooks = sorted(set(args.notebooks))
    base = args.base or _table_rows(Path(args.sentences))
    pool = paragraph_pool(Path(args.sentences))
    earlier = earlier_sizes(args.reuse, base, args.layout) if args.reuse else []  # read first: refused before any run
    measured = [run_size(size, base, args, pool) for size in args.sizes]
    resume = run_resume_checks(measured[0], args) if args.resume and {"00", "05"} <= set(args.notebooks) else []
    results = sorted(measured + [r for r in earlier if r.size not in args.sizes], key=lambda r: r.size)
    text = report(results, resume)
    write_json_atomic(args.workdir / "rehearsal.json", {"base": base, "layout": args.layout, "resume": resume,
                                                        "sizes": [asdict(r) for r in results]})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
