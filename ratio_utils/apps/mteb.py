"""Score a model on the benchmark's MTEB tasks (one retrieval task per move): `ratio-mteb --model MODEL [--compare]`,
`--compare` also running `ratio_utils.evaluate` and printing the differences (ratio_utils.evaluation.mteb_tasks).

Every encoding goes through the project's embedding memo and cache (keyed by model fingerprint, prefix and texts
checksum): the test pool, shared by the three tasks and both splits, is encoded once per (model, prefix), and
`--compare`'s own evaluation reuses it.

Reads: the benchmark directory (checked on load: ratio_utils.dataset.benchmark) and the model. Writes: MTEB's result
files under --output (default: mteb_results/ under the working directory, never beside the benchmark;
`<output>/results/<model>/<revision>/<task>.json`, MTEB's layout), with --allow-invalid the benchmark rows left out in
`<output>/benchmark_problems.json`, the embedding cache; prints a table (or JSON). Errors (a missing or bad benchmark,
params or YAML file, a model that cannot be found) are one line on stderr, exit 2; the traceback only with --debug
(ratio_utils.apps.cli).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..dataset.benchmark import benchmark_dir, load_benchmark
from ..evaluation.metrics import PRIMARY_METRIC
from ..evaluation.mteb_tasks import (
    MAIN_SCORE,
    SCORE_NAMES,
    default_output,
    generic_prompts,
    mteb_model,
    mteb_scores,
    project_scores,
    ratio_tasks,
    side_by_side,
)
from ..evaluation.scoring import EvaluationError
from ..evaluation.stats import DAGGER, INDICATIVE_BELOW, format_ci
from ..io import write_json_atomic
from .cli import add_allow_invalid_flag, add_debug_flag, one_line_errors, report_problems

PROG = "ratio-mteb"
DESCRIPTION = ("Score a model on the benchmark's MTEB tasks, one retrieval task per move; --compare also runs "
               "ratio_utils.evaluate and prints the differences.")
EPILOG = """examples:
  ratio-mteb --model all-MiniLM-L6-v2 --compare
  ratio-mteb --model sentence-transformers/all-mpnet-base-v2 --benchmark data/processed/ratio --output mteb_results

Results are written in MTEB's format under --output; the task names carry the benchmark directory's id
(RatioAddress_<8 hex>) and the dataset revision a hash of the files each task reads."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="a local folder, a packaged or registry name (all-MiniLM-L6-v2) or a Hugging Face "
                             "hub id.")
    parser.add_argument("--benchmark", type=Path, default=None,
                        help="a directory in the release layout (default: the rebuilt benchmark of --params).")
    parser.add_argument("--params", default=None,
                        help="params file whose benchmark is evaluated (default params/default.yaml); read and "
                             "checked whenever given.")
    parser.add_argument("--stored-prompts", action="store_true",
                        help="use the model folder's stored prompts instead of the generic 'query: ' / 'document: '.")
    parser.add_argument("--instruction", action=argparse.BooleanOptionalAction, default=None,
                        help="put the move's instruction (the task's query prompt) after the query prompt "
                             "(default: when the model registry says the model takes one).")
    parser.add_argument("--compare", action="store_true",
                        help="also run ratio_utils.evaluate and print the differences.")
    parser.add_argument("--output", type=Path, default=None,
                        help="MTEB's results folder (default: mteb_results/ under the working directory).")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="embedding cache folder (default: $RATIO_EMBEDDING_CACHE, else "
                             "~/.cache/ratio/embeddings).")
    parser.add_argument("--no-cache", action="store_true", help="keep no embeddings on disk.")
    parser.add_argument("--batch-size", type=int, default=64, help="texts encoded per batch (default 64).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table.")
    add_allow_invalid_flag(parser)
    add_debug_flag(parser)
    return parser


def format_table(frame, compare: bool) -> str:
    """MTEB's scores (and, with --compare, the project's with n, 95 % intervals, † under 30 queries)."""
    import pandas as pd

    rows = []
    for record in frame.to_dict("records"):
        n = record.get("queries")
        row = {"move": record["move"], "split": record["split"],
               "n": "" if n is None or pd.isna(n) else f"{int(n)}{DAGGER if int(n) < INDICATIVE_BELOW else ''}"}
        for name in SCORE_NAMES:
            if compare:
                row[f"{name} MTEB"] = f"{record[f'{name} (MTEB)']:.2f}"
                row[f"{name} ratio [95% CI]"] = format_ci(record[f"{name} (ratio_utils)"] / 100,
                                                          record[f"{name} low"] / 100,
                                                          record[f"{name} high"] / 100, digits=2)
                row[f"{name} diff"] = f"{record[f'{name} difference']:+.2f}"
            else:
                row[name] = f"{record[name]:.2f}"
        rows.append(row)
    table = pd.DataFrame(rows).to_string(index=False)
    note = f"(percent; {DAGGER}: fewer than {INDICATIVE_BELOW} queries, indicative only"
    return table + "\n" + note + ("; intervals: 95 % bootstrap over queries)" if compare else ")")


@one_line_errors(PROG, expected=(EvaluationError, KeyError, TypeError))
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    benchmark = benchmark_dir(args.benchmark, args.params)
    bench = load_benchmark(benchmark, allow_invalid=args.allow_invalid)  # the tasks' rows, checked once for all
    cache_dir = False if args.no_cache else args.cache_dir
    prompts = None if args.stored_prompts else generic_prompts()
    tasks = ratio_tasks(bench)
    model = mteb_model(args.model, prompts, instruction=args.instruction, cache_dir=cache_dir,
                       batch_size=args.batch_size)
    output = args.output or default_output()
    frame = mteb_scores(model, tasks, batch_size=args.batch_size, output=output)
    if args.compare:
        used = {"query": model.query_prefix, "document": model.doc_prefix}
        frame = side_by_side(frame, project_scores(model.retriever.ref, benchmark, used, batch_size=args.batch_size,
                                                   instruction=model.instruction, cache_dir=cache_dir,
                                                   allow_invalid=args.allow_invalid))
    problems_file = None
    if args.allow_invalid:  # MTEB's files cannot hold them: a file of ours beside them says what the tasks left out
        problems_file = Path(output) / "benchmark_problems.json"
        write_json_atomic(problems_file, {"benchmark": str(Path(benchmark).resolve()),
                                          "benchmark_problems": bench.problem_records()})
    if args.json:
        print(json.dumps(frame.to_dict(orient="records"), indent=1))
    else:
        print(f"{args.model} on {benchmark}/ (primary metric {PRIMARY_METRIC}; MTEB main score {MAIN_SCORE})")
        print(format_table(frame, args.compare))
        print(f"MTEB results written under {output}")
    report_problems(PROG, bench.problems, str(problems_file) if problems_file else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
