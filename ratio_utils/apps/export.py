"""The benchmark in the formats other tools read (BEIR, TREC): `ratio-export --format beir|trec --move specify
--split test OUT/`. The formats and the conventions are ratio_utils.dataset.export's (docs/search.md, "Exports").

Reads: the benchmark, checked on load (ratio_utils.dataset.benchmark). Writes: OUT/ (default
data/processed/exports/<format>/; --move all adds <move>/), each folder swapped in whole. Errors are one line on
stderr, exit status 2 (ratio_utils.apps.cli).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..dataset.benchmark import benchmark_dir, load_benchmark
from ..dataset.export import FORMATS, export
from ..schema import MOVES, Move, Split
from .cli import add_allow_invalid_flag, add_debug_flag, one_line_errors, report_problems

PROG = "ratio-export"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.splitlines()[0] + " " + __doc__.splitlines()[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  ratio-export --format beir --move specify --split test exports/specify/")
    parser.add_argument("out", type=Path, nargs="?", default=None,
                        help="output folder (default: data/processed/exports/<format>/ of --params); --move all adds "
                             "<move>/. An existing folder is replaced only if it is empty or an export.")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, required=True, help="the format to write.")
    parser.add_argument("--move", default="all", help="address, broaden, specify or all (default: %(default)s).")
    parser.add_argument("--split", default="test", help="test (default), silver, validation or train.")
    parser.add_argument("--benchmark", type=Path, default=None,
                        help="benchmark folder (default: the rebuilt one of --params).")
    parser.add_argument("--params", default=None,
                        help="params file (default: params/default.yaml); read and checked whenever given.")
    add_allow_invalid_flag(parser)
    add_debug_flag(parser)
    return parser


@one_line_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bench = load_benchmark(benchmark_dir(args.benchmark, args.params), allow_invalid=args.allow_invalid)
    moves = list(MOVES) if args.move.strip().lower() == "all" else [Move.parse(args.move)]
    split = Split.parse(args.split)
    if args.out is None:
        from ..config import load_config

        out = load_config(args.params).paths.exports / args.fmt
    else:
        out = args.out
    for move in moves:
        target = out / move.value if len(moves) > 1 else out
        record = export(bench, move, split, target, args.fmt)
        print(f"{move.value}/{split.value}: {record['queries']} queries, {record['qrels']} qrels, "
              f"{record['pool']} candidates -> {target}")
    report_problems(PROG, bench.problems, "export.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
