"""The benchmark in the formats other tools read (BEIR, TREC): `ratio-export --format beir|trec --move specify
--split test OUT/`. The formats and the conventions are ratio_utils.dataset.export's (docs/search.md, "Exports").

Reads: the benchmark. Writes: OUT/ (default data/processed/exports/<format>/<move>/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import load_config
from ..dataset.benchmark import load_benchmark
from ..dataset.export import FORMATS, export
from ..schema import MOVES, Move, Split


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratio-export", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  ratio-export --format beir --move specify --split test exports/specify/")
    parser.add_argument("out", type=Path, nargs="?", default=None,
                        help="output folder (default: data/processed/exports/<format>/); --move all adds <move>/")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, required=True)
    parser.add_argument("--move", default="all", help="address, broaden, specify or all (default: %(default)s)")
    parser.add_argument("--split", default="test", help="test (default), silver, validation or train")
    parser.add_argument("--benchmark", type=Path, default=None, help="benchmark folder (default: the one of --params)")
    parser.add_argument("--params", default=None, help="params file (default: params/default.yaml)")
    args = parser.parse_args(argv)
    cfg = load_config(args.params)
    try:
        bench = load_benchmark(args.benchmark or cfg.paths.benchmark)
        moves = list(MOVES) if args.move.strip().lower() == "all" else [Move.parse(args.move)]
        split = Split.parse(args.split)
        out = args.out or cfg.paths.exports / args.fmt
        for move in moves:
            target = out / move.value if len(moves) > 1 else out
            record = export(bench, move, split, target, args.fmt)
            print(f"{move.value}/{split.value}: {record['queries']} queries, {record['qrels']} qrels, "
                  f"{record['pool']} candidates -> {target}")
    except (FileNotFoundError, ValueError) as exc:
        print(f"ratio-export: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
