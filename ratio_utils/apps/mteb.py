"""Score a model on the benchmark's MTEB tasks (one retrieval task per move): `ratio-mteb MODEL [--compare]`,
`--compare` also running `ratio_utils.evaluate` and printing the differences (ratio_utils.evaluation.mteb_tasks).

Reads: the benchmark directory. Writes: nothing (prints a table or JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import load_config
from ..evaluation.metrics import PRIMARY_METRIC
from ..evaluation.mteb_tasks import MAIN_SCORE, generic_prompts, mteb_model, mteb_scores, project_scores, ratio_tasks, side_by_side


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ratio-mteb", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a packaged model name (all-MiniLM-L6-v2) or a sentence-transformers folder")
    parser.add_argument("--benchmark", help="a directory in the release layout (default: the rebuilt benchmark of --params)")
    parser.add_argument("--params", default=None, help="params file whose benchmark is evaluated (default params/default.yaml)")
    parser.add_argument("--stored-prompts", action="store_true",
                        help="use the model folder's stored prompts instead of the generic 'query: ' / 'document: '")
    parser.add_argument("--compare", action="store_true", help="also run ratio_utils.evaluate and print the differences")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    benchmark = Path(args.benchmark) if args.benchmark else load_config(args.params).paths.benchmark
    prompts = None if args.stored_prompts else generic_prompts()
    tasks = ratio_tasks(benchmark)
    frame = mteb_scores(mteb_model(args.model, prompts), tasks, batch_size=args.batch_size)
    if args.compare:
        frame = side_by_side(frame, project_scores(args.model, benchmark, prompts, batch_size=args.batch_size))
    if args.json:
        print(json.dumps(frame.to_dict(orient="records"), indent=1))
    else:
        print(f"{args.model} on {benchmark.name}/ (primary metric {PRIMARY_METRIC}; MTEB main score {MAIN_SCORE})")
        print(frame.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
